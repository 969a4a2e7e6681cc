#!/usr/bin/env bash
# Runs the release binary where users run it: inside the Debian 11 root (glibc
# 2.31) that scripts/release.sh built it against, with chroot, on loopback; as root
# (sudo otherwise). What is checked: tests/release/test_chroot.py.
#   scripts/release.sh && scripts/release-check.sh
# /proc and /dev are mounted into the root inside a mount namespace of this
# script's own, so that they go away when it ends, however it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x dist/rankcheck && -e build-release/sysroot/.rankcheck-sysroot ]] ||
  { echo "release-check: no release build here: run scripts/release.sh first" >&2; exit 2; }
sysroot=$(readlink -f build-release/sysroot)

if [[ -z ${RANKCHECK_RELEASE_NAMESPACE:-} ]]; then
  # The fake CUDA/NCCL library, built like the release binary, so that it needs
  # nothing the root lacks.
  mkdir -p build-release/fake
  clang++ --target=x86_64-linux-gnu --sysroot="$sysroot" --gcc-toolchain="$sysroot/usr" \
    -include cmake/release-prelude.h -std=c++20 -O1 -fPIC -shared -fuse-ld=lld \
    -static-libstdc++ -static-libgcc -o build-release/fake/libfakegpu.so tests/fake/fake_gpu.cc
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  exec "${sudo[@]}" env RANKCHECK_RELEASE_NAMESPACE=1 \
    unshare --mount --propagation private -- "$0" "$@"
fi

work=$(mktemp -d "$sysroot/tmp/rankcheck-release-XXXXXX")
cleanup() {
  umount "$sysroot/dev" 2>/dev/null || true
  umount "$sysroot/proc" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mount -t proc proc "$sysroot/proc"
mount --bind /dev "$sysroot/dev"
chmod 0755 "$work"
cp dist/rankcheck dist/rankcheck_*_amd64.deb build-release/fake/libfakegpu.so "$work/"

cd tests/release
RANKCHECK_RELEASE_ROOT=$sysroot RANKCHECK_RELEASE_WORK=$work PYTHONDONTWRITEBYTECODE=1 \
  python3 -m unittest -v test_chroot
