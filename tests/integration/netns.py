"""Several hosts on one machine: network namespaces on a bridge, each with an address
from 198.18.0.0/15 and its own /etc/hosts (ip netns exec mounts /etc/netns/NAME/hosts
over /etc/hosts). No route leads anywhere else. Everything made here is removed
again, also when a test fails.
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import GRACE, free_port, save_reports

SUBNET = "198.18.0"


def slurm_step_env(rank, hosts, per_host, port, job=4242, **extra):
    """The environment Slurm gives task `rank` of a step over h0..h{hosts-1}, `per_host`
    tasks each, with MASTER_PORT=port; `extra` adds or overrides variables."""
    from harness import clean_env
    node, local = divmod(rank, per_host)
    env = clean_env(SLURM_JOB_ID=job, SLURM_PROCID=rank, SLURM_NTASKS=hosts * per_host,
                    SLURM_LOCALID=local, SLURM_NODEID=node, SLURM_STEP_NUM_NODES=hosts,
                    SLURM_STEP_NODELIST=f"h[0-{hosts - 1}]",
                    SLURM_STEP_TASKS_PER_NODE=f"{per_host}(x{hosts})", MASTER_PORT=port)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10,
                          check=check)


def can_make_namespaces():
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no ip(8) (iproute2)"
    name = f"rcprobe{os.getpid()}"
    r = ip("netns", "add", name, check=False)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    ip("netns", "del", name, check=False)
    return None


class Cluster:
    """`n` hosts h0..h{n-1}, host i at 198.18.0.{i+1}."""

    def __init__(self, n):
        self.n = n
        self.tag = f"rc{os.getpid() % 100000}"
        self.bridge = f"{self.tag}br"
        self.ns = [f"{self.tag}h{i}" for i in range(n)]
        self.procs = []
        self.made = []  # what to undo, newest last

    def addr(self, i):
        return f"{SUBNET}.{i + 1}"

    def up(self, hosts_overrides=None):
        """Builds the hosts; hosts_overrides={i: {name: address}} changes host i's /etc/hosts."""
        ip("link", "add", self.bridge, "type", "bridge")
        self.made.append(("link", self.bridge))
        ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.ns):
            ip("netns", "add", ns)
            self.made.append(("netns", ns))
            outer = f"{self.tag}v{i}"
            ip("link", "add", outer, "type", "veth", "peer", "name", f"{self.tag}p{i}")
            self.made.append(("link", outer))
            ip("link", "set", f"{self.tag}p{i}", "netns", ns)
            ip("link", "set", outer, "master", self.bridge)
            ip("link", "set", outer, "up")
            ip("-n", ns, "link", "set", f"{self.tag}p{i}", "name", "eth0")
            ip("-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
            names = {f"h{j}": self.addr(j) for j in range(self.n)}
            names.update((hosts_overrides or {}).get(i, {}))
            d = f"/etc/netns/{ns}"
            # Another cluster's teardown removes /etc/netns when it empties (suites run
            # side by side): between makedirs' parent and its leaf it may be gone again.
            for attempt in range(5):
                try:
                    os.makedirs(d, exist_ok=True)
                    break
                except FileNotFoundError:
                    if attempt == 4:
                        raise
            self.made.append(("dir", d))
            with open(f"{d}/hosts", "w") as f:
                f.write("127.0.0.1 localhost\n")
                for name, a in names.items():
                    f.write(f"{a} {name}\n")
        return self

    def spawn(self, i, argv, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE):
        p = subprocess.Popen(["ip", "netns", "exec", self.ns[i], *argv], env=env, stdout=stdout,
                             stderr=stderr, text=True)
        self.procs.append(p)
        return p

    def cut(self, i):
        """Drops host i off the network, mid-run: its link goes down inside its namespace."""
        ip("-n", self.ns[i], "link", "set", "eth0", "down")

    def down(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for kind, what in reversed(self.made):
            if kind == "netns":
                ip("netns", "del", what, check=False)
            elif kind == "link":
                ip("link", "del", what, check=False)
            elif kind == "dir":
                shutil.rmtree(what, ignore_errors=True)
        self.made.clear()
        try:
            os.rmdir("/etc/netns")  # only when nothing else is in it
        except OSError:
            pass

    def leftovers(self):
        """Anything of this cluster still there (for the tests' own check)."""
        left = [n for n in ip("netns", "list").stdout.split() if n.startswith(self.tag)]
        left += [l for l in ip("-o", "link").stdout.splitlines() if self.tag in l]
        left += [d for d in (f"/etc/netns/{ns}" for ns in self.ns) if os.path.exists(d)]
        return left


WHY_NOT = can_make_namespaces()


@unittest.skipIf(WHY_NOT, WHY_NOT or "")
class ClusterCase(unittest.TestCase):
    """A test on HOSTS namespace hosts, PER_HOST ranks each: a folder for its reports, a
    free MASTER_PORT, and the hosts taken down afterwards, with nothing of them left
    behind. Skipped, with the reason, where namespaces cannot be made."""

    HOSTS = 3
    PER_HOST = 2

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.port = free_port()
        self.cluster = Cluster(self.HOSTS)
        self.procs = {}
        self.addCleanup(self.cleanup)

    def slurm_env(self, rank, **extra):
        """The environment Slurm gives task `rank` of a step over the hosts (see slurm_step_env)."""
        return slurm_step_env(rank, self.cluster.n, self.PER_HOST, self.port, **extra)

    def json(self, name):
        """Where the process `name` (a rank, say) writes its JSON report."""
        return os.path.join(self.tmp.name, f"r{name}.json")

    def wait_all(self, procs, timeout):
        """Waits for `procs` ({rank: (process, start)}), each of which must end within
        `timeout` + GRACE of its start; {rank: (exit code, JSON report, stdout, stderr)}."""
        out = {}
        for r, (p, t0) in procs.items():
            stdout, stderr = p.communicate(timeout=timeout + GRACE + 2)
            elapsed = time.monotonic() - t0
            self.assertLessEqual(elapsed, timeout + GRACE, f"rank {r} took {elapsed:.2f} s")
            with open(self.json(r)) as f:
                out[r] = (p.returncode, json.load(f), stdout, stderr)
        return out

    def cleanup(self):
        for p, _ in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()
        self.cluster.down()
        self.assertEqual(self.cluster.leftovers(), [])
        save_reports(self, self.tmp.name)
        self.tmp.cleanup()
