#!/usr/bin/env bash
# Benchmarks: prints figures, asserts nothing (the machines are shared and noisy).
#   scripts/bench.sh [--json] [member counts...]     default: 1000 4000 16000
# --json: one JSON object per scenario per line, nothing else on stdout.
# A run that fails is one line saying which and why (in --json, a row with "failed"),
# and the others still run; the exit status is 1 when any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
json=()
counts=()
for a in "$@"; do
  if [[ $a == --json ]]; then json=(--json); else counts+=("$a"); fi
done
say() { ((${#json[@]})) || echo "$@"; }
failed=()
# One part of the bench: a failure is remembered and said at the end, not the end of it.
part() { "$@" || failed+=("$* (exit $?)"); }
[[ -x build/rankcheck && -x build/tests/rankcheck_loadgen && -x build/tests/rankcheck_bench_rehearsal ]] ||
  scripts/build.sh >&2
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

say "== rankcheck local -n 8 --no-gpu (whole pipeline, 8 processes), 20 runs"
part /usr/bin/python3 scripts/bench_rendezvous.py "${json[@]}" --local 20
# What users run is the release binary (clang, OpenSSL 1.1.1, stripped): timed too
# when scripts/release.sh has made one from these sources.
if [[ -x dist/rankcheck && ! dist/rankcheck -ot build/rankcheck ]]; then
  say
  say "== the same with the release binary, dist/rankcheck"
  RANKCHECK_BIN=$PWD/dist/rankcheck part /usr/bin/python3 scripts/bench_rendezvous.py "${json[@]}" --local 20
elif [[ -x dist/rankcheck ]]; then
  echo "bench: dist/rankcheck is older than build/rankcheck, not timed (scripts/release.sh remakes it)" >&2
fi

say
say "== for comparison, the check users write with torch (one import, 8 forked members, gloo), 5 runs"
part /usr/bin/python3 scripts/bench_torch.py "${json[@]}" 5

say
say "== the rehearsal of NCCL's connections: simulated hosts on loopback, every host probing at once"
# Before the floods below, whose 100k connections leave loopback's ports in TIME_WAIT
# for a minute. (It exits 1 when some connection failed: its line says how many, and
# the rest still runs.)
for hosts in 64 1024; do part build/tests/rankcheck_bench_rehearsal "$hosts" "${json[@]}"; done

say
say "== rendezvous with many members (one master process, members simulated by one loadgen process)"
part /usr/bin/python3 scripts/bench_rendezvous.py "${json[@]}" ${counts[@]:-1000 4000 16000}

say
say "== through host relays (8 ranks a host, each hello and verdict with the job token's HMAC)"
part /usr/bin/python3 scripts/bench_rendezvous.py "${json[@]}" --relay "15999 99999"

say
say "== the wrapper of run -- CMD: a job printing 1 GiB of log lines, on its own and wrapped (3 runs each)"
part /usr/bin/python3 scripts/bench_watch.py "${json[@]}"

say
say "== the GPU stage in node mode on the fake GPU library: 8 GPUs whose primary contexts take 300 ms each to create (FAKE_CUDA_CTX_MS), 3 runs"
gpu_node() {
  local uuids secs=() t0 t1
  uuids=$(printf 'GPU-%08x-0000-0000-0000-000000000000,' 0 1 2 3 4 5 6 7)
  [[ -e build/tests/libfakegpu.so ]] || { echo "bench: no build/tests/libfakegpu.so" >&2; return 1; }
  for _ in 1 2 3; do
    t0=$(date +%s%N)
    RANKCHECK_CUDA_LIB=build/tests/libfakegpu.so RANKCHECK_NCCL_LIB=build/tests/libfakegpu.so \
      FAKE_GPUS=${uuids%,} FAKE_CUDA_CTX_MS=300 build/rankcheck run -q --timeout 30 \
      --nproc-per-node 8 --nnodes 1 --node-rank 0 --master-addr 127.0.0.1 \
      --master-port $((20000 + RANDOM % 10000)) >/dev/null || return 1
    t1=$(date +%s%N)
    secs+=("$(awk -v ns=$((t1 - t0)) 'BEGIN {printf "%.2f", ns / 1e9}')")
  done
  if ((${#json[@]})); then
    printf '{"scenario": "gpu-node-contexts", "ranks": 8, "context_ms": 300, "seconds": [%s]}\n' \
      "$(IFS=,; echo "${secs[*]}")"
  else
    echo "whole run: ${secs[*]} s (the contexts one after another would take 2.4 s alone)"
  fi
}
part gpu_node

say
say "== rankcheck diagnose over 1 GiB of logs (64 ranks' NCCL INFO and training lines, 1 in 100 a real failed job's line, a failure in the middle)"
logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT
/usr/bin/python3 - "$logdir/seed.log" tests/fixtures/diagnose/corpus/dev <<'PY'
import os, random, sys
random.seed(7)
# Real lines: those of the dev corpus's logs (public failed jobs), as they are.
real = []
for d, _, files in sorted(os.walk(sys.argv[2])):
    for name in sorted(files):
        if name != "case.json":
            with open(os.path.join(d, name), errors="replace") as f:
                real += [l.rstrip("\n") for l in f if l.strip()]
lines = []
for i in range(40000):
    if i % 100 == 99:
        lines.append(random.choice(real))
        continue
    r = random.randrange(64)
    host = f"gpu-{r // 8:02d}"
    kind = i % 4
    if kind == 0:
        lines.append(f"[rank{r}]:{host}:{4000 + r}:{4100 + r} [{r % 8}] NCCL INFO Channel {i % 32:02d}/0 : {r}[{r % 8}] -> {(r + 1) % 64}[{(r + 1) % 8}] via P2P/IPC/read")
    elif kind == 1:
        lines.append(f"[rank{r}]:[I1130 11:02:{i % 60:02d}.123456 {4000 + r} train.py:88] step {i} loss {random.random():.4f} lr 3.0e-4 tokens/s 181234")
    elif kind == 2:
        lines.append(f"{r}: epoch 3 step {i} grad_norm {random.random():.3f} throughput 412.5 samples/s")
    else:
        lines.append(f"[default{r % 8}]:{host}:{4000 + r}:{4100 + r} [{r % 8}] NCCL INFO comm 0x55f0 rank {r} nRanks 64 nNodes 8 localRanks 8 localRank {r % 8} MNNVL 0")
with open(sys.argv[1], "w") as f:
    f.write("\n".join(lines) + "\n")
PY
seed_bytes=$(stat -c %s "$logdir/seed.log")
copies=$(( (1 << 30) / seed_bytes ))
{
  for _ in $(seq $((copies / 2))); do cat "$logdir/seed.log"; done
  echo "[rank13]:torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
  echo "[rank2]:[E1130 11:20:01.1 ProcessGroupNCCL.cpp:607] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600026 milliseconds before timing out."
  for _ in $(seq $((copies - copies / 2))); do cat "$logdir/seed.log"; done
} >"$logdir/job.log"
size=$(stat -c %s "$logdir/job.log")
t0=$(date +%s%N)
# Peak memory from the kernel's account of the child (ru_maxrss, KiB).
rss=$(/usr/bin/python3 -c 'import resource, subprocess, sys
with open(sys.argv[2], "w") as out:
    subprocess.run([sys.argv[1], "diagnose", "--json", sys.argv[3]], stdout=out)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' build/rankcheck "$logdir/out.json" "$logdir/job.log")
t1=$(date +%s%N)
ms=$(( (t1 - t0) / 1000000 ))
first=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["findings"][0]["id"])' "$logdir/out.json" 2>&1 | tail -1) ||
  failed+=("diagnose over 1 GiB: its report cannot be read: $first")
if ((${#json[@]})); then
  printf '{"scenario": "diagnose-1gib", "ranks": 64, "hosts": 8, "verdict": null, "rendezvous_ms": null, "verdict_at_all_ms": null, "master_peak_kib": null, "master_connections": null, "bytes": %d, "seconds": %.3f, "peak_kib": %d, "first_finding": "%s"}\n' \
    "$size" "$(awk -v ms="$ms" 'BEGIN {print ms/1000}')" "$rss" "$first"
else
  awk -v b="$size" -v ms="$ms" -v rss="$rss" -v first="$first" \
    'BEGIN {printf "%.2f GiB in %.2f s (%.0f MiB/s), peak memory %.1f MiB; first finding: %s\n", b/2^30, ms/1000, b/2^20/(ms/1000), rss/1024, first}'
fi
if ((${#failed[@]})); then
  printf 'bench: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
