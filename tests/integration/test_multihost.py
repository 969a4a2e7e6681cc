"""Multi-host jobs in network namespaces, as a Slurm step across three hosts would see
them: two ranks per host, identity from SLURM_* (MASTER_ADDR: the first host of the
node list), members on their own host names and addresses."""

import os
import signal
import subprocess
import time
import unittest

from harness import BIN, clean_env, job_findings
from netns import ClusterCase

TIMEOUT = 4.0
HOSTS = 3
PER_HOST = 2
WORLD = HOSTS * PER_HOST


class MultiHost(ClusterCase):
    HOSTS, PER_HOST = HOSTS, PER_HOST

    def start(self, ranks, overrides=None, extra_env=None):
        """Builds the hosts, then starts `ranks` on them; extra_env={rank: {var: value}}."""
        extra_env = extra_env or {}
        self.cluster.up(overrides)
        procs = {}
        for r in ranks:
            host = r // PER_HOST
            argv = [BIN, "run", "--no-gpu", "--timeout", str(TIMEOUT), "--progress-interval", "1",
                    "--host-name", f"h{host}", "--json", self.json(r)]
            procs[r] = (self.cluster.spawn(host, argv, self.slurm_env(r, **extra_env.get(r, {}))),
                        time.monotonic())
        return procs

    def finish(self, procs):
        return self.wait_all(procs, TIMEOUT)

    def test_healthy_three_hosts(self):
        res = self.finish(self.start(range(WORLD)))
        for r, (rc, rep, out, err) in res.items():
            self.assertEqual(rc, 0, f"rank {r}: {out}{err}")
        master = res[0][1]
        self.assertEqual(job_findings(master), [])
        # Without a token, a job over hosts is told so with its findings, not only on stderr.
        self.assertEqual([(f["id"], f["severity"]) for f in master["findings"]],
                         [("no-job-token", "warning")])
        self.assertEqual(master["verdict"], "pass")
        self.assertEqual(master["master"]["addr"], "h0")
        self.assertEqual(master["master"]["bound"], ["198.18.0.1"])
        peers = sorted({m["peer"].rsplit(":", 1)[0] for m in master["members"]})
        self.assertEqual(peers, ["198.18.0.1", "198.18.0.2", "198.18.0.3", "in-process"])
        self.assertEqual(sorted({m["host"] for m in master["members"]}), ["h0", "h1", "h2"])

    def test_master_addr_resolves_to_loopback_on_the_master(self):
        # h0's /etc/hosts maps its own name to 127.0.1.1, as Debian installs do.
        res = self.finish(self.start(range(WORLD), overrides={0: {"h0": "127.0.1.1"}}))
        for r, (rc, rep, out, err) in res.items():
            self.assertEqual(rc, 3, f"rank {r}: {out}{err}")
        master = res[0][1]
        self.assertEqual([f["id"] for f in job_findings(master)], ["master-addr-loopback"])
        f = master["findings"][0]
        self.assertEqual((f["ranks"], f["hosts"]), ([0], ["h0"]))
        self.assertIn("resolves to 127.0.1.1 (loopback) on the master's host h0", f["message"])
        # It listened on every interface, so that the other hosts still made the report.
        self.assertEqual(master["master"]["bound"], ["0.0.0.0"])
        self.assertEqual(master["ranks_joined"], WORLD)

    def test_one_host_pointed_elsewhere(self):
        # h2's ranks were given h1 as MASTER_ADDR: nothing listens there.
        elsewhere = {r: {"MASTER_ADDR": "h1"} for r in (4, 5)}
        res = self.finish(self.start(range(WORLD), extra_env=elsewhere))
        for r in (4, 5):
            rc, rep, out, err = res[r]
            self.assertEqual(rc, 4, out + err)
            f = rep["findings"][0]
            self.assertEqual(f["id"], "master-unreachable")
            self.assertIn("cannot reach the master at h1:", f["message"])
            self.assertIn("Connection refused", f["message"])
        master = res[0][1]
        self.assertEqual(res[0][0], 4)
        missing = [f for f in master["findings"] if f["id"] == "missing-rank"]
        self.assertEqual(len(missing), 1)
        self.assertEqual((missing[0]["ranks"], missing[0]["hosts"]), ([4, 5], ["h2"]))

    def test_whole_host_down(self):
        res = self.finish(self.start(r for r in range(WORLD) if r // PER_HOST != 1))
        master = res[0][1]
        for r, (rc, rep, out, err) in res.items():
            self.assertEqual(rc, 4, f"rank {r}: {out}{err}")
        self.assertEqual([f["id"] for f in job_findings(master)], ["missing-rank"])
        f = master["findings"][0]
        self.assertEqual((f["ranks"], f["hosts"]), ([2, 3], ["h1"]))
        self.assertEqual(f["message"], "h1 never joined: all 2 of its ranks (2-3) are missing")

    def test_host_cut_off_mid_run(self):
        # Rank 3 never starts, so the master waits for its deadline; meanwhile h2,
        # whose ranks have joined, loses its link. Nobody may outlive the deadline.
        procs = self.start(r for r in range(WORLD) if r != 3)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if self.connected_from(2):  # h2's ranks are in (through its relay)
                break
            time.sleep(0.1)
        time.sleep(0.3)  # both of them
        self.cluster.cut(2)
        res = self.finish(procs)
        master = res[0][1]
        self.assertEqual(res[0][0], 4)
        self.assertEqual(master["decided"], "deadline")
        missing = [f for f in master["findings"] if f["id"] == "missing-rank"]
        self.assertEqual(missing[0]["ranks"], [3])
        for r in (4, 5):
            rc, rep, out, err = res[r]
            self.assertEqual(rc, 4, out + err)
            self.assertEqual(rep["findings"][0]["id"], "master-lost")
            self.assertIn("no verdict from the master by the deadline", rep["findings"][0]["message"])

    def test_connections_beyond_the_listen_backlog_are_paced(self):
        # net.core.somaxconn belongs to a network namespace: 2 on every host here, so
        # the 6 direct members (--no-relay) space their first attempts 125 ms apart by
        # rank instead of overflowing rank 0's backlog.
        self.cluster.up()
        for ns in self.cluster.ns:
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.core.somaxconn=2"],
                           check=True, timeout=10)
        procs = {}
        for r in range(WORLD):
            argv = [BIN, "run", "--no-gpu", "--no-relay", "--timeout", str(TIMEOUT), "--host-name",
                    f"h{r // PER_HOST}", "--json", self.json(r)]
            procs[r] = (self.cluster.spawn(r // PER_HOST, argv, self.slurm_env(r)),
                        time.monotonic())
        res = self.finish(procs)
        for r, (rc, rep, out, err) in res.items():
            self.assertEqual(rc, 0, f"rank {r}: {out}{err}")
        self.assertIn("net.core.somaxconn is 2, below the 6 members: those that connect directly "
                      "spread their first attempts, 250 ms for each 2", res[0][3])
        joined = {m["rank"]: m["joined_ms"] for m in res[0][1]["members"]}
        # Rank 5 starts after rank 0 and waits 5 x 125 ms before it knocks: never sooner.
        self.assertGreaterEqual(joined[5], 600)
        self.assertGreaterEqual(joined[5], joined[1])

    # --- helpers -------------------------------------------------------------

    def connected_from(self, host):
        """Whether h0's master port has an established connection from host `host`."""
        out = subprocess.run(["ip", "netns", "exec", self.cluster.ns[0], "ss", "-tnH", "state",
                              "established", f"( sport = :{self.port} )"], capture_output=True,
                             text=True, timeout=5).stdout
        return f"{self.cluster.addr(host)}:" in out



def read(path):
    with open(path, errors="replace") as f:
        return f.read()


class NodeMode(ClusterCase):
    """One probe per node (NODE_RANK/NNODES/NPROC_PER_NODE, as preflight.sh and
    rankcheck-node.sh give them), on two hosts."""

    HOSTS, PER_HOST = 2, 1

    def node(self, host, node_rank, log=None):
        env = clean_env(NODE_RANK=node_rank, NNODES=2, NPROC_PER_NODE=2, MASTER_ADDR="h0",
                        MASTER_PORT=self.port)
        argv = [BIN, "run", "--no-gpu", "--timeout", str(TIMEOUT), "--host-name", f"h{host}",
                "--json", self.json(host)]
        stderr = open(log, "w") if log else subprocess.PIPE
        p = self.cluster.spawn(host, argv, env, stderr=stderr)
        if log:
            stderr.close()
        self.procs[host] = (p, time.monotonic())
        return p

    def test_two_nodes_at_node_rank_0_are_a_duplicate_whichever_starts_first(self):
        # An unset NODE_RANK that a script defaults to 0 on both nodes. h1 starts first:
        # it cannot listen on h0's address, and used to exit 7 at once telling the user
        # to point MASTER_ADDR at h1, while h0 waited out its deadline. It now looks for
        # a master at MASTER_ADDR, joins h0's when it comes, and both name the duplicate.
        self.cluster.up()
        log = os.path.join(self.tmp.name, "h1.err")
        late = self.node(1, 0, log)
        deadline = time.monotonic() + 60
        while "looking for a rank 0 there" not in read(log):
            self.assertIsNone(late.poll(), f"h1 ended: {read(log)}")
            self.assertLess(time.monotonic(), deadline, read(log))
            time.sleep(0.02)
        self.node(0, 0)
        res = self.wait_all(self.procs, TIMEOUT)
        for host in (0, 1):
            rc, rep, out, err = res[host]
            self.assertEqual(rc, 3, f"h{host}: {out}{err}")
            self.assertEqual(job_findings(rep)[0]["id"], "duplicate-rank", out)
        f = job_findings(res[0][1])[0]
        self.assertEqual((f["ranks"], f["hosts"]), ([0, 1], ["h0", "h1"]))
        self.assertIn("each node needs its own node rank: check how NODE_RANK", f["hint"])

    def test_rank_0_on_the_wrong_node_says_both_fixes_at_the_deadline(self):
        # Only h1 runs, at node rank 0: no master ever comes up at h0.
        self.cluster.up()
        self.node(1, 0)
        rc, rep, out, err = self.wait_all(self.procs, TIMEOUT)[1]
        self.assertEqual(rc, 7, out + err)
        f = rep["findings"][0]
        self.assertEqual(f["id"], "master-addr-not-local")
        self.assertIn("no rank 0 of this job answered there by the deadline", f["message"])
        self.assertIn("if rank 0 belongs on h0: start it there, and check this process's node "
                      "rank", f["hint"])
        self.assertIn("if it belongs on h1: set MASTER_ADDR", f["hint"])



class FrozenMaster(ClusterCase):
    """Rank 0 stopped (SIGSTOP: a frozen node, a driver call that never returns) on h0,
    its members on h1 and h2 (h3's never starts, so that rank 0 is still waiting): each
    member ends by its deadline with its report on stdout, and names h0, not its own
    host, as the suspect."""

    HOSTS, PER_HOST = 4, 1

    def log(self, r):
        return os.path.join(self.tmp.name, f"e{r}")

    def start_rank(self, r):
        log = self.log(r)
        env = self.slurm_env(r, MASTER_ADDR="h0")
        argv = [BIN, "run", "--no-gpu", "--timeout", str(TIMEOUT), "--host-name", f"h{r}",
                "--json", self.json(r)]
        with open(log, "w") as err:
            self.procs[r] = (self.cluster.spawn(r, argv, env, stderr=err), time.monotonic())
        return log

    def wait_log(self, log, text):
        deadline = time.monotonic() + 60
        while text not in read(log):
            self.assertLess(time.monotonic(), deadline, read(log))
            time.sleep(0.02)

    def members(self):
        master = self.procs.pop(0)[0]
        try:
            return self.wait_all(self.procs, TIMEOUT)
        finally:
            master.kill()
            master.wait()

    def test_stopped_after_the_members_joined(self):
        self.cluster.up()
        self.start_rank(0)
        logs = {r: self.start_rank(r) for r in (1, 2)}
        for r, log in logs.items():
            self.wait_log(log, "ranks so far")
        os.kill(self.procs[0][0].pid, signal.SIGSTOP)
        for r, (rc, rep, out, err) in self.members().items():
            self.assertEqual(rc, 4, out + read(self.log(r)))
            f = rep["findings"][0]
            self.assertEqual((f["id"], f["hosts"]), ("master-lost", ["h0"]), out)
            self.assertEqual(rep["suspect_hosts"], "h0")
            self.assertIn("[master-lost]", out)
            self.assertTrue(out.endswith("  suspect hosts: h0\n"), out)

    def test_stopped_before_any_member_came(self):
        # The kernel still takes the members' connections; nothing answers them.
        self.cluster.up()
        self.wait_log(self.start_rank(0), "master listening")
        os.kill(self.procs[0][0].pid, signal.SIGSTOP)
        for r in (1, 2):
            self.start_rank(r)
        for r, (rc, rep, out, err) in self.members().items():
            self.assertEqual(rc, 4, out + read(self.log(r)))
            f = rep["findings"][0]
            self.assertEqual((f["id"], f["hosts"]), ("master-unreachable", ["h0"]), out)
            self.assertIn("accepts connections but says nothing: rank 0 stopped or stuck there",
                          f["hint"])
            self.assertIn("suspect hosts: h0", out)


if __name__ == "__main__":
    unittest.main()
