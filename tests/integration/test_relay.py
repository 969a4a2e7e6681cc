"""Host relays: 32 ranks on 4 hosts (network namespaces on 198.18.0.0/15), 8 per
host, identity from SLURM_*: the members of each host meet rank 0 through the
first of them. Healthy; a relay killed mid-rendezvous; a member that goes around
its relay; a rank twice, behind two relays; a rank missing behind one; another
job's process on a relay's host; and `rankcheck local`, whose members meet rank 0 directly."""

import json
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest

from harness import BIN, GRACE, clean_env, job_findings
from netns import ClusterCase

TIMEOUT = 8.0
HOSTS = 4
PER_HOST = 8
WORLD = HOSTS * PER_HOST


class Relays(ClusterCase):
    HOSTS, PER_HOST = HOSTS, PER_HOST

    def setUp(self):
        super().setUp()
        self.cluster.up()

    def start(self, rank, host=None, name=None, args=(), **env):
        """Starts `rank` on its host (or `host`), as `name` (default: the rank)."""
        host = rank // PER_HOST if host is None else host
        name = rank if name is None else name
        argv = [BIN, "run", "--no-gpu", "--timeout", str(TIMEOUT), "--progress-interval", "1",
                "--host-name", f"h{host}", "--json", self.json(name), *args]
        self.procs[name] = (self.cluster.spawn(host, argv, self.slurm_env(rank, **env)),
                            time.monotonic())

    def finish(self):
        out = {}
        for name, (p, t0) in self.procs.items():
            stdout, stderr = p.communicate(timeout=TIMEOUT + GRACE + 4)
            elapsed = time.monotonic() - t0
            self.assertLessEqual(elapsed, TIMEOUT + GRACE + 3, f"{name} took {elapsed:.2f} s")
            rep = None
            if os.path.exists(self.json(name)):
                with open(self.json(name)) as f:
                    rep = json.load(f)
            out[name] = (p.returncode, rep, stdout, stderr)
        return out

    def relay_pid(self, host, wait=5.0):
        """The pid of the process relaying on `host`: it holds the abstract socket."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            out = subprocess.run(["ip", "netns", "exec", self.cluster.ns[host], "ss", "-xlpH"],
                                 capture_output=True, text=True, timeout=5).stdout
            for line in out.splitlines():
                if f"@rankcheck-relay/{os.geteuid()}/{self.port}/" in line:
                    m = re.search(r"pid=(\d+)", line)
                    if m:
                        return int(m.group(1))
            time.sleep(0.05)
        self.fail(f"no relay on h{host}")

    def wait_relayed(self, host, count, wait=5.0):
        """Waits until the relay on `host` holds `count` members' connections."""
        deadline = time.monotonic() + wait
        n = -1
        while time.monotonic() < deadline:
            out = subprocess.run(["ip", "netns", "exec", self.cluster.ns[host], "ss", "-xH",
                                  "state", "established"],
                                 capture_output=True, text=True, timeout=5).stdout
            n = sum(f"@rankcheck-relay/{os.geteuid()}/{self.port}/" in line
                    for line in out.splitlines())
            if n >= count:
                return
            time.sleep(0.05)
        self.fail(f"the relay on h{host} holds {n} members' connections, not {count}")

    def wait_connections(self, count, wait=5.0):
        """Waits until the master's port on h0 holds `count` established connections."""
        deadline = time.monotonic() + wait
        n = -1
        while time.monotonic() < deadline:
            out = subprocess.run(["ip", "netns", "exec", self.cluster.ns[0], "ss", "-tnH", "state",
                                  "established", f"( sport = :{self.port} )"],
                                 capture_output=True, text=True, timeout=5).stdout
            n = len(out.splitlines())
            if n >= count:
                return
            time.sleep(0.05)
        self.fail(f"{n} connections to the master, not {count}")

    def test_healthy_32_ranks_on_4_hosts_over_4_connections(self):
        for r in range(WORLD):
            self.start(r)
        res = self.finish()
        for name, (rc, rep, out, err) in res.items():
            self.assertEqual(rc, 0, f"{name}: {out}{err}")
        master = res[0][1]
        self.assertEqual(job_findings(master), [])
        self.assertEqual(len(master["members"]), WORLD)
        # Every host's members through one relay, h0's too (rank 0 is the master).
        self.assertEqual(master["connections"]["relays"], HOSTS)
        self.assertEqual(master["connections"]["relayed_members"], WORLD - 1)
        self.assertLessEqual(master["connections"]["peak"], HOSTS + 2)
        # Each record is its member's own: its host, pid and local rank.
        by_rank = {m["rank"]: m for m in master["members"]}
        for r in range(WORLD):
            self.assertEqual(by_rank[r]["host"], f"h{r // PER_HOST}")
            self.assertEqual(by_rank[r]["local_rank"], r % PER_HOST)
        self.assertEqual(len({m["pid"] for m in master["members"]}), WORLD)
        self.assertIn("31 of 32 members joined through 4 host relays", res[0][2])

    def test_a_relay_killed_mid_rendezvous_leaves_its_members_to_join_directly(self):
        held = WORLD - 1  # h3's last rank starts late: the rendezvous is still open
        for r in range(WORLD):
            if r != held:
                self.start(r)
        victim = self.relay_pid(2)
        self.wait_connections(HOSTS)
        self.wait_relayed(2, PER_HOST)
        time.sleep(0.5)  # and admitted, through it
        os.kill(victim, signal.SIGKILL)
        time.sleep(0.5)
        self.start(held)
        res = self.finish()
        master = res[0][1]
        ids = [f["id"] for f in job_findings(master)]
        self.assertIn("relay-lost", ids)
        lost = next(f for f in master["findings"] if f["id"] == "relay-lost")
        self.assertEqual(lost["hosts"], ["h2"])
        self.assertIn(f"pid {victim}", lost["message"])
        self.assertIn("did not come back", lost["message"])
        # The relay's own rank is the only one missing; its 7 members are back, directly.
        killed = next(n for n, (p, _) in self.procs.items() if p.pid == victim)
        missing = sorted(r for f in master["findings"]
                         if f["id"] in ("missing-rank", "member-disconnected") for r in f["ranks"])
        self.assertEqual(missing, [killed])
        self.assertEqual(len(master["members"]), WORLD - 1)
        # What carried them at the decision: h2's members came back directly, its
        # relay is gone (not "31 of 31 members joined through 4 host relays").
        self.assertEqual(master["connections"]["relays"], HOSTS - 1)
        self.assertEqual(master["connections"]["relayed_members"], WORLD - 1 - PER_HOST)
        self.assertIn(f"{WORLD - 1 - PER_HOST} of {WORLD - 1} members joined through "
                      f"{HOSTS - 1} host relays", res[0][2])
        for r in range(2 * PER_HOST, 3 * PER_HOST):
            if r == killed:
                continue
            rc, rep, out, err = res[r]
            self.assertEqual(rc, master["exit_code"], f"rank {r}: {out}{err}")
            self.assertTrue(rep["verdict_received"], err)
            self.assertIn("joining the master directly", err)

    def test_a_member_may_go_around_its_relay(self):
        for r in range(WORLD):
            self.start(r, args=("--no-relay",) if r == 13 else ())
        res = self.finish()
        for name, (rc, rep, out, err) in res.items():
            self.assertEqual(rc, 0, f"{name}: {out}{err}")
        master = res[0][1]
        self.assertEqual(master["connections"]["relays"], HOSTS)
        self.assertEqual(master["connections"]["relayed_members"], WORLD - 2)

    def test_a_rank_twice_behind_two_relays_is_a_duplicate(self):
        held = WORLD - 1  # out, so that the count is short until the copy is in
        for r in range(WORLD):
            if r != held:
                self.start(r)
        self.wait_relayed(3, PER_HOST - 1)
        # Rank 9 belongs to h1; a second copy runs on h3, with h3's other members. With
        # it the count of ranks is full, and the master decides.
        self.start(9, host=3, name="copy")
        res = self.finish()
        master = res[0][1]
        dup = next(f for f in master["findings"] if f["id"] == "duplicate-rank")
        self.assertEqual(dup["ranks"], [9])
        self.assertEqual(sorted(dup["hosts"]), ["h1", "h3"])
        self.assertGreaterEqual(master["connections"]["relays"], HOSTS)

    def test_a_rank_missing_behind_a_relay_is_named_with_its_host(self):
        for r in range(WORLD):
            if r != 13:
                self.start(r)
        res = self.finish()
        master = res[0][1]
        self.assertEqual(res[0][0], 4)
        f = master["findings"][0]
        self.assertEqual(f["id"], "missing-rank")
        self.assertEqual(f["message"],
                         "rank 13 never joined (expected on h1): h1 sent ranks 8-12,14-15 but not 13")
        self.assertEqual(f["hosts"], ["h1"])

    def test_another_jobs_process_uses_no_relay_of_this_job(self):
        # The relay's endpoint names the job: a process of another job on the same host
        # meets no relay of this one, and the master refuses it itself.
        held = WORLD - 1  # the rendezvous stays open until the stranger has been refused
        for r in range(WORLD):
            if r != held:
                self.start(r)
        self.relay_pid(2)
        self.start(20, name="foreign", job=9999)
        self.procs["foreign"][0].wait(timeout=TIMEOUT)
        self.start(held)
        res = self.finish()
        master = res[0][1]
        rc, rep, out, err = res["foreign"]
        self.assertEqual(rc, 6, out + err)
        f = rep["findings"][0]
        self.assertEqual(f["id"], "foreign-job")
        self.assertNotIn("through this host's relay", f["message"])
        self.assertIn("not job '9999'", f["message"])
        refusal = next(f for f in master["findings"] if f["id"] == "foreign-job")
        self.assertIn("a process of job '9999' (rank 20 (h2", refusal["message"])
        self.assertNotIn("(refused by the relay of h2)", res[0][3])
        self.assertEqual(len(master["members"]), WORLD)


class LocalRelays(unittest.TestCase):

    def local(self, path, *extra):
        """The report of a passing `rankcheck local -n 8 --no-gpu`, written to `path`."""
        p = subprocess.run([BIN, "local", "-n", "8", "--no-gpu", *extra, "--json", path],
                           capture_output=True, text=True, timeout=30, env=clean_env())
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        with open(path) as f:
            return json.load(f)

    def test_no_relay_under_rankcheck_local(self):
        # Every member is on rank 0's machine: each meets it directly, no hop between.
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "r.json")
            for extra in ((), ("--no-relay",)):
                rep = self.local(path, *extra)
                self.assertEqual(rep["connections"]["relays"], 0, extra)
                self.assertEqual(rep["connections"]["relayed_members"], 0, extra)
                self.assertEqual(rep["connections"]["peak"], 7, extra)


if __name__ == "__main__":
    unittest.main()
