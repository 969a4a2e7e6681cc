#!/usr/bin/env bash
# The integration suites with every CPU busy, twice in a row: what a hand-in must
# pass, since CI's machine is shared and a test that acts after a fixed sleep, or
# times a phase too tightly, fails there first.
#   scripts/test-under-load.sh [ctest -R regex]     (default: every integration suite)
# A spinning process per core at the lowest priority (nice 19) keeps the CPUs busy;
# the tests run at normal priority beside them, as on a loaded machine. Builds
# first (scripts/build.sh); the spinners end with the script, however it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
regex=${1:-^integration: }
cores=$(nproc)
spinners=()
stop() {
  ((${#spinners[@]})) && kill "${spinners[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap stop EXIT
for _ in $(seq "$cores"); do
  nice -n 19 bash -c 'while :; do :; done' &
  spinners+=($!)
done
echo "test-under-load: $cores spinning processes (nice 19) beside the tests"
for round in 1 2; do
  echo "== round $round of 2: ctest -R '$regex'"
  ctest --test-dir build --output-on-failure --timeout 600 -j "${TEST_JOBS:-2}" -R "$regex"
done
echo "test-under-load: passed twice under load"
