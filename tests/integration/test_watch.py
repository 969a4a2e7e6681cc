"""The job under watch: `rankcheck run [options] -- CMD` on loopback, each rank its own
process as a launcher starts them. The check passes, every wrapper runs the command
(a torch + gloo job on CPU, or a replay of real NCCL lines with their timing), and
rank 0 names the initiating failure while the job runs. No test sleeps a fixed time
before it acts: each waits for the state it needs (a file, a report), with a wide
deadline."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from harness import BIN, RankcheckTest, check_report, clean_env, free_port, save_reports
from netns import ClusterCase
from test_ecosystem import parse_prometheus_text
from test_netpath import firewall

JOBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs")
# Debian's python3, which has torch (python3-torch), wherever the tests run from.
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
GLOO = [PY, os.path.join(JOBS, "gloo_job.py")]
REPLAY = [PY, os.path.join(JOBS, "replay.py")]
# A job's own time: python and torch start in about 2 s here, far more on a loaded machine.
JOB_LIMIT = 90.0


def wait_for(what, check, limit=JOB_LIMIT):
    """Waits until check() returns something true; its value."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"waited {limit:.0f} s for {what}")


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Watched(RankcheckTest):
    timeout = 20.0  # the check's; the job runs as long as it runs

    def watched(self, rank, world, cmd, extra=(), **env):
        """`rankcheck run [extra] -- cmd` as one rank."""
        return self.rank(rank, world, extra=[*extra, "--", *cmd], **env)

    def wait(self, procs, limit=JOB_LIMIT):
        for p in procs:
            p.wait(limit - (time.monotonic() - p.start))
        return procs

    def job_report(self, p):
        rep = p.report
        self.assertIn("job", rep, f"{p.name}: no job section\n{p.err}")
        return rep["job"]

    # ----- a healthy job --------------------------------------------------------------

    def test_a_passing_job_runs_its_command_unchanged(self):
        # What the command sees and prints is what it would without rankcheck: its
        # environment exactly, stdout and stderr byte for byte (no final newline, bytes
        # that are not UTF-8), its exit code.
        script = (
            "import json,os,sys\n"
            "json.dump(dict(os.environ), open(os.environ['ENV_OUT'] + os.environ['RANK'], 'w'))\n"
            "sys.stdout.write('out line\\n' * 3 + 'no newline')\n"
            "sys.stderr.write('err line\\n')\n")
        world = 2
        env_out = os.path.join(self.tmp.name, "env")
        procs = [self.watched(r, world, [PY, "-c", script], ENV_OUT=env_out)
                 for r in range(world)]
        self.wait(procs)
        self.assertExit(procs, 0)
        member = procs[1]
        with open(env_out + "1") as f:
            seen = json.load(f)
        given = clean_env(RANK=1, WORLD_SIZE=world, MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=self.port, ENV_OUT=env_out)
        self.assertEqual(seen, given)
        self.assertIn("err line", member.err)
        job = self.job_report(procs[0])
        self.assertEqual(job["state"], "ended")
        self.assertEqual(job["fingerprint"], "")
        self.assertEqual(job["ranks"]["exited"], 2)
        self.assertEqual(job["findings"], [])
        self.assertTrue(all(m["exit_code"] == 0 for m in job["members"]))

    def test_stdout_passes_through_byte_for_byte(self):
        # The member's stdout (its verdict line is on stdout before the command starts)
        # ends with exactly what the command wrote.
        script = ("import sys\n"
                  "sys.stdout.buffer.write(bytes(range(256)) * 64 + b'\\r\\npartial')\n")
        procs = [self.rank(r, 2, extra=["--", PY, "-c", script]) for r in range(2)]
        for p in procs:
            p.popen.wait(timeout=JOB_LIMIT)
        # Read as bytes: Proc decodes text; run the member again with bytes to compare.
        self.assertEqual([p.popen.returncode for p in procs], [0, 0])
        port = self.port + 1
        env = lambda r: clean_env(RANK=r, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        args = lambda: [BIN, "run", "--no-gpu", "--timeout", "20", "-q", "--", PY, "-c", script]
        ps = [subprocess.Popen(args(), env=env(r), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
              for r in range(2)]
        outs = [p.communicate(timeout=JOB_LIMIT)[0] for p in ps]
        want = bytes(range(256)) * 64 + b"\r\npartial"
        self.assertTrue(outs[1].endswith(want), outs[1][-200:])
        # Before the command's bytes, only the member's verdict line.
        head = outs[1][: len(outs[1]) - len(want)].decode()
        self.assertRegex(head, r"^rankcheck: PASS\b[^\n]*\n$")

    def test_a_gloo_job_passes_and_its_ranks_pass_through_init(self):
        world = 3
        # Held 3 s after its all-reduce: a socket is looked at once a second.
        procs = [self.watched(r, world, GLOO, JOB_HOLD=3) for r in range(world)]
        self.wait(procs)
        self.assertExit(procs, 0)
        for r, p in enumerate(procs):
            self.assertIn(f"rank {r}: all_reduce 6", p.out)
        job = self.job_report(procs[0])
        self.assertEqual(job["fingerprint"], "")
        # Each rank's init was seen without any logging: its socket on MASTER_PORT.
        for m in job["members"]:
            self.assertIsNotNone(m["init_ms"], m)
        self.assertIn("job under watch: ended", procs[0].out)

    # ----- failures, named while they happen ---------------------------------------

    def test_a_rank_that_raises_before_init_is_named_and_fail_fast_ends_the_job(self):
        world = 3
        t0 = time.monotonic()
        procs = [self.watched(r, world, GLOO, extra=["--fail-fast", "--kill-grace", "5"],
                              JOB_MODE="raise", JOB_BAD=1, JOB_PG_TIMEOUT=300)
                 for r in range(world)]
        self.wait(procs)
        took = time.monotonic() - t0
        # Every process exits with the class of the failure, long before the
        # process group's own 300 s timeout.
        self.assertExit(procs, 8)
        self.assertLess(took, 120)
        job = self.job_report(procs[0])
        self.assertEqual(job["state"], "ended-by-rankcheck")
        self.assertEqual(job["fingerprint"], "job-rank-failed")
        f = job["findings"][0]
        self.assertEqual((f["id"], f["ranks"], f["severity"]), ("job-rank-failed", [1], "error"))
        self.assertIn("rank 1 on ", f["message"])
        self.assertIn("ValueError: rank 1 cannot open its data shard", f["message"])
        ended = {m["rank"]: m["ended_by_rankcheck"] for m in job["members"]}
        self.assertEqual(ended, {0: True, 1: False, 2: True})
        self.assertIn("job-rank-failed", procs[0].err)  # said on stderr when it was raised

    def test_without_fail_fast_each_process_exits_with_its_own_command(self):
        world = 3
        procs = [self.watched(r, world, GLOO, JOB_MODE="exit", JOB_BAD=2, JOB_EXIT=3,
                              JOB_PG_TIMEOUT=15)
                 for r in range(world)]
        self.wait(procs)
        self.assertEqual(procs[2].rc, 3)
        # The others wait for rank 2 in init_process_group until their own timeout: the
        # job is reported, not touched.
        self.assertNotEqual(procs[0].rc, 8)
        job = self.job_report(procs[0])
        f = job["findings"][0]
        self.assertEqual((f["id"], f["ranks"]), ("job-rank-failed", [2]))
        self.assertIn("exited with 3", f["message"])
        self.assertIn("downstream of it", f["message"])

    def test_ranks_that_never_reach_init_are_init_blocked(self):
        # Replayed NCCL INFO lines: ranks 0-1 print Init START and wait; rank 2 is still
        # downloading. The report is rewritten while the job runs (its fingerprint is
        # there before the job ends), and so is the metrics file.
        world = 3
        metrics = os.path.join(self.tmp.name, "m.prom")
        exclude = os.path.join(self.tmp.name, "exclude")
        procs = [self.watched(r, world, REPLAY, extra=["--init-timeout", "2", "--metrics", metrics,
                                                       "--exclude-file", exclude],
                              REPLAY_DIR=os.path.join(JOBS, "nccl_init_blocked"),
                              REPLAY_SLEEP=600)
                 for r in range(world)]

        def blocked():
            # Raised, with what rank 2 printed last (it comes with rank 2's heartbeat).
            rep = read_json(procs[0].json_path)
            job = (rep or {}).get("job") or {}
            found = job.get("fingerprint") == "init-blocked" and \
                "Downloading shards" in job["findings"][0]["message"]
            return job if found else None

        job = wait_for("init-blocked in rank 0's report", blocked)
        self.assertEqual(job["state"], "running")
        self.assertTrue(all(p.popen.poll() is None for p in procs))
        check_report(read_json(procs[0].json_path))
        f = job["findings"][0]
        self.assertEqual((f["id"], f["ranks"]), ("init-blocked", [2]))
        self.assertIn("ranks 0-1", f["message"])
        self.assertIn("wait in init", f["message"])
        self.assertIn("Downloading shards", f["message"])  # what rank 2 printed last
        markers = {m["rank"]: m["marker"] for m in job["members"]}
        self.assertEqual(markers[0], "nccl-bootstrap")  # the first of its init lines
        # The metrics file is rewritten right after the report, with the same state.
        fingerprint = re.compile(r'rankcheck_job_fingerprint\{[^}]*id="init-blocked"\} 1')

        def metrics_say_it():
            try:
                with open(metrics) as m:
                    text = m.read()
            except OSError:
                return None
            return text if fingerprint.search(text) else None

        text = wait_for("init-blocked in rank 0's metrics", metrics_say_it)
        self.assertIn('rankcheck_job_fingerprint{job_id="', text)
        self.assertRegex(text, r'rankcheck_job_ranks\{[^}]*phase="in_init"\} 2')
        self.assertRegex(text, r'rankcheck_job_info\{[^}]*first_finding="init-blocked",'
                               r'first_finding_class="process",suspect_hosts="[^"]+"\} 1')
        families = parse_prometheus_text(text)  # strictly the text format, every family once
        self.assertEqual(families["rankcheck_job_running"]["samples"][0][1], 1.0)
        if shutil.which("promtool"):  # Prometheus's own reader takes it as it is
            r = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                               capture_output=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # The hosts to leave out of a retry, as the check would write them.
        with open(exclude) as e:
            self.assertEqual(e.read(), ",".join(f["hosts"]) + "\n")
        for p in procs:
            p.popen.send_signal(signal.SIGTERM)
        self.wait(procs)
        # Stopped from outside: each exits as its command did (128 + SIGTERM).
        self.assertExit(procs, 128 + signal.SIGTERM)

    def test_init_blocked_with_fail_fast_ends_every_rank_with_exit_4(self):
        world = 3
        procs = [self.watched(r, world, GLOO,
                              extra=["--fail-fast", "--init-timeout", "3", "--kill-grace", "5"],
                              JOB_MODE="sleep", JOB_BAD=2, JOB_PG_TIMEOUT=300)
                 for r in range(world)]
        self.wait(procs)
        self.assertExit(procs, 4)
        job = self.job_report(procs[0])
        self.assertEqual(job["fingerprint"], "init-blocked")
        self.assertEqual(job["findings"][0]["ranks"], [2])
        self.assertIn("rank 2: loading data", job["findings"][0]["message"])

    def test_a_rank_that_goes_quiet_while_the_others_go_on_is_job_stalled(self):
        # Ranks 0-1 print a step every 0.1 s; rank 2 printed once and went quiet.
        chatty = "i=0; while true; do i=$((i+1)); echo step $i; sleep 0.1; done"
        quiet = "echo 'rank 2: waiting on the filesystem'; exec sleep 600"
        procs = [self.watched(r, 3, ["sh", "-c", quiet if r == 2 else chatty],
                              extra=["--stall-after", "3", "--fail-fast", "--kill-grace", "2"])
                 for r in range(3)]
        self.wait(procs)
        self.assertExit(procs, 8)
        f = self.job_report(procs[0])["findings"][0]
        self.assertEqual((f["id"], f["ranks"]), ("job-stalled", [2]))
        self.assertIn("rank 2: waiting on the filesystem", f["message"])

    def test_an_nccl_warning_names_the_rank_that_failed_first(self):
        # nccl#1176's bootstrap failure on rank 1; rank 0 then loses its peer and exits too.
        world = 2
        d = os.path.join(JOBS, "nccl_warn")
        procs = [self.watched(0, world, REPLAY, REPLAY_DIR=d, REPLAY_EXIT=1),
                 self.watched(1, world, REPLAY, REPLAY_DIR=d, REPLAY_EXIT=1)]
        self.wait(procs)
        self.assertExit(procs, 1)
        f = self.job_report(procs[0])["findings"][0]
        self.assertEqual((f["id"], f["ranks"]), ("job-rank-failed", [1]))
        self.assertIn("Message truncated", f["message"])

    # ----- the wrapper as a process ------------------------------------------------

    def test_sigterm_to_the_wrapper_reaches_the_command(self):
        ready = os.path.join(self.tmp.name, "ready")
        got = os.path.join(self.tmp.name, "got")
        script = ("import os,signal,sys,time\n"
                  "def on(sig, _):\n"
                  f"    open({got!r}, 'w').write(str(sig)); sys.exit(7)\n"
                  "signal.signal(signal.SIGTERM, on)\n"
                  f"open({ready!r}, 'w').close()\n"
                  "time.sleep(120)\n")
        p = self.watched(0, 1, [PY, "-c", script])
        wait_for("the command's handler", lambda: os.path.exists(ready))
        p.popen.send_signal(signal.SIGTERM)
        self.wait([p])
        self.assertEqual(p.rc, 7)
        with open(got) as f:
            self.assertEqual(f.read(), str(int(signal.SIGTERM)))

    def test_a_command_killed_by_sigkill(self):
        pidfile = os.path.join(self.tmp.name, "pid")
        p = self.watched(0, 1, ["sh", "-c", f"echo $$ > {pidfile}; exec sleep 120"])
        pid = int(wait_for("the command's pid", lambda: (open(pidfile).read().strip()
                                                          if os.path.exists(pidfile) else "")))
        os.kill(pid, signal.SIGKILL)
        self.wait([p])
        self.assertEqual(p.rc, 128 + 9)
        f = self.job_report(p)["findings"][0]
        self.assertEqual(f["id"], "job-rank-failed")
        self.assertIn("killed by signal 9", f["message"])

    def test_a_command_that_does_not_exist(self):
        p = self.watched(0, 1, ["/nonexistent/train.py"])
        self.wait([p])
        self.assertEqual(p.rc, 127)
        self.assertIn("cannot run /nonexistent/train.py: No such file or directory", p.err)
        f = self.job_report(p)["findings"][0]
        self.assertEqual((f["id"], f["ranks"]), ("job-rank-failed", [0]))

    def test_a_failed_check_never_starts_the_command(self):
        ran = os.path.join(self.tmp.name, "ran")
        self.timeout = 2.0
        p = self.watched(0, 2, ["sh", "-c", f"touch {ran}"])  # rank 1 never comes
        self.wait([p])
        self.assertEqual(p.rc, 4)
        self.assertFalse(os.path.exists(ran))
        self.assertNotIn("job", p.report)

    def test_rank0s_command_ending_first_leaves_the_others_alone(self):
        go = os.path.join(self.tmp.name, "go")
        procs = [self.watched(0, 2, ["true"]),
                 self.watched(1, 2, ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 5"])]
        # Rank 0's command has ended; rank 1's still runs until told.
        wait_for("rank 0's command to end",
                 lambda: ((read_json(procs[0].json_path) or {}).get("verdict") == "pass"
                          and procs[0].popen.poll() is None))
        open(go, "w").close()
        self.wait(procs)
        self.assertEqual([p.rc for p in procs], [0, 5])
        f = self.job_report(procs[0])["findings"][0]
        self.assertEqual((f["id"], f["ranks"]), ("job-rank-failed", [1]))

    def test_a_member_whose_rank_0_is_gone_keeps_its_command(self):
        go = os.path.join(self.tmp.name, "go")
        started = os.path.join(self.tmp.name, "started")
        wait_go = f"while [ ! -e {go} ]; do sleep 0.05; done"
        procs = [self.watched(0, 2, ["sh", "-c", wait_go]),
                 self.watched(1, 2, ["sh", "-c", f"touch {started}; {wait_go}; exit 0"])]
        wait_for("rank 1's command", lambda: os.path.exists(started))
        procs[0].popen.kill()  # rank 0's wrapper, and with it its watch server
        procs[0].popen.wait()
        open(go, "w").close()
        self.wait([procs[1]])
        self.assertEqual(procs[1].rc, 0)


MPIRUN = shutil.which("mpirun")
TORCHRUN = shutil.which("torchrun", path="/usr/bin:/usr/local/bin")


class WatchedUnderLaunchers(unittest.TestCase):
    """`rankcheck run -- CMD` as each rank of a real launcher's job."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="rankcheck-watch-")
        self.port = free_port()

    def tearDown(self):
        save_reports(self, self.tmp)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def report(self, rank):
        with open(os.path.join(self.tmp, f"r{rank}.json")) as f:
            return check_report(json.load(f))

    def watched(self, *extra):
        return [BIN, "run", "--no-gpu", "--timeout", "30", "--json",
                os.path.join(self.tmp, "r{rank}.json"), *extra, "--", *GLOO]

    @unittest.skipUnless(MPIRUN, "mpirun not installed (Debian's openmpi-bin)")
    def test_under_mpirun_a_failing_rank_ends_the_job_in_seconds(self):
        cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
               "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
               "--mca", "oob_tcp_if_include", "lo", "-np", "3",
               "-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={self.port}",
               "-x", "JOB_MODE=raise", "-x", "JOB_BAD=2", "-x", "JOB_PG_TIMEOUT=300",
               *self.watched("--fail-fast", "--kill-grace", "5")]
        t0 = time.monotonic()
        r = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True,
                           timeout=JOB_LIMIT + 30)
        self.assertLess(time.monotonic() - t0, JOB_LIMIT)
        self.assertEqual(r.returncode, 8, r.stdout + r.stderr)
        job = self.report(0)["job"]
        self.assertEqual((job["fingerprint"], job["findings"][0]["ranks"]), ("job-rank-failed", [2]))
        self.assertEqual({m["launcher"] for m in self.report(0)["members"]}, {"openmpi"})

    @unittest.skipUnless(TORCHRUN, "torchrun not installed (Debian's python3-torch)")
    def test_under_torchrun_each_worker_wraps_the_training_script(self):
        # torch 1.13's torchrun: --no_python, and --redirects 1 --tee 1 to start at all.
        cmd = ["/usr/bin/python3", TORCHRUN, "--redirects", "1", "--tee", "1", "--nnodes", "1",
               "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port",
               str(self.port), "--max_restarts", "0", "--no_python", *self.watched()]
        r = subprocess.run(cmd, env=clean_env(JOB_HOLD=2), capture_output=True, text=True,
                           timeout=JOB_LIMIT)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("rank 1: all_reduce 3", r.stdout)
        job = self.report(0)["job"]
        self.assertEqual((job["state"], job["fingerprint"]), ("ended", ""))
        # Their init seen through torchrun's store on MASTER_PORT.
        self.assertTrue(all(m["init_ms"] is not None for m in job["members"]), job["members"])


class WatchedAcrossHosts(ClusterCase):
    """Two hosts (network namespaces), two ranks each: the job's ranks meet over the hosts'
    own addresses, and the watch crosses them too."""

    HOSTS = 2
    PER_HOST = 2

    def start(self, cmd, extra=(), env=None):
        self.cluster.up()
        for r in range(self.HOSTS * self.PER_HOST):
            host = r // self.PER_HOST
            argv = [BIN, "run", "--no-gpu", "--timeout", "30", "--progress-interval", "1",
                    "--host-name", f"h{host}", "--json", self.json(r), *extra, "--", *cmd]
            e = self.slurm_env(r, MASTER_ADDR="h0", GLOO_SOCKET_IFNAME="eth0", **(env or {}))
            self.procs[r] = (self.cluster.spawn(host, argv, e), time.monotonic())

    def finish(self):
        return self.wait_all(self.procs, JOB_LIMIT)

    def test_one_hosts_ranks_that_never_call_init_are_named_with_their_host(self):
        self.start(GLOO, extra=["--fail-fast", "--init-timeout", "4", "--kill-grace", "5"],
                   env={"JOB_MODE": "sleep", "JOB_BAD": "2,3", "JOB_PG_TIMEOUT": "300"})
        res = self.finish()
        for r, (rc, _, out, err) in res.items():
            self.assertEqual(rc, 4, f"rank {r}: {out}{err}")
        job = res[0][1]["job"]
        f = job["findings"][0]
        self.assertEqual((f["id"], f["ranks"], f["hosts"]), ("init-blocked", [2, 3], ["h1"]))
        self.assertIn("ranks 0-1 on h0 wait in init", f["message"])
        self.assertEqual(job["suspect_hosts"], "h1")

    def test_a_watch_server_out_of_reach_changes_no_exit_code(self):
        # After the check, h0 drops every packet to its watch port: h1's wrappers cannot
        # report, and their commands run and end as they would without rankcheck.
        watch_port = free_port()
        go = os.path.join(self.tmp.name, "go")
        script = ("import os,sys,time\n"
                  f"while not os.path.exists({go!r}): time.sleep(0.05)\n"
                  "sys.exit(int(os.environ['RANK']) + 10)\n")
        self.cluster.up()
        firewall(self.cluster.ns[0], "add table inet t",
                 "add chain inet t in { type filter hook input priority 0 ; }",
                 f"add rule inet t in ip saddr != 198.18.0.1 tcp dport {watch_port} drop")
        for r in range(4):
            host = r // self.PER_HOST
            argv = [BIN, "run", "--no-gpu", "--timeout", "30", "--host-name", f"h{host}",
                    "--json", self.json(r), "--watch-port", str(watch_port), "--",
                    PY, "-c", script]
            e = self.slurm_env(r, MASTER_ADDR="h0", RANK=r)
            self.procs[r] = (self.cluster.spawn(host, argv, e), time.monotonic())
        open(go, "w").close()  # each command ends as soon as it starts
        res = self.finish()
        for r, (rc, _, out, err) in res.items():
            self.assertEqual(rc, r + 10, f"rank {r}: {out}{err}")
        self.assertIn("the job runs unwatched", res[2][3])


if __name__ == "__main__":
    unittest.main()
