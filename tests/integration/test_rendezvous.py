"""Rendezvous scenarios with real processes on loopback, one behaviour per test."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import unittest

from harness import BIN, EMULATED, GRACE, Proc, RankcheckTest, clean_env, free_port, job_findings


class Rendezvous(RankcheckTest):

    def test_healthy_job_of_eight(self):
        # A deadline far from what is measured: "decided before it" holds on a busy machine.
        self.timeout = 30.0
        procs = self.job(8, per_host=4)
        self.finish()
        self.assertExit(procs.values(), 0)
        master = procs[0].report
        self.assertEqual(master["verdict"], "pass")
        self.assertEqual(master["schema_version"], 1)
        self.assertEqual(job_findings(master), [])
        self.assertEqual(sorted(m["rank"] for m in master["members"]), list(range(8)))
        self.assertEqual(master["decided"], "all-joined")
        # Nobody waited for the deadline.
        for p in procs.values():
            self.assertLess(p.elapsed, self.timeout / 3, p.name)
        self.assertIn("PASS — 8 ranks of 8 joined", procs[0].out)
        self.assertRegex(procs[5].out, r"rankcheck: PASS: 8 ranks joined, 1 warning; this is rank 5 on h1")
        self.assertEqual(procs[5].report["role"], "member")

    def test_master_port_is_free_for_the_training_job_right_after(self):
        # Members close first: no TIME_WAIT on MASTER_PORT, which the job binds next.
        procs = self.job(4)
        self.finish()
        self.assertExit(procs.values(), 0)
        with socket.socket() as s:
            s.bind(("127.0.0.1", self.port))  # no SO_REUSEADDR, as a careless job would

    def test_a_too_big_world_size_is_decided_without_waiting(self):
        # WORLD_SIZE=8 exported over Slurm's 4 tasks: all 4 are here, and every member's
        # launcher says 4, so the master decides at once instead of at the deadline.
        self.timeout = 30.0  # far from what is measured (a busy machine)
        procs = {r: self.rank(r, 8, SLURM_PROCID=r, SLURM_NTASKS=4, SLURM_JOB_ID=77)
                 for r in range(4)}
        self.finish()
        self.assertExit(procs.values(), 3)
        master = procs[0].report
        self.assertEqual(master["decided"], "all-joined")
        self.assertLess(procs[0].elapsed, self.timeout / 3)
        self.assertEqual([f["id"] for f in job_findings(master)],
                         ["launcher-env-conflict", "missing-rank"])
        self.assertIn("WORLD_SIZE=8 but SLURM_NTASKS=4", master["findings"][0]["message"])
        # The members' copies of the findings carry their ranks and hosts too.
        self.assertEqual(procs[2].finding("launcher-env-conflict")["ranks"], [0, 1, 2, 3])

    def test_a_waiting_member_says_so_every_progress_interval(self):
        # Rank 2 never starts: rank 1, joined, waits for the verdict until the deadline.
        # Its log is not silent meanwhile (every --progress-interval, 1 s here).
        procs = self.job(3, skip={2})
        self.finish()
        self.assertExit(procs.values(), 4)
        lines = re.findall(r"rank 1 \(.*\) waiting for the master's verdict \([12]/3 ranks had "
                           r"joined when it did\): it decides once all 3 have joined, or at the "
                           r"deadline; \d+ s left \(rank 0's log names the ranks missing\)",
                           procs[1].err)
        self.assertGreaterEqual(len(lines), 1, procs[1].err)

    def test_rank_never_started(self):
        procs = self.job(8, per_host=4, skip={5})
        self.finish()
        self.assertExit(procs.values(), 4)
        f = procs[0].finding("missing-rank")
        self.assertEqual(f["ranks"], [5])
        self.assertEqual(f["hosts"], ["h1"])
        self.assertEqual(f["message"],
                         "rank 5 never joined (expected on h1, local rank 1): h1 sent ranks "
                         "4,6-7 but not 5")
        self.assertEqual(procs[0].ids(), ["missing-rank"])
        # Members print the job-wide verdict.
        # ... the whole first finding, not its first clause: members print only this line.
        self.assertIn("rankcheck: FAIL: rank 5 never joined (expected on h1, local rank 1): h1 "
                      "sent ranks 4,6-7 but not 5; this is rank 3 on h0", procs[3].out)

    def test_duplicate_rank(self):
        procs = self.job(8, per_host=4, skip={6})
        dup = self.rank(3, 8, host="h1", local=(2, 4))  # the process meant to be rank 6
        self.finish()
        self.assertExit(self.procs, 3)
        master = procs[0]
        self.assertEqual(master.ids(), ["duplicate-rank", "missing-rank"])
        f = master.finding("duplicate-rank")
        self.assertEqual(f["ranks"], [3])
        self.assertEqual(f["hosts"], ["h0", "h1"])
        self.assertIn(f"h0 (pid {procs[3].popen.pid})", f["message"])
        self.assertIn(f"h1 (pid {dup.popen.pid})", f["message"])
        self.assertEqual(master.finding("missing-rank")["ranks"], [6])
        self.assertEqual(master.report["decided"], "all-joined")
        # One line per member, with the leading finding's id; rank 0 has the rest.
        self.assertIn("rankcheck: FAIL: rank 3 is claimed by 2 members", dup.out)
        self.assertIn("[duplicate-rank]", dup.out)

    def test_one_rank_with_another_world_size(self):
        procs = self.job(8, per_host=4, skip={5})
        odd = self.rank(5, 16, host="h1", local=(1, 4))
        self.finish()
        self.assertExit(self.procs, 3)
        self.assertEqual(procs[0].ids(), ["world-size-mismatch"])
        f = procs[0].finding("world-size-mismatch")
        self.assertEqual(f["ranks"], [5])
        self.assertEqual(f["message"], "members disagree on the world size: ranks 0-4,6-7 on "
                                       "h0 and h1 say 8; rank 5 on h1 says 16")
        self.assertEqual(odd.report["exit_code"], 3)

    def test_rank_out_of_range(self):
        procs = self.job(4, skip={3})
        self.rank(7, 4)
        self.finish()
        self.assertExit(self.procs, 3)
        self.assertEqual(procs[0].ids(), ["rank-out-of-range", "missing-rank"])
        self.assertEqual(procs[0].finding("rank-out-of-range")["ranks"], [7])
        self.assertEqual(procs[0].finding("missing-rank")["ranks"], [3])

    def test_one_rank_with_a_wrong_master_port(self):
        procs = self.job(4, skip={2})
        lost = self.rank(2, 4, port=self.port + 1 if self.port < 65535 else self.port - 1)
        self.finish()
        self.assertExit(procs.values(), 4)
        self.assertEqual(procs[0].finding("missing-rank")["ranks"], [2])
        self.assertEqual(lost.rc, 4)
        f = lost.finding("master-unreachable")
        self.assertRegex(f["message"], r"cannot reach the master at 127\.0\.0\.1:\d+ by the "
                                       r"deadline: connect: Connection refused \(attempt \d+\)")
        self.assertEqual(f["ranks"], [2])

    def test_no_master_at_all(self):
        members = [self.rank(r, 4) for r in (1, 2, 3)]
        self.finish()
        self.assertExit(members, 4)
        for m in members:
            self.assertEqual(m.ids(), ["master-unreachable"])
            self.assertGreaterEqual(m.elapsed, self.timeout - 0.5)
        self.assertIn("rank 1 (", members[0].err)  # progress lines say who and where

    def test_master_port_already_taken(self):
        holder = socket.socket()
        holder.bind(("127.0.0.1", self.port))
        holder.listen()
        try:
            # Rank 0's deadline far from what is measured (a busy machine); the members,
            # which have no master, wait for theirs.
            self.timeout = 30.0
            procs = [self.rank(0, 3)]
            self.timeout = 3.0
            procs += [self.rank(r, 3) for r in (1, 2)]
            self.timeout = 30.0
            self.finish()
        finally:
            holder.close()
        self.assertEqual(procs[0].rc, 7)
        f = procs[0].finding("master-port-in-use")
        self.assertEqual(f["message"],
                         f"MASTER_PORT {self.port} is taken on {f['hosts'][0]}: cannot listen on "
                         f"127.0.0.1:{self.port}: Address already in use")
        self.assertLess(procs[0].elapsed, 10.0, "it says so at once, not at the deadline")
        self.assertExit([procs[1], procs[2]], 4)
        f = procs[1].finding("master-unreachable")
        self.assertIn("accepted the connection but sent no challenge", f["message"])
        # The fix leads with the causes: a silent holder of the port is a stopped or stuck
        # rank 0 as often as another service, and the host that holds it is the suspect.
        self.assertTrue(f["hint"].startswith(
            f"the process that holds 127.0.0.1:{self.port} accepts connections but says nothing: "
            "rank 0 stopped or stuck there"), f["hint"])
        self.assertIn("or another service holds that port", f["hint"])
        self.assertEqual(f["hosts"], [], "127.0.0.1 names no node")

    def test_master_and_member_files_share_one_core(self):
        core = ("role", "verdict", "exit_code", "job_id", "world_size", "ranks_joined",
                "headline", "errors", "warnings", "verdict_received", "self", "findings",
                "suspect_hosts", "timings")
        for world, skip in ((2, ()), (3, (2,))):  # a pass, and a failure
            with self.subTest(world=world):
                procs = self.job(world, skip=skip, extra=["--job-id", "j1"])
                self.finish(procs.values())
                master, member = procs[0].report, procs[1].report
                for key in core:
                    self.assertIn(key, master)
                    self.assertIn(key, member)
                for key in ("verdict", "exit_code", "job_id", "world_size", "ranks_joined",
                            "headline", "errors", "warnings"):
                    self.assertEqual(master[key], member[key], key)
                self.assertEqual((master["self"]["rank"], member["self"]["rank"]), (0, 1))
                self.assertTrue(master["verdict_received"] and member["verdict_received"])
                self.assertIn("total_ms", master["timings"])
                self.assertIn("total_ms", member["timings"])
                self.procs.clear()
                self.port = free_port()

    def test_an_unresolvable_master_addr_leads_the_fix(self):
        m = self.rank(1, 2, extra=["--master-addr", "no-such-host.invalid"])
        self.finish()
        self.assertEqual(m.rc, 4)
        f = m.finding("master-unreachable")
        self.assertTrue(f["hint"].startswith(
            f"MASTER_ADDR no-such-host.invalid does not resolve on {f['hosts'][0]}: fix the name"),
            f["hint"])

    def test_a_rank_on_the_host_master_addr_names_is_told_rank_0_belongs_there(self):
        own = own_address()
        if own is None:
            self.skipTest("this host has no address but loopback")
        # Nothing leaves the host: a connection to its own address stays on it.
        m = self.rank(1, 2, extra=["--master-addr", own])
        self.finish()
        self.assertEqual(m.rc, 4)
        f = m.finding("master-unreachable")
        self.assertTrue(f["hint"].startswith(
            f"MASTER_ADDR {own} is this host, {f['hosts'][0]}, so rank 0 should be running here"),
            f["hint"])
        # On loopback, no such lead: there, it is the loopback hint's to say.
        m = self.rank(1, 2)
        self.finish([m])
        self.assertNotIn("should be running here", m.finding("master-unreachable")["hint"])

    def test_master_cannot_listen_for_another_reason(self):
        # A link-local IPv6 address without a scope: bind(2) says EINVAL. Not a port
        # someone holds, and the report says what the system said.
        env = clean_env(RANK=0, WORLD_SIZE=1, MASTER_ADDR="fe80::1", MASTER_PORT=self.port)
        self.timeout = 30.0  # far from what is measured (a busy machine)
        m = Proc(["run", "--no-gpu", "--timeout", str(self.timeout)], env, self.tmp.name, "rank0")
        self.procs.append(m)
        self.finish()
        self.assertEqual(m.rc, 7)
        self.assertEqual(m.ids(), ["master-listen-failed"])
        f = m.finding("master-listen-failed")
        self.assertEqual(f["message"],
                         f"rank 0 cannot listen on MASTER_PORT {self.port} on {f['hosts'][0]}: "
                         f"cannot listen on [fe80::1]:{self.port}: Invalid argument")
        self.assertLess(m.elapsed, 10.0, "it says so at once, not at the deadline")

    def test_master_port_below_1024_without_the_privilege(self):
        with open("/proc/sys/net/ipv4/ip_unprivileged_port_start") as f:
            if int(f.read()) <= 80:
                self.skipTest("port 80 needs no privilege here")
        as_nobody = None  # as root, the test runs rankcheck as nobody
        if os.geteuid() == 0:
            as_nobody = lambda: (os.setgroups([]), os.setgid(65534), os.setuid(65534))
        env = clean_env(RANK=0, WORLD_SIZE=1, MASTER_ADDR="127.0.0.1", MASTER_PORT=80)
        r = subprocess.run([BIN, "run", "--no-gpu", "--timeout", "3", "--json", "-"], env=env,
                           capture_output=True, text=True, timeout=3 + GRACE + 1,
                           preexec_fn=as_nobody, cwd="/")
        self.assertEqual(r.returncode, 7, r.stderr)
        f = json.loads(r.stdout)["findings"][0]
        self.assertEqual(f["id"], "master-listen-failed")
        self.assertIn("cannot listen on 127.0.0.1:80: Permission denied", f["message"])
        self.assertIn("pick a MASTER_PORT of 1024 or above", f["hint"])

    def test_foreign_job_id(self):
        procs = self.job(4, skip={2}, extra=("--job-id", "job-a"))
        stray = self.rank(2, 4, extra=("--job-id", "job-b"))
        self.finish()
        self.assertEqual(stray.rc, 6)
        self.assertEqual(stray.ids(), ["foreign-job"])
        self.assertIn("this master serves job 'job-a', not job 'job-b'",
                      stray.finding("foreign-job")["message"])
        # Another job's process hides nothing: rank 2 is missing (exit 4), and the
        # refusal is named as a possible cause.
        self.assertExit(procs.values(), 4)
        self.assertEqual(procs[0].ids(), ["missing-rank", "foreign-job"])
        missing = procs[0].finding("missing-rank")
        self.assertEqual(missing["ranks"], [2])
        self.assertIn("1 process claiming a missing rank was refused (another job id; see below)",
                      missing["hint"])
        f = procs[0].finding("foreign-job")
        self.assertEqual((f["severity"], f["ranks"]), ("warning", [2]))
        # The missing rank's host is not known (no node list), and the other job's
        # process is no evidence about a host: no host is suspected.
        self.assertEqual(procs[0].report["suspect_hosts"], "")
        self.assertEqual(len(procs[0].report["members"]), 3)  # never counted

    def test_several_rank_0s_without_a_job_id_report_the_duplicate(self):
        # Four plain processes given RANK=0 and no job id: the three that cannot listen
        # each say duplicate-rank (exit 3), rather than master-port-in-use (exit 7).
        # Without a job token they do not join the first (nothing proves it is this
        # job's master), so the first waits for ranks 1-3 and names them missing.
        self.timeout = 8.0
        first = self.rank(0, 4)
        first.wait_for("master listening")
        others = [self.rank(0, 4) for _ in range(3)]
        self.finish()
        self.assertExit(others, 3)
        self.assertExit([first], 4)
        for p in others:
            self.assertNotIn("joining it as a member", p.err)
            self.assertEqual(p.report["findings"][0]["id"], "duplicate-rank")
        self.assertEqual(first.finding("missing-rank")["ranks"], [1, 2, 3])

    def test_join_counts_are_distinct_ranks(self):
        # RANK=0,1,1 with WORLD_SIZE=3: two ranks of three are here, not "3 of 3".
        self.timeout = 30.0
        procs = [self.rank(0, 3)]
        time.sleep(0.3)
        procs += [self.rank(1, 3), self.rank(1, 3)]
        self.finish()
        self.assertExit(procs, 3)
        self.assertIn("2 of 3 ranks joined", procs[0].err)
        self.assertNotIn("3 of 3 ranks joined", procs[0].err)
        import re
        seen = [int(n) for p in procs[1:] for n in re.findall(r"\((\d+)/3 ranks so far\)", p.err)]
        self.assertTrue(seen, procs[1].err)
        self.assertLessEqual(max(seen), 2)

    def test_master_starting_late_is_waited_for(self):
        members = [self.rank(r, 3) for r in (1, 2)]
        import time
        time.sleep(1.0)
        master = self.rank(0, 3)
        self.finish()
        self.assertExit(self.procs, 0)
        self.assertEqual(len(master.report["members"]), 3)



class WhatUsersTrippedOver(RankcheckTest):
    """Each case failed before its fix."""

    def test_rank_0_whose_master_addr_does_not_resolve_fails_at_once(self):
        # Newcomer bug 3: rank 0 printed ~30 identical "Name or service not known" lines,
        # spent the whole timeout, then said "no answer in time". It binds its own
        # address: a name its host cannot resolve fails at once (as `env` says), except
        # under Kubernetes, where rank 0's own name may be published late.
        self.timeout = 20.0
        p = self.rank(0, 2, MASTER_ADDR="nosuchhost.invalid")
        self.finish([p])
        self.assertEqual(p.rc, 7, p.err)
        self.assertLess(p.elapsed, 10)  # not the 20 s timeout
        self.assertNotIn("no answer in time", p.err)
        self.assertNotIn("retrying", p.err)
        self.assertEqual(p.ids(), ["master-addr-not-local"])
        self.timeout = 3.0
        k = self.rank(0, 2, MASTER_ADDR="nosuchhost.invalid", KUBERNETES_SERVICE_HOST="198.18.0.9")
        self.finish([k])
        self.assertEqual(k.rc, 7, k.err)
        # Said when the answer changes and each progress interval (1 s here), not at
        # every attempt.
        self.assertIn(k.err.count("retrying"), (1, 2, 3), k.err)
        self.assertNotIn("no answer in time", k.err)

    def test_a_rank_out_of_range_leads_when_no_master_answers(self):
        # Newcomer bug 6: RANK 5 of 2 with nothing on MASTER_PORT led with
        # master-unreachable (exit 4), though rank-out-of-range (exit 3) was known before
        # any network.
        p = self.rank(5, 2)
        self.finish([p])
        self.assertEqual(p.rc, 3, p.err)
        self.assertEqual([f["id"] for f in p.report["findings"]],
                         ["rank-out-of-range", "master-unreachable"])

    def test_every_process_given_rank_0_is_no_stray(self):
        # With a job token the rank 0s that cannot listen join the first, whose report
        # names the duplicate.
        token = os.path.join(self.tmp.name, "token")
        with open(token, "w") as f:
            f.write("a-job-token-for-four-rank-0s-0001\n")
        os.chmod(token, 0o600)
        extra = ("--job-id", "j1", "--token-file", token)
        procs = [self.rank(0, 4, extra=extra) for _ in range(4)]
        self.finish()
        self.assertExit(procs, 3)
        master = [p for p in procs if p.report["role"] == "master"]
        self.assertEqual(len(master), 1)
        self.assertEqual(master[0].ids(), ["duplicate-rank", "missing-rank"])
        # Without one they do not (nothing proves the first is this job's master): each
        # says duplicate-rank itself, and the first names ranks 1-3 missing.
        self.port = free_port()
        procs = [self.rank(0, 4, extra=("--job-id", "j1")) for _ in range(4)]
        self.finish(procs)
        master = [p for p in procs if p.report["role"] == "master"]
        self.assertEqual(len(master), 1)
        self.assertEqual(master[0].ids(), ["missing-rank"])
        for p in procs:
            if p is not master[0]:
                self.assertEqual((p.rc, p.ids()[0]), (3, "duplicate-rank"), p.err)

    def test_a_launcher_that_stops_the_job_at_the_first_failure_keeps_rank_0s_report(self):
        # What mpirun does: the first process to exit non-zero gets the rest killed.
        # A failing member leaves only once rank 0 has printed its report.
        for attempt in range(3):
            self.port = free_port()
            procs = [self.rank(r, 3) for r in range(2)]
            procs.append(self.rank(2, 4))  # another world size: the job fails
            deadline = time.monotonic() + self.timeout + GRACE
            first = None
            while first is None and time.monotonic() < deadline:
                for p in procs:
                    if p.popen.poll() not in (None, 0):
                        first = p
                        break
                time.sleep(0.001)
            for p in procs:
                if p is not first and p.popen.poll() is None:
                    p.popen.kill()
            for p in procs:
                p.wait(5)
            self.assertIsNotNone(first)
            self.assertIn("FAIL", procs[0].out, f"attempt {attempt}: rank 0's report was cut off"
                          f" by {first.name}'s exit\n{procs[0].err}")
            self.assertEqual(procs[0].report["role"], "master")
            self.procs.clear()

    def refused_late(self, reason):
        """A member meeting a master that refuses it as late, with `reason`."""
        import struct
        import wire

        def refuse(conn):
            conn.sendall(wire.challenge())
            wire.read_frame(conn)  # the hello
            conn.sendall(wire.frame(wire.REJECT, struct.pack("<H", 5) + wire.s(reason)))

        # Both connections, as a master would answer them: the host relay's (which stands
        # down on the refusal), then the member's own.
        with wire.FakeMaster(self.port, refuse, connections=2):
            member = self.rank(3, 4)
            self.finish([member])
        self.assertEqual(member.rc, 4)
        return member.finding("late-join")

    def test_an_extra_copy_of_a_rank_is_not_told_to_raise_the_timeout(self):
        f = self.refused_late("the master decided at +0.2 s without this member: the job was "
                              "already complete")
        self.assertNotIn("raise --timeout", f["hint"])
        self.assertIn("every rank of the job had joined without this process: it is an extra "
                      "copy of rank 3", f["hint"])
        f = self.refused_late("the master decided at +9 s without this member: rank 3 never "
                              "joined")
        self.assertIn("raise --timeout", f["hint"])

    def test_a_single_host_job_without_local_world_size_names_the_host(self):
        procs = {r: self.rank(r, 4, host="box", local=None, LOCAL_RANK=r) for r in (0, 1, 3)}
        self.finish()
        self.assertExit(procs.values(), 4)
        f = procs[0].finding("missing-rank")
        self.assertEqual(f["hosts"], ["box"])
        self.assertEqual(f["message"],
                         "rank 2 never joined (expected on box, local rank 2): box sent ranks "
                         "0-1,3 but not 2")

    def test_ranks_dealt_round_robin_put_a_missing_rank_on_no_host(self):
        # mpirun --map-by node over two hosts: cn1 has ranks 0 and 2, cn2 ranks 1 and 3
        # (local ranks 0, 1 on each). Rank 1 never came: "rank - local rank" put it on
        # cn2's block start... or cn1's. The members contradict consecutive blocks, so
        # no host is named rather than a wrong one.
        procs = [self.rank(r, 4, host=host, local=(local, 2))
                 for r, host, local in ((0, "cn1", 0), (2, "cn1", 1), (3, "cn2", 1))]
        self.finish()
        self.assertExit(procs, 4)
        f = procs[0].finding("missing-rank")
        self.assertEqual((f["ranks"], f["hosts"]), ([1], []))
        self.assertNotIn("expected on", f["message"])

    def test_rank_0_alone_does_not_say_the_job_is_on_its_host(self):
        # An ssh/pdsh launch over two hosts, RANK/WORLD_SIZE/LOCAL_RANK and no
        # LOCAL_WORLD_SIZE: rank 1 (on cn2, local rank 0) never came. Rank 0 at local
        # rank 0 is so on any layout: rank 1 was put "on cn1, local rank 1".
        rank0 = self.rank(0, 2, host="cn1", local=None, LOCAL_RANK=0)
        self.finish()
        self.assertExit([rank0], 4)
        f = rank0.finding("missing-rank")
        self.assertEqual((f["ranks"], f["hosts"]), ([1], []))
        self.assertNotIn("cn1", f["message"])



class WhatTheLauncherStarted(RankcheckTest):
    """What the launcher started, one line per member, and other jobs' members: each
    case failed before its fix."""

    def slurm_task(self, rank, world, ntasks, **env):
        """A task of a one-node Slurm step of `ntasks` tasks, given WORLD_SIZE=world."""
        return self.rank(rank, world, host="n1", SLURM_PROCID=rank, SLURM_NTASKS=ntasks,
                         SLURM_LOCALID=rank, SLURM_NODEID=0, SLURM_STEP_NUM_NODES=1,
                         SLURM_STEP_NODELIST="n1", SLURM_STEP_TASKS_PER_NODE=ntasks,
                         SLURM_JOB_ID=81, **env)

    def test_a_world_size_below_the_launchers_count_waits_for_every_process(self):
        # WORLD_SIZE=2 exported over mpirun -np 4: ranks 2 and 3 start a little later.
        # Deciding on "2/2 joined" turned them away as late (exit 4), a verdict that
        # depended on who was fastest; now every process is waited for and reported.
        def start(r):
            return self.rank(r, 2, OMPI_COMM_WORLD_RANK=r, OMPI_COMM_WORLD_SIZE=4,
                             OMPI_COMM_WORLD_LOCAL_RANK=r, OMPI_COMM_WORLD_LOCAL_SIZE=4)
        self.timeout = 30.0  # far from what is measured (a busy machine)
        procs = [start(0), start(1)]
        time.sleep(0.5)
        procs += [start(2), start(3)]
        self.finish()
        self.assertExit(procs, 3)
        master = procs[0].report
        self.assertEqual(master["decided"], "all-joined")
        self.assertLess(procs[0].elapsed, self.timeout / 3, "all four joined: no deadline")
        self.assertEqual(procs[0].ids(), ["launcher-env-conflict", "rank-out-of-range"])
        self.assertEqual(procs[0].finding("rank-out-of-range")["ranks"], [2, 3])
        self.assertEqual(sorted(m["rank"] for m in master["members"]), [0, 1, 2, 3])
        self.assertIn("the launcher started 4 processes (OMPI_COMM_WORLD_SIZE=4) but the world "
                      "size is 2: waiting for all of them", procs[0].err)
        for p in procs[1:]:
            self.assertEqual((p.report["verdict_received"], p.report["exit_code"]), (True, 3))

    def test_a_one_node_step_with_a_larger_world_size_spans_no_other_host(self):
        # WORLD_SIZE=8 over a step of 4 tasks on one node: the node list says one host,
        # so MASTER_ADDR on loopback is no error, and no "node 1" failed to start.
        procs = [self.slurm_task(r, 8, 4) for r in range(4)]
        self.finish()
        self.assertExit(procs, 3)
        self.assertEqual(procs[0].ids(), ["launcher-env-conflict", "missing-rank"])
        f = procs[0].finding("missing-rank")
        self.assertEqual(f["ranks"], [4, 5, 6, 7])
        self.assertEqual(f["message"], "ranks 4-7 did not join: the launcher started 4 processes "
                                       "on 1 node (n1), for a world size of 8")
        self.assertIn("launch 8 processes (srun --ntasks=8)", f["hint"])
        self.assertNotIn("listening on all interfaces", procs[0].err)

    def test_a_member_prints_one_line_and_rank_0_the_findings(self):
        # Every member is named by the leading finding (WORLD_SIZE=8 exported over 4
        # tasks): each printed it with its fix, and the job's output had it 4 times.
        procs = [self.slurm_task(r, 8, 4) for r in range(4)]
        self.finish()
        self.assertExit(procs, 3)
        first = procs[0].report["findings"][0]
        self.assertEqual(first["id"], "launcher-env-conflict")
        for r in (1, 2, 3):
            self.assertEqual(procs[r].out, f"rankcheck: FAIL (job 81): {first['message']}; this "
                                           f"is rank {r} on n1 [launcher-env-conflict]\n")
            # The JSON keeps the findings about this member's ranks.
            self.assertEqual(procs[r].ids(), ["launcher-env-conflict"])
        self.assertEqual(procs[0].out.count("fix: "), 2, procs[0].out)  # one per finding

    def test_a_member_of_this_job_is_not_told_about_another_jobs_member(self):
        # Two jobs on one MASTER_PORT: job b's ranks 1 and 2 reach job a's master and
        # are refused. Job a's ranks 1 and 2 are not theirs to report; the master
        # reports the refusal once.
        a0 = self.rank(0, 3, extra=("--job-id", "job-a"))
        b = [self.rank(r, 3, extra=("--job-id", "job-b")) for r in (1, 2)]
        self.finish(b)
        a = [self.rank(r, 3, extra=("--job-id", "job-a")) for r in (1, 2)]
        self.finish([a0] + a)
        for p in b:
            self.assertEqual((p.rc, p.ids()), (6, ["foreign-job"]))
        self.assertExit([a0] + a, 0)
        # Job a's ranks start once job b's were refused: on a busy machine that can be
        # past the 2 s that count as a late start, a warning of its own, not this one.
        self.assertEqual([i for i in a0.ids() if i != "late-start"], ["foreign-job"])
        f = a0.finding("foreign-job")
        self.assertEqual((f["severity"], f["ranks"]), ("warning", [1, 2]))
        self.assertIn("2 processes of job 'job-b' (ranks 1-2 on ", f["message"])
        for p in a:
            self.assertEqual(p.ids(), [], p.name)
            self.assertNotIn("job-b", p.out + p.err)

    def test_node_mode_table_shows_each_members_local_ranks(self):
        procs = []
        for node in range(2):
            e = clean_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=self.port)
            args = ["run", "--no-gpu", "--timeout", str(self.timeout), "--nproc-per-node", "4",
                    "--node-rank", str(node), "--nnodes", "2", "--host-name", f"node{node}"]
            procs.append(Proc(args, e, self.tmp.name, f"node{node}"))
        self.procs += procs
        self.finish()
        self.assertExit(procs, 0)
        self.assertRegex(procs[0].out, r"\n  0-3 +node0 +0-3 +\d+ ")
        self.assertRegex(procs[0].out, r"\n  4-7 +node1 +0-3 +\d+ ")

    def test_a_member_killed_after_joining_is_decided_on_after_a_grace_not_the_deadline(self):
        # Rank 1 joins and is killed (kill -9); rank 2 joins after: every rank but the
        # dead one is here, and waiting to the deadline cannot bring it back.
        self.timeout = 30.0  # far from the grace it measures (a busy machine, sanitizers)
        master, one = self.rank(0, 3), self.rank(1, 3)
        one.wait_for("ranks so far")
        one.popen.send_signal(signal.SIGKILL)
        one.wait(5)
        master.wait_for("disconnected before the verdict")
        two = self.rank(2, 3)
        self.finish([master, two])
        self.assertExit([master, two], 4)
        self.assertLess(master.elapsed, 10.0, "decided at the deadline, not after the grace")
        self.assertEqual(master.ids(), ["member-disconnected"])
        self.assertEqual(master.finding("member-disconnected")["ranks"], [1])
        self.assertEqual(master.report["decided"], "member-lost")
        self.assertIn("(a member's connection closed; every other rank joined)", master.out)

    def test_notes_and_early_refusals_are_said_by_rank_0_and_by_members_that_fail(self):
        # Members start before rank 0 listens (refused connections), and each has a
        # note to give (an NPROC_PER_NODE exported for a later torchrun).
        members = [self.rank(r, 3, NPROC_PER_NODE=4) for r in (1, 2)]
        time.sleep(0.3)
        master = self.rank(0, 3, NPROC_PER_NODE=4)
        self.finish()
        self.assertExit(self.procs, 0)
        self.assertIn("note: NPROC_PER_NODE=4 is not used", master.err)
        for p in members:
            self.assertNotIn("note:", p.err, p.name)
            self.assertNotIn("attempt 1", p.err, p.name)
        # A member that fails says them: they may be why.
        self.port = free_port()
        self.timeout = 1.0
        alone = self.rank(1, 2, NPROC_PER_NODE=4)
        self.finish([alone])
        self.assertEqual(alone.rc, 4)
        self.assertIn("note: NPROC_PER_NODE=4 is not used", alone.err)

    def test_a_job_wide_start_time_bounds_a_late_process_by_the_jobs_deadline(self):
        # The launch script's RANKCHECK_START_TIME: a process that starts 25 s into a
        # job of --timeout 30 has 5 s left, not 30: one late task does not stretch it.
        # (Bounds far from what is measured: a busy machine.)
        self.timeout = 30.0
        start = f"{time.time() - 25.0:.3f}"
        master = self.rank(0, 2, RANKCHECK_START_TIME=start)
        self.finish([master])
        self.assertEqual(master.rc, 4)
        self.assertLess(master.elapsed, 15.0, "the deadline counted from the process's start")
        self.assertEqual(master.ids(), ["missing-rank"])
        # 25 s, and however long the process took to start (longer under sanitizers).
        self.assertRegex(master.err, r"this process started 2[5-9] s after the job's start")
        # Past the job's deadline already, with no master there: it tries for 5 s (its
        # clock may be ahead), then says so, well before its own --timeout of 30 s.
        self.timeout = 30.0
        late = self.rank(1, 2, RANKCHECK_START_TIME=f"{time.time() - 40:.3f}")
        self.finish([late])
        self.assertEqual((late.rc, late.ids()), (4, ["late-join"]))
        self.assertLess(late.elapsed, 20.0)
        msg = late.finding("late-join")["message"]
        self.assertIn("past the job's deadline (--timeout 30", msg)
        self.assertIn("and no master answered", msg)
        self.assertIn("or this host's clock is ahead", msg)

    def test_a_member_whose_clock_is_ahead_of_the_job_start_still_joins(self):
        # RANKCHECK_START_TIME from the launch host; this member's clock reads 300 s
        # later (as if it were ahead): past the deadline by its clock, yet the master
        # is there and waiting. It joins, and the job passes, instead of exit 4 at once.
        self.timeout = 30.0
        start = time.time()
        master = self.rank(0, 2, RANKCHECK_START_TIME=f"{start:.3f}")
        ahead = self.rank(1, 2, RANKCHECK_START_TIME=f"{start - 300:.3f}")
        self.finish([master, ahead])
        self.assertExit([master, ahead], 0)
        self.assertIn("this process started that late, or this host's clock is ahead", ahead.err)
        self.assertNotIn("late-join", ahead.out)

    def test_a_clock_ahead_is_clock_skew_not_a_late_start(self):
        # A member under faketime +300 s that joined at once: its claimed start is
        # 300 s after the master's, yet it joined within a second. That is its clock.
        if shutil.which("faketime") is None:
            self.skipTest("faketime is not installed (scripts/setup.sh test)")
        if EMULATED:
            self.skipTest(f"faketime preloads into {EMULATED}, which reads the clock for the process")
        ldd = subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout
        if "libasan" in ldd:
            # faketime is an LD_PRELOAD, which ASan refuses to come after; the release
            # and the debug builds are checked.
            self.skipTest("faketime cannot preload into a sanitizer build")
        self.timeout = 30.0
        master = self.rank(0, 2, host="h0")
        ahead = self.rank(1, 2, host="h3", wrap=["faketime", "-f", "+300s"],
                          FAKETIME_DONT_FAKE_MONOTONIC="1")
        self.finish([master, ahead])
        self.assertExit([master, ahead], 0)
        ids = master.ids()
        self.assertNotIn("late-start", ids)
        f = master.finding("clock-skew")
        self.assertEqual(f["hosts"], ["h3"])
        self.assertRegex(f["message"], r"^h3's clock is about 30\d(\.\d\d)? s ahead of the "
                                       r"master's \(h0\)")

    def test_a_late_rank_0_is_named_with_how_late_it_was(self):
        # Rank 0 starts 5 s after the others, who wait for it: the report says who
        # started late and by how much, rather than nothing (or, had they given up,
        # that ranks 1-2 "were not started"). 5 s against the 2 s that count as late:
        # under load (a sanitizer build) the others' own start may come a second late.
        self.timeout = 15.0
        members = [self.rank(r, 3) for r in (1, 2)]
        time.sleep(5.0)
        master = self.rank(0, 3)
        self.finish()
        self.assertExit(self.procs, 0)
        self.assertEqual(master.ids(), ["late-start"])
        f = master.finding("late-start")
        self.assertEqual((f["severity"], f["ranks"]), ("warning", [0]))
        self.assertRegex(f["message"], r"^rank 0 \(.*\) started [2-5]\.\d+ s after the first process "
                                       r"\(rank [12] ")
        starts = {m["rank"]: m["started_unix_ms"] for m in master.report["members"]}
        self.assertGreater(starts[0] - min(starts[1], starts[2]), 2000)


def own_address():
    """An IPv4 address of this host other than loopback, or None (`ip -o -4 addr`)."""
    try:
        out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True,
                             timeout=10).stdout
    except OSError:
        return None
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[1] != "lo" and fields[2] == "inet":
            return fields[3].split("/")[0]
    return None


if __name__ == "__main__":
    unittest.main()
