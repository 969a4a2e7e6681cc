"""rankcheck diagnose over real failures' logs (tests/fixtures/logs).

Each fixture (a .log file or a log directory) has a .expected beside it naming
its source, the cause it shows, and what diagnose must lead with: the first
finding's id, its role, its ranks and the exit code. The logs were made on this
machine by real failures (torchrun with gloo, Open MPI, rankcheck itself) or are
excerpts of public reports.
"""

import gzip
import json
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

from harness import BIN, EMULATED, Proc, RankcheckTest, clean_env
from netns import WHY_NOT

LOGS = os.path.normpath(os.path.join(os.path.dirname(__file__), "../fixtures/logs"))


def run(args, stdin=None, timeout=60):
    return subprocess.run([BIN, "diagnose", *args], env=clean_env(), input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def cases():
    out = []
    for name in sorted(os.listdir(LOGS)):
        if not name.endswith(".expected"):
            continue
        case = name[:-len(".expected")]
        expected = {}
        with open(os.path.join(LOGS, name)) as f:
            for line in f:
                key, _, value = line.partition(":")
                expected[key.strip()] = value.strip()
        path = os.path.join(LOGS, case)
        if not os.path.isdir(path):
            path += ".log"
        out.append((case, path, expected))
    return out


class Fixtures(unittest.TestCase):

    def test_there_are_fixtures_of_each_kind(self):
        names = [c for c, _, _ in cases()]
        self.assertGreaterEqual(len(names), 8)
        for kind in ("torchrun-", "mpirun-", "slurm-", "rankcheck-", "public-"):
            self.assertTrue(any(n.startswith(kind) for n in names), kind)
        for _, path, expected in cases():
            self.assertTrue(os.path.exists(path), path)
            for key in ("source", "cause", "first", "role", "exit"):
                self.assertTrue(expected.get(key), f"{path}: .expected has no {key}")

    def test_each_fixture_leads_with_its_expected_finding(self):
        for case, path, expected in cases():
            with self.subTest(case):
                r = run(["--json", path])
                self.assertEqual(r.returncode, int(expected["exit"]), r.stderr + r.stdout)
                report = json.loads(r.stdout)
                first = report["findings"][0]
                self.assertEqual(first["id"], expected["first"], json.dumps(report, indent=1))
                self.assertEqual(first["role"], expected["role"])
                if expected.get("ranks"):
                    want = [int(x) for x in expected["ranks"].split(",")]
                    self.assertEqual(first["ranks"], want, first["message"])
                if expected.get("hosts"):
                    self.assertEqual(first["hosts"], expected["hosts"].split(","), first["message"])
                if expected.get("verify"):
                    self.assertEqual(report["verify_with"], expected["verify"])
                self.assertEqual(report["exit_code"], r.returncode)

    def test_json_shape(self):
        _, path, _ = cases()[0]
        report = json.loads(run(["--json", path]).stdout)
        self.assertEqual(report["schema_version"], 1)
        self.assertEqual(report["role"], "diagnose")
        self.assertEqual(report["verdict"], "fail")
        for key in ("launcher", "verify_with", "inputs", "ranks_seen", "hosts_seen"):
            self.assertIn(key, report)
        self.assertEqual(set(report["inputs"]), {"files", "lines", "bytes", "matched_lines",
                                                 "binary_files_skipped"})
        roles = [f["role"] for f in report["findings"]]
        self.assertEqual(roles, sorted(roles, key=lambda x: x != "initiating"),
                         "initiating findings come first")
        for f in report["findings"]:
            for key in ("id", "severity", "exit_code", "message", "hint", "ranks", "hosts",
                        "role", "first_seen", "evidence"):
                self.assertIn(key, f)
            self.assertTrue(f["evidence"])
            for e in f["evidence"]:
                self.assertEqual(set(e), {"file", "line", "text"})
                self.assertGreater(e["line"], 0)


class Reasoning(unittest.TestCase):

    def test_torchrun_root_cause_is_not_taken_at_its_word(self):
        # torchrun's table names rank 0 (it noticed both failures in one second);
        # rank 0's own error points at its peer, rank 1 raised of its own.
        report = json.loads(run(["--json", os.path.join(LOGS, "torchrun-rank-raises.log")]).stdout)
        first = report["findings"][0]
        self.assertIn("ValueError: bad shard index 7", first["message"])
        downstream = [f for f in report["findings"] if f["role"] == "downstream"]
        self.assertTrue(any(f["id"] == "peer-failed" and f["ranks"] == [0] for f in downstream))
        self.assertEqual(report["launcher"], "torchrun")
        # As torch 1.13's torchrun takes it: --redirects 1 --tee 1, the underscored options.
        self.assertEqual(report["verify_with"],
                         "torchrun --redirects 1 --tee 1 --nnodes 1 --nproc_per_node 2 "
                         "--master_addr 127.0.0.1 --master_port 29500 --no_python rankcheck run "
                         "--timeout 120")

    def test_text_report(self):
        r = run(["--color", "never", os.path.join(LOGS, "mpirun-sigkill.log")])
        self.assertEqual(r.returncode, 4)
        self.assertIn("FAIL — 1 initiating, 0 downstream. First: rank 1 on vm was killed by signal 9",
                      r.stdout)
        self.assertIn("initiating · rank 1 · vm · first seen", r.stdout)
        self.assertIn("mpirun-sigkill.log:9  mpirun noticed that process rank 1", r.stdout)
        self.assertIn("verify with: mpirun -np 3 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 "
                      "rankcheck run --timeout 120", r.stdout)

    def test_an_exception_that_quotes_the_nccl_version_is_not_a_banner(self):
        # PyTorch's NCCL error names NCCL's version at its end, as NCCL's banner does:
        # one line, no traceback, and still a failure.
        text = ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/"
                "ProcessGroupNCCL.cpp:1269, unhandled system error, NCCL version 2.14.3\n")
        r = run(["--json", "-"], stdin=text)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertEqual(json.loads(r.stdout)["findings"][0]["id"], "nccl-init-failed")

    def test_two_processes_in_one_line(self):
        text = ("[default0]:step 3 [default1]:torch.cuda.OutOfMemoryError: CUDA out of memory. "
                "Tried to allocate 2.00 GiB\n")
        report = json.loads(run(["--json", "-"], stdin=text).stdout)
        first = report["findings"][0]
        self.assertEqual(first["id"], "gpu-out-of-memory")
        self.assertIn("local rank 1", first["message"])


class Causality(unittest.TestCase):
    """Which process started it, on real two-node torchrun logs (issue 35, item 11)."""

    def test_the_process_that_could_not_reach_the_store_is_the_cause_not_the_waiters(self):
        # cn2's agent had --master_port 29842, cn1's store listened on 29841: cn2 timed
        # out connecting, cn1 waited in its store (Socket Timeout).
        report = json.loads(run(["--json", os.path.join(LOGS, "torchrun-wrong-master-port")]).stdout)
        first = report["findings"][0]
        self.assertEqual((first["id"], first["role"]), ("master-unreachable", "initiating"))
        self.assertIn("could not connect to the store at cn1:29842 (timed out after 15s)",
                      first["message"])
        self.assertIn("cn2.log", first["first_seen"])
        waited = [f for f in report["findings"] if f["id"] == "missing-rank"]
        self.assertEqual([f["role"] for f in waited], ["downstream"])

    def test_processes_that_could_not_start_are_the_cause(self):
        # Ranks 2-3 on cn2 exited 125 at once (env could not start them); ranks 0-1 on cn1
        # waited for them until their 15 s timeout.
        report = json.loads(run(["--json", os.path.join(LOGS, "torchrun-exit-125")]).stdout)
        first = report["findings"][0]
        self.assertEqual((first["id"], first["role"]), ("process-died", "initiating"))
        self.assertEqual((first["ranks"], first["hosts"]), ([2, 3], ["cn2"]))
        self.assertIn("exited with code 125", first["message"])
        after = [f for f in report["findings"] if "as a consequence" in f["message"]]
        self.assertEqual([f["ranks"] for f in after], [[0, 1]])

    def test_ranks_that_joined_after_their_peers_gave_up_joined_late(self):
        # cn2's workers started init_process_group 25 s late: cn1's had waited their 15 s
        # and exited; cn2's then waited for peers that had gone, and exited 85 s later.
        report = json.loads(run(["--json", os.path.join(LOGS, "torchrun-late-join")]).stdout)
        first = report["findings"][0]
        self.assertEqual((first["id"], first["role"]), ("late-join", "initiating"))
        self.assertEqual((first["ranks"], first["hosts"]), ([2, 3], ["cn2"]))
        self.assertIn("ranks 2-3 on cn2 joined late: ranks 0-1 on cn1 waited for their peers and "
                      "gave up first (Socket Timeout); ranks 2-3 ended 85 s later", first["message"])

    def test_a_consequence_says_in_words_why(self):
        # The two errors of the wrong-port log (torch 1.13's words) as srun -l shows them
        # from two tasks, with srun's records of their exits.
        with open(os.path.join(LOGS, "torchrun-wrong-master-port", "cn2.log")) as f:
            connect = [l for l in f if l.startswith("TimeoutError: ")][0]
        text = ("0: RuntimeError: Socket Timeout\n2: " + connect +
                "srun: error: cn1: task 0: Exited with exit code 1\n"
                "srun: error: cn2: task 2: Exited with exit code 1\n")
        report = json.loads(run(["--json", "-"], stdin=text).stdout)
        self.assertEqual(report["findings"][0]["id"], "master-unreachable")
        self.assertEqual(report["findings"][0]["ranks"], [2])
        after = [f["message"] for f in report["findings"] if "as a consequence" in f["message"]]
        self.assertEqual(after, ["rank 0 exited as a consequence: waited for peers that never "
                                 "came (Socket Timeout)"])


class CpuBound(unittest.TestCase):
    """--max-seconds: past its CPU time diagnose stops reading and diagnoses what it read."""

    def test_an_endless_input_stops_at_max_seconds_with_what_came_before(self):
        # A writer that would send 8 GB (it stops when diagnose closes the pipe): the
        # failure is in its first lines, the rest is noise diagnose need not read.
        writer = ("import sys\n"
                  "out = sys.stdout.buffer\n"
                  "out.write(b'[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to "
                  "allocate 2.00 GiB. GPU 3 has a total capacity of 79.10 GiB\\n')\n"
                  "chunk = b'step 1234 loss 0.123 lr 3e-4 tokens/s 81234 ' * 1000 + b'\\n'\n"
                  "try:\n"
                  "    for _ in range(200000):\n"
                  "        out.write(chunk)\n"
                  "except BrokenPipeError:\n"
                  "    pass\n")
        src = subprocess.Popen(["python3", "-c", writer], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
        try:
            r = subprocess.run([BIN, "diagnose", "--json", "--max-seconds", "0.5", "-"],
                               stdin=src.stdout, capture_output=True, text=True, timeout=120,
                               env=clean_env())
        finally:
            src.stdout.close()
            src.kill()
            src.wait()
        self.assertIn("stopped reading after", r.stderr)
        self.assertIn("--max-seconds 0.5", r.stderr)
        d = json.loads(r.stdout)
        self.assertEqual(d["findings"][0]["id"], "gpu-out-of-memory", d["findings"][:2])

    def test_max_seconds_is_checked(self):
        r = run(["--max-seconds", "-1", "x.log"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--max-seconds", r.stderr)


class HungRendezvous(unittest.TestCase):
    """A torchrun log that ends in its agent's rendezvous (issue 35, item 14)."""

    def test_an_agent_killed_in_its_rendezvous_is_a_finding(self):
        # Only the OMP_NUM_THREADS notice: torchrun's default level says no more.
        r = run(["--json", os.path.join(LOGS, "torchrun-rendezvous-hung.log")])
        self.assertEqual(r.returncode, 4, r.stdout)
        first = json.loads(r.stdout)["findings"][0]
        self.assertEqual((first["id"], first["role"]), ("missing-rank", "initiating"))
        self.assertIn("torchrun's rendezvous never completed: its agent waited for the other "
                      "nodes, and its log ends there with no worker started", first["message"])

    def test_it_names_the_nodes_and_the_endpoint_the_log_shows(self):
        r = run(["--json", os.path.join(LOGS, "torchrun-rendezvous-hung-info.log")])
        self.assertEqual(r.returncode, 4, r.stdout)
        first = json.loads(r.stdout)["findings"][0]
        self.assertEqual(first["id"], "missing-rank")
        self.assertIn("its agent waited for 2 nodes at cn1:29881 (static rendezvous)",
                      first["message"])

    def test_an_agent_whose_workers_printed_is_not_hung(self):
        with open(os.path.join(LOGS, "torchrun-rendezvous-hung-info.log")) as f:
            text = f.read() + ("INFO:torch.distributed.elastic.agent.server.api:[default] "
                               "Starting worker group\n[default0]:rank 0: starting on cn1\n")
        r = run(["--json", "-"], stdin=text)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertEqual(json.loads(r.stdout)["findings"], [])


class VerifyCommands(unittest.TestCase):
    """The "verify with" command runs as pasted, with the job's shape (issue 35, item 13)."""

    def note(self, args, stdin=None):
        # The text report's line under "verify with:": what the command leaves out.
        lines = run(["--color", "never", *args], stdin=stdin).stdout.splitlines()
        at = [i for i, l in enumerate(lines) if l.startswith("  verify with: ")][0]
        following = lines[at + 1].strip()
        return following[1:-1] if following.startswith("(") else ""

    def assert_pastes(self, command):
        # Values only: no <placeholder>, no unbalanced quote, words as the shell splits them.
        self.assertNotRegex(command, "[<>'\"()]", command)
        self.assertEqual(shlex.split(command), command.split(), command)

    def test_every_fixtures_command_pastes(self):
        for case, path, _ in cases():
            with self.subTest(case):
                self.assert_pastes(json.loads(run(["--json", path]).stdout)["verify_with"])

    def test_a_slurm_host_list_is_its_hosts(self):
        # srun names the nodes of several tasks' exits as one host list (launch_slurm.c
        # _task_finish, Slurm 22.05): a 2-node job, not 3 hosts.
        text = ("srun: error: cn1: task 0: Exited with exit code 125\n"
                "srun: error: cn2: task 2: Exited with exit code 125\n"
                "srun: error: cn[1-2]: tasks 1,3: Exited with exit code 125\n")
        report = json.loads(run(["--json", "-"], stdin=text).stdout)
        self.assertEqual(report["hosts_seen"], ["cn1", "cn2"])
        self.assertEqual(report["verify_with"], "srun --nodes 2 --ntasks 4 rankcheck run --timeout 120")

    def test_mpirun_leaves_out_what_the_log_does_not_tell(self):
        # Open MPI's words for rank 0's death on cn1, and NCCL's banner from cn2: two hosts,
        # one rank seen. -np 1 would be wrong; the job's -np and hosts go in the note.
        text = ("[1,0]<stdout>:rank 0 up on cn1\n"
                "cn2:4243:4243 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n"
                "mpirun noticed that process rank 0 with PID 4242 on node cn1 exited on "
                "signal 9 (Killed).\n")
        report = json.loads(run(["--json", "-"], stdin=text).stdout)
        self.assert_pastes(report["verify_with"])
        self.assertEqual(report["verify_with"], "mpirun -x MASTER_ADDR=cn1 -x MASTER_PORT=29500 "
                                                "rankcheck run --timeout 120")
        self.assertEqual(self.note(["-"], stdin=text),
                         "add the job's -np and --host or --hostfile (cn1 and cn2)")

    def test_a_multi_node_torchrun_names_the_stores_host(self):
        # Two agents, --master_addr cn1: not 127.0.0.1, and no --node_rank placeholder.
        # The port is the log's own (newcomer bug 13), else torchrun's default.
        for case, port in (("torchrun-exit-125", 29500), ("torchrun-rendezvous-hung-info", 29881)):
            with self.subTest(case):
                path = os.path.join(LOGS, case)
                report = json.loads(run(["--json", path if os.path.isdir(path) else path + ".log"]).stdout)
                self.assertEqual(report["verify_with"],
                                 "torchrun --redirects 1 --tee 1 --nnodes 2 --nproc_per_node 2 "
                                 f"--master_addr cn1 --master_port {port} --no_python rankcheck "
                                 "run --timeout 120")
                self.assertEqual(self.note([path if os.path.isdir(path) else path + ".log"]),
                                 "run it on every node, with --node_rank 0 on cn1 and 1 on the "
                                 "other")
        path = os.path.join(LOGS, "torchrun-wrong-master-port")
        self.assertIn("--master_addr cn1 ", json.loads(run(["--json", path]).stdout)["verify_with"])
        self.assertEqual(self.note([path]), "add the job's --nnodes and --nproc_per_node; run it on "
                                            "every node, with --node_rank 0 on cn1 and 1 and up, "
                                            "one per node, on the others")


class OwnReports(RankcheckTest):
    """diagnose of rankcheck's own text reports, from real runs: the finding it
    leads with is the one the run's JSON report leads with, whole (a wrapped
    message, its fix, its ranks and its suspect hosts)."""

    timeout = 3.0

    def log_of(self, proc, prefix=""):
        """The process's output as a job log has it (stderr and stdout), each line
        behind `prefix` (srun --label's "0: ")."""
        path = os.path.join(self.tmp.name, f"{proc.name}.log")
        with open(path, "w") as f:
            for line in (proc.err + proc.out).splitlines():
                f.write(prefix + line + "\n")
        return path

    def diagnosed(self, path):
        r = run(["--json", path])
        report = json.loads(r.stdout)
        self.assertEqual(report["exit_code"], r.returncode)
        return r.returncode, report["findings"][0]

    def assertSame(self, diagnosed, report, fix=True):
        """The diagnosed finding is the report's first, its hosts the suspect hosts."""
        finding = job_first(report)
        self.assertEqual(diagnosed["id"], finding["id"])
        self.assertEqual(diagnosed["message"], finding["message"] + " (rankcheck's report)")
        if fix:
            self.assertEqual(diagnosed["hint"], finding["hint"])
        self.assertEqual(",".join(diagnosed["hosts"]), report["suspect_hosts"],
                         diagnosed["message"])

    def test_a_wrapped_finding_is_read_whole_with_its_own_fix(self):
        master = self.rank(0, 2, host="h0", extra=["--color", "never"])
        member = self.rank(1, 3, host="h1", extra=["--color", "never"])
        self.finish()
        self.assertExit([master, member], 3)
        want = master.finding("world-size-mismatch")
        self.assertNotIn(want["message"], master.out, "the text report wraps it")
        for prefix in ("", "0: "):
            with self.subTest(prefix=prefix):
                code, got = self.diagnosed(self.log_of(master, prefix))
                self.assertEqual(code, 3)
                self.assertSame(got, master.report)
                self.assertIn("rank 1 on h1 says 3", got["message"])
                self.assertEqual(got["ranks"], [0, 1])
                self.assertEqual(got["hosts"], [], "job-wide: no suspect host")
        # A member's one line carries the same message (its fix is the master's).
        code, got = self.diagnosed(self.log_of(member))
        self.assertEqual(code, 3)
        self.assertSame(got, master.report, fix=False)

    def test_the_suspect_hosts_of_a_report_are_its_findings_hosts(self):
        # Two processes on h1 both claim local rank 0: h1's setup, h1 the suspect.
        procs = [self.rank(0, 4, host="h0", local=(0, 2)), self.rank(1, 4, host="h0", local=(1, 2)),
                 self.rank(2, 4, host="h1", local=(0, 2)), self.rank(3, 4, host="h1", local=(0, 2))]
        self.finish()
        report = procs[0].report
        self.assertEqual(report["suspect_hosts"], "h1", report)
        self.assertIn("suspect hosts: h1", procs[0].out)
        code, got = self.diagnosed(self.log_of(procs[0]))
        self.assertEqual(code, job_first(report)["exit_code"])
        self.assertSame(got, report)

    def test_its_json_report_and_a_coloured_capture_read_as_its_text(self):
        # The same job's master report three ways: the text in colour (as `script` or
        # `srun --pty` keep it), and its --json file; each gives the text's finding.
        master = self.rank(0, 2, host="h0", extra=["--color", "always"])
        member = self.rank(1, 3, host="h1")
        self.finish()
        self.assertExit([master, member], 3)
        self.assertIn("\x1b[", master.out, "coloured")
        code, got = self.diagnosed(self.log_of(master))
        self.assertEqual(code, 3)
        self.assertSame(got, master.report)
        code, got = self.diagnosed(master.json_path)
        self.assertEqual(code, 3)
        self.assertSame(got, master.report)
        self.assertEqual(got["ranks"], [0, 1])

    def test_rank_0_on_a_host_master_addr_does_not_name_is_read_as_that(self):
        # MASTER_ADDR an address of no interface here (198.18.0.9: the bind fails), in a
        # namespace of its own with loopback alone, where rank 0's search for a master
        # there goes nowhere: its own one-line failure carries its id, and diagnose
        # leads with it and its exit code (7), not master-unreachable (4).
        if WHY_NOT:
            self.skipTest(WHY_NOT)
        ns = f"rcdiag{os.getpid() % 100000}"
        subprocess.run(["ip", "netns", "add", ns], check=True, timeout=10)
        self.addCleanup(subprocess.run, ["ip", "netns", "del", ns], timeout=10)
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True, timeout=10)
        env = clean_env(RANK=0, WORLD_SIZE=2, MASTER_ADDR="198.18.0.9", MASTER_PORT=self.port)
        master = Proc(["run", "--timeout", "3", "--no-gpu"], env, self.tmp.name, "rank0-own",
                      wrap=["ip", "netns", "exec", ns])
        self.procs.append(master)
        self.finish([master])
        self.assertEqual(master.rc, 7)
        self.assertIn("[master-addr-not-local]", master.out)
        code, got = self.diagnosed(self.log_of(master))
        self.assertEqual((code, got["id"]), (7, "master-addr-not-local"))

    def test_a_usage_error_of_rankcheck_is_named(self):
        r = subprocess.run([BIN, "run", "--no-gpu"], env=clean_env(WORLD_SIZE="2"),
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        path = os.path.join(self.tmp.name, "usage.log")
        with open(path, "w") as f:
            f.write(r.stderr)
        code, got = self.diagnosed(path)
        self.assertEqual((code, got["id"]), (3, "identity-invalid"))
        self.assertIn("cannot tell this process's rank", got["message"])


def job_first(report):
    """The report's first finding other than no-job-token."""
    return next(f for f in report["findings"] if f["id"] != "no-job-token")


class Inputs(unittest.TestCase):

    def test_stdin(self):
        with open(os.path.join(LOGS, "mpirun-sigkill.log")) as f:
            r = run(["--json", "-"], stdin=f.read())
        self.assertEqual(r.returncode, 4)
        self.assertEqual(json.loads(r.stdout)["findings"][0]["evidence"][0]["file"], "-")

    def test_gzip(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(LOGS, "torchrun-rank-missing.log")
            gz = os.path.join(tmp, "console.log.gz")
            with open(src, "rb") as f, gzip.open(gz, "wb") as out:
                shutil.copyfileobj(f, out)
            r = run(["--json", gz])
            if "built without zlib" in r.stderr:
                self.assertEqual(r.returncode, 2)
                self.assertIn("zcat", r.stderr)
                return
            self.assertEqual(r.returncode, 4, r.stderr)
            self.assertEqual(json.loads(r.stdout)["findings"][0]["id"], "missing-rank")

    def test_unreadable_input_is_exit_2_with_the_path(self):
        r = run(["/nonexistent/job.log"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("/nonexistent/job.log: No such file or directory", r.stderr)
        self.assertEqual(r.stdout, "")

    def test_a_socket_is_exit_2_with_the_path(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "s.sock")
            with socket.socket(socket.AF_UNIX) as s:
                s.bind(path)
                r = run([path])
            self.assertEqual(r.returncode, 2)
            self.assertIn(f"{path}: not a file or a directory", r.stderr)

    def test_a_broken_gzip_file_is_exit_2_with_the_path(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "job.log.gz")
            with open(path, "wb") as f:
                f.write(gzip.compress(b"srun: error: n1: task 1: Exited with exit code 1\n" * 50)[:40])
            r = run([path])
            self.assertEqual(r.returncode, 2, r.stdout)
            self.assertIn(path + ": ", r.stderr)

    def test_a_hostile_file_name_is_escaped_in_the_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            name = os.path.join(tmp, "\x1b]0;owned\x07.log")
            r = run([name])
            self.assertEqual(r.returncode, 2)
            self.assertNotIn("\x1b", r.stderr)
            self.assertIn("\\x1b]0;owned\\x07.log: No such file or directory", r.stderr)

    def test_no_path_is_a_usage_error(self):
        self.assertEqual(run([]).returncode, 2)

    def test_nothing_recognised_is_exit_0(self):
        r = run(["--color", "never", "-"], stdin="epoch 1 loss 2.31\nepoch 2 loss 1.97\n")
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("NOTHING FOUND", r.stdout)
        self.assertEqual(json.loads(run(["--json", "-"], stdin="ok\n").stdout)["findings"], [])

    def test_a_healthy_jobs_log_is_nothing_found(self):
        # The words of a failure ("failed", "cannot", "error") on the INFO lines that a
        # healthy job prints (NCCL on a host without InfiniBand or a net plugin, torchrun
        # narrating) and rankcheck's own passing report: nothing to report.
        local = subprocess.run([BIN, "local", "-n", "2", "--no-gpu", "--timeout", "20"],
                               capture_output=True, text=True, timeout=60, env=clean_env())
        self.assertEqual(local.returncode, 0, local.stderr)
        healthy = "\n".join([
            "node1:2401:2401 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
            "node1:2401:2401 [0] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open "
            "shared object file: No such file or directory No plugin found (libnccl-net.so), "
            "using internal implementation",
            "node1:2401:2401 [0] NCCL INFO Failed to open libibverbs.so[.1]",
            "node1:2401:2401 [0] NCCL INFO NET/IB : No device found.",
            "node1:2401:2401 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>",
            "node1:2401:2401 [0] NCCL INFO Using network Socket",
            "node1:2401:2418 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1000 - "
            "Init COMPLETE",
            "INFO:torch.distributed.elastic.agent.server.api:[default] Starting worker group",
            "INFO:torch.distributed.elastic.agent.server.api:Local worker group finished "
            "(WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to finish",
            "I1218 20:27:21.426 ProcessGroupNCCL.cpp:629] [Rank 0] ProcessGroupNCCL "
            "initialization options: NCCL_ASYNC_ERROR_HANDLING: 1, TIMEOUT(ms): 1800000",
            "2024-05-01 12:00:00,123 INFO worker.py:1673 -- Started a local Ray instance.",
            "epoch 1 loss 2.31",
        ])
        r = run(["--json", "-"], stdin=healthy + "\n" + local.stdout + local.stderr)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertEqual(json.loads(r.stdout)["findings"], [])

    def test_binary_files_in_a_directory_are_left_out(self):
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(os.path.join(LOGS, "mpirun-sigkill.log"), tmp)
            with open(os.path.join(tmp, "core"), "wb") as f:
                f.write(b"\x7fELF\x00\x00" + b"Duplicate GPU detected : rank 0 and rank 1" * 10)
            r = run(["--json", tmp])
            report = json.loads(r.stdout)
            self.assertEqual(report["inputs"]["binary_files_skipped"], 1)
            self.assertEqual(report["findings"][0]["id"], "process-died")



def catalogue_regexes():
    """(id, literal, regex) of each hand-written catalogue row that has a regex, read
    from src/diagnose/catalogue.cc."""
    import re
    with open(os.path.join(os.path.dirname(__file__), "../../src/diagnose/catalogue.cc")) as f:
        src = f.read()

    def c_string(body):
        out, i = bytearray(), 0
        while i < len(body):
            if body[i] == "\\" and body[i + 1] == "x":
                digits = re.match(r"[0-9a-fA-F]{1,2}", body[i + 2:]).group(0)
                out.append(int(digits, 16))
                i += 2 + len(digits)
            elif body[i] == "\\":
                out += {"n": b"\n", "t": b"\t"}.get(body[i + 1], body[i + 1].encode())
                i += 2
            else:
                out += body[i].encode()
                i += 1
        return out.decode("utf-8", "replace")

    rows = []
    for m in re.finditer(r'\{"([a-z0-9_]+)",(?:[^{}]*?),\s*((?:"(?:[^"\\]|\\.)*"\s*)+),\s*'
                         r'R"\((.*?)\)",', src, re.S):
        literal = "".join(c_string(x) for x in re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2)))
        rows.append((m.group(1), literal, m.group(3)))
    return rows


class NoBacktracking(unittest.TestCase):
    """std::regex backtracks: a pattern whose pieces can match the same run of text
    takes quadratic time on a line made of that run (247 KB of blanks took 9-14 s).
    Each row's literal followed by 2 KiB of blanks, tabs, letters, digits, each of
    its punctuation characters and its own literal again, one process segment a
    line, against the same literals followed by 2 KiB of ordinary words (so that both
    runs reach every row's pattern, and only the runs of one character differ): the
    better of two runs each, at most 5 times slower."""

    def run_on(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
            f.write(text)
        self.addCleanup(os.unlink, f.name)
        best = None
        for _ in range(2):  # the better of two: a busy machine slows one run, not both
            t0 = time.monotonic()
            r = subprocess.run([BIN, "diagnose", f.name], capture_output=True, timeout=600)
            elapsed = time.monotonic() - t0
            self.assertIn(r.returncode, (0, 3, 4, 5, 6, 7, 8), r.stderr)
            best = elapsed if best is None else min(best, elapsed)
        return best

    def test_no_row_is_slow_on_its_worst_line(self):
        if EMULATED:
            self.skipTest(f"under {EMULATED} the ratio of two times is the emulator's")
        rows = catalogue_regexes()
        self.assertGreater(len(rows), 50, "the catalogue's rows were not found")
        heads, lines = [], []
        for _, literal, regex in rows:
            punct = sorted({c for c in regex if not c.isalnum() and c not in "\\()[]{}?*+^$|."})
            for fill in [" ", "\t", "a", "0", literal, *punct]:
                for sep in (" ", "x"):
                    heads.append(literal + sep)
                    lines.append(literal + sep + fill * (2048 // len(fill)))
        hostile = "".join(f"[1,{k}]<stdout>:{line}\n" for k, line in enumerate(lines))
        words = ("step 1234 loss 2.345 lr 0.0003 tokens/s 123456 grad_norm 0.98 " * 40)[:2048]
        benign = "".join(f"[1,{k}]<stdout>:{head}{words}\n" for k, head in enumerate(heads))
        slow, fast = self.run_on(hostile), self.run_on(benign)
        self.assertLessEqual(slow / fast, 5.0, f"hostile {slow:.2f} s, benign {fast:.2f} s")


if __name__ == "__main__":
    unittest.main()
