#!/usr/bin/env bash
# rankcheck as a node-level Slurm step: one task per node, each standing for
# the GPUS_PER_NODE ranks that torchrun will start on that node (rankcheck's
# node mode). For jobs that run one `torchrun --nproc-per-node N` per node.
#
#   srun --ntasks-per-node=1 launchers/slurm/rankcheck-node.sh [rankcheck run options]
#   srun --ntasks-per-node=1 launchers/slurm/rankcheck-node.sh env [rankcheck env options]
#
# The second form prints each node's identity as node mode sees it (no network).
#
# e.g.  srun --ntasks-per-node=1 launchers/slurm/rankcheck-node.sh --timeout 120
#
# It runs
#   rankcheck run --nproc-per-node $GPUS_PER_NODE --node-rank $SLURM_NODEID \
#                 --nnodes <nodes of this step> [your options]
# and exits with rankcheck's exit code, the job-wide verdict (0 pass, 3 mismatch,
# 4 incomplete rendezvous, 5 GPU stage, ...), or 2 when it is used wrongly.
#
# Environment:
#   RANKCHECK      the rankcheck binary (default: rankcheck, from PATH)
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

[[ -n ${SLURM_NODEID:-} && -n ${SLURM_STEP_TASKS_PER_NODE:-} ]] ||
  die "not inside a Slurm step: run it as 'srun --ntasks-per-node=1 $0'"

# One task per node: the per-node task counts must all be 1, e.g. "1(x4)" or "1,1".
[[ $SLURM_STEP_TASKS_PER_NODE =~ ^1(\(x[0-9]+\))?(,1(\(x[0-9]+\))?)*$ ]] ||
  die "this step runs '$SLURM_STEP_TASKS_PER_NODE' tasks per node; node mode needs exactly" \
      "one: srun --ntasks-per-node=1 $0"

nnodes=${SLURM_STEP_NUM_NODES:-${SLURM_NNODES:-}}
[[ $nnodes =~ ^[1-9][0-9]*$ ]] || die "cannot tell the number of nodes of this step" \
  "(SLURM_STEP_NUM_NODES='${SLURM_STEP_NUM_NODES:-}', SLURM_NNODES='${SLURM_NNODES:-}')"

gpus=${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-}}
[[ $gpus =~ ^[1-9][0-9]*$ ]] || die "set GPUS_PER_NODE to the number of ranks per node" \
  "(torchrun's --nproc-per-node); got '${gpus}'"

rankcheck=${RANKCHECK:-rankcheck}
sub=run
if [[ ${1:-} == env ]]; then
  sub="env"
  shift
fi

exec "$rankcheck" "$sub" --nproc-per-node "$gpus" --node-rank "$SLURM_NODEID" --nnodes "$nnodes" "$@"
