"""The GPU stage with real processes on loopback.

What is faked: the CUDA driver and NCCL, by tests/fake/fake_gpu.cc, loaded through
the same dlopen path as the real libraries (RANKCHECK_CUDA_LIB, RANKCHECK_NCCL_LIB).
It gives each process the GPUs named in FAKE_GPUS and does a real, file-based
all-reduce across the processes, so the total every rank checks is the sum of what
the others sent. It behaves like the NCCL version it reports (FAKE_NCCL_VERSION,
2.28.9 unless a test says otherwise): from 2.23 a collective on a non-blocking
communicator returns ncclInProgress and is launched only while rankcheck polls
ncclCommGetAsyncError; 2.22 sets up connections in the caller's thread. Misuse of
the API (a call on a communicator in progress or destroyed, an abort left in an
open group, a communicator never released) is printed by the fake on stderr, and
every test here fails on it. NCCL's own words go where NCCL's would (NCCL_DEBUG,
NCCL_DEBUG_SUBSYS, NCCL_DEBUG_FILE), in its format: "Using network Socket" at init
(FAKE_NCCL_NET), and FAKE_NCCL_INIT=fail-ib's WARN, NCCL 2.28's text for an IB queue
pair that cannot reach its peer. What is real: everything in rankcheck, the
processes, the rendezvous, and (in RealLibraries) the NCCL library on this machine
where there is one.
"""

import os
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import BIN, EMULATED, RankcheckTest, clean_env, free_port, job_findings

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

    def finish(self, procs=None):
        """As RankcheckTest.finish, and no process misused the fake NCCL."""
        done = super().finish(procs)
        for p in done:
            self.assertNotIn("fake NCCL: misuse", p.err, f"{p.name}:\n{p.err}")
        return done

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
        self.assertEqual(job_findings(rep), [])
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

    def test_a_gpu_driver_that_never_answers_is_named_by_the_deadline(self):
        # cuInit hangs on h0 (rank 0's host): the inventory has a bound of its own, so
        # that rank 0 still listens and reports, and h0 is the host to look at. It used
        # to end at the watchdog with no report, and rank 1 blamed its own host.
        stuck = self.rank(0, 2, host="h0", **self.fake(0, 1, FAKE_CUDA_INIT="hang"))
        other = self.rank(1, 2, host="h1", **self.fake(1, 1))
        self.finish()
        self.assertExit([stuck, other], 5)
        f = stuck.report["findings"][0]
        self.assertEqual((f["id"], f["hosts"]), ("cuda-driver-missing", ["h0"]))
        self.assertIn("the GPU driver did not answer in", f["message"])
        self.assertIn("take the host out of service", f["hint"])
        self.assertEqual(stuck.report["members"][0]["gpu"]["state"], "stuck")
        self.assertIn("suspect hosts: h0", stuck.out)
        self.assertIn("[cuda-driver-missing]", other.out)

    def scalable_job(self, every=("2", "2", "2", "2"), args=(), **env):
        return {r: self.rank(r, 4, local=(r, 4), extra=("--nccl-roots-every", every[r], *args),
                             **self.fake(**env))
                for r in range(4)}

    def test_scalable_init_over_two_roots(self):
        # One root per 2 ranks: rank 0's (the master's) and rank 2's, which it made and
        # sent in its hello. Through the host's relay (one frame for all), and directly.
        for args in ((), ("--no-relay",)):
            with self.subTest(args=args):
                self.port = free_port()
                procs = self.scalable_job(args=args)
                self.finish(list(procs.values()))
                self.assertExit(procs.values(), 0)
                rep = procs[0].report
                self.assertEqual(rep["nccl_roots"], 2)
                self.assertIn("NCCL initialised with ncclCommInitRankScalable over 2 roots",
                              procs[0].out)
                for r, p in procs.items():
                    self.assertIn(f"fake NCCL: rank {r}: ncclCommInitRankScalable over 2 roots",
                                  p.err)
                self.assertEqual([x["got"] for x in rep["stage_results"]], [10] * 4)
                self.procs.clear()

    def test_scalable_init_needs_nccl_2_23_everywhere(self):
        procs = self.scalable_job(FAKE_NCCL_VERSION="22204")
        self.finish()
        self.assertExit(procs.values(), 0)
        self.assertEqual(procs[0].report["nccl_roots"], 0)
        self.assertIn("ncclCommInitRankScalable needs 2.23; one root instead", procs[0].err)
        for p in procs.values():
            self.assertNotIn("ncclCommInitRankScalable over", p.err)

    def test_nccl_comm_id_means_one_root(self):
        # With NCCL_COMM_ID, NCCL's unique ids all name that address and no root starts:
        # the blocks' ids would be one, and ncclCommInitRankScalable would wait forever.
        procs = self.scalable_job(NCCL_COMM_ID="127.0.0.1:29599")
        self.finish()
        self.assertExit(procs.values(), 0)
        self.assertEqual(procs[0].report["nccl_roots"], 0)
        self.assertIn("NCCL_COMM_ID=127.0.0.1:29599 on rank ", procs[0].err)
        self.assertIn("NCCL makes no root of its own then; one root instead", procs[0].err)
        for p in procs.values():
            self.assertNotIn("ncclCommInitRankScalable over", p.err)

    def test_a_leader_without_a_root_means_one_root(self):
        # Rank 2 was given another --nccl-roots-every: it made no id, and the job
        # runs on one root rather than not at all.
        procs = self.scalable_job(every=("2", "2", "4096", "2"))
        self.finish()
        self.assertExit(procs.values(), 0)
        self.assertEqual(procs[0].report["nccl_roots"], 0)
        self.assertIn("rank 2, the first of NCCL root 1's block, sent no unique id",
                      procs[0].err)

    def test_two_ranks_on_one_gpu(self):
        # CUDA_VISIBLE_DEVICES=1 everywhere: every process sees one GPU, the same one.
        procs = self.job4({r: {"CUDA_VISIBLE_DEVICES": "1"} for r in range(4)})
        self.finish()
        self.assertExit(procs.values(), 3)
        rep = procs[0].report
        self.assertEqual([f["id"] for f in job_findings(rep)], ["duplicate-gpu"])
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

    def test_nccl_built_for_a_newer_cuda_than_the_driver(self):
        # pip's NCCL for CUDA 13 on a host whose driver supports CUDA 12.2: cudart's first
        # call fails with cudaErrorInsufficientDriver (35) and NCCL says "Cuda failure".
        # Not a CUDA error to rerun with CUDA_LAUNCH_BLOCKING: the library and the driver
        # do not go together, and the fix says which to change.
        procs = self.job4({r: {"FAKE_CUDA_VERSION": "12020", "FAKE_NCCL_CUDA": "13000"}
                           for r in (2, 3)})
        self.finish()
        self.assertExit(procs.values(), 5)
        f = procs[0].finding("nccl-init-failed")
        self.assertEqual(f["ranks"], [2, 3])
        self.assertIn("Cuda failure 'CUDA driver version is insufficient for CUDA runtime "
                      "version'", f["message"])
        self.assertIn("unhandled cuda error", f["message"])
        self.assertIn("reads as an NCCL built for a newer CUDA than the driver supports "
                      f"(CUDA 12.2 on {f['hosts'][0]})", f["message"])
        self.assertIn("load an NCCL built for CUDA 12 (pip's nvidia-nccl-cu12, or --nccl-lib), "
                      "or update the driver", f["hint"])
        self.assertNotIn("CUDA_LAUNCH_BLOCKING", f["hint"])

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
        # Each GPU's primary context takes the fake driver 200 ms to create, as a real
        # one's first takes 0.1-0.5 s: a node's four are made on a thread each
        # (scripts/bench.sh times eight), and the stage goes on with all of them.
        nodes = []
        for node in range(2):
            e = clean_env(**self.fake(host=node, ngpus=4, FAKE_CUDA_CTX_MS="200"))
            p = self.node(node, e)
            nodes.append(p)
        self.finish()
        self.assertExit(nodes, 0)
        rep = nodes[0].report
        self.assertEqual(job_findings(rep), [])
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
        # Said as a count (it said "no GPU for ranks 4-7", though 3 are there).
        self.assertIn(" shows 3 GPUs, its node runs 4 ranks (4-7), while the other nodes have a "
                      "GPU for each rank", f["message"])

    def test_a_host_that_lost_a_gpu_is_short_of_gpus_not_a_duplicate(self):
        # Two ranks a host; h1 shows 1 GPU (one fell off the bus), h0 both of its own.
        # Rank 3 wraps onto rank 2's GPU: that was duplicate-gpu, class host-config,
        # "LOCAL_RANK must differ"; it is h1's missing GPU, class hardware.
        procs = [self.rank(r, 4, host=f"h{r // 2}", local=(r % 2, 2),
                           **self.fake(r // 2, 2 if r < 2 else 1)) for r in range(4)]
        self.finish()
        self.assertExit(procs, 5)
        self.assertEqual(procs[0].ids(), ["gpu-count-mismatch"])
        f = procs[0].finding("gpu-count-mismatch")
        self.assertEqual((f["ranks"], f["hosts"]), ([2, 3], ["h1"]))
        self.assertEqual(f["message"], "h1 shows 1 GPU, the job placed 2 ranks there, so ranks 2-3 "
                                       "share a GPU; h0 shows 2: a GPU of h1 is missing")
        self.assertEqual(procs[0].report["suspect_hosts"], "h1")

    def test_a_gpu_given_that_is_not_there(self):
        # CUDA_VISIBLE_DEVICES names 4 GPUs; the host shows 3 (the fake driver stops at
        # the entry that names nothing, as the real one does): each rank still has a GPU,
        # the check passes, and says the GPU given is not there.
        procs = [self.rank(r, 2, host="h0", local=(r, 2),
                           **self.fake(0, 3, CUDA_VISIBLE_DEVICES="0,1,2,3")) for r in range(2)]
        self.finish()
        self.assertExit(procs, 0)
        self.assertEqual(procs[0].ids(), ["gpu-lost"])
        f = procs[0].finding("gpu-lost")
        self.assertEqual((f["ranks"], f["severity"]), ([0, 1], "warning"))
        self.assertEqual(f["message"], "h0 shows 3 GPUs, but CUDA_VISIBLE_DEVICES lists 4 (0,1,2,3): "
                                       "a GPU given to ranks 0-1 is not there; the check ran on "
                                       "the GPUs shown")
        member = next(m for m in procs[0].report["members"] if m["rank"] == 0)["gpu"]
        self.assertEqual((member["device_count"], member["granted"]), (3, 4))
        self.assertEqual(member["granted_by"], "CUDA_VISIBLE_DEVICES lists 4 (0,1,2,3)")

    def test_slurm_gave_more_gpus_than_the_ranks_share(self):
        # Slurm gave the step 2 GPUs on the node (SLURM_GPUS_ON_NODE), the process shows
        # 1 and the job placed 2 ranks there: a GPU of h0 is missing, though no other
        # host shows enough to compare with.
        procs = [self.rank(r, 2, host="h0", local=(r, 2),
                           **self.fake(0, 1, SLURM_GPUS_ON_NODE="2")) for r in range(2)]
        self.finish()
        self.assertExit(procs, 5)
        self.assertEqual(procs[0].ids(), ["gpu-count-mismatch"])
        self.assertEqual(procs[0].finding("gpu-count-mismatch")["message"],
                         "h0 shows 1 GPU, the job placed 2 ranks there, so ranks 0-1 share a GPU; "
                         "SLURM_GPUS_ON_NODE=2: a GPU of h0 is missing")

    def test_nvlink_fabric_and_links_from_nvml(self):
        # NVML (the fake's, RANKCHECK_NVML_LIB): h1's fabric registration still in
        # progress, h0's GPU 1 with 17 of its 18 NVLinks up.
        procs = [self.rank(r, 4, host=f"h{r // 2}", local=(r % 2, 2),
                           **self.fake(r // 2, 2, RANKCHECK_NVML_LIB=FAKE,
                                       FAKE_NVML_FABRIC="in-progress" if r >= 2 else "completed",
                                       FAKE_NVML_NVLINKS="18,17" if r < 2 else "18"))
                 for r in range(4)]
        self.finish()
        self.assertExit(procs, 0)
        self.assertEqual(procs[0].ids(), ["nvlink-fabric-down", "nvlink-down"])
        f = procs[0].finding("nvlink-fabric-down")
        self.assertEqual((f["ranks"], f["hosts"]), ([2, 3], ["h1"]))
        self.assertIn("h1: 00000000:10:00.0 (rank 2) in progress", f["message"])
        f = procs[0].finding("nvlink-down")
        self.assertEqual(f["ranks"], [1])
        self.assertIn("00000000:11:00.0 (rank 1) has 17 of 18", f["message"])
        member = next(m for m in procs[0].report["members"] if m["rank"] == 1)
        dev = member["gpu"]["devices"][0]
        self.assertEqual((dev["fabric_state"], dev["nvlinks"]), ("completed", 17))

    def test_nvml_missing_is_said_and_nothing_guessed(self):
        procs = [self.rank(r, 2, local=(r, 2),
                           **self.fake(ngpus=2, RANKCHECK_NVML_LIB="/nonexistent/libnvidia-ml.so.1"))
                 for r in range(2)]
        self.finish()
        self.assertExit(procs, 0)
        self.assertEqual(procs[0].ids(), [])
        gpu = next(m for m in procs[0].report["members"] if m["rank"] == 0)["gpu"]
        self.assertIn("/nonexistent/libnvidia-ml.so.1", gpu["nvml_error"])
        self.assertEqual(gpu["devices"][0]["fabric_state"], "not read")

    def test_cuda_not_ready_is_named_as_the_fabric_managers(self):
        procs = [self.rank(r, 2, host=f"h{r}", local=(0, 1),
                           **self.fake(r, 1, **({"FAKE_CUDA_INIT": "not-ready"} if r == 1 else {})))
                 for r in range(2)]
        self.finish()
        self.assertExit(procs, 5)
        f = procs[0].finding("cuda-driver-missing")
        self.assertEqual(f["hosts"], ["h1"])
        self.assertIn("(802)", f["message"])
        self.assertIn("the Fabric Manager has not brought the NVLink fabric up", f["message"])

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

    def test_metrics_carry_nccl_init_and_bus_bandwidth(self):
        from test_ecosystem import parse_prometheus_text
        prom = os.path.join(self.tmp.name, "rankcheck.prom")
        procs = {r: self.rank(r, 2, local=(r, 2), extra=("--bandwidth", "64K", "--metrics", prom)
                              if r == 0 else ("--bandwidth", "64K"), **self.fake(ngpus=2))
                 for r in range(2)}
        self.finish()
        self.assertExit(procs.values(), 0)
        with open(prom) as f:
            families = parse_prometheus_text(f.read())
        results = procs[0].report["stage_results"]
        [[_, init_s]] = families["rankcheck_nccl_init_seconds"]["samples"]
        self.assertAlmostEqual(init_s, max(r["init_ms"] for r in results) / 1000, places=6)
        [[_, busbw]] = families["rankcheck_allreduce_bus_bandwidth_bytes_per_second"]["samples"]
        # The JSON gives GB/s to 3 decimals; the metric is the figure itself.
        self.assertAlmostEqual(busbw, min(r["bandwidth"]["busbw_gbps"] for r in results) * 1e9,
                               delta=0.5e6 + busbw * 1e-9)

    def test_min_busbw_floor(self):
        procs = {r: self.rank(r, 2, local=(r, 2),
                              extra=("--bandwidth", "64K", "--min-busbw", "100000"),
                              **self.fake(ngpus=2)) for r in range(2)}
        self.finish()
        self.assertExit(procs.values(), 5)
        self.assertEqual(procs[0].finding("bandwidth-low")["ranks"], [0, 1])


    # ----- NCCL as it behaves from 2.23: the stage must wait for what it reads -----

    def test_allreduce_stuck_in_a_world_of_one(self):
        # A world of one whose all-reduce never completes: the receive buffer is never
        # written, and the rank must say so instead of reading its own input back.
        p = self.rank(0, 1, local=(0, 1), **self.fake(ngpus=1, FAKE_NCCL_ALLREDUCE="hang"))
        self.finish()
        self.assertExit([p], 5)
        self.assertEqual(p.ids(), ["allreduce-timeout"])
        f = p.finding("allreduce-timeout")
        self.assertEqual(f["ranks"], [0])
        self.assertIn("the all-reduce did not complete within the deadline for rank 0", f["message"])
        r = p.report["stage_results"][0]
        self.assertTrue(r["init_ok"])
        self.assertFalse(r["allreduce_ok"])

    def test_allreduce_stuck_on_one_rank_of_four(self):
        # Rank 2 never joins the collective: nobody's all-reduce completes, and each rank
        # reports a timeout (not a wrong total read from its own input, not an init timeout).
        procs = self.job4({2: {"FAKE_NCCL_ALLREDUCE": "hang"}})
        self.finish()
        self.assertExit(procs.values(), 5)
        self.assertEqual(procs[0].ids(), ["allreduce-timeout"])
        f = procs[0].finding("allreduce-timeout")
        self.assertEqual(f["ranks"], [0, 1, 2, 3])
        self.assertIn("allreduce-timeout", procs[3].out)

    def test_network_error_during_the_allreduce(self):
        # The collective is launched, then NCCL reports a network error through
        # ncclCommGetAsyncError: that error and its text, as soon as it shows.
        procs = {r: self.rank(r, 2, local=(r, 2),
                              **self.fake(ngpus=2, **({"FAKE_NCCL_ALLREDUCE": "neterr"}
                                                      if r == 1 else {})))
                 for r in range(2)}
        self.finish()
        self.assertExit(procs.values(), 5)
        f = procs[0].finding("allreduce-failed")
        self.assertEqual(f["ranks"], [1])
        self.assertIn("rank 1: ncclAllReduce: remote process exited or there was a network error",
                      f["message"])
        self.assertIn("NET/IB : Got completion from peer", f["message"])
        self.assertEqual(procs[0].finding("allreduce-timeout")["ranks"], [0])
        # Rank 1 knew within a fraction of the deadline; it did not wait for it.
        r1 = [r for r in procs[0].report["stage_results"] if r["rank"] == 1][0]
        self.assertFalse(r1["allreduce_timed_out"])

    def test_bandwidth_failure_is_not_a_wrong_total(self):
        procs = {r: self.rank(r, 2, local=(r, 2), extra=("--bandwidth", "64K"),
                              **self.fake(ngpus=2, **({"FAKE_NCCL_ALLREDUCE": "bandwidth-fail-now"}
                                                      if r == 1 else {})))
                 for r in range(2)}
        self.finish()
        self.assertExit(procs.values(), 5)
        self.assertNotIn("allreduce-wrong-result", procs[0].ids())
        f = procs[0].finding("allreduce-failed")
        self.assertEqual(f["ranks"], [1])
        self.assertIn("rank 1: the timed all-reduce of 64 KiB (--bandwidth): ncclAllReduce: "
                      "unhandled system error", f["message"])
        self.assertIn("fake: ncclAllReduce refused as asked", f["message"])
        t = procs[0].finding("allreduce-timeout")
        self.assertEqual(t["ranks"], [0])
        self.assertIn("the timed all-reduce of 64 KiB (--bandwidth) did not complete within the "
                      "deadline for rank 0", t["message"])

    def test_wrong_total_does_not_hold_up_the_bandwidth_test(self):
        # Rank 1 sees a wrong total and runs no timed all-reduce; rank 0 must not start
        # one alone and wait for it until the deadline.
        self.timeout = 30.0  # far from what is measured (a busy machine)
        procs = {r: self.rank(r, 2, local=(r, 2), extra=("--bandwidth", "64K"),
                              **self.fake(ngpus=2, **({"FAKE_NCCL_ALLREDUCE": "wrong"}
                                                      if r == 1 else {})))
                 for r in range(2)}
        self.finish()
        self.assertExit(procs.values(), 5)
        self.assertEqual(procs[0].ids(), ["allreduce-wrong-result"])
        self.assertEqual(procs[0].finding("allreduce-wrong-result")["ranks"], [1])
        for p in procs.values():
            self.assertLess(p.elapsed, 10.0, f"{p.name} waited for the deadline")

    def test_bandwidth_is_timed_on_the_gpu(self):
        # The fake's kernels run at 3.5 GB/s of bus bandwidth: the figure must be the
        # GPU's, not the host's time between launches (a poll that sleeps, a sync per
        # iteration), which would fall below the floor. Each all-reduce is a launch of
        # its own (as nccl-tests times it): 4 MiB keeps a kernel (1.2 ms) longer than
        # the fake's host work for one launch on a loaded machine.
        procs = {r: self.rank(r, 2, local=(r, 2),
                              extra=("--bandwidth", "4M", "--min-busbw", "2.4"),
                              **self.fake(ngpus=2, FAKE_NCCL_BUSBW="3.5")) for r in range(2)}
        self.finish()
        self.assertExit(procs.values(), 0)
        for r in procs[0].report["stage_results"]:
            self.assertEqual(r["bandwidth"]["bytes"], 4 << 20)
            self.assertGreater(r["bandwidth"]["busbw_gbps"], 2.4)
            self.assertLess(r["bandwidth"]["busbw_gbps"], 3.5 * 1.05)

    def test_every_nccl_behaviour_passes_a_healthy_job(self):
        # 2.28 (groups run in NCCL's thread), 2.22 (connection setup in the caller's
        # thread), 2.21 (connections at init): the same healthy job passes on each.
        for version in ("22809", "22304", "22203", "22105"):
            with self.subTest(version=version):
                self.port = free_port()
                procs = {r: self.rank(r, 2, local=(r, 2), extra=("--bandwidth", "64K"),
                                      **self.fake(ngpus=2, FAKE_NCCL_VERSION=version))
                         for r in range(2)}
                self.finish(procs.values())
                self.assertExit(procs.values(), 0)
                self.assertEqual(job_findings(procs[0].report), [])
                self.assertGreater(procs[0].report["stage_results"][1]["bandwidth"]["busbw_gbps"], 0)
                self.procs.clear()

    # ----- a stage blocked inside NCCL still ends by its deadline -----

    def test_blocked_in_connection_setup(self):
        # NCCL 2.22 sets up connections inside the first collective, on the caller's
        # thread: with rank 1 never arriving, rank 0 blocks in ncclAllReduce. The stage
        # aborts the communicator from another thread, and the master still reports.
        procs = {r: self.rank(r, 2, local=(r, 2),
                              **self.fake(ngpus=2, FAKE_NCCL_VERSION="22203",
                                          **({"FAKE_NCCL_ALLREDUCE": "hang"} if r == 1 else {})))
                 for r in range(2)}
        self.finish()
        self.assertExit(procs.values(), 5)
        self.assertEqual(procs[0].ids(), ["allreduce-timeout"])
        self.assertEqual(procs[0].finding("allreduce-timeout")["ranks"], [0, 1])
        self.assertIn("allreduce-timeout", procs[1].out)
        self.assertNotIn("watchdog", procs[0].err)

    def test_node_mode_blocked_in_group_end(self):
        # The same in node mode: the connection setup of a group blocks in ncclGroupEnd.
        nodes = [self.node(0, clean_env(**self.fake(host=0, ngpus=4, FAKE_NCCL_VERSION="22203"))),
                 self.node(1, clean_env(**self.fake(host=1, ngpus=4, FAKE_NCCL_VERSION="22203",
                                                    FAKE_NCCL_ALLREDUCE="hang",
                                                    FAKE_NCCL_RANKS="5")))]
        self.finish()
        self.assertExit(nodes, 5)
        self.assertEqual(nodes[0].ids(), ["allreduce-timeout"])
        self.assertEqual(nodes[0].finding("allreduce-timeout")["ranks"], list(range(8)))
        r0 = nodes[0].report["stage_results"][0]
        self.assertIn("ncclGroupEnd did not return by the deadline", r0["allreduce_error"])

    def test_abort_that_never_returns(self):
        # ncclCommAbort itself can block (NVIDIA/nccl#863, #1777): the stage gives up on
        # it, and the master prints its report instead of being ended by the watchdog.
        procs = {r: self.rank(r, 2, local=(r, 2),
                              **self.fake(ngpus=2, FAKE_NCCL_ABORT="hang",
                                          **({"FAKE_NCCL_INIT": "hang"} if r == 1 else {})))
                 for r in range(2)}
        self.finish()
        self.assertExit(procs.values(), 5)
        self.assertEqual(procs[0].ids(), ["nccl-init-timeout"])
        self.assertEqual(procs[0].finding("nccl-init-timeout")["ranks"], [0, 1])
        self.assertIn("nccl-init-timeout", procs[1].out)
        for p in procs.values():
            self.assertNotIn("watchdog", p.err)

    def test_abort_that_takes_seconds_ends_with_the_verdict(self):
        # A real abort of a communicator takes seconds (commReclaim, the proxy's stop).
        # The stage gives up waiting for it after a grace and takes the results; the
        # process must then end with _exit, not exit(): the fake, like the driver, kills
        # a process whose exit handlers run while an abort is still inside NCCL.
        procs = {r: self.rank(r, 2, local=(r, 2),
                              **self.fake(ngpus=2, FAKE_NCCL_ABORT_MS="2000",
                                          **({"FAKE_NCCL_INIT": "hang"} if r == 1 else {})))
                 for r in range(2)}
        self.finish()
        self.assertExit(procs.values(), 5)
        self.assertEqual(procs[0].ids(), ["nccl-init-timeout"])
        self.assertIn("nccl-init-timeout", procs[1].out)
        for p in procs.values():
            self.assertNotIn("exit() ran while ncclCommAbort", p.err)
            self.assertNotIn("watchdog", p.err)

    def test_abort_during_bootstraps_connect_retries(self):
        # A rank whose bootstrap connection is refused retries as NCCL's socket code
        # does: attempt k sleeps k x NCCL_SOCKET_RETRY_SLEEP_MSEC, and the sleep does not
        # look at the abort flag, so the abort returns only when the sleep under way ends
        # (up to 3.4 s at NCCL's defaults; seconds here, at 1000 ms a step). The verdict
        # still comes by the deadline, and the process ends with _exit, not under NCCL.
        procs = {r: self.rank(r, 2, local=(r, 2),
                              **self.fake(ngpus=2, NCCL_SOCKET_RETRY_SLEEP_MSEC="1000",
                                          **({"FAKE_NCCL_INIT": "refused"} if r == 1 else {})))
                 for r in range(2)}
        self.finish()  # every process by --timeout + GRACE
        self.assertExit(procs.values(), 5)
        self.assertEqual(procs[0].ids(), ["nccl-init-timeout"])
        self.assertEqual(procs[0].finding("nccl-init-timeout")["ranks"], [0, 1])
        self.assertIn("nccl-init-timeout", procs[1].out)
        for p in procs.values():
            self.assertNotIn("exit() ran while ncclCommAbort", p.err)
            self.assertNotIn("watchdog", p.err)

    def test_nccl_comm_blocking_in_the_environment_is_overridden(self):
        # NCCL_COMM_BLOCKING=1 overrides config.blocking (NCCL's envConfigOverride): init
        # would block in the stage's thread, and the deadline could abort nothing. The
        # stage sets 0 for itself, says so, and aborts the init that never completes.
        procs = {r: self.rank(r, 2, local=(r, 2),
                              **self.fake(ngpus=2, NCCL_COMM_BLOCKING="1",
                                          **({"FAKE_NCCL_INIT": "hang"} if r == 1 else {})))
                 for r in range(2)}
        self.finish()  # and no communicator left neither destroyed nor aborted
        self.assertExit(procs.values(), 5)
        self.assertEqual(procs[0].ids(), ["nccl-init-timeout"])
        for r in procs[0].report["stage_results"]:
            self.assertTrue(r["init_error"] == "" or "another thread" not in r["init_error"], r)
        for p in procs.values():
            self.assertIn("NCCL_COMM_BLOCKING=1 in the environment: set to 0 for this check", p.err)
        choice = procs[0].report["members"][0]["gpu"]["choice"]
        self.assertIn("NCCL_COMM_BLOCKING=1 overridden to 0 for this check", choice)

    def test_destroy_that_fails_is_aborted(self):
        # From NCCL 2.24 a ncclCommDestroy that finds an error returns with the thread
        # inside the group it started; an abort after it is only queued there, unless
        # the group is ended. The fake reports an abort that was never run.
        procs = {r: self.rank(r, 2, local=(r, 2),
                              **self.fake(ngpus=2, **({"FAKE_NCCL_DESTROY": "error"}
                                                      if r == 1 else {})))
                 for r in range(2)}
        self.finish()  # no "fake NCCL: misuse" (an abort left queued in an open group)
        self.assertExit(procs.values(), 0)

    def test_nccl_2_18_is_not_aborted_from_another_thread(self):
        # NCCL 2.18's group job is thread-local (NVIDIA/nccl#992, fixed in 2.19.1): an
        # abort from the watching thread frees a communicator under its init. A node of
        # two GPUs: rank 0's init and its abort hang in the stage's thread, and rank 1's
        # communicator, still in init, must be left alone; the verdict still comes.
        args = ["run", "--timeout", str(self.timeout), "--nproc-per-node", "2", "--nnodes", "1",
                "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port",
                str(self.port), "--host-name", "node0"]
        from harness import Proc
        env = clean_env(**self.fake(ngpus=2, FAKE_NCCL_VERSION="21806", FAKE_NCCL_INIT="hang",
                                    FAKE_NCCL_ABORT="hang", FAKE_NCCL_RANKS="0"))
        p = Proc(args, env, self.tmp.name, "node0")
        self.procs.append(p)
        self.finish()
        self.assertExit([p], 5)
        self.assertEqual(p.ids(), ["nccl-init-timeout"])
        self.assertIn("NCCL 2.18.6 cannot abort a communicator from another thread", p.err)

    def test_node_mode_abort_is_one_teardown_by_the_last_communicator(self):
        # In node mode one process holds a communicator per GPU, torn down together by
        # the last of them to be aborted (NCCL's commReclaim: intraComm0's count): the
        # earlier aborts return at once, the last one pays the whole teardown. Every one
        # must be aborted for it to happen at all, and the verdict still comes in time.
        args = ["run", "--timeout", str(self.timeout), "--nproc-per-node", "2", "--nnodes", "1",
                "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port",
                str(self.port), "--host-name", "node0"]
        from harness import Proc
        env = clean_env(**self.fake(ngpus=2, FAKE_NCCL_INIT="hang", FAKE_NCCL_ABORT_MS="1500"))
        p = Proc(args, env, self.tmp.name, "node0")
        self.procs.append(p)
        self.finish()
        self.assertExit([p], 5)
        self.assertEqual(p.ids(), ["nccl-init-timeout"])
        self.assertIn("fake NCCL: the last of 2 communicators of this process aborted tears "
                      "them all down", p.err)
        self.assertNotIn("exit() ran while ncclCommAbort", p.err)
        self.assertNotIn("watchdog", p.err)

    def test_failed_result_copy_still_agrees_on_the_bandwidth_test(self):
        # Rank 1's all-reduce completes but its total cannot be read back: it still
        # takes part in the round that agrees on the timed all-reduce, so rank 0 is told
        # at once instead of waiting in that round until the deadline.
        procs = {r: self.rank(r, 2, local=(r, 2), extra=("--bandwidth", "64K"),
                              **self.fake(ngpus=2, **({"FAKE_CUDA_COPY": "fail-to-host"}
                                                      if r == 1 else {})))
                 for r in range(2)}
        self.finish()
        self.assertExit(procs.values(), 5)
        self.assertEqual(procs[0].ids(), ["allreduce-failed"])
        f = procs[0].finding("allreduce-failed")
        self.assertEqual(f["ranks"], [1])
        self.assertIn("rank 1: copying the result from the GPU", f["message"])
        for p in procs.values():
            self.assertLess(p.elapsed, self.timeout - 1.5, f"{p.name} waited for the deadline")

    def test_a_stale_nccl_warning_is_not_this_calls(self):
        # ncclGetLastError is one buffer for the process, never cleared: a call that
        # fails without a warning of its own must not be blamed on an older one.
        stale = "fake: an old warning from the first NCCL call"
        p = self.rank(0, 1, local=(0, 1),
                      **self.fake(ngpus=1, FAKE_NCCL_STALE_WARN=stale,
                                  FAKE_NCCL_ALLREDUCE="fail-silent"))
        self.finish()
        self.assertExit([p], 5)
        msg = p.finding("allreduce-failed")["message"]
        self.assertIn("rank 0: ncclAllReduce: unhandled system error", msg)
        self.assertNotIn(f"details) ({stale})", msg)
        self.assertIn(f"NCCL's last error in this process, from before this call: {stale}", msg)

    def test_one_rank_bandwidth_has_no_bus_bandwidth_floor(self):
        # One rank: NCCL's in-place all-reduce does no work (ncclLaunchOneRank), and bus
        # bandwidth (algbw * 2(n-1)/n) is 0. Timed out of place, the figure is a copy's,
        # and --min-busbw is not applied (the report says so).
        p = self.rank(0, 1, local=(0, 1), extra=("--bandwidth", "1M", "--min-busbw", "1"),
                      **self.fake(ngpus=1, FAKE_NCCL_BUSBW="3.5"))
        self.finish()
        self.assertExit([p], 0)
        bw = p.report["stage_results"][0]["bandwidth"]
        self.assertGreater(bw["algbw_gbps"], 0)
        self.assertLess(bw["algbw_gbps"], 3.5 * 1.05)
        self.assertIn("one rank: bus bandwidth is undefined, --min-busbw not applied",
                      p.report["gpu_stage"])

    def test_bandwidth_is_timed_in_separate_launches(self):
        # NCCL makes one plan of a group's collectives: 20 all-reduces in one group pay
        # one launch, and the figure is not nccl-tests' busbw. Each launch costs 200 us
        # on the fake's GPU: timed as nccl-tests does, one all-reduce takes at least that.
        bytes_, launch_s, busbw = 65536, 200e-6, 100e9
        procs = {r: self.rank(r, 2, local=(r, 2), extra=("--bandwidth", "64K"),
                              **self.fake(ngpus=2, FAKE_NCCL_LAUNCH_US="200")) for r in range(2)}
        self.finish()
        self.assertExit(procs.values(), 0)
        ceiling = bytes_ / (launch_s + bytes_ / busbw) / 1e9  # n = 2: busbw = algbw
        for r in procs[0].report["stage_results"]:
            self.assertLess(r["bandwidth"]["busbw_gbps"], ceiling * 1.05)
            self.assertIn("separate launches", r["bandwidth"]["method"])
            self.assertIn("non-blocking communicator", r["bandwidth"]["method"])

    # ----- what the driver and NCCL say, said right -----

    def test_cuda_visible_devices_hides_every_gpu(self):
        # cuInit fails with CUDA_ERROR_NO_DEVICE: the driver is there, the GPUs are hidden.
        procs = self.job4({1: {"CUDA_VISIBLE_DEVICES": ""}})
        self.finish()
        self.assertExit(procs.values(), 5)
        self.assertEqual(procs[0].ids(), ["gpu-missing"])
        f = procs[0].finding("gpu-missing")
        self.assertEqual(f["ranks"], [1])
        self.assertIn("no GPU visible (CUDA_VISIBLE_DEVICES=)", f["message"])
        self.assertIn("no CUDA-capable device is detected", f["message"])

    def test_one_gpu_a_task_past_its_local_rank_is_said(self):
        # Slurm's --gpus-per-task=1: each process sees only its own GPU, as device 0, while
        # LOCAL_RANK counts 0-1. The stage passes on two different GPUs; the warning says
        # that set_device(LOCAL_RANK) would not.
        procs = {r: self.rank(r, 2, local=(r, 2),
                              **self.fake(ngpus=2, CUDA_VISIBLE_DEVICES=str(r)))
                 for r in range(2)}
        self.finish()
        self.assertExit(procs.values(), 0)
        rep = procs[0].report
        self.assertEqual([f["id"] for f in job_findings(rep)], ["local-rank-wrapped"])
        f = procs[0].finding("local-rank-wrapped")
        self.assertEqual((f["severity"], f["ranks"]), ("warning", [1]))
        self.assertIn("has LOCAL_RANK 1 but sees 1 GPU (rank 1: CUDA_VISIBLE_DEVICES=1)",
                      f["message"])
        uuids = [m["gpu"]["devices"][0]["uuid"] for m in rep["members"]]
        self.assertEqual(sorted(uuids), sorted(gpus(0, 2).split(",")))
        self.assertTrue(rep["gpu_stage"].startswith("passed: NCCL init"), rep["gpu_stage"])

    def test_nccl_printing_its_version_stays_out_of_the_report(self):
        # NCCL 2.14-2.21 print "NCCL version ..." to stdout from the communicator's rank 0
        # at NCCL_DEBUG=VERSION and above (rankcheck sets INFO): the fake does as they do.
        # stdout carries only the report (--json -: one JSON document), the banner goes
        # to stderr; in text mode the report is whole and the banner outside it.
        import json
        for extra in (["--json", "-"], []):
            env = {**clean_env(RANK=0, WORLD_SIZE=1, LOCAL_RANK=0, MASTER_ADDR="127.0.0.1",
                               MASTER_PORT=free_port()),
                   **self.fake(ngpus=1, FAKE_NCCL_VERSION="22105", FAKE_NCCL_CUDA="12040")}
            r = subprocess.run([BIN, "run", "--timeout", "10", *extra], env=env,
                               capture_output=True, text=True, timeout=40)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertNotIn("NCCL version", r.stdout)
            self.assertIn("NCCL version 2.21.5+cuda12.4\n", r.stderr)
            if extra:
                rep = json.loads(r.stdout)
                self.assertEqual((rep["verdict"], rep["stage_results"][0]["init_ok"]),
                                 ("pass", True))
            else:
                self.assertTrue(r.stdout.startswith("rankcheck "), r.stdout)
                self.assertIn("PASS", r.stdout)

    def test_a_driver_before_r470_without_cuDeviceGetUuid_v2(self):
        # R450/R460 have cuDeviceGetUuid only: the stage names each GPU by it and runs.
        old = os.path.join(os.path.dirname(FAKE), "libfakegpu_r460.so")
        self.assertTrue(os.path.exists(old), old)
        procs = {r: self.rank(r, 2, local=(r, 2),
                              **self.fake(ngpus=2, RANKCHECK_CUDA_LIB=old, RANKCHECK_NCCL_LIB=old))
                 for r in range(2)}
        self.finish()
        self.assertExit(procs.values(), 0)
        rep = procs[0].report
        self.assertEqual(job_findings(rep), [])
        uuids = sorted(m["gpu"]["devices"][0]["uuid"] for m in rep["members"])
        self.assertEqual(uuids, sorted(gpus(0, 2).split(",")))
        self.assertTrue(rep["gpu_stage"].startswith("passed: NCCL init"), rep["gpu_stage"])

    def test_a_path_only_the_tree_takes_is_connected_at_init(self):
        # NCCL 2.22+ connect at init only what every collective needs, each algorithm's
        # peers at its first collective; the one-element all-reduce takes the ring. The
        # stage runs with NCCL_RUNTIME_CONNECT=0: init connects the tree too, and a path
        # only the tree takes fails the check instead of the job's first big collective.
        for users in ({}, {"NCCL_RUNTIME_CONNECT": "1"}):
            # Rank 2's tree peer is the one it cannot reach.
            procs = self.job4({r: {"FAKE_NCCL_CONNECT": "fail-tree", "FAKE_NCCL_RANKS": "2",
                                   **users} for r in range(4)})
            self.finish(procs.values())
            self.assertExit(procs.values(), 5)
            self.assertEqual(procs[0].ids()[0], "nccl-init-failed", users)
            f = procs[0].finding("nccl-init-failed")
            self.assertEqual(f["ranks"], [2])
            self.assertIn("the tree's connections failed at init", f["message"])
            if users:  # the user's value is overridden for the check, and said
                self.assertIn("NCCL_RUNTIME_CONNECT=1 in the environment: set to 0 for this "
                              "check", procs[1].err)
        # What the report says of a passing stage.
        procs = self.job4()
        self.finish(procs.values())
        self.assertExit(procs.values(), 0)
        self.assertIn("(slowest rank, every algorithm connected)", procs[0].report["gpu_stage"])

    def test_two_mig_slices_of_one_gpu(self):
        # Two MIG slices of one GPU: two UUIDs, one PCI bus id, and NCCL refuses them.
        slices = "GPU-0a0b0c0d-0000-0000-0000-000000000001/MIG-11111111-2222-3333-4444-555555555555," \
                 "GPU-0a0b0c0d-0000-0000-0000-000000000001/MIG-66666666-7777-8888-9999-000000000000"
        procs = {r: self.rank(r, 2, local=(r, 2), **self.fake(FAKE_GPUS=slices)) for r in range(2)}
        self.finish()
        self.assertExit(procs.values(), 3)
        f = procs[0].finding("duplicate-gpu")
        self.assertEqual(f["ranks"], [0, 1])
        self.assertIn("MIG-11111111-2222-3333-4444-555555555555", f["message"])
        self.assertIn("MIG-66666666-7777-8888-9999-000000000000", f["message"])
        self.assertIn("00000000:10:00.0", f["message"])
        uuids = [m["gpu"]["devices"][0]["uuid"] for m in procs[0].report["members"]]
        self.assertTrue(all(u.startswith("MIG-") for u in uuids), uuids)

    def test_node_mode_errors_are_not_each_others(self):
        # ncclGetLastError is one buffer per process: in node mode its text is the
        # process's last error, not a given rank's, and the report says so.
        nodes = [self.node(0, clean_env(**self.fake(host=0, ngpus=4))),
                 self.node(1, clean_env(**self.fake(host=1, ngpus=4, FAKE_NCCL_INIT="fail",
                                                    FAKE_NCCL_RANKS="5,6")))]
        self.finish()
        self.assertExit(nodes, 5)
        f = nodes[0].finding("nccl-init-failed")
        self.assertEqual(f["ranks"], [5, 6])
        self.assertIn("NCCL init failed for ranks 5-6 on node1: unhandled system error", f["message"])
        self.assertIn("NCCL's last error in this process: fake: init failed as asked", f["message"])
        self.assertEqual(nodes[0].finding("nccl-init-timeout")["ranks"], [0, 1, 2, 3, 4, 7])

    def test_node_mode_bandwidth_call_refused(self):
        # In node mode the timed all-reduces of a node are one group; a call refused in
        # it must still end the group, or the aborts that follow are only queued.
        nodes = [self.node(0, clean_env(**self.fake(host=0, ngpus=4)), "--bandwidth", "64K"),
                 self.node(1, clean_env(**self.fake(host=1, ngpus=4,
                                                    FAKE_NCCL_ALLREDUCE="bandwidth-fail-now",
                                                    FAKE_NCCL_RANKS="5")), "--bandwidth", "64K")]
        self.finish()
        self.assertExit(nodes, 5)
        f = nodes[0].finding("allreduce-failed")
        self.assertEqual(f["ranks"], [4, 5, 6, 7])
        self.assertIn("rank 5: the timed all-reduce of 64 KiB (--bandwidth): ncclAllReduce: "
                      "unhandled system error", f["message"])
        self.assertEqual(nodes[0].finding("allreduce-timeout")["ranks"], [0, 1, 2, 3])
        self.assertNotIn("allreduce-wrong-result", nodes[0].ids())

    def test_driver_version_from_the_library_name(self):
        # No /proc/driver/nvidia/version (a container may not have it): the version the
        # driver's own file name carries, libcuda.so.1 -> libcuda.so.580.65.06.
        if os.path.exists("/proc/driver/nvidia/version"):
            self.skipTest("this machine has an NVIDIA kernel module: its banner is used")
        lib = os.path.join(self.fake_dir, "libcuda.so.580.65.06")
        shutil.copyfile(FAKE, lib)
        os.symlink(lib, os.path.join(self.fake_dir, "libcuda.so.1"))
        r = subprocess.run([BIN, "env", "--json", "--rank", "0", "--world-size", "1"],
                           env=clean_env(**self.fake(ngpus=1, RANKCHECK_CUDA_LIB=os.path.join(
                               self.fake_dir, "libcuda.so.1"))),
                           capture_output=True, text=True, timeout=30)
        import json
        gpu = json.loads(r.stdout)["self"]["gpu"]
        self.assertEqual(gpu["state"], "usable")
        self.assertEqual(gpu["driver"], "580.65.06")

    # ----- NCCL's own words (NCCL_DEBUG_FILE), read back after the stage -----

    def two_hosts(self, per_rank=None, **env):
        """Ranks 0-1 on host h0 and 2-3 on h1, two fake GPUs each; per_rank={rank: {env}}."""
        per_rank = per_rank or {}
        return {r: self.rank(r, 4, local=(r % 2, 2), host=f"h{r // 2}",
                             **self.fake(host=r // 2, ngpus=2, **env, **per_rank.get(r, {})))
                for r in range(4)}

    def left_behind(self):
        """rankcheck's own NCCL debug files still in the fake's TMPDIR."""
        return [n for n in os.listdir(self.fake_dir) if n.startswith("rankcheck-nccl-")]

    def test_init_failing_on_an_ib_queue_pair_is_told_in_nccls_words(self):
        procs = self.two_hosts({3: {"FAKE_NCCL_INIT": "fail-ib"}}, FAKE_NCCL_NET="IB")
        self.finish()
        self.assertExit(procs.values(), 5)
        self.assertEqual(procs[0].ids(), ["nccl-init-failed", "nccl-init-timeout"])
        f = procs[0].finding("nccl-init-failed")
        self.assertEqual((f["ranks"], f["hosts"]), ([3], ["h1"]))
        self.assertEqual(
            f["message"],
            "NCCL init failed for rank 3 on h1: unhandled system error (run with NCCL_DEBUG=INFO "
            "for details) (Call to ibv_modify_qp failed with 110 Connection timed out, on dev "
            "mlx5_0:1, curr state INIT, next state RTR, local GID index 3, local GID "
            "::ffff:10.0.0.1, remote GID ::ffff:10.0.0.2); NCCL's warning reads as a network "
            "error (nccl-network-error)")
        # The fix is a network error's: NCCL already said why, no rerun is asked for.
        self.assertNotIn("NCCL_DEBUG", f["hint"])
        r3 = [r for r in procs[0].report["stage_results"] if r["rank"] == 3][0]
        self.assertEqual(r3["nccl_warn"],
                         "Call to ibv_modify_qp failed with 110 Connection timed out, on dev "
                         "mlx5_0:1, curr state INIT, next state RTR, local GID index 3, local GID "
                         "::ffff:10.0.0.1, remote GID ::ffff:10.0.0.2")
        self.assertEqual((r3["nccl_finding"], r3["nccl_net"]), ("nccl-network-error", "IB"))
        # Rank 3's own line says so too, and no process left its file behind.
        self.assertIn("nccl-init-failed", procs[3].out)
        self.assertEqual(self.left_behind(), [])

    def test_a_log_in_the_users_nccl_debug_file_is_not_emptied(self):
        # NCCL opens NCCL_DEBUG_FILE with fopen "w": a name without %p that holds the
        # failed job's log (the one diagnose reads) would be emptied by the check.
        log = os.path.join(self.fake_dir, "job-nccl.log")
        with open(log, "w") as f:
            f.write("h0:1:1 [0] NCCL INFO the failed job's own lines\n")
        procs = self.two_hosts(NCCL_DEBUG="INFO", NCCL_DEBUG_FILE=log, FAKE_NCCL_NET="IB")
        self.finish()
        self.assertExit(procs.values(), 0)
        with open(log) as f:
            self.assertEqual(f.read(), "h0:1:1 [0] NCCL INFO the failed job's own lines\n")
        for p in procs.values():
            self.assertIn(f"NCCL_DEBUG_FILE={log} names {log}, which holds a log already", p.err)
        # NCCL's words still came back, from a file of rankcheck's own, gone since.
        self.assertEqual([r["nccl_net"] for r in procs[0].report["stage_results"]], ["IB"] * 4)
        self.assertEqual(self.left_behind(), [])

    def test_a_stale_warning_in_a_file_nccl_never_opened_is_not_quoted(self):
        # At NCCL_DEBUG=VERSION NCCL opens no file: last week's warning in the user's
        # NCCL_DEBUG_FILE is not what this run's init failed of.
        stale = os.path.join(self.fake_dir, "old-nccl.log")
        with open(stale, "w") as f:
            f.write("h0:1:1 [0] misc/ibvwrap.cc:307 NCCL WARN Call to ibv_modify_qp failed "
                    "with 110 Connection timed out, on dev mlx5_0:1\n")
        procs = self.two_hosts({1: {"FAKE_NCCL_INIT": "fail"}}, NCCL_DEBUG="VERSION",
                               NCCL_DEBUG_FILE=stale)
        self.finish()
        self.assertExit(procs.values(), 5)
        f = procs[0].finding("nccl-init-failed")
        self.assertEqual(f["ranks"], [1])
        self.assertNotIn("ibv_modify_qp", f["message"])
        self.assertFalse(any(r.get("nccl_warn") for r in procs[0].report["stage_results"]))

    def test_users_nccl_debug_file_is_kept_and_read(self):
        user_file = os.path.join(self.fake_dir, "user-nccl.%h.%p.log")
        procs = self.two_hosts(NCCL_DEBUG="INFO", NCCL_DEBUG_FILE=user_file, FAKE_NCCL_NET="IB")
        self.finish()
        self.assertExit(procs.values(), 0)
        theirs = sorted(n for n in os.listdir(self.fake_dir) if n.startswith("user-nccl."))
        self.assertEqual(len(theirs), 4)  # one a process, where NCCL put it, not removed
        pids = {str(p.popen.pid) for p in procs.values()}
        self.assertEqual({n.split(".")[-2] for n in theirs}, pids)
        with open(os.path.join(self.fake_dir, theirs[0])) as f:
            self.assertIn("NCCL INFO Using network IB", f.read())
        rep = procs[0].report
        self.assertEqual([r["nccl_net"] for r in rep["stage_results"]], ["IB"] * 4)
        self.assertEqual(rep["nccl_networks"], {"h0": "IB", "h1": "IB"})
        for p in procs.values():  # their file has NCCL's lines: stderr does not repeat them
            self.assertNotIn("NCCL INFO", p.err)
        self.assertEqual(self.left_behind(), [])

    def test_users_nccl_debug_without_a_file_is_printed_after_the_stage(self):
        procs = self.two_hosts(NCCL_DEBUG="INFO")
        self.finish()
        self.assertExit(procs.values(), 0)
        for p in procs.values():
            self.assertIn("NCCL INFO Using network Socket", p.err)
            self.assertNotIn("NCCL INFO", p.out)  # not on stdout, among the report's lines
        self.assertEqual(procs[0].report["nccl_networks"], {"h0": "Socket", "h1": "Socket"})
        self.assertEqual(self.left_behind(), [])

    def test_hosts_whose_nccl_chose_different_networks(self):
        procs = self.two_hosts({r: {"FAKE_NCCL_NET": "IB" if r < 2 else "Socket"}
                                for r in range(4)})
        self.finish()
        rep = procs[0].report
        self.assertEqual(rep["nccl_networks"], {"h0": "IB", "h1": "Socket"})
        # The same fact, the same id as the check before NCCL and diagnose give it.
        f = procs[0].finding("nccl-net-mismatch")
        self.assertEqual((f["severity"], f["ranks"], f["hosts"]), ("error", [2, 3], ["h1"]))
        self.assertEqual(f["message"], "NCCL chose different networks: IB for ranks 0-1 on h0 but "
                                       "Socket for ranks 2-3 on h1")
        self.assertExit(procs.values(), 3)
        self.assertTrue(rep["gpu_stage"].startswith("passed: NCCL init"), rep["gpu_stage"])
        # The member table's column, one network a member.
        self.assertRegex(procs[0].out, r"rank +host +local .*nccl net +joined")
        self.assertRegex(procs[0].out, r"\n  3 +h1 .* Socket +\+")

    def test_the_stages_nccl_file_is_gone_after_the_run(self):
        procs = self.job4()
        self.finish()
        self.assertExit(procs.values(), 0)
        # NCCL wrote there (the network it chose was read back), and the file is gone.
        rep = procs[0].report
        self.assertEqual({r["nccl_net"] for r in rep["stage_results"]}, {"Socket"})
        self.assertEqual(self.left_behind(), [])
        self.assertEqual(job_findings(rep), [])

    def node(self, node, env, *extra):
        args = ["run", "--timeout", str(self.timeout), "--nproc-per-node", "4", "--nnodes", "2",
                "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port",
                str(self.port), "--host-name", f"node{node}", *extra]
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

    @unittest.skipUnless(REAL_NCCL and os.path.exists(REAL_NCCL), "no NCCL library on this machine")
    @unittest.skipIf(os.path.exists("/proc/driver/nvidia/version"),
                     "a real driver here: the real NCCL's init could succeed")
    def test_real_nccls_own_warning_is_quoted(self):
        """The real NCCL writes its words where rankcheck told it (/proc/self/fd/N), in its
        own format: with the fake CUDA for the inventory and no driver for NCCL's own CUDA
        runtime, its init fails and says why, and the finding quotes it."""
        tmp = tempfile.mkdtemp(prefix="rankcheck-gpu-test-")
        self.addCleanup(shutil.rmtree, tmp, True)
        report = os.path.join(tmp, "r.json")
        port = free_port()
        r = subprocess.run([BIN, "run", "--timeout", "8", "--json", report, "--nccl-lib", REAL_NCCL],
                           env=clean_env(RANKCHECK_CUDA_LIB=FAKE, FAKE_GPUS=gpus(0, 1), RANK=0,
                                         WORLD_SIZE=1, MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                                         TMPDIR=tmp),
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 5, r.stderr)
        import json
        with open(report) as f:
            rep = json.load(f)
        f = [x for x in rep["findings"] if x["id"] == "nccl-init-failed"][0]
        r0 = rep["stage_results"][0]
        self.assertNotEqual(r0.get("nccl_warn", ""), "", r.stderr)
        self.assertIn(r0["nccl_warn"].split("'")[0], f["message"])  # "Cuda failure ..."
        self.assertEqual(os.listdir(tmp), ["r.json"])  # nothing of NCCL's left behind

    def test_binary_needs_no_cuda_nccl_fmt_or_libstdcxx(self):
        if EMULATED:
            self.skipTest(f"BIN starts {EMULATED}; scripts/release.sh read the binary's own needs")
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
