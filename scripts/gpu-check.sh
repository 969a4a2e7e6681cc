#!/usr/bin/env bash
# The real GPU path, on a machine with an NVIDIA GPU, with a rankcheck binary built
# elsewhere (this script builds nothing):
#   scripts/gpu-check.sh [path/to/rankcheck]
# or, from the folder scripts/gpu-bundle.sh makes: dist/gpu-check/run.sh
#
# It finds the libraries first, as a bare GPU machine lays them out (nothing on
# LD_LIBRARY_PATH or in ldconfig needed):
#   the driver   the first of /usr/local/nvidia/lib64, /usr/local/nvidia/lib,
#                /usr/lib/x86_64-linux-gnu, /usr/lib64, /usr/lib/wsl/lib that holds
#                libcuda.so.1; it and the folder of libnvidia-ml.so.1 go first on
#                LD_LIBRARY_PATH (the stage opens libcuda.so.1 by bare name, and NCCL
#                opens libnvidia-ml.so.1 by bare name itself)
#   NCCL         RANKCHECK_NCCL_LIB, else pip's nvidia-nccl through every python3 on
#                PATH, then /opt/*/.venv/bin/python3 (by the package's __path__: the
#                nvidia package is a namespace package), else ldconfig,
#                /usr/local/cuda/lib64, /usr/lib/x86_64-linux-gnu
#   python3      the first on PATH, else /opt/*/.venv/bin/python3 (to read the JSON)
# RANKCHECK_GPU_ROOT (default: none) is put before every one of those folders, so
# that the tests lay out a machine in a folder of their own.
#
# Then it runs, each step under its own time limit (printed; all of them together
# stay under 4 minutes): the inventory (rankcheck env), a real job of one rank (NCCL
# init and an all-reduce into a sentinel-filled buffer), the same with
# ncclCommInitRankScalable, the timed bandwidth all-reduce, two ranks on one GPU
# (expects duplicate-gpu), an NCCL init that must be aborted, node mode over every
# GPU, rankcheck local over every GPU where there are several; and prints one table:
# check, result, time (and its limit), detail. Exit 0 when every check came out as
# expected, 1 otherwise, 2 when it cannot start.
#
# The aborted init: a world of two whose rank 1 joins but never calls init. Rank 1
# is a rankcheck on the fake libraries (lib/libfakegpu.so beside this script, as the
# bundle has it, else RANKCHECK_FAKE_GPU, else tests/libfakegpu.so beside the
# binary; copied under the driver's file name), told to report the real NCCL and
# CUDA versions and to hang in init, on the eighth of eight fake GPUs, whose PCI
# bus id no GPU here has. (A second real process stopped after it joined cannot
# stand in on one GPU: two real ranks there are duplicate-gpu, refused before
# NCCL.) Rank 0's real ncclCommInitRankConfig
# must be aborted at its deadline: nccl-init-timeout, exit 5, the process gone by
# the deadline + 3 s. GPU_CHECK_ABORT_TIMEOUT (default 12) is its --timeout.
#
# Against the fake libraries (no GPU: FAKE_GPUS listing fake GPUs) every check runs
# the same way; tests/integration/test_gpu_check.py does that.
set -u
here=$(cd "$(dirname "$0")" && pwd)
BIN=${1:-build/rankcheck}
[[ -x "$BIN" ]] || { echo "gpu-check: no rankcheck binary at $BIN" >&2; exit 2; }
ROOT=${RANKCHECK_GPU_ROOT:-}
ROOT=${ROOT%/}
if [[ -n ${RANKCHECK_FAKE_GPU:-} ]]; then FAKE_LIB=$RANKCHECK_FAKE_GPU
elif [[ -e $here/lib/libfakegpu.so ]]; then FAKE_LIB=$here/lib/libfakegpu.so
else FAKE_LIB=$(dirname "$BIN")/tests/libfakegpu.so; fi
ABORT_TIMEOUT=${GPU_CHECK_ABORT_TIMEOUT:-12}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rows=()
failed=0

# -- time limits: each step's, in seconds, and the worst case -----------------
# A step past its limit is sent SIGTERM, then SIGKILL KILL_AFTER s later. rankcheck's
# own --timeout is each limit less 5 s, so that a step ends on its own first.
KILL_AFTER=2
LIMIT_SMI=6 LIMIT_ENV=12 LIMIT_ONE=30 LIMIT_STDOUT=20 LIMIT_SCALABLE=20 LIMIT_BW=20 LIMIT_DUP=15
LIMIT_ABORT=$(awk -v t="$ABORT_TIMEOUT" 'BEGIN { printf "%d", t + 6.999 }')
LIMIT_NODE=20 LIMIT_LOCAL=25
# Finding the libraries: at most MAX_PYTHONS pythons asked for pip's NCCL and one
# asked where the loader finds the driver, LIMIT_PY s each (then SIGKILL 1 s after).
LIMIT_PY=6 MAX_PYTHONS=3
probes=$(((MAX_PYTHONS + 1) * (LIMIT_PY + 1)))
one_gpu=$((probes + LIMIT_SMI + 2 * LIMIT_ENV + LIMIT_ONE + LIMIT_STDOUT + LIMIT_SCALABLE +
           LIMIT_BW + LIMIT_DUP + LIMIT_ABORT + LIMIT_NODE + 9 * KILL_AFTER))
several=$((one_gpu + LIMIT_LOCAL + KILL_AFTER))

now() { date +%s.%N; }
# row CHECK RESULT START LIMIT DETAIL: one line of the table; any result but ok fails.
row() {
  local took
  took=$(awk -v a="$3" -v b="$(now)" -v l="$4" 'BEGIN { printf "%.1f/%d s", b - a, l }')
  rows+=("$(printf '%-24s %-7s %-11s %s' "$1" "$2" "$took" "$5")")
  [[ "$2" == ok ]] || failed=1
}
ok_if() { if "$@"; then echo ok; else echo FAILED; fi; }
# limited LIMIT CMD...: runs CMD under LIMIT seconds (then SIGTERM, SIGKILL after).
limited() { local l=$1; shift; timeout -k "$KILL_AFTER" "$l" "$@"; }
probe() { timeout -k 1 "$LIMIT_PY" "$@"; }
# "exit N", or what a step that `timeout` ended was.
exit_text() {
  case $1 in
    124) echo "killed at its time limit (exit 124)" ;;
    137) echo "killed at its time limit + ${KILL_AFTER} s (exit 137)" ;;
    *) echo "exit $1" ;;
  esac
}

# -- the libraries --------------------------------------------------------------
driver_dirs=("$ROOT/usr/local/nvidia/lib64" "$ROOT/usr/local/nvidia/lib"
             "$ROOT/usr/lib/x86_64-linux-gnu" "$ROOT/usr/lib64" "$ROOT/usr/lib/wsl/lib")
first_with() {  # first_with FILE DIR...: the first DIR holding FILE
  local f=$1 d; shift
  for d in "$@"; do [[ -e "$d/$f" ]] && { echo "$d"; return 0; }; done
  return 1
}
cuda_dir=$(first_with libcuda.so.1 "${driver_dirs[@]}")
nvml_dir=$(first_with libnvidia-ml.so.1 ${cuda_dir:+"$cuda_dir"} "${driver_dirs[@]}")
search=()
[[ -n $cuda_dir ]] && search+=("$cuda_dir")
[[ -n $nvml_dir && $nvml_dir != "$cuda_dir" ]] && search+=("$nvml_dir")
if ((${#search[@]})); then
  joined=$(IFS=:; echo "${search[*]}")
  export LD_LIBRARY_PATH=$joined${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

# Every python3 on PATH, then the venvs under /opt, each once (a venv is its
# folder, whose python3 links to the system's; another python3 is the file it is).
pythons=()
seen=" "
py_key() {
  local venv
  venv=$(dirname "$(dirname "$1")")
  if [[ -e $venv/pyvenv.cfg ]]; then echo "venv:$(readlink -f "$venv")"; else readlink -f "$1"; fi
}
IFS=: read -r -a path_dirs <<<"${PATH:-}"
for p in "${path_dirs[@]/%//python3}" "$ROOT"/opt/*/.venv/bin/python3; do
  [[ -x $p ]] || continue
  k=$(py_key "$p")
  [[ $seen == *" $k "* ]] && continue
  seen+="$k "
  ((${#pythons[@]} < MAX_PYTHONS)) && pythons+=("$p")
done
PY=${pythons[0]:-}
[[ -n $PY ]] || { echo "gpu-check: no python3 on PATH or under $ROOT/opt/*/.venv" >&2; exit 2; }
# pip's NCCL, from each package folder of nvidia.nccl (nvidia/nccl/lib), else any
# nvidia/*/lib (the CUDA 13 wheels' nvidia/cu13/lib).
nccl_from_pip='
import glob, os
try:
    import nvidia
except ImportError:
    raise SystemExit(1)
dirs = []
try:
    import nvidia.nccl
    dirs += [os.path.join(p, "lib") for p in nvidia.nccl.__path__]
except ImportError:
    pass
for p in nvidia.__path__:
    dirs += sorted(glob.glob(os.path.join(p, "*", "lib")))
for d in dirs:
    if os.path.exists(os.path.join(d, "libnccl.so.2")):
        print(os.path.join(d, "libnccl.so.2"))
        raise SystemExit(0)
raise SystemExit(1)'
nccl_how="RANKCHECK_NCCL_LIB"
if [[ -z "${RANKCHECK_NCCL_LIB:-}" ]]; then
  nccl_how=""
  for p in "${pythons[@]}"; do
    lib=$(probe "$p" -c "$nccl_from_pip" 2>/dev/null) &&
      { export RANKCHECK_NCCL_LIB=$lib; nccl_how="pip's nvidia-nccl through $p"; break; }
  done
fi
# A venv whose python does not start (its interpreter link dangles outside the
# image it was made in) still holds pip's NCCL: found by its path.
if [[ -z "${RANKCHECK_NCCL_LIB:-}" ]]; then
  for c in "$ROOT"/opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib/libnccl.so.2; do
    [[ -e $c ]] && { export RANKCHECK_NCCL_LIB=$c; nccl_how="pip's nvidia package at $c"; break; }
  done
fi
if [[ -z "${RANKCHECK_NCCL_LIB:-}" ]]; then
  cands=("$ROOT/usr/local/cuda/lib64/libnccl.so.2" "$ROOT/usr/lib/x86_64-linux-gnu/libnccl.so.2")
  if [[ -z $ROOT ]]; then
    mapfile -t known < <(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2/ {print $NF}')
    cands=(${known[@]+"${known[@]}"} "${cands[@]}")
  fi
  for c in "${cands[@]}"; do
    [[ -e $c ]] && { export RANKCHECK_NCCL_LIB=$c; nccl_how="found at $c"; break; }
  done
fi
# Where the loader resolves the bare names, with the search path above: what the
# stage and NCCL will get.
resolve='
import ctypes, sys
for name in sys.argv[1:]:
    try:
        ctypes.CDLL(name)
    except OSError as e:
        print(name, "-", "not found:", str(e).split(":")[-1].strip())
        continue
    with open("/proc/self/maps") as f:
        paths = {l.split()[-1] for l in f if "/" in l and name.split(".so")[0] + ".so" in l}
    print(name, min(paths) if paths else "?")'
resolved=$(probe "$PY" -c "$resolve" libcuda.so.1 libnvidia-ml.so.1 2>&1)
where() { awk -v n="$1" '$1 == n { $1 = ""; sub(/^ /, ""); print }' <<<"$resolved"; }

echo "== rankcheck $("$BIN" --version) · $(uname -n)"
echo "   driver folder:  ${cuda_dir:-none found: libcuda.so.1 from the loader path}"
echo "   libcuda.so.1:   $(where libcuda.so.1)"
echo "   libnvidia-ml:   $(where libnvidia-ml.so.1)"
echo "   NCCL:           ${RANKCHECK_NCCL_LIB:-libnccl.so.2 (loader default)}${nccl_how:+ ($nccl_how)}"
echo "   python3:        $PY"
echo "   LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
echo "   fake library for the stuck rank: $FAKE_LIB"
echo "   time limits: each step's below; worst case $one_gpu s on one GPU, $several s on several"
t=$(now)
# Both driver libraries found by bare name (from the folder above, or the loader's
# own path), and an NCCL to load.
libs_ok=FAILED
[[ -n ${RANKCHECK_NCCL_LIB:-} && $(where libcuda.so.1) == /* &&
   $(where libnvidia-ml.so.1) == /* ]] && libs_ok=ok
row "libraries" "$libs_ok" "$t" "$probes" \
  "libcuda $(where libcuda.so.1); nvml $(where libnvidia-ml.so.1); nccl ${RANKCHECK_NCCL_LIB:-none}"

json() { "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@" 2>/dev/null; }
port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

smi=$(command -v nvidia-smi || true)
[[ -z $smi && -x $ROOT/usr/local/nvidia/bin/nvidia-smi ]] && smi=$ROOT/usr/local/nvidia/bin/nvidia-smi
if [[ -n $smi ]]; then
  echo; echo "== $smi -L (limit $LIMIT_SMI s)"
  limited "$LIMIT_SMI" "$smi" -L
fi

echo; echo "== inventory: rankcheck env (limit $LIMIT_ENV s, twice)"
t=$(now)
limited "$LIMIT_ENV" "$BIN" env --rank 0 --world-size 1 --master-addr 127.0.0.1 --resolve-timeout 1
limited "$LIMIT_ENV" "$BIN" env --json --rank 0 --world-size 1 --master-addr 127.0.0.1 \
  --resolve-timeout 1 >"$work/env.json"
ngpu=$(json "$work/env.json" 'j["self"]["gpu"]["device_count"] or 0')
state=$(json "$work/env.json" 'j["self"]["gpu"]["state"]')
gerr=$(json "$work/env.json" 'j["self"]["gpu"].get("error", "")')
nccl=$(json "$work/env.json" 'j["self"]["gpu"]["nccl_version_text"] or "none"')
nccl_version=$(json "$work/env.json" 'j["self"]["gpu"]["nccl_version"] or ""')
nccl_path=$(json "$work/env.json" 'j["self"]["gpu"].get("nccl_path", "")')
cuda_version=$(json "$work/env.json" 'j["self"]["gpu"]["cuda_version"] or ""')
driver=$(json "$work/env.json" 'j["self"]["gpu"]["driver"]')
row "inventory" "$(ok_if [ "$state" == usable ])" "$t" $((2 * LIMIT_ENV)) \
  "${state:-?}, ${ngpu:-?} GPUs${gerr:+: $gerr}"
row "NCCL loaded" "$(ok_if [ "${nccl:-none}" != none ])" "$t" $((2 * LIMIT_ENV)) \
  "${nccl:-none} from ${nccl_path:-?}"
row "driver version" "$([[ $driver =~ ^[0-9]+(\.[0-9]+)+$ ]] && echo ok || echo FAILED)" "$t" \
  $((2 * LIMIT_ENV)) "${driver:-?}, CUDA ${cuda_version:-?}"
# What the sysfs reader sees here (the NCCL data network: IB/RoCE ports, plugin):
# informational, any answer is a fact about the host.
net=$(json "$work/env.json" '(j["self"].get("nccl_net") or {}).get("text", "-")')
row "NCCL data network" ok "$t" $((2 * LIMIT_ENV)) "${net:--}"

one_rank() {  # one_rank LIMIT JSON ARGS...: a job of one rank on GPU 0
  local l=$1 out=$2; shift 2
  limited "$l" "$BIN" run --rank 0 --world-size 1 --local-rank 0 --master-addr 127.0.0.1 \
    --master-port "$(port)" --timeout $((l - 5)) --json "$out" "$@"
}

echo; echo "== one rank: real NCCL init + one-element all-reduce into a sentinel-filled buffer (limit $LIMIT_ONE s)"
t=$(now)
one_rank "$LIMIT_ONE" "$work/one.json"
rc=$?
init=$(json "$work/one.json" '"%.0f ms" % j["stage_results"][0]["init_ms"]')
ar=$(json "$work/one.json" '"%.0f us" % j["stage_results"][0]["allreduce_us"]')
got=$(json "$work/one.json" 'j["stage_results"][0]["got"]')
# NCCL's own words were read back: the network it chose.
net=$(json "$work/one.json" 'j["stage_results"][0].get("nccl_net") or ""')
row "world size 1" "$([[ $rc == 0 && $got == 1 && -n $net ]] && echo ok || echo FAILED)" "$t" \
  "$LIMIT_ONE" "$(exit_text $rc) (want 0), total ${got:-?} (want 1), init ${init:-?}, all-reduce \
${ar:-?}, NCCL chose ${net:-nothing it said (want its network)}"

echo; echo "== one rank, the report on stdout (--json -): one JSON document whatever NCCL prints (limit $LIMIT_STDOUT s)"
t=$(now)
one_rank "$LIMIT_STDOUT" - >"$work/stdout.json" 2>"$work/stdout.err"
rc=$?
stage=$(json "$work/stdout.json" 'j["gpu_stage"]')
row "report on stdout" \
  "$([[ $rc == 0 && $stage == *"every algorithm connected"* ]] && echo ok || echo FAILED)" "$t" \
  "$LIMIT_STDOUT" "$(exit_text $rc) (want 0), ${stage:-stdout is not one JSON document: \
$(head -c 120 "$work/stdout.json" | tr '\n' ' ')}"
grep -h "NCCL version" "$work/stdout.err" | head -1 | sed 's/^/   NCCL on stderr: /'

echo; echo "== one rank, ncclCommInitRankScalable (--nccl-roots-every 0; NCCL 2.23+) (limit $LIMIT_SCALABLE s)"
t=$(now)
one_rank "$LIMIT_SCALABLE" "$work/scalable.json" --nccl-roots-every 0
rc=$?
roots=$(json "$work/scalable.json" 'j["nccl_roots"]')
got=$(json "$work/scalable.json" 'j["stage_results"][0]["got"]')
if [[ ${nccl_version:-0} -ge 22300 ]]; then
  row "scalable init, 1 root" "$([[ $rc == 0 && $roots == 1 && $got == 1 ]] && echo ok || echo FAILED)" \
    "$t" "$LIMIT_SCALABLE" "$(exit_text $rc), ${roots:-?} root(s), total ${got:-?} (want 0, 1, 1)"
else
  row "scalable init, 1 root" "$([[ $rc == 0 && $roots == 0 ]] && echo ok || echo FAILED)" \
    "$t" "$LIMIT_SCALABLE" "$(exit_text $rc), ${roots:-?} roots (NCCL < 2.23: want 0, 0)"
fi

echo; echo "== one rank with --bandwidth 64M (the timed all-reduce path; busbw is 0 at world size 1) (limit $LIMIT_BW s)"
t=$(now)
one_rank "$LIMIT_BW" "$work/bw.json" --bandwidth 64M
rc=$?
alg=$(json "$work/bw.json" '"%.1f GB/s" % j["stage_results"][0]["bandwidth"]["algbw_gbps"]')
row "bandwidth, world size 1" "$([[ $rc == 0 && -n $alg ]] && echo ok || echo FAILED)" "$t" \
  "$LIMIT_BW" "$(exit_text $rc) (want 0), algbw ${alg:-?}"

echo; echo "== two ranks on one GPU (CUDA_VISIBLE_DEVICES=0 for both): expect duplicate-gpu (limit $LIMIT_DUP s)"
p=$(port)
t=$(now)
for r in 0 1; do
  CUDA_VISIBLE_DEVICES=0 RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$p limited "$LIMIT_DUP" "$BIN" run --timeout $((LIMIT_DUP - 5)) \
    --json "$work/dup$r.json" >"$work/dup$r.out" 2>&1 &
  dup_pid[r]=$!
done
wait "${dup_pid[0]}"
rc=$?
wait "${dup_pid[1]}"
cat "$work/dup0.out"
ids=$(json "$work/dup0.json" '",".join(f["id"] for f in j["findings"])')
row "two ranks, one GPU" "$([[ $rc == 3 && $ids == *duplicate-gpu* ]] && echo ok || echo FAILED)" \
  "$t" "$LIMIT_DUP" "$(exit_text $rc) ${ids:-no findings} (want 3 duplicate-gpu)"

# Rank 1 sees one fake GPU (CUDA_VISIBLE_DEVICES=7): --device 0 says which, as a job
# with one GPU a task should (else local-rank-wrapped would be said too).
echo; echo "== NCCL init aborted: rank 1 joins but never calls init (fake libraries, hanging init) (limit $LIMIT_ABORT s)"
t=$(now)
if [[ -e "$FAKE_LIB" ]]; then
  # Named as the driver names its library, so that the fake says the same driver.
  fake_cuda=$work/fake/libcuda.so.${driver:-1}
  mkdir -p "$work/fake" && cp "$FAKE_LIB" "$fake_cuda"
  p=$(port)
  RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p \
    limited "$LIMIT_ABORT" "$BIN" run --timeout "$ABORT_TIMEOUT" --json "$work/abort0.json" \
    >"$work/abort0.out" 2>&1 &
  pid0=$!
  RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p \
    RANKCHECK_CUDA_LIB="$fake_cuda" RANKCHECK_NCCL_LIB="$fake_cuda" FAKE_NCCL_INIT=hang \
    FAKE_NCCL_VERSION="${nccl_version:-22809}" FAKE_CUDA_VERSION="${cuda_version:-13000}" \
    FAKE_GPUS="$(printf 'GPU-fa4e0000-0000-0000-0000-00000000000%d,' 0 1 2 3 4 5 6 7)" \
    CUDA_VISIBLE_DEVICES=7 TMPDIR="$work" \
    limited "$LIMIT_ABORT" "$BIN" run --timeout "$ABORT_TIMEOUT" --device 0 --json "$work/abort1.json" \
    >"$work/abort1.out" 2>&1 &
  pid1=$!
  wait "$pid0"
  rc=$?
  took=$(awk -v a="$t" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
  wait "$pid1"
  cat "$work/abort0.out"
  ids=$(json "$work/abort0.json" '",".join(f["id"] for f in j["findings"])')
  in_time=$(awk -v s="$took" -v lim="$ABORT_TIMEOUT" 'BEGIN { print (s <= lim + 3) ? "yes" : "no" }')
  row "init aborted (world 2)" \
    "$([[ $rc == 5 && $ids == *nccl-init-timeout* && $in_time == yes ]] && echo ok || echo FAILED)" \
    "$t" "$LIMIT_ABORT" \
    "$(exit_text $rc) ${ids:-no findings}, ended after $took s (want 5 nccl-init-timeout by $ABORT_TIMEOUT+3 s)"
else
  row "init aborted (world 2)" FAILED "$t" "$LIMIT_ABORT" \
    "no fake library at $FAKE_LIB (set RANKCHECK_FAKE_GPU, or run the bundle's run.sh)"
fi

if [[ "${ngpu:-0}" =~ ^[0-9]+$ ]] && ((ngpu >= 1)); then
  echo; echo "== node mode: one member for all $ngpu GPUs (one communicator per GPU in one group) (limit $LIMIT_NODE s)"
  t=$(now)
  limited "$LIMIT_NODE" "$BIN" run --nproc-per-node "$ngpu" --nnodes 1 --node-rank 0 \
    --master-addr 127.0.0.1 --master-port "$(port)" --timeout $((LIMIT_NODE - 5)) \
    --json "$work/node.json"
  rc=$?
  got=$(json "$work/node.json" '",".join(str(r["got"]) for r in j["stage_results"])')
  row "node mode x$ngpu" "$(ok_if [ "$rc" == 0 ])" "$t" "$LIMIT_NODE" "$(exit_text $rc) (want 0), totals ${got:-?}"
  if ((ngpu >= 2)); then
    echo; echo "== rank mode: rankcheck local -n $ngpu with a 256M bandwidth figure (limit $LIMIT_LOCAL s)"
    t=$(now)
    limited "$LIMIT_LOCAL" "$BIN" local -n "$ngpu" --timeout $((LIMIT_LOCAL - 5)) --bandwidth 256M \
      --json "$work/local.json"
    rc=$?
    bw=$(json "$work/local.json" '"%.1f GB/s" % j["stage_results"][0]["bandwidth"]["busbw_gbps"]')
    row "local -n $ngpu" "$(ok_if [ "$rc" == 0 ])" "$t" "$LIMIT_LOCAL" "$(exit_text $rc) (want 0), busbw ${bw:-?}"
  fi
fi

echo; echo "== summary"
printf '%-24s %-7s %-11s %s\n' check result time detail
printf '%s\n' "${rows[@]}"
exit $failed
