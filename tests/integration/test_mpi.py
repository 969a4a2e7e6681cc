"""rankcheck under the real mpirun (Open MPI): identity from OMPI_COMM_WORLD_*, over TCP
and with `--bootstrap mpi` (rankcheck-mpi), healthy and with a user-set RANK that
disagrees with MPI."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

from harness import BIN, clean_env, free_port, readme_command, save_reports

MPIRUN = shutil.which("mpirun")
BIN_MPI = os.environ.get("RANKCHECK_MPI_BIN", BIN + "-mpi")
TIMEOUT = 20


def mpirun(n, *cmd, extra=()):
    return [MPIRUN, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
            "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
            "--mca", "oob_tcp_if_include", "lo", "-np", str(n), *extra, *cmd]


@unittest.skipUnless(MPIRUN, "mpirun not installed (Debian's openmpi-bin)")
class Mpi(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="rankcheck-mpi-")

    def tearDown(self):
        save_reports(self, self.tmp)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_mpi(self, cmd, **env):
        return subprocess.run(cmd, env=clean_env(**env), capture_output=True, text=True,
                              timeout=TIMEOUT + 30)

    def report(self, rank):
        with open(os.path.join(self.tmp, f"r{rank}.json")) as f:
            return json.load(f)

    @staticmethod
    def stdout_of(outdir, rank):
        # mpirun forwards its processes' output in chunks, not lines: a member's "rankcheck:
        # FAIL" can land inside the master's report. Each process's own stdout is in the
        # file --output-filename DIR writes for it (Open MPI 4: DIR/1/rank.N/stdout).
        with open(os.path.join(outdir, "1", f"rank.{rank}", "stdout")) as f:
            return f.read()

    def test_tcp_rendezvous_with_identity_from_open_mpi(self):
        port = free_port()
        r = self.run_mpi(mpirun(4, BIN, "run", "--no-gpu", "--timeout", str(TIMEOUT), "--json",
                                os.path.join(self.tmp, "r{rank}.json"),
                                extra=("-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={port}")))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        master = self.report(0)
        self.assertEqual(master["verdict"], "pass")
        self.assertEqual({m["launcher"] for m in master["members"]}, {"openmpi"})
        self.assertEqual(sorted(m["rank"] for m in master["members"]), [0, 1, 2, 3])
        self.assertEqual(self.report(3)["role"], "member")

    def test_the_readmes_mpirun_recipe_runs_as_written(self):
        # The README's recipe, on this one host: its hosts become loopback, its port a
        # free one, its -np 4; every other word of it is kept.
        port = free_port()
        words = readme_command("mpirun")[1:]
        cmd = []
        while words:
            w = words.pop(0)
            if w in ("-np", "-n"):
                words.pop(0)
            elif w in ("--host", "-H"):
                words.pop(0)
            elif w == "rankcheck":
                cmd.append(BIN)
            elif w.startswith("MASTER_ADDR="):
                cmd.append("MASTER_ADDR=127.0.0.1")
            elif w.startswith("MASTER_PORT="):
                cmd.append(f"MASTER_PORT={port}")
            else:
                cmd.append(w)
        i = cmd.index(BIN)
        run = cmd[i:] + ["--no-gpu", "--json", os.path.join(self.tmp, "r{rank}.json")]
        r = self.run_mpi(mpirun(4, *run, extra=tuple(cmd[:i])))
        self.assertEqual(r.returncode, 0, " ".join(cmd) + "\n" + r.stdout + r.stderr)
        self.assertEqual(self.report(0)["verdict"], "pass")
        self.assertEqual(self.report(0)["ranks_joined"], 4)

    def test_the_verify_command_of_a_diagnosis_runs_as_given(self):
        # diagnose of a 3-rank mpirun log suggests a check; run as written (rankcheck's
        # path, a free port, the test's own mpirun options aside), it passes with 3 ranks.
        log = os.path.join(os.path.dirname(__file__), "../fixtures/logs/mpirun-sigkill.log")
        d = subprocess.run([BIN, "diagnose", "--json", log], capture_output=True, text=True,
                           timeout=60)
        words = json.loads(d.stdout)["verify_with"].split()
        self.assertEqual(words[:3], ["mpirun", "-np", "3"])
        port = free_port()
        words = [BIN if w == "rankcheck" else
                 f"MASTER_PORT={port}" if w.startswith("MASTER_PORT=") else w for w in words[3:]]
        i = words.index(BIN)
        run = words[i:] + ["--no-gpu", "--json", os.path.join(self.tmp, "r{rank}.json")]
        r = self.run_mpi(mpirun(3, *run, extra=tuple(words[:i])))
        self.assertEqual(r.returncode, 0, " ".join(words) + "\n" + r.stdout + r.stderr)
        self.assertEqual(self.report(0)["ranks_joined"], 3)

    @unittest.skipUnless(os.path.exists(BIN_MPI), "rankcheck-mpi not built (no MPI headers)")
    def test_mpi_bootstrap_on_two_hosts_says_the_rehearsal_did_not_run(self):
        # Two host names: NCCL would connect between them, and over MPI rankcheck does
        # not rehearse those connections. The report says so; paths[] alone said nothing.
        script = (f'exec "$0" run --bootstrap mpi --no-gpu --timeout {TIMEOUT} '
                  f'--host-name "h$OMPI_COMM_WORLD_RANK" --json "{self.tmp}/r$OMPI_COMM_WORLD_RANK.json"')
        outdir = os.path.join(self.tmp, "out")
        self.run_mpi(mpirun(2, "/bin/sh", "-c", script, BIN_MPI,
                            extra=("--output-filename", outdir)))
        master = self.report(0)
        self.assertEqual(master["paths"], [])
        self.assertFalse(master["rehearsal"]["ran"], master["rehearsal"])
        self.assertIn("--bootstrap mpi does not rehearse them", master["rehearsal"]["not_run"])
        self.assertIn("NCCL's connections not rehearsed: --bootstrap mpi does not rehearse them",
                      self.stdout_of(outdir, 0))

    @unittest.skipUnless(os.path.exists(BIN_MPI), "rankcheck-mpi not built (no MPI headers)")
    def test_mpi_bootstrap_healthy(self):
        r = self.run_mpi(mpirun(4, BIN_MPI, "run", "--bootstrap", "mpi", "--no-gpu", "--timeout",
                                str(TIMEOUT), "--json", os.path.join(self.tmp, "r{rank}.json")))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        master = self.report(0)
        self.assertEqual(master["verdict"], "pass")
        self.assertEqual(master["master"]["bound"], ["MPI_COMM_WORLD of 4"])
        self.assertEqual(sorted(m["rank"] for m in master["members"]), [0, 1, 2, 3])
        for rank in (1, 2, 3):
            self.assertEqual(self.report(rank)["verdict"], "pass")

    @unittest.skipUnless(os.path.exists(BIN_MPI), "rankcheck-mpi not built (no MPI headers)")
    def test_mpi_bootstrap_world_size_beyond_the_mpi_world(self):
        r = self.run_mpi(mpirun(4, BIN_MPI, "run", "--bootstrap", "mpi", "--no-gpu", "--timeout",
                                str(TIMEOUT), "--color", "never", "--json",
                                os.path.join(self.tmp, "r{rank}.json"),
                                extra=("-x", "WORLD_SIZE=8")))
        self.assertNotEqual(r.returncode, 0)
        missing = [f for f in self.report(0)["findings"] if f["id"] == "missing-rank"][0]
        self.assertEqual(missing["message"],
                         "ranks 4-7 did not join: the MPI world has 4 processes, the job's world "
                         "size is 8")
        self.assertIn("mpirun -np 8", missing["hint"])
        self.assertNotIn("MPI_COMM_WORLD:0", r.stdout)
        # No per-rank notes about a MASTER_PORT nothing listens on.
        self.assertNotIn("MASTER_PORT not set", r.stderr)

    @unittest.skipUnless(os.path.exists(BIN_MPI), "rankcheck-mpi not built (no MPI headers)")
    def test_mpi_bootstrap_user_rank_disagrees_with_mpi(self):
        # RANK=2 exported to every process: MPI says 0..3, the training job would read 2.
        outdir = os.path.join(self.tmp, "out")
        r = self.run_mpi(mpirun(4, BIN_MPI, "run", "--bootstrap", "mpi", "--no-gpu", "--timeout",
                                str(TIMEOUT), "--color", "never",
                                extra=("-x", "RANK=2", "--output-filename", outdir)))
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        stdouts = [self.stdout_of(outdir, n) for n in range(4)]
        out = stdouts[0]  # MPI rank 0 is the master: the report is its
        # Three processes got RANK=2 against their MPI rank (the fourth is MPI rank 2 itself).
        self.assertIn("FAIL — 3 errors. First: 3 members have conflicting rank", out)
        self.assertIn("✗ launcher-env-conflict", out)
        self.assertIn("RANK=2 but OMPI_COMM_WORLD_RANK=", out)
        self.assertIn("✗ duplicate-rank", out)
        self.assertIn("rank 2 is claimed by 4 members", out)
        self.assertIn("✗ missing-rank", out)
        # The count was right: the fix is the exported RANK, not "start 4" (which it did).
        words = " ".join(out.split())  # the report's lines are wrapped
        self.assertRegex(words, r"ranks 0-1,3 (did not|never) join(ed)?, though the MPI world has 4 "
                         r"processes for a world size of 4: some of them claimed another rank "
                         r"fix: drop the RANK")
        self.assertNotIn("mpirun -np", words)
        # Every member exits with the job's verdict, and says so.
        for n in (1, 2, 3):
            self.assertEqual(stdouts[n].count("rankcheck: FAIL"), 1, stdouts[n])
        self.assertNotIn("rankcheck: FAIL", out)

    def test_plain_binary_says_where_mpi_is(self):
        r = self.run_mpi([BIN, "run", "--bootstrap", "mpi", "--rank", "0", "--world-size", "1"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("this binary was built without MPI; use rankcheck-mpi", r.stderr)


if __name__ == "__main__":
    unittest.main()
