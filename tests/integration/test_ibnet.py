"""NCCL's data network per host (InfiniBand/RoCE, plugins, memlock), read from sysfs,
and /dev/shm for its SHM transport:
each namespace "host" reads its own fixture tree (tests/fixtures/sysfs, through
RANKCHECK_SYSFS_ROOT) and the master compares them. No IB device is needed: what
these tests show holds for the fixtures' layouts, which README.md there names."""

import json
import os
import subprocess
import tempfile
import time
import unittest

from harness import BIN, clean_env
from test_gpu import FAKE, gpus, stage_built
from test_gpu_stage_master import FakeGpuTest
from netns import ClusterCase

TIMEOUT = 4.0
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "sysfs")
# NCCL_BUFFSIZE=64 KiB: NCCL's registrations then need about 1 MiB of locked memory,
# below the 8 MiB containers commonly allow (a test may lower the limit, not raise it).
SMALL_BUFFERS = {"NCCL_BUFFSIZE": "65536"}
# NCCL_TOPO_FILE's fixtures; a relative path is opened from the working directory, as
# NCCL opens it, not under RANKCHECK_SYSFS_ROOT.
TOPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "topo")
TOPO_GOOD = os.path.relpath(os.path.join(TOPO, "h100.xml"))
TOPO_TABS = os.path.relpath(os.path.join(TOPO, "tabs.xml"))


def root(name):
    return os.path.realpath(os.path.join(FIXTURES, name))


def with_memlock(limit_bytes, argv, ipc_lock=False):
    """argv run under a lower RLIMIT_MEMLOCK (None: as it is), without CAP_IPC_LOCK
    unless `ipc_lock` (the tests run as root, and the kernel does not hold a process
    with it to the limit: setpriv drops it from the bounding set, so the exec'd
    process does not get it)."""
    if limit_bytes is None:
        return argv
    drop = [] if ipc_lock else ["setpriv", "--bounding-set", "-ipc_lock", "--"]
    return [*drop, "sh", "-c", f'ulimit -l {limit_bytes // 1024} && exec "$@"', "sh", *argv]


class IbNet(ClusterCase):
    HOSTS, PER_HOST = 3, 1

    def run_job(self, fixtures, memlock=None, env=None, ipc_lock=False):
        """One rank per host, host i reading fixtures[i]; {rank: (rc, report, out, err)}."""
        memlock = memlock or {}
        self.cluster.up()
        procs = {}
        for r, name in enumerate(fixtures):
            argv = [BIN, "run", "--no-gpu", "--timeout", str(TIMEOUT), "--host-name", f"h{r}",
                    "--json", self.json(r)]
            e = self.slurm_env(r, RANKCHECK_SYSFS_ROOT=root(name), **SMALL_BUFFERS, **(env or {}))
            procs[r] = (self.cluster.spawn(r, with_memlock(memlock.get(r), argv, ipc_lock), e),
                        time.monotonic())
        return self.wait_all(procs, TIMEOUT)

    def findings(self, res):
        return {f["id"]: f for f in res[0][1]["findings"]}

    def test_three_hosts_on_ib(self):
        res = self.run_job(["ib-cx7", "ib-cx7", "ib-cx7"])
        for r, (rc, _, out, err) in res.items():
            self.assertEqual(rc, 0, f"rank {r}: {out}{err}")
        members = res[0][1]["members"]
        nets = {m["host"]: m["nccl_net"] for m in members}
        self.assertEqual(nets["h1"]["text"], "IB mlx5_0:1,mlx5_1:1 800G")
        self.assertEqual(nets["h1"]["sysfs_root"], root("ib-cx7"))

    def test_a_container_without_dev_infiniband_falls_back_to_sockets(self):
        res = self.run_job(["ib-cx7", "ib-cx7", "ib-cx7-container"])
        f = self.findings(res)
        self.assertIn("nccl-net-mismatch", f)
        self.assertEqual(f["nccl-net-mismatch"]["severity"], "error")
        self.assertEqual(f["nccl-net-mismatch"]["hosts"], ["h2"])
        self.assertEqual(f["ib-uverbs-missing"]["hosts"], ["h2"])
        self.assertEqual(res[0][0], 3)

    def test_a_low_memlock_limit_on_one_host(self):
        res = self.run_job(["ib-cx7", "ib-cx7", "ib-cx7"], memlock={1: 64 << 10})
        f = self.findings(res)
        self.assertEqual(f["ib-memlock-low"]["hosts"], ["h1"])
        self.assertIn("is 64 KiB; NCCL's RDMA buffers pin about 1 MiB",
                      f["ib-memlock-low"]["message"])

    def test_a_low_memlock_limit_with_cap_ipc_lock_is_no_error(self):
        # Root on bare metal, a Kubernetes RDMA pod with IPC_LOCK added: ib_umem_get does
        # not apply RLIMIT_MEMLOCK to a process holding CAP_IPC_LOCK.
        res = self.run_job(["ib-cx7", "ib-cx7", "ib-cx7"], memlock={1: 64 << 10}, ipc_lock=True)
        self.assertEqual(res[0][0], 0, res[0][2] + res[0][3])
        self.assertNotIn("ib-memlock-low", self.findings(res))
        h1 = [m for m in res[0][1]["members"] if m["host"] == "h1"][0]["nccl_net"]
        self.assertEqual(h1["memlock_bytes"], 64 << 10)
        self.assertTrue(h1["cap_ipc_lock"])

    def test_a_plugin_mapped_share_of_the_nics(self):
        # A pod given two of eight NICs' uverbs nodes: NCCL opens those two, as many as
        # the other hosts' two; nothing is wrong.
        res = self.run_job(["ib-cx7", "ib-cx7-pod-2of8", "ib-cx7"])
        for r, (rc, _, out, err) in res.items():
            self.assertEqual(rc, 0, f"rank {r}: {out}{err}")
        h1 = [m for m in res[0][1]["members"] if m["host"] == "h1"][0]["nccl_net"]
        self.assertEqual(h1["text"], "IB mlx5_2:1,mlx5_5:1 800G")
        self.assertEqual([p["listed"] for p in h1["ports"]].count(True), 2)

    def test_a_plugin_nccl_does_not_read_is_named_and_not_used(self):
        # libnccl-net-v5.so exports ncclNetPlugin_v5 only (tests/fake/fake_net_plugin.cc),
        # which NCCL reads up to 2.25: the newest rules (no NCCL loaded, --no-gpu) unload
        # it and keep IB on every host. libnccl-net-v8.so is used.
        plugins = {"LD_LIBRARY_PATH": os.path.dirname(FAKE)}
        res = self.run_job(["ib-cx7", "ib-cx7", "ib-cx7"], env={**plugins, "NCCL_NET_PLUGIN": "v5"})
        for r, (rc, _, out, err) in res.items():
            self.assertEqual(rc, 0, f"rank {r}: {out}{err}")
        f = self.findings(res)["nccl-net-plugin-unsupported"]
        self.assertEqual(f["severity"], "warning")
        self.assertIn("libnccl-net-v5.so) exports v5, and the newest NCCL reads v6-v12", f["message"])
        net = res[0][1]["members"][0]["nccl_net"]
        self.assertEqual((net["text"], net["plugin_abi"], net["plugin_unsupported"]),
                         ("IB mlx5_0:1,mlx5_1:1 800G", [5], True))

    def test_roce_with_a_link_local_gid_on_one_host(self):
        res = self.run_job(["roce-cx6", "roce-cx6-b", "roce-linklocal"])
        f = self.findings(res)
        self.assertEqual(f["nccl-roce-gid-link-local"]["hosts"], ["h2"])
        self.assertEqual(f["nccl-roce-gid-link-local"]["severity"], "error")


def with_shm(size, argv):
    """argv in a mount namespace of its own whose /dev/shm is a tmpfs of `size` ("64m",
    a container's default): the namespace, and the mount with it, ends with the process."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount -t tmpfs -o size={size} tmpfs /dev/shm && exec "$@"', "sh", *argv]


class DevShm(unittest.TestCase):
    """/dev/shm against what NCCL's SHM transport maps for a host's ranks, read by every
    process in its own mount namespace."""

    def local(self, n, size, **extra):
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "r.json")
            p = subprocess.run(with_shm(size, [BIN, "local", "-n", str(n), "--no-gpu", "--timeout",
                                               "20", "--json", report]),
                               env=clean_env(**extra), capture_output=True, text=True, timeout=60)
            with open(report) as f:
                return p, json.load(f)

    def test_four_ranks_in_a_containers_64_mb(self):
        p, r = self.local(4, "64m")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)  # a warning
        f = {x["id"]: x for x in r["findings"]}["shm-too-small"]
        self.assertEqual(f["severity"], "warning")
        self.assertIn("(64.0 MiB free of 64.0 MiB; 4 ranks need 73.5 MiB)", f["message"])
        shm = r["members"][0]["shm"]
        self.assertEqual(shm["size_bytes"], 64 << 20)
        self.assertEqual(shm["segment_bytes"], 9637888)

    def test_two_ranks_fit_and_p2p_disabled_is_an_error(self):
        p, r = self.local(2, "64m")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertNotIn("shm-too-small", [x["id"] for x in r["findings"]])
        # 16 MiB and NCCL_P2P_DISABLE=1: the GPUs certainly go through SHM.
        p, r = self.local(2, "16m", NCCL_P2P_DISABLE="1")
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        f = {x["id"]: x for x in r["findings"]}["shm-too-small"]
        self.assertEqual(f["severity"], "error")
        self.assertIn("NCCL_P2P_DISABLE=1", f["message"])

    def test_a_tmpfs_without_a_size_limit_is_not_compared(self):
        # size=0: no limit, and statvfs says 0 blocks.
        p, r = self.local(4, "0")
        self.assertNotIn("shm-too-small", [x["id"] for x in r["findings"]], p.stdout)
        self.assertIsNone(r["members"][0]["shm"])

    def test_shm_disabled_says_nothing(self):
        _, r = self.local(4, "16m", NCCL_SHM_DISABLE="1")
        self.assertNotIn("shm-too-small", [x["id"] for x in r["findings"]])
        self.assertTrue(r["members"][0]["shm"]["shm_disabled"])


class EnvView(unittest.TestCase):
    """`rankcheck env` shows what the reader sees under a root, with each value's source."""

    def env(self, fixture, json_out=True, **extra):
        e = clean_env(RANKCHECK_SYSFS_ROOT=root(fixture), RANK=0, WORLD_SIZE=1,
                      MASTER_ADDR="127.0.0.1", **SMALL_BUFFERS, **extra)
        return subprocess.run([BIN, "env", "--no-gpu", *(["--json"] if json_out else [])],
                              env=e, capture_output=True, text=True, timeout=30)

    def test_json_names_ports_gid_and_sources(self):
        p = self.env("roce-cx6")
        self.assertEqual(p.returncode, 0, p.stderr)
        net = json.loads(p.stdout)["self"]["nccl_net"]
        self.assertEqual(net["text"], "RoCE v2 gid 3 mlx5_0:1,mlx5_1:1 200G")
        self.assertEqual(net["rule"], "every device")
        self.assertEqual(net["ports"][0]["gid"]["address"], "::ffff:198.18.0.11")
        self.assertEqual(net["ports"][0]["gid"]["netdev"], "ens1f0np0")
        self.assertTrue(net["gid_rule"].startswith("NCCL's own choice: RoCE v2, AF_INET"))

    def test_a_plugin_nccl_does_not_read_in_env(self):
        plugins = {"LD_LIBRARY_PATH": os.path.dirname(FAKE)}
        p = self.env("ib-cx7", json_out=False, NCCL_NET_PLUGIN="v5", **plugins)
        self.assertIn("nccl-net-plugin-unsupported", p.stdout)  # a process alone sees it too
        self.assertIn("libnccl-net-v5.so unloaded: it exports v5", p.stdout)
        p = self.env("ib-cx7", json_out=False, NCCL_NET_PLUGIN="v8", **plugins)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("plugin v8", p.stdout)
        self.assertNotIn("nccl-net-plugin-unsupported", p.stdout)

    def test_text_with_nccl_ib_hca_matching_nothing(self):
        p = self.env("ib-cx7", json_out=False, NCCL_IB_HCA="=mlx5_9")
        self.assertIn("Socket (NCCL_IB_HCA matches no port)", p.stdout)
        self.assertIn("nccl-ib-hca-none", p.stdout)


if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(stage_built(), "rankcheck was built without the CUDA/NCCL headers")
class PcieUnderNccl(FakeGpuTest):
    """The PCIe under NCCL per host: each rank drives fake GPU 3 (0000:13:00.0, where the
    HGX H100 fixtures put GPU 3) and reads its host's tree (tests/fixtures/sysfs/hgx-h100*)."""

    def hosts(self, fixtures, **env):
        procs = {}
        for h, name in enumerate(fixtures):
            procs[h] = self.rank(h, len(fixtures), host=f"h{h}", local=(3, 8), extra=("--device", "3"),
                                 RANKCHECK_CUDA_LIB=FAKE, RANKCHECK_NCCL_LIB=FAKE, FAKE_GPUS=gpus(h, 8),
                                 TMPDIR=self.fake_dir, RANKCHECK_SYSFS_ROOT=root(name), **SMALL_BUFFERS,
                                 **env)
        self.finish()
        return procs

    def test_a_port_down_and_a_nic_missing(self):
        procs = self.hosts(["hgx-h100", "hgx-h100", "hgx-h100", "hgx-h100-port-down",
                            "hgx-h100-nic-missing"])
        self.assertExit(procs.values(), 0)  # warnings: the GPU stage ran
        master = procs[0]
        # The IB reader's own words for the same hosts come with them.
        self.assertEqual(master.ids(), ["nccl-nic-far", "nccl-rail-mismatch", "nccl-ib-port-not-active",
                                        "nccl-ib-port-count-mismatch"])
        far = master.finding("nccl-nic-far")
        self.assertEqual(far["hosts"], ["h3"])
        self.assertIn("h3: GPU 3 0000:13:00.0 (rank 3): mlx5_3 (PIX) is nearer, but its port is not "
                      "ACTIVE; NCCL gives it mlx5_0 (PHB)", far["message"])
        rail = master.finding("nccl-rail-mismatch")
        self.assertEqual(rail["hosts"], ["h4"])
        self.assertIn("GPU 3 reaches its HCA farther on h4 (mlx5_0, PHB) than on the other 3 hosts "
                      "(mlx5_3, PIX)", rail["message"])
        gpu = next(m for m in master.report["members"] if m["rank"] == 0)["pcie"]["devices"][0]
        self.assertEqual((gpu["name"], gpu["bdf"], gpu["hca"], gpu["hca_path"]),
                         ("GPU 3", "0000:13:00.0", "mlx5_3", "PIX"))

    def test_degraded_links_acs_and_a_translating_iommu(self):
        procs = self.hosts(["hgx-h100", "hgx-h100-degraded", "hgx-h100-acs"])
        self.assertExit(procs.values(), 0)
        master = procs[0]
        self.assertEqual(master.ids(), ["pcie-acs-redirect", "iommu-translated", "pcie-link-degraded"])
        self.assertEqual(master.finding("pcie-link-degraded")["hosts"], ["h1"])
        self.assertIn("h1: mlx5_5 0000:25:00.0 at 16.0 GT/s of 32.0 GT/s",
                      master.finding("pcie-link-degraded")["message"])
        acs = master.finding("pcie-acs-redirect")
        self.assertEqual(acs["hosts"], ["h2"])
        self.assertIn("h2: 25 bridges SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+ (0000:00:01.0, "
                      "0000:00:02.0, 0000:00:03.0 and 22 more)", acs["message"])
        self.assertIn("kernel: intel_iommu=on", master.finding("iommu-translated")["message"])

    def test_an_unreadable_topology_file_fails_the_check(self):
        procs = self.hosts(["hgx-h100", "hgx-h100"], NCCL_TOPO_FILE=TOPO_TABS)
        self.assertExit(procs.values(), 3)
        f = procs[0].finding("nccl-topo-file-invalid")
        self.assertEqual(f["ranks"], [0, 1])
        self.assertIn("line 2: XML Parse error : expecting '<', got '\\t'", f["message"])


class PcieEnvView(unittest.TestCase):
    """`rankcheck env` on a board read without CAP_SYS_ADMIN, and with a topology file."""

    def env(self, fixture, *extra, **env):
        e = clean_env(RANKCHECK_SYSFS_ROOT=root(fixture), RANK=0, WORLD_SIZE=1,
                      MASTER_ADDR="127.0.0.1", **SMALL_BUFFERS, **env)
        return subprocess.run([BIN, "env", "--no-gpu", *extra], env=e, capture_output=True,
                              text=True, timeout=30)

    def test_acs_not_readable_without_root_is_said_not_guessed(self):
        p = self.env("hgx-h100-nonroot")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("not read", p.stdout)
        self.assertIn("past 64 bytes reads only as root", p.stdout)
        self.assertNotIn("pcie-acs-redirect", p.stdout)
        j = json.loads(self.env("hgx-h100-nonroot", "--json").stdout)["self"]["pcie"]
        self.assertFalse(j["acs_readable"])
        self.assertEqual([d["name"] for d in j["devices"]], [f"mlx5_{k}" for k in range(8)])

    def test_topology_file_read_as_nccl_reads_it(self):
        p = self.env("hgx-h100", NCCL_TOPO_FILE=TOPO_GOOD)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("nccl-topo-file-invalid", p.stdout)
        p = self.env("hgx-h100", NCCL_TOPO_FILE=TOPO_TABS)
        self.assertEqual(p.returncode, 3, p.stdout)
        self.assertIn("nccl-topo-file-invalid", p.stdout)
        p = self.env("hgx-h100", NCCL_TOPO_FILE="/opt/microsoft/ndv5-topo.xml")
        self.assertEqual(p.returncode, 3, p.stdout)
        self.assertIn("cannot be opened (No such file or directory)", p.stdout)
