// The PCIe under NCCL: sysfs's link texts, NCCL's path classes, the ACS capability
// in a config space, NCCL_TOPO_FILE as NCCL's reader takes it, the reader over the
// HGX H100 fixture trees (tests/fixtures/sysfs/README.md), and the rules.

#include "host/pcie.h"

#include <catch2/catch.hpp>

#include "helpers.h"
#include "nccl/topo_file.h"
#include "protocol/messages.h"

using namespace rankcheck;
using test::sole;
using test::tracker_clean;

namespace {

std::string fixture(const std::string& name) {
  return std::string(RANKCHECK_FIXTURES) + "/sysfs/" + name;
}

// The facts a member of `name` driving GPU `k` (the fake driver's bus id) reads.
PcieFacts read_fixture(const std::string& name, int k, const EnvMap& env = {}) {
  SysFs sys{fixture(name)};
  GpuFacts g;
  g.state = GpuState::kUsable;
  GpuDevice d;
  d.rank = k;
  d.pci_bus_id = fmt::format("00000000:{:02X}:00.0", 0x10 + k);
  g.devices.push_back(d);
  NcclNetFacts net = collect_nccl_net(sys, env, 22809, {});
  return read_pcie(sys, g, net);
}

const PcieDevice& device(const PcieFacts& f, std::string_view name) {
  for (const PcieDevice& d : f.devices) {
    if (d.name.str() == name) return d;
  }
  FAIL("no device " << name);
  return f.devices.front();
}

std::string config_with(std::vector<std::pair<uint16_t, std::vector<uint8_t>>> caps) {
  std::string c(4096, '\0');
  size_t at = 0x100;
  for (size_t i = 0; i < caps.size(); ++i) {
    size_t next = i + 1 < caps.size() ? at + 0x40 : 0;
    uint32_t h = caps[i].first | (1u << 16) | uint32_t(next << 20);
    for (int b = 0; b < 4; ++b)
      c[at + size_t(b)] = char((h >> (8 * b)) & 0xff);
    for (size_t b = 0; b < caps[i].second.size(); ++b)
      c[at + 4 + b] = char(caps[i].second[b]);
    at = next;
  }
  return c;
}

}  // namespace

TEST_CASE("pcie: link speeds as sysfs writes them") {
  CHECK(parse_link_speed("32.0 GT/s PCIe") == 320);
  CHECK(parse_link_speed("2.5 GT/s PCIe") == 25);
  CHECK(parse_link_speed("8 GT/s") == 80);  // kernels before 5.4
  CHECK(parse_link_speed("Unknown") == 0);
  CHECK(parse_link_speed("") == 0);
  CHECK(link_speed_text(160) == "16.0 GT/s");
  PcieLink l{25, 320, 8, 16};
  CHECK(l.width_short());
  CHECK(l.speed_short());
  CHECK(!PcieLink{320, 320, 16, 16}.width_short());
  CHECK(!PcieLink{0, 320, 0, 16}.speed_short());  // unknown is not short
}

TEST_CASE("pcie: how far apart two devices are, in NCCL's words") {
  auto parts = [](std::string_view p) { return pci_parts(p); };
  auto gpu = parts("/sys/devices/pci0000:00/0000:00:04.0/0000:33:00.0/0000:43:00.0/0000:13:00.0");
  auto own = parts("/sys/devices/pci0000:00/0000:00:04.0/0000:33:00.0/0000:43:08.0/0000:23:00.0");
  auto other = parts("/sys/devices/pci0000:00/0000:00:01.0/0000:30:00.0/0000:40:08.0/0000:20:00.0");
  auto far = parts("/sys/devices/pci0000:80/0000:80:01.0/0000:34:00.0/0000:44:08.0/0000:24:00.0");
  REQUIRE(gpu.size() == 5);
  CHECK(gpu.front() == "pci0000:00");
  CHECK(pci_path_between(gpu, 0, own, 0) == PciPath::kPix);
  CHECK(pci_path_between(gpu, 0, other, 0) == PciPath::kPhb);
  CHECK(pci_path_between(gpu, 0, far, 1) == PciPath::kSys);
  CHECK(pci_path_between(gpu, 0, far, 0) == PciPath::kPhb);  // two host bridges, one node
  // Two functions of one NIC; a second switch level below the first.
  auto f0 = parts("/sys/devices/pci0000:00/0000:00:01.0/0000:17:00.0");
  auto f1 = parts("/sys/devices/pci0000:00/0000:00:01.0/0000:17:00.1");
  CHECK(pci_path_between(f0, 0, f1, 0) == PciPath::kPix);
  auto deep = parts(
      "/sys/devices/pci0000:00/0000:00:04.0/0000:33:00.0/0000:43:08.0/0000:50:00.0/0000:51:00.0/"
      "0000:52:00.0");
  CHECK(pci_path_between(gpu, 0, deep, 0) == PciPath::kPxb);
  CHECK(pci_parts("/sys/devices/virtual/net/lo").empty());
  CHECK(pci_path_between({}, 0, gpu, 0) == PciPath::kUnknown);
}

TEST_CASE("pcie: the ACS Control register from a config space") {
  CHECK(!acs_from_config(std::string(64, '\0')).readable);  // without CAP_SYS_ADMIN
  AcsRead none = acs_from_config(std::string(4096, '\0'));
  CHECK(none.readable);
  CHECK(!none.ctl);
  // AER first (ID 1), then ACS (ID 0xd): capability 0x005f, control 0x001d.
  AcsRead acs = acs_from_config(config_with({{0x0001, {}}, {0x000d, {0x5f, 0x00, 0x1d, 0x00}}}));
  REQUIRE(acs.ctl);
  CHECK(*acs.ctl == 0x001d);
  CHECK(acs_ctl_text(0x001d) == "SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+");
  CHECK(acs_redirects(0x001d));
  CHECK(!acs_redirects(0x0001));
  CHECK(!acs_redirects(0x004d));  // Direct Translated P2P: a VM's ATS configuration
  // A header pointing below 0x100, or to itself, ends the walk.
  std::string loop = config_with({{0x0001, {}}});
  loop[0x102] = char(0x01);
  loop[0x103] = char(0x10);  // next = 0x100
  CHECK(!acs_from_config(loop).ctl);
}

TEST_CASE("pcie: a bus id as sysfs names the device") {
  CHECK(sysfs_bdf("00000000:1A:00.0") == "0000:1a:00.0");
  CHECK(sysfs_bdf("0000:3B:00.1") == "0000:3b:00.1");
  CHECK(sysfs_bdf("1A:00.0") == "0000:1a:00.0");
  CHECK(sysfs_bdf("GPU-1234") == "");
  CHECK(sysfs_bdf("") == "");
  CHECK(sysfs_bdf("0000:zz:00.0") == "");
}

TEST_CASE("NCCL_TOPO_FILE: what NCCL's XML reader takes and refuses") {
  using nccl::topo_file_error;
  const std::string good =
      "<!-- dumped by NCCL_TOPO_DUMP_FILE -->\n"
      "<system version=\"1\">\n"
      "  <cpu numaid=\"0\" affinity=\"0000ffff\" arch=\"x86_64\" vendor=\"GenuineIntel\">\n"
      "    <pci busid=\"0000:d7:00.0\" class=\"0x060400\" link_speed=\"32.0 GT/s\" "
      "link_width=\"16\">\n"
      "      <pci busid=\"0000:d9:00.0\" class=\"0x030200\">\n"
      "        <gpu dev=\"7\" sm=\"90\" rank=\"7\" gdr=\"1\"/>\n"
      "      </pci>\n"
      "    </pci>\n"
      "  </cpu>\n"
      "</system>\n";
  CHECK(topo_file_error(good, 22809) == "");
  CHECK(topo_file_error(good, 21806) == "");
  CHECK(topo_file_error("", 0) == "");  // nothing: NCCL detects the topology itself
  auto tabs = good;
  tabs.replace(tabs.find("  <cpu"), 2, "\t");
  CHECK(topo_file_error(tabs, 0) ==
        "line 3: XML Parse error : expecting '<', got '\\t' (a tab: NCCL reads only spaces and "
        "newlines between elements)");
  CHECK(topo_file_error("<?xml version=\"1.0\"?>\n" + good, 0) ==
        "line 1: XML Parse : expected >, got '?'");
  CHECK(topo_file_error("<system version=\"1\">\n<cpu>\n</system>\n", 0) ==
        "line 3: XML Mismatch : cpu / system");
  CHECK(topo_file_error("<system version=\"1\">\n<cpu>\n", 0) ==
        "line 3: XML Parse : unterminated cpu");
  CHECK(topo_file_error("<system version=\"2\"></system>", 0) ==
        "line 1: XML Topology has wrong version 2, 1 needed");
  CHECK(topo_file_error("<system></system>", 0) ==
        "line 1: Attribute version of node system not found");
  CHECK(topo_file_error("<system version=\"1\"\n  name=\"x\"></system>", 0) ==
        "line 2: XML Parse : expected >, got '\\n' (NCCL reads a tag's attributes on one line)");
  // Single quotes from 2.27.3.
  CHECK(topo_file_error("<system version='1'></system>", 22809) == "");
  CHECK(topo_file_error("<system version='1'></system>", 22606) ==
        "line 1: XML Parse : Expected (double) quote. (before NCCL 2.27.3 a value takes double "
        "quotes only)");
  CHECK(topo_file_error("<!-- never closed", 0) ==
        "line 1: XML Parse error : unterminated comment");
  CHECK(topo_file_error("<system version=\"1\"><gpu dev=\"0", 0) ==
        "line 1: XML Parse : Unexpected EOF");
  CHECK(topo_file_error(fmt::format("<system version=\"1\" name=\"{}\"/>", std::string(300, 'x')),
                        0) == "line 1: Error : value too long (max 255)");
}

TEST_CASE("pcie reader: an HGX H100 as built") {
  PcieFacts f = read_fixture("hgx-h100", 3);
  REQUIRE(f.known());
  CHECK(f.acs.empty());
  CHECK((f.flags & PcieFacts::kAcsUnreadable) == 0);
  CHECK(f.cmdline == "intel_iommu=on iommu=pt");
  REQUIRE(f.devices.size() == 9);  // GPU 3, then the eight HCAs NCCL opens
  const PcieDevice& g = f.devices.front();
  CHECK(g.kind == PcieDevice::kGpu);
  CHECK(g.name == "GPU 3");
  CHECK(g.bdf == "0000:13:00.0");
  CHECK(g.rank == 3);
  CHECK(g.link.width == 16);
  CHECK(g.link.speed == 25);  // idle
  CHECK(g.iommu == PcieDevice::kIommuIdentity);
  CHECK(g.nic == "mlx5_3");
  CHECK(g.nic_path == uint8_t(PciPath::kPix));
  CHECK(g.near_nic.empty());
  const PcieDevice& h = device(f, "mlx5_5");
  CHECK(h.kind == PcieDevice::kHca);
  CHECK(h.bdf == "0000:25:00.0");
  CHECK(h.link.speed == 320);
  // The job's own list leaves out GPU 3's HCA: NCCL gives it mlx5_0, through the CPU.
  PcieFacts listed = read_fixture("hgx-h100", 3, {{"NCCL_IB_HCA", "=mlx5_0,mlx5_1"}});
  const PcieDevice& lg = listed.devices.front();
  CHECK(lg.nic == "mlx5_0");
  CHECK(lg.nic_path == uint8_t(PciPath::kPhb));
  CHECK(lg.near_nic == "mlx5_3");
  CHECK(lg.near_why == "NCCL_IB_HCA leaves it out");
  // GPU 6 on the other CPU: mlx5_0 and mlx5_1 are across it.
  CHECK(read_fixture("hgx-h100", 6, {{"NCCL_IB_HCA", "=mlx5_0,mlx5_1"}}).devices.front().nic_path ==
        uint8_t(PciPath::kSys));
}

TEST_CASE("pcie reader: links trained down, ACS, the IOMMU, a port down, no root") {
  PcieFacts deg = read_fixture("hgx-h100-degraded", 2);
  CHECK(deg.devices.front().link.width == 8);
  CHECK(deg.devices.front().link.width_short());
  CHECK(device(deg, "mlx5_5").link.speed == 160);

  PcieFacts acs = read_fixture("hgx-h100-acs", 3);
  // GPU 3's root port, switch and downstream port; each HCA's three (one shared).
  CHECK(acs.acs.size() == 25);
  CHECK(acs.acs.front().ctl == 0x001d);
  CHECK(acs.devices.front().iommu == PcieDevice::kIommuDma);
  CHECK(acs.devices.front().iommu_type == "DMA-FQ");
  CHECK(acs.cmdline == "intel_iommu=on");

  PcieFacts down = read_fixture("hgx-h100-port-down", 3);
  const PcieDevice& g = down.devices.front();
  CHECK(g.nic == "mlx5_0");
  CHECK(g.near_nic == "mlx5_3");
  CHECK(g.near_path == uint8_t(PciPath::kPix));
  CHECK(g.near_why == "its port is not ACTIVE");
  CHECK(g.iommu == PcieDevice::kIommuNone);

  PcieFacts gone = read_fixture("hgx-h100-nic-missing", 3);
  CHECK(gone.devices.front().nic == "mlx5_0");
  CHECK(gone.devices.front().near_nic.empty());

  PcieFacts nonroot = read_fixture("hgx-h100-nonroot", 3);
  CHECK((nonroot.flags & PcieFacts::kAcsUnreadable) != 0);
  CHECK(nonroot.acs.empty());

  CHECK(!read_pcie(SysFs{"/nonexistent-root"}, GpuFacts{}, NcclNetFacts{}).known());
}

TEST_CASE("NCCL_TOPO_FILE: a file missing or unreadable, under the root") {
  SysFs sys{fixture("hgx-h100")};
  CHECK(topo_file_problem(sys, {}, 0) == "");
  std::string missing =
      topo_file_problem(sys, {{"NCCL_TOPO_FILE", "/opt/microsoft/ndv5-topo.xml"}}, 0);
  CHECK(
      missing.starts_with("/opt/microsoft/ndv5-topo.xml cannot be opened (No such file or "
                          "directory): NCCL goes on without it"));
  std::string bad = std::string(RANKCHECK_FIXTURES) + "/topo/tabs.xml";
  CHECK(topo_file_problem(SysFs{""}, {{"NCCL_TOPO_FILE", bad}}, 0) ==
        bad +
            ", line 2: XML Parse error : expecting '<', got '\\t' (a tab: NCCL reads only spaces "
            "and newlines between elements): NCCL's init fails on it");
  CHECK(topo_file_problem(SysFs{""},
                          {{"NCCL_TOPO_FILE", std::string(RANKCHECK_FIXTURES) + "/topo/h100.xml"}},
                          0) == "");
}

namespace {

// A GPU job on `hosts` hosts of one rank each, every member with GPU 3 and its HCA.
JobView pcie_job(int hosts) {
  JobView v = test::healthy_job(hosts, 1);
  for (Member& m : v.members) {
    PcieFacts& f = m.record.pcie;
    f.flags = PcieFacts::kRead;
    PcieDevice g;
    g.kind = PcieDevice::kGpu;
    g.bdf = "0000:13:00.0";
    g.name = "GPU 3";
    g.rank = m.record.rank;
    g.link = {25, 320, 16, 16};
    g.nic = "mlx5_3";
    g.nic_path = uint8_t(PciPath::kPix);
    PcieDevice h;
    h.kind = PcieDevice::kHca;
    h.bdf = "0000:23:00.0";
    h.name = "mlx5_3";
    h.link = {320, 320, 16, 16};
    f.devices = {g, h};
    m.record.nccl_net.edit().transport = NcclNetFacts::kIb;
    m.record.nccl_net.edit().gdr = NcclNetFacts::kGdrPeermem;
  }
  return v;
}

}  // namespace

TEST_CASE("pcie rules: a healthy board says nothing, and the tracker agrees") {
  JobView v = pcie_job(4);
  CHECK(test::checks(v).empty());
  CHECK(tracker_clean(v));
}

TEST_CASE("pcie rules: links trained down") {
  JobView v = pcie_job(3);
  v.members[1].record.pcie.devices[0].link.width = 8;
  v.members[1].record.pcie.devices[1].link.speed = 160;
  v.members[2].record.pcie.devices[0].link.speed = 25;  // an idle GPU: not a finding
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "pcie-link-degraded");
  CHECK(f.severity == Severity::kWarning);
  CHECK(f.hosts == std::vector<std::string>{"gpu-02"});
  CHECK(f.message ==
        "PCIe links below their maximum on gpu-02: GPU 3 0000:13:00.0 (rank 1) at x8 of x16; "
        "mlx5_3 0000:23:00.0 at 16.0 GT/s of 32.0 GT/s (a GPU's link slows its speed when idle, "
        "so only its width is compared): NCCL's traffic through them runs at that share of its "
        "speed");
  CHECK(!tracker_clean(v));
}

TEST_CASE("pcie rules: ACS redirect and a translating IOMMU under GPUDirect RDMA") {
  JobView v = pcie_job(2);
  v.members[0].record.pcie.acs = {{"0000:00:04.0", 0x001d}, {"0000:33:00.0", 0x001d}};
  for (PcieDevice& d : v.members[1].record.pcie.devices) {
    d.iommu = PcieDevice::kIommuDma;
    d.iommu_type = "DMA-FQ";
  }
  v.members[1].record.pcie.cmdline = "intel_iommu=on";
  auto fs = test::checks(v);
  REQUIRE(fs.size() == 2);
  CHECK(fs[0].name() == "pcie-acs-redirect");
  CHECK(fs[0].hosts == std::vector<std::string>{"gpu-01"});
  CHECK(fs[0].message ==
        "ACS redirects peer-to-peer traffic to the root complex on bridges above the GPUs and "
        "HCAs: gpu-01: 2 bridges SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+ (0000:00:04.0 and "
        "0000:33:00.0); GPU-to-GPU copies and GPUDirect RDMA below them go through the CPU, "
        "slowly, or hang in NCCL's init or first collective (NVIDIA/nccl#2079)");
  CHECK(fs[1].name() == "iommu-translated");
  CHECK(fs[1].message.starts_with(
      "the IOMMU translates the DMA of GPUs and HCAs (iommu_group type) while GPUDirect RDMA is on "
      "(nvidia_peermem) on gpu-02 (DMA-FQ of GPU 3 and mlx5_3; kernel: intel_iommu=on)"));
  CHECK(!tracker_clean(v));
  // Without GPUDirect RDMA the IOMMU's translation costs NCCL nothing: no finding (the
  // tracker stays conservative).
  for (Member& m : v.members)
    m.record.nccl_net.edit().gdr = NcclNetFacts::kGdrNone;
  auto ids = test::checks(v);
  REQUIRE(ids.size() == 1);
  CHECK(ids[0].name() == "pcie-acs-redirect");
}

TEST_CASE("pcie rules: a nearer HCA unused, and a rail missing on one host") {
  JobView v = pcie_job(5);
  PcieDevice& g1 = v.members[1].record.pcie.devices[0];
  g1.nic = "mlx5_0";
  g1.nic_path = uint8_t(PciPath::kPhb);
  g1.near_nic = "mlx5_3";
  g1.near_path = uint8_t(PciPath::kPix);
  g1.near_why = "NCCL_IB_HCA leaves it out";
  PcieDevice& g2 = v.members[2].record.pcie.devices[0];
  g2.nic = "mlx5_0";
  g2.nic_path = uint8_t(PciPath::kPhb);
  auto fs = test::checks(v);
  REQUIRE(fs.size() == 2);
  CHECK(fs[0].name() == "nccl-nic-far");
  CHECK(fs[0].hosts == std::vector<std::string>{"gpu-02"});
  CHECK(fs[0].message.starts_with(
      "GPUs whose nearest HCA NCCL does not use, on gpu-02: GPU 3 0000:13:00.0 (rank 1): mlx5_3 "
      "(PIX) is nearer, but NCCL_IB_HCA leaves it out; NCCL gives it mlx5_0 (PHB)"));
  // gpu-02's is nccl-nic-far's to explain: the rail finding names gpu-03 only.
  CHECK(fs[1].name() == "nccl-rail-mismatch");
  CHECK(fs[1].hosts == std::vector<std::string>{"gpu-03"});
  CHECK(fs[1].message ==
        "GPU 3 reaches its HCA farther on gpu-03 (mlx5_0, PHB) than on the other 3 hosts (mlx5_3, "
        "PIX): NCCL gives such a GPU another GPU's HCA, so its traffic leaves on another rail "
        "and shares that HCA");
  CHECK(!tracker_clean(v));
}

TEST_CASE("pcie rules: an NCCL_TOPO_FILE NCCL would not read is an error") {
  JobView v = pcie_job(2);
  v.members[1].record.pcie.topo_error = "/etc/nccl/topo.xml, line 2: XML Mismatch : cpu / system";
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "nccl-topo-file-invalid");
  CHECK(f.severity == Severity::kError);
  CHECK(f.exit_code == 3);
  CHECK(f.message ==
        "NCCL_TOPO_FILE for rank 1 on gpu-02: /etc/nccl/topo.xml, line 2: XML "
        "Mismatch : cpu / system");
  CHECK(!tracker_clean(v));
}

TEST_CASE("pcie: the facts round-trip on the wire") {
  JobView v = pcie_job(1);
  Record r = v.members[0].record;
  r.pcie.acs = {{"0000:00:04.0", 0x001d}};
  r.pcie.devices[0].near_nic = "mlx5_7";
  r.pcie.devices[0].near_path = uint8_t(PciPath::kPix);
  r.pcie.devices[0].near_why = "its port is not ACTIVE";
  r.pcie.cmdline = "iommu=pt";
  r.pcie.topo_error = "x";
  auto frame = encode(Hello{r, {}, {}, {}});
  auto back = decode_hello(std::span(frame).subspan(kHeaderSize));
  REQUIRE(back.ok());
  PcieFacts b = back->record.pcie;
  CHECK(b.flags == r.pcie.flags);
  REQUIRE(b.devices.size() == 2);
  CHECK(b.devices[0].name == "GPU 3");
  CHECK(b.devices[0].link.width == 16);
  CHECK(b.devices[0].near_why == "its port is not ACTIVE");
  CHECK(b.acs == r.pcie.acs);
  CHECK(b.cmdline == "iommu=pt");
  CHECK(b.topo_error == "x");
}
