#!/usr/bin/env bash
# Writes dist/gpu-check/: what a GPU machine with no build tools, no internet and
# only its driver, CUDA and a Python with pip's NCCL needs to run every GPU check,
#   dist/gpu-check/run.sh
# which prints one table (check, result, time, detail) and exits 0 when every check
# came out as expected.
#   scripts/gpu-bundle.sh
#
#   rankcheck            the release binary: RANKCHECK_BIN, else dist/rankcheck, else
#                        built with scripts/release.sh (slow: a Debian 11 root); its
#                        debug info, if any, stripped
#   lib/libfakegpu.so    the fake CUDA driver and NCCL, for the rank that never calls
#                        NCCL init in the abort check: RANKCHECK_FAKE_GPU, else built
#                        here from tests/fake/fake_gpu.cc (libstdc++ inside; against
#                        the release's sysroot where scripts/release.sh made one)
#   gpu-check.sh         scripts/gpu-check.sh
#   run.sh               runs gpu-check.sh on the rankcheck beside it
#
# GPU_BUNDLE_DIR (default dist/gpu-check) is where; the folder must stay under
# GPU_BUNDLE_MAX_BYTES (default 64 MiB, what can be carried to a GPU machine), or the
# script fails and says by how much.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${GPU_BUNDLE_DIR:-dist/gpu-check}
max_bytes=${GPU_BUNDLE_MAX_BYTES:-$((64 * 1024 * 1024))}
die() { echo "gpu-bundle: $*" >&2; exit 1; }

bin=${RANKCHECK_BIN:-}
if [[ -z $bin ]]; then
  if [[ ! -x dist/rankcheck ]]; then
    echo "gpu-bundle: no dist/rankcheck: building it with scripts/release.sh"
    scripts/release.sh
  fi
  bin=dist/rankcheck
fi
[[ -x $bin ]] || die "no rankcheck binary at $bin"

rm -rf "$out"
mkdir -p "$out/lib"
cp "$bin" "$out/rankcheck"
chmod 0755 "$out/rankcheck"
# A development build carries its debug info (tens of MB): not what the machine needs.
objcopy --strip-debug "$out/rankcheck" 2>/dev/null || true
if [[ -n ${RANKCHECK_FAKE_GPU:-} ]]; then
  [[ -e $RANKCHECK_FAKE_GPU ]] || die "RANKCHECK_FAKE_GPU=$RANKCHECK_FAKE_GPU: no such file"
  cp "$RANKCHECK_FAKE_GPU" "$out/lib/libfakegpu.so"
else
  # Against the release's Debian 11 root when there is one (RANKCHECK_SYSROOT, else
  # the one scripts/release.sh made, linked from build-release/ or in its cache), so that the fake needs no newer glibc than
  # the binary; else with this machine's compiler and its glibc.
  sysroot=${RANKCHECK_SYSROOT:-$(readlink -f build-release/sysroot 2>/dev/null || true)}
  if [[ -z $sysroot || ! -e $sysroot/.rankcheck-sysroot ]]; then
    if [[ -n ${RANKCHECK_CACHE:-} ]]; then cache=$RANKCHECK_CACHE  # as scripts/release.sh
    elif [[ -n ${XDG_CACHE_HOME:-} ]]; then cache=$XDG_CACHE_HOME/rankcheck
    elif [[ -n ${HOME:-} ]]; then cache=$HOME/.cache/rankcheck
    else cache=/var/cache/rankcheck; fi
    # This machine's architecture: not the arm64 root (its recipe says foreign).
    sysroot=
    for stamp in "$cache"/sysroot-*/.rankcheck-sysroot; do
      [[ -f $stamp ]] && ! grep -q ' foreign ' "$stamp" && { sysroot=${stamp%/.rankcheck-sysroot}; break; }
    done
  fi
  flags=(-std=c++20 -O2 -fPIC -shared -pthread -static-libstdc++ -static-libgcc)
  if [[ -n $sysroot && -e $sysroot/usr/include/stdio.h ]]; then
    echo "gpu-bundle: building the fake against $sysroot"
    clang++ --target=x86_64-linux-gnu --sysroot="$sysroot" --gcc-toolchain="$sysroot/usr" \
      -include cmake/release-prelude.h -fuse-ld=lld "${flags[@]}" \
      -o "$out/lib/libfakegpu.so" tests/fake/fake_gpu.cc ||
      die "building tests/fake/fake_gpu.cc against $sysroot failed"
  else
    echo "gpu-bundle: no release sysroot (scripts/release.sh makes one): the fake needs this machine's glibc"
    ${CXX:-c++} "${flags[@]}" -o "$out/lib/libfakegpu.so" tests/fake/fake_gpu.cc ||
      die "building tests/fake/fake_gpu.cc failed (or give one with RANKCHECK_FAKE_GPU=)"
  fi
fi
cp scripts/gpu-check.sh "$out/gpu-check.sh"
cat >"$out/run.sh" <<'EOF'
#!/usr/bin/env bash
# Every GPU check on this machine, with the rankcheck beside this file; one table at
# the end. Exit 0 when every check came out as expected.
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/gpu-check.sh" "$here/rankcheck"
EOF
chmod 0755 "$out/run.sh" "$out/gpu-check.sh"

# The binary and the fake work together (the check's stuck rank runs on them), and
# the binary carries the real GPU stage.
gpu_state=$(RANKCHECK_CUDA_LIB=$out/lib/libfakegpu.so RANKCHECK_NCCL_LIB=$out/lib/libfakegpu.so \
  FAKE_GPUS=GPU-fa4e0000-0000-0000-0000-000000000000 \
  "$out/rankcheck" env --json --rank 0 --world-size 1 --master-addr 127.0.0.1 --resolve-timeout 1 |
  sed -nE 's/.*"state": *"([a-z-]+)".*/\1/p' | head -1)
[[ $gpu_state == usable ]] ||
  die "$out/rankcheck with $out/lib/libfakegpu.so reports the GPU state '${gpu_state:-?}', not usable (a binary without the GPU stage says not-built)"
glibc_floor() {
  objdump -T "$1" 2>/dev/null | grep -oE 'GLIBC_[0-9]+(\.[0-9]+)*' | sed 's/GLIBC_//' | sort -uV | tail -1
}
(cd "$out" && find . -type f ! -name SHA256SUMS -print0 | sort -z | xargs -0 sha256sum >SHA256SUMS)

size=$(find "$out" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
if ((size > max_bytes)); then
  echo "gpu-bundle: $out is $size bytes, over the $max_bytes allowed (by $((size - max_bytes))):" >&2
  find "$out" -type f -printf '  %10s %p\n' >&2
  exit 1
fi
echo "gpu-bundle: $out: $size bytes of $max_bytes allowed; glibc needed: rankcheck $(glibc_floor "$out/rankcheck"), lib/libfakegpu.so $(glibc_floor "$out/lib/libfakegpu.so")"
echo "gpu-bundle: $("$out/rankcheck" --version)"
echo "gpu-bundle: on the GPU machine: $out/run.sh"
