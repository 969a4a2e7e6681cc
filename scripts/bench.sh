#!/usr/bin/env bash
# Benchmarks: prints figures, asserts nothing (the machines are shared and noisy).
#   scripts/bench.sh [member counts...]     default: 1000 4000 16000
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x build/rankcheck && -x build/tests/rankcheck_loadgen ]] || scripts/build.sh
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

echo "== rankcheck local -n 8 (whole pipeline, 8 processes), 20 runs"
times=()
for _ in $(seq 20); do
  t0=$(date +%s%N)
  build/rankcheck local -n 8 --quiet --no-gpu >/dev/null
  t1=$(date +%s%N)
  times+=($(( (t1 - t0) / 1000 )))
done
printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "wall: min %.1f ms, median %.1f ms, max %.1f ms\n", a[1]/1000, a[int((NR+1)/2)]/1000, a[NR]/1000}'

echo
echo "== rendezvous with many members (one master process, members simulated by one loadgen process)"
/usr/bin/python3 scripts/bench_rendezvous.py "${@:-1000 4000 16000}"
