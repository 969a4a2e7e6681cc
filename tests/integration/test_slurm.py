"""rankcheck under a real Slurm, with the recipes in launchers/slurm.

The test starts its own cluster from Debian's slurm-wlm (22.05) on this machine:
munged with its own key and socket, slurmctld, and one slurmd for each of two
nodes, all state and logs in a temporary directory, no accounting, no cgroups.
The nodes are this one machine under two names (4 CPUs each, more than the
machine may have: SlurmdParameters=config_overrides). Names that resolve to
loopback are used when there are two (localhost and this host's name), so that
MASTER_ADDR can default to the first host of the node list as on a real
cluster; otherwise n1, n2 at 127.0.0.1, and the tests set MASTER_ADDR.

Because both nodes are one machine, every rankcheck process gets
--host-name $SLURMD_NODENAME: under the machine's own name for all of them,
rankcheck would rightly report ranks of two "nodes" sharing one host
(local-rank-collision). Every test asserts exit codes, finding ids with their
ranks and hosts, and that every step ended within rankcheck's bound
(--timeout + GRACE) plus Slurm's launch overhead.

Skipped, with the reason, where Slurm cannot run: not root, slurm-wlm or munge
not installed (scripts/setup.sh test installs them), or daemons that do not
come up (their logs are in the message).
"""

import ctypes
import glob
import json
import os
import re
import shutil
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from harness import BIN, GRACE, clean_env, free_port, job_findings

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHERS = os.path.normpath(os.path.join(HERE, "../../launchers/slurm"))
SBATCH_SCRIPT = os.path.join(LAUNCHERS, "rankcheck.sbatch")
NODE_WRAPPER = os.path.join(LAUNCHERS, "rankcheck-node.sh")
RANKCHECK = os.path.abspath(BIN)
RANKCHECK_MPI = os.path.abspath(os.environ.get("RANKCHECK_MPI_BIN", BIN + "-mpi"))

CPUS_PER_NODE = 4
LAUNCH_SLACK = 5.0      # srun/sbatch scheduling and launch, on top of rankcheck's bound
STARTUP_DEADLINE = 30.0  # the whole cluster, munged to idle nodes
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin"])
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "sbatch", "scontrol", "sinfo", "squeue", "scancel")
TERMINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL",
                   "OUT_OF_MEMORY", "PREEMPTED", "DEADLINE"}

# The training step of the sbatch tests: prints one line per rank; rank 0 also
# takes over MASTER_PORT the way torch's TCPStore does (SO_REUSEADDR), right
# after rankcheck's master left it.
TRAIN = r"""
import os, socket
rank, world = os.environ["SLURM_PROCID"], os.environ["SLURM_NTASKS"]
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
note = ""
if rank == "0":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen()
    note = " (listening on the master port)"
print(f"train: rank {rank} of {world} on {os.environ['SLURMD_NODENAME']}, "
      f"master {addr}:{port}{note}", flush=True)
"""


class Unavailable(Exception):
    """Slurm cannot run here; the message says why."""


def loopback_names():
    """Up to two host names that resolve to loopback addresses only.

    This host's name comes first: slurmctld 22.05 takes a node named localhost
    for this host, and refuses the host's own name after it as a duplicate.
    """
    names = []
    for name in (socket.gethostname().split(".")[0], "localhost"):
        if name in names:
            continue
        try:
            addrs = {ai[4][0] for ai in socket.getaddrinfo(name, None, socket.AF_INET)}
        except OSError:
            continue
        if addrs and all(a.startswith("127.") for a in addrs):
            names.append(name)
    return names


def tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return f"({e})"


class Cluster:
    """munged, slurmctld and two slurmd under `root`; stop() ends all of them."""

    def __init__(self, root):
        self.root = root
        self.conf = os.path.join(root, "slurm.conf")
        self.logs = os.path.join(root, "log")
        self.daemons = {}  # name -> Popen, each the leader of its own process group
        self.bins = {}
        names = loopback_names()
        self.resolvable = len(names) >= 2
        self.nodes = names[:2] if self.resolvable else ["n1", "n2"]

    # -- environment and commands ------------------------------------------

    def env(self, **extra):
        env = clean_env(**extra)
        for k in list(env):
            if k.startswith(("SBATCH_", "SALLOC_", "SQUEUE_", "SINFO_", "SCONTROL_")):
                del env[k]
        env["SLURM_CONF"] = self.conf
        env["PATH"] = SEARCH_PATH
        return env

    def cmd(self, *args, timeout=10.0, check=True):
        r = subprocess.run([self.bins[args[0]], *args[1:]], env=self.env(), cwd=self.root,
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(args)}: exit {r.returncode}\n{r.stdout}{r.stderr}")
        return r

    # -- start ---------------------------------------------------------------

    def start(self):
        if os.geteuid() != 0:
            raise Unavailable("not root: slurmd and munged of a test cluster need root")
        for name in DAEMONS + CLIENTS + ("munge",):
            path = shutil.which(name, path=SEARCH_PATH)
            if path is None:
                raise Unavailable(f"{name} is not installed (Debian packages slurm-wlm, "
                                  f"slurm-client, munge: scripts/setup.sh test)")
            self.bins[name] = path
        os.makedirs(self.logs)
        os.makedirs(os.path.join(self.root, "state"))
        for node in self.nodes:
            os.makedirs(os.path.join(self.root, "spool", node))
        deadline = time.monotonic() + STARTUP_DEADLINE
        self._start_munge(deadline)
        self._write_conf()
        self._spawn("slurmctld", [self.bins["slurmctld"], "-D", "-i", "-f", self.conf])
        self._wait("slurmctld", deadline, lambda: "is UP" in self.cmd(
            "scontrol", "ping", timeout=5, check=False).stdout)
        for node in self.nodes:
            self._spawn(f"slurmd.{node}", [self.bins["slurmd"], "-D", "-N", node, "-f", self.conf])
        self._wait("the nodes to be idle", deadline, self._nodes_idle)

    def _start_munge(self, deadline):
        d = os.path.join(self.root, "munge")
        os.makedirs(d)
        os.chmod(self.root, 0o755)  # the socket must be reachable (all run as root anyway)
        os.chmod(d, 0o755)
        key = os.path.join(d, "munge.key")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))
        self.munge_socket = os.path.join(d, "munge.socket")
        self._spawn("munged", [self.bins["munged"], "-F", "-f", f"--socket={self.munge_socket}",
                               f"--key-file={key}", f"--pid-file={d}/munged.pid",
                               f"--log-file={self.logs}/munged.log",
                               f"--seed-file={d}/munged.seed"])

        def ready():
            r = subprocess.run([self.bins["munge"], "-n", "-S", self.munge_socket],
                               capture_output=True, timeout=5)
            return r.returncode == 0
        self._wait("munged", deadline, ready)

    def _write_conf(self):
        host = socket.gethostname().split(".")[0]
        ports = [free_port() for _ in range(1 + len(self.nodes))]
        r = self.root
        lines = [
            "ClusterName=rankcheck-test",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ports[0]}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={r}/slurmctld.pid",
            f"SlurmdPidFile={r}/slurmd.%n.pid",
            f"SlurmctldLogFile={self.logs}/slurmctld.log",
            f"SlurmdLogFile={self.logs}/slurmd.%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",  # no cgroups in a container
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            # Heterogeneous jobs are scheduled by the backfill scheduler only; other jobs
            # still start at once, from the main scheduler's pass at submission.
            "SchedulerType=sched/backfill",
            "SchedulerParameters=bf_interval=1",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SlurmdParameters=config_overrides",  # 4 CPUs per node, whatever the machine has
            "ReturnToService=2",
            "KillWait=2",
            "MailProg=/bin/true",
        ]
        for node, port in zip(self.nodes, ports[1:]):
            lines.append(f"NodeName={node} NodeAddr=127.0.0.1 Port={port} CPUs={CPUS_PER_NODE} "
                         f"State=UNKNOWN")
        lines.append("PartitionName=test Nodes=ALL Default=YES MaxTime=10 State=UP")
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _spawn(self, name, argv):
        out = open(os.path.join(self.logs, f"{name}.out"), "w")
        with out:
            self.daemons[name] = subprocess.Popen(argv, env=self.env(), cwd=self.root,
                                                  stdin=subprocess.DEVNULL, stdout=out,
                                                  stderr=subprocess.STDOUT,
                                                  start_new_session=True,
                                                  preexec_fn=die_with_parent)

    def _nodes_idle(self):
        r = self.cmd("sinfo", "-h", "-N", "-o", "%N %T", timeout=5, check=False)
        states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
        return all(states.get(n) == "idle" for n in self.nodes)

    def _wait(self, what, deadline, ready):
        while True:
            for name, p in self.daemons.items():
                if p.poll() is not None:
                    raise Unavailable(f"{name} exited with {p.returncode} while waiting for "
                                      f"{what}\n{self.log_tails()}")
            try:
                if ready():
                    return
            except (OSError, subprocess.SubprocessError):
                pass
            if time.monotonic() > deadline:
                raise Unavailable(f"gave up waiting for {what} after {STARTUP_DEADLINE:.0f} s\n"
                                  f"{self.log_tails()}")
            time.sleep(0.2)

    def log_tails(self):
        return "\n".join(f"--- {p}\n{tail(p)}" for p in sorted(glob.glob(f"{self.logs}/*")))

    # -- stop ----------------------------------------------------------------

    def stop(self):
        """Cancels every job, ends every daemon and what they started; never raises."""
        if "slurmctld" in self.daemons and self.daemons["slurmctld"].poll() is None:
            try:
                jobs = self.cmd("squeue", "-h", "-o", "%i", timeout=5, check=False).stdout.split()
                if jobs:
                    self.cmd("scancel", *jobs, timeout=5, check=False)
                    end = time.monotonic() + 10
                    while time.monotonic() < end and self.cmd(
                            "squeue", "-h", "-o", "%i", timeout=5, check=False).stdout.strip():
                        time.sleep(0.2)
            except (OSError, subprocess.SubprocessError):
                pass
        # slurmd before slurmctld before munged: each still has what it talks to.
        for name in sorted(self.daemons, key=lambda n: ("slurmd" not in n, n != "slurmctld")):
            stop_group(self.daemons[name])
        # slurmstepd and job tasks leave slurmd's process group: they are found by
        # this cluster's SLURM_CONF in their environment (a path only this test uses).
        for pid in processes_with_env(f"SLURM_CONF={self.conf}"):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def die_with_parent():
    """In a daemon's child before exec: SIGKILL it when this test process dies, so that
    a test killed from outside (a ctest timeout) leaves no cluster behind."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def stop_group(p, wait=5.0):
    """SIGTERM to the process group of `p` (its own session), SIGKILL if it lingers."""
    for sig, limit in ((signal.SIGTERM, wait), (signal.SIGKILL, wait)):
        if p.poll() is not None:
            break
        try:
            os.killpg(p.pid, sig)
        except OSError:
            break
        try:
            p.wait(limit)
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(p.pid, signal.SIGKILL)  # anything left in the group
    except OSError:
        pass


def processes_with_env(entry):
    me = os.getpid()
    found = []
    needle = entry.encode() + b"\0"
    for d in glob.glob("/proc/[0-9]*"):
        pid = int(d[6:])
        if pid == me:
            continue
        try:
            with open(f"{d}/environ", "rb") as f:
                if needle in f.read():
                    found.append(pid)
        except OSError:
            pass
    return found


class Step:
    """One finished srun or sbatch job: exit code, output, elapsed time, JSON reports."""

    def __init__(self, rc, out, err, elapsed, reports):
        self.rc, self.out, self.err, self.elapsed = rc, out, err, elapsed
        self.reports = reports

    def report(self, name):
        path = os.path.join(self.reports, f"{name}.json")
        if not os.path.exists(path):
            raise AssertionError(f"no {path}; output:\n{self.out}\n{self.err}")
        with open(path) as f:
            return json.load(f)

    def all_reports(self):
        out = {}
        for path in sorted(glob.glob(os.path.join(self.reports, "*.json"))):
            with open(path) as f:
                out[os.path.basename(path)[:-5]] = json.load(f)
        return out


def ids(report):
    return [f["id"] for f in job_findings(report)]


def finding(report, fid):
    for f in report["findings"]:
        if f["id"] == fid:
            return f
    raise AssertionError(f"no finding {fid} in {ids(report)}")


class Slurm(unittest.TestCase):
    cluster = None

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(RANKCHECK):
            raise unittest.SkipTest(f"no rankcheck binary at {RANKCHECK} (RANKCHECK_BIN)")
        cls.tmp = tempfile.mkdtemp(prefix="rankcheck-slurm-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        cluster = Cluster(cls.tmp)
        cls.addClassCleanup(cluster.stop)
        started = time.monotonic()
        try:
            cluster.start()
        except Unavailable as e:
            raise unittest.SkipTest(f"cannot start a test Slurm cluster: {e}")
        cls.cluster = cluster
        cls.startup = time.monotonic() - started
        # On a cluster whose node names do not resolve, MASTER_ADDR is given.
        cls.master_env = {} if cluster.resolvable else {"MASTER_ADDR": "127.0.0.1"}

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix=self._testMethodName + "-", dir=self.tmp)

    # -- helpers -------------------------------------------------------------

    def srun(self, srun_args, command, timeout, **env):
        """`srun SRUN_ARGS COMMAND`; must end within `timeout` + LAUNCH_SLACK."""
        argv = [self.cluster.bins["srun"], *srun_args, *command]
        start = time.monotonic()
        p = subprocess.Popen(argv, env=self.cluster.env(**self.master_env, **env), cwd=self.dir,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout + LAUNCH_SLACK + 2)
        except subprocess.TimeoutExpired:
            stop_group(p, wait=2)
            out, err = p.communicate()
            raise AssertionError(f"srun still running after {timeout + LAUNCH_SLACK + 2:.0f} s"
                                 f"\n{out}\n{err}")
        step = Step(p.returncode, out, err, time.monotonic() - start, self.dir)
        self.assertLessEqual(step.elapsed, timeout + LAUNCH_SLACK,
                             f"srun took {step.elapsed:.1f} s\n{out}\n{err}")
        return step

    def per_rank(self, *run_args, name="rank$SLURM_PROCID", command=()):
        """`rankcheck run RUN_ARGS [-- COMMAND]` as a task, with its host name and a JSON
        report of its own."""
        script = (f'exec "$0" "$@" --host-name "$SLURMD_NODENAME" '
                  f'--json "{self.dir}/{name}.json"')
        if command:
            script += " -- " + shlex.join(command)
        return ["/bin/sh", "-c", script, RANKCHECK, "run", *run_args]

    def sbatch(self, script_args, timeout, sbatch_args=(), **env):
        """Submits the example script; waits (deadline) for the job to end."""
        shim = os.path.join(self.dir, "rankcheck-shim.sh")
        with open(shim, "w") as f:  # RANKCHECK for the script: adds host name and JSON path
            # (before a "--" and the training command, when the script gives one)
            f.write('#!/bin/bash\nhead=() n=0\n'
                    'for a in "$@"; do [[ $a == -- ]] && break; head+=("$a"); n=$((n + 1)); done\n'
                    f'exec "{RANKCHECK}" "${{head[@]}}" --host-name "$SLURMD_NODENAME" '
                    f'--json "{self.dir}/rank$SLURM_PROCID.json" "${{@:n+1}}"\n')
        os.chmod(shim, 0o755)
        env = self.cluster.env(**{"RANKCHECK": shim, **self.master_env, **env})
        start = time.monotonic()
        r = subprocess.run([self.cluster.bins["sbatch"], "--parsable", f"--chdir={self.dir}",
                            f"--output={self.dir}/job-%j.out", *sbatch_args, SBATCH_SCRIPT,
                            *script_args], env=env, cwd=self.dir, capture_output=True,
                           text=True, timeout=10)
        self.assertEqual(r.returncode, 0, r.stderr)
        job = r.stdout.strip().split(";")[0]
        limit = timeout + LAUNCH_SLACK + 5  # the batch step around two job steps
        fields = {}
        while True:
            show = self.cluster.cmd("scontrol", "show", "job", "-o", job, check=False).stdout
            fields = dict(re.findall(r"(\w+)=(\S*)", show))
            if fields.get("JobState") in TERMINAL_STATES:
                break
            if time.monotonic() - start > limit:
                self.cluster.cmd("scancel", job, check=False)
                raise AssertionError(f"job {job} still {fields.get('JobState')} after "
                                     f"{limit:.0f} s")
            time.sleep(0.1)
        elapsed = time.monotonic() - start
        with open(os.path.join(self.dir, f"job-{job}.out")) as f:
            out = f.read()
        code, signal_ = (int(x) for x in fields["ExitCode"].split(":"))
        step = Step(code, out, "", elapsed, self.dir)
        step.job, step.state, step.signal = int(job), fields["JobState"], signal_
        self.assertLessEqual(elapsed, limit, out)
        return step

    def assertHosts(self, members, per_node):
        """Block distribution: ranks per_node*i .. on node i, each node its own host."""
        by_rank = {m["rank"]: m for m in members}
        hosts = [by_rank[n * per_node]["host"] for n in range(len(self.cluster.nodes))]
        self.assertEqual(sorted(hosts), sorted(self.cluster.nodes))
        for r, m in by_rank.items():
            self.assertEqual(m["host"], hosts[r // per_node], m)
        return hosts

    # -- (a) the example batch script ----------------------------------------

    def test_sbatch_script_checks_then_trains(self):
        tmpdir = os.path.join(self.dir, "tmp")
        os.makedirs(tmpdir)
        job = self.sbatch([sys.executable, "-c", TRAIN], timeout=10, TMPDIR=tmpdir,
                          RANKCHECK_TIMEOUT=10, RANKCHECK_ARGS="--no-gpu -q")
        self.assertEqual((job.state, job.rc, job.signal), ("COMPLETED", 0, 0), job.out)
        self.assertIn("PASS — 8 ranks of 8 joined", job.out)
        master = job.report("rank0")
        self.assertEqual(master["verdict"], "pass")
        # A job token made for the job, by default: every task proved it, and the
        # private file each task kept it in is gone.
        self.assertTrue(master["authenticated"])
        self.assertIn("authenticated with the job token", job.out)
        self.assertEqual(os.listdir(tmpdir), [])
        self.assertEqual(job_findings(master), [])
        self.assertEqual(master["decided"], "all-joined")
        self.assertEqual(sorted(m["rank"] for m in master["members"]), list(range(8)))
        hosts = self.assertHosts(master["members"], 4)
        # The script's MASTER_ADDR/MASTER_PORT: the first host, a port per job.
        port = 20000 + job.job % 10000
        addr = "127.0.0.1" if self.master_env else hosts[0]
        self.assertIn(f"master {addr}:{port}", job.out)
        for m in master["members"]:
            self.assertEqual((m["master_addr"], m["master_port"]), (addr, port))
            self.assertEqual(m["job_id"], f"{job.job}.0")  # the job and its first step
            self.assertEqual(m["launcher"], "slurm")
        for name, r in job.all_reports().items():
            self.assertEqual((r["verdict"], r["exit_code"]), ("pass", 0), name)
        # Then the training step ran, every rank of it, and took over the master port.
        train = sorted(line for line in job.out.splitlines() if line.startswith("train: "))
        self.assertEqual(len(train), 8, job.out)
        self.assertIn(f"train: rank 0 of 8 on {hosts[0]}, master {addr}:{port} "
                      f"(listening on the master port)", train)

    def test_sbatch_script_watches_the_training_step_when_asked(self):
        # RANKCHECK_WATCH=1: one step, the check then the training under watch; the
        # training takes over the master port once the check let it go.
        job = self.sbatch([sys.executable, "-c", TRAIN], timeout=10, RANKCHECK_TIMEOUT=10,
                          RANKCHECK_ARGS="--no-gpu -q", RANKCHECK_WATCH=1)
        self.assertEqual((job.state, job.rc), ("COMPLETED", 0), job.out)
        self.assertIn("PASS — 8 ranks of 8 joined", job.out)
        train = [line for line in job.out.splitlines() if line.startswith("train: ")]
        self.assertEqual(len(train), 8, job.out)
        self.assertTrue(any("(listening on the master port)" in t for t in train), job.out)
        self.assertIn("job under watch: ended", job.out)
        watched = job.report("rank0")["job"]
        self.assertEqual((watched["fingerprint"], watched["ranks"]["exited"]), ("", 8))
        # One step: every task of the training was a task of the check (its job id's step 0).
        self.assertEqual({m["job_id"] for m in job.report("rank0")["members"]}, {f"{job.job}.0"})

    def test_sbatch_script_stops_the_job_with_the_checks_exit_code(self):
        # A stale WORLD_SIZE in the submitting shell reaches every task.
        job = self.sbatch([sys.executable, "-c", TRAIN], timeout=4,
                          sbatch_args=["--export=ALL,WORLD_SIZE=16"],
                          RANKCHECK_TIMEOUT=4, RANKCHECK_ARGS="--no-gpu -q")
        self.assertEqual((job.state, job.rc), ("FAILED", 3), job.out)
        self.assertNotIn("train: ", job.out)  # the training step never started
        self.assertIn("rankcheck.sbatch: rankcheck failed with exit code 3: not starting the "
                      "training step", job.out)
        master = job.report("rank0")
        self.assertEqual(ids(master), ["launcher-env-conflict", "missing-rank"])
        f = finding(master, "launcher-env-conflict")
        self.assertEqual(f["ranks"], list(range(8)))
        self.assertEqual(sorted(f["hosts"]), sorted(self.cluster.nodes))
        self.assertIn("WORLD_SIZE=16 but SLURM_NTASKS=8 (rankcheck used WORLD_SIZE)",
                      f["message"])
        self.assertEqual(finding(master, "missing-rank")["ranks"], list(range(8, 16)))
        reports = job.all_reports()
        self.assertEqual(len(reports), 8)
        for name, r in reports.items():
            self.assertEqual((r["verdict"], r["exit_code"]), ("fail", 3), name)
            self.assertIn("launcher-env-conflict", ids(r), name)

    def test_sbatch_script_without_the_binary_says_what_to_set(self):
        job = self.sbatch([sys.executable, "-c", TRAIN], timeout=4,
                          RANKCHECK="no-such-rankcheck", RANKCHECK_ARGS="--no-gpu -q")
        self.assertEqual((job.state, job.rc), ("FAILED", 2), job.out)
        self.assertIn("rankcheck.sbatch: cannot find 'no-such-rankcheck'", job.out)
        self.assertIn("set RANKCHECK to its full path", job.out)
        self.assertNotIn("execve", job.out)
        self.assertNotIn("see rank 0's report", job.out)
        self.assertNotIn("train: ", job.out)

    def test_sbatch_script_ends_the_step_when_a_late_node_holds_it_open(self):
        # The second node's tasks start a minute late (a slow node, an image pull): rank
        # 0 decides at the deadline, and srun --wait ends the late tasks soon after,
        # rather than the step waiting for them. The job exits with rankcheck's verdict.
        timeout = 4
        shim = os.path.join(self.dir, "rankcheck-late.sh")
        with open(shim, "w") as f:
            f.write('#!/bin/sh\n[ "$SLURM_NODEID" != 1 ] || sleep 60\n'
                    f'exec "{RANKCHECK}" "$@" --host-name "$SLURMD_NODENAME" '
                    f'--json "{self.dir}/rank$SLURM_PROCID.json"\n')
        os.chmod(shim, 0o755)
        # The bound: the deadline, then the timeout plus 11 s after it; far below 60.
        job = self.sbatch([sys.executable, "-c", TRAIN], timeout=2 * timeout + 11 + GRACE,
                          sbatch_args=["--nodes=2", "--ntasks-per-node=2"], RANKCHECK=shim,
                          RANKCHECK_TIMEOUT=timeout, RANKCHECK_ARGS="--no-gpu -q")
        # (Both nodes are this machine: rank 0 may also note that MASTER_ADDR is loopback.)
        master = job.report("rank0")
        self.assertEqual((job.state, job.rc), ("FAILED", master["exit_code"]), job.out)
        self.assertEqual(finding(master, "missing-rank")["ranks"], [2, 3])
        self.assertRegex(job.out, rf"rankcheck.sbatch: rankcheck's verdict is exit code {job.rc} \(rank "
                                  r"0's report above\), and the step ended with exit code \d+ "
                                  r"\(srun said: [^:]+: tasks 2-3: Killed\): not starting the "
                                  r"training step")
        self.assertNotIn("train: ", job.out)

    def test_sbatch_script_leaves_its_metrics_for_node_exporter_when_asked(self):
        metrics = os.path.join(self.dir, "textfile")
        os.mkdir(metrics)
        job = self.sbatch([sys.executable, "-c", TRAIN], timeout=4,
                          sbatch_args=["--nodes=1", "--ntasks-per-node=2"],
                          RANKCHECK_TIMEOUT=4, RANKCHECK_ARGS="--no-gpu -q",
                          RANKCHECK_METRICS_DIR=metrics)
        self.assertEqual((job.state, job.rc), ("COMPLETED", 0), job.out)
        self.assertEqual(os.listdir(metrics), ["rankcheck.prom"])  # no half-written file left
        prom = self.read("textfile/rankcheck.prom")
        self.assertIn('rankcheck_verdict{verdict="pass"} 1\n', prom)
        self.assertIn(f'job_id="{job.job}.0"', prom)

    def test_sbatch_script_refuses_a_metrics_folder_it_cannot_write(self):
        job = self.sbatch([sys.executable, "-c", TRAIN], timeout=4,
                          RANKCHECK_METRICS_DIR=os.path.join(self.dir, "no-such-folder"),
                          RANKCHECK_ARGS="--no-gpu -q")
        self.assertEqual((job.state, job.rc), ("FAILED", 2), job.out)
        self.assertIn(f"rankcheck.sbatch: RANKCHECK_METRICS_DIR={self.dir}/no-such-folder is not "
                      "a folder this job can write to", job.out)
        self.assertNotIn("train: ", job.out)

    def test_sbatch_script_refuses_a_timeout_that_is_not_seconds(self):
        job = self.sbatch([sys.executable, "-c", TRAIN], timeout=4, RANKCHECK_TIMEOUT="2m",
                          RANKCHECK_ARGS="--no-gpu -q")
        self.assertEqual((job.state, job.rc), ("FAILED", 2), job.out)
        self.assertIn("rankcheck.sbatch: RANKCHECK_TIMEOUT='2m': give the check's time in "
                      "seconds, 1 or more", job.out)
        self.assertNotIn("train: ", job.out)

    # -- (b) srun, one task per rank -----------------------------------------

    def test_srun_eight_ranks_pass(self):
        timeout = 30  # far from what is measured (a busy machine)
        step = self.srun(["-n", "8"], self.per_rank("--no-gpu", "--timeout", str(timeout)),
                         timeout + GRACE, MASTER_PORT=free_port())
        self.assertEqual(step.rc, 0, step.out + step.err)
        self.assertLess(step.elapsed, 10, "a healthy job does not wait for the deadline")
        self.assertIn("PASS — 8 ranks of 8 joined", step.out)
        master = step.report("rank0")
        self.assertEqual((master["verdict"], master["exit_code"]), ("pass", 0))
        self.assertEqual(job_findings(master), [])
        self.assertEqual(master["decided"], "all-joined")
        members = master["members"]
        self.assertEqual(sorted(m["rank"] for m in members), list(range(8)))
        hosts = self.assertHosts(members, 4)
        for m in members:
            self.assertEqual((m["world_size"], m["local_rank"], m["local_world_size"]),
                             (8, m["rank"] % 4, 4), m)
            self.assertEqual(m["launcher"], "slurm")
            # MASTER_ADDR unset: the first host of Slurm's node list.
            self.assertEqual(m["master_addr"], "127.0.0.1" if self.master_env else hosts[0])
        self.assertEqual(len({m["job_id"] for m in members}), 1)
        for r in range(1, 8):
            member = step.report(f"rank{r}")
            self.assertEqual((member["role"], member["verdict"], member["exit_code"]),
                             ("member", "pass", 0))

    # -- the job under watch: srun rankcheck run --fail-fast -- python train.py --

    def test_srun_fail_fast_ends_the_step_in_seconds_with_the_failures_code(self):
        # Task 5 raises before init_process_group; the others would wait in it for 300 s.
        # The step ends in seconds and every task exits 8 (the job itself failed).
        job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "gloo_job.py")
        run = self.per_rank("--no-gpu", "--timeout", "30", "--fail-fast", "--kill-grace", "5",
                            command=["/usr/bin/python3", job])
        step = self.srun(["-n", "8", "--kill-on-bad-exit=0"], run, 90, MASTER_PORT=free_port(),
                         JOB_MODE="raise", JOB_BAD="5", JOB_PG_TIMEOUT="300")
        self.assertEqual(step.rc, 8, step.out + step.err)
        self.assertLess(step.elapsed, 60, "the step ends long before the job's own timeout")
        master = step.report("rank0")
        job_section = master["job"]
        f = job_section["findings"][0]
        self.assertEqual((f["id"], f["ranks"], f["severity"]), ("job-rank-failed", [5], "error"))
        self.assertIn("rank 5 cannot open its data shard", f["message"])
        by_rank = {m["rank"]: m for m in job_section["members"]}
        self.assertFalse(by_rank[5]["ended_by_rankcheck"])
        self.assertTrue(all(by_rank[r]["ended_by_rankcheck"] for r in range(8) if r != 5))
        # srun names every task's exit: 8, as docs/ and the README say.
        self.assertRegex(step.err, r"task[s]? [0-9,-]+: Exited with exit code 8")

    # -- (c) a user-set WORLD_SIZE that disagrees with Slurm's ---------------

    def test_srun_with_a_world_size_that_disagrees_with_slurm(self):
        timeout = 4
        step = self.srun(["-N", "2", "--ntasks-per-node=2", "--export=ALL,WORLD_SIZE=8"],
                         self.per_rank("--no-gpu", "-q", "--timeout", str(timeout)),
                         timeout + GRACE, MASTER_PORT=free_port())
        self.assertEqual(step.rc, 3, step.out + step.err)
        master = step.report("rank0")
        self.assertEqual((master["verdict"], master["exit_code"]), ("fail", 3))
        self.assertEqual(ids(master), ["launcher-env-conflict", "missing-rank"])
        f = finding(master, "launcher-env-conflict")
        self.assertEqual(f["ranks"], [0, 1, 2, 3])
        self.assertEqual(sorted(f["hosts"]), sorted(self.cluster.nodes))
        self.assertIn("4 members have conflicting world size", f["message"])
        self.assertIn("WORLD_SIZE=8 but SLURM_NTASKS=4 (rankcheck used WORLD_SIZE)", f["message"])
        # rankcheck trusts WORLD_SIZE (what torch reads): 8 ranks expected, 4 started.
        self.assertEqual(finding(master, "missing-rank")["ranks"], [4, 5, 6, 7])
        self.assertHosts(master["members"], 2)
        for r in range(1, 4):
            member = step.report(f"rank{r}")
            self.assertEqual((member["verdict"], member["exit_code"]), ("fail", 3))
            self.assertEqual(ids(member), ["launcher-env-conflict"])
        self.assertIn("rankcheck: FAIL", step.out)

    def test_srun_with_a_world_size_below_the_task_count_waits_for_every_task(self):
        # WORLD_SIZE=2 over 4 tasks; tasks 2 and 3 start half a second late, as a
        # slow node's would. Every task is waited for, and every one exits 3.
        timeout = 4
        script = ('[ "$SLURM_PROCID" -lt 2 ] || sleep 0.5; exec "$0" "$@" --host-name '
                  f'"$SLURMD_NODENAME" --json "{self.dir}/rank$SLURM_PROCID.json"')
        step = self.srun(["-N", "1", "-n", "4", "--export=ALL,WORLD_SIZE=2"],
                         ["/bin/sh", "-c", script, RANKCHECK, "run", "--no-gpu", "-q",
                          "--timeout", str(timeout)],
                         timeout + GRACE, MASTER_PORT=free_port())
        self.assertEqual(step.rc, 3, step.out + step.err)
        master = step.report("rank0")
        self.assertEqual(master["decided"], "all-joined")
        self.assertEqual(ids(master), ["launcher-env-conflict", "rank-out-of-range"])
        self.assertEqual(finding(master, "rank-out-of-range")["ranks"], [2, 3])
        self.assertLess(step.elapsed, timeout, step.out + step.err)
        reports = step.all_reports()
        self.assertEqual(len(reports), 4)
        for name, r in reports.items():
            self.assertEqual((r["verdict"], r["exit_code"]), ("fail", 3), name)

    def test_srun_on_one_node_with_a_larger_world_size_names_no_second_host(self):
        # WORLD_SIZE=8 over 4 tasks on one node: the step's node list is one host, so
        # neither "the job spans more than one host" nor "as if node 1 never started".
        timeout = 4
        step = self.srun(["-N", "1", "-n", "4", "--export=ALL,WORLD_SIZE=8"],
                         self.per_rank("--no-gpu", "-q", "--timeout", str(timeout)),
                         timeout + GRACE, MASTER_PORT=free_port())
        self.assertEqual(step.rc, 3, step.out + step.err)
        master = step.report("rank0")
        self.assertEqual(ids(master), ["launcher-env-conflict", "missing-rank"])
        f = finding(master, "missing-rank")
        self.assertEqual(f["ranks"], [4, 5, 6, 7])
        host = master["members"][0]["host"]
        self.assertEqual(f["message"], "ranks 4-7 did not join: the launcher started 4 processes "
                                       f"on 1 node ({host}), for a world size of 8")
        self.assertNotIn("spans more than one host", step.out)

    def test_rankcheck_mpi_under_srun_without_pmi_is_a_usage_error_with_the_fix(self):
        # srun --mpi=none: Open MPI's MPI_Init aborted the task (exit 1, which the
        # README keeps for rankcheck's own bugs).
        if not os.path.exists(RANKCHECK_MPI):
            self.skipTest(f"no rankcheck-mpi at {RANKCHECK_MPI}")
        step = self.srun(["--mpi=none", "-N", "1", "-n", "2"],
                         [RANKCHECK_MPI, "run", "--bootstrap", "mpi", "--no-gpu", "--timeout", "3"],
                         3 + GRACE)
        self.assertEqual(step.rc, 2, step.out + step.err)
        self.assertIn("this Slurm task was started without an MPI plugin", step.err)
        self.assertIn("run it with srun --mpi=pmix", step.err)
        self.assertNotIn("MPI_Init_thread", step.err)

    # -- (d) the node-level wrapper ------------------------------------------

    def test_node_wrapper_two_nodes_of_four(self):
        timeout = 30  # far from what is measured (a busy machine)
        script = (f'exec "$0" "$@" --host-name "$SLURMD_NODENAME" '
                  f'--json "{self.dir}/node$SLURM_NODEID.json"')
        step = self.srun(["-N", "2", "--ntasks-per-node=1"],
                         ["/bin/sh", "-c", script, NODE_WRAPPER, "--no-gpu", "-q",
                          "--timeout", str(timeout)],
                         timeout + GRACE, RANKCHECK=RANKCHECK, GPUS_PER_NODE="4",
                         MASTER_PORT=free_port())
        self.assertEqual(step.rc, 0, step.out + step.err)
        self.assertLess(step.elapsed, 10, "a healthy job does not wait for the deadline")
        self.assertIn("PASS — 8 ranks of 8 joined", step.out)
        master = step.report("node0")
        self.assertEqual((master["verdict"], job_findings(master)), ("pass", []))
        members = sorted(master["members"], key=lambda m: m["rank"])
        self.assertEqual([(m["rank"], m["nranks"], m["node_rank"], m["world_size"],
                           m["local_world_size"]) for m in members],
                         [(0, 4, 0, 8, 4), (4, 4, 1, 8, 4)])
        self.assertEqual(sorted(m["host"] for m in members), sorted(self.cluster.nodes))
        node1 = step.report("node1")
        self.assertEqual((node1["role"], node1["verdict"], node1["exit_code"]),
                         ("member", "pass", 0))
        self.assertIn("this is ranks 4-7 on", step.out)

    def test_node_wrapper_watches_one_torchrun_per_node(self):
        # Node mode: one task per node whose command is torchrun for the node's ranks.
        # Each node's rankcheck checks the node, then runs its torchrun under watch; rank
        # 0's report has the two nodes' torchruns, each standing for its two ranks.
        job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "gloo_job.py")
        torchrun = shutil.which("torchrun", path="/usr/bin:/usr/local/bin")
        if torchrun is None:
            self.skipTest("torchrun not installed (Debian's python3-torch)")
        port = free_port()
        train = ('exec /usr/bin/python3 "$0" --redirects 1 --tee 1 --nnodes 2 '
                 '--nproc_per_node 2 --node_rank "$SLURM_NODEID" --master_addr 127.0.0.1 '
                 f'--master_port {port} --max_restarts 0 "$1"')
        script = (f'exec "$0" "$@" --host-name "$SLURMD_NODENAME" '
                  f'--json "{self.dir}/node$SLURM_NODEID.json" -- '
                  f'sh -c {shlex.quote(train)} {torchrun} {job}')
        step = self.srun(["-N", "2", "--ntasks-per-node=1"],
                         ["/bin/sh", "-c", script, NODE_WRAPPER, "--no-gpu", "-q",
                          "--timeout", "30"],
                         90, RANKCHECK=RANKCHECK, GPUS_PER_NODE="2", MASTER_PORT=port,
                         MASTER_ADDR="127.0.0.1", JOB_HOLD="2")
        self.assertEqual(step.rc, 0, step.out + step.err)
        for r in range(4):
            self.assertIn(f"rank {r}: all_reduce 10", step.out)
        watched = step.report("node0")["job"]
        self.assertEqual((watched["state"], watched["fingerprint"]), ("ended", ""))
        self.assertEqual([(m["rank"], m["nranks"]) for m in watched["members"]], [(0, 2), (2, 2)])
        # Each node began its init when its torchrun met the rendezvous on MASTER_PORT.
        self.assertTrue(all(m["init_ms"] is not None for m in watched["members"]), watched)

    def test_node_wrapper_refuses_more_than_one_task_per_node(self):
        step = self.srun(["-N", "2", "--ntasks-per-node=2"], [NODE_WRAPPER, "--no-gpu"], 5,
                         RANKCHECK=RANKCHECK, GPUS_PER_NODE="4", MASTER_PORT=free_port())
        self.assertEqual(step.rc, 2, step.out + step.err)
        self.assertIn("this step runs '2(x2)' tasks per node; node mode needs exactly one: "
                      "srun --ntasks=$SLURM_NNODES --ntasks-per-node=1", step.err)
        self.assertEqual(glob.glob(os.path.join(self.dir, "*.json")), [])

    def test_node_wrapper_takes_the_users_nnodes_and_the_job_token(self):
        # --nnodes given to the wrapper too was a usage error ("--nnodes: At Most 1
        # required but received 2"); the job token comes from the batch script.
        timeout = 6
        script = (f'exec "$0" "$@" --host-name "$SLURMD_NODENAME" '
                  f'--json "{self.dir}/node$SLURM_NODEID.json"')
        tmpdir = os.path.join(self.dir, "tmp")
        os.makedirs(tmpdir)
        step = self.srun(["-N", "2", "--ntasks-per-node=1"],
                         ["/bin/sh", "-c", script, NODE_WRAPPER, "--no-gpu", "-q", "--nnodes", "2",
                          "--timeout", str(timeout)],
                         timeout + GRACE, RANKCHECK=RANKCHECK, GPUS_PER_NODE="4", TMPDIR=tmpdir,
                         RANKCHECK_JOB_TOKEN="0123456789abcdef" * 4, MASTER_PORT=free_port())
        self.assertEqual(step.rc, 0, step.out + step.err)
        master = step.report("node0")
        self.assertEqual((master["verdict"], master["authenticated"]), ("pass", True))
        self.assertEqual(os.listdir(tmpdir), [])


    # -- (e) after a failed check: submit again without the suspect hosts; drain them ----

    def shim(self, name, bad, on_bad, host='"$SLURMD_NODENAME"'):
        """A RANKCHECK for the script, `name` in the test's folder: on node `bad` it runs
        the shell line `on_bad` first; then rankcheck, as the host `host`."""
        shim = os.path.join(self.dir, name)
        with open(shim, "w") as f:
            f.write(f'#!/bin/sh\ncase "$SLURMD_NODENAME" in {bad})\n  {on_bad} ;;\nesac\n'
                    f'exec "{RANKCHECK}" "$@" --host-name {host}\n')
        os.chmod(shim, 0o755)
        return shim

    def bad_node_shim(self, bad):
        """RANKCHECK for the script: on node `bad` (or every node, "*"), NCCL_SOCKET_IFNAME
        names no interface the node has, so that nccl-ifname-missing (a fault of that
        host's setup, not of the job's) leads and names that node alone."""
        return self.shim("rankcheck-bad.sh", bad, "export NCCL_SOCKET_IFNAME=rkbad0")

    def wait_job(self, job, limit):
        """The job's fields and output once it ended (deadline: `limit` seconds)."""
        end = time.monotonic() + limit
        while True:
            show = self.cluster.cmd("scontrol", "show", "job", "-o", str(job), check=False).stdout
            fields = dict(re.findall(r"(\w+)=(\S*)", show))
            if fields.get("JobState") in TERMINAL_STATES:
                break
            if time.monotonic() > end:
                self.cluster.cmd("scancel", str(job), check=False)
                raise AssertionError(f"job {job} still {fields.get('JobState')} after {limit} s "
                                     f"(Reason={fields.get('Reason')})\n"
                                     f"{self.cluster.log_tails()}")
            time.sleep(0.1)
        with open(os.path.join(self.dir, f"job-{job}.out")) as f:
            return fields, f.read()

    def one_node_job(self, bad, nodelist, **env):
        return self.sbatch([sys.executable, "-c", TRAIN], timeout=4,
                           sbatch_args=["--nodes=1", "--ntasks-per-node=4",
                                        f"--nodelist={nodelist}"],
                           RANKCHECK=self.bad_node_shim(bad), RANKCHECK_TIMEOUT=4,
                           RANKCHECK_ARGS="--no-gpu -q", **env)

    def test_sbatch_script_submits_again_without_the_suspect_host(self):
        bad, good = self.cluster.nodes
        job = self.one_node_job(bad, bad, RANKCHECK_RETRIES=2)
        self.assertEqual((job.state, job.rc), ("FAILED", 3), job.out)
        self.assertIn(f"  suspect hosts: {bad}\n", job.out)  # the end of rank 0's report
        self.assertIn(f"rankcheck.sbatch: suspect hosts: {bad} (nccl-ifname-missing, exit 3)", job.out)
        m = re.search(r"rankcheck.sbatch: submitted again as job (\d+) \(try 1 of 2\), "
                      rf"excluding {re.escape(bad)}\n", job.out)
        self.assertIsNotNone(m, job.out)
        fields, out = self.wait_job(int(m.group(1)), 4 + LAUNCH_SLACK + 10)
        # The same shape, elsewhere: it passed on the other node and trained.
        self.assertEqual((fields["JobState"], fields["ExitCode"]), ("COMPLETED", "0:0"), out)
        self.assertEqual((fields["NodeList"], fields["ExcNodeList"]), (good, bad))
        self.assertEqual((fields["NumNodes"], fields["NumTasks"]), ("1", "4"))
        self.assertIn("PASS — 4 ranks of 4 joined", out)
        self.assertIn(f"master {'127.0.0.1' if self.master_env else good}:", out)
        self.assertEqual(len([ln for ln in out.splitlines() if ln.startswith("train: ")]), 4, out)

    def test_sbatch_script_submits_again_a_bounded_number_of_times(self):
        first = self.cluster.nodes[0]
        job = self.one_node_job("*", first, RANKCHECK_RETRIES=1)
        self.assertEqual((job.state, job.rc), ("FAILED", 3), job.out)
        m = re.search(r"submitted again as job (\d+) \(try 1 of 1\)", job.out)
        self.assertIsNotNone(m, job.out)
        fields, out = self.wait_job(int(m.group(1)), 4 + LAUNCH_SLACK + 10)
        self.assertEqual((fields["JobState"], fields["ExitCode"]), ("FAILED", "3:0"), out)
        self.assertIn("rankcheck.sbatch: not submitting again: 1 of RANKCHECK_RETRIES=1 tries "
                      "used", out)
        self.assertEqual(self.cluster.cmd("squeue", "-h", "-o", "%i").stdout.strip(), "")

    def test_sbatch_script_drains_the_suspect_host_when_asked(self):
        bad = self.cluster.nodes[0]
        self.addCleanup(self.resume, bad)
        job = self.one_node_job(bad, bad, RANKCHECK_DRAIN=1,
                                RANKCHECK_DRAIN_FINDINGS="hardware,nccl-ifname-missing")
        self.assertEqual((job.state, job.rc), ("FAILED", 3), job.out)
        self.assertIn(f"rankcheck.sbatch: drained {bad}", job.out)
        self.assertNotIn("submitted again", job.out)
        node = dict(re.findall(r"(\w+)=(\S*)", self.cluster.cmd(
            "scontrol", "show", "node", "-o", bad).stdout))
        self.assertIn("DRAIN", node["State"])
        reason = self.cluster.cmd("sinfo", "-h", "-n", bad, "-o", "%E").stdout.strip()
        self.assertEqual(reason, f"rankcheck nccl-ifname-missing (exit 3) in job {job.job}")

    def test_sbatch_script_drains_and_excludes_a_host_by_its_slurm_node_name(self):
        # Hosts that call themselves by a name with a domain (cn2.cluster.local, node
        # cn2): rankcheck's suspect is that name, Slurm's node is the short one.
        bad, good = self.cluster.nodes
        self.addCleanup(self.resume, bad)
        shim = self.shim("rankcheck-fqdn.sh", bad, "export NCCL_SOCKET_IFNAME=rkbad0",
                         host='"$SLURMD_NODENAME.cluster.local"')
        job = self.sbatch([sys.executable, "-c", TRAIN], timeout=4,
                          sbatch_args=["--nodes=1", "--ntasks-per-node=4", f"--nodelist={bad}"],
                          RANKCHECK=shim, RANKCHECK_TIMEOUT=4, RANKCHECK_ARGS="--no-gpu -q",
                          RANKCHECK_DRAIN=1, RANKCHECK_DRAIN_FINDINGS="nccl-ifname-missing",
                          RANKCHECK_RETRIES=1)
        self.assertEqual((job.state, job.rc), ("FAILED", 3), job.out)
        self.assertIn(f"  suspect hosts: {bad}.cluster.local\n", job.out)  # rank 0's report
        self.assertIn(f"rankcheck.sbatch: suspect hosts: {bad} (nccl-ifname-missing, exit 3; "
                      f"rankcheck named {bad}.cluster.local)", job.out)
        self.assertIn(f"rankcheck.sbatch: drained {bad}\n", job.out)
        reason = self.cluster.cmd("sinfo", "-h", "-n", bad, "-o", "%E").stdout.strip()
        self.assertEqual(reason, f"rankcheck nccl-ifname-missing (exit 3) in job {job.job}")
        m = re.search(r"rankcheck.sbatch: submitted again as job (\d+) \(try 1 of 1\), "
                      rf"excluding {re.escape(bad)}\n", job.out)
        self.assertIsNotNone(m, job.out)
        fields, out = self.wait_job(int(m.group(1)), 4 + LAUNCH_SLACK + 10)
        self.assertEqual((fields["JobState"], fields["NodeList"], fields["ExcNodeList"]),
                         ("COMPLETED", good, bad), out)

    def test_sbatch_script_drains_only_the_findings_it_is_told_to(self):
        # By default only hardware and network findings drain: a host's setup
        # (host-config, here NCCL_SOCKET_IFNAME) names the suspect, drains nothing.
        bad = self.cluster.nodes[0]
        self.addCleanup(self.resume, bad)
        job = self.one_node_job(bad, bad, RANKCHECK_DRAIN=1)
        self.assertEqual((job.state, job.rc), ("FAILED", 3), job.out)
        self.assertIn(f"rankcheck.sbatch: suspect hosts: {bad} (nccl-ifname-missing, exit 3)",
                      job.out)
        self.assertIn("rankcheck.sbatch: not draining: nccl-ifname-missing (host-config) is not "
                      "in RANKCHECK_DRAIN_FINDINGS=hardware,network", job.out)
        self.assertNotIn("drained", job.out)
        node = dict(re.findall(r"(\w+)=(\S*)", self.cluster.cmd(
            "scontrol", "show", "node", "-o", bad).stdout))
        self.assertNotIn("DRAIN", node["State"])

    def test_sbatch_script_names_the_node_srun_named_when_the_step_failed_before_a_report(self):
        # Every task on `bad` fails to start (exit 127, as a missing binary or image does):
        # rank 0 never runs, so there is no report; srun names the node, and the job is
        # submitted again without it.
        bad, good = self.cluster.nodes
        shim = self.shim("rankcheck-missing.sh", bad, "exec /nonexistent/rankcheck")
        job = self.sbatch([sys.executable, "-c", TRAIN], timeout=4,
                          sbatch_args=["--nodes=1", "--ntasks-per-node=4", f"--nodelist={bad}"],
                          RANKCHECK=shim, RANKCHECK_TIMEOUT=4, RANKCHECK_ARGS="--no-gpu -q",
                          RANKCHECK_RETRIES=1)
        self.assertEqual((job.state, job.rc), ("FAILED", 127), job.out)
        # srun groups the tasks by when each exit reached it ("tasks 0-3", or "tasks
        # 0-1,3" and "task 2" on a busy machine): every line it said is quoted.
        said = rf"{re.escape(bad)}: tasks? [0-9,-]+: Exited with exit code 127"
        self.assertRegex(job.out, r"rankcheck\.sbatch: the check step failed before rankcheck "
                         rf"could report \(srun exited with 127\); srun said: {said}(; {said})*; "
                         r"not starting the training step\n")
        self.assertNotIn("see rank 0's report", job.out)
        self.assertIn(f"rankcheck.sbatch: suspect hosts: {bad} (named by srun, exit 127)", job.out)
        m = re.search(r"rankcheck.sbatch: submitted again as job (\d+) \(try 1 of 1\), "
                      rf"excluding {re.escape(bad)}\n", job.out)
        self.assertIsNotNone(m, job.out)
        fields, out = self.wait_job(int(m.group(1)), 4 + LAUNCH_SLACK + 10)
        self.assertEqual((fields["JobState"], fields["ExitCode"], fields["NodeList"]),
                         ("COMPLETED", "0:0", good), out)

    def submit(self, sbatch_args, **env):
        """sbatch the example script with these options only (the output file among
        them); the job id."""
        r = subprocess.run([self.cluster.bins["sbatch"], "--parsable", f"--chdir={self.dir}",
                            *sbatch_args, SBATCH_SCRIPT, sys.executable, "-c", TRAIN],
                           env=self.cluster.env(**self.master_env, **env), cwd=self.dir,
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.strip().split(";")[0]

    def wait_records(self, spec, limit):
        """Every record `scontrol show job SPEC` shows (every job without SPEC), once
        all of them ended (deadline: `limit` seconds)."""
        end = time.monotonic() + limit
        while True:
            show = self.cluster.cmd("scontrol", "show", "job", "-o", *spec, check=False).stdout
            records = [dict(re.findall(r"(\w+)=(\S*)", line)) for line in show.splitlines()
                       if line.startswith("JobId=")]
            if records and all(r.get("JobState") in TERMINAL_STATES for r in records):
                return records
            if time.monotonic() > end:
                self.cluster.cmd("scancel", *spec, check=False)
                raise AssertionError(f"jobs {spec} still running after {limit} s:\n{show}")
            time.sleep(0.1)

    def read(self, name):
        with open(os.path.join(self.dir, name)) as f:
            return f.read()

    def test_sbatch_script_submits_an_array_task_again_as_its_own_index(self):
        # `scontrol show job` of the array's job id shows every task (one of the two
        # tasks has that id): each task is submitted again alone, as its own index.
        bad, good = self.cluster.nodes
        array = self.submit(["--array=0-1", "--nodes=1", "--ntasks-per-node=4",
                             f"--nodelist={bad}", f"--output={self.dir}/job-%A_%a.out"],
                            RANKCHECK=self.bad_node_shim(bad), RANKCHECK_TIMEOUT="4",
                            RANKCHECK_ARGS="--no-gpu -q", RANKCHECK_RETRIES="1")
        tasks = self.wait_records([array], 2 * (4 + LAUNCH_SLACK + 5))
        self.assertEqual(sorted(t["ArrayTaskId"] for t in tasks), ["0", "1"])
        again = {}
        for t in tasks:
            i = t["ArrayTaskId"]
            out = self.read(f"job-{array}_{i}.out")
            self.assertEqual((t["JobState"], t["ExitCode"]), ("FAILED", "3:0"), out)
            m = re.search(rf"rankcheck.sbatch: submitted again as job (\d+)_{i} \(try 1 of 1\), "
                          rf"excluding {re.escape(bad)}\n", out)
            self.assertIsNotNone(m, out)
            again[i] = m[1]
        for i, new in again.items():
            (t,) = self.wait_records([f"{new}_{i}"], 2 * (4 + LAUNCH_SLACK + 5))
            out = self.read(f"job-{new}_{i}.out")
            self.assertEqual((t["ArrayTaskId"], t["JobState"], t["ExitCode"]),
                             (i, "COMPLETED", "0:0"), out)
            self.assertEqual((t["NodeList"], t["ExcNodeList"]), (good, bad))
            self.assertIn("PASS — 4 ranks of 4 joined", out)
            # The failed task's output is still its own.
            self.assertIn("nccl-ifname-missing", self.read(f"job-{array}_{i}.out"))

    def test_sbatch_script_submitted_again_leaves_the_failed_jobs_output_alone(self):
        # --output without %j: the job submitted again writes to check.<its id>.out.
        bad, good = self.cluster.nodes
        job = self.submit(["--nodes=1", "--ntasks-per-node=4", f"--nodelist={bad}",
                           f"--output={self.dir}/check.out"],
                          RANKCHECK=self.bad_node_shim(bad), RANKCHECK_TIMEOUT="4",
                          RANKCHECK_ARGS="--no-gpu -q", RANKCHECK_RETRIES="1")
        self.wait_records([job], 4 + LAUNCH_SLACK + 5)
        out = self.read("check.out")
        self.assertIn("nccl-ifname-missing", out)
        m = re.search(r"rankcheck.sbatch: submitted again as job (\d+) \(try 1 of 1\)", out)
        self.assertIsNotNone(m, out)
        new = m[1]
        self.wait_records([new], 4 + LAUNCH_SLACK + 10)
        self.assertIn("PASS — 4 ranks of 4 joined", self.read(f"check.{new}.out"))

    def test_sbatch_script_does_not_submit_a_heterogeneous_job_again(self):
        # Its components each have their own shape and nodes: said, not guessed at.
        bad, good = self.cluster.nodes
        job = self.submit([f"--output={self.dir}/job-%j.out", "--nodes=1",
                           "--ntasks-per-node=2", f"--nodelist={bad}", ":", "--nodes=1",
                           "--ntasks-per-node=2", f"--nodelist={good}"],
                          RANKCHECK=self.bad_node_shim(bad), RANKCHECK_TIMEOUT="4",
                          RANKCHECK_ARGS="--no-gpu -q", RANKCHECK_RETRIES="1")
        records = self.wait_records([job], 4 + LAUNCH_SLACK + 10)
        self.assertEqual(len(records), 2)
        out = self.read(f"job-{job}.out")
        self.assertIn(f"rankcheck.sbatch: not submitting again: job {job} is a heterogeneous job "
                      "of 2 components, which RANKCHECK_RETRIES cannot submit again; submit it "
                      f"again yourself with --exclude={bad}", out)
        self.assertEqual(self.cluster.cmd("squeue", "-h", "-o", "%i").stdout.strip(), "")

    def test_sbatch_script_names_no_host_for_a_job_wide_error(self):
        # A WORLD_SIZE given to every task against the launcher's count is the job's own
        # configuration (launcher-env-conflict): no node is excluded or drained for it.
        first = self.cluster.nodes[0]
        self.addCleanup(self.resume, first)
        job = self.sbatch([sys.executable, "-c", TRAIN], timeout=4,
                          sbatch_args=["--nodes=1", "--ntasks-per-node=4", f"--nodelist={first}"],
                          RANKCHECK_TIMEOUT=4, RANKCHECK_ARGS="--no-gpu -q --world-size 3",
                          RANKCHECK_DRAIN=1, RANKCHECK_RETRIES=2,
                          RANKCHECK_DRAIN_FINDINGS="hardware,network,job")
        self.assertEqual((job.state, job.rc), ("FAILED", 3), job.out)
        self.assertNotIn("suspect hosts:", job.out)
        self.assertIn("rankcheck.sbatch: the failure names no host to leave out: not draining, "
                      "not submitting again", job.out)
        self.assertNotIn("drained", job.out)

    def test_sbatch_script_drains_and_excludes_nothing_for_a_fault_on_every_node(self):
        # NCCL_SOCKET_IFNAME names no interface on either node: the same fault on every
        # host is the job's. Drained, or left out one at a time, healthy nodes would
        # pay for a typo, a job per node; even a policy that drains host-config takes none.
        for node in self.cluster.nodes:
            self.addCleanup(self.resume, node)
        job = self.sbatch([sys.executable, "-c", TRAIN], timeout=4,
                          sbatch_args=["--nodes=2", "--ntasks-per-node=2"],
                          RANKCHECK=self.bad_node_shim("*"), RANKCHECK_TIMEOUT=4,
                          RANKCHECK_ARGS="--no-gpu -q", RANKCHECK_DRAIN=1, RANKCHECK_RETRIES=2,
                          RANKCHECK_DRAIN_FINDINGS="hardware,network,host-config")
        self.assertEqual((job.state, job.rc), ("FAILED", 3), job.out)
        self.assertIn("nccl-ifname-missing", job.out)
        self.assertNotIn("suspect hosts:", job.out)
        self.assertIn("rankcheck.sbatch: the failure names no host to leave out: not draining, "
                      "not submitting again", job.out)
        for node in self.cluster.nodes:
            state = dict(re.findall(r"(\w+)=(\S*)", self.cluster.cmd(
                "scontrol", "show", "node", "-o", node).stdout))["State"]
            self.assertNotIn("DRAIN", state, node)

    def resume(self, node):
        self.cluster.cmd("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        end = time.monotonic() + 10
        while time.monotonic() < end and not self.cluster._nodes_idle():
            time.sleep(0.2)


class RecipeHelp(unittest.TestCase):
    """--help prints a recipe's usage, its opening comment, and exits 0: no Slurm needed."""

    def help(self, *argv):
        r = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=10,
                           env=clean_env())
        self.assertEqual((r.returncode, r.stderr), (0, ""), r.stdout)
        return r.stdout

    def test_the_batch_script_prints_its_usage(self):
        out = self.help("/bin/bash", SBATCH_SCRIPT)
        self.assertTrue(out.startswith("Example batch script: check the job's ranks"), out)
        self.assertIn("  sbatch launchers/slurm/rankcheck.sbatch python train.py --lr 3e-4\n", out)
        self.assertIn("RANKCHECK_METRICS_DIR", out)
        # The comment's text, not its marks.
        self.assertEqual([ln for ln in out.splitlines() if ln.startswith("#")], [])
        self.assertNotIn("SBATCH --nodes", out)

    def test_the_node_wrapper_prints_its_usage(self):
        out = self.help(NODE_WRAPPER)
        self.assertTrue(out.startswith("rankcheck as a node-level Slurm step"), out)
        self.assertIn("launchers/slurm/rankcheck-node.sh [rankcheck run options]\n", out)
        self.assertNotIn("set -euo", out)


class PrologCluster(Cluster):
    """A cluster whose slurmd run the README's prolog sketch (PrologFlags=Alloc), and a
    second prolog that fails for jobs that ask for it, and a TaskProlog that does."""

    def __init__(self, root, prolog_dir, task_prolog):
        super().__init__(root)
        self.prolog_dir, self.task_prolog = prolog_dir, task_prolog

    def _write_conf(self):
        super()._write_conf()
        with open(self.conf, "a") as f:
            f.write(f"Prolog={self.prolog_dir}/*\nPrologFlags=Alloc\n"
                    f"TaskProlog={self.task_prolog}\n")


def readme_prolog(rankcheck, log_dir, master_addr=None):
    """The prolog sketch of launchers/slurm/README.md, with only the paths changed and
    --no-gpu --host-name added (and the master's address where node names do not
    resolve here)."""
    with open(os.path.join(LAUNCHERS, "README.md")) as f:
        readme = f.read()
    m = re.search(r"```bash\n(#!/bin/bash\n# /etc/slurm/prolog.d/50-rankcheck.*?)```", readme,
                  re.S)
    if m is None:
        raise AssertionError("no prolog sketch in launchers/slurm/README.md")
    script = m.group(1)
    for old, new in ((" run -q ", " run --no-gpu --host-name \"$SLURMD_NODENAME\" -q "),
                     ("\nrankcheck run", f"\n{rankcheck} run"),
                     ("/var/log/rankcheck/", f"{log_dir}/")):
        if old not in script:
            raise AssertionError(f"the sketch changed: no {old!r} in it\n{script}")
        script = script.replace(old, new)
    if master_addr:
        script = script.replace('--master-addr "${nodes[0]}"', f"--master-addr {master_addr}")
    return script


class SlurmProlog(unittest.TestCase):
    """What launchers/slurm/README.md says about running rankcheck from a prolog."""

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(RANKCHECK):
            raise unittest.SkipTest(f"no rankcheck binary at {RANKCHECK} (RANKCHECK_BIN)")
        cls.tmp = tempfile.mkdtemp(prefix="rankcheck-prolog-")
        os.chmod(cls.tmp, 0o755)
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        cls.logs = os.path.join(cls.tmp, "rankcheck-logs")
        prolog_dir = os.path.join(cls.tmp, "prolog.d")
        os.makedirs(cls.logs)
        os.makedirs(prolog_dir)
        task_prolog = os.path.join(cls.tmp, "task-prolog.sh")
        cluster = PrologCluster(os.path.join(cls.tmp, "cluster"), prolog_dir, task_prolog)
        master_addr = None if cluster.resolvable else "127.0.0.1"
        scripts = {
            os.path.join(prolog_dir, "50-rankcheck"): readme_prolog(RANKCHECK, cls.logs,
                                                                    master_addr),
            # What the README warns about: a prolog that passes a failure on.
            os.path.join(prolog_dir, "60-fail"):
                '#!/bin/bash\n[[ ${SLURM_JOB_COMMENT:-} == fail-prolog ]] && exit 1\nexit 0\n',
            task_prolog:
                '#!/bin/bash\n[[ -n ${FAIL_TASK_PROLOG:-} ]] && exit "$FAIL_TASK_PROLOG"\nexit 0\n',
        }
        for path, text in scripts.items():
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
        cls.addClassCleanup(cluster.stop)
        try:
            cluster.start()
        except Unavailable as e:
            raise unittest.SkipTest(f"cannot start a test Slurm cluster: {e}")
        cls.cluster = cluster

    def setUp(self):
        # Each test from idle nodes: one that failed mid-way (and left them drained or
        # a job held) is its own failure, not the cause of the next ones'.
        c = self.cluster
        end = time.monotonic() + 30
        while True:
            states = self.node_states()
            jobs = c.cmd("squeue", "-h", "-o", "%i", check=False).stdout.split()
            if set(states.values()) == {"idle"} and not jobs:
                return
            if time.monotonic() > end:
                raise AssertionError(f"the nodes are not idle after 30 s: {states}, jobs "
                                     f"{jobs}\n{c.log_tails()}")
            if jobs:
                c.cmd("scancel", *jobs, check=False)
            drained = [n for n, st in states.items() if "drain" in st or "down" in st]
            if drained:
                c.cmd("scontrol", "update", f"nodename={','.join(drained)}", "state=resume",
                      check=False)
            time.sleep(0.2)

    def submit(self, *sbatch_args, limit=30.0):
        """An sbatch job of `true` on both nodes; its final (or held) state."""
        c = self.cluster
        r = c.cmd("sbatch", "--parsable", "-N", "2", f"--chdir={self.tmp}",
                  f"--output={self.tmp}/job-%j.out", *sbatch_args, "--wrap", "true")
        job = r.stdout.strip().split(";")[0]
        end = time.monotonic() + limit
        while True:
            show = c.cmd("scontrol", "show", "job", "-o", job, check=False).stdout
            fields = dict(re.findall(r"(\w+)=(\S*)", show))
            # A requeued-held job passes through COMPLETING (its nodes clean up) before
            # it settles in PENDING; the held state is the one after that.
            held = (fields.get("Reason", "").startswith("launch_failed_requeued_held")
                    and fields.get("JobState") != "COMPLETING")
            if fields.get("JobState") in TERMINAL_STATES or held:
                return job, fields
            if time.monotonic() > end:
                c.cmd("scancel", job, check=False)
                raise AssertionError(f"job {job} still {fields.get('JobState')} after {limit} s "
                                     f"(Reason={fields.get('Reason')}); nodes "
                                     f"{self.node_states()}\n{c.log_tails()}")
            time.sleep(0.2)

    def node_states(self):
        r = self.cluster.cmd("sinfo", "-h", "-N", "-o", "%N %T")
        return dict(line.split() for line in r.stdout.splitlines() if line.strip())

    def test_the_sketch_checks_an_opted_in_job_on_every_node(self):
        job, fields = self.submit("--comment=rankcheck")
        self.assertEqual((fields["JobState"], fields["ExitCode"]), ("COMPLETED", "0:0"), fields)
        nodes = self.cluster.nodes
        reports = {}
        for node in nodes:
            with open(os.path.join(self.logs, f"{job}.{node}.log")) as f:
                log = f.read()
            self.assertIn("rankcheck exit 0", log)
            with open(os.path.join(self.logs, f"{job}.{node}.json")) as f:
                reports[node] = json.load(f)
        masters = [r for r in reports.values() if r["role"] == "master"]
        self.assertEqual(len(masters), 1)
        self.assertEqual((masters[0]["verdict"], masters[0]["ranks_joined"],
                          masters[0]["hosts_joined"]), ("pass", 16, 2))
        self.assertEqual(set(self.node_states().values()), {"idle"})

    def test_a_job_that_did_not_opt_in_leaves_no_log(self):
        job, fields = self.submit()
        self.assertEqual(fields["JobState"], "COMPLETED", fields)
        self.assertEqual(glob.glob(os.path.join(self.logs, f"{job}.*")), [])

    def test_a_failing_prolog_drains_every_node_and_holds_the_job(self):
        # Its held job and drained nodes are undone by the next test's setUp.
        _, fields = self.submit("--comment=fail-prolog")
        self.assertEqual(fields["JobState"], "PENDING", fields)
        self.assertTrue(fields["Reason"].startswith("launch_failed_requeued_held"), fields)
        end = time.monotonic() + 10
        while set(self.node_states().values()) != {"drained"} and time.monotonic() < end:
            time.sleep(0.2)
        self.assertEqual(set(self.node_states().values()), {"drained"})
        reasons = self.cluster.cmd("sinfo", "-h", "-R", "-o", "%E").stdout
        self.assertIn("Prolog error", reasons)

    def test_a_failing_task_prolog_ends_the_task_and_drains_nothing(self):
        c = self.cluster
        try:
            r = subprocess.run([c.bins["srun"], "-N", "1", "-n", "1",
                                "--export=ALL,FAIL_TASK_PROLOG=3", "true"], env=c.env(),
                               cwd=self.tmp, capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"srun still running after 30 s: {e.stderr!r}; nodes "
                                 f"{self.node_states()}\n{c.log_tails()}") from None
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)  # the task ends with its status
        self.assertIn("TaskProlog failed status=3", r.stderr)
        states = self.node_states()
        self.assertFalse([n for n, st in states.items() if "drain" in st], states)


if __name__ == "__main__":
    unittest.main()
