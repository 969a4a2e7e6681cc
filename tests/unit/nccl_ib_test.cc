// NCCL's IB choice (nccl/ib.h) on NCCL_IB_HCA strings, GID tables and the
// sysfs fixture trees of tests/fixtures/sysfs; and the record's facts through the
// codec and the rules. NCCL's own code: src/transport/net_ib.cc, src/misc/utils.cc
// at v2.18.6-1, v2.21.5-1 and v2.28.9-1.

#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "helpers.h"
#include "host/sysfs_ib.h"
#include "nccl/ib.h"
#include "protocol/record_codec.h"
#include "report/report.h"
#include "rules/rules.h"

using namespace rankcheck;

namespace {

constexpr int32_t k218 = 21806, k221 = 22105, k228 = 22809;

IbHostView fixture(const std::string& name) {
  SysFs sys{std::string(RANKCHECK_FIXTURES) + "/sysfs/" + name};
  IbHostView v = sys.read_ib();
  v.verbs_library = sys.find_library("libibverbs.so.1", "").has_value();
  v.memlock = -1;      // the limit is this process's: the tests set it themselves
  v.ipc_lock = false;  // and so is the capability
  return v;
}

NcclNetFacts choose(const IbHostView& v, const EnvMap& env, int32_t version = 0) {
  NcclNetInput in;
  in.env = &env;
  in.nccl_version = version;
  return choose_nccl_net(v, in);
}

IbGid gid(int index, const std::string& text, int roce) {
  IbGid g;
  g.index = index;
  in6_addr a{};
  REQUIRE(inet_pton(AF_INET6, text.c_str(), &a) == 1);
  std::copy(a.s6_addr, a.s6_addr + 16, g.raw.begin());
  g.roce = roce;
  return g;
}

// The table a ConnectX port in RoCE mode shows with one IPv4 and one IPv6 address:
// the default link-local pair first, then each address as RoCE v1 and v2.
std::vector<IbGid> roce_table() {
  return {gid(0, "fe80::bace:f6ff:fea1:2b40", 1),
          gid(1, "fe80::bace:f6ff:fea1:2b40", 2),
          gid(2, "2001:db8::13", 1),
          gid(3, "2001:db8::13", 2),
          gid(4, "::ffff:198.18.0.11", 1),
          gid(5, "::ffff:198.18.0.11", 2),
          gid(6, "::", 0)};
}

}  // namespace

TEST_CASE("RoCE GID: 2.18 takes index 0, 2.21 picks RoCE v2 of the family asked", "[nccl_ib]") {
  EnvMap env;
  GidChoice old = choose_roce_gid(roce_table(), env, k218);
  CHECK(old.index == 0);  // NCCL_IB_GID_INDEX's default 0: the link-local RoCE v1 GID
  GidChoice now = choose_roce_gid(roce_table(), env, k221);
  CHECK(now.index == 5);  // RoCE v2, AF_INET
  CHECK(choose_roce_gid(roce_table(), env, k228).index == 5);
  CHECK(choose_roce_gid(roce_table(), env, 0).index == 5);  // unknown: the newest rules

  CHECK(choose_roce_gid(roce_table(), {{"NCCL_IB_ADDR_FAMILY", "AF_INET6"}}, k221).index == 3);
  CHECK(choose_roce_gid(roce_table(), {{"NCCL_IB_ROCE_VERSION_NUM", "1"}}, k221).index == 4);
  CHECK(choose_roce_gid(roce_table(), {{"NCCL_IB_GID_INDEX", "3"}}, k218).index == 3);
  CHECK(choose_roce_gid(roce_table(), {{"NCCL_IB_GID_INDEX", "3"}}, k221).rule ==
        "NCCL_IB_GID_INDEX=3");
  // A range outside the address leaves the default.
  CHECK(choose_roce_gid(roce_table(), {{"NCCL_IB_ADDR_RANGE", "10.0.0.0/8"}}, k221).index == 0);
  CHECK(choose_roce_gid(roce_table(), {{"NCCL_IB_ADDR_RANGE", "198.18.0.0/15"}}, k221).index == 5);
  // Not a number: ncclLoadParam's strtoll reads 0 (no digits sets no errno), so NCCL
  // takes GID 0, not its own choice; a number with something after it is the number.
  CHECK(choose_roce_gid(roce_table(), {{"NCCL_IB_GID_INDEX", "three"}}, k221).index == 0);
  CHECK(choose_roce_gid(roce_table(), {{"NCCL_IB_GID_INDEX", "3\r"}}, k221).index == 3);

  // Only the default link-local GIDs (an interface without an address): index 0.
  std::vector<IbGid> bare = {gid(0, "fe80::1", 1), gid(1, "fe80::1", 2), gid(2, "::", 0)};
  GidChoice c = choose_roce_gid(bare, env, k221);
  CHECK(c.index == 0);
  CHECK(gid_link_local(bare[0].raw));
  CHECK_FALSE(gid_valid(bare[0].raw));
  CHECK(gid_family(roce_table()[5].raw) == 4);
  CHECK(gid_family(roce_table()[3].raw) == 6);
}

TEST_CASE("network plugin: the library names NCCL tries, by version", "[nccl_ib]") {
  EnvMap none;
  CHECK(nccl_plugin_candidates(none, k218) == std::vector<std::string>{"libnccl-net.so"});
  EnvMap aws{{"NCCL_NET_PLUGIN", "aws-ofi"}};
  CHECK(nccl_plugin_candidates(aws, k218) == std::vector<std::string>{"libnccl-net-aws-ofi.so"});
  CHECK(nccl_plugin_candidates(aws, k221) ==
        std::vector<std::string>{"aws-ofi", "libnccl-net-aws-ofi.so"});
  EnvMap path{{"NCCL_NET_PLUGIN", "/opt/x/libnccl-net.so"}};
  CHECK(nccl_plugin_candidates(path, k228) == std::vector<std::string>{"/opt/x/libnccl-net.so"});
  CHECK(nccl_plugin_candidates({{"NCCL_NET_PLUGIN", "none"}}, k228).empty());
  CHECK(nccl_plugin_candidates({{"NCCL_NET_PLUGIN", "a,b"}}, k228).size() == 4);
  // The loader's versions (src/plugin/plugin_open.cc): 2.26.6 tries a path as given and
  // prefixed; 2.27.3 a lib*.so name only as given, a path only prefixed (so never);
  // 2.27.5 a path only as given; "none" is a name before 2.28 and a comma list a name
  // before 2.27.3.
  constexpr int32_t k2266 = 22606, k2273 = 22703, k2275 = 22705, k2277 = 22707;
  CHECK(nccl_plugin_candidates(path, k2266) ==
        std::vector<std::string>{"/opt/x/libnccl-net.so", "libnccl-net-/opt/x/libnccl-net.so.so"});
  CHECK(nccl_plugin_candidates(path, k2273) ==
        std::vector<std::string>{"libnccl-net-/opt/x/libnccl-net.so.so"});
  EnvMap lib{{"NCCL_NET_PLUGIN", "libnccl-net-ofi.so"}};
  CHECK(nccl_plugin_candidates(lib, k2273) == std::vector<std::string>{"libnccl-net-ofi.so"});
  CHECK(nccl_plugin_candidates(aws, k2273) == std::vector<std::string>{"libnccl-net-aws-ofi.so"});
  CHECK(nccl_plugin_candidates(path, k2275) == std::vector<std::string>{"/opt/x/libnccl-net.so"});
  CHECK(nccl_plugin_candidates(aws, k2275) ==
        std::vector<std::string>{"aws-ofi", "libnccl-net-aws-ofi.so"});
  CHECK(nccl_plugin_candidates({{"NCCL_NET_PLUGIN", "none"}}, k2277) ==
        std::vector<std::string>{"none", "libnccl-net-none.so"});
  CHECK(nccl_plugin_candidates({{"NCCL_NET_PLUGIN", "a,,b"}}, k2273) ==
        std::vector<std::string>{"libnccl-net-a.so", "libnccl-net-b.so"});
  CHECK(nccl_plugin_candidates({{"NCCL_NET_PLUGIN", "a,b"}}, k2266) ==
        std::vector<std::string>{"a,b", "libnccl-net-a,b.so"});
  CHECK(nccl_plugin_short_name("/usr/lib/libnccl-net-aws-ofi.so") == "aws-ofi");
}

TEST_CASE("sysfs fixtures: InfiniBand, RoCE, a port in INIT, a container, no device", "[nccl_ib]") {
  EnvMap env;
  NcclNetFacts ib = choose(fixture("ib-cx7"), env);
  CHECK(ib.transport == NcclNetFacts::kIb);
  CHECK(ib.text() == "IB mlx5_0:1,mlx5_1:1 800G");
  CHECK(ib.gdr == NcclNetFacts::kGdrPeermem);
  CHECK(ib.nics == 2);

  NcclNetFacts init = choose(fixture("ib-cx7-init"), env);
  CHECK(init.text() == "IB mlx5_0:1 400G");
  CHECK(init.ports.size() == 2);
  CHECK(init.ports[1].state == IbPortFacts::kInit);
  CHECK_FALSE(init.ports[1].used());

  NcclNetFacts roce = choose(fixture("roce-cx6"), env, k221);
  CHECK(roce.text() == "RoCE v2 gid 3 mlx5_0:1,mlx5_1:1 200G");
  CHECK(roce.ports[0].gid == "::ffff:198.18.0.11");
  CHECK(roce.ports[0].netdev == "ens1f0np0");
  CHECK(roce.nics == 1);  // two ports of one NIC merge from 2.20
  CHECK(choose(fixture("roce-cx6"), {{"NCCL_IB_MERGE_NICS", "0"}}, k221).nics == 2);
  NcclNetFacts roce_old = choose(fixture("roce-cx6"), env, k218);
  CHECK(roce_old.text() == "RoCE v1 gid 0 mlx5_0:1,mlx5_1:1 200G");
  CHECK(roce_old.nics == 2);
  CHECK((roce_old.ports[0].flags & IbPortFacts::kGidLinkLocal) != 0);

  CHECK(choose(fixture("roce-bond"), env).text() == "RoCE v2 gid 3 mlx5_bond_0:1 200G");
  NcclNetFacts ll = choose(fixture("roce-linklocal"), env);
  CHECK(ll.ports[0].gid_index == 0);
  CHECK((ll.ports[0].flags & IbPortFacts::kGidLinkLocal) != 0);
  CHECK(choose(fixture("roce-ipv6"), {{"NCCL_IB_ADDR_FAMILY", "AF_INET6"}}).ports[0].gid_family ==
        6);

  NcclNetFacts cont = choose(fixture("ib-cx7-container"), env);
  CHECK(cont.text() == "Socket (no /dev/infiniband)");
  CHECK((cont.flags & NcclNetFacts::kContainer) != 0);
  CHECK(choose(fixture("no-ib"), env).text() == "Socket (no IB device)");
}

TEST_CASE("NCCL's switches: NCCL_IB_HCA, NCCL_IB_DISABLE, NCCL_NET", "[nccl_ib]") {
  IbHostView v = fixture("ib-cx7");
  CHECK(choose(v, {{"NCCL_IB_HCA", "mlx5_1"}}).text() == "IB mlx5_1:1 400G");
  CHECK(choose(v, {{"NCCL_IB_HCA", "^mlx5_0"}}).text() == "IB mlx5_1:1 400G");
  NcclNetFacts none = choose(v, {{"NCCL_IB_HCA", "=mlx5_2"}});
  CHECK(none.text() == "Socket (NCCL_IB_HCA matches no port)");
  CHECK(none.rule == "NCCL_IB_HCA==mlx5_2");
  CHECK(choose(v, {{"NCCL_IB_DISABLE", "1"}}).text() == "Socket (NCCL_IB_DISABLE set)");
  CHECK(choose(v, {{"NCCL_NET", "Socket"}}).transport == NcclNetFacts::kSocket);
  NcclNetFacts ofi = choose(v, {{"NCCL_NET", "AWS Libfabric"}});
  CHECK(ofi.transport == NcclNetFacts::kNoNet);
  CHECK(ofi.text() == "none (NCCL_NET=AWS Libfabric not found)");
  // NCCL_NET=IB where IB has nothing: no network at all, not a fallback.
  CHECK(choose(fixture("no-ib"), {{"NCCL_NET", "IB"}}).transport == NcclNetFacts::kNoNet);
  IbHostView no_verbs = v;
  no_verbs.verbs_library = false;
  CHECK(choose(no_verbs, {}).text() == "Socket (no libibverbs)");
}

TEST_CASE("the loader finds a plugin on LD_LIBRARY_PATH or under the root", "[nccl_ib]") {
  SysFs sys{std::string(RANKCHECK_FIXTURES) + "/sysfs/ib-cx7"};
  CHECK(sys.find_library("libibverbs.so.1", "").has_value());  // through ld.so.conf.d
  CHECK_FALSE(sys.find_library("libnccl-net.so", "").has_value());
  std::string lib = std::string(RANKCHECK_FIXTURES) + "/sysfs/ib-cx7/usr/lib/x86_64-linux-gnu";
  CHECK(SysFs{}.find_library("libibverbs.so.1", "/nonexistent:" + lib) == lib + "/libibverbs.so.1");
}

TEST_CASE("the record carries NCCL's data network through the codec", "[nccl_ib]") {
  Record r = test::member(0, 1, "gpu-01");
  r.nccl_net = choose(fixture("roce-cx6"), {}, k221);
  r.nccl_net.edit().memlock = 64 << 10;
  r.nccl_net.edit().plugin_abi = 1u << 8 | 1u << 5;
  Writer w;
  encode_record(w, r);
  Reader rd(w.data());
  Record back = decode_record(rd);
  REQUIRE(rd.ok());
  CHECK(back.nccl_net->text() == r.nccl_net->text());
  CHECK(back.nccl_net->memlock == 64 << 10);
  CHECK(back.nccl_net->ports.size() == 2);
  CHECK(back.nccl_net->ports[1].gid == "::ffff:198.18.1.11");
  CHECK(back.nccl_net->gid_rule == r.nccl_net->gid_rule);
  CHECK(back.nccl_net->plugin_abi == (1u << 8 | 1u << 5));
}

TEST_CASE("a record's data network with an unknown transport or port state is refused",
          "[nccl_ib]") {
  NcclNetFacts f = choose(fixture("ib-cx7"), {});
  Writer w;
  encode_nccl_net(w, f);
  std::vector<uint8_t> bad = w.data();
  bad[0] = 9;  // the transport
  Reader r(bad);
  (void)decode_nccl_net(r);
  CHECK_FALSE(r.ok());
  Reader good(w.data());
  CHECK(decode_nccl_net(good).ports.size() == 2);
  CHECK(good.ok());
}

namespace {

// A job of one rank per host, each host's facts from a fixture.
JobView job_of(const std::vector<std::string>& fixtures, const EnvMap& env = {}, int32_t v = 0) {
  JobView job = test::healthy_job(static_cast<int>(fixtures.size()), 1);
  for (size_t i = 0; i < fixtures.size(); ++i)
    job.members[i].record.nccl_net = choose(fixture(fixtures[i]), env, v);
  return job;
}

}  // namespace

TEST_CASE("findings: a host on sockets among hosts on IB", "[nccl_ib][rules]") {
  JobView ok = job_of({"ib-cx7", "ib-cx7"});
  CHECK(test::clean_and_silent(ok));

  JobView v = job_of({"ib-cx7", "ib-cx7", "ib-cx7-container"});
  CHECK_FALSE(test::tracker_clean(v));
  auto fs = test::checks(v);
  const Finding* m = test::find(fs, "nccl-net-mismatch");
  REQUIRE(m != nullptr);
  CHECK(m->is_error());
  CHECK(m->hosts == std::vector<std::string>{"gpu-03"});
  CHECK(m->message ==
        "NCCL would carry the job over different networks: IB on gpu-01 and gpu-02; Socket (no "
        "/dev/infiniband) on gpu-03; ranks on IB and on sockets exchange connection handles the "
        "other side cannot use, so NCCL's init fails or hangs between them");
  const Finding* u = test::find(fs, "ib-uverbs-missing");
  REQUIRE(u != nullptr);
  CHECK_FALSE(u->is_error());
  CHECK(u->message ==
        "gpu-03 has RDMA devices (mlx5_0:1 and mlx5_1:1) but no /dev/infiniband/uverbs* in its "
        "container: NCCL cannot open them (\"NET/IB : Unable to open device\") and falls back to "
        "sockets there");
}

TEST_CASE("findings: NCCL_IB_HCA, ports not ACTIVE, counts, link layers", "[nccl_ib][rules]") {
  auto hca = test::checks(job_of({"ib-cx7", "ib-cx7"}, {{"NCCL_IB_HCA", "=mlx5_4"}}));
  const Finding* h = test::find(hca, "nccl-ib-hca-none");
  REQUIRE(h != nullptr);
  CHECK(h->message ==
        "NCCL_IB_HCA==mlx5_4 matches none of gpu-01's ports (mlx5_0:1 and mlx5_1:1): NCCL's IB "
        "transport finds no device (\"NET/IB : No device found.\") and NCCL falls back to "
        "sockets there");

  auto init = test::checks(job_of({"ib-cx7", "ib-cx7-init"}));
  const Finding* p = test::find(init, "nccl-ib-port-not-active");
  REQUIRE(p != nullptr);
  CHECK(p->hosts == std::vector<std::string>{"gpu-02"});
  CHECK(p->message ==
        "mlx5_1:1 INIT on gpu-02 is not ACTIVE: NCCL's IB transport skips ports that are not; "
        "it uses 1 port(s) there instead");
  const Finding* c = test::find(init, "nccl-ib-port-count-mismatch");
  REQUIRE(c != nullptr);
  CHECK_FALSE(c->is_error());

  auto mixed = test::checks(job_of({"ib-cx7", "roce-cx6"}));
  const Finding* l = test::find(mixed, "nccl-ib-link-layer-mismatch");
  REQUIRE(l != nullptr);
  CHECK(l->is_error());
  CHECK(test::find(mixed, "nccl-ib-port-count-mismatch") == nullptr);
}

TEST_CASE("findings: RoCE GIDs, plugins, NCCL_NET, memlock", "[nccl_ib][rules]") {
  CHECK(test::clean_and_silent(job_of({"roce-cx6", "roce-cx6-b"})));
  auto ll = test::checks(job_of({"roce-cx6", "roce-linklocal"}));
  const Finding* g = test::find(ll, "nccl-roce-gid-link-local");
  REQUIRE(g != nullptr);
  CHECK(g->is_error());
  CHECK(g->hosts == std::vector<std::string>{"gpu-02"});
  // Before 2.21 every host takes GID 0, link-local: one L2 segment only, a warning.
  auto old = test::checks(job_of({"roce-cx6", "roce-cx6-b"}, {}, k218));
  const Finding* w = test::find(old, "nccl-roce-gid-link-local");
  REQUIRE(w != nullptr);
  CHECK_FALSE(w->is_error());

  // An IPv6-only host beside IPv4 ones: NCCL (AF_INET by default) finds no IPv4 GID
  // there and keeps GID 0, link-local and IPv6.
  auto fam = test::checks(job_of({"roce-cx6", "roce-ipv6"}));
  const Finding* fm = test::find(fam, "nccl-roce-gid-family-mismatch");
  REQUIRE(fm != nullptr);
  CHECK(fm->message.find("IPv4 GIDs on gpu-01; IPv6 GIDs on gpu-02") != std::string::npos);

  JobView plug = job_of({"ib-cx7", "ib-cx7"});
  plug.members[1].record.nccl_net.edit().transport = NcclNetFacts::kPlugin;
  plug.members[1].record.nccl_net.edit().plugin = "/usr/lib/libnccl-net-aws-ofi.so";
  auto pf = test::checks(plug);
  const Finding* pm = test::find(pf, "nccl-net-plugin-mismatch");
  REQUIRE(pm != nullptr);
  CHECK(pm->message.find("plugin aws-ofi on gpu-02") != std::string::npos);

  auto net = test::checks(job_of({"ib-cx7"}, {{"NCCL_NET", "AWS Libfabric"}}));
  REQUIRE(test::find(net, "nccl-net-unavailable") != nullptr);

  JobView lock = job_of({"ib-cx7", "ib-cx7"});
  lock.members[1].record.nccl_net.edit().memlock = 64 << 10;
  CHECK_FALSE(test::tracker_clean(lock));
  auto lf = test::checks(lock);
  const Finding* ml = test::find(lf, "ib-memlock-low");
  REQUIRE(ml != nullptr);
  CHECK(ml->message ==
        "The locked-memory limit (RLIMIT_MEMLOCK) on gpu-02 is 64 KiB; NCCL's RDMA buffers pin "
        "about 64 MiB: ibv_reg_mr fails with \"Cannot allocate memory\" and NCCL's init fails");
  // And alone, as `rankcheck env` sees it.
  CHECK(test::find(local_checks(lock.members[1].record), "ib-memlock-low") != nullptr);
  // With CAP_IPC_LOCK (root on bare metal, the RDMA pod's IPC_LOCK) the kernel does not
  // hold registrations to the limit (ib_umem_get): no finding, however low.
  lock.members[1].record.nccl_net.edit().flags |= NcclNetFacts::kIpcLock;
  CHECK(test::clean_and_silent(lock));
  CHECK(test::find(local_checks(lock.members[1].record), "ib-memlock-low") == nullptr);
}

TEST_CASE("a device plugin's share of the NICs: per-device uverbs nodes", "[nccl_ib][rules]") {
  // Eight devices in sysfs, two uverbs nodes mapped (uverbs2, uverbs5): libibverbs
  // lists mlx5_2 and mlx5_5 only (rdma-core's try_access_device), and NCCL opens those.
  IbHostView v = fixture("ib-cx7-pod-2of8");
  REQUIRE(v.devices.size() == 8);
  CHECK(v.devices[2].uverbs == "uverbs2");
  CHECK(v.devices[2].cdev);
  CHECK_FALSE(v.devices[0].cdev);
  NcclNetFacts f = choose(v, {});
  CHECK(f.transport == NcclNetFacts::kIb);
  std::vector<std::string> used;
  for (const IbPortFacts* p : f.used_ports())
    used.push_back(p->name());
  CHECK(used == std::vector<std::string>{"mlx5_2:1", "mlx5_5:1"});
  CHECK(f.nics == 2);
  CHECK((f.ports[0].flags & IbPortFacts::kNoCdev) != 0);
  // Beside hosts whose two NICs are mapped: the same count, nothing to say (the fast
  // path hands the other port names to the full rules, which find nothing).
  JobView two = job_of({"ib-cx7", "ib-cx7-pod-2of8"});
  CHECK(test::checks(two).size() == run_always(two).size());
  // A host whose plugin mapped one NIC fewer: a port count that differs.
  IbHostView one = fixture("ib-cx7-pod-2of8");
  one.devices[5].cdev = false;
  JobView fewer = job_of({"ib-cx7", "ib-cx7"});
  fewer.members[1].record.nccl_net = choose(one, {});
  auto ff = test::checks(fewer);
  const Finding* pc = test::find(ff, "nccl-ib-port-count-mismatch");
  REQUIRE(pc != nullptr);
  CHECK(pc->message.find("2 ports on gpu-01; 1 port on gpu-02") != std::string::npos);
  // NCCL_IB_HCA naming an unmapped device: NCCL finds none, and the finding says why.
  auto hca = test::checks(job_of({"ib-cx7-pod-2of8"}, {{"NCCL_IB_HCA", "=mlx5_0"}}));
  const Finding* h = test::find(hca, "nccl-ib-hca-none");
  REQUIRE(h != nullptr);
  CHECK(h->message.find("(mlx5_0:1 has no /dev/infiniband/uverbs node that opens here, so "
                        "libibverbs does not list it)") != std::string::npos);
  // No node at all: the container finding, as before.
  CHECK(choose(fixture("ib-cx7-container"), {}).reason == NcclNetFacts::kNoUverbs);
}

TEST_CASE("NCCL's 32-device cap counts the ports it opens", "[nccl_ib]") {
  // 40 single-port devices, NCCL_IB_HCA naming the 40th: NCCL opens it (its loop stops
  // at 32 opened devices, not at the 32nd listed), and the record keeps it.
  IbHostView v;
  v.verbs_library = true;
  v.uverbs_openable = true;
  v.memlock = -1;
  for (int i = 0; i < 40; ++i) {
    IbDeviceView d;
    d.name = fmt::format("mlx5_{}", i);
    d.pci_path = fmt::format("/sys/devices/pci0000:00/0000:{:02x}:00.0", i);
    IbPortView p;
    p.state = 4;
    p.link_layer = "InfiniBand";
    p.rate_gbps = 400;
    d.ports.push_back(p);
    v.devices.push_back(d);
  }
  NcclNetFacts f = choose(v, {{"NCCL_IB_HCA", "=mlx5_39"}});
  CHECK(f.transport == NcclNetFacts::kIb);
  REQUIRE(f.used_ports().size() == 1);
  CHECK(f.used_ports()[0]->name() == "mlx5_39:1");
  CHECK(f.ports.size() == kMaxIbPorts);
  // Every device selected: the first 32 are opened, the record holds those 32.
  NcclNetFacts all = choose(v, {});
  CHECK(all.used_ports().size() == 32);
  CHECK(all.ports.size() == kMaxIbPorts);
  CHECK(all.ports.back().name() == "mlx5_31:1");
}

TEST_CASE("findings: RoCE GID families compared on every rail", "[nccl_ib][rules]") {
  // Two hosts alike on their first rail; the second host's second rail has an IPv6 GID.
  JobView j = job_of({"roce-cx6", "roce-cx6-b"});
  IbPortFacts& rail = j.members[1].record.nccl_net.edit().ports[1];
  REQUIRE(rail.used());
  rail.gid_family = 6;
  auto fs = test::checks(j);
  const Finding* fm = test::find(fs, "nccl-roce-gid-family-mismatch");
  REQUIRE(fm != nullptr);
  CHECK(fm->message.find("IPv4 GIDs on gpu-01; IPv4 GIDs but IPv6 on mlx5_1:1 on gpu-02") !=
        std::string::npos);
  CHECK(fm->hosts == std::vector<std::string>{"gpu-02"});
  CHECK_FALSE(test::tracker_clean(j));
}

TEST_CASE("report: the nccl net column, with what the stage's NCCL said beside it", "[nccl_ib]") {
  JobView v = job_of({"ib-cx7", "ib-cx7-container"});
  Report r;
  r.world_size = 2;
  r.members = v.members;
  std::string text = render_text(r, {});
  CHECK(text.find("nccl net") != std::string::npos);
  CHECK(text.find("IB mlx5_0:1,mlx5_1:1 800G") != std::string::npos);
  CHECK(text.find("Socket (no /dev/infiniband)") != std::string::npos);
  RankResult x;
  x.rank = 1;
  x.nccl_net = "Socket";
  r.stage_results.push_back(x);
  CHECK(render_text(r, {}).find("Socket (no /dev/infiniband) · NCCL: Socket") != std::string::npos);

  // Eight rails: the first and the last port, and how many.
  NcclNetFacts f = choose(fixture("ib-cx7"), {});
  while (f.ports.size() < 8) {
    f.ports.push_back(f.ports.back());
    f.ports.back().device = "mlx5_" + std::to_string(f.ports.size() - 1);
  }
  CHECK(f.text() == "IB mlx5_0:1..mlx5_7:1 (8) 3200G");
}
