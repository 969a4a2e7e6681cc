"""rankcheck under the real torchrun (Debian's python3-torch), rank mode and node mode.

torch 1.13 on this Python needs `--redirects 1 --tee 1` for torchrun to start.
"""

import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import unittest

from harness import BIN, GRACE, clean_env, free_port, readme_command, save_reports, job_findings
from netns import ClusterCase

TORCHRUN = shutil.which("torchrun", path="/usr/bin:/usr/local/bin")
PREFLIGHT = os.path.join(os.path.dirname(__file__), "../../launchers/torchrun/preflight.sh")
TIMEOUT = 20


class PreflightArguments(unittest.TestCase):
    """What preflight.sh says before it starts anything."""

    def test_preflight_prints_its_usage(self):
        r = subprocess.run([PREFLIGHT, "--help"], capture_output=True, text=True, timeout=10,
                           env=clean_env(TORCHRUN="/nonexistent/torchrun"))
        self.assertEqual((r.returncode, r.stderr), (0, ""), r.stdout)
        self.assertTrue(r.stdout.startswith("rankcheck as a node-level step before torchrun"),
                        r.stdout)
        self.assertNotIn("set -u", r.stdout)

    def test_the_readme_says_what_rank_mode_cannot_see(self):
        # torchrun's agents meet before any worker (rankcheck, in rank mode) starts.
        with open(os.path.join(os.path.dirname(PREFLIGHT), "README.md"), encoding="utf-8") as f:
            text = " ".join(f.read().split())
        self.assertIn("What rank mode cannot see: mistakes in torchrun's own arguments.", text)
        self.assertIn("with a `--nnodes` that differs between nodes, two nodes given the same "
                      "`--node_rank`, or a `--master_addr` that is not node 0's, the agents wait "
                      "for each other until they are killed, and rankcheck, a worker, never runs "
                      "to report it. Those are what `preflight.sh` (below) checks", text)

    def test_preflight_refuses_an_option_given_twice_with_two_values(self):
        # torchrun would take the last; which one the check should take is the user's call.
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([PREFLIGHT, "--nnodes", "2", "--node_rank", "0", "--node-rank=1",
                                "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "train.py"],
                               capture_output=True, text=True, timeout=10, env=clean_env(
                                   RANKCHECK=BIN, TORCHRUN="/nonexistent/torchrun",
                                   RANKCHECK_ARGS=f"--no-gpu --json {tmp}/r.json"))
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertEqual(r.stderr, "preflight: --node_rank 0 and --node-rank 1: give "
                                       "--node-rank once\n")
            self.assertEqual(os.listdir(tmp), [])  # rankcheck never ran


@unittest.skipUnless(TORCHRUN, "torchrun not installed (Debian's python3-torch)")
class Torchrun(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="rankcheck-torchrun-")
        self.port = free_port()

    def tearDown(self):
        save_reports(self, self.tmp)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def torchrun(self, nproc, *cmd, env=None, nnodes=1, node_rank=0):
        return ["/usr/bin/python3", TORCHRUN, "--redirects", "1", "--tee", "1",
                "--nnodes", str(nnodes), "--node_rank", str(node_rank),
                "--nproc_per_node", str(nproc), "--master_addr", "127.0.0.1",
                "--master_port", str(self.port), "--max_restarts", "0", *cmd]

    def run_ranks(self, nproc, extra_env=None):
        cmd = self.torchrun(nproc, "--no_python", BIN, "run", "--no-gpu", "--timeout",
                            str(TIMEOUT), "--json", os.path.join(self.tmp, "r{rank}.json"))
        env = clean_env(**(extra_env or {}))
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT + 30)

    def report(self, rank):
        with open(os.path.join(self.tmp, f"r{rank}.json")) as f:
            return json.load(f)

    def test_rank_mode_healthy(self):
        r = self.run_ranks(3)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        master = self.report(0)
        self.assertEqual(master["verdict"], "pass")
        self.assertEqual(sorted(m["rank"] for m in master["members"]), [0, 1, 2])
        self.assertEqual({m["launcher"] for m in master["members"]}, {"torch"})
        self.assertEqual(master["members"][0]["local_world_size"], 3)
        # The agent's store holds MASTER_PORT: rankcheck met one port up, and said so.
        self.assertEqual(master["master"]["port"], self.port + 1)
        self.assertIn(f"rankcheck meets on port {self.port + 1}", r.stdout + r.stderr)
        for rank in (1, 2):
            self.assertEqual(self.report(rank)["verdict"], "pass")

    def test_the_readmes_torchrun_recipe_runs_as_written(self):
        # The main README's recipe on this one host (torch 1.13 here): one node of 3,
        # rank 0's host loopback, a free port; every other word of it is kept, so a
        # recipe without what torch 1.13 needs (--redirects 1 --tee 1, the underscored
        # options) fails here.
        values = {"--nnodes": "1", "--nproc_per_node": "3", "--node_rank": "0",
                  "--master_addr": "127.0.0.1", "--master_port": str(self.port)}
        words = readme_command("torchrun")[1:]
        cmd = ["/usr/bin/python3", TORCHRUN, "--max_restarts", "0"]
        while words:
            w = words.pop(0)
            if w in values:
                words.pop(0)
                cmd += [w, values[w]]
            else:
                cmd.append(BIN if w == "rankcheck" else w)
        cmd += ["--no-gpu", "--json", os.path.join(self.tmp, "r{rank}.json")]
        r = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True,
                           timeout=TIMEOUT + 30)
        self.assertEqual(r.returncode, 0, " ".join(cmd) + "\n" + r.stdout + r.stderr)
        self.assertNotIn("AttributeError", r.stderr)
        self.assertEqual(self.report(0)["verdict"], "pass")
        self.assertEqual(self.report(0)["ranks_joined"], 3)

    def test_rank_mode_broken_interface(self):
        # Every rank is told to use an interface this host does not have.
        r = self.run_ranks(3, {"NCCL_SOCKET_IFNAME": "=ib9999"})
        self.assertNotEqual(r.returncode, 0)
        master = self.report(0)
        self.assertEqual(master["exit_code"], 3)
        self.assertEqual([f["id"] for f in job_findings(master)], ["nccl-ifname-missing"])
        self.assertEqual(master["findings"][0]["ranks"], [0, 1, 2])
        self.assertEqual(self.report(2)["exit_code"], 3)

    def preflight(self, node, nnodes, marker_dir):
        env = clean_env(RANKCHECK=BIN, TORCHRUN=TORCHRUN,
                        RANKCHECK_ARGS=f"--no-gpu --timeout {TIMEOUT} --host-name node{node} "
                                       f"--json {self.tmp}/node{node}.json")
        cmd = [PREFLIGHT, "--redirects", "1", "--tee", "1", "--nnodes", str(nnodes),
               f"--node_rank={node}", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
               "--master_port", str(self.port), "--max_restarts", "0", "--no_python",
               "/bin/sh", "-c", f'touch "{marker_dir}/ran-$RANK"']
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def test_preflight_two_nodes_then_torchrun(self):
        marks = os.path.join(self.tmp, "marks")
        os.mkdir(marks)
        procs = [self.preflight(n, 2, marks) for n in (0, 1)]
        outs = [p.communicate(timeout=TIMEOUT + 40) for p in procs]
        for p, (out, err) in zip(procs, outs):
            self.assertEqual(p.returncode, 0, out + err)
        with open(os.path.join(self.tmp, "node0.json")) as f:
            master = json.load(f)
        self.assertEqual(master["verdict"], "pass")
        self.assertEqual(master["ranks_joined"], 4)
        # torchrun ran the training command on all four ranks after the check.
        self.assertEqual(sorted(os.listdir(marks)), ["ran-0", "ran-1", "ran-2", "ran-3"])

    def test_preflight_hands_torchrun_the_node_rank_and_master_it_checked(self):
        # The node rank and master only in the environment (NODE_RANK, MASTER_ADDR,
        # MASTER_PORT), which rankcheck reads and torchrun 1.13 does not: torchrun gets
        # them as flags, so its two agents are nodes 0 and 1 at the port checked, rather
        # than two node 0s at its default 127.0.0.1:29500.
        marks = os.path.join(self.tmp, "marks")
        os.mkdir(marks)
        procs = []
        for node in (0, 1):
            env = clean_env(RANKCHECK=BIN, TORCHRUN=TORCHRUN, NODE_RANK=str(node),
                            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(self.port),
                            RANKCHECK_ARGS=f"--no-gpu --timeout {TIMEOUT} --host-name node{node} "
                                           f"--json {self.tmp}/node{node}.json")
            cmd = [PREFLIGHT, "--redirects", "1", "--tee", "1", "--nnodes", "2",
                   "--nproc_per_node", "2", "--max_restarts", "0", "--no_python",
                   "/bin/sh", "-c", f'touch "{marks}/ran-$RANK-$GROUP_RANK-$MASTER_PORT"']
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True,
                                          start_new_session=True))
        outs = [self.finish(p, TIMEOUT + 40) for p in procs]
        for p, (out, err) in zip(procs, outs):
            self.assertEqual(p.returncode, 0, out + err)
        self.assertEqual(sorted(os.listdir(marks)),
                         [f"ran-{r}-{r // 2}-{self.port}" for r in range(4)])

    def preflight_at(self, node_rank, master_addr, marks, timeout=5):
        """preflight.sh for one of two nodes of two ranks, at this node rank and master."""
        env = clean_env(RANKCHECK=BIN, TORCHRUN=TORCHRUN,
                        RANKCHECK_ARGS=f"--no-gpu -q --timeout {timeout}")
        cmd = [PREFLIGHT, "--redirects", "1", "--tee", "1", "--nnodes", "2", "--nproc_per_node",
               "2", "--node_rank", str(node_rank), "--master_addr", master_addr, "--master_port",
               str(self.port), "--max_restarts", "0", "--no_python", "/bin/sh", "-c",
               f'touch "{marks}/ran-$RANK"']
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)

    def assertTorchrunNeverStarted(self, procs, marks, limit):
        for p in procs:
            out, err = self.finish(p, limit)
            self.assertNotEqual(p.returncode, 0, out + err)
            self.assertIn("torchrun not started", err)
        self.assertEqual(os.listdir(marks), [])

    def test_preflight_stops_torchrun_when_two_nodes_share_a_node_rank(self):
        # torchrun's two agents at node rank 0 would wait for node 1 until killed.
        marks = os.path.join(self.tmp, "marks")
        os.mkdir(marks)
        procs = [self.preflight_at(0, "127.0.0.1", marks) for _ in range(2)]
        self.assertTorchrunNeverStarted(procs, marks, 5 + 30)

    def finish(self, p, limit):
        """p's output once it ended; a process still running at `limit` s is killed
        (its whole session: torchrun and its workers) and fails the test."""
        try:
            return p.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            self.fail(f"still running after {limit} s:\n{out}{err}")

    def test_preflight_stops_torchrun_when_the_check_fails(self):
        marks = os.path.join(self.tmp, "marks")
        os.mkdir(marks)
        procs = [self.preflight(0, 2, marks), self.preflight(1, 3, marks)]  # node 1: wrong --nnodes
        outs = [p.communicate(timeout=TIMEOUT + 40) for p in procs]
        for p, (out, err) in zip(procs, outs):
            self.assertEqual(p.returncode, 3, out + err)
            self.assertIn("torchrun not started", err)
        with open(os.path.join(self.tmp, "node0.json")) as f:
            master = json.load(f)
        self.assertEqual([f["id"] for f in job_findings(master)], ["world-size-mismatch"])
        self.assertEqual(os.listdir(marks), [])


@unittest.skipUnless(TORCHRUN, "torchrun not installed (Debian's python3-torch)")
class PreflightAcrossHosts(ClusterCase):
    """preflight.sh on two hosts (network namespaces), where an address is one host's."""
    HOSTS, PER_HOST = 2, 2

    def test_preflight_stops_torchrun_when_a_node_is_given_another_master(self):
        # Node 1 is told that node 0 is h1, itself: torchrun's agent there would wait for
        # a store that never listens, and node 0's for node 1, until killed.
        timeout = 5
        self.cluster.up()
        marks = os.path.join(self.tmp.name, "marks")
        os.mkdir(marks)
        procs = []
        for node, master in ((0, "h0"), (1, "h1")):
            env = clean_env(RANKCHECK=BIN, TORCHRUN=TORCHRUN,
                            RANKCHECK_ARGS=f"--no-gpu -q --timeout {timeout} --host-name h{node} "
                                           f"--json {self.json(node)}")
            argv = [PREFLIGHT, "--redirects", "1", "--tee", "1", "--nnodes", "2",
                    "--nproc_per_node", "2", "--node_rank", str(node), "--master_addr", master,
                    "--master_port", str(self.port), "--max_restarts", "0", "--no_python",
                    "/bin/sh", "-c", f'touch "{marks}/ran-$RANK"']
            procs.append(self.cluster.spawn(node, argv, env))
        for p in procs:
            out, err = p.communicate(timeout=timeout + GRACE + 30)
            self.assertEqual(p.returncode, 4, out + err)
            self.assertIn("torchrun not started", err)
        self.assertEqual(os.listdir(marks), [])
        with open(self.json(0)) as f:
            master = json.load(f)
        self.assertEqual([(f["id"], f["ranks"]) for f in job_findings(master)],
                         [("missing-rank", [2, 3])])


if __name__ == "__main__":
    unittest.main()
