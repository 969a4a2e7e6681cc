#!/usr/bin/env bash
# Builds the container image of launchers/kubernetes/Dockerfile with podman, from
# the release binary in dist/ (scripts/release.sh), and runs it.
#   scripts/image.sh
#
#   1. the base the Dockerfile names (debian:12-slim), when podman has no image of
#      that name: made from Debian's archive (debootstrap --variant=minbase bookworm,
#      about 2 minutes), kept as a tarball in $BUILD_DIR/image (default build/image)
#      and `podman import`ed under that name; no registry is needed
#   2. podman build --pull=never, from a context that holds only dist/rankcheck:
#      the stripped binary (its debug info stays in dist/rankcheck.debug)
#   3. smoke tests: `local -n 2 --no-gpu` exits 0; two containers on a podman network
#      (a /24 of 198.19.0.0/16) as two hosts, rank 0 and rank 1, the job token
#      mounted read-only: PASS, 2 ranks on 2 hosts; the same with a wrong MASTER_PORT
#      on rank 1: exit 4 on both, missing-rank and master-unreachable; the two pods
#      of launchers/kubernetes/job.yaml with the env Kubernetes would give their init
#      containers (tests/integration/k8s_pods.py): PASS; the .deb of dist/ installs in
#      a container of the base (dpkg -i) and `rankcheck local -n 2 --no-gpu` passes
#
# The image is tagged localhost/rankcheck:<version> (or $RANKCHECK_IMAGE).
# podman's defaults fail on some machines (cgroups v1 or hybrid, setrlimit not
# permitted): CONTAINERS_CONF points at a file with runc, cgroupfs and fixed ulimits
# unless it is set already. When the kernel lacks what containers need (namespaces,
# cgroups, veth or bridge devices) the script names it and exits 0 without testing;
# any other failure is an error (exit 1).
set -euo pipefail
cd "$(dirname "$0")/.."
root_dir=$PWD
build=${BUILD_DIR:-build}
cache=$build/image
bin=dist/rankcheck
base=debian:12-slim
suffix=$$
smoke_timeout=${RANKCHECK_IMAGE_TIMEOUT:-20}

die() { echo "image: $*" >&2; exit 1; }
say() { echo "image: $*"; }
# A missing kernel feature is not this project's failure: said plainly, then exit 0.
no_kernel_feature() {
  echo "image: SKIPPED: this kernel lacks $1, which containers need; the image was not built" >&2
  exit 0
}

command -v podman >/dev/null || die "podman is not installed: scripts/setup.sh test installs it"
[[ -x $bin ]] || die "no $bin: run scripts/release.sh first"

# -- what the kernel must have ------------------------------------------------
for ns in mnt uts ipc pid net; do
  [[ -e /proc/self/ns/$ns ]] || no_kernel_feature "$ns namespaces (/proc/self/ns/$ns)"
done
[[ -n "$(ls -A /sys/fs/cgroup 2>/dev/null)" ]] || no_kernel_feature "cgroups (/sys/fs/cgroup is empty)"
if [[ $(id -u) -eq 0 ]] && command -v ip >/dev/null && command -v unshare >/dev/null; then
  # podman networks are a bridge with a veth pair per container: tried in a
  # network namespace of their own, gone with it.
  for kind in bridge veth; do
    args=(rkcheck0 type "$kind")
    [[ $kind == veth ]] && args+=(peer name rkcheck1)
    if ! err=$(unshare --net ip link add "${args[@]}" 2>&1); then
      [[ $err == *"not supported"* || $err == *"Unknown device type"* ]] &&
        no_kernel_feature "$kind network devices ($err)"
      die "cannot make a $kind device in a new network namespace: $err"
    fi
  done
fi

mkdir -p "$cache"
if [[ -z ${CONTAINERS_CONF:-} ]]; then
  export CONTAINERS_CONF=$root_dir/$cache/containers.conf
  cat >"$CONTAINERS_CONF" <<'EOF'
# Written by scripts/image.sh: podman's defaults (systemd cgroups, the crun runtime,
# raising rlimits to the host's) fail where cgroups are v1 or hybrid and setrlimit
# is not permitted.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF
fi
podman info >"$cache/podman-info.log" 2>&1 || { cat "$cache/podman-info.log" >&2; die "podman info failed"; }

version=$("$bin" --version | sed -nE 's/^rankcheck ([^ ]+) .*/\1/p')
[[ -n $version ]] || die "$bin --version names no version"
image=${RANKCHECK_IMAGE:-localhost/rankcheck:$version}
t0=$SECONDS

# -- 1. the base --------------------------------------------------------------
tarball=$cache/debian-bookworm-minbase.tar.gz
if podman image exists "$base"; then
  say "base $base: $(podman image inspect --format '{{.Id}}' "$base" | cut -c1-12) (already here)"
else
  if [[ ! -s $tarball ]]; then
    # One maker at a time; the tarball appears whole or not at all.
    exec 9>"$cache/.lock"
    flock 9
    if [[ ! -s $tarball ]]; then
      command -v debootstrap >/dev/null || die "debootstrap is not installed: scripts/setup.sh test"
      [[ $(id -u) -eq 0 ]] || die "debootstrap needs root to make $tarball"
      rootfs=$cache/rootfs.partial
      rm -rf "$rootfs"
      say "making $base from Debian's archive (debootstrap bookworm, about 2 minutes; once)"
      if ! debootstrap --variant=minbase bookworm "$rootfs" \
        ${RANKCHECK_DEBIAN_MIRROR:+"$RANKCHECK_DEBIAN_MIRROR"} >"$cache/debootstrap.log" 2>&1; then
        tail -20 "$cache/debootstrap.log" >&2
        die "debootstrap bookworm failed (log: $cache/debootstrap.log)"
      fi
      # What a slim image leaves out: the downloaded packages and the package lists.
      rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
      tar -C "$rootfs" --numeric-owner -cf - . | gzip -1 >"$tarball.partial"
      mv "$tarball.partial" "$tarball"
      rm -rf "$rootfs"
    fi
    exec 9>&-
  fi
  podman import -q --change 'CMD ["bash"]' "$tarball" "$base" >/dev/null ||
    die "podman import $tarball as $base failed"
  say "base $base imported from $tarball"
fi

# -- 2. the image -------------------------------------------------------------
# The binary is the release's, stripped: no symbol table and no DWARF in it.
sections=$(readelf -SW "$bin")
[[ $sections != *" .symtab "* && $sections != *" .debug_info "* ]] ||
  die "$bin is not stripped (scripts/release.sh strips it)"
[[ -s $bin.debug ]] || die "no $bin.debug beside $bin: the debug info ships separately"
context=$cache/context
rm -rf "$context"
mkdir -p "$context/dist"
cp "$bin" "$context/dist/rankcheck"
podman build --pull=never -q -f launchers/kubernetes/Dockerfile -t "$image" "$context" \
  >"$cache/build.log" 2>&1 || { cat "$cache/build.log" >&2; die "podman build failed"; }
want=$(sha256sum <"$bin" | cut -d' ' -f1)
got=$(podman run --rm --entrypoint sha256sum "$image" /usr/local/bin/rankcheck | cut -d' ' -f1)
[[ $got == "$want" ]] || die "the image's rankcheck is not $bin"
say "built $image ($(podman image inspect --format '{{.Size}}' "$image") bytes) in $((SECONDS - t0)) s"

# -- 3. smoke tests -----------------------------------------------------------
net=""
containers=()
work=$(mktemp -d)
cleanup() {
  local c
  for c in "${containers[@]}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
  [[ -z $net ]] || podman network rm -f "$net" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
# Interrupted (Ctrl-C, a CI timeout): the containers and the network go too.
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  local c
  for c in "${containers[@]}"; do
    echo "--- $c" >&2
    podman logs "$c" >&2 2>&1 || true
  done
  die "$*"
}

# local: two members in one container.
rc=0
out=$(timeout 60 podman run --rm "$image" local -n 2 --no-gpu --timeout "$smoke_timeout" 2>&1) ||
  rc=$?
((rc == 0)) || { echo "$out" >&2; die "podman run $image local -n 2 --no-gpu: exit $rc, not 0"; }
[[ $out == *PASS* ]] || { echo "$out" >&2; die "local -n 2 did not say PASS"; }
say "ok: local -n 2 --no-gpu"

# A network of its own: the first free /24 of 198.19.200.0-198.19.249.0.
net_err=""
for i in $(seq 200 249); do
  subnet=198.19.$i.0/24
  if net_err=$(podman network create --subnet "$subnet" "rankcheck-smoke-$suffix" 2>&1); then
    net=rankcheck-smoke-$suffix
    prefix=198.19.$i
    break
  fi
done
[[ -n $net ]] || die "podman network create failed for every subnet 198.19.200-249.0/24: $net_err"

# The job token, readable by the image's user (65534) alone, as a Secret would be.
token=$work/token
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$token"
chmod 0400 "$token"
if [[ $(id -u) -eq 0 ]]; then
  chown 65534:65534 "$token"
else
  podman unshare chown 65534:65534 "$token"
fi

# start NAME IP ARGS...: one detached container on the network.
start() {
  local name=$1 ip=$2
  shift 2
  containers+=("$name")
  podman run -d --name "$name" --network "$net" --ip "$ip" \
    -v "$token:/run/rankcheck/token:ro" -e RANKCHECK_TOKEN_FILE=/run/rankcheck/token \
    "$@" >/dev/null || fail "podman run $name failed"
}
# finish NAME: its exit code, once it ended (bounded: the run's own timeout, plus slack).
finish() {
  timeout $((smoke_timeout + 30)) podman wait "$1" || fail "$1 did not end in time"
}

two_hosts() {
  local tag=$1 port1=$2 timeout=$3
  start "rk-$tag-0-$suffix" "$prefix.10" --hostname gpu-01 -e RANK=0 -e WORLD_SIZE=2 \
    -e MASTER_ADDR="$prefix.10" -e MASTER_PORT=29500 "$image" run --no-gpu --timeout "$timeout" \
    --job-id "smoke-$tag"
  start "rk-$tag-1-$suffix" "$prefix.11" --hostname gpu-02 -e RANK=1 -e WORLD_SIZE=2 \
    -e MASTER_ADDR="$prefix.10" -e MASTER_PORT="$port1" "$image" run --no-gpu \
    --timeout "$timeout" --job-id "smoke-$tag"
  rc0=$(finish "rk-$tag-0-$suffix")
  rc1=$(finish "rk-$tag-1-$suffix")
  log0=$(podman logs "rk-$tag-0-$suffix" 2>&1)
  log1=$(podman logs "rk-$tag-1-$suffix" 2>&1)
}

two_hosts pass 29500 "$smoke_timeout"
[[ $rc0 == 0 && $rc1 == 0 ]] || fail "two hosts: exit $rc0 and $rc1, not 0"
[[ $log0 == *"2 ranks on 2 hosts"* && $log0 == *PASS* ]] ||
  fail "two hosts: rank 0 did not report PASS with 2 ranks on 2 hosts"
[[ $log0 == *"authenticated with the job token"* ]] || fail "two hosts: the run was not authenticated"
say "ok: two containers on $net ($subnet) as two hosts: PASS, 2 ranks on 2 hosts"

# Rank 1 knocks on the wrong port: it never reaches the master (master-unreachable),
# rank 0 waits for it to its deadline (missing-rank); both exit 4, incomplete.
two_hosts port 29501 5
[[ $rc0 == 4 && $rc1 == 4 ]] || fail "wrong MASTER_PORT: exit $rc0 and $rc1, not 4 and 4"
[[ $log0 == *"missing-rank"* ]] || fail "wrong MASTER_PORT: rank 0 does not report missing-rank"
[[ $log1 == *"master-unreachable"* && $log1 == *":29501"* ]] ||
  fail "wrong MASTER_PORT: rank 1 does not report master-unreachable on port 29501"
say "ok: a wrong MASTER_PORT on rank 1: exit 4, missing-rank and master-unreachable"

# The init container of launchers/kubernetes/job.yaml, with the env Kubernetes would
# give it, in the image (standing in for the training image); the pods resolve the
# index-0 pod's name as the kubelet and the cluster DNS would make them.
mapfile -t pods < <(cd tests/integration &&
  python3 k8s_pods.py job.yaml "$prefix.20" "$prefix.21") || die "tests/integration/k8s_pods.py failed"
((${#pods[@]} == 2)) || die "job.yaml makes ${#pods[@]} pods, not 2"
names=()
for pod in "${pods[@]}"; do
  # NUL-separated: name, then the podman run arguments.
  mapfile -d '' -t args < <(python3 - "$pod" "${pods[0]}" "$image" "$smoke_timeout" <<'EOF'
import json, sys
pod, first, image, timeout = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
argv = pod["argv"]
assert argv[0] == "/rankcheck/rankcheck", argv
run = argv[1:]
if "--timeout" in run:
    run[run.index("--timeout") + 1] = timeout
out = [pod["name"], "--ip", pod["ip"], "--hostname", pod["hostname"],
       "--add-host", f"{first['fqdn']}:{first['ip']}"]
for k, v in pod["env"].items():
    out += ["-e", f"{k}={v}"]
out += [image] + run + ["--no-gpu"]
sys.stdout.write("\0".join(out) + "\0")
EOF
  )
  name="${args[0]}-$suffix"
  names+=("$name")
  # The Secret's mount: the token at RANKCHECK_TOKEN_FILE.
  containers+=("$name")
  podman run -d --name "$name" --network "$net" -v "$token:/var/run/rankcheck/token:ro" \
    "${args[@]:1}" >/dev/null || fail "podman run $name failed"
done
for name in "${names[@]}"; do
  rc=$(finish "$name")
  [[ $rc == 0 ]] || fail "job.yaml: $name exited $rc"
done
log=$(podman logs "${names[0]}" 2>&1)
[[ $log == *PASS* && $log == *"8 ranks on 2 hosts"* ]] ||
  fail "job.yaml: the index-0 pod did not report PASS with 8 ranks on 2 hosts"
say "ok: launchers/kubernetes/job.yaml's two pods, as Kubernetes would start them: PASS, 8 ranks on 2 hosts"

# The .deb (CPack's, from scripts/release.sh) on a clean Debian 12: dpkg -i, then a run.
debs=(dist/rankcheck_*_amd64.deb)
[[ -f ${debs[0]} ]] || die "no dist/rankcheck_*_amd64.deb: run scripts/release.sh first"
out=$(timeout 120 podman run --rm -v "$root_dir/${debs[0]}:/tmp/rankcheck.deb:ro" "$base" \
  sh -c 'dpkg -i /tmp/rankcheck.deb >/dev/null && rankcheck local -n 2 --no-gpu --timeout 20' 2>&1) ||
  { echo "$out" >&2; die "${debs[0]} on $base: dpkg -i, then rankcheck local -n 2 --no-gpu failed"; }
[[ $out == *PASS* ]] || { echo "$out" >&2; die "${debs[0]} on $base: no PASS"; }
say "ok: ${debs[0]} installs on $base (dpkg -i) and rankcheck local -n 2 --no-gpu passes"
say "done in $((SECONDS - t0)) s: $image"
