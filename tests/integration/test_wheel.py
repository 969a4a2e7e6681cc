"""The wheel (scripts/wheel.py): made from the binary under test, installed with pip
into a fresh venv without the network, and used as a user would: `rankcheck` on the
venv's PATH, `python -m rankcheck`, and `rankcheck.preflight()` at the top of a
training script under the real torchrun (Debian's python3-torch).
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from harness import BIN, clean_env, free_port

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
TORCHRUN = shutil.which("torchrun", path="/usr/bin:/usr/local/bin")
TIMEOUT = 20

TRAIN = """
import json, os, sys
import rankcheck
import torch
import torch.distributed as dist

report = rankcheck.preflight("--no-gpu", timeout=%d)
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
out = {"rank": dist.get_rank(), "sum": t.item(), "verdict": report["verdict"],
       "role": report["role"], "ranks_joined": report.get("ranks_joined")}
with open(os.path.join(sys.argv[1], "train%%d.json" %% dist.get_rank()), "w") as f:
    json.dump(out, f)
dist.destroy_process_group()
""" % TIMEOUT


def run(cmd, **kw):
    kw.setdefault("timeout", 120)
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


class Wheel(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="rankcheck-wheel-")
        # The wheel carries the binary under test, without its debug information (as
        # the release's is).
        binary = os.path.join(cls.tmp, "rankcheck")
        r = run(["objcopy", "--strip-debug", BIN, binary])
        assert r.returncode == 0, r.stderr
        r = run([sys.executable, os.path.join(ROOT, "scripts/wheel.py"), binary,
                 "--out", os.path.join(cls.tmp, "dist")])
        assert r.returncode == 0, r.stdout + r.stderr
        cls.wheel = r.stdout.strip()
        # A fresh venv; the system's packages are seen for torch (the training script's),
        # never for rankcheck, which only the wheel brings.
        cls.venv = os.path.join(cls.tmp, "venv")
        r = run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", cls.venv])
        assert r.returncode == 0, r.stdout + r.stderr
        cls.python = os.path.join(cls.venv, "bin", "python")
        cls.pip_out = run([cls.python, "-m", "pip", "install", "--no-index",
                           "--disable-pip-version-check", cls.wheel], env=clean_env())

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def env(self, **extra):
        # The venv's folder first on PATH, as `activate` would; no RANKCHECK_BIN.
        env = clean_env(PATH=os.path.join(self.venv, "bin") + ":/usr/bin:/bin")
        env.pop("RANKCHECK_BIN", None)
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def test_pip_installs_it_offline(self):
        self.assertEqual(self.pip_out.returncode, 0, self.pip_out.stdout + self.pip_out.stderr)
        self.assertIn("Successfully installed rankcheck-", self.pip_out.stdout)

    def test_the_tag_is_measured_from_the_binary(self):
        name = os.path.basename(self.wheel)
        m = re.fullmatch(r"rankcheck-(\d+\.\d+\.\d+)-py3-none-manylinux_2_(\d+)_x86_64\.whl",
                         name)
        self.assertTrue(m, name)
        version = run([BIN, "--version"]).stdout
        self.assertTrue(version.startswith(f"rankcheck {m.group(1)} "), version)
        # The newest glibc symbol version the binary needs is the tag's.
        symbols = run(["objdump", "-T", BIN]).stdout
        newest = max(int(v) for v in re.findall(r"\bGLIBC_2\.(\d+)", symbols))
        self.assertEqual(int(m.group(2)), max(17, newest))
        # A release binary (glibc 2.27 or newer, it says) makes a wheel for those glibcs.
        floor = re.search(r"\(glibc 2\.(\d+) or newer\)", version)
        if floor:
            self.assertLessEqual(int(m.group(2)), int(floor.group(1)))

    def test_a_binary_that_needs_more_than_glibc_is_refused(self):
        mpi = os.environ.get("RANKCHECK_MPI_BIN")
        if not mpi or not os.path.exists(mpi):
            self.skipTest("no rankcheck-mpi (it links libmpi)")
        r = run([sys.executable, os.path.join(ROOT, "scripts/wheel.py"), mpi,
                 "--out", os.path.join(self.tmp, "refused")])
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("libmpi.so", r.stderr)
        self.assertIn("besides glibc", r.stderr)
        self.assertFalse(glob.glob(os.path.join(self.tmp, "refused", "*.whl")))

    def test_the_command_is_on_the_venvs_path(self):
        self.assertEqual(self.pip_out.returncode, 0)
        exe = shutil.which("rankcheck", path=self.env()["PATH"])
        self.assertEqual(exe, os.path.join(self.venv, "bin", "rankcheck"))
        out = os.path.join(self.tmp, "local.json")
        r = run(["rankcheck", "local", "-n", "4", "--no-gpu", "--timeout", str(TIMEOUT),
                 "--json", out], env=self.env(), timeout=TIMEOUT + 30, cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("PASS", r.stdout)
        with open(out) as f:
            report = json.load(f)
        self.assertEqual((report["verdict"], report["ranks_joined"]), ("pass", 4))

    def test_python_m_rankcheck(self):
        r = run([self.python, "-m", "rankcheck", "--version"], env=self.env(), cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, run([BIN, "--version"]).stdout)
        r = run([self.python, "-c", "import rankcheck; print(rankcheck.__version__)"],
                env=self.env(), cwd=self.tmp)
        self.assertEqual(r.stdout.split(), run([BIN, "--version"]).stdout.split()[1:2])

    def preflight(self, call, catch, show, **env):
        """Python in the venv that runs `call` and, when it raises `catch`, prints `show`
        (an expression of the exception e) and then e itself."""
        code = (f"import rankcheck\ntry:\n    {call}\nexcept {catch} as e:\n"
                f"    print({show})\n    print(e)\n")
        return run([self.python, "-c", code], env=self.env(**env), cwd=self.tmp,
                   timeout=TIMEOUT + 30)

    def test_preflight_raises_with_the_leading_finding(self):
        r = self.preflight("rankcheck.preflight('--no-gpu', timeout=2)", "rankcheck.CheckFailed",
                           "'caught', e.exit_code, e.finding['id'], e.report['verdict']",
                           RANK=5, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=free_port())
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertIn("caught 3 rank-out-of-range fail", lines)
        self.assertIn("rankcheck exited 3: rank-out-of-range: rank 5 (", r.stdout)
        # rankcheck's own words reached the process's output as they would from a shell.
        self.assertIn("rank-out-of-range", r.stderr)

    def test_preflight_without_a_report_says_where_the_error_is(self):
        r = self.preflight("rankcheck.preflight('--no-such-flag')", "rankcheck.CheckFailed",
                           "'caught', e.exit_code, e.finding, e.report",
                           RANK=0, WORLD_SIZE=1, MASTER_ADDR="127.0.0.1", MASTER_PORT=free_port())
        self.assertIn("caught 2 None None", r.stdout.splitlines(), r.stdout + r.stderr)
        self.assertIn("no report was written; rankcheck's error is on stderr above", r.stdout)
        self.assertIn("--no-such-flag", r.stderr)

    def test_preflight_names_a_missing_binary(self):
        r = self.preflight("rankcheck.preflight()", "FileNotFoundError", "'missing:', e",
                           RANKCHECK_BIN=os.path.join(self.tmp, "nothing-here"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("nothing-here is not an executable file", r.stdout)

    @unittest.skipUnless(TORCHRUN, "torchrun not installed (Debian's python3-torch)")
    def test_preflight_under_torchrun_then_the_real_init(self):
        # `torchrun train.py` with the check at the script's top: no launcher change.
        out = tempfile.mkdtemp(dir=self.tmp)
        script = os.path.join(out, "train.py")
        with open(script, "w") as f:
            f.write(TRAIN)
        port = free_port()
        cmd = [self.python, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
               "--nnodes", "1", "--nproc_per_node", "3", "--master_addr", "127.0.0.1",
               "--master_port", str(port), "--max_restarts", "0", script, out]
        r = run(cmd, env=self.env(), cwd=out, timeout=TIMEOUT + 60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        results = []
        for rank in range(3):
            with open(os.path.join(out, f"train{rank}.json")) as f:
                results.append(json.load(f))
        self.assertEqual([x["rank"] for x in results], [0, 1, 2])
        self.assertEqual({(x["verdict"], x["sum"]) for x in results}, {("pass", 3.0)})
        self.assertEqual([x["role"] for x in results], ["master", "member", "member"])
        self.assertEqual(results[0]["ranks_joined"], 3)


if __name__ == "__main__":
    unittest.main()
