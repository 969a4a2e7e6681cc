// The PCIe under NCCL in the reports: `rankcheck env`'s rows and the record's JSON.

#include <map>

#include <fmt/format.h>

#include "base/text.h"
#include "report/common.h"

namespace rankcheck {

namespace {

std::string link_cell(const PcieLink& l) {
  if (l.width == 0 && l.speed == 0) return "link ?";
  std::string out = fmt::format("x{}", l.width);
  if (l.max_width != l.width && l.max_width > 0) out += fmt::format(" of x{}", l.max_width);
  out += " " + (l.speed > 0 ? link_speed_text(l.speed) : std::string("? GT/s"));
  if (l.max_speed != l.speed && l.max_speed > 0) out += " of " + link_speed_text(l.max_speed);
  return out;
}

std::string_view iommu_word(const PcieDevice& d) {
  switch (d.iommu) {
    case PcieDevice::kIommuNone:
      return "no IOMMU group";
    case PcieDevice::kIommuIdentity:
      return "IOMMU passthrough";
    case PcieDevice::kIommuDma:
      return "IOMMU translates";
    default:
      return "IOMMU ?";
  }
}

std::string_view iommu_json(uint8_t v) {
  switch (v) {
    case PcieDevice::kIommuNone:
      return "none";
    case PcieDevice::kIommuIdentity:
      return "identity";
    case PcieDevice::kIommuDma:
      return "translated";
    default:
      return "unknown";
  }
}

}  // namespace

void pcie_env_rows(const Record& self, const EnvRowFn& row) {
  const PcieFacts& f = self.pcie;
  if (!f.topo_error.empty()) row("topo file", "unreadable", printable(f.topo_error, 160));
  if (!f.known()) return;
  for (const PcieDevice& d : f.devices) {
    std::string note = fmt::format("{} · {}", link_cell(d.link), iommu_word(d));
    if (!d.iommu_type.empty()) note += fmt::format(" ({})", printable(d.iommu_type, 16));
    if (d.kind == PcieDevice::kGpu && !d.nic.empty()) {
      note += fmt::format(" · HCA {} {}", printable(d.nic, 24), pci_path_text(PciPath(d.nic_path)));
    }
    if (!d.near_nic.empty()) {
      note += fmt::format(" · nearer: {} {} ({})", printable(d.near_nic, 24),
                          pci_path_text(PciPath(d.near_path)), printable(d.near_why, 48));
    }
    row(d.kind == PcieDevice::kGpu ? "pcie gpu" : "pcie hca",
        fmt::format("{} {}", printable(d.name, 16), printable(d.bdf, 16)), note);
  }
  if ((f.flags & PcieFacts::kAcsUnreadable) != 0 && f.acs.empty()) {
    row("pcie acs", "not read",
        "the bridges' config space past 64 bytes reads only as root (CAP_SYS_ADMIN)");
  } else if (f.acs.empty()) {
    row("pcie acs", "no redirect", "no bridge above these devices redirects peer-to-peer traffic");
  } else {
    // One row per ACS setting: a board's bridges mostly share one.
    std::map<uint16_t, std::vector<std::string>> by_ctl;
    for (const AcsBridge& b : f.acs)
      by_ctl[b.ctl].push_back(printable(b.bdf, 16));
    for (const auto& [ctl, bdfs] : by_ctl) {
      row("pcie acs", plural(bdfs.size(), "bridge redirects", "bridges redirect"),
          fmt::format("{} · {}", acs_ctl_text(ctl), format_list(bdfs, 4)));
    }
  }
  row("iommu", f.cmdline.empty() ? "-" : printable(f.cmdline, 40),
      "the kernel command line's words");
}

nlohmann::json pcie_json(const PcieFacts& f) {
  if (f.empty()) return nullptr;
  nlohmann::json devices = nlohmann::json::array();
  for (const PcieDevice& d : f.devices) {
    nlohmann::json j = {{"kind", d.kind == PcieDevice::kGpu ? "gpu" : "hca"},
                        {"bdf", d.bdf},
                        {"name", d.name},
                        {"link_speed_gts", d.link.speed / 10.0},
                        {"max_link_speed_gts", d.link.max_speed / 10.0},
                        {"link_width", d.link.width},
                        {"max_link_width", d.link.max_width},
                        {"iommu", iommu_json(d.iommu)},
                        {"iommu_type", d.iommu_type}};
    if (d.kind == PcieDevice::kGpu) {
      j["rank"] = d.rank;
      j["hca"] = d.nic.empty() ? nlohmann::json() : nlohmann::json(d.nic);
      j["hca_path"] =
          d.nic_path == 0 ? nlohmann::json() : nlohmann::json(pci_path_text(PciPath(d.nic_path)));
      if (!d.near_nic.empty()) {
        j["nearer_hca"] = {{"name", d.near_nic},
                           {"path", pci_path_text(PciPath(d.near_path))},
                           {"why_unused", d.near_why}};
      }
    }
    devices.push_back(std::move(j));
  }
  nlohmann::json acs = nlohmann::json::array();
  for (const AcsBridge& b : f.acs)
    acs.push_back({{"bdf", b.bdf}, {"ctl", b.ctl}, {"text", acs_ctl_text(b.ctl)}});
  return {{"devices", devices},
          {"acs_redirect", acs},
          {"acs_readable", (f.flags & PcieFacts::kAcsUnreadable) == 0},
          {"cmdline", f.cmdline},
          {"topo_file_error", f.topo_error}};
}

}  // namespace rankcheck
