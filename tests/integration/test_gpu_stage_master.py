"""The master's side of the GPU stage, with real processes on loopback: when it ends
the stage, whom it blames, and that every process gets its verdict.

Four ranks on two hosts (--host-name h0 for ranks 0-1, h1 for 2-3) with the fake
CUDA driver and NCCL of tests/fake/fake_gpu.cc (see test_gpu.py). FAKE_NCCL_DONE_LATE
makes rank 2's one-element all-reduce complete late, or never, while it still takes
part: every other rank's completes at once. A rank that is still connected has until
the stage's deadline; a late result is a result, not silence.
"""

import os
import shutil
import tempfile
import unittest

from harness import RankcheckTest, free_port, job_findings
from test_gpu import FAKE, gpus, stage_built


class FakeGpuTest(RankcheckTest):
    """Ranks on the fake GPU libraries, with a folder of their own for its files."""
    gpu = True
    timeout = 10.0

    def setUp(self):
        super().setUp()
        self.fake_dir = tempfile.mkdtemp(prefix="rankcheck-gpu-test-")

    def tearDown(self):
        super().tearDown()
        shutil.rmtree(self.fake_dir, ignore_errors=True)

    def job(self, layout, version, host_env=None, **env):
        """Ranks on hosts h0, h1, ... as `layout` gives them per host (2, 1: ranks 0-1 on
        h0, rank 2 on h1), each loading the fake NCCL as release `version`, with `env`
        and what host_env(h) adds for its host."""
        world, first, procs = sum(layout), 0, {}
        for h, n in enumerate(layout):
            for local in range(n):
                r = first + local
                e = dict(RANKCHECK_CUDA_LIB=FAKE, RANKCHECK_NCCL_LIB=FAKE, FAKE_GPUS=gpus(h, n),
                         TMPDIR=self.fake_dir, FAKE_NCCL_VERSION=str(version), **env,
                         **(host_env(h) if host_env else {}))
                procs[r] = self.rank(r, world, host=f"h{h}", local=(local, n), **e)
            first += n
        self.finish()
        return procs


@unittest.skipUnless(stage_built(), "rankcheck was built without the CUDA/NCCL headers")
class StageMaster(FakeGpuTest):

    def two_hosts(self, late, extra=()):
        """Ranks 0-3, two to a host; rank 2's all-reduce completes `late` ("never", or seconds)."""
        procs = {}
        for r in range(4):
            env = dict(RANKCHECK_CUDA_LIB=FAKE, RANKCHECK_NCCL_LIB=FAKE,
                       FAKE_GPUS=gpus(r // 2, 2), TMPDIR=self.fake_dir,
                       FAKE_NCCL_DONE_LATE=f"2:{late}")
            procs[r] = self.rank(r, 4, host=f"h{r // 2}", local=(r % 2, 2), extra=extra, **env)
        self.finish()
        for p in procs.values():
            self.assertNotIn("fake NCCL: misuse", p.err, f"{p.name}:\n{p.err}")
        return procs

    def check_stuck_allreduce(self, procs):
        master = procs[0]
        self.assertExit(procs.values(), 5)
        self.assertEqual(master.ids(), ["allreduce-timeout"], master.out)
        f = master.finding("allreduce-timeout")
        self.assertEqual((f["ranks"], f["hosts"]), ([2], ["h1"]))
        self.assertIn("the all-reduce did not complete within the deadline for rank 2 on h1",
                      f["message"])
        self.assertNotIn("sent no result", master.out)
        # Rank 2's own result is in: its init finished, its all-reduce timed out.
        results = {r["rank"]: r for r in master.report["stage_results"]}
        self.assertEqual(sorted(results), [0, 1, 2, 3])
        self.assertTrue(results[2]["init_ok"])
        self.assertTrue(results[2]["allreduce_timed_out"])
        for r in (0, 1, 3):
            self.assertTrue(results[r]["allreduce_ok"], results[r])
        # Every member was sent the verdict, and says it in its one line.
        for r in (1, 2, 3):
            out = procs[r].out
            self.assertIn("[allreduce-timeout]", out, f"rank {r}:\n{out}\n{procs[r].err}")
            self.assertIn(f"this is rank {r} on h{r // 2}", out)
            self.assertNotIn("master-lost", out)

    def test_stuck_allreduce_on_one_rank_direct(self):
        # Rank 2's init finished; its all-reduce never completes while the others' do.
        # The master waits for its result until the stage's deadline, and says so.
        self.check_stuck_allreduce(self.two_hosts("never", extra=("--no-relay",)))

    def test_stuck_allreduce_on_one_rank_through_host_relays(self):
        # The same with the default host relays: the relayed members get the final
        # verdict too (exit 5), not a closed connection (exit 4, master-lost).
        procs = self.two_hosts("never")
        self.assertGreater(procs[0].report["connections"]["relayed_members"], 0)
        self.check_stuck_allreduce(procs)

    def test_late_result_before_the_deadline_is_a_result(self):
        # Rank 2's all-reduce completes 3 s after the others': long after their results,
        # well before the stage's deadline. It is counted, and the job passes.
        for extra in ((), ("--no-relay",)):
            with self.subTest(extra=extra):
                self.procs.clear()
                self.port = free_port()
                procs = self.two_hosts("3", extra=extra)
                self.assertExit(procs.values(), 0)
                rep = procs[0].report
                self.assertEqual(job_findings(rep), [])
                results = {r["rank"]: r for r in rep["stage_results"]}
                self.assertEqual(sorted(results), [0, 1, 2, 3])
                self.assertTrue(results[2]["allreduce_ok"])
                self.assertEqual(results[2]["got"], 10)  # 1+2+3+4
                self.assertGreater(results[2]["allreduce_us"], 2.5e6)
                for r in (1, 2, 3):
                    self.assertIn("PASS", procs[r].out)


@unittest.skipUnless(stage_built(), "rankcheck was built without the CUDA/NCCL headers")
class NcclKnownFaults(FakeGpuTest):
    """The NCCL release each host loads (the fake's FAKE_NCCL_VERSION) against the known
    faults' table (src/nccl/known_faults.cc), and hosts with different numbers of ranks."""

    def test_uneven_hosts_with_2_31_2_fail_before_the_stage(self):
        # NCCL 2.31.2 deadlocks in ncclCommInitRank with 7+8 ranks (NVIDIA/nccl#2385): with
        # 2+1 here it is an error, and the GPU stage, which would hang on it, is not run.
        procs = self.job((2, 1), 23102)
        self.assertExit(procs.values(), 3)
        master = procs[0]
        self.assertEqual(master.ids(), ["uneven-ranks-per-host"], master.out)
        f = master.finding("uneven-ranks-per-host")
        self.assertEqual((f["severity"], f["hosts"], f["ranks"]), ("error", ["h1"], [2]))
        self.assertIn("2 ranks on h0, 1 rank on h1", f["message"])
        self.assertIn("NVIDIA/nccl#2385", f["message"])
        self.assertEqual(master.report["stage_results"], [])
        self.assertIn("[uneven-ranks-per-host]", procs[2].out)

    def test_uneven_hosts_elsewhere_warn_and_run_the_stage(self):
        procs = self.job((2, 1), 22809)
        self.assertExit(procs.values(), 0)
        master = procs[0]
        self.assertEqual(master.ids(), ["uneven-ranks-per-host"], master.out)
        self.assertEqual(master.finding("uneven-ranks-per-host")["severity"], "warning")
        self.assertEqual(len(master.report["stage_results"]), 3)

    def test_2_27_7_warns_of_its_ras_segfault_unless_ras_is_off(self):
        procs = self.job((2, 2), 22707)
        self.assertExit(procs.values(), 0)
        master = procs[0]
        self.assertEqual(master.ids(), ["nccl-known-fault"], master.out)
        f = master.finding("nccl-known-fault")
        self.assertEqual((f["severity"], f["ranks"]), ("warning", [0, 1, 2, 3]))
        self.assertIn("NVIDIA/nccl#1996", f["message"])
        # Each member says its machine; x86_64 is no Arm host, so 2.28.9's row is silent.
        self.assertEqual({m["arch"] for m in master.report["members"]}, {os.uname().machine})
        self.procs.clear()
        self.port = free_port()
        procs = self.job((2, 2), 22707, NCCL_RAS_ENABLE="0")
        self.assertExit(procs.values(), 0)
        self.assertEqual(procs[0].ids(), [], procs[0].out)



@unittest.skipUnless(stage_built(), "rankcheck was built without the CUDA/NCCL headers")
class IbCounters(FakeGpuTest):
    """The IB ports' error counters, read at each process's start and after its GPU
    stage: each host reads its own copy of the ib-cx7 fixture (RANKCHECK_SYSFS_ROOT),
    and the fake NCCL's init writes a counter on one host's copy, as a flapping link's
    traffic would (FAKE_NCCL_INIT_WRITE)."""

    def test_a_counter_that_moves_during_the_stage_is_named_with_its_host(self):
        fixture = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures",
                               "sysfs", "ib-cx7")
        roots = []
        for h in range(2):
            root = os.path.join(self.fake_dir, f"root{h}")
            shutil.copytree(fixture, root, symlinks=True)
            counters = os.path.join(root, "sys/class/infiniband/mlx5_0/ports/1/counters")
            os.makedirs(counters, exist_ok=True)
            for name in ("link_downed", "symbol_error", "link_error_recovery", "port_rcv_errors"):
                with open(os.path.join(counters, name), "w") as f:
                    f.write("0\n")
            roots.append(root)
        moved = os.path.join(roots[1], "sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error")
        procs = self.job((2, 2), 22809, host_env=lambda h: {"RANKCHECK_SYSFS_ROOT": roots[h]},
                         FAKE_NCCL_INIT_WRITE=f"{moved}=12\n", FAKE_NCCL_RANKS="2")
        self.assertExit(procs.values(), 0)
        master = procs[0]
        self.assertEqual(master.ids(), ["ib-port-errors"], master.out)
        f = master.finding("ib-port-errors")
        self.assertEqual((f["severity"], f["hosts"], f["ranks"]), ("warning", ["h1"], [2, 3]))
        self.assertIn("mlx5_0:1 symbol_error +12 on h1", f["message"])
        results = {x["rank"]: x for x in master.report["stage_results"]}
        self.assertEqual(results[3]["ib_counters_moved"], "mlx5_0:1 symbol_error +12")
        self.assertNotIn("ib_counters_moved", results[0])

if __name__ == "__main__":
    unittest.main()
