#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: unit tests, the fuzz
# corpus, the integration tests with real processes and real launchers; then the
# release binaries (scripts/release.sh) inside a Debian 11 root and through the
# integration tests again, the aarch64 one under qemu-user through its loopback
# suites, and the container image built from them and run
# (scripts/image.sh); then the unit tests, the fuzz corpus and the suites of hostile
# input (cli, adversarial peers, diagnose's logs) again in an ASan+UBSan build
# (build-asan/).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
# RelWithDebInfo's -O2 without its debug information: CI's time. (Not Release: its -O3
# makes GCC 12 warn falsely, -Wrestrict inside libstdc++, and warnings are errors.)
scripts/build.sh -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG"
jobs=${TEST_JOBS:-2}
ctest --test-dir build --output-on-failure --timeout 300 -j "$jobs"

echo "== the release binaries (dist/, for glibc 2.28 and newer): in a Debian 11 root, then here"
scripts/release.sh
scripts/release-check.sh
release_bins=(RANKCHECK_BIN=dist/rankcheck)
[[ -x dist/rankcheck-mpi ]] && release_bins+=(RANKCHECK_MPI_BIN=dist/rankcheck-mpi)
# Again: what the portable binary could do differently (a static libstdc++, glibc 2.28's
# symbols): its launchers, name and address lookups, interfaces, network namespaces,
# diagnose (release-check.sh ran its GPU stage against the fake libraries in the old
# root). Not again: the suites of logic over the same code (the rendezvous, the watch,
# the adversarial peers, the bounds, the relays' load, the GPU stage's and check's),
# which the binary tested above ran.
python3 tests/release/run_integration.py build "${release_bins[@]}" -j "$jobs" \
  -E "gpu|watch|adversarial|bounds|relay|rendezvous"

echo "== the aarch64 release binary (dist/aarch64/) under qemu-user: its loopback suites"
scripts/release-check-aarch64.sh

echo "== the container image (launchers/kubernetes/Dockerfile), built with podman and run"
scripts/image.sh

echo "== the same under AddressSanitizer and UndefinedBehaviorSanitizer"
# A debug build of just what these tests run; its warnings were judged above
# (GCC warns falsely from system headers when sanitizers are on).
# Line tables only (-g1): the sanitizers' reports keep file:line, the build its time.
BUILD_DIR=build-asan BUILD_TYPE=Debug \
  NINJA_FLAGS="rankcheck unit_tests fakegpu fuzz_frame_replay fuzz_hello_replay fuzz_identity_replay" \
  scripts/build.sh -DRANKCHECK_SANITIZE=address,undefined -DRANKCHECK_WERROR=OFF \
  -DCMAKE_CXX_FLAGS_DEBUG=-g1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir build-asan --output-on-failure --timeout 300 -j "$jobs" \
      -R "unit|fuzz corpus|integration: (cli|adversarial|diagnose)$"
