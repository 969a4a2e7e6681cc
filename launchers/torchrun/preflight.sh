#!/usr/bin/env bash
# rankcheck as a node-level step before torchrun, with torchrun's own arguments:
#
#   preflight.sh --nnodes 2 --nproc-per-node 8 --node-rank 0 \
#                --master-addr node01 --master-port 29500 train.py --epochs 3
#
# It reads --nnodes, --nproc-per-node, --node-rank, --master-addr and --master-port
# (dashes or underscores, "--opt value" or "--opt=value"), runs
#
#   rankcheck run --nnodes N --nproc-per-node P --node-rank R --master-addr A --master-port M $RANKCHECK_ARGS
#
# on this node (one probe standing for its P ranks, driving its P GPUs), and only
# when the whole job passes does it exec torchrun with the arguments unchanged.
# Otherwise it exits with rankcheck's exit code and torchrun never starts.
#
# Environment: RANKCHECK (the binary, default: rankcheck), TORCHRUN (default:
# torchrun), RANKCHECK_ARGS (extra rankcheck options, e.g. "--timeout 120
# --json /shared/rankcheck-{host}.json"). A node rank from the environment
# (NODE_RANK, PET_NODE_RANK, JOB_COMPLETION_INDEX) is used when --node-rank is absent.
set -u

# --help: the usage above (torchrun's own: torchrun --help), from this file's opening comment.
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -nE '1d; /^#SBATCH|^[^#]|^$/q; s/^# ?//p' "$0"
  exit 0
fi

rankcheck=${RANKCHECK:-rankcheck}
torchrun=${TORCHRUN:-torchrun}
nnodes="" nproc="" node_rank="" master_addr="" master_port="" standalone=0

args=("$@")
i=0
while (( i < ${#args[@]} )); do
  a=${args[i]}
  [[ "$a" == --* || "$a" == -m ]] || break   # the training script: torchrun's options end here
  name=${a%%=*}
  name=${name//_/-}
  if [[ "$a" == *=* ]]; then value=${a#*=}; has_value=1; else value=${args[i+1]:-}; has_value=0; fi
  case "$name" in
    --standalone) standalone=1; i=$((i + 1)); continue ;;
    --no-python|-m|--module|--run-path) i=$((i + 1)); continue ;;
    --nnodes) nnodes=$value ;;
    --nproc-per-node) nproc=$value ;;
    --node-rank) node_rank=$value ;;
    --master-addr) master_addr=$value ;;
    --master-port) master_port=$value ;;
  esac
  i=$((i + (has_value ? 1 : 2)))
done

die() { echo "preflight: $*" >&2; exit 2; }
if (( standalone )); then
  nnodes=${nnodes:-1} node_rank=0 master_addr=127.0.0.1
fi
[[ -n "$nproc" ]] || die "needs --nproc-per-node (a number of ranks per node)"
[[ "$nproc" =~ ^[0-9]+$ ]] || die "--nproc-per-node $nproc: give the number of GPUs per node, not '$nproc'"
nnodes=${nnodes:-1}
[[ "$nnodes" =~ ^[0-9]+$ ]] || die "--nnodes $nnodes: an elastic range cannot be checked before the job; give a fixed number"

cmd=("$rankcheck" run --nnodes "$nnodes" --nproc-per-node "$nproc")
[[ -n "$node_rank" ]] && cmd+=(--node-rank "$node_rank")
[[ -n "$master_addr" ]] && cmd+=(--master-addr "$master_addr")
[[ -n "$master_port" ]] && cmd+=(--master-port "$master_port")
# shellcheck disable=SC2206  # RANKCHECK_ARGS is a list of options, split on purpose
cmd+=(${RANKCHECK_ARGS:-})

"${cmd[@]}"
rc=$?
if (( rc != 0 )); then
  echo "preflight: rankcheck failed with exit $rc: torchrun not started" >&2
  exit "$rc"
fi
exec "$torchrun" "$@"
