#!/usr/bin/env bash
# rankcheck as a node-level Slurm step: one task per node, each standing for
# the GPUS_PER_NODE ranks that torchrun will start on that node (rankcheck's
# node mode). For jobs that run one `torchrun --nproc-per-node N` per node.
#
#   srun --ntasks=$SLURM_NNODES --ntasks-per-node=1 launchers/slurm/rankcheck-node.sh [rankcheck run options]
#   srun --ntasks=$SLURM_NNODES --ntasks-per-node=1 launchers/slurm/rankcheck-node.sh env [rankcheck env options]
#   srun --ntasks=$SLURM_NNODES --ntasks-per-node=1 launchers/slurm/rankcheck-node.sh [options] -- torchrun ...
#
# The third form is the job under watch (docs/watch.md): once the check passed, each node's
# rankcheck runs its torchrun and rank 0's names the first node that failed.
# The second form prints each node's identity as node mode sees it (no network).
#
# e.g.  srun --ntasks=$SLURM_NNODES --ntasks-per-node=1 launchers/slurm/rankcheck-node.sh --timeout 120
#
# It runs
#   rankcheck run --nproc-per-node $GPUS_PER_NODE --node-rank $SLURM_NODEID \
#                 --nnodes <nodes of this step> [your options]
# (an --nproc-per-node, --node-rank or --nnodes among your options is used instead
# of the wrapper's, and rankcheck compares it with Slurm's), and exits with
# rankcheck's exit code, the job-wide verdict (0 pass, 3 mismatch, 4 incomplete
# rendezvous, 5 GPU stage, ...), or 2 when it is used wrongly.
#
# Environment:
#   RANKCHECK      the rankcheck binary (default: rankcheck, from PATH)
#   RANKCHECK_JOB_TOKEN
#                  the job token itself, the same on every node (the batch script
#                  makes one per job and exports it): written to a private file
#                  for --token-file, removed when the check ends. Or give
#                  RANKCHECK_TOKEN_FILE, a file on every node.
#   GPUS_PER_NODE  ranks per node, what torchrun's --nproc-per-node gets
#                  (default: SLURM_GPUS_ON_NODE, which Slurm sets when the step has GPUs)
#   MASTER_ADDR, MASTER_PORT
#                  as the training job will get them; rankcheck's defaults are the
#                  first host of the step's node list and 29500
#
# In node mode rankcheck reads SLURM_NODEID and the step's node count, and leaves
# SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID alone: in this step they count the one
# checker task per node, not the training ranks (rankcheck env says so in a note).
set -euo pipefail

me=${0##*/}
die() {
  echo "$me: $*" >&2
  exit 2
}

# --help: the usage above (`rankcheck run --help`: rankcheck's options), from this file's opening comment.
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -nE '1d; /^#SBATCH|^[^#]|^$/q; s/^# ?//p' "$0"
  exit 0
fi

# shellcheck disable=SC2016  # the variable is the user's to expand
one_per_node='srun --ntasks=$SLURM_NNODES --ntasks-per-node=1'
[[ -n ${SLURM_NODEID:-} && -n ${SLURM_STEP_TASKS_PER_NODE:-} ]] ||
  die "not inside a Slurm step: run it as '$one_per_node $0'"

# One task per node: the per-node task counts must all be 1, e.g. "1(x4)" or "1,1".
# (--ntasks-per-node=1 alone keeps the job's task count inside an allocation of
# several tasks per node: srun warns and starts them all.)
[[ $SLURM_STEP_TASKS_PER_NODE =~ ^1(\(x[0-9]+\))?(,1(\(x[0-9]+\))?)*$ ]] ||
  die "this step runs '$SLURM_STEP_TASKS_PER_NODE' tasks per node; node mode needs exactly" \
      "one: $one_per_node $0"

# Whether the user's options give `$1` themselves (--opt VALUE or --opt=VALUE); a
# command after "--" (the job under watch, `-- torchrun ...`) has options of its own.
given() {
  local a
  for a in "${@:2}"; do
    [[ $a == -- ]] && return 1
    [[ $a == "$1" || $a == "$1="* ]] && return 0
  done
  return 1
}

nnodes=${SLURM_STEP_NUM_NODES:-${SLURM_NNODES:-}}
[[ $nnodes =~ ^[1-9][0-9]*$ ]] || given --nnodes "$@" ||
  die "cannot tell the number of nodes of this step" \
      "(SLURM_STEP_NUM_NODES='${SLURM_STEP_NUM_NODES:-}', SLURM_NNODES='${SLURM_NNODES:-}')"

gpus=${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-}}
[[ $gpus =~ ^[1-9][0-9]*$ ]] || given --nproc-per-node "$@" ||
  die "set GPUS_PER_NODE to the number of ranks per node (torchrun's --nproc-per-node);" \
      "got '${gpus}'"

rankcheck=${RANKCHECK:-rankcheck}
command -v "$rankcheck" >/dev/null ||
  die "cannot find '$rankcheck' on ${SLURMD_NODENAME:-this node} (PATH=$PATH): set RANKCHECK" \
      "to its full path, the same on every node"
sub=run
if [[ ${1:-} == env ]]; then
  sub="env"
  shift
fi

# The node-mode options, unless the user gives one: then theirs is used (rankcheck
# reports where it disagrees with Slurm's), rather than both (a usage error).
node_args=()
given --nproc-per-node "$@" || node_args+=(--nproc-per-node "$gpus")
given --node-rank "$@" || node_args+=(--node-rank "$SLURM_NODEID")
given --nnodes "$@" || node_args+=(--nnodes "$nnodes")

if [[ -n ${RANKCHECK_JOB_TOKEN:-} && -z ${RANKCHECK_TOKEN_FILE:-} ]]; then
  umask 077
  RANKCHECK_TOKEN_FILE=$(mktemp "${TMPDIR:-/tmp}/rankcheck-token.XXXXXX") ||
    die "cannot make a file for the job token in ${TMPDIR:-/tmp}"
  trap 'rm -f "$RANKCHECK_TOKEN_FILE"' EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT
  printf '%s\n' "$RANKCHECK_JOB_TOKEN" >"$RANKCHECK_TOKEN_FILE"
  export RANKCHECK_TOKEN_FILE
  unset RANKCHECK_JOB_TOKEN
  "$rankcheck" "$sub" "${node_args[@]}" "$@"  # set -e: its exit code is the script's
  exit 0
fi
exec "$rankcheck" "$sub" "${node_args[@]}" "$@"
