#!/usr/bin/env bash
# Runs the aarch64 release binary (dist/aarch64/rankcheck, from scripts/release.sh)
# on this x86_64 machine, under qemu-user with the arm64 root's loader and
# libraries: the integration suites that need nothing but loopback, from the test
# build's ctest (tests/release/run_integration.py), with the GPU stage's driven by
# the fake CUDA/NCCL library built for aarch64 the way the binary was.
#   scripts/release.sh && scripts/build.sh && scripts/release-check-aarch64.sh [-R RE]
# What it shows: the cross-compiled binary joins, relays, decides and reports as the
# x86_64 one does (clang 14 once compiled an aarch64 master that accepted a member
# and then never answered it: with such a binary no member joins, and the relay
# suite fails). Not shown: timing (qemu is several times slower) or anything of a
# real Grace machine.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "release-check-aarch64: $*" >&2; exit 2; }
[[ -x dist/aarch64/rankcheck && -e build-release-aarch64/sysroot/.rankcheck-sysroot ]] ||
  die "no aarch64 release build here: run scripts/release.sh first"
[[ -f build/CTestTestfile.cmake ]] || die "no test build in build/: run scripts/build.sh first"
command -v qemu-aarch64-static >/dev/null || die "no qemu-aarch64-static: scripts/setup.sh release"
sysroot=$(readlink -f build-release-aarch64/sysroot)
work=build-release-aarch64/check
mkdir -p "$work"

# The fake CUDA/NCCL libraries for aarch64 (today's driver's, and R460's without
# cuDeviceGetUuid_v2), compiled like the binary.
fake=(clang++-16 --target=aarch64-linux-gnu --sysroot="$sysroot" --gcc-toolchain="$sysroot/usr"
      -include cmake/release-prelude.h -std=c++20 -O1 -fPIC -shared -fuse-ld=lld
      -static-libstdc++ -static-libgcc tests/fake/fake_gpu.cc)
"${fake[@]}" -o "$work/libfakegpu.so"
"${fake[@]}" -DFAKE_DRIVER_R460 -o "$work/libfakegpu_r460.so"

# What qemu gives the process for / when it loads libraries: the arm64 root's
# loader, C library and name service modules, copied out of the cache (under the
# home folder, which a suite's unprivileged process cannot read).
runtime=$work/root
rm -rf "$runtime"
mkdir -p "$runtime/lib/aarch64-linux-gnu"
for lib in ld-linux-aarch64.so.1 libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 \
           libresolv.so.2 libnss_files.so.2 libnss_dns.so.2; do
  cp -L "$sysroot/lib/aarch64-linux-gnu/$lib" "$runtime/lib/aarch64-linux-gnu/$lib"
done
ln -s aarch64-linux-gnu/ld-linux-aarch64.so.1 "$runtime/lib/ld-linux-aarch64.so.1"

# What the suites start as rankcheck: the binary under qemu. Its pid is the
# process's own, and signals reach it through qemu.
printf '#!/bin/sh\nexec qemu-aarch64-static -L %q %q "$@"\n' \
  "$PWD/$runtime" "$PWD/dist/aarch64/rankcheck" >"$work/rankcheck"
chmod +x "$work/rankcheck"
chmod -R a+rX "$work"
"$work/rankcheck" --version

# The suites of loopback only: the command line, the relays (a master, its relays
# and members: the rendezvous end to end), the GPU stage (on the fake) and diagnose;
# -R '^integration: rendezvous$' runs the rendezvous suite's corner cases too (1.5
# min more). The suites of launchers, namespaces and containers ran against the
# x86_64 binary; their code is the same. Under qemu a process runs several times
# slower: the wider grace of a sanitizer build. The real NCCL here is x86_64's,
# which an aarch64 process cannot load.
suites='^integration: (cli|relay|gpu|diagnose)$'
python3 tests/release/run_integration.py build RANKCHECK_BIN="$work/rankcheck" \
  RANKCHECK_FAKE_GPU="$work/libfakegpu.so" RANKCHECK_REAL_NCCL= RANKCHECK_TEST_GRACE=8 \
  RANKCHECK_TEST_EMULATED=qemu-aarch64 -j "${TEST_JOBS:-2}" -R "$suites" "$@"
