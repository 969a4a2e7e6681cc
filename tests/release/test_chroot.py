"""The release binary where users run it: on an older glibc than it was built on.

Each test starts dist/rankcheck inside the Debian 11 root that scripts/release.sh
built it against (glibc 2.31, below Debian 12's 2.36), with chroot, on loopback.
scripts/release-check.sh runs this file: it mounts /proc and /dev into the root and
copies the binary, the .deb and a fake CUDA/NCCL library (tests/fake/fake_gpu.cc,
built with the release toolchain) into RANKCHECK_RELEASE_WORK, a folder inside
the root named RANKCHECK_RELEASE_ROOT.
"""

import glob
import json
import os
import re
import shutil
import socket
import subprocess
import unittest

ROOT = os.environ.get("RANKCHECK_RELEASE_ROOT", "")
WORK = os.environ.get("RANKCHECK_RELEASE_WORK", "")
TIMEOUT = 10  # --timeout of every run; a process must end within it plus 2 s
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"


def inside(name):
    """A file of the work folder as the processes in the root see it."""
    return os.path.join("/", os.path.relpath(WORK, ROOT), name)


REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))


def doc_floors():
    """Every glibc floor the docs state for the release binary: (where, figure)."""
    places = [("README.md", r"\(Grace: GH200,\s+GB200\) Linux with glibc (\d+\.\d+) or newer"),
              ("README.md", r"manylinux_(2)_(\d+)_x86_64\.whl"),
              ("CONTRIBUTING.md", r"manylinux_(2)_(\d+)_(?:x86_64|aarch64)\.whl"),
              ("CONTRIBUTING.md", r"\*\*Which glibc\.\*\* glibc (\d+\.\d+) or newer"),
              ("CONTRIBUTING.md", r"`rankcheck \S+ \(glibc (\d+\.\d+) or newer\)`"),
              ("CONTRIBUTING.md", r"tail -1 +# GLIBC_(\d+\.\d+)"),
              ("launchers/kubernetes/README.md", r"its floor is (\d+\.\d+) today")]
    found = []
    for rel, pattern in places:
        with open(os.path.join(REPO, rel), encoding="utf-8") as f:
            # A pattern of two groups (a wheel's tag, 2_27) gives its figure as 2.27.
            figures = [".".join(x) if isinstance(x, tuple) else x
                       for x in re.findall(pattern, f.read())]
        found += [(f"{rel}: {pattern}", x) for x in figures] or [(f"{rel}: {pattern}", None)]
    return found


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpus(n):
    return ",".join(f"GPU-00{d:02d}00{d:02d}-0000-0000-0000-0000000000{d:02d}" for d in range(n))


class Chrooted:
    """One process started inside the root, with only the environment given."""

    def __init__(self, args, **env):
        full_env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
        full_env.update({k: str(v) for k, v in env.items()})
        self.popen = subprocess.Popen([CHROOT, ROOT] + args, env=full_env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.rc = self.out = self.err = None

    def wait(self, limit=TIMEOUT + 2):
        try:
            self.out, self.err = self.popen.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.out, self.err = self.popen.communicate()
            raise AssertionError(f"still running after {limit} s: {self.err}")
        self.rc = self.popen.returncode
        return self


def run(args, **env):
    return Chrooted(args, **env).wait()


def report(name):
    with open(os.path.join(WORK, name)) as f:
        return json.load(f)


@unittest.skipUnless(ROOT and WORK, "run by scripts/release-check.sh")
class ReleaseBinaryOnGlibc231(unittest.TestCase):
    maxDiff = None

    def assertExit(self, procs, code):
        for p in procs:
            self.assertEqual(p.rc, code, f"exit {p.rc}\nstdout:\n{p.out}\nstderr:\n{p.err}")

    def test_the_root_has_the_older_glibc(self):
        r = run(["getconf", "GNU_LIBC_VERSION"])
        self.assertEqual(r.out.strip(), "glibc 2.31")

    def test_version_states_its_glibc_floor(self):
        r = run([inside("rankcheck"), "--version"])
        self.assertExit([r], 0)
        m = re.fullmatch(r"rankcheck \S+ \(glibc (\d+)\.(\d+) or newer\)", r.out.strip())
        self.assertIsNotNone(m, r.out)
        self.assertLessEqual((int(m[1]), int(m[2])), (2, 28))

    def test_the_docs_state_the_floor_the_binary_states(self):
        r = run([inside("rankcheck"), "--version"])
        floor = re.search(r"\(glibc (\d+\.\d+) or newer\)", r.out)
        self.assertIsNotNone(floor, r.out)
        for where, figure in doc_floors():
            self.assertEqual(figure, floor[1], where)

    def test_local_job_of_four(self):
        r = run([inside("rankcheck"), "local", "-n", "4", "--no-gpu", "--timeout", str(TIMEOUT),
                 "--json", inside("local.json")])
        self.assertExit([r], 0)
        self.assertIn("PASS", r.out)
        rep = report("local.json")
        self.assertEqual((rep["verdict"], rep["ranks_joined"], rep["world_size"]), ("pass", 4, 4))
        self.assertTrue(rep["authenticated"])

    def rank(self, rank, world, port, name, *extra, **env):
        return Chrooted([inside("rankcheck"), "run", "--timeout", str(TIMEOUT),
                         "--json", inside(f"{name}-{rank}.json"), *extra],
                        RANK=rank, WORLD_SIZE=world, LOCAL_RANK=rank, LOCAL_WORLD_SIZE=world,
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **env)

    def test_rank_mode_job_of_two_processes_with_a_token(self):
        token = os.path.join(WORK, "token")
        with open(os.open(token, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write("release-check-token-0123456789abcdef\n")
        port = free_port()
        procs = [self.rank(r, 2, port, "token", "--no-gpu", "--token-file", inside("token"))
                 for r in range(2)]
        for p in procs:
            p.wait()
        self.assertExit(procs, 0)
        rep = report("token-0.json")
        self.assertEqual((rep["verdict"], rep["ranks_joined"]), ("pass", 2))
        self.assertTrue(rep["authenticated"])
        self.assertEqual(sorted(m["rank"] for m in rep["members"]), [0, 1])
        self.assertIn("PASS", procs[1].out)

    def test_gpu_stage_against_the_fake_library(self):
        # Two ranks on one fake host with two GPUs: NCCL init and the all-reduce of
        # rank + 1 run through the fake, whose all-reduce goes through files in TMPDIR.
        fake = inside("libfakegpu.so")
        port = free_port()
        procs = [self.rank(r, 2, port, "gpu", RANKCHECK_CUDA_LIB=fake, RANKCHECK_NCCL_LIB=fake,
                           FAKE_GPUS=gpus(2), TMPDIR=inside(""))
                 for r in range(2)]
        for p in procs:
            p.wait()
        self.assertExit(procs, 0)
        rep = report("gpu-0.json")
        self.assertTrue(rep["gpu_stage"].startswith("passed: NCCL init"), rep["gpu_stage"])
        self.assertEqual([(r["rank"], r["init_ok"], r["allreduce_ok"], r["expected"], r["got"])
                          for r in rep["stage_results"]],
                         [(0, True, True, 3, 3), (1, True, True, 3, 3)])
        self.assertEqual(rep["members"][0]["gpu"]["nccl_version_text"], "2.28.9")

    def test_deb_installs_and_runs(self):
        debs = glob.glob(os.path.join(WORK, "rankcheck_*_amd64.deb"))
        self.assertEqual(len(debs), 1, debs)
        self.addCleanup(run, ["dpkg", "--purge", "rankcheck"])
        r = run(["dpkg", "-i", inside(os.path.basename(debs[0]))], DEBIAN_FRONTEND="noninteractive")
        self.assertExit([r], 0)
        r = run(["rankcheck", "local", "-n", "2", "--no-gpu", "--timeout", str(TIMEOUT)])
        self.assertExit([r], 0)
        self.assertIn("PASS", r.out)
        self.assertTrue(os.path.exists(os.path.join(
            ROOT, "usr/share/rankcheck/launchers/kubernetes/Dockerfile")))


if __name__ == "__main__":
    unittest.main()
