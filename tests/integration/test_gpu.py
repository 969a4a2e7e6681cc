"""The GPU stage with real processes on loopback.

What is faked: the CUDA driver and NCCL, by tests/fake/fake_gpu.cc, loaded through
the same dlopen path as the real libraries (RANKCHECK_CUDA_LIB, RANKCHECK_NCCL_LIB).
It gives each process the GPUs named in FAKE_GPUS and does a real, file-based
all-reduce across the processes, so the total every rank checks is the sum of what
the others sent. What is real: everything in rankcheck, the processes, the
rendezvous, and (in test_real_nccl_library_is_loaded) the NCCL library on this
machine where there is one.
"""

import os
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import BIN, RankcheckTest, clean_env

FAKE = os.environ.get("RANKCHECK_FAKE_GPU", os.path.join(os.path.dirname(BIN), "tests/libfakegpu.so"))
REAL_NCCL = os.environ.get("RANKCHECK_REAL_NCCL", "")


def stage_built():
    """False when rankcheck was built without the CUDA/NCCL headers: its GPU stage then
    reports "not-built" on every host, and nothing in GpuStage can run."""
    r = subprocess.run([BIN, "env", "--json"], env={**clean_env(), "RANKCHECK_CUDA_LIB": FAKE,
                                                   "RANKCHECK_NCCL_LIB": FAKE,
                                                   "FAKE_GPUS": gpus(0, 1)},
                       capture_output=True, text=True, timeout=30)
    import json
    return json.loads(r.stdout)["self"]["gpu"]["state"] != "not-built"


def gpus(host, n):
    return ",".join(f"GPU-{host:02d}{d:02d}{host:02d}{d:02d}-0000-0000-0000-0000000000{d:02d}"
                    for d in range(n))


@unittest.skipUnless(stage_built(), "rankcheck was built without the CUDA/NCCL headers")
class GpuStage(RankcheckTest):
    gpu = True
    timeout = 4.0

    def setUp(self):
        super().setUp()
        self.fake_dir = tempfile.mkdtemp(prefix="rankcheck-gpu-test-")

    def tearDown(self):
        super().tearDown()
        shutil.rmtree(self.fake_dir, ignore_errors=True)

    def fake(self, host=0, ngpus=4, **extra):
        """The environment of a process on fake host `host` with `ngpus` fake GPUs."""
        env = dict(RANKCHECK_CUDA_LIB=FAKE, RANKCHECK_NCCL_LIB=FAKE, FAKE_GPUS=gpus(host, ngpus),
                   TMPDIR=self.fake_dir)
        env.update(extra)
        return env

    def job4(self, per_rank=None):
        """A 4-rank job on one fake host with 4 GPUs; per_rank={rank: {env...}}."""
        per_rank = per_rank or {}
        return {r: self.rank(r, 4, local=(r, 4), **{**self.fake(), **per_rank.get(r, {})})
                for r in range(4)}

    def test_healthy_four_ranks(self):
        procs = self.job4()
        self.finish()
        self.assertExit(procs.values(), 0)
        rep = procs[0].report
        self.assertEqual(rep["findings"], [])
        self.assertTrue(rep["gpu_stage"].startswith("passed: NCCL init"), rep["gpu_stage"])
        results = rep["stage_results"]
        self.assertEqual([r["rank"] for r in results], [0, 1, 2, 3])
        for r in results:
            self.assertTrue(r["init_ok"] and r["allreduce_ok"])
            self.assertEqual((r["expected"], r["got"]), (10, 10))  # 1+2+3+4
        gpu = rep["members"][0]["gpu"]
        self.assertEqual(gpu["state"], "usable")
        self.assertEqual(gpu["nccl_version_text"], "2.28.9")
        uuids = sorted(m["gpu"]["devices"][0]["uuid"] for m in rep["members"])
        self.assertEqual(uuids, sorted(gpus(0, 4).split(",")))
        self.assertIn("PASS", procs[2].out)

    def test_two_ranks_on_one_gpu(self):
        # CUDA_VISIBLE_DEVICES=1 everywhere: every process sees one GPU, the same one.
        procs = self.job4({r: {"CUDA_VISIBLE_DEVICES": "1"} for r in range(4)})
        self.finish()
        self.assertExit(procs.values(), 3)
        rep = procs[0].report
        self.assertEqual([f["id"] for f in rep["findings"]], ["duplicate-gpu"])
        f = rep["findings"][0]
        self.assertEqual(f["ranks"], [0, 1, 2, 3])
        self.assertIn(gpus(0, 4).split(",")[1], f["message"])
        self.assertIn("CUDA_VISIBLE_DEVICES=1", f["message"])
        # Decided before NCCL: no stage results, and quickly.
        self.assertEqual(rep["stage_results"], [])
        self.assertIn("not run (the rendezvous failed)", rep["gpu_stage"])

    def test_nccl_missing_on_one_host(self):
        procs = {r: self.rank(r, 4, local=(r % 2, 2), host=f"h{r // 2}",
                              **self.fake(host=r // 2, ngpus=2,
                                          **({"RANKCHECK_NCCL_LIB": "/nonexistent/libnccl.so.2"}
                                             if r >= 2 else {})))
                 for r in range(4)}
        self.finish()
        self.assertExit(procs.values(), 5)
        f = procs[0].finding("nccl-missing")
        self.assertEqual(f["ranks"], [2, 3])
        self.assertEqual(f["hosts"], ["h1"])
        self.assertIn("/nonexistent/libnccl.so.2", f["message"])

    def test_mixed_nccl_versions(self):
        procs = {r: self.rank(r, 4, local=(r % 2, 2), host=f"h{r // 2}",
                              **self.fake(host=r // 2, ngpus=2,
                                          FAKE_NCCL_VERSION="22105" if r >= 2 else "22809"))
                 for r in range(4)}
        self.finish()
        self.assertExit(procs.values(), 3)
        f = procs[0].finding("nccl-version-mismatch")
        self.assertIn("NCCL 2.21.5", f["message"])
        self.assertIn("NCCL 2.28.9", f["message"])

    def test_init_that_never_completes(self):
        # One rank hangs in init; real NCCL keeps every rank waiting then, and so does the fake.
        procs = self.job4({2: {"FAKE_NCCL_INIT": "hang"}})
        self.finish()  # every process within --timeout + 2 s
        self.assertExit(procs.values(), 5)
        f = procs[0].finding("nccl-init-timeout")
        self.assertEqual(f["ranks"], [0, 1, 2, 3])
        self.assertIn("no rank finished init", f["message"])
        self.assertIn("nccl-init-timeout", procs[3].out)

    def test_init_that_fails(self):
        procs = self.job4({1: {"FAKE_NCCL_INIT": "fail"}})
        self.finish()
        self.assertExit(procs.values(), 5)
        f = procs[0].finding("nccl-init-failed")
        self.assertEqual(f["ranks"], [1])
        self.assertIn("FAKE_NCCL_INIT=fail", f["message"])

    def test_init_refused_at_once(self):
        # NCCL can refuse at the call itself and leave no communicator: that error, not a
        # timeout, is what rank 1 reports; the others wait for it until the deadline.
        procs = self.job4({1: {"FAKE_NCCL_INIT": "fail-now"}})
        self.finish()
        self.assertExit(procs.values(), 5)
        f = procs[0].finding("nccl-init-failed")
        self.assertEqual(f["ranks"], [1])
        self.assertIn("ncclCommInitRankConfig", f["message"])
        self.assertIn("FAKE_NCCL_INIT=fail-now", f["message"])
        r1 = [r for r in procs[0].report["stage_results"] if r["rank"] == 1][0]
        self.assertFalse(r1["init_timed_out"])

    def test_copy_to_gpu_fails(self):
        procs = self.job4({2: {"FAKE_CUDA_COPY": "fail"}})
        self.finish()
        self.assertExit(procs.values(), 5)
        f = procs[0].finding("allreduce-failed")
        self.assertIn(2, f["ranks"])
        self.assertIn("copying the input to the GPU", f["message"])
        self.assertNotIn("allreduce-wrong-result", procs[0].ids())

    def test_wrong_allreduce_total(self):
        procs = self.job4({3: {"FAKE_NCCL_ALLREDUCE": "wrong"}})
        self.finish()
        self.assertExit(procs.values(), 5)
        f = procs[0].finding("allreduce-wrong-result")
        self.assertEqual(f["ranks"], [3])
        self.assertIn("rank 3 expected 10, got 11", f["message"])

    def test_node_mode_two_nodes_of_four(self):
        nodes = []
        for node in range(2):
            e = clean_env(**self.fake(host=node, ngpus=4))
            p = self.node(node, e)
            nodes.append(p)
        self.finish()
        self.assertExit(nodes, 0)
        rep = nodes[0].report
        self.assertEqual(rep["findings"], [])
        self.assertEqual(rep["ranks_joined"], 8)
        self.assertEqual([r["rank"] for r in rep["stage_results"]], list(range(8)))
        self.assertTrue(all(r["got"] == 36 for r in rep["stage_results"]))  # 1+...+8
        self.assertEqual(len(rep["members"][1]["gpu"]["devices"]), 4)

    def test_node_mode_short_of_gpus(self):
        nodes = [self.node(0, clean_env(**self.fake(host=0, ngpus=4))),
                 self.node(1, clean_env(**self.fake(host=1, ngpus=3)))]
        self.finish()
        self.assertExit(nodes, 5)
        f = nodes[0].finding("gpu-count-mismatch")
        self.assertEqual(f["ranks"], [4, 5, 6, 7])

    def test_bandwidth_figure(self):
        procs = {r: self.rank(r, 2, local=(r, 2), extra=("--bandwidth", "64K"),
                              **self.fake(ngpus=2)) for r in range(2)}
        self.finish()
        self.assertExit(procs.values(), 0)
        results = procs[0].report["stage_results"]
        self.assertEqual(results[0]["bandwidth"]["bytes"], 65536)
        self.assertGreater(results[0]["bandwidth"]["busbw_gbps"], 0)
        # busbw = algbw * 2(n-1)/n, as nccl-tests defines it: for n = 2 they are equal.
        self.assertAlmostEqual(results[0]["bandwidth"]["busbw_gbps"],
                               results[0]["bandwidth"]["algbw_gbps"])

    def test_min_busbw_floor(self):
        procs = {r: self.rank(r, 2, local=(r, 2),
                              extra=("--bandwidth", "64K", "--min-busbw", "100000"),
                              **self.fake(ngpus=2)) for r in range(2)}
        self.finish()
        self.assertExit(procs.values(), 5)
        self.assertEqual(procs[0].finding("bandwidth-low")["ranks"], [0, 1])

    def node(self, node, env):
        args = ["run", "--timeout", str(self.timeout), "--nproc-per-node", "4", "--nnodes", "2",
                "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port",
                str(self.port), "--host-name", f"node{node}"]
        from harness import Proc
        p = Proc(args, env, self.tmp.name, f"node{node}")
        self.procs.append(p)
        return p


class RealLibraries(unittest.TestCase):

    @unittest.skipUnless(REAL_NCCL and os.path.exists(REAL_NCCL), "no NCCL library on this machine")
    def test_real_nccl_library_is_loaded(self):
        """The real libnccl.so.2 through the real dlopen path (no GPU needed for its version)."""
        r = subprocess.run([BIN, "env", "--json", "--rank", "0", "--world-size", "1",
                            "--nccl-lib", REAL_NCCL], env=clean_env(), capture_output=True,
                           text=True, timeout=30)
        import json
        j = json.loads(r.stdout)
        self.assertGreater(j["self"]["gpu"]["nccl_version"], 21400)
        self.assertEqual(j["self"]["gpu"]["nccl_error"], "")

    def test_binary_needs_no_cuda_nccl_fmt_or_libstdcxx(self):
        out = subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout
        print(out)
        if "libasan" in out:
            self.skipTest("a sanitizer build links its runtimes; the release build is checked")
        for lib in ("libcuda", "libnccl", "libcudart", "libfmt", "libstdc++", "libgcc_s",
                    "libcrypto", "libmpi"):
            self.assertNotIn(lib, out, f"{BIN} links {lib}")
        self.assertIn("libc.so.6", out)


if __name__ == "__main__":
    unittest.main()
