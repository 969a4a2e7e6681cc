#!/usr/bin/env bash
# Installs the Debian packages rankcheck needs that are missing, and nothing else.
#   scripts/setup.sh build   compilers and libraries
#   scripts/setup.sh release the build's, plus what scripts/release.sh builds with
#   scripts/setup.sh test    all of the above, plus what the tests run against
set -euo pipefail

profile=${1:-build}
build_pkgs=(cmake ninja-build g++ pkg-config libcli11-dev libfmt-dev catch2 libasio-dev
            nlohmann-json3-dev libssl-dev zlib1g-dev)
# The release build: clang and lld against a Debian 11 root that debootstrap makes
# (clang 16 for aarch64: clang 14 miscompiles Asio's coroutines there; llvm-16 for its
# llvm-objcopy-16, which reads the aarch64 binary: clang-16 only recommends it, and
# recommends are not installed);
# objcopy and objdump (binutils) split the debug info and read the glibc versions;
# qemu-user-static runs the aarch64 binary here; ccache keeps its objects across
# clean clones.
release_pkgs=(clang clang-16 llvm-16 lld binutils debootstrap qemu-user-static ccache)
# The tests run real launchers: Slurm (with munge), Open MPI, torchrun (python3-torch),
# and parse the Kubernetes manifests (python3-yaml); the wheel is installed into a
# fresh venv (python3-venv); the network path tests put
# firewalls (nft, iptables) inside the network namespaces they make; promtool
# (prometheus) checks the metrics file and the alert rules; scripts/image.sh builds
# and runs the container image with podman and what podman runs containers with.
test_pkgs=(python3 python3-yaml python3-venv iproute2 procps util-linux slurm-wlm munge openmpi-bin
           libopenmpi-dev python3-torch nftables iptables prometheus
           buildah podman fuse-overlayfs crun runc slirp4netns uidmap debootstrap faketime)

case "$profile" in
  build) want=("${build_pkgs[@]}") ;;
  release) want=("${build_pkgs[@]}" "${release_pkgs[@]}") ;;
  test) want=("${build_pkgs[@]}" "${release_pkgs[@]}" "${test_pkgs[@]}") ;;
  *) echo "setup.sh: unknown profile '$profile' (build, release or test)" >&2; exit 2 ;;
esac

missing=()
for p in "${want[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#want[@]} packages present"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# sudo drops the environment by default: pass the one variable apt-get needs.
[[ ${#sudo[@]} -eq 0 ]] || sudo+=(env DEBIAN_FRONTEND=noninteractive)
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
