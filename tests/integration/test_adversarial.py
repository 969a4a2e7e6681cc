"""What a shared network and a scheduler throw at a master: port scanners, silent and
slow clients, garbage, forged and replayed hellos, hostile strings, kill -9 and
SIGTERM in every phase. Each case asserts exit codes and messages, that no process
outlives --timeout + 2 s, and, where clients come and go, that the master's open
file count returns to where it started."""

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest

import wire
from harness import BIN, GRACE, Proc, RankcheckTest, clean_env, free_port, job_findings
from test_gpu import FAKE, gpus


def listening(port):
    out = subprocess.run(["ss", "-ltnH", f"( sport = :{port} )"], capture_output=True,
                         text=True).stdout
    return bool(out.strip())


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def sanitized():
    """Whether BIN is a sanitizer build: out of file descriptors, UBSan's own
    memory checks (which open a pipe) fail and report errors of their own."""
    out = subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout
    return "libasan" in out or "libubsan" in out


class Adversarial(RankcheckTest):
    timeout = 5.0

    def master(self, world, *extra, nofile=None, **env):
        m = self.rank(0, world, extra=extra, nofile=nofile, **env)
        deadline = time.monotonic() + 3
        while not listening(self.port):
            self.assertLess(time.monotonic(), deadline, "the master never listened")
            time.sleep(0.02)
        time.sleep(0.1)  # its first progress line, its timers: settle before counting fds
        return m

    def fds_return_to(self, pid, baseline, within=5.0):
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if fd_count(pid) == baseline:
                return
            time.sleep(0.05)
        self.fail(f"master holds {fd_count(pid)} files, {baseline} at the start")

    def members(self, ranks, world, **env):
        return [self.rank(r, world, **env) for r in ranks]

    def finding(self, report, fid):
        for f in report["findings"]:
            if f["id"] == fid:
                return f
        self.fail(f"no {fid} in {[f['id'] for f in report['findings']]}")

    # --- noise on the port --------------------------------------------------

    def test_burst_of_resets_and_a_port_scan(self):
        m = self.master(4, "--handshake-timeout", "2")
        base = fd_count(m.popen.pid)
        for _ in range(1000):  # connect, then reset
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.connect(("127.0.0.1", self.port))
            s.close()
        for p in range(max(1, self.port - 20), min(65535, self.port + 21)):  # a sweep
            try:
                socket.create_connection(("127.0.0.1", p), timeout=0.2).close()
            except OSError:
                pass
        self.fds_return_to(m.popen.pid, base)
        self.members([1, 2, 3], 4)
        self.finish()
        self.assertExit(self.procs, 0)
        rep = m.report
        self.assertEqual(rep["ranks_joined"], 4)
        stray = self.finding(rep, "stray-connection")
        self.assertEqual(stray["severity"], "warning")
        count = int(stray["message"].split()[0])
        self.assertGreaterEqual(count, 900)  # a reset may beat accept() to it

    def silent_flood(self, n):
        """`n` connections to the master that never send a byte, from another loopback
        address (127.0.0.2)."""
        flood = []
        for _ in range(n):
            s = socket.socket()
            s.setblocking(False)
            s.bind(("127.0.0.2", 0))
            s.connect_ex(("127.0.0.1", self.port))
            flood.append(s)
        return flood

    def await_flood(self, m, held=900):
        """Waits until the master holds `held` descriptors: the flood fills its
        handshake slots first (the state, not a sleep)."""
        deadline = time.monotonic() + 10
        while fd_count(m.popen.pid) < held:
            self.assertLess(time.monotonic(), deadline, fd_count(m.popen.pid))
            time.sleep(0.02)

    def test_a_flood_of_silent_connections_from_one_address_keeps_no_member_out(self):
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
        self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        token = self.token_file("tok", "a-job-token-that-nobody-else-has-0003")
        m = self.master(4, "--token-file", token, "--handshake-timeout", "30")
        flood = self.silent_flood(3000)
        self.addCleanup(lambda: [s.close() for s in flood])
        self.await_flood(m)
        self.members([1, 2, 3], 4, extra=("--token-file", token))
        self.finish()
        self.assertExit(self.procs, 0)
        f = self.finding(m.report, "connection-flood")
        self.assertEqual(f["severity"], "warning")
        self.assertIn("127.0.0.2 held handshakes open without a hello", f["message"])

    def test_a_flood_under_the_usual_open_files_limit_blames_no_one(self):
        # Security item 1: under `ulimit -n 1024` (soft and hard), 3000 silent connections
        # from one address. The handshake slots are what the limit leaves beyond the
        # members, so the flood meets the cap and gives up its oldest, never EMFILE with
        # nothing evicted: the members get in, and rank 0's host is named by nothing.
        # Then soft 1024 under a hard 8192: the master raises its soft limit to the hard.
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
        self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        token = self.token_file("tok", "a-job-token-that-nobody-else-has-0007")
        self.timeout = 20.0  # room for a sanitizer's build: all join long before it
        for limits in ((1024, 1024), (1024, min(hard, 8192))):
            with self.subTest(nofile=limits):
                self.port = free_port()
                self.procs = []
                m = self.master(4, "--token-file", token, "--handshake-timeout", "30",
                                nofile=limits)
                flood = self.silent_flood(3000)
                try:
                    self.await_flood(m)
                    self.members([1, 2, 3], 4, extra=("--token-file", token))
                    self.finish()
                finally:
                    for s in flood:
                        s.close()
                self.assertExit(self.procs, 0)
                self.assertNotIn("Too many open files", m.err)
                f = self.finding(m.report, "connection-flood")
                self.assertIn("127.0.0.2 held handshakes open without a hello", f["message"])
                self.assertEqual(m.report["suspect_hosts"], "")
                for f in m.report["findings"]:
                    if f["id"] in ("master-out-of-fds", "connection-flood"):
                        self.assertEqual(f.get("hosts", []), [], f)

    def test_many_members_behind_one_address_are_not_a_flood(self):
        # 1,100 members from one address (a NAT, a host of many ranks), each a
        # little slow with its hello: more handshakes than the master has slots
        # for, yet none is dropped as a flood.
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
        self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        world = 1101
        self.timeout = 10.0
        m = self.master(world)
        socks = []
        self.addCleanup(lambda: [s.close() for s in socks])
        for _ in range(1, world):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", self.port))
            socks.append(s)
        time.sleep(0.5)
        for r, s in enumerate(socks, start=1):
            s.setblocking(True)
            s.settimeout(10)
            s.sendall(wire.hello(wire.record(r, world, host=f"h{r // 8}".encode())))
        self.finish([m])
        self.assertEqual(m.rc, 0, [f["id"] for f in job_findings(m.report)])
        self.assertNotIn("connection-flood", [f["id"] for f in job_findings(m.report)])

    def test_out_of_file_descriptors_is_survived(self):
        # 40 open files in all, a hard limit it cannot raise: 60 idle clients would
        # exhaust it. The handshake slots are what the limit leaves (the floor, 16
        # here), so the rest wait in the backlog rather than fail accept().
        m = self.master(4, "--handshake-timeout", "1", nofile=40)
        idle = []
        for _ in range(60):
            try:
                idle.append(wire.connect(self.port, timeout=1))
            except OSError:
                break
        m.wait_for("no hello within the handshake deadline")  # the idle ones are dropped
        for s in idle:
            s.close()
        self.members([1, 2, 3], 4)
        self.finish()
        self.assertExit(self.procs, 0)
        self.assertIn("the open-file limit (40 soft, 40 hard) is below the 68 this master needs",
                      m.err)
        self.assertNotIn("Too many open files", m.err)
        self.assertNotIn("master-out-of-fds", [f["id"] for f in m.report["findings"]])

    @unittest.skipIf(sanitized(), "a sanitizer's runtime needs descriptors of its own")
    def test_out_of_file_descriptors_with_ranks_left_out_is_named(self):
        # 30 open files in all for a master of 40 ranks: the members it cannot
        # accept wait in the backlog, and the report says why they are missing.
        world = 40
        m = self.master(world, nofile=30)
        socks = []
        try:
            for r in range(1, world):
                s = wire.connect(self.port, timeout=2)
                s.sendall(wire.hello(wire.record(r, world, host=b"h1")))
                socks.append(s)
            self.finish([m])
        finally:
            for s in socks:
                s.close()
        self.assertEqual(m.rc, 4)
        rep = m.report
        self.assertEqual(rep["findings"][0]["id"], "master-out-of-fds", rep["findings"])
        f = rep["findings"][0]
        self.assertEqual(f["severity"], "error")
        self.assertIn("Too many open files", f["message"])
        self.assertIn("its open-files limit is 30 (hard limit 30)", f["message"])
        self.assertIn("missing-rank", [x["id"] for x in job_findings(rep)])
        self.assertIn("master-out-of-fds", m.out)
        # Memory it could not read is unknown, never 0 KiB.
        for v in rep["master_memory_kib"].values():
            self.assertTrue(v is None or v > 0, rep["master_memory_kib"])

    def test_silent_and_trickling_clients_are_dropped(self):
        m = self.master(4, "--handshake-timeout", "1")
        base = fd_count(m.popen.pid)
        silent = [wire.connect(self.port) for _ in range(3)]
        trickler = wire.connect(self.port)
        wire.read_frame(trickler)
        valid = wire.hello(wire.record(3, 4, b"slow"))
        dropped = []

        def trickle():
            try:
                for b in valid:  # a valid hello, one byte every 0.3 s
                    trickler.send(bytes([b]))
                    time.sleep(0.3)
            except OSError:
                dropped.append(time.monotonic())

        t0 = time.monotonic()
        t = threading.Thread(target=trickle)
        t.start()
        for s in silent:
            wire.read_frame(s)  # the challenge
            s.settimeout(3)
            self.assertEqual(s.recv(1), b"", "a silent client was not dropped")
            self.assertLess(time.monotonic() - t0, 2.5)
        t.join(timeout=5)
        self.assertTrue(dropped, "the trickling client was not dropped")
        self.assertLess(dropped[0] - t0, 2.5)
        for s in silent + [trickler]:
            s.close()
        self.fds_return_to(m.popen.pid, base)
        self.members([1, 2, 3], 4)
        self.finish()
        self.assertExit(self.procs, 0)
        stray = self.finding(m.report, "stray-connection")
        self.assertIn("handshake deadline", stray["message"])

    def test_a_member_of_the_previous_release_is_told_its_protocol(self):
        # During a rollout hosts run two builds. A protocol-1 member sends its hello in
        # the layout of that release (shorter: no start time, no NCCL interface block,
        # no root id): it is refused for its version, and rank 0 reports a
        # protocol-mismatch that names the host, not a malformed hello.
        m = self.master(2)
        with wire.connect(self.port) as s:
            wire.read_frame(s)  # the challenge
            s.sendall(wire.hello_v1(wire.record_v1(1, 2, host=b"old-host")))
            version, msg_type, payload = wire.read_frame(s)
            self.assertEqual(msg_type, wire.REJECT)
            code, reason = wire.reject_reason(payload)
            self.assertEqual(reason, "peer speaks rankcheck protocol version 1, this master "
                                     f"speaks {wire.VERSION}")
            self.assertNotIn("malformed", reason)
        self.members([1], 2)
        self.finish()
        self.assertExit(self.procs, 0)
        f = self.finding(m.report, "protocol-mismatch")
        self.assertIn("protocol version 1", f["message"])
        self.assertNotIn("malformed", f["message"])
        self.assertNotIn("stray-connection", [x["id"] for x in job_findings(m.report)])

    def test_garbage_frames_and_a_newer_version(self):
        m = self.master(4)
        base = fd_count(m.popen.pid)
        tls = bytes.fromhex("160301020001000200fc0303") + os.urandom(32)
        cases = {
            "bad magic": b"XXXX" + bytes(20),
            "http": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            "tls": tls,
            "huge length": wire.MAGIC + struct.pack("<HHI", wire.VERSION, wire.HELLO, 0xFFFFFFFF),
            "truncated": wire.MAGIC + struct.pack("<HHI", wire.VERSION, wire.HELLO, 200) + bytes(10),
            "unknown type": wire.frame(99, b""),
        }
        for name, data in cases.items():
            with wire.connect(self.port) as s:
                wire.read_frame(s)
                s.sendall(data)
                if name == "truncated":
                    s.shutdown(socket.SHUT_WR)
                s.settimeout(3)
                self.assertEqual(s.recv(100), b"", f"{name}: the master kept the connection")
        # A peer from the future, and one from the past (before a stage result carried
        # NCCL's words): each told which version it speaks, neither called malformed.
        for theirs in (wire.VERSION + 1, wire.VERSION - 1):
            with wire.connect(self.port) as s:
                wire.read_frame(s)
                s.sendall(wire.hello(wire.record(3, 4), version=theirs))
                version, msg_type, payload = wire.read_frame(s)
                self.assertEqual(msg_type, wire.REJECT)
                code, reason = wire.reject_reason(payload)
                self.assertEqual(reason, f"peer speaks rankcheck protocol version {theirs}, "
                                         f"this master speaks {wire.VERSION}")
        # A "conflict" with no sources: once admitted, it would have the rules read a
        # source that is not there (found by the hello fuzzer).
        for sources in ([], [(b"torch", b"RANK", b"3")]):
            with wire.connect(self.port) as s:
                wire.read_frame(s)
                s.sendall(wire.hello(wire.record(3, 4, conflicts=[(0, sources)])))
                version, msg_type, payload = wire.read_frame(s)
                self.assertEqual(msg_type, wire.REJECT)
                code, reason = wire.reject_reason(payload)
                self.assertEqual(reason, "malformed hello: a conflict names fewer than two sources")
        self.fds_return_to(m.popen.pid, base)
        self.members([1, 2, 3], 4)
        self.finish()
        self.assertExit(self.procs, 0)
        ids = [f["id"] for f in job_findings(m.report)]
        self.assertIn("stray-connection", ids)
        self.assertIn("protocol-mismatch", ids)

    def test_a_member_meeting_a_newer_master_exits_6(self):
        # Both connections, as a master would answer them: the host relay's, which stands
        # down, then the member's own.
        newer = wire.challenge("9.9", version=wire.VERSION + 1)
        with wire.FakeMaster(self.port, lambda conn: conn.sendall(newer), connections=2):
            member = self.rank(1, 2)
            self.finish([member])
        self.assertEqual(member.rc, 6)
        f = member.finding("protocol-mismatch")
        self.assertIn(f"speaks rankcheck protocol version {wire.VERSION + 1}, this rankcheck speaks "
                      f"{wire.VERSION}", f["message"])

    def test_a_challenge_the_member_cannot_read_is_named(self):
        # Something that speaks the framing but sends a challenge too short to decode.
        with wire.FakeMaster(self.port, lambda conn: conn.sendall(
                wire.frame(wire.CHALLENGE, b"\1\2\3\4\5")), linger=0.05):
            self.timeout = 2.0
            member = self.rank(1, 2)
            self.finish([member])
        self.assertEqual(member.rc, 4)
        f = member.finding("master-unreachable")
        self.assertIn(f"127.0.0.1:{self.port} sent a challenge this member cannot read "
                      "(malformed challenge: truncated", f["message"])

    # --- who may join ----------------------------------------------------------

    def token_file(self, name, secret):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(secret + "\n")
        os.chmod(path, 0o600)
        return path

    def squatter(self, job_id, auth):
        """Something that holds MASTER_PORT first and answers like a master."""
        fake = wire.FakeMaster(self.port, lambda conn: conn.sendall(
            wire.challenge(job_id=job_id, auth=auth)))
        self.addCleanup(fake.close)

    def test_rank_0_warns_once_of_a_job_across_hosts_without_a_token(self):
        procs = self.job(4, per_host=2)
        self.finish()
        self.assertExit(procs.values(), 0)
        self.assertEqual(procs[0].err.count("warning: no job token"), 1)
        for r in (1, 2, 3):
            self.assertNotIn("no job token", procs[r].err)
        token = self.token_file("tok", "a-job-token-that-nobody-else-has-0005")
        self.port = free_port()
        procs = self.job(4, per_host=2, extra=("--token-file", token))
        self.finish(procs.values())
        self.assertNotIn("no job token", procs[0].err)

    def test_rank_0_without_a_token_never_joins_what_holds_its_port(self):
        # Security item 2: without a token, anything that holds MASTER_PORT first and
        # shows rank 0's job id (none, or Slurm's public JOBID.STEP) could hand rank 0 a
        # pass of its own making while rank 1 never started. Rank 0 does not join it: it
        # says what most likely holds the port (a second rank 0) and fails at once.
        for job_id in ("", "81234.0"):
            with self.subTest(job_id=job_id):
                self.port = free_port()
                self.squatter(job_id, auth=False)
                self.timeout = 6.0
                extra = ("--job-id", job_id) if job_id else ()
                p = self.rank(0, 2, extra=extra)
                self.finish([p])
                self.assertEqual(p.rc, 3, p.err)
                self.assertNotIn("joining it as a member", p.err)
                f = self.finding(p.report, "duplicate-rank")
                self.assertIn("nothing proves it is this job's master", f["message"])
                self.assertIn("--token-file", f["hint"])

    def test_a_member_without_a_token_scans_nothing_for_a_squatter(self):
        # Security item 6: without a token the path plan is unsigned. A squatter on
        # MASTER_PORT admits rank 1 of a 2-rank job, says the world is 64, and plans 40
        # connections to the member's own loopback (services of the host, open or not).
        # The member makes none of them: its own world size bounds the plan, and without
        # a token loopback and unspecified targets are refused.
        listeners = []
        for _ in range(8):
            ls = socket.create_server(("127.0.0.1", 0))
            ls.setblocking(False)
            listeners.append(ls)
            self.addCleanup(ls.close)
        targets = [dict(host=i + 1, address=b"127.0.0.1" if i % 5 else b"0.0.0.0", ifname=b"",
                        port=listeners[i % 8].getsockname()[1], identity=b"h%d" % i,
                        rest=bytes(48)) for i in range(40)]
        plan = wire.encode_plan(dict(self_host=0, identity=b"h0", per_conn=1000, total=4000,
                                     in_flight=8, targets=targets, mac=bytes(32)))
        reports = []

        def answer(conn):
            conn.sendall(wire.challenge(job_id="", auth=False))
            wire.read_frame(conn)  # the hello
            conn.sendall(wire.frame(wire.ADMIT, struct.pack("<II", 1, 64)))
            conn.sendall(wire.frame(wire.PATH_PLAN, plan))
            conn.settimeout(8)
            reports.append(wire.read_frame(conn)[1])

        fake = wire.FakeMaster(self.port, answer, linger=0.1, connections=1)
        self.addCleanup(fake.close)
        self.timeout = 6.0
        p = self.rank(1, 2, extra=("--no-relay",))
        self.finish([p])
        fake.close()
        self.assertEqual(reports, [wire.PATH_REPORT], p.err)
        accepted = 0
        for ls in listeners:
            try:
                while True:
                    ls.accept()[0].close()
                    accepted += 1
            except BlockingIOError:
                pass
        self.assertEqual(accepted, 0, p.err)
        self.assertIn("left 40 of the path plan's 40 connections out", p.err)
        self.assertNotEqual(p.rc, 0)

    def test_a_member_with_a_token_takes_nothing_from_a_master_without_one(self):
        # Whatever answers on MASTER_PORT without the token (a squatter that shows the
        # job's id) cannot hand a member holding it a verdict: auth-failed, exit 6.
        self.squatter("job-a", auth=False)
        token = self.token_file("tok", "a-job-token-that-nobody-else-has-0008")
        p = self.rank(1, 2, extra=("--job-id", "job-a", "--token-file", token))
        self.finish([p])
        self.assertEqual(p.rc, 6, p.err)
        self.assertIn("does not use one", self.finding(p.report, "auth-failed")["message"])

    def test_a_member_without_the_token_is_named_by_the_master_not_a_stray(self):
        # Newcomer bug 2: a member with no token against a master with one was counted a
        # stray connection ("a port scanner, a health check ... harmless"). It now says
        # its hello, which the master refuses as auth-failed naming it.
        token = self.token_file("tok", "a-job-token-that-nobody-else-has-0009")
        m = self.master(2, "--token-file", token)
        p = self.rank(1, 2, host="h1")
        self.finish()
        self.assertEqual(p.rc, 6, p.err)
        self.assertIn("requires a job token, and this member has none",
                      self.finding(p.report, "auth-failed")["message"])
        ids = [f["id"] for f in m.report["findings"]]
        self.assertNotIn("stray-connection", ids, m.report["findings"])
        auth = self.finding(m.report, "auth-failed")
        self.assertIn("claiming rank 1 (h1, pid", auth["message"])

    def test_rank_0_with_a_token_never_joins_a_squatter_without_one(self):
        self.squatter("job-a", auth=False)
        token = self.token_file("tok", "a-job-token-that-nobody-else-has-0004")
        p = self.rank(0, 2, extra=("--job-id", "job-a", "--token-file", token))
        self.finish([p])
        self.assertEqual(p.rc, 7)
        self.finding(p.report, "master-port-in-use")

    def test_a_master_with_a_token_names_no_job_and_no_version_to_a_stranger(self):
        token = self.token_file("tok", "a-job-token-that-nobody-else-has-0006")
        m = self.master(2, "--token-file", token, "--job-id", "job-secret-77")
        with wire.connect(self.port) as s:
            version, msg_type, payload = wire.read_frame(s)
            self.assertEqual(msg_type, wire.CHALLENGE)
            self.assertNotIn(b"job-secret-77", payload)
            self.assertNotIn(b"0.1.0", payload)
            self.assertIn(b"tag:", payload)  # what a holder of the token can check
            self.assertEqual(payload[-1:], b"\1")  # it does say a token is wanted
        # A second rank 0 with the same token and job id still tells it is this
        # job's master, and joins it to report the duplicate.
        again = self.rank(0, 2, extra=("--token-file", token, "--job-id", "job-secret-77"))
        self.finish()
        self.assertIn("already listens", again.err)
        self.assertEqual(self.finding(m.report, "duplicate-rank")["ranks"], [0])

    def test_a_stranger_claiming_a_missing_rank_does_not_choose_the_suspect_host(self):
        # A real rank of a 3-rank token job never starts; a stranger with a wrong token
        # claims it on a host name of its choice. Its claim is no evidence: the rank is
        # missing-rank's (exit 4), and login01 is neither suspected nor drained.
        good = self.token_file("good", "a-job-token-that-nobody-else-has-0003")
        bad = self.token_file("bad", "a-strangers-guess-at-the-token-00004")
        m = self.master(3, "--token-file", good, "--job-id", "job-a")
        one = self.rank(1, 3, extra=("--token-file", good, "--job-id", "job-a"))
        stranger = self.rank(2, 3, extra=("--token-file", bad, "--job-id", "job-a",
                                          "--host-name", "login01"))
        self.finish()
        self.assertEqual(stranger.rc, 6)
        rep = m.report
        self.assertEqual((m.rc, one.rc), (4, 4))
        self.assertEqual(rep["findings"][0]["id"], "missing-rank")
        self.assertEqual(rep["findings"][0]["ranks"], [2])
        self.assertNotIn("login01", rep["suspect_hosts"])
        self.assertNotIn("suspect hosts: login01", m.out)
        auth = self.finding(rep, "auth-failed")
        self.assertEqual((auth["severity"], auth["hosts"]), ("warning", []))

    def test_wrong_token_replayed_hello_and_another_job(self):
        secret = "a-job-token-that-nobody-else-has-0001"
        good = self.token_file("good", secret)
        bad = self.token_file("bad", "some-other-job-token-entirely-0002")
        m = self.master(4, "--token-file", good, "--job-id", "job-a")
        wrong = self.rank(1, 4, extra=("--token-file", bad, "--job-id", "job-a"))
        foreign = self.rank(2, 4, extra=("--token-file", good, "--job-id", "job-b"))
        # Capture a real, correctly signed hello from rank 3, made for another master...
        fake_port = free_port()
        srv = socket.create_server(("127.0.0.1", fake_port))
        srv.settimeout(5)
        e = clean_env(RANK=3, WORLD_SIZE=4, MASTER_ADDR="127.0.0.1", MASTER_PORT=fake_port)
        # (--no-relay: its hello, not a host relay's, is what this fake master is to catch.)
        victim = Proc(["run", "--no-gpu", "--no-relay", "--timeout", "3", "--token-file", good,
                       "--job-id", "job-a"], e, self.tmp.name, "victim")
        self.procs.append(victim)
        conn, _ = srv.accept()
        conn.sendall(wire.frame(wire.CHALLENGE, os.urandom(16) + wire.s("0.1.0") +
                                wire.s("job-a") + b"\1"))
        version, msg_type, payload = wire.read_frame(conn)
        conn.close()
        srv.close()
        self.assertEqual(msg_type, wire.HELLO)
        # ...and replay it to the real one, over a connection with a fresh nonce.
        with wire.connect(self.port) as s:
            wire.read_frame(s)
            s.sendall(wire.frame(wire.HELLO, payload))
            version, msg_type, reply = wire.read_frame(s)
            self.assertEqual(msg_type, wire.REJECT)
            code, reason = wire.reject_reason(reply)
            self.assertEqual(code, 3)
            self.assertIn("does not carry this job's token", reason)
        self.finish()
        self.assertEqual(wrong.rc, 6)
        self.assertIn("does not carry this job's token", wrong.finding("auth-failed")["message"])
        self.assertEqual(foreign.rc, 6)
        self.assertEqual(foreign.ids(), ["foreign-job"])
        rep = m.report
        # What refused processes claim proves nothing: the ranks stay missing (exit 4),
        # the refusals are warnings that name no host.
        self.assertEqual(rep["exit_code"], 4)
        self.assertEqual(rep["findings"][0]["id"], "missing-rank")
        self.assertEqual(rep["suspect_hosts"], "")
        self.assertTrue(rep["authenticated"])
        self.assertEqual([x["rank"] for x in rep["members"]], [0])  # none of them counted
        auth = [f for f in rep["findings"] if f["id"] == "auth-failed"]
        self.assertEqual(sorted(r for f in auth for r in f["ranks"]), [1, 3])
        self.assertEqual({f["severity"] for f in auth}, {"warning"})
        self.assertIn("foreign-job", [f["id"] for f in job_findings(rep)])
        for p in self.procs:  # the token never shows
            self.assertNotIn(secret, p.out + p.err)
            if os.path.exists(p.json_path):
                with open(p.json_path) as f:
                    self.assertNotIn(secret, f.read())

    def test_hostile_strings_are_escaped_and_json_stays_valid(self):
        m = self.master(4)
        host = b"evil\x1b[31m\x00\xff\xfe\x9b2J"
        rec = wire.record(3, 4, host, env=[(b"NCCL_IB_HCA", b"mlx5\x1b]0;owned\x07")])
        client = wire.connect(self.port)
        wire.read_frame(client)
        client.sendall(wire.hello(rec))
        with wire.connect(self.port) as big:  # 64 KiB of host name: over the hello's cap
            wire.read_frame(big)
            big.sendall(wire.hello(wire.record(2, 4, b"h" * 65536)))
            big.settimeout(3)
            self.assertEqual(big.recv(100), b"")
        self.members([1, 2], 4)
        self.finish()
        client.close()
        self.assertExit(self.procs, 0)
        text = m.out
        for bad in ("\x1b", "\x00", "\x9b", "\x07"):
            self.assertNotIn(bad, text)
        self.assertIn(r"evil\x1b[31m\x00\xff\xfe\x9b2J", text)
        rep = m.report  # json.load succeeded: valid JSON
        hosts = {x["rank"]: x["host"] for x in rep["members"]}
        self.assertTrue(hosts[3].startswith("evil\x1b[31m\x00"))
        self.assertIn("\ufffd", hosts[3])
        self.assertIn("env-mismatch", [f["id"] for f in job_findings(rep)])

    # --- processes that die ------------------------------------------------------

    def test_kill_9_of_a_member_after_its_hello(self):
        m = self.rank(0, 3)
        one = self.rank(1, 3)
        one.wait_for("ranks so far")  # its hello was accepted
        one.popen.kill()
        self.finish()
        self.assertEqual(m.rc, 4)
        self.assertEqual([f["id"] for f in job_findings(m.report)],
                         ["member-disconnected", "missing-rank"])
        self.assertEqual(self.finding(m.report, "member-disconnected")["ranks"], [1])

    def test_kill_9_of_local_leaves_no_job_token_behind(self):
        # `rankcheck local` makes a token of its own: a SIGKILL to the whole job
        # (a scheduler's end) must not leave it on disk. The members hang in a
        # fake NCCL init, so that the kill lands mid-run.
        tmpdir = tempfile.mkdtemp(prefix="rankcheck-test-tmp-")
        self.addCleanup(shutil.rmtree, tmpdir, True)
        env = clean_env(RANKCHECK_CUDA_LIB=FAKE, RANKCHECK_NCCL_LIB=FAKE, FAKE_GPUS=gpus(0, 3),
                        FAKE_NCCL_INIT="hang", TMPDIR=tmpdir)
        p = subprocess.Popen([BIN, "local", "-n", "3", "--timeout", "8"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        try:
            deadline = time.monotonic() + 5
            line = ""
            while "go: NCCL init" not in line:
                self.assertLess(time.monotonic(), deadline, "local never reached the GPU stage")
                line = p.stderr.readline()
                self.assertTrue(line or p.poll() is None, "local ended early")
        finally:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)
            p.stderr.close()
        left = [os.path.join(d, f) for d, _, files in os.walk(tmpdir) for f in files]
        left += [d for d, _, _ in os.walk(tmpdir) if d != tmpdir and
                 not os.path.basename(d).startswith("rankcheck-fake-nccl-")]
        self.assertFalse([x for x in left if "fake-nccl" not in x], left)

    def test_kill_9_of_the_master_mid_run(self):
        self.timeout = 30.0  # far from what is measured (a busy machine)
        m = self.rank(0, 4)
        others = self.members([1, 2], 4)
        for p in others:
            p.wait_for("ranks so far")  # joined: the run is under way
        m.popen.kill()
        killed = time.monotonic()
        for p in others:
            p.wait(self.timeout + GRACE)
            self.assertEqual(p.rc, 4)
            self.assertLess(time.monotonic() - killed, 10.0, "it waited for the deadline")
            self.assertIn("closed the connection before its verdict",
                          p.finding("master-lost")["message"])
        m.wait(1)

    def test_master_starting_five_seconds_late(self):
        self.timeout = 10.0
        others = self.members([1, 2, 3], 4)
        time.sleep(5)
        m = self.rank(0, 4)
        self.finish()
        self.assertExit(self.procs, 0)
        self.assertEqual(m.report["ranks_joined"], 4)

    # --- SIGTERM in each phase ---------------------------------------------------

    def sigterm(self, p, state):
        """SIGTERM to `p` once its log says `state`; it must end at once, with 143."""
        p.wait_for(state)
        p.popen.send_signal(signal.SIGTERM)
        t = time.monotonic()
        p.wait(3)
        self.assertLess(time.monotonic() - t, 2.0, f"{p.name} took over 2 s to end")
        self.assertEqual(p.rc, 128 + signal.SIGTERM)

    def test_sigterm_to_the_master_while_waiting(self):
        m = self.rank(0, 3)
        one = self.rank(1, 3)
        one.wait_for("ranks so far")
        self.sigterm(m, "joined 2/3")
        self.assertEqual(m.report["decided"], "interrupted")
        # Its log says what its report says, not "deadline reached".
        self.assertIn("(stopped by SIGTERM): FAIL (members exit 4, rank 0 exits 143)", m.err)
        self.assertNotIn("deadline reached", m.err)
        self.finish()
        self.assertEqual(one.rc, 4)
        self.assertIn("rankcheck: FAIL: rank 0 (vm) was stopped by SIGTERM", one.out.replace(
            os.uname().nodename, "vm"))

    def test_sigterm_to_the_master_after_a_member_died_names_that_member(self):
        # Newcomer bug 11: under torchrun one crashed worker gets the others SIGTERMed by
        # the agent, and rank 0's report blamed "the scheduler or someone". A member that
        # left shortly before the signal is where to look.
        m = self.rank(0, 4)
        one = self.rank(1, 4, host="h1", extra=("--no-relay",))
        two = self.rank(2, 4, host="h2", extra=("--no-relay",))
        m.wait_for("joined 3/4")
        two.popen.kill()  # SIGKILL: what an OOM kill does
        m.wait_for("disconnected before the verdict")
        self.sigterm(m, "disconnected before the verdict")
        f = job_findings(m.report)[0]
        self.assertEqual(f["id"], "master-interrupted")
        self.assertIn("after rank 2 (h2, pid", f["message"])
        self.assertIn("a launcher that stops every process when one ends", f["message"])
        self.assertEqual((f["ranks"], f["hosts"]), ([2], ["h2"]))
        self.finish([one])

    def test_sigterm_to_a_member_while_waiting(self):
        m = self.rank(0, 3)
        one = self.rank(1, 3)
        self.sigterm(one, "ranks so far")
        self.finish()
        self.assertEqual(m.rc, 4)
        self.assertIn("member-disconnected", [f["id"] for f in job_findings(m.report)])

    def gpu_job(self, **fake):
        env = dict(RANKCHECK_CUDA_LIB=FAKE, RANKCHECK_NCCL_LIB=FAKE, FAKE_GPUS=gpus(0, 2),
                   TMPDIR=self.tmp.name, **fake)
        self.gpu = True
        return [self.rank(r, 2, local=(r, 2), **env) for r in range(2)]

    def sigterm_in_the_gpu_stage(self, **fake):
        """SIGTERM to the master of a GPU job whose fake NCCL does as `fake` says, then to the
        member of another such job."""
        for victim in (0, 1):
            with self.subTest(victim="master" if victim == 0 else "member"):
                self.port = free_port()
                procs = self.gpu_job(**fake)
                self.sigterm(procs[victim], "go: NCCL init")
                self.finish(procs)
                self.procs.clear()

    def test_sigterm_in_nccl_init(self):
        self.sigterm_in_the_gpu_stage(FAKE_NCCL_INIT="hang")

    def test_sigterm_in_the_allreduce(self):
        self.sigterm_in_the_gpu_stage(FAKE_NCCL_ALLREDUCE="hang")



class ReportPathRace(unittest.TestCase):
    """Whoever can write the report's folder swaps, for the whole run, a FIFO and a link
    to a terminal at --json's PATH (renameat2's RENAME_EXCHANGE, atomic). The writer
    looked at PATH, saw a FIFO, then opened it again following links: as root, its
    report could land in any device (/dev/kmsg on a node); here a pseudo-terminal whose
    other end the test reads. It must never write there."""

    RUNS = 40

    def test_a_swapped_link_never_receives_the_report(self):
        import ctypes
        import pty
        libc = ctypes.CDLL(None, use_errno=True)
        if not hasattr(libc, "renameat2"):
            self.skipTest("no renameat2 in this C library")
        at_fdcwd, rename_exchange = -100, 2
        master, slave = pty.openpty()
        self.addCleanup(os.close, master)
        self.addCleanup(os.close, slave)
        os.set_blocking(master, False)
        tmp = tempfile.mkdtemp(prefix="rankcheck-race-")
        self.addCleanup(shutil.rmtree, tmp, True)
        path, other = os.path.join(tmp, "report.json"), os.path.join(tmp, "swap")
        codes = set()
        for _ in range(self.RUNS):
            # A FIFO and a link, swapped in a loop while one run writes its report.
            for p in (path, other):
                if os.path.lexists(p):
                    os.unlink(p)
            os.mkfifo(path)
            os.symlink(os.ttyname(slave), other)
            stop = threading.Event()

            def swap():
                a, b = os.fsencode(path), os.fsencode(other)
                while not stop.is_set():
                    libc.renameat2(at_fdcwd, a, at_fdcwd, b, rename_exchange)

            swapper = threading.Thread(target=swap, daemon=True)
            swapper.start()
            try:
                r = subprocess.run([BIN, "local", "-n", "1", "--no-gpu", "--json", path],
                                   env=clean_env(), capture_output=True, text=True, timeout=60)
            finally:
                stop.set()
                swapper.join(timeout=10)
            codes.add(r.returncode)
        try:
            leaked = os.read(master, 65536)
        except BlockingIOError:
            leaked = b""
        self.assertEqual(leaked, b"", "the report was written to the terminal behind the link")
        self.assertLessEqual(codes, {0, 2}, codes)


if __name__ == "__main__":
    unittest.main()
