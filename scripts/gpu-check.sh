#!/usr/bin/env bash
# The real GPU path, on a machine with an NVIDIA GPU, with a rankcheck binary built
# elsewhere (this script builds nothing):
#   scripts/gpu-check.sh [path/to/rankcheck]
# It prints the GPU inventory, runs a real job of one rank (NCCL init + all-reduce,
# then the timed bandwidth all-reduce), two ranks on one GPU (expects duplicate-gpu), node mode over every GPU present,
# and a table of what it saw. NCCL: RANKCHECK_NCCL_LIB, else the first libnccl.so.2
# found (ldconfig, PyTorch, /usr/local/cuda). Exit 0 when every check came out as expected.
set -u
BIN=${1:-build/rankcheck}
[[ -x "$BIN" ]] || { echo "gpu-check: no rankcheck binary at $BIN" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rows=()
failed=0
row() { rows+=("$(printf '%-28s %-16s %-16s %s' "$1" "$2" "$3" "$4")"); [[ "$4" == ok* ]] || failed=1; }
json() { /usr/bin/env python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@" 2>/dev/null; }
port() { /usr/bin/env python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

if [[ -z "${RANKCHECK_NCCL_LIB:-}" ]]; then
  for cand in $(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2/ {print $NF}') \
              $(python3 -c 'import os, nvidia.nccl; print(os.path.join(os.path.dirname(nvidia.nccl.__file__), "lib/libnccl.so.2"))' 2>/dev/null) \
              /usr/local/cuda/lib64/libnccl.so.2 /usr/lib/x86_64-linux-gnu/libnccl.so.2; do
    [[ -e "$cand" ]] && { export RANKCHECK_NCCL_LIB=$cand; break; }
  done
fi
echo "== $("$BIN" --version) · $(uname -n) · NCCL library: ${RANKCHECK_NCCL_LIB:-libnccl.so.2 (loader default)}"
command -v nvidia-smi >/dev/null && nvidia-smi -L

echo; echo "== inventory (rankcheck env)"
"$BIN" env --rank 0 --world-size 1 --master-addr 127.0.0.1 --resolve-timeout 1
"$BIN" env --json --rank 0 --world-size 1 --master-addr 127.0.0.1 --resolve-timeout 1 >"$work/env.json"
ngpu=$(json "$work/env.json" 'j["self"]["gpu"]["device_count"]')
state=$(json "$work/env.json" 'j["self"]["gpu"]["state"]')
nccl=$(json "$work/env.json" 'j["self"]["gpu"]["nccl_version_text"] or "none"')
row "inventory" "usable GPU" "$state, $ngpu GPUs" "$([[ $state == usable ]] && echo ok || echo FAILED)"
row "NCCL loaded" "a version" "$nccl" "$([[ $nccl != none ]] && echo ok || echo FAILED)"
driver=$(json "$work/env.json" 'j["self"]["gpu"]["driver"]')
row "driver version" "like 570.86.15" "${driver:-?}" "$([[ $driver =~ ^[0-9]+(\.[0-9]+)+$ ]] && echo ok || echo FAILED)"

echo; echo "== one rank: real NCCL init + one-element all-reduce"
p=$(port)
"$BIN" run --rank 0 --world-size 1 --local-rank 0 --master-addr 127.0.0.1 --master-port "$p" \
  --timeout 120 --json "$work/one.json"
rc=$?
init=$(json "$work/one.json" '"%.0f ms" % j["stage_results"][0]["init_ms"]')
ar=$(json "$work/one.json" '"%.0f us" % j["stage_results"][0]["allreduce_us"]')
row "world size 1" "exit 0" "exit $rc, init ${init:-?}, all-reduce ${ar:-?}" "$([[ $rc == 0 ]] && echo ok || echo FAILED)"

echo; echo "== one rank with --bandwidth 64M (the timed all-reduce path; busbw is 0 at world size 1)"
p=$(port)
"$BIN" run --rank 0 --world-size 1 --local-rank 0 --master-addr 127.0.0.1 --master-port "$p" \
  --timeout 120 --bandwidth 64M --json "$work/bw.json"
rc=$?
alg=$(json "$work/bw.json" '"%.1f GB/s" % j["stage_results"][0]["bandwidth"]["algbw_gbps"]')
row "bandwidth, world size 1" "exit 0, algbw" "exit $rc, algbw ${alg:-?}" "$([[ $rc == 0 && -n $alg ]] && echo ok || echo FAILED)"

echo; echo "== two ranks on one GPU (CUDA_VISIBLE_DEVICES=0 for both): expect duplicate-gpu"
p=$(port)
for r in 0 1; do
  CUDA_VISIBLE_DEVICES=0 RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$p "$BIN" run --timeout 60 --json "$work/dup$r.json" >"$work/dup$r.out" 2>&1 &
done
wait
cat "$work/dup0.out"
rc=$(json "$work/dup0.json" 'j["exit_code"]')
ids=$(json "$work/dup0.json" '",".join(f["id"] for f in j["findings"])')
row "two ranks, one GPU" "exit 3 duplicate-gpu" "exit $rc $ids" "$([[ $rc == 3 && $ids == *duplicate-gpu* ]] && echo ok || echo FAILED)"

if [[ "${ngpu:-0}" =~ ^[0-9]+$ ]] && (( ngpu >= 1 )); then
  echo; echo "== node mode: one member for all $ngpu GPUs (one communicator per GPU in one group)"
  p=$(port)
  "$BIN" run --nproc-per-node "$ngpu" --nnodes 1 --node-rank 0 --master-addr 127.0.0.1 \
    --master-port "$p" --timeout 120 --json "$work/node.json"
  rc=$?
  got=$(json "$work/node.json" '",".join(str(r["got"]) for r in j["stage_results"])')
  row "node mode x$ngpu" "exit 0" "exit $rc, totals $got" "$([[ $rc == 0 ]] && echo ok || echo FAILED)"
  if (( ngpu >= 2 )); then
    echo; echo "== rank mode: rankcheck local -n $ngpu with a 256M bandwidth figure"
    "$BIN" local -n "$ngpu" --timeout 120 --bandwidth 256M --json "$work/local.json"
    rc=$?
    bw=$(json "$work/local.json" '"%.1f GB/s" % j["stage_results"][0]["bandwidth"]["busbw_gbps"]')
    row "local -n $ngpu" "exit 0" "exit $rc, busbw ${bw:-?}" "$([[ $rc == 0 ]] && echo ok || echo FAILED)"
  fi
fi

echo; echo "== summary"
printf '%-28s %-16s %-16s %s\n' check expected got result
printf '%s\n' "${rows[@]}"
exit $failed
