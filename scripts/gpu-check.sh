#!/usr/bin/env bash
# The real GPU path, on a machine with an NVIDIA GPU, with a rankcheck binary built
# elsewhere (this script builds nothing):
#   scripts/gpu-check.sh [path/to/rankcheck]
# It prints the GPU inventory, then runs: a real job of one rank (NCCL init and an
# all-reduce into a separate receive buffer filled with a sentinel, so that a world
# of one proves the collective wrote its total), the timed bandwidth all-reduce,
# two ranks on one GPU (expects duplicate-gpu), NCCL init that must be aborted
# (a world of two whose rank 1 never calls init: rank 0's real
# ncclCommInitRankConfig is aborted at the deadline, nccl-init-timeout, exit 5, the
# process gone by the deadline + 2 s), node mode over every GPU present, and a
# table of what it saw: each check's expectation, outcome, time and verdict.
#
# NCCL: RANKCHECK_NCCL_LIB, else the first libnccl.so.2 found (ldconfig, PyTorch,
# /usr/local/cuda). The rank that never calls init runs on the fake libraries
# (tests/libfakegpu.so beside the binary's build, or RANKCHECK_FAKE_GPU), told to
# report the real NCCL and CUDA versions and to hang in init; its GPU is the eighth
# of eight fake ones, whose PCI bus id no GPU here has.
# GPU_CHECK_ABORT_TIMEOUT (default 20) is that check's --timeout in seconds.
#
# Against the fake libraries (no GPU: RANKCHECK_CUDA_LIB and RANKCHECK_NCCL_LIB
# naming libfakegpu.so, FAKE_GPUS listing fake GPUs) every check runs the same
# way; tests/integration/test_gpu.py does that. Exit 0 when every check came out
# as expected.
set -u
BIN=${1:-build/rankcheck}
[[ -x "$BIN" ]] || { echo "gpu-check: no rankcheck binary at $BIN" >&2; exit 2; }
FAKE_LIB=${RANKCHECK_FAKE_GPU:-$(dirname "$BIN")/tests/libfakegpu.so}
ABORT_TIMEOUT=${GPU_CHECK_ABORT_TIMEOUT:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rows=()
failed=0
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f s", b - a }'; }
# row CHECK EXPECTED GOT VERDICT START: one line of the table; any verdict but ok* fails.
row() {
  rows+=("$(printf '%-24s %-32s %-56s %-9s %s' "$1" "$2" "$3" "$(since "$5")" "$4")")
  [[ "$4" == ok* ]] || failed=1
}
verdict() { if "$@"; then echo ok; else echo FAILED; fi; }
json() { /usr/bin/env python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@" 2>/dev/null; }
port() { /usr/bin/env python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

if [[ -z "${RANKCHECK_NCCL_LIB:-}" ]]; then
  for cand in $(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2/ {print $NF}') \
              $(python3 -c 'import os, nvidia.nccl; print(os.path.join(os.path.dirname(nvidia.nccl.__file__), "lib/libnccl.so.2"))' 2>/dev/null) \
              /usr/local/cuda/lib64/libnccl.so.2 /usr/lib/x86_64-linux-gnu/libnccl.so.2; do
    [[ -e "$cand" ]] && { export RANKCHECK_NCCL_LIB=$cand; break; }
  done
fi
echo "== rankcheck $("$BIN" --version) · $(uname -n) · NCCL library: ${RANKCHECK_NCCL_LIB:-libnccl.so.2 (loader default)}"
command -v nvidia-smi >/dev/null && nvidia-smi -L

echo; echo "== inventory (rankcheck env)"
t=$(now)
"$BIN" env --rank 0 --world-size 1 --master-addr 127.0.0.1 --resolve-timeout 1
"$BIN" env --json --rank 0 --world-size 1 --master-addr 127.0.0.1 --resolve-timeout 1 >"$work/env.json"
ngpu=$(json "$work/env.json" 'j["self"]["gpu"]["device_count"]')
state=$(json "$work/env.json" 'j["self"]["gpu"]["state"]')
nccl=$(json "$work/env.json" 'j["self"]["gpu"]["nccl_version_text"] or "none"')
nccl_version=$(json "$work/env.json" 'j["self"]["gpu"]["nccl_version"]')
cuda_version=$(json "$work/env.json" 'j["self"]["gpu"]["cuda_version"]')
row "inventory" "usable GPU" "$state, $ngpu GPUs" "$(verdict [ "$state" == usable ])" "$t"
row "NCCL loaded" "a version" "$nccl" "$(verdict [ "$nccl" != none ])" "$t"
driver=$(json "$work/env.json" 'j["self"]["gpu"]["driver"]')
row "driver version" "like 570.86.15" "${driver:-?}" \
  "$([[ $driver =~ ^[0-9]+(\.[0-9]+)+$ ]] && echo ok || echo FAILED)" "$t"
# What the sysfs reader sees here (no machine this was built on has an RDMA device):
# informational, any answer is a fact about the host.
net=$(json "$work/env.json" 'j["self"]["nccl_net"].get("text", "-")')
row "NCCL data network" "info: what sysfs shows" "$net" ok "$t"

echo; echo "== one rank: real NCCL init + one-element all-reduce into a sentinel-filled buffer"
p=$(port)
t=$(now)
"$BIN" run --rank 0 --world-size 1 --local-rank 0 --master-addr 127.0.0.1 --master-port "$p" \
  --timeout 120 --json "$work/one.json"
rc=$?
init=$(json "$work/one.json" '"%.0f ms" % j["stage_results"][0]["init_ms"]')
ar=$(json "$work/one.json" '"%.0f us" % j["stage_results"][0]["allreduce_us"]')
got=$(json "$work/one.json" 'j["stage_results"][0]["got"]')
row "world size 1" "exit 0, total 1" "exit $rc, total ${got:-?}, init ${init:-?}, all-reduce ${ar:-?}" \
  "$([[ $rc == 0 && $got == 1 ]] && echo ok || echo FAILED)" "$t"

echo; echo "== one rank, ncclCommInitRankScalable (--nccl-roots-every 0: one root at any size; NCCL 2.23+)"
p=$(port)
t=$(now)
"$BIN" run --rank 0 --world-size 1 --local-rank 0 --master-addr 127.0.0.1 --master-port "$p" \
  --timeout 120 --nccl-roots-every 0 --json "$work/scalable.json"
rc=$?
roots=$(json "$work/scalable.json" 'j["nccl_roots"]')
got=$(json "$work/scalable.json" 'j["stage_results"][0]["got"]')
if [[ ${nccl_version:-0} -ge 22300 ]]; then
  row "scalable init, 1 root" "exit 0, 1 root, total 1" "exit $rc, ${roots:-?} root(s), total ${got:-?}" \
    "$([[ $rc == 0 && $roots == 1 && $got == 1 ]] && echo ok || echo FAILED)" "$t"
else
  row "scalable init, 1 root" "one root (NCCL < 2.23)" "exit $rc, ${roots:-?} roots" \
    "$([[ $rc == 0 && $roots == 0 ]] && echo ok || echo FAILED)" "$t"
fi

echo; echo "== one rank with --bandwidth 64M (the timed all-reduce path; busbw is 0 at world size 1)"
p=$(port)
t=$(now)
"$BIN" run --rank 0 --world-size 1 --local-rank 0 --master-addr 127.0.0.1 --master-port "$p" \
  --timeout 120 --bandwidth 64M --json "$work/bw.json"
rc=$?
alg=$(json "$work/bw.json" '"%.1f GB/s" % j["stage_results"][0]["bandwidth"]["algbw_gbps"]')
row "bandwidth, world size 1" "exit 0, algbw" "exit $rc, algbw ${alg:-?}" \
  "$([[ $rc == 0 && -n $alg ]] && echo ok || echo FAILED)" "$t"

echo; echo "== two ranks on one GPU (CUDA_VISIBLE_DEVICES=0 for both): expect duplicate-gpu"
p=$(port)
t=$(now)
for r in 0 1; do
  CUDA_VISIBLE_DEVICES=0 RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$p "$BIN" run --timeout 60 --json "$work/dup$r.json" >"$work/dup$r.out" 2>&1 &
done
wait
cat "$work/dup0.out"
rc=$(json "$work/dup0.json" 'j["exit_code"]')
ids=$(json "$work/dup0.json" '",".join(f["id"] for f in j["findings"])')
row "two ranks, one GPU" "exit 3 duplicate-gpu" "exit $rc $ids" \
  "$([[ $rc == 3 && $ids == *duplicate-gpu* ]] && echo ok || echo FAILED)" "$t"

echo; echo "== NCCL init aborted: rank 1 joins but never calls init (fake libraries, hanging init)"
t=$(now)
if [[ -e "$FAKE_LIB" ]]; then
  p=$(port)
  RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p \
    "$BIN" run --timeout "$ABORT_TIMEOUT" --json "$work/abort0.json" >"$work/abort0.out" 2>&1 &
  pid0=$!
  RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p \
    RANKCHECK_CUDA_LIB="$FAKE_LIB" RANKCHECK_NCCL_LIB="$FAKE_LIB" FAKE_NCCL_INIT=hang \
    FAKE_NCCL_VERSION="${nccl_version:-22809}" FAKE_CUDA_VERSION="${cuda_version:-13000}" \
    FAKE_GPUS="$(printf 'GPU-fa4e0000-0000-0000-0000-00000000000%d,' 0 1 2 3 4 5 6 7)" \
    CUDA_VISIBLE_DEVICES=7 TMPDIR="$work" \
    "$BIN" run --timeout "$ABORT_TIMEOUT" --json "$work/abort1.json" >"$work/abort1.out" 2>&1 &
  pid1=$!
  wait "$pid0"
  rc=$?
  took=$(awk -v a="$t" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
  wait "$pid1"
  cat "$work/abort0.out"
  ids=$(json "$work/abort0.json" '",".join(f["id"] for f in j["findings"])')
  in_time=$(awk -v s="$took" -v lim="$ABORT_TIMEOUT" 'BEGIN { print (s <= lim + 2) ? "yes" : "no" }')
  row "init aborted (world 2)" "exit 5 nccl-init-timeout, <=$ABORT_TIMEOUT+2 s" \
    "exit $rc $ids, ended after $took s" \
    "$([[ $rc == 5 && $ids == *nccl-init-timeout* && $in_time == yes ]] && echo ok || echo FAILED)" "$t"
else
  row "init aborted (world 2)" "exit 5 nccl-init-timeout" "no fake library at $FAKE_LIB" \
    "FAILED (set RANKCHECK_FAKE_GPU)" "$t"
fi

if [[ "${ngpu:-0}" =~ ^[0-9]+$ ]] && (( ngpu >= 1 )); then
  echo; echo "== node mode: one member for all $ngpu GPUs (one communicator per GPU in one group)"
  p=$(port)
  t=$(now)
  "$BIN" run --nproc-per-node "$ngpu" --nnodes 1 --node-rank 0 --master-addr 127.0.0.1 \
    --master-port "$p" --timeout 120 --json "$work/node.json"
  rc=$?
  got=$(json "$work/node.json" '",".join(str(r["got"]) for r in j["stage_results"])')
  row "node mode x$ngpu" "exit 0" "exit $rc, totals $got" "$(verdict [ "$rc" == 0 ])" "$t"
  if (( ngpu >= 2 )); then
    echo; echo "== rank mode: rankcheck local -n $ngpu with a 256M bandwidth figure"
    t=$(now)
    "$BIN" local -n "$ngpu" --timeout 120 --bandwidth 256M --json "$work/local.json"
    rc=$?
    bw=$(json "$work/local.json" '"%.1f GB/s" % j["stage_results"][0]["bandwidth"]["busbw_gbps"]')
    row "local -n $ngpu" "exit 0" "exit $rc, busbw ${bw:-?}" "$(verdict [ "$rc" == 0 ])" "$t"
  fi
fi

echo; echo "== summary"
printf '%-24s %-32s %-56s %-9s %s\n' check expected got time result
printf '%s\n' "${rows[@]}"
exit $failed
