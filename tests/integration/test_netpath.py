"""The network NCCL will use, in network namespaces: three hosts of two ranks each
(a Slurm step), the interface NCCL's own rules pick on each host, and the findings
about it, decided before any NCCL call. Decoy interfaces are bridges and veths made
inside the hosts' namespaces (removed with them); addresses from 198.18.0.0/15 only."""

import os
import subprocess
import time
import unittest

from harness import BIN, free_port, job_findings
from netns import Cluster, ClusterCase, ip, slurm_step_env

TIMEOUT = 4.0
HOSTS = 3
PER_HOST = 2
WORLD = HOSTS * PER_HOST


class NcclInterfaces(ClusterCase):
    HOSTS, PER_HOST = HOSTS, PER_HOST

    def run_job(self, host_env=None, decorate=None, rank0_extra=()):
        """Builds the hosts, lets `decorate(ns_name, host)` add interfaces, runs the job;
        host_env={host: {var: value}}; rank 0 gets `rank0_extra` too. Returns
        {rank: (rc, json, stdout)}."""
        host_env = host_env or {}
        self.cluster.up()
        for i, ns in enumerate(self.cluster.ns):
            if decorate:
                decorate(ns, i)
        procs = {}
        for r in range(self.cluster.n * PER_HOST):
            host = r // PER_HOST
            argv = [BIN, "run", "--no-gpu", "--timeout", str(TIMEOUT), "--host-name", f"h{host}",
                    "--json", self.json(r), *(rank0_extra if r == 0 else ())]
            procs[r] = (self.cluster.spawn(host, argv, self.slurm_env(r, **host_env.get(host, {}))),
                        time.monotonic())
        res = self.wait_all(procs, TIMEOUT)
        return {r: (rc, rep, out + err) for r, (rc, rep, out, err) in res.items()}

    def ids(self, res):
        return [f["id"] for f in job_findings(res[0][1])]

    def test_healthy_each_host_on_its_own_address(self):
        res = self.run_job()
        for r, (rc, rep, out) in res.items():
            self.assertEqual(rc, 0, f"rank {r}: {out}")
        members = {m["rank"]: m for m in res[0][1]["members"]}
        for r in range(WORLD):
            nif = members[r]["nccl_if"]
            self.assertEqual((nif["state"], nif["name"], nif["address"]),
                             ("found", "eth0", f"198.18.0.{r // PER_HOST + 1}"))
            self.assertEqual(nif["rule"], "default order: ^docker,lo,virbr")
            self.assertEqual(nif["socket"], [f"eth0 198.18.0.{r // PER_HOST + 1}"])
        self.assertIn("nccl if", res[0][2])
        self.assertIn("eth0 198.18.0.2", res[0][2])
        # Its progress line names the rehearsal's limit with one unit ("2.00 s s" once).
        self.assertRegex(res[0][2], r"rehearsing NCCL's connections: .* \(\d+(\.\d+)? s at most\)")

    def test_a_bridge_with_one_address_on_every_host(self):
        # Made inside each namespace after its eth0 came in, the bridge has the lower
        # interface index: getifaddrs lists it first, and NCCL's default order
        # ("^docker,lo,virbr") takes it. A veth on it gives it a carrier (IFF_RUNNING).
        def bridge(ns, i):
            ip("-n", ns, "link", "add", "br-5f2a", "type", "bridge")
            ip("-n", ns, "link", "add", "veth5f2a", "type", "veth", "peer", "name", "veth5f2b")
            ip("-n", ns, "link", "set", "veth5f2a", "master", "br-5f2a")
            for dev in ("veth5f2a", "veth5f2b", "br-5f2a"):
                ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "addr", "add", "198.19.255.1/24", "dev", "br-5f2a")
        res = self.run_job(decorate=bridge)
        for r, (rc, rep, out) in res.items():
            self.assertEqual(rc, 3, f"rank {r}: {out}")
        self.assertEqual(self.ids(res), ["nccl-interface-shared-address"])
        f = res[0][1]["findings"][0]
        # Every host of the job has it: the job's interface choice, no host to suspect
        # (the message names them).
        self.assertEqual(f["hosts"], [])
        self.assertEqual(res[0][1]["suspect_hosts"], "")
        self.assertEqual(
            f["message"],
            "h0, h1 and h2 would bootstrap NCCL from the same address 198.19.255.1 (interface "
            "br-5f2a, by default order: ^docker,lo,virbr): each host that connects to it "
            "reaches itself, and NCCL's init hangs")
        self.assertIn("NCCL_SOCKET_IFNAME", f["hint"])

    def test_nccl_socket_ifname_lo_on_three_hosts(self):
        res = self.run_job(host_env={h: {"NCCL_SOCKET_IFNAME": "lo"} for h in range(HOSTS)})
        for r, (rc, rep, out) in res.items():
            self.assertEqual(rc, 3, f"rank {r}: {out}")
        self.assertEqual(self.ids(res), ["nccl-interface-loopback"])
        self.assertIn("NCCL would bootstrap from loopback (lo 127.0.0.1, by NCCL_SOCKET_IFNAME=lo) "
                      "on h0, h1 and h2, in a job across 3 hosts",
                      res[0][1]["findings"][0]["message"])

    def test_a_link_local_only_interface_chosen(self):
        # On h1 an "ib0" with only its IPv6 link-local address: NCCL's default order
        # tries "ib" first, and takes it.
        def ib(ns, i):
            if i != 1:
                return
            ip("-n", ns, "link", "add", "ib0", "type", "veth", "peer", "name", "vpeer")
            ip("-n", ns, "link", "set", "ib0", "up")
            ip("-n", ns, "link", "set", "vpeer", "up")
        res = self.run_job(decorate=ib)
        for r, (rc, rep, out) in res.items():
            self.assertEqual(rc, 3, f"rank {r}: {out}")
        self.assertEqual(self.ids(res), ["nccl-interface-link-local"])
        f = res[0][1]["findings"][0]
        self.assertEqual((f["hosts"], f["ranks"]), (["h1"], [2, 3]))
        self.assertRegex(f["message"], r"^NCCL would bootstrap from the link-local address "
                                       r"ib0 fe80::[0-9a-f:]+ on h1 \(ranks 2-3, by default "
                                       r"order: ib\)")

    def test_an_ifname_that_matches_nothing_on_one_host(self):
        def rename(ns, i):
            if i == 2:  # h2's NIC has another name
                ip("-n", ns, "link", "set", "eth0", "down")
                ip("-n", ns, "link", "set", "eth0", "name", "ens5")
                ip("-n", ns, "link", "set", "ens5", "up")
        res = self.run_job(host_env={h: {"NCCL_SOCKET_IFNAME": "eth"} for h in range(HOSTS)},
                           decorate=rename)
        for r, (rc, rep, out) in res.items():
            self.assertEqual(rc, 3, f"rank {r}: {out}")
        self.assertEqual(self.ids(res), ["nccl-ifname-missing"])  # not nccl-no-interface too
        self.assertEqual(res[0][1]["findings"][0]["hosts"], ["h2"])
        nif = {m["rank"]: m["nccl_if"] for m in res[0][1]["members"]}
        self.assertEqual((nif[4]["state"], nif[4]["error"]),
                         ("none", "Bootstrap : no socket interface found"))

    def test_nccl_conf_on_one_host_only(self):
        # h1's ~/.nccl.conf (NCCL reads it under the environment) pins NCCL to lo.
        home = os.path.join(self.tmp.name, "home-h1")
        os.makedirs(home)
        with open(os.path.join(home, ".nccl.conf"), "w") as f:
            f.write("# set by an old image\nNCCL_SOCKET_IFNAME=lo\n")
        res = self.run_job(host_env={1: {"HOME": home}})
        for r, (rc, rep, out) in res.items():
            self.assertEqual(rc, 3, f"rank {r}: {out}")
        self.assertEqual(self.ids(res), ["nccl-interface-loopback", "env-mismatch"])
        lo, env = job_findings(res[0][1])
        self.assertEqual(lo["hosts"], ["h1"])
        self.assertIn(f"by NCCL_SOCKET_IFNAME=lo (from {home}/.nccl.conf)", lo["message"])
        self.assertEqual(env["message"],
                         f"NCCL_SOCKET_IFNAME differs: unset for ranks 0-1,4-5 on h0 and h2; "
                         f"lo (from {home}/.nccl.conf) for ranks 2-3 on h1")
        m2 = next(m for m in res[0][1]["members"] if m["rank"] == 2)
        self.assertEqual(m2["env"]["NCCL_SOCKET_IFNAME"], "lo")
        self.assertEqual(m2["env_sources"], {"NCCL_SOCKET_IFNAME": f"{home}/.nccl.conf"})

    def test_nccl_comm_id_not_on_rank_0s_host(self):
        res = self.run_job(host_env={h: {"NCCL_COMM_ID": "198.18.0.2:29600"}
                                     for h in range(HOSTS)})
        for r, (rc, rep, out) in res.items():
            self.assertEqual(rc, 3, f"rank {r}: {out}")
        self.assertEqual(self.ids(res), ["nccl-comm-id-mismatch"])
        self.assertEqual(
            res[0][1]["findings"][0]["message"],
            "NCCL_COMM_ID=198.18.0.2:29600 is not an address of rank 0's host h0 (which would use "
            "eth0 198.18.0.1): rank 0 creates NCCL's bootstrap root there, and no rank can reach "
            "it")

    def test_nccl_comm_id_on_rank_0s_host_passes(self):
        res = self.run_job(host_env={h: {"NCCL_COMM_ID": "198.18.0.1:29600"}
                                     for h in range(HOSTS)})
        for r, (rc, rep, out) in res.items():
            self.assertEqual(rc, 0, f"rank {r}: {out}")
        nif = res[0][1]["members"][0]["nccl_if"]
        self.assertEqual(nif["rule"], "NCCL_COMM_ID=198.18.0.1:29600: the interface in "
                                      "198.18.0.1's subnet")


def firewall(ns, *rules, tool="nft"):
    """Rules inside host `ns`'s namespace: nft commands, or iptables argument lists."""
    for rule in rules:
        argv = ["nft", *rule.split()] if tool == "nft" else ["iptables", *rule]
        subprocess.run(["ip", "netns", "exec", ns, *argv], check=True, capture_output=True,
                       text=True, timeout=10)


class Rehearsal(NcclInterfaces):
    """The rehearsal of NCCL's connections: firewalls and routes inside the hosts."""

    # The interface tests run once, in the class above.
    test_healthy_each_host_on_its_own_address = None
    test_a_bridge_with_one_address_on_every_host = None
    test_nccl_socket_ifname_lo_on_three_hosts = None
    test_a_link_local_only_interface_chosen = None
    test_an_ifname_that_matches_nothing_on_one_host = None
    test_nccl_conf_on_one_host_only = None
    test_nccl_comm_id_not_on_rank_0s_host = None
    test_nccl_comm_id_on_rank_0s_host_passes = None

    def blocked(self, res, code=3):
        for r, (rc, rep, out) in res.items():
            self.assertEqual(rc, code, f"rank {r}: {out}")
        return [f for f in res[0][1]["findings"] if f["id"] == "nccl-path-blocked"]

    def test_healthy_three_hosts_every_pair(self):
        t0 = time.monotonic()
        res = self.run_job()
        for r, (rc, rep, out) in res.items():
            self.assertEqual(rc, 0, f"rank {r}: {out}")
        paths = res[0][1]["paths"]
        self.assertEqual(len(paths), 6)  # every ordered pair of 3 hosts
        self.assertEqual({p["outcome"] for p in paths}, {"connected"})
        self.assertEqual({(p["from"], p["to"]) for p in paths},
                         {(a, b) for a in ("h0", "h1", "h2") for b in ("h0", "h1", "h2") if a != b})
        self.assertLess(res[0][1]["timings"]["rehearsal_ms"], 50)
        self.assertLess(time.monotonic() - t0, TIMEOUT)

    def test_with_a_job_token_every_answer_is_proven(self):
        token = os.path.join(self.tmp.name, "token")
        with open(token, "w") as f:
            f.write("s3cret-of-this-job-0123456789abcdef\n")
        os.chmod(token, 0o600)
        res = self.run_job(host_env={h: {"RANKCHECK_TOKEN_FILE": token} for h in range(HOSTS)})
        for r, (rc, rep, out) in res.items():
            self.assertEqual(rc, 0, f"rank {r}: {out}")
        self.assertTrue(res[0][1]["authenticated"])
        self.assertEqual({p["outcome"] for p in res[0][1]["paths"]}, {"connected"})

    def test_inbound_firewall_on_h2_passes_only_master_port(self):
        def wall(ns, i):
            if i == 2:
                firewall(ns, "add table inet rc",
                         "add chain inet rc in { type filter hook input priority 0 ; policy drop ; }",
                         "add rule inet rc in ct state established,related accept",
                         "add rule inet rc in iif lo accept",
                         f"add rule inet rc in tcp dport {self.port} accept")
        # Each dropped connection costs --rehearsal-timeout, and the rehearsal has a
        # timing of its own: the rendezvous and the decision leave it out.
        res = self.run_job(decorate=wall, rank0_extra=("--rehearsal-timeout", "0.5"))
        t = res[0][1]["timings"]
        self.assertGreater(t["rehearsal_ms"], 400)  # a dropped connection waits it out
        self.assertRegex(res[0][2], r"rehearsing NCCL's connections: \d+ between 3 hosts "
                                    r"\(0\.\d\d s")
        self.assertLess(t["decision_ms"], 400, "the decision counted the rehearsal")
        self.assertLessEqual(t["rendezvous_ms"] + t["rehearsal_ms"], t["total_ms"])
        self.assertEqual(res[0][1]["rehearsal"], {"ran": True, "not_run": None})
        self.assertRegex(res[0][2], r"NCCL's connections rehearsed in \d\.\d\d s: \d+ of \d+ "
                                    r"connected")
        found = self.blocked(res)
        self.assertEqual(res[0][1]["findings"][0]["id"], "nccl-path-blocked")
        self.assertEqual(len(found), 1)
        f = found[0]
        self.assertEqual((f["hosts"], f["ranks"]), (["h2"], [4, 5]))
        self.assertRegex(f["message"], r"^inbound connections to h2 on ephemeral ports \d+-\d+ of "
                                       r"eth0 \(198\.18\.0\.3\) are blocked: timed out from h0 and h1$")
        self.assertIn("net.ipv4.ip_local_port_range", f["hint"])
        self.assertIn("not run", res[0][2])  # the GPU stage never starts

    def test_outbound_firewall_on_h1_reject_and_drop(self):
        for target, word in (("REJECT", "refused"), ("DROP", "timed out")):
            with self.subTest(target=target):
                if target == "DROP":
                    self.cluster.down()
                    self.cluster = Cluster(HOSTS)
                    self.port = free_port()

                def wall(ns, i):
                    if i == 1:
                        firewall(ns, ["-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT"],
                                 ["-A", "OUTPUT", "-m", "state", "--state", "ESTABLISHED,RELATED",
                                  "-j", "ACCEPT"],
                                 ["-A", "OUTPUT", "-p", "tcp", "--dport", str(self.port), "-j",
                                  "ACCEPT"],
                                 ["-A", "OUTPUT", "-p", "tcp", "-j", target], tool="iptables")
                res = self.run_job(decorate=wall)
                found = self.blocked(res)
                self.assertEqual(len(found), 1, found)
                self.assertEqual(found[0]["hosts"], ["h1"])
                self.assertEqual(found[0]["message"],
                                 f"outbound connections from h1 over eth0 (198.18.0.2) are "
                                 f"blocked: {word} to h0 and h2")

    def test_ifname_eth1_on_two_unrouted_subnets_is_a_split(self):
        # eth1 on two bridges: h0 and h1 on 198.19.1.0/24, h2 and h3 on 198.19.2.0/24.
        self.cluster.down()
        self.cluster = Cluster(4)
        made = []

        def eth1(ns, i):
            br = f"{self.cluster.tag}s{i // 2}"
            if i % 2 == 0:
                ip("link", "add", br, "type", "bridge")
                self.cluster.made.append(("link", br))
                ip("link", "set", br, "up")
            outer = f"{self.cluster.tag}e{i}"
            ip("link", "add", outer, "type", "veth", "peer", "name", f"{self.cluster.tag}f{i}")
            self.cluster.made.append(("link", outer))
            ip("link", "set", f"{self.cluster.tag}f{i}", "netns", ns)
            ip("link", "set", outer, "master", br)
            ip("link", "set", outer, "up")
            ip("-n", ns, "link", "set", f"{self.cluster.tag}f{i}", "name", "eth1")
            ip("-n", ns, "addr", "add", f"198.19.{i // 2 + 1}.{i + 1}/24", "dev", "eth1")
            ip("-n", ns, "link", "set", "eth1", "up")
            made.append(ns)
        res = self.run_job(host_env={h: {"NCCL_SOCKET_IFNAME": "eth1"} for h in range(4)},
                           decorate=eth1)
        found = self.blocked(res)
        self.assertEqual(len(found), 1, found)
        self.assertEqual(found[0]["hosts"], ["h0", "h1", "h2", "h3"])
        self.assertRegex(found[0]["message"],
                         r"^h0, h1, h2 and h3 cannot reach h0, h1, h2 and h3 over eth1: "
                         r"no route to host .*\(8 of the connections tried\)$")


HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = "s3cret-of-this-job-0123456789abcdef"


def relay_name(port, addr="h0", job="4242", token=TOKEN):
    """The relay endpoint of a job with a token (src/rendezvous/relay.cc relay_endpoint):
    only a token holder can compute it."""
    import hashlib
    import hmac
    import struct
    parts = [b"rankcheck relay endpoint 1", b"", b"", f"{job}\n{port}\n{addr}".encode()]
    msg = b"".join(struct.pack("<I", len(p)) + p for p in parts)
    mac = hmac.new(token.encode(), msg, hashlib.sha256).digest()
    return f"rankcheck-relay/{os.geteuid()}/t/{mac[:16].hex()}"


class OnPath(ClusterCase):
    """What someone on the path cannot do with a job token (docs/security.md): h1 cannot
    reach h0's NCCL ports (an outbound firewall on h1 drops the ephemeral range), and
    an injector without the token rewrites the rehearsal's frames between h1's members
    and the master, or takes h1's relay socket first. The job must never pass."""

    HOSTS, PER_HOST = 2, 2
    TIMEOUT = 6.0

    def setUp(self):
        super().setUp()
        self.token = os.path.join(self.tmp.name, "token")
        with open(self.token, "w") as f:
            f.write(TOKEN + "\n")
        os.chmod(self.token, 0o600)
        self.cluster.up()
        # h1 reaches the master's port (below the ephemeral range), never h0's listener.
        firewall(self.cluster.ns[1], ["-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT"],
                 ["-A", "OUTPUT", "-m", "state", "--state", "ESTABLISHED,RELATED", "-j",
                  "ACCEPT"],
                 ["-A", "OUTPUT", "-p", "tcp", "--dport", "32768:60999", "-j", "DROP"],
                 tool="iptables")

    def helper(self, host, *args):
        p = self.cluster.spawn(host, ["python3", os.path.join(HERE, "onpath.py"), *args],
                               os.environ.copy())
        self.assertEqual(p.stdout.readline().strip(), "ready")
        return p

    def divert(self, to_port, source_port):
        """h1's connections to the master go to the injector on h1 (198.18.0.2:to_port),
        all but the injector's own (from source_port): nat in h1's namespace."""
        ns = self.cluster.ns[1]
        for rule in ("add table ip rcnat",
                     "add chain ip rcnat out { type nat hook output priority -100 ; }",
                     f"add rule ip rcnat out ip daddr 198.18.0.1 tcp dport {self.port} "
                     f"tcp sport != {source_port}-{source_port + 15} dnat to 198.18.0.2:{to_port}"):
            firewall(ns, rule)

    def run_job(self):
        procs = {}
        for r in range(self.cluster.n * self.PER_HOST):
            argv = [BIN, "run", "--no-gpu", "--timeout", str(self.TIMEOUT), "--host-name",
                    f"h{r // self.PER_HOST}", "--json", self.json(r)]
            env = self.slurm_env(r, RANKCHECK_TOKEN_FILE=self.token)
            procs[r] = (self.cluster.spawn(r // self.PER_HOST, argv, env), time.monotonic())
        return self.wait_all(procs, self.TIMEOUT)

    def never_passes(self, res):
        for r, (rc, rep, out, err) in res.items():
            self.assertNotEqual(rc, 0, f"rank {r} passed a job h1 cannot run: {out}{err}")

    def test_a_rewritten_path_report_does_not_pass_a_blocked_job(self):
        # Item 1: the injector rewrites h1's report of its connections to "all connected".
        inj_port, src_port = free_port(), free_port()
        self.divert(inj_port, src_port)
        inj = self.helper(1, "tcp", f"198.18.0.2:{inj_port}", f"198.18.0.1:{self.port}",
                          "report", str(src_port))
        res = self.run_job()
        inj.kill()
        self.assertIn("rewrote a path report", inj.stdout.read())
        self.never_passes(res)
        self.assertIn("does not carry this job's token", res[0][3])
        self.assertEqual(res[0][1]["findings"][0]["id"], "nccl-path-unproven")
        self.assertEqual(res[0][1]["findings"][0]["hosts"], ["h1"])

    def test_a_rewritten_path_plan_is_refused(self):
        # Item 2: the injector points h1's plan at a forwarder on h0 (a port h1 may reach)
        # that relays to h0's real listener, whose proof would then verify.
        inj_port, src_port, fwd_port = free_port(), free_port(), free_port()
        orig = os.path.join(self.tmp.name, "orig")
        self.divert(inj_port, src_port)
        fwd = self.helper(0, "forward", f"198.18.0.1:{fwd_port}", "@" + orig)
        inj = self.helper(1, "tcp", f"198.18.0.2:{inj_port}", f"198.18.0.1:{self.port}",
                          f"plan=198.18.0.1:{fwd_port}:{orig}", str(src_port))
        res = self.run_job()
        inj.kill()
        fwd.kill()
        self.assertIn("rewrote a path plan", inj.stdout.read())
        self.never_passes(res)
        said = "".join(res[r][2] + res[r][3] for r in (2, 3))
        self.assertIn("path plan does not carry this job's token", said)
        self.assertIn("nccl-path-unproven", [f["id"] for f in res[0][1]["findings"]])

    def squat(self, name):
        """A process of the same user, without the token, binds `name` on h1 before any
        member, relays each member to the master on a connection of its own and
        rewrites the path report."""
        sq = self.helper(1, "relay", "@" + name, f"198.18.0.1:{self.port}", "report")
        res = self.run_job()
        sq.kill()
        self.never_passes(res)
        # The truth: h1 reaches no listener of h0 (said both ways round with two hosts).
        blocked = [f for f in res[0][1]["findings"] if f["id"] == "nccl-path-blocked"]
        self.assertTrue(blocked, res[0][1]["findings"])
        self.assertIn("h1", {h for f in blocked for h in f["hosts"]})
        return res

    def test_a_relay_squatter_at_the_port_s_name_carries_nobody(self):
        # Item 3, as reproduced: the name was guessable from the port alone.
        self.squat(f"rankcheck-relay/{os.geteuid()}/{self.port}/h0")

    def test_a_relay_squatter_at_the_token_s_name_is_not_proven(self):
        # As if the name had leaked (ss -xl shows it once bound): the relay must prove
        # the token to each member, and this one cannot.
        res = self.squat(relay_name(self.port))
        self.assertIn("did not prove this job's token", res[2][3] + res[3][3])

    def test_a_relay_squatter_that_hangs_up_is_said(self):
        # The squatter closes each member it cannot carry (no master listens yet, as when
        # the members start first): a relay that hangs up on the ask proved nothing, and
        # the member says so before it goes to the master directly.
        sq = self.helper(1, "relay", "@" + relay_name(self.port), f"198.18.0.1:{self.port}",
                         "report")
        procs = {}
        for r in (2, 3):
            argv = [BIN, "run", "--no-gpu", "--timeout", "2", "--host-name", "h1", "--json",
                    self.json(r)]
            env = self.slurm_env(r, RANKCHECK_TOKEN_FILE=self.token)
            procs[r] = (self.cluster.spawn(1, argv, env), time.monotonic())
        res = self.wait_all(procs, 2)
        sq.kill()
        for r in (2, 3):
            self.assertEqual(res[r][0], 4, res[r][3])  # master-unreachable
            self.assertIn("did not prove this job's token", res[r][3])


class ListenerFlood(ClusterCase):
    """Item 5: while a healthy job of h0-h2 rehearses, a few processes on h3 (not of the
    job) flood h2's rehearsal listener (its port is visible in ss) with connections
    they hold a moment and then reset. The listener's answers to the real probes are
    not pushed out by them, and the job passes."""

    HOSTS, PER_HOST = 4, 1
    JOB_HOSTS = 3
    TIMEOUT = 8.0
    FLOOD = ("import socket, struct, sys, time\n"
             "while True:\n"
             "    held = []\n"
             "    for _ in range(250):\n"
             "        s = socket.socket()\n"
             "        s.setblocking(False)\n"
             "        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))\n"
             "        s.connect_ex((sys.argv[1], int(sys.argv[2])))\n"
             "        held.append(s)\n"
             "    time.sleep(0.5)\n"
             "    for s in held:\n"
             "        s.close()\n")

    def ss_until(self, host, args, found, what, wait):
        """Reads `ss -tnH ARGS` in h<host>'s namespace until found(lines) gives something: the
        state the test acts on (sockets log nothing to wait for)."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            out = subprocess.run(["ip", "netns", "exec", self.cluster.ns[host], "ss", "-tnH"]
                                 + args, capture_output=True, text=True, timeout=5).stdout
            got = found(out.splitlines())
            if got:
                return got
            time.sleep(0.05)
        self.fail(f"{what} on h{host} within {wait:.0f} s")

    def listener_port(self, host, wait=5.0):
        def port(lines):
            for line in lines:
                local = line.split()[3]
                if local.startswith(self.cluster.addr(host) + ":"):
                    return int(local.rsplit(":", 1)[1])
            return None
        return self.ss_until(host, ["-l"], port, "no rehearsal listener", wait)

    def test_a_flood_at_a_listener_does_not_fail_a_healthy_job(self):
        self.cluster.up()
        procs = {}

        def start(r):
            argv = [BIN, "run", "--no-gpu", "--timeout", str(self.TIMEOUT), "--host-name",
                    f"h{r}", "--json", self.json(r)]
            env = slurm_step_env(r, self.JOB_HOSTS, 1, self.port)
            procs[r] = (self.cluster.spawn(r, argv, env), time.monotonic())
        start(0)
        start(2)
        port = self.listener_port(2)
        flood = [self.cluster.spawn(3, ["python3", "-c", self.FLOOD, self.cluster.addr(2),
                                        str(port)], os.environ.copy(), stdout=subprocess.DEVNULL)
                 for _ in range(8)]
        # The flood under way before the last rank joins: its connections seen at h2.
        self.ss_until(2, ["sport", "=", f":{port}"], lambda lines: len(lines) >= 100,
                      "the flood's connections did not reach the listener", 10)
        start(1)
        res = self.wait_all(procs, self.TIMEOUT)
        for p in flood:
            p.kill()
        ids = [f["id"] for f in res[0][1]["findings"]]
        self.assertNotIn("nccl-path-blocked", ids, res[0][1]["findings"])
        for r, (rc, rep, out, err) in res.items():
            self.assertEqual(rc, 0, f"rank {r}: {out}{err}")
        self.assertEqual({p["outcome"] for p in res[0][1]["paths"]}, {"connected"})

if __name__ == "__main__":
    unittest.main()
