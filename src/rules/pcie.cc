// The PCIe under NCCL on each host (model/pcie.h): links below their maximum, ACS
// that sends peer-to-peer traffic up to the root complex, an IOMMU translating the DMA
// of GPUDirect RDMA, GPUs whose nearest HCA NCCL does not use or that reach theirs
// farther than their peers do, and an NCCL_TOPO_FILE NCCL would not read.

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "base/text.h"
#include "rules/context.h"

namespace rankcheck {
namespace {

// A device once per host (in node mode one member stands for all its GPUs; in rank
// mode the host's members each name the same HCAs).
template <typename Pick>
std::vector<std::pair<const PcieDevice*, const Record*>> host_devices(const Records& rs,
                                                                      Pick pick) {
  std::vector<std::pair<const PcieDevice*, const Record*>> out;
  std::set<std::string_view> seen;
  for (const Record* r : by_rank(rs)) {
    for (const PcieDevice& d : r->pcie.devices) {
      if (pick(d) && seen.insert(d.bdf.str()).second) out.emplace_back(&d, r);
    }
  }
  return out;
}

std::string device_label(const PcieDevice& d) {
  if (d.kind == PcieDevice::kGpu) {
    return d.rank >= 0
               ? fmt::format("{} {} (rank {})", printable(d.name, 16), printable(d.bdf, 16), d.rank)
               : fmt::format("{} {}", printable(d.name, 16), printable(d.bdf, 16));
  }
  return fmt::format("{} {}", printable(d.name, 32), printable(d.bdf, 16));
}

// A GPU's link slows its speed when idle (the check runs before the job): only its
// width is compared. An HCA's link keeps both.
bool degraded(const PcieDevice& d) {
  return d.link.width_short() || (d.kind == PcieDevice::kHca && d.link.speed_short());
}

std::string link_text(const PcieLink& l, bool speed) {
  std::vector<std::string> parts;
  if (l.width_short()) parts.push_back(fmt::format("x{} of x{}", l.width, l.max_width));
  if (speed && l.speed_short())
    parts.push_back(
        fmt::format("{} of {}", link_speed_text(l.speed), link_speed_text(l.max_speed)));
  return join(parts, ", ", 2);
}

bool gdr_on(const Record& r) {
  return r.nccl_net->transport == NcclNetFacts::kIb && r.nccl_net->gdr == NcclNetFacts::kGdrPeermem;
}

}  // namespace

bool pcie_alone_raises(const Record& r) {
  const PcieFacts& f = r.pcie;
  if (!f.topo_error.empty() || !f.acs.empty()) return true;
  for (const PcieDevice& d : f.devices) {
    if (degraded(d) || !d.near_nic.empty()) return true;
    // Conservative: the host's GPUDirect RDMA may be another record's to tell.
    if (d.iommu == PcieDevice::kIommuDma) return true;
  }
  return false;
}

void check_pcie_link(const CheckContext& ctx, std::vector<Finding>& out) {
  std::vector<std::string> parts;
  Records about;
  for (const auto& [host, rs] : ctx.hosts) {
    auto devs = host_devices(rs, degraded);
    if (devs.empty()) continue;
    std::vector<std::string> named;
    for (const auto& [d, r] : devs) {
      named.push_back(fmt::format("{} at {}", device_label(*d),
                                  link_text(d->link, d->kind == PcieDevice::kHca)));
      if (std::find(about.begin(), about.end(), r) == about.end()) about.push_back(r);
    }
    parts.push_back(fmt::format("{}: {}", printable(host, 40), join(named, "; ", 4)));
  }
  if (parts.empty()) return;
  out.push_back(make(FindingId::kPcieLinkDegraded,
                     fmt::format("PCIe links below their maximum on {} (a GPU's link slows its "
                                 "speed when idle, so only its width is compared): NCCL's traffic "
                                 "through them runs at that share of its speed",
                                 join(parts, "; ", 4)),
                     {}, about));
}

void check_pcie_acs(const CheckContext& ctx, std::vector<Finding>& out) {
  std::vector<std::string> parts;
  Records about;
  for (const auto& [host, rs] : ctx.hosts) {
    std::map<std::string_view, uint16_t> bridges;
    for (const Record* r : rs) {
      for (const AcsBridge& b : r->pcie.acs)
        bridges.emplace(b.bdf.str(), b.ctl);
    }
    if (bridges.empty()) continue;
    // A board's bridges mostly share one setting: said once, with its bridges.
    std::map<uint16_t, std::vector<std::string>> by_ctl;
    for (const auto& [bdf, ctl] : bridges)
      by_ctl[ctl].push_back(printable(bdf, 16));
    std::vector<std::string> named;
    for (const auto& [ctl, bdfs] : by_ctl) {
      named.push_back(fmt::format("{} {} ({})", plural(bdfs.size(), "bridge", "bridges"),
                                  acs_ctl_text(ctl), format_list(bdfs, 3)));
    }
    parts.push_back(fmt::format("{}: {}", printable(host, 40), join(named, "; ", 3)));
    about.insert(about.end(), rs.begin(), rs.end());
  }
  if (parts.empty()) return;
  out.push_back(
      make(FindingId::kPcieAcsRedirect,
           fmt::format("ACS redirects peer-to-peer traffic to the root complex on bridges "
                       "above the GPUs and HCAs: {}; GPU-to-GPU copies and GPUDirect "
                       "RDMA below them go through the CPU, slowly, or hang in NCCL's "
                       "init or first collective (NVIDIA/nccl#2079)",
                       join(parts, "; ", 4)),
           {}, about));
}

void check_iommu(const CheckContext& ctx, std::vector<Finding>& out) {
  std::vector<std::string> parts;
  Records about;
  for (const auto& [host, rs] : ctx.hosts) {
    if (!std::any_of(rs.begin(), rs.end(), [](const Record* r) { return gdr_on(*r); })) continue;
    auto devs =
        host_devices(rs, [](const PcieDevice& d) { return d.iommu == PcieDevice::kIommuDma; });
    if (devs.empty()) continue;
    std::map<std::string_view, std::vector<std::string>> by_type;
    for (const auto& [d, r] : devs)
      by_type[d->iommu_type.str()].push_back(printable(d->name, 32));
    std::vector<std::string> named;
    for (const auto& [type, names] : by_type)
      named.push_back(fmt::format("{} of {}", printable(type, 16), format_list(names, 4)));
    std::string cmdline = devs.front().second->pcie.cmdline.str();
    parts.push_back(fmt::format("{} ({}{})", printable(host, 40), join(named, ", ", 4),
                                cmdline.empty() ? "" : "; kernel: " + printable(cmdline, 80)));
    about.insert(about.end(), rs.begin(), rs.end());
  }
  if (parts.empty()) return;
  out.push_back(make(FindingId::kIommuTranslated,
                     fmt::format("the IOMMU translates the DMA of GPUs and HCAs (iommu_group type) "
                                 "while GPUDirect RDMA is on (nvidia_peermem) on {}: the NIC's "
                                 "reads and writes of GPU memory fail or hang (NVIDIA/nccl#1737)",
                                 join(parts, "; ", 4)),
                     {}, about));
}

void check_nic_far(const CheckContext& ctx, std::vector<Finding>& out) {
  std::vector<std::string> parts;
  Records about;
  for (const auto& [host, rs] : ctx.hosts) {
    auto devs = host_devices(rs, [](const PcieDevice& d) { return !d.near_nic.empty(); });
    if (devs.empty()) continue;
    std::vector<std::string> named;
    for (const auto& [d, r] : devs) {
      std::string used = d->nic.empty() ? std::string("no HCA of its own")
                                        : fmt::format("{} ({})", printable(d->nic, 32),
                                                      pci_path_text(PciPath(d->nic_path)));
      named.push_back(fmt::format("{}: {} ({}) is nearer, but {}; NCCL gives it {}",
                                  device_label(*d), printable(d->near_nic, 32),
                                  pci_path_text(PciPath(d->near_path)), printable(d->near_why, 64),
                                  used));
      if (std::find(about.begin(), about.end(), r) == about.end()) about.push_back(r);
    }
    parts.push_back(fmt::format("{}: {}", printable(host, 40), join(named, "; ", 4)));
  }
  if (parts.empty()) return;
  out.push_back(make(FindingId::kNcclNicFar,
                     fmt::format("GPUs whose nearest HCA NCCL does not use, on {} (PIX: one PCIe "
                                 "switch between; PXB: more; PHB: through a CPU; SYS: across "
                                 "CPUs): their network traffic crosses the CPU and shares another "
                                 "GPU's HCA",
                                 join(parts, "; ", 3)),
                     {}, about));
}

// A GPU (by its place among its host's) that reaches the HCA NCCL gives it farther than
// the same GPU does on most hosts: a rail that is down or missing there, so that its
// traffic goes out on another GPU's rail.
void check_rails(const CheckContext& ctx, std::vector<Finding>& out) {
  if (ctx.hosts.size() < 2) return;
  // GPU name -> host -> (path, the device, its record)
  std::map<std::string_view,
           std::map<std::string_view, std::pair<const PcieDevice*, const Record*>>>
      by_gpu;
  for (const auto& [host, rs] : ctx.hosts) {
    auto devs = host_devices(rs, [](const PcieDevice& d) {
      return d.kind == PcieDevice::kGpu && d.nic_path != 0 && d.name.str() != "GPU";
    });
    for (const auto& [d, r] : devs)
      by_gpu[d->name.str()][host] = {d, r};
  }
  std::vector<std::string> parts;
  Records about;
  for (const auto& [gpu, hosts] : by_gpu) {
    std::map<uint8_t, size_t> count;
    for (const auto& [h, dr] : hosts)
      ++count[dr.first->nic_path];
    if (count.size() < 2) continue;
    auto most = std::max_element(count.begin(), count.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    if (most->second * 2 <= hosts.size()) continue;  // no majority to hold the others to
    std::vector<std::string> odd;
    const PcieDevice* usual = nullptr;
    for (const auto& [h, dr] : hosts) {
      const PcieDevice& d = *dr.first;
      if (d.nic_path == most->first) {
        if (usual == nullptr) usual = &d;
        continue;
      }
      if (d.nic_path < most->first) continue;  // nearer than its peers: nothing lost
      if (!d.near_nic.empty()) continue;       // nccl-nic-far says why
      odd.push_back(fmt::format("{} ({}, {})", printable(h, 40), printable(d.nic, 32),
                                pci_path_text(PciPath(d.nic_path))));
      if (std::find(about.begin(), about.end(), dr.second) == about.end())
        about.push_back(dr.second);
    }
    if (odd.empty() || usual == nullptr) continue;
    parts.push_back(
        fmt::format("{} reaches its HCA farther on {} than on the other {} hosts ({}, "
                    "{})",
                    printable(gpu, 16), join(odd, ", ", 3), most->second, printable(usual->nic, 32),
                    pci_path_text(PciPath(most->first))));
  }
  if (parts.empty()) return;
  out.push_back(make(FindingId::kNcclRailMismatch,
                     fmt::format("{}: NCCL gives such a GPU another GPU's HCA, so its traffic "
                                 "leaves on another rail and shares that HCA",
                                 join(parts, "; ", 4)),
                     {}, about));
}

void check_topo_file(const CheckContext& ctx, std::vector<Finding>& out) {
  std::map<std::string_view, Records> by_error;
  for (const Member& m : ctx.view.members) {
    if (!m.record.pcie.topo_error.empty())
      by_error[m.record.pcie.topo_error.str()].push_back(&m.record);
  }
  for (const auto& [error, rs] : by_error) {
    out.push_back(make(FindingId::kNcclTopoFileInvalid,
                       fmt::format("NCCL_TOPO_FILE for {}: {}", where(rs), printable(error, 300)),
                       {}, rs));
  }
}

}  // namespace rankcheck
