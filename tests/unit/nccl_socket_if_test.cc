// NCCL's interface choice on tables of interface lists: one case per rule and per
// version difference (NCCL's src/misc/socket.cc, src/os/linux.cc, src/bootstrap.cc).

#include <functional>

#include <catch2/catch.hpp>

#include "helpers.h"
#include "model/record.h"
#include "nccl/socket_if.h"
#include "protocol/record_codec.h"
#include "rules/rules.h"

using namespace rankcheck;

namespace {

IfAddr v4(std::string name, std::string addr, int prefix = 24, bool running = true) {
  IfAddr a;
  a.name = std::move(name);
  a.address = std::move(addr);
  a.prefix_len = prefix;
  a.running = running;
  a.loopback = a.name == "lo";
  return a;
}

IfAddr v6(std::string name, std::string addr, int prefix = 64, uint32_t scope = 0) {
  IfAddr a = v4(std::move(name), std::move(addr), prefix);
  a.family = 6;
  a.scope_id = scope;
  return a;
}

// A typical host: loopback, a docker bridge first in getifaddrs order, the NIC.
std::vector<IfAddr> host() {
  return {v4("lo", "127.0.0.1", 8), v4("docker0", "172.17.0.1", 16), v4("eth0", "198.18.0.2"),
          v6("lo", "::1", 128), v6("eth0", "fe80::2", 64, 2)};
}

struct Case {
  const char* what;
  std::vector<IfAddr> ifs;
  EnvMap env;
  int32_t version;
  std::string comm_id_address;
  std::string bootstrap;  // "eth0 198.18.0.2", or "" for none
  std::string socket;     // the socket transport's list, joined by ", "
};

std::string joined(const std::vector<NcclIf>& v) {
  std::string s;
  for (const NcclIf& i : v)
    s += (s.empty() ? "" : ", ") + i.text();
  return s;
}

}  // namespace

TEST_CASE("nccl if: NCCL's rules on tables of interface lists") {
  std::vector<IfAddr> ib_ll = {v4("lo", "127.0.0.1", 8), v6("ib0", "fe80::1", 64, 3),
                               v4("eth0", "198.18.0.2")};
  std::vector<IfAddr> virbr = {v4("lo", "127.0.0.1", 8), v4("virbr0", "192.168.122.1"),
                               v4("eth0", "198.18.0.2", 24, false)};
  std::vector<IfAddr> two = {v4("lo", "127.0.0.1", 8), v4("eth0", "198.18.0.2"),
                             v4("eth1", "198.18.1.2"), v4("eth2", "198.18.2.2", 24, false)};
  std::vector<IfAddr> only_lo = {v4("lo", "127.0.0.1", 8), v4("docker0", "172.17.0.1", 16)};
  std::vector<IfAddr> many;
  for (int k = 0; k < 20; ++k)
    many.push_back(v4(fmt::format("eth{}", k), fmt::format("198.18.{}.2", k)));
  std::vector<IfAddr> subnets = {v4("lo", "127.0.0.1", 8), v4("eth0", "198.18.0.2"),
                                 v4("eth1", "198.19.0.2")};

  const Case cases[] = {
      {"default order: not docker, not lo",
       host(),
       {},
       0,
       "",
       "eth0 198.18.0.2",
       "eth0 198.18.0.2"},
      {"default order: ib first, even with only a link-local address",
       ib_ll,
       {},
       0,
       "",
       "ib0 fe80::1",
       "ib0 fe80::1"},
      {"default order: docker before lo",
       only_lo,
       {},
       0,
       "",
       "docker0 172.17.0.1",
       "docker0 172.17.0.1"},
      {"default order: lo last",
       {v4("lo", "127.0.0.1", 8)},
       {},
       0,
       "",
       "lo 127.0.0.1",
       "lo 127.0.0.1"},
      {"2.28+: virbr after lo, and only running interfaces",
       virbr,
       {},
       22803,
       "",
       "lo 127.0.0.1",
       "lo 127.0.0.1"},
      {"before 2.28: virbr is an ordinary interface, and IFF_RUNNING is not read",
       virbr,
       {},
       22707,
       "",
       "virbr0 192.168.122.1",
       "virbr0 192.168.122.1, eth0 198.18.0.2"},
      {"the socket transport takes every match, bootstrap the first",
       two,
       {},
       0,
       "",
       "eth0 198.18.0.2",
       "eth0 198.18.0.2, eth1 198.18.1.2"},
      {"the socket transport stops at 16", many, {}, 0, "", "eth0 198.18.0.2", ""},
      {"NCCL_SOCKET_IFNAME: a prefix",
       two,
       {{"NCCL_SOCKET_IFNAME", "eth1"}},
       0,
       "",
       "eth1 198.18.1.2",
       "eth1 198.18.1.2"},
      {"NCCL_SOCKET_IFNAME: a comma list, in getifaddrs order",
       two,
       {{"NCCL_SOCKET_IFNAME", "eth1,eth0"}},
       0,
       "",
       "eth0 198.18.0.2",
       "eth0 198.18.0.2, eth1 198.18.1.2"},
      {"NCCL_SOCKET_IFNAME: '=' means exact names",
       two,
       {{"NCCL_SOCKET_IFNAME", "=eth"}},
       0,
       "",
       "",
       ""},
      {"NCCL_SOCKET_IFNAME: '^' excludes",
       two,
       {{"NCCL_SOCKET_IFNAME", "^lo,eth0"}},
       0,
       "",
       "eth1 198.18.1.2",
       "eth1 198.18.1.2"},
      {"NCCL_SOCKET_IFNAME: '^=' excludes exact names",
       two,
       {{"NCCL_SOCKET_IFNAME", "^=lo,eth"}},
       0,
       "",
       "eth0 198.18.0.2",
       "eth0 198.18.0.2, eth1 198.18.1.2"},
      {"NCCL_SOCKET_IFNAME: ':port' is not part of the name",
       two,
       {{"NCCL_SOCKET_IFNAME", "eth1:5000"}},
       0,
       "",
       "eth1 198.18.1.2",
       "eth1 198.18.1.2"},
      {"NCCL_SOCKET_IFNAME: one character is not read",
       two,
       {{"NCCL_SOCKET_IFNAME", "^"}},
       0,
       "",
       "eth0 198.18.0.2",
       "eth0 198.18.0.2, eth1 198.18.1.2"},
      {"NCCL_SOCKET_IFNAME: matches nothing", two, {{"NCCL_SOCKET_IFNAME", "ib"}}, 0, "", "", ""},
      {"NCCL_SOCKET_IFNAME: a named interface that is down, 2.28+",
       two,
       {{"NCCL_SOCKET_IFNAME", "eth2"}},
       22803,
       "",
       "",
       ""},
      {"NCCL_SOCKET_IFNAME: a named interface that is down, 2.27",
       two,
       {{"NCCL_SOCKET_IFNAME", "eth2"}},
       22707,
       "",
       "eth2 198.18.2.2",
       "eth2 198.18.2.2"},
      {"NCCL_SOCKET_IFNAME=lo",
       two,
       {{"NCCL_SOCKET_IFNAME", "lo"}},
       0,
       "",
       "lo 127.0.0.1",
       "lo 127.0.0.1"},
      {"the first address of a name counts (IPv4 before IPv6)",
       host(),
       {{"NCCL_SOCKET_IFNAME", "eth0"}},
       0,
       "",
       "eth0 198.18.0.2",
       "eth0 198.18.0.2"},
      {"NCCL_SOCKET_FAMILY=AF_INET6 skips IPv4, and IPv6 loopback",
       host(),
       {{"NCCL_SOCKET_FAMILY", "AF_INET6"}},
       0,
       "",
       "eth0 fe80::2",
       "eth0 fe80::2"},
      {"NCCL_SOCKET_FAMILY must be exact",
       host(),
       {{"NCCL_SOCKET_FAMILY", "inet6"}},
       0,
       "",
       "eth0 198.18.0.2",
       "eth0 198.18.0.2"},
      {"NCCL_SOCKET_FAMILY=AF_INET6 on an IPv4-only host",
       two,
       {{"NCCL_SOCKET_FAMILY", "AF_INET6"}},
       0,
       "",
       "",
       ""},
      {"NCCL_COMM_ID: bootstrap takes the interface in its subnet, whatever IFNAME says",
       subnets,
       {{"NCCL_COMM_ID", "198.19.0.1:29501"}, {"NCCL_SOCKET_IFNAME", "eth0"}},
       0,
       "198.19.0.1",
       "eth1 198.19.0.2",
       "eth0 198.18.0.2"},
      {"NCCL_COMM_ID: the default order's second step",
       subnets,
       {{"NCCL_COMM_ID", "198.19.0.1:29501"}},
       0,
       "198.19.0.1",
       "eth1 198.19.0.2",
       "eth1 198.19.0.2"},
      {"NCCL_COMM_ID in no subnet of the host",
       subnets,
       {{"NCCL_COMM_ID", "10.9.9.9:29501"}},
       0,
       "10.9.9.9",
       "",
       "eth0 198.18.0.2, eth1 198.19.0.2"},
      {"2.29.x: the inverted IPv4 subnet test binds the first interface outside it",
       subnets,
       {{"NCCL_COMM_ID", "198.19.0.1:29501"}},
       22907,
       "198.19.0.1",
       "lo 127.0.0.1",
       "lo 127.0.0.1"},
      {"2.30: the subnet test fixed",
       subnets,
       {{"NCCL_COMM_ID", "198.19.0.1:29501"}},
       23003,
       "198.19.0.1",
       "eth1 198.19.0.2",
       "eth1 198.19.0.2"},
      {"NCCL_COMM_ID that does not resolve",
       subnets,
       {{"NCCL_COMM_ID", "nowhere:1"}},
       0,
       "",
       "",
       "eth0 198.18.0.2, eth1 198.19.0.2"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    NcclIfInput in;
    in.env = &c.env;
    in.nccl_version = c.version;
    in.comm_id_address = c.comm_id_address;
    NcclIfChoice got = choose_nccl_interfaces(c.ifs, in);
    CHECK((got.bootstrap ? got.bootstrap->text() : "") == c.bootstrap);
    if (std::string_view(c.what) == "the socket transport stops at 16") {
      CHECK(got.socket.size() == 16);
    } else {
      CHECK(joined(got.socket) == c.socket);
    }
    CHECK(got.error.empty() == got.bootstrap.has_value());
  }
}

TEST_CASE("nccl if: NCCL's own words and the rule that applied") {
  std::vector<IfAddr> ifs = {v4("lo", "127.0.0.1", 8), v4("eth0", "198.18.0.2")};
  EnvMap env = {{"NCCL_SOCKET_IFNAME", "ib"}};
  NcclIfInput in{&env, 0, ""};
  NcclIfChoice c = choose_nccl_interfaces(ifs, in);
  CHECK(c.error == "Bootstrap : no socket interface found");
  CHECK(c.rule == "NCCL_SOCKET_IFNAME=ib");

  env = {{"NCCL_COMM_ID", "10.9.9.9:29501"}};
  in.comm_id_address = "10.9.9.9";
  c = choose_nccl_interfaces(ifs, in);
  CHECK(c.error == "NET/Socket : No usable listening interface found");
  CHECK(c.rule == "NCCL_COMM_ID=10.9.9.9:29501: the interface in 10.9.9.9's subnet");

  env = {};
  c = choose_nccl_interfaces(ifs, NcclIfInput{&env, 22803, ""});
  CHECK(c.rule == "default order: ^docker,lo,virbr");
  c = choose_nccl_interfaces(ifs, NcclIfInput{&env, 22707, ""});
  CHECK(c.rule == "default order: ^docker,lo");
  CHECK(c.rules_version == 22707);
}

TEST_CASE("nccl if: NCCL_COMM_ID's forms") {
  CHECK(parse_comm_id("10.0.0.1:29501")->host == "10.0.0.1");
  CHECK(parse_comm_id("gpu-01:29501")->host == "gpu-01");
  auto v6 = parse_comm_id("[fe80::1%eth0]:29501");
  REQUIRE(v6);
  CHECK(v6->host == "fe80::1");
  CHECK(v6->scope_if == "eth0");
  CHECK(!parse_comm_id("[fe80::1:29501"));
  CHECK(!parse_comm_id("x"));
  CHECK(is_link_local_address("169.254.3.1"));
  CHECK(is_link_local_address("fe80::1"));
  CHECK(!is_link_local_address("198.18.0.1"));
}

namespace {

// A job over `hosts` hosts of two ranks each, each host in its own network stack,
// bootstrapping from `addr(host)`.
JobView job_with(int hosts, const std::function<std::string(int)>& addr,
                 const std::string& name = "eth0") {
  JobView v = test::healthy_job(hosts * 2, 2);
  for (Member& m : v.members) {
    int h = m.record.rank / 2;
    NcclIfFacts& f = m.record.nccl_if.edit();
    f.state = NcclIfFacts::kFound;
    f.name = name;
    f.address = addr(h);
    f.rule = "default order: ^docker,lo,virbr";
    f.netns = fmt::format("boot/{}", 4026531840 + h);
    if (f.address.str().rfind("127.", 0) == 0) f.flags |= NcclIfFacts::kLoopback;
    if (is_link_local_address(f.address)) f.flags |= NcclIfFacts::kLinkScope;
  }
  return v;
}

// Puts every host of `v` in one network stack: hosts simulated on one machine, under names
// of their own.
void share_one_stack(JobView& v) {
  for (Member& m : v.members)
    m.record.nccl_if.edit().netns = "boot/1";
}

}  // namespace

TEST_CASE("nccl interface rules: a healthy job across hosts has no findings") {
  JobView v = job_with(3, [](int h) { return fmt::format("198.18.0.{}", h + 1); });
  CHECK(test::checks(v).empty());
}

TEST_CASE("nccl-interface-shared-address: a bridge with one address on every host") {
  JobView v = job_with(
      3, [](int) { return std::string("172.18.0.1"); }, "br-5f2a");
  Finding f = test::sole(test::checks(v));
  CHECK(f.name() == "nccl-interface-shared-address");
  CHECK(f.exit_code == 3);
  CHECK(f.message ==
        "gpu-01, gpu-02 and gpu-03 would bootstrap NCCL from the same address 172.18.0.1 "
        "(interface br-5f2a, by default order: ^docker,lo,virbr): each host that connects to it "
        "reaches itself, and NCCL's init hangs");

  // One network stack under several names (hosts simulated on one machine) is no finding.
  share_one_stack(v);
  CHECK(test::checks(v).empty());
}

TEST_CASE("nccl-interface-loopback: a job across hosts on lo") {
  JobView v = job_with(
      3, [](int) { return std::string("127.0.0.1"); }, "lo");
  for (Member& m : v.members)
    m.record.nccl_if.edit().rule = "NCCL_SOCKET_IFNAME=lo";
  Finding f = test::sole(test::checks(v));
  CHECK(f.name() == "nccl-interface-loopback");
  CHECK(f.message ==
        "NCCL would bootstrap from loopback (lo 127.0.0.1, by NCCL_SOCKET_IFNAME=lo) on gpu-01, "
        "gpu-02 and gpu-03, in a job across 3 hosts: the address it gives the other hosts leads "
        "back to themselves");
  share_one_stack(v);
  CHECK(test::checks(v).empty());
}

TEST_CASE("nccl-interface-link-local: fe80:: or 169.254/16 chosen") {
  JobView v = job_with(
      2, [](int h) { return h == 1 ? std::string("169.254.3.1") : std::string("198.18.0.1"); });
  Finding f = test::sole(test::checks(v));
  CHECK(f.name() == "nccl-interface-link-local");
  CHECK(f.hosts == std::vector<std::string>{"gpu-02"});
  CHECK(f.message ==
        "NCCL would bootstrap from the link-local address eth0 169.254.3.1 on gpu-02 (ranks 2-3, "
        "by default order: ^docker,lo,virbr): other hosts reach it only on that link, if at all");
}

TEST_CASE("nccl-no-interface: NCCL's rules find nothing on a host") {
  JobView v = job_with(2, [](int h) { return fmt::format("198.18.0.{}", h + 1); });
  for (Member& m : v.members) {
    if (m.record.rank < 2) continue;
    NcclIfFacts& f = m.record.nccl_if.edit();
    f.state = NcclIfFacts::kNone;
    f.name = "";
    f.address = "";
    f.rule = "default order: lo, NCCL_SOCKET_FAMILY=AF_INET6";
    f.error = "Bootstrap : no socket interface found";
    f.rules_version = 22803;
  }
  auto fs = test::checks(v);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].name() == "nccl-no-interface");
  CHECK(fs[0].message ==
        "NCCL would find no interface on gpu-02 (ranks 2-3): NCCL 2.28.3's rules with default "
        "order: lo, NCCL_SOCKET_FAMILY=AF_INET6 leave none; NCCL's init fails there with "
        "\"Bootstrap : no socket interface found\"");

  // A NCCL_SOCKET_IFNAME that names nothing is said once, as nccl-ifname-missing.
  for (Member& m : v.members) {
    test::set_env(m.record, {{"NCCL_SOCKET_IFNAME", "ib"}});
    m.record.interfaces = {"lo", "eth0"};
  }
  fs = test::checks(v);
  CHECK(test::find(fs, "nccl-ifname-missing") != nullptr);
  CHECK(test::find(fs, "nccl-no-interface") == nullptr);
}

TEST_CASE("nccl-comm-id-mismatch: differs across ranks, or not rank 0's host") {
  JobView v = job_with(2, [](int h) { return fmt::format("198.18.0.{}", h + 1); });
  for (Member& m : v.members) {
    test::set_env(m.record,
                  {{"NCCL_COMM_ID", m.record.rank == 3 ? "198.18.0.9:29501" : "198.18.0.1:29501"}});
    m.record.nccl_if.edit().flags |= NcclIfFacts::kCommIdLocal;
  }
  v.members[3].record.env_sources = {{"NCCL_COMM_ID", "/etc/nccl.conf"}};
  Finding f = test::sole(test::checks(v));  // not env-mismatch as well
  CHECK(f.name() == "nccl-comm-id-mismatch");
  CHECK(f.message ==
        "NCCL_COMM_ID differs: 198.18.0.1:29501 for ranks 0-2 on gpu-01 and gpu-02; "
        "198.18.0.9:29501 for rank 3 on gpu-02 (from /etc/nccl.conf); NCCL's ranks would look "
        "for different bootstrap roots and wait for each other");
  CHECK(f.ranks == std::vector<long>{3});

  for (Member& m : v.members) {
    test::set_env(m.record, {{"NCCL_COMM_ID", "198.18.0.2:29501"}});
    m.record.env_sources = {};
    m.record.nccl_if.edit().flags = 0;
  }
  f = test::sole(test::checks(v));
  CHECK(f.message ==
        "NCCL_COMM_ID=198.18.0.2:29501 is not an address of rank 0's host gpu-01 (which would "
        "use eth0 198.18.0.1): rank 0 creates NCCL's bootstrap root there, and no rank can "
        "reach it");
}

TEST_CASE("nccl if: a record carries the choice, and the master's table shows it") {
  Record r = test::member(0, 1, "gpu-01");
  NcclIfFacts& nif = r.nccl_if.edit();
  nif.state = NcclIfFacts::kFound;
  nif.name = "eth1";
  nif.address = "198.18.1.2";
  nif.socket = {"eth1 198.18.1.2", "eth2 198.18.2.2"};
  nif.rules_version = 22803;
  nif.netns = "b/1";
  r.env_sources = {{"NCCL_SOCKET_IFNAME", "/etc/nccl.conf"}};
  Writer w;
  encode_record(w, r);
  Reader rd(w.data());
  Record back = decode_record(rd);
  REQUIRE(rd.ok());
  CHECK(back.nccl_if->text() == "eth1 198.18.1.2");
  CHECK(back.nccl_if->socket.get() == r.nccl_if->socket.get());
  CHECK(back.nccl_if->rules_version == 22803);
  CHECK(back.nccl_if->netns.str() == "b/1");
  CHECK(back.env_sources.get() == r.env_sources.get());
}
