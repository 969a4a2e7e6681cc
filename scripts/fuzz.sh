#!/usr/bin/env bash
# Runs the three libFuzzer harnesses (frames, hellos, environment/identity) with
# ASan and UBSan, each for RUNS executions (default 10 million), starting from the
# seed corpus in tests/fuzz/corpus. Needs clang (Debian: clang, libclang-rt-14-dev).
#   scripts/fuzz.sh [RUNS]
# New corpus entries go to build-fuzz/corpus/<harness>; crashes to build-fuzz/artifacts,
# and the script exits non-zero. Recheck one artifact without clang:
#   build/tests/fuzz_<harness>_replay build-fuzz/artifacts/<file>
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10000000}
CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRANKCHECK_FUZZ=ON \
  -DRANKCHECK_TESTS=OFF -DRANKCHECK_SANITIZE=address,undefined >/dev/null
ninja -C build-fuzz fuzz_frame fuzz_hello fuzz_identity
mkdir -p build-fuzz/artifacts
failed=()
for name in frame hello identity; do
  mkdir -p "build-fuzz/corpus/$name"
  cp -n tests/fuzz/corpus/"$name"/* "build-fuzz/corpus/$name/" 2>/dev/null || true
  echo "== fuzz_$name: $runs runs"
  log="build-fuzz/$name.log"
  if ! "build-fuzz/tests/fuzz/fuzz_$name" "build-fuzz/corpus/$name" -runs="$runs" \
    -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$name-" >"$log" 2>&1; then
    failed+=("$name")
  fi
  grep -E "^(stat::|Done|==.*ERROR|SUMMARY)" "$log" || true
done
if ((${#failed[@]})); then
  echo "fuzz: failed: ${failed[*]} (logs in build-fuzz/<harness>.log, inputs in build-fuzz/artifacts)" >&2
  exit 1
fi
