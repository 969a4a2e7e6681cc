#!/usr/bin/env bash
# rankcheck as a node-level step before torchrun, with torchrun's own arguments:
#
#   preflight.sh --nnodes 2 --nproc_per_node 8 --node_rank 0 \
#                --master_addr node01 --master_port 29500 train.py --epochs 3
#
# It reads --nnodes, --nproc-per-node, --node-rank, --master-addr and --master-port
# (dashes or underscores, "--opt value" or "--opt=value"), runs
#
#   rankcheck run --nnodes N --nproc-per-node P --node-rank R --master-addr A --master-port M $RANKCHECK_ARGS
#
# on this node (one probe standing for its P ranks, driving its P GPUs), and only
# when the whole job passes does it exec torchrun, with the values it checked:
# torchrun gets its arguments as given, and before them, as torchrun's own flags
# (--nnodes, --nproc_per_node, --node_rank, --master_addr, --master_port), each
# value it checked that the arguments do not give. Otherwise it exits with
# rankcheck's exit code and torchrun never starts.
#
# A value not among the arguments comes from the environment, from what torchrun
# reads (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR,
# PET_MASTER_PORT) or what launchers set (NODE_RANK, JOB_COMPLETION_INDEX,
# MASTER_ADDR, MASTER_PORT); else it is torchrun's default (1 node, node rank 0,
# 127.0.0.1:29500) where that can be right: a job of several nodes needs a node rank
# and a master address. An option given twice with two values, or two variables
# that disagree, is refused (exit 2) with both values.
#
# Environment: RANKCHECK (the binary, default: rankcheck), TORCHRUN (default:
# torchrun), RANKCHECK_ARGS (extra rankcheck options, e.g. "--timeout 120
# --json /shared/rankcheck-{host}.json").
set -u

# --help: the usage above (torchrun's own: torchrun --help), from this file's opening comment.
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -nE '1d; /^#SBATCH|^[^#]|^$/q; s/^# ?//p' "$0"
  exit 0
fi

rankcheck=${RANKCHECK:-rankcheck}
torchrun=${TORCHRUN:-torchrun}
standalone=0 rdzv_backend=""
die() { echo "preflight: $*" >&2; exit 2; }

# The five options, by their dashed names: the value given, and how it was written.
declare -A given=() written=()
take() {  # $1: option (dashed), $2: value, $3: as the user wrote it
  if [[ -n ${given[$1]+x} && ${given[$1]} != "$2" ]]; then
    die "${written[$1]} ${given[$1]} and $3 $2: give $1 once"
  fi
  given[$1]=$2 written[$1]=$3
}

args=("$@")
i=0
while (( i < ${#args[@]} )); do
  a=${args[i]}
  [[ "$a" == --* || "$a" == -m ]] || break   # the training script: torchrun's options end here
  written_name=${a%%=*}
  name=${written_name//_/-}
  if [[ "$a" == *=* ]]; then value=${a#*=}; has_value=1; else value=${args[i+1]:-}; has_value=0; fi
  case "$name" in
    --standalone) standalone=1; i=$((i + 1)); continue ;;
    --no-python|-m|--module|--run-path) i=$((i + 1)); continue ;;
    --nnodes|--nproc-per-node|--node-rank|--master-addr|--master-port)
      take "$name" "$value" "$written_name" ;;
    --rdzv-backend) rdzv_backend=$value ;;
  esac
  i=$((i + (has_value ? 1 : 2)))
done

# What the environment says where the arguments are silent: the first variable set,
# and every other one set must agree with it.
from_env() {  # $1: option (dashed); the variables, in order
  local opt=$1 var first=""
  shift
  for var in "$@"; do
    [[ -n ${!var:-} ]] || continue
    if [[ -z $first ]]; then
      first=$var
    elif [[ ${!var} != "${!first}" ]]; then
      die "$first=${!first} but $var=${!var}: which is meant? give $opt"
    fi
  done
  [[ -n $first ]] && echo "${!first}"
  return 0
}
value_of() {  # $1: option (dashed), then the variables
  if [[ -n ${given[$1]+x} ]]; then echo "${given[$1]}"; else from_env "$@"; fi
}

nnodes=$(value_of --nnodes PET_NNODES) || exit 2
nproc=$(value_of --nproc-per-node PET_NPROC_PER_NODE) || exit 2
node_rank=$(value_of --node-rank PET_NODE_RANK NODE_RANK JOB_COMPLETION_INDEX) || exit 2
master_addr=$(value_of --master-addr PET_MASTER_ADDR MASTER_ADDR) || exit 2
master_port=$(value_of --master-port PET_MASTER_PORT MASTER_PORT) || exit 2

if (( standalone )); then
  nnodes=${nnodes:-1} node_rank=0 master_addr=127.0.0.1
fi
[[ -n "$nproc" ]] || die "needs --nproc-per-node (a number of ranks per node)"
[[ "$nproc" =~ ^[0-9]+$ ]] || die "--nproc-per-node $nproc: give the number of GPUs per node, not '$nproc'"
nnodes=${nnodes:-1}
[[ "$nnodes" =~ ^[0-9]+$ ]] || die "--nnodes $nnodes: an elastic range cannot be checked before the job; give a fixed number"
# torchrun's defaults hold for one node; on several, two agents at node rank 0, or
# each at its own 127.0.0.1, wait for each other until killed.
if [[ -z $node_rank ]]; then
  ((nnodes == 1)) || die "--nnodes $nnodes: needs this node's rank (--node-rank, or PET_NODE_RANK," \
    "NODE_RANK or JOB_COMPLETION_INDEX): without one every node is node 0"
  node_rank=0
fi
if ! [[ $node_rank =~ ^[0-9]+$ ]] || ((node_rank >= nnodes)); then
  die "--node-rank $node_rank: give a number from 0 to $((nnodes - 1))"
fi
if [[ -z $master_addr ]]; then
  ((nnodes == 1)) || die "--nnodes $nnodes: needs the address of node 0 (--master-addr, or" \
    "PET_MASTER_ADDR or MASTER_ADDR): torchrun's default, 127.0.0.1, is every node's own"
  master_addr=127.0.0.1
fi
master_port=${master_port:-29500}
if ! [[ $master_port =~ ^[0-9]+$ ]] || ((master_port < 1 || master_port > 65535)); then
  die "--master-port $master_port: give a port number (1-65535)"
fi

cmd=("$rankcheck" run --nnodes "$nnodes" --nproc-per-node "$nproc" --node-rank "$node_rank"
     --master-addr "$master_addr" --master-port "$master_port")
# shellcheck disable=SC2206  # RANKCHECK_ARGS is a list of options, split on purpose
cmd+=(${RANKCHECK_ARGS:-})

"${cmd[@]}"
rc=$?
if (( rc != 0 )); then
  echo "preflight: rankcheck failed with exit $rc: torchrun not started" >&2
  exit "$rc"
fi

# torchrun reads its flags (or PET_*), not NODE_RANK, JOB_COMPLETION_INDEX or
# MASTER_ADDR: the values checked go with it, in the spelling every torchrun takes.
# --standalone and a c10d rendezvous choose their own rendezvous: nothing is added.
checked=()
if (( !standalone )) && [[ -z $rdzv_backend || $rdzv_backend == static ]]; then
  [[ -n ${given[--nnodes]+x} ]] || checked+=(--nnodes "$nnodes")
  [[ -n ${given[--nproc-per-node]+x} ]] || checked+=(--nproc_per_node "$nproc")
  [[ -n ${given[--node-rank]+x} ]] || checked+=(--node_rank "$node_rank")
  [[ -n ${given[--master-addr]+x} ]] || checked+=(--master_addr "$master_addr")
  [[ -n ${given[--master-port]+x} ]] || checked+=(--master_port "$master_port")
fi
exec "$torchrun" "${checked[@]}" "$@"
