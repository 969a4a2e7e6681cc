"""scripts/gpu-check.sh and scripts/gpu-bundle.sh, run against the fake CUDA driver and
NCCL laid out as a bare GPU machine lays out the real ones: the driver in
/usr/local/nvidia/lib64 (libcuda.so.1 and libnvidia-ml.so.1, as the driver names
them), pip's NCCL in a venv under /opt as a namespace package
(site-packages/nvidia/nccl/lib/libnccl.so.2, no __init__.py), nothing on
LD_LIBRARY_PATH. The layout sits under a folder of the test's own, which the
script is told with RANKCHECK_GPU_ROOT; the check is run through the bundle's
run.sh, as it is on a GPU machine."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from harness import BIN, clean_env

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "../../scripts")
FAKE = os.environ.get("RANKCHECK_FAKE_GPU", os.path.join(os.path.dirname(BIN), "tests/libfakegpu.so"))
DRIVER = "580.65.06"  # the fixture's driver version, in its libraries' names


def gpus(n):
    return ",".join(f"GPU-0c0c{d:04d}-0000-0000-0000-0000000000{d:02d}" for d in range(n))


def stage_built():
    r = subprocess.run([BIN, "env", "--json"],
                       env=clean_env(RANKCHECK_CUDA_LIB=FAKE, RANKCHECK_NCCL_LIB=FAKE,
                                     FAKE_GPUS=gpus(1)),
                       capture_output=True, text=True, timeout=30)
    import json
    return json.loads(r.stdout)["self"]["gpu"]["state"] != "not-built"


def lay_out_machine(root):
    """The GPU machine's layout under `root`; returns the venv's python3 and the folder of
    a python3 on PATH that is that venv's."""
    lib64 = os.path.join(root, "usr/local/nvidia/lib64")
    os.makedirs(lib64)
    for name in ("libcuda.so", "libnvidia-ml.so"):
        shutil.copyfile(FAKE, os.path.join(lib64, f"{name}.{DRIVER}"))
        os.symlink(f"{name}.{DRIVER}", os.path.join(lib64, f"{name}.1"))
    venv = os.path.join(root, "opt/torch/.venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=60)
    py = os.path.join(venv, "bin/python3")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    self_check = subprocess.run([py, "-c", "import nvidia"], capture_output=True, timeout=30)
    assert self_check.returncode != 0, "the venv sees another nvidia package"
    nccl = os.path.join(site, "nvidia/nccl/lib")  # no __init__.py: namespace packages
    os.makedirs(nccl)
    shutil.copyfile(FAKE, os.path.join(nccl, "libnccl.so.2"))
    on_path = os.path.join(root, "bin")
    os.makedirs(on_path)
    with open(os.path.join(on_path, "python3"), "w") as f:
        f.write(f"#!/bin/sh\nexec {py} \"$@\"\n")
    os.chmod(os.path.join(on_path, "python3"), 0o755)
    return py, on_path, os.path.join(nccl, "libnccl.so.2")


def table(out):
    """The summary's rows: check -> (result, seconds, limit, detail)."""
    rows = {}
    for line in out[out.index("== summary"):].splitlines()[2:]:
        m = re.match(r"(.{24}) (\S+) +([0-9.]+)/([0-9]+) s +(.*)$", line)
        assert m, f"a row the table should not have: {line!r}"
        rows[m[1].strip()] = (m[2], float(m[3]), int(m[4]), m[5])
    return rows


@unittest.skipUnless(os.path.exists(FAKE) and stage_built(),
                     "no fake library, or rankcheck was built without the CUDA/NCCL headers")
class GpuCheckOnAMachineLayout(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="rankcheck-gpu-check-")
        cls.bundle = os.path.join(cls.tmp, "gpu-check")
        r = subprocess.run(["bash", os.path.join(SCRIPTS, "gpu-bundle.sh")],
                           env=clean_env(RANKCHECK_BIN=BIN, RANKCHECK_FAKE_GPU=FAKE,
                                         GPU_BUNDLE_DIR=cls.bundle),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        cls.bundle_out = r.stdout
        cls.root = os.path.join(cls.tmp, "machine")
        cls.venv_python, cls.path_dir, cls.nccl = lay_out_machine(cls.root)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, True)

    def run_check(self, ngpus, path, **extra):
        env = clean_env(RANKCHECK_GPU_ROOT=self.root, FAKE_GPUS=gpus(ngpus), PATH=path,
                        GPU_CHECK_ABORT_TIMEOUT="4", TMPDIR=self.tmp, **extra)
        for k in ("LD_LIBRARY_PATH", "RANKCHECK_CUDA_LIB", "RANKCHECK_NCCL_LIB",
                  "RANKCHECK_FAKE_GPU", "CUDA_VISIBLE_DEVICES"):
            env.pop(k, None)
        r = subprocess.run([os.path.join(self.bundle, "run.sh")], env=env, capture_output=True,
                           text=True, timeout=240)
        print(r.stdout[r.stdout.index("== summary"):] if "== summary" in r.stdout else r.stdout)
        return r

    def test_bundle_holds_what_the_check_needs(self):
        self.assertEqual(sorted(os.listdir(self.bundle)),
                         ["SHA256SUMS", "gpu-check.sh", "lib", "rankcheck", "run.sh"])
        self.assertEqual(os.listdir(os.path.join(self.bundle, "lib")), ["libfakegpu.so"])
        self.assertRegex(self.bundle_out, r"gpu-check: \d+ bytes of 67108864 allowed")

    def test_every_check_against_the_layout_with_two_gpus(self):
        r = self.run_check(2, f"{self.path_dir}:/usr/bin:/bin")
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-2000:])
        rows = table(r.stdout)
        self.assertEqual(list(rows), ["libraries", "inventory", "NCCL loaded", "driver version",
                                      "NCCL data network", "world size 1", "report on stdout",
                                      "scalable init, 1 root",
                                      "bandwidth, world size 1", "two ranks, one GPU",
                                      "init aborted (world 2)", "node mode x2", "local -n 2"])
        self.assertTrue(all(v[0] == "ok" for v in rows.values()), rows)
        # The libraries chosen are the layout's, found as on the GPU machine: the
        # driver's folder by its path, NCCL through the python3 on PATH.
        lib64 = os.path.join(self.root, "usr/local/nvidia/lib64")
        detail = rows["libraries"][3]
        self.assertIn(f"libcuda {lib64}/libcuda.so.{DRIVER}", detail)
        self.assertIn(f"nvml {lib64}/libnvidia-ml.so.{DRIVER}", detail)
        self.assertIn(f"nccl {self.nccl}", detail)
        self.assertIn(f"pip's nvidia-nccl through {self.path_dir}/python3", r.stdout)
        self.assertIn(f"LD_LIBRARY_PATH={lib64}\n", r.stdout)
        # What rankcheck itself loaded: the driver by bare name, from the layout.
        self.assertIn(f"{DRIVER}, CUDA", rows["driver version"][3])
        self.assertIn(f"from {self.nccl}", rows["NCCL loaded"][3])
        self.assertIn("NCCL chose Socket", rows["world size 1"][3])
        self.assertIn("every algorithm connected", rows["report on stdout"][3])
        # The stuck rank's fake says the driver's version, so no other finding.
        self.assertIn("exit 5 nccl-init-timeout, ended", rows["init aborted (world 2)"][3])
        # Every step under its limit, and all the limits under 4 minutes.
        m = re.search(r"worst case (\d+) s on one GPU, (\d+) s on several", r.stdout)
        self.assertIsNotNone(m, r.stdout[:3000])
        self.assertLess(int(m[1]), 240)
        self.assertLess(int(m[2]), 240)
        self.assertLessEqual(sum(v[2] for k, v in rows.items()
                                 if k not in ("NCCL loaded", "driver version")), int(m[2]))
        for name, (_, took, limit, _) in rows.items():
            self.assertLessEqual(took, limit + 3, name)

    def test_a_failing_check_fails_the_script(self):
        """One GPU, the venv found under /opt (no NCCL through the python3 on PATH), and
        an all-reduce whose total is one too high: that row, and only the rows that
        check a total, fail, and so does the script."""
        r = self.run_check(1, "/usr/bin:/bin", FAKE_NCCL_ALLREDUCE="wrong")
        self.assertEqual(r.returncode, 1, r.stdout[-3000:] + r.stderr[-2000:])
        rows = table(r.stdout)
        self.assertNotIn("local -n 1", rows)
        self.assertEqual(rows["world size 1"][0], "FAILED")
        self.assertIn("total 2 (want 1)", rows["world size 1"][3])
        for ok in ("libraries", "inventory", "NCCL loaded", "two ranks, one GPU",
                   "init aborted (world 2)"):
            self.assertEqual(rows[ok][0], "ok", (ok, rows[ok]))
        if subprocess.run(["/usr/bin/python3", "-c", "import nvidia.nccl"],
                          capture_output=True).returncode != 0:
            self.assertIn(f"pip's nvidia-nccl through {self.venv_python}", r.stdout)
        self.assertIn(f"nccl {self.nccl}", rows["libraries"][3])

    def test_a_step_past_its_limit_is_killed_and_the_rest_run(self):
        """A rankcheck that never ends in the one-rank step: that step is killed at its
        limit, said so, and every other check still runs."""
        stub = os.path.join(self.tmp, "hanging-rankcheck")
        with open(stub, "w") as f:
            f.write("#!/bin/bash\n"
                    "for a in \"$@\"; do [[ $a == */one.json ]] && exec sleep 600; done\n"
                    f"exec {BIN} \"$@\"\n")
        os.chmod(stub, 0o755)
        env = clean_env(RANKCHECK_GPU_ROOT=self.root, FAKE_GPUS=gpus(1),
                        PATH=f"{self.path_dir}:/usr/bin:/bin", GPU_CHECK_ABORT_TIMEOUT="4",
                        TMPDIR=self.tmp, RANKCHECK_FAKE_GPU=FAKE)
        for k in ("LD_LIBRARY_PATH", "RANKCHECK_CUDA_LIB", "RANKCHECK_NCCL_LIB",
                  "CUDA_VISIBLE_DEVICES"):
            env.pop(k, None)
        r = subprocess.run(["bash", os.path.join(SCRIPTS, "gpu-check.sh"), stub], env=env,
                           capture_output=True, text=True, timeout=240)
        self.assertEqual(r.returncode, 1, r.stdout[-3000:] + r.stderr[-2000:])
        rows = table(r.stdout)
        print("\n".join(f"{k}: {v}" for k, v in rows.items()))
        result, took, limit, detail = rows["world size 1"]
        self.assertEqual(result, "FAILED")
        self.assertIn("killed at its time limit (exit 124)", detail)
        self.assertGreaterEqual(took, limit)
        self.assertLess(took, limit + 10)
        self.assertEqual([k for k, v in rows.items() if v[0] != "ok"], ["world size 1"])

    def test_no_driver_folder_is_a_failed_row(self):
        """The layout without its driver: the libraries row says so and fails, and
        rankcheck's inventory finds no driver."""
        import ctypes
        try:
            ctypes.CDLL("libcuda.so.1")
            self.skipTest("this machine has a CUDA driver of its own")
        except OSError:
            pass
        lib64 = os.path.join(self.root, "usr/local/nvidia/lib64")
        hidden = lib64 + ".hidden"
        os.rename(lib64, hidden)
        try:
            r = self.run_check(1, f"{self.path_dir}:/usr/bin:/bin")
        finally:
            os.rename(hidden, lib64)
        self.assertEqual(r.returncode, 1)
        rows = table(r.stdout)
        self.assertEqual(rows["libraries"][0], "FAILED")
        self.assertIn("libcuda -", rows["libraries"][3])
        self.assertEqual(rows["inventory"][0], "FAILED")


    def test_a_venv_whose_python_does_not_start_still_gives_its_nccl(self):
        """The venv under /opt with its interpreter link dangling (made in another image)
        and no python3 on PATH that sees NCCL: pip's NCCL is found by its path."""
        if subprocess.run(["/usr/bin/python3", "-c", "import nvidia.nccl"],
                          capture_output=True).returncode == 0:
            self.skipTest("this machine's python3 has an nvidia-nccl of its own")
        py = self.venv_python
        kept = py + ".kept"
        os.rename(py, kept)
        os.symlink("/nonexistent/python3.99", py)
        try:
            r = self.run_check(1, "/usr/bin:/bin")
        finally:
            os.remove(py)
            os.rename(kept, py)
        rows = table(r.stdout)
        self.assertIn(f"pip's nvidia package at {self.nccl}", r.stdout)
        self.assertIn(f"nccl {self.nccl}", rows["libraries"][3])
        self.assertEqual(rows["world size 1"][0], "ok", rows["world size 1"])


class GpuBundleSize(unittest.TestCase):

    @unittest.skipUnless(os.path.exists(FAKE), "no fake library")
    def test_a_bundle_over_its_limit_fails_loudly(self):
        with tempfile.TemporaryDirectory(prefix="rankcheck-gpu-bundle-") as d:
            out = os.path.join(d, "gpu-check")
            r = subprocess.run(["bash", os.path.join(SCRIPTS, "gpu-bundle.sh")],
                               env=clean_env(RANKCHECK_BIN=BIN, RANKCHECK_FAKE_GPU=FAKE,
                                             GPU_BUNDLE_DIR=out, GPU_BUNDLE_MAX_BYTES="1000000"),
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertRegex(r.stderr, r"gpu-check is \d+ bytes, over the 1000000 allowed \(by \d+\)")

    def test_a_missing_binary_is_named(self):
        with tempfile.TemporaryDirectory(prefix="rankcheck-gpu-bundle-") as d:
            r = subprocess.run(["bash", os.path.join(SCRIPTS, "gpu-bundle.sh")],
                               env=clean_env(RANKCHECK_BIN=os.path.join(d, "nothing"),
                                             GPU_BUNDLE_DIR=os.path.join(d, "gpu-check")),
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 1)
            self.assertIn(f"no rankcheck binary at {d}/nothing", r.stderr)


if __name__ == "__main__":
    unittest.main()
