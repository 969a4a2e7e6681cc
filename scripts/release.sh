#!/usr/bin/env bash
# Builds the release binaries into dist/, for the machines rankcheck runs on: any
# x86-64 or aarch64 (Grace: GH200, GB200) Linux with glibc 2.28 or newer (RHEL/Rocky
# 8 and up, Ubuntu 20.04 and up, Debian 10 and up), inside any training image.
#   scripts/release.sh                         both
#   RANKCHECK_ARCHES=x86_64 scripts/release.sh one of them
#
#   dist/rankcheck          stripped; needs only glibc (libstdc++, libgcc and
#                           libcrypto are inside)
#   dist/rankcheck-mpi      the same with --bootstrap mpi (when Open MPI's headers are
#                           here); also needs libmpi.so.40 (Open MPI 3.0 or newer)
#   dist/*.debug            their debug info, found by gdb through the build id or
#                           the debuglink
#   dist/rankcheck_<version>_amd64.deb   rankcheck, its docs and the launcher recipes
#                           (CPack, from CMake's install() rules)
#   dist/rankcheck-<version>-py3-none-manylinux_2_<floor>_x86_64.whl   dist/rankcheck
#                           and the Python module (scripts/wheel.py): pip install it
#   dist/aarch64/rankcheck, dist/aarch64/rankcheck.debug, dist/rankcheck_<version>_arm64.deb,
#   dist/rankcheck-<version>-py3-none-manylinux_2_<floor>_aarch64.whl   the same for
#                           aarch64 (no rankcheck-mpi: the arm64 root has no Open MPI)
#   dist/SHA256SUMS         every file above
#
# Debian 12's clang compiles against a Debian 11 sysroot (glibc 2.31, GCC 10's
# libstdc++, OpenSSL 1.1.1) made with debootstrap on the first run and cached in
# $RANKCHECK_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/rankcheck);
# cmake/release-toolchain.cmake says how. The arm64 root is made without running
# anything of it (debootstrap --foreign, then its packages unpacked), and the
# aarch64 binary is compiled with clang's --target; only qemu-user runs it here.
# The script fails when a binary needs a glibc symbol version above
# $RANKCHECK_GLIBC_MAX (2.28, checked with objdump -T), links a library it should
# not, lacks the real GPU stage, or is over 10 MB. scripts/release-check.sh then
# runs the x86_64 binaries inside that Debian 11 root, and
# scripts/release-check-aarch64.sh the aarch64 one under qemu-user.
set -euo pipefail
cd "$(dirname "$0")/.."
root_dir=$PWD
dist=dist
glibc_max=${RANKCHECK_GLIBC_MAX:-2.28}
max_bytes=$((10 * 1000 * 1000))
read -r -a arches <<<"${RANKCHECK_ARCHES:-x86_64 aarch64}"

die() { echo "release: $*" >&2; exit 1; }

for arch in "${arches[@]}"; do
  [[ $arch == x86_64 || $arch == aarch64 ]] ||
    die "RANKCHECK_ARCHES names '$arch': the release is built for x86_64 and aarch64"
done
[[ $(uname -m) == x86_64 ]] || die "the release is built on an x86_64 machine (this is $(uname -m))"

scripts/setup.sh release

sudo=()
[[ $(id -u) -eq 0 ]] || sudo=(sudo)

# What differs between the two: Debian's name for the architecture, the build
# folder, where in dist/ the binaries go, the dynamic loader they may need, and
# the objcopy that reads them (binutils' knows only this machine's; LLVM's, from
# the llvm-16 package, reads any).
set_arch() {
  arch=$1
  case $arch in
    x86_64) deb_arch=amd64 build=build-release out=$dist loader='ld-linux-x86-64\.so\.2'
            objcopy=objcopy ;;
    aarch64) deb_arch=arm64 build=build-release-aarch64 out=$dist/aarch64
             loader='ld-linux-aarch64\.so\.1' objcopy=llvm-objcopy-16 ;;
  esac
}

# -- the sysroots: Debian 11 with the C library, GCC 10's C++ library and OpenSSL ----
# A folder is named after what goes into it, so a change of the list makes a new
# one; a finished root has a stamp, and one half made (an interrupted run) is redone.
suite=bullseye
sysroot_pkgs=libc6-dev,libstdc++-10-dev,libssl-dev
if [[ -n ${RANKCHECK_CACHE:-} ]]; then cache=$RANKCHECK_CACHE
elif [[ -n ${XDG_CACHE_HOME:-} ]]; then cache=$XDG_CACHE_HOME/rankcheck
elif [[ -n ${HOME:-} ]]; then cache=$HOME/.cache/rankcheck
else cache=/var/cache/rankcheck; fi

make_sysroot() {  # ROOT RECIPE
  local root=$1 recipe=$2
  local tmp=$root.partial log=$cache/debootstrap-$deb_arch.log
  "${sudo[@]}" rm -rf "$tmp"
  echo "release: making the $suite $deb_arch sysroot in $root (debootstrap, a minute or two; once)"
  # The default mirror, or RANKCHECK_DEBIAN_MIRROR.
  local foreign=()
  [[ $arch == x86_64 ]] || foreign=(--foreign "--arch=$deb_arch")
  if ! "${sudo[@]}" debootstrap "${foreign[@]}" --variant=minbase --include="$sysroot_pkgs" \
    "$suite" "$tmp" ${RANKCHECK_DEBIAN_MIRROR:+"$RANKCHECK_DEBIAN_MIRROR"} >"$log" 2>&1; then
    tail -20 "$log" >&2
    die "debootstrap $suite ($deb_arch) failed (log: $log)"
  fi
  local dirs=("$tmp/usr/lib" "$tmp/usr/lib64")
  if ((${#foreign[@]})); then
    # The first stage unpacked only the base; the rest (the -dev packages) waits in
    # apt's cache for a second stage that would run the other machine's programs.
    # Only their files are needed: unpacked, never configured.
    local deb
    for deb in "$tmp"/var/cache/apt/archives/*.deb; do
      "${sudo[@]}" dpkg-deb -x "$deb" "$tmp" || die "cannot unpack $deb into the $deb_arch root"
    done
    [[ -L $tmp/lib ]] || dirs+=("$tmp/lib")
  fi
  # The linker reads the root's symlinks from outside it: an absolute one
  # (libpthread.so -> /lib/x86_64-linux-gnu/libpthread.so.0) would name the host's.
  local link target
  while IFS= read -r -d '' link; do
    target=$(readlink "$link")
    "${sudo[@]}" ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$tmp$target")" "$link"
  done < <(find "${dirs[@]}" -type l -lname '/*' -print0 2>/dev/null)
  echo "$recipe" | "${sudo[@]}" tee "$tmp/.rankcheck-sysroot" >/dev/null
  "${sudo[@]}" mv "$tmp" "$root"
}

# Sets sysroot to the root for $arch, made first when missing.
find_sysroot() {
  local recipe="$suite $sysroot_pkgs relative-links-1"
  [[ $arch == x86_64 ]] || recipe="$suite $sysroot_pkgs $deb_arch foreign relative-links-1"
  sysroot=$cache/sysroot-$suite-$(echo "$recipe" | sha256sum | cut -c1-12)
  mkdir -p "$cache"
  if [[ ! -f "$sysroot/.rankcheck-sysroot" ]]; then
    # One maker at a time: a second run waits, then finds the root made.
    exec 9>"$cache/.lock"
    flock 9
    [[ -f "$sysroot/.rankcheck-sysroot" ]] || make_sysroot "$sysroot" "$recipe"
    exec 9>&-
  fi
  echo "release: $arch sysroot $sysroot ($(cat "$sysroot/etc/debian_version" 2>/dev/null || echo '?'))"
}

# -- the header-only libraries: Debian 12's, the ones the normal build uses -----
# Copied from this machine's packages into a folder of their own, so that the
# compiler sees them without seeing the rest of /usr/include. One for both
# architectures: nothing in it is compiled.
stage="build-release/stage"
stage_pkgs=(libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev libasio-dev)
stage_stamp=$(dpkg-query -W "${stage_pkgs[@]}")
if [[ ! -f "$stage/.stamp" || "$(cat "$stage/.stamp")" != "$stage_stamp" ]]; then
  rm -rf "$stage"
  mkdir -p "$stage"
  dpkg -L "${stage_pkgs[@]}" | grep -vE '^/usr/share/(doc|man)/' | sort -u |
    while IFS= read -r f; do [[ -d "$f" && ! -L "$f" ]] || echo "${f#/}"; done |
    tar -C / --no-recursion -cf - -T - | tar -C "$stage" -xf -
  echo "$stage_stamp" >"$stage/.stamp"
fi

# ccache keeps the objects across runs and clean clones (CI clones afresh): paths
# under the checkout are hashed relative to it, and the toolchain maps them out of
# the objects.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-$cache/ccache} CCACHE_BASEDIR=$root_dir CCACHE_NOHASHDIR=true
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

# The highest GLIBC_x.y version any of the binaries needs.
glibc_floor() {
  objdump -T "$@" | grep -oE 'GLIBC_[0-9]+(\.[0-9]+)*' | sed 's/GLIBC_//' | sort -uV | tail -1
}

# Runs a binary of $arch here: natively, or under qemu-user with the root's loader
# and libraries.
run_here() {
  if [[ $arch == x86_64 ]]; then "$@"; else qemu-aarch64-static -L "$sysroot" "$@"; fi
}

# -- configure and build ------------------------------------------------------
# Each configure starts from no cache, so that the toolchain file's flags are read
# anew (they are cached otherwise); the objects stay, and only what changed is
# rebuilt. The floor --version states is the one measured last with this sysroot
# (kept beside it, so that a fresh clone builds once).
configure() {
  local floor_file=$sysroot.floor mpi=()
  # The arm64 root has no Open MPI to link rankcheck-mpi against.
  [[ $arch == x86_64 ]] || mpi=(-DRANKCHECK_MPI=OFF)
  rm -f "$build/CMakeCache.txt"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
    -DCMAKE_TOOLCHAIN_FILE="$root_dir/cmake/release-toolchain.cmake" \
    -DCMAKE_PROJECT_INCLUDE="$root_dir/cmake/release-project.cmake" \
    -DRANKCHECK_ARCH="$arch" -DRANKCHECK_SYSROOT:PATH="$sysroot" \
    -DRANKCHECK_STAGE:PATH="$root_dir/$stage" \
    -DRANKCHECK_GLIBC_FLOOR="$(cat "$floor_file" 2>/dev/null || true)" \
    -DRANKCHECK_PACKAGE_BINARY:FILEPATH="$root_dir/$out/rankcheck" \
    -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON "${mpi[@]}" \
    -DRANKCHECK_TESTS=OFF -DRANKCHECK_WERROR=ON >"$build/configure.log" 2>&1 ||
    { cat "$build/configure.log" >&2; die "cmake configure ($arch) failed"; }
}

# Builds $arch's binaries into $build and checks them: targets names them.
build_arch() {
  mkdir -p "$build"
  ln -sfn "$sysroot" "$build/sysroot"  # for scripts/release-check.sh
  configure
  grep -E '^-- rankcheck:' "$build/configure.log" | sed "s/^/$arch /" || true
  grep -q -- '-- rankcheck: GPU stage with' "$build/configure.log" ||
    die "no CUDA/NCCL headers found: a release binary must carry the real GPU stage"
  targets=(rankcheck)
  grep -q -- '-- rankcheck: building rankcheck-mpi' "$build/configure.log" && targets+=(rankcheck-mpi)

  # Every header folder on a compile line is the sysroot's, the stage's, the
  # project's, or one that holds nothing of the C library (CUDA, NCCL, Open MPI):
  # a host folder with C library headers would bring glibc 2.36's declarations back.
  local dir
  while IFS= read -r dir; do
    [[ $dir == "$sysroot"/* || $dir == "$root_dir"/* ]] && continue
    [[ -e "$dir/stdio.h" || -e "$dir/pthread.h" || -e "$dir/c++" ]] &&
      die "a host header folder reaches the $arch release build: $dir"
  done < <(grep -oE -- '(-I|-isystem ?)/[^ "]+' "$build/compile_commands.json" |
           sed -E 's/^(-I|-isystem ?)//' | sort -u)

  ninja -C "$build" "${targets[@]}"
  local floor_file=$sysroot.floor
  floor=$(glibc_floor "${targets[@]/#/$build/}")
  # --version states the floor: a new floor recompiles main.cc and links again.
  if [[ $(cat "$floor_file" 2>/dev/null || true) != "$floor" ]]; then
    echo "$floor" >"$floor_file"
    configure
    ninja -C "$build" "${targets[@]}"
    [[ $(glibc_floor "${targets[@]/#/$build/}") == "$floor" ]] ||
      die "the glibc floor moved when --version was rebuilt"
  fi

  local t bin need allowed extra
  for t in "${targets[@]}"; do
    bin=$build/$t
    need=$(glibc_floor "$bin")
    if [[ $(printf '%s\n%s\n' "$need" "$glibc_max" | sort -V | tail -1) != "$glibc_max" ]]; then
      echo "release: $arch $t needs glibc $need, above the $glibc_max allowed; the symbols:" >&2
      objdump -T "$bin" | grep -E "GLIBC_$need([^.0-9]|$)" >&2
      exit 1
    fi
    # Only glibc's libraries, and libmpi for rankcheck-mpi.
    allowed="^(libc\\.so\\.6|libm\\.so\\.6|libdl\\.so\\.2|libpthread\\.so\\.0|librt\\.so\\.1|$loader"
    [[ $t == rankcheck-mpi ]] && allowed+='|libmpi\.so\.[0-9]+'
    allowed+=')$'
    extra=$(readelf -d "$bin" | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p' | grep -vE "$allowed" || true)
    [[ -z "$extra" ]] || die "$arch $t links ${extra//$'\n'/ }: only glibc's libraries may be needed"
  done
}

# Stripped binaries into $out with their debug info beside them, the .deb and the
# wheel into dist/.
package_arch() {
  mkdir -p "$out"
  local t line
  for t in "${targets[@]}"; do
    "$objcopy" --only-keep-debug --compress-debug-sections=zlib "$build/$t" "$out/$t.debug"
    # The debuglink names the file beside the binary; gdb finds it there, or by the
    # build id under /usr/lib/debug/.build-id/.
    (cd "$out" && "$objcopy" --strip-all --add-gnu-debuglink="$t.debug" "$root_dir/$build/$t" "$t")
    chmod 0644 "$out/$t.debug"
  done
  local size version_line
  size=$(stat -c %s "$out/rankcheck")
  ((size <= max_bytes)) || die "$out/rankcheck is $size bytes, over the $max_bytes allowed"
  version_line=$(run_here "$out/rankcheck" --version)
  [[ $version_line == *"(glibc $floor or newer)" ]] ||
    die "$out/rankcheck --version says '$version_line', not its floor $floor"
  version=$(sed -nE 's/^rankcheck ([^ ]+) .*/\1/p' <<<"$version_line")
  versions+=("$arch: $version_line")

  # The .deb: the binary, its docs and the launcher recipes. CPack, from CMake's
  # install() rules, with $out/rankcheck itself as the binary
  # (RANKCHECK_PACKAGE_BINARY, set at configure) and libc6 from the floor on.
  rm -rf "$build/cpack"
  (cd "$build" && cpack -G DEB -B "$root_dir/$build/cpack") >"$build/cpack.log" 2>&1 ||
    { cat "$build/cpack.log" >&2; die "cpack ($arch) failed"; }
  local deb=$build/cpack/rankcheck_${version}_${deb_arch}.deb
  [[ -f $deb ]] || { cat "$build/cpack.log" >&2; die "cpack made no $deb"; }
  # What CPack packed is what was checked above, and needs glibc from its floor on.
  dpkg-deb --fsys-tarfile "$deb" | tar -xOf - ./usr/bin/rankcheck | cmp -s - "$out/rankcheck" ||
    die "$deb carries another usr/bin/rankcheck than $out/rankcheck"
  [[ $(dpkg-deb -f "$deb" Depends) == "libc6 (>= $floor)" ]] ||
    die "$deb depends on '$(dpkg-deb -f "$deb" Depends)', not libc6 (>= $floor)"
  mv "$deb" "$dist/"
  made+=("${deb##*/}")
  # The wheel: $out/rankcheck and python/rankcheck, tagged by its glibc floor.
  local wheel
  wheel=$(python3 scripts/wheel.py "$out/rankcheck" --out "$dist")
  [[ $wheel == *"-py3-none-manylinux_${floor/./_}_${arch}.whl" ]] ||
    die "the wheel $wheel is not tagged with the floor $floor and $arch"
  made+=("${wheel##*/}")
  for t in "${targets[@]}"; do
    printf -v line 'release: %-20s %8d bytes, glibc %s, needs %s' "$out/$t" "$(stat -c %s "$out/$t")" \
      "$(glibc_floor "$out/$t")" \
      "$(readelf -d "$out/$t" | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p' | paste -sd' ')"
    lines+=("$line")
  done
}

# Every architecture is built and checked before dist/ is replaced: a failed
# build leaves the last release there.
declare -A arch_targets arch_floor arch_sysroot
for a in "${arches[@]}"; do
  set_arch "$a"
  find_sysroot
  build_arch
  arch_targets[$a]="${targets[*]}" arch_floor[$a]=$floor arch_sysroot[$a]=$sysroot
done

rm -rf "$dist"
mkdir -p "$dist"
versions=() made=() lines=()
for a in "${arches[@]}"; do
  set_arch "$a"
  read -r -a targets <<<"${arch_targets[$a]}"
  floor=${arch_floor[$a]} sysroot=${arch_sysroot[$a]}
  package_arch
done
(cd "$dist" && find . -type f ! -name SHA256SUMS -printf '%P\0' | sort -z |
  xargs -0 sha256sum >SHA256SUMS)

printf 'release: %s\n' "${versions[@]}"
printf '%s\n' "${lines[@]}"
printf 'release: dist/%s\n' "${made[@]}"
