"""The command line: local, env, usage errors."""

import json
import os
import subprocess
import unittest

from harness import BIN, clean_env

FIXTURES = os.path.join(os.path.dirname(__file__), "../fixtures/env")


def run(args, env=None, timeout=30):
    return subprocess.run([BIN, *args], env=env if env is not None else clean_env(),
                          capture_output=True, text=True, timeout=timeout)


def fixture_env(name):
    env = clean_env()
    with open(os.path.join(FIXTURES, name)) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                k, v = line.split("=", 1)
                env[k] = v
    return env


class Local(unittest.TestCase):

    def test_local_job_of_four_passes(self):
        # No CUDA driver (made sure of, so that a GPU machine runs this test the same way).
        r = run(["local", "-n", "4", "--json", "-"],
                env=clean_env(RANKCHECK_CUDA_LIB="/nonexistent/libcuda.so.1"))
        self.assertEqual(r.returncode, 0, r.stderr)
        report = json.loads(r.stdout)
        self.assertEqual(report["verdict"], "pass")
        self.assertEqual(sorted(m["rank"] for m in report["members"]), [0, 1, 2, 3])
        # No GPU on this machine: said, as a warning, and the job still passes.
        self.assertEqual(report["gpu_stage"], "not run (no member has a usable GPU)")
        self.assertEqual([f["id"] for f in report["findings"]], ["gpu-unavailable"])

    def test_local_text_report(self):
        r = run(["local", "-n", "2", "--no-gpu", "--color", "never"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("PASS — 2 ranks of 2 joined", r.stdout)
        self.assertIn("GPU stage not run (--no-gpu)", r.stdout)

    def test_local_inside_a_launcher_ignores_its_variables(self):
        env = fixture_env("slurm_srun.env")
        r = run(["local", "-n", "3", "--json", "-"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)


class Env(unittest.TestCase):

    def test_env_shows_identity_and_sources(self):
        r = run(["env", "--resolve-timeout", "0.2"], env=fixture_env("torchrun_worker.env"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"rank\s+5 of 16\s+RANK \(torch env\)")
        self.assertIn("GROUP_RANK=1", r.stdout)
        self.assertIn("NCCL_SOCKET_IFNAME=eth0", r.stdout)

    def test_env_json_conflict_is_a_local_finding(self):
        r = run(["env", "--json", "--resolve-timeout", "0.2"],
                env=fixture_env("slurm_rank_conflict.env"))
        self.assertEqual(r.returncode, 3)
        j = json.loads(r.stdout)
        self.assertEqual(j["role"], "env")
        self.assertEqual(j["self"]["rank"], 5)
        self.assertEqual([f["id"] for f in j["findings"]], ["launcher-env-conflict"])
        self.assertEqual(j["conflicts"][0]["values"], [{"RANK": "5"}, {"SLURM_PROCID": "3"}])

    def test_env_incomplete_identity_is_a_usage_error(self):
        r = run(["env"], env=fixture_env("plain_no_master.env"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot tell where the master is", r.stdout)


class Usage(unittest.TestCase):

    def test_run_without_identity(self):
        r = run(["run", "--timeout", "1"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("rankcheck: cannot run: cannot tell this process's rank: none of --rank "
                      "(command-line flag), RANK (torch env)", r.stderr)

    def test_unparsable_rank_names_the_variable(self):
        r = run(["run", "--timeout", "1"], env=fixture_env("bad_rank.env"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("RANK='three' is not a whole number (set by torch env)", r.stderr)

    def test_bad_flags(self):
        self.assertEqual(run(["run", "--timeout", "-3"]).returncode, 2)
        self.assertEqual(run(["run", "--no-such-flag"]).returncode, 2)
        self.assertEqual(run([]).returncode, 2)
        r = run(["run", "--rank", "0", "--world-size", "1", "--json", "/nonexistent/dir/r.json"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--json /nonexistent/dir/r.json: cannot write in /nonexistent/dir", r.stderr)

    def test_help_and_version(self):
        self.assertEqual(run(["--help"]).returncode, 0)
        r = run(["--version"])
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.stdout.strip(), "0.1.0")


if __name__ == "__main__":
    unittest.main()
