// A record's PCIe facts on the wire (protocol 8: after the machine).

#include "protocol/record_codec.h"

namespace rankcheck {

namespace {
constexpr uint32_t kMaxPcieDevices = kMaxRanksPerMember + kMaxIbPorts;
constexpr uint32_t kMaxAcsBridges = 64;
}  // namespace

void encode_pcie(Writer& w, const PcieFacts& f) {
  w.u8(f.flags);
  uint32_t n = std::min<uint32_t>(static_cast<uint32_t>(f.devices.size()), kMaxPcieDevices);
  w.u32(n);
  for (uint32_t i = 0; i < n; ++i) {
    const PcieDevice& d = f.devices[i];
    w.u8(d.kind);
    w.u8(d.iommu);
    w.str(d.bdf.substr(0, 16));
    w.str(d.name.substr(0, 32));
    w.i32(d.rank);
    w.u16(d.link.speed);
    w.u16(d.link.max_speed);
    w.u8(d.link.width);
    w.u8(d.link.max_width);
    w.str(d.iommu_type.substr(0, 16));
    w.str(d.nic.substr(0, 32));
    w.u8(d.nic_path);
    w.str(d.near_nic.substr(0, 32));
    w.u8(d.near_path);
    w.str(d.near_why.substr(0, 64));
  }
  uint32_t b = std::min<uint32_t>(static_cast<uint32_t>(f.acs.size()), kMaxAcsBridges);
  w.u32(b);
  for (uint32_t i = 0; i < b; ++i) {
    w.str(f.acs[i].bdf.substr(0, 16));
    w.u16(f.acs[i].ctl);
  }
  w.str(f.cmdline.substr(0, 200));
  w.str(f.topo_error.substr(0, kMaxShortString));
}

PcieFacts decode_pcie(Reader& r) {
  PcieFacts f;
  f.flags = r.u8();
  f.devices.resize(r.count(kMaxPcieDevices, "PCIe device"));
  for (PcieDevice& d : f.devices) {
    d.kind = r.u8();
    d.iommu = r.u8();
    d.bdf = r.str(16, "PCI address");
    d.name = r.str(32, "PCIe device name");
    d.rank = r.i32();
    d.link.speed = r.u16();
    d.link.max_speed = r.u16();
    d.link.width = r.u8();
    d.link.max_width = r.u8();
    d.iommu_type = r.str(16, "IOMMU group type");
    d.nic = r.str(32, "HCA name");
    d.nic_path = r.u8();
    d.near_nic = r.str(32, "HCA name");
    d.near_path = r.u8();
    d.near_why = r.str(64, "why an HCA is not used");
    if (d.kind < PcieDevice::kGpu || d.kind > PcieDevice::kHca || d.iommu > PcieDevice::kIommuDma ||
        d.nic_path > static_cast<uint8_t>(PciPath::kSys) ||
        d.near_path > static_cast<uint8_t>(PciPath::kSys))
      r.fail("PCIe device out of bounds");
  }
  f.acs.resize(r.count(kMaxAcsBridges, "ACS bridge"));
  for (AcsBridge& b : f.acs) {
    b.bdf = r.str(16, "PCI address");
    b.ctl = r.u16();
  }
  f.cmdline = r.str(200, "kernel command line");
  f.topo_error = r.str(kMaxShortString, "NCCL_TOPO_FILE error");
  return f;
}

}  // namespace rankcheck
