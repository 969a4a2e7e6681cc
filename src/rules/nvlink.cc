// NVLink and the NVSwitch fabric of the job's GPUs, as NVML told each member
// (gpu/nvml.h): GPUs whose fabric registration is not completed, and GPUs with fewer
// NVLinks active than the same GPUs elsewhere in the job.

#include <map>

#include <fmt/format.h>

#include "base/text.h"
#include "rules/context.h"

namespace rankcheck {
namespace {

std::string gpu_label(const GpuDevice& d) {
  return fmt::format("{} (rank {})", printable(d.pci_bus_id, 20), d.rank);
}

// The NVLink count most of the job's GPUs of one name have.
std::map<std::string_view, int8_t> usual_nvlinks(const JobView& v) {
  std::map<std::string_view, std::map<int8_t, size_t>> counts;
  for (const Member& m : v.members) {
    for (const GpuDevice& d : m.record.gpu.devices) {
      if (d.nvlinks >= 0) ++counts[d.name.str()][d.nvlinks];
    }
  }
  std::map<std::string_view, int8_t> usual;
  for (const auto& [name, by] : counts) {
    size_t best = 0;
    for (const auto& [n, c] : by) {
      if (c > best || (c == best && n > usual[name])) usual[name] = n, best = c;
    }
  }
  return usual;
}

}  // namespace

bool nvlink_fabric_down(const Record& r) {
  for (const GpuDevice& d : r.gpu.devices) {
    if (d.fabric_down()) return true;
  }
  return false;
}

void check_nvlink_fabric(const CheckContext& ctx, std::vector<Finding>& out) {
  if (!ctx.view.gpu_stage) return;
  std::vector<std::string> parts;
  Records about;
  for (const auto& [host, rs] : ctx.hosts) {
    std::vector<std::string> named;
    for (const Record* r : by_rank(rs)) {
      if (!nvlink_fabric_down(*r)) continue;
      about.push_back(r);
      for (const GpuDevice& d : r->gpu.devices) {
        if (!d.fabric_down()) continue;
        named.push_back(
            d.fabric_state == GpuDevice::kFabricCompleted
                ? fmt::format("{} completed with NVML error {}", gpu_label(d), d.fabric_status)
                : fmt::format("{} {}", gpu_label(d), fabric_state_text(d.fabric_state)));
      }
    }
    if (!named.empty())
      parts.push_back(fmt::format("{}: {}", printable(host, 40), join(named, ", ", 4)));
  }
  if (parts.empty()) return;
  out.push_back(make(FindingId::kNvlinkFabricDown,
                     fmt::format("GPUs whose NVLink fabric registration is not completed (NVML's "
                                 "fabric state) on {}: NCCL uses multi-node NVLink only where "
                                 "every rank's is (src/mnnvl.cc), so the job's traffic between "
                                 "hosts goes over the network instead",
                                 join(parts, "; ", 4)),
                     {}, about));
}

void check_nvlink_count(const CheckContext& ctx, std::vector<Finding>& out) {
  if (!ctx.view.gpu_stage) return;
  auto usual = usual_nvlinks(ctx.view);
  std::vector<std::string> parts;
  Records about;
  for (const auto& [host, rs] : ctx.hosts) {
    std::vector<std::string> named;
    for (const Record* r : by_rank(rs)) {
      bool short_of = false;
      for (const GpuDevice& d : r->gpu.devices) {
        auto it = usual.find(d.name.str());
        if (d.nvlinks < 0 || it == usual.end() || d.nvlinks >= it->second) continue;
        named.push_back(fmt::format("{} has {} of {}", gpu_label(d), d.nvlinks, it->second));
        short_of = true;
      }
      if (short_of) about.push_back(r);
    }
    if (!named.empty())
      parts.push_back(fmt::format("{}: {}", printable(host, 40), join(named, ", ", 4)));
  }
  if (parts.empty()) return;
  out.push_back(
      make(FindingId::kNvlinkDown,
           fmt::format("GPUs with fewer NVLinks active than the job's other GPUs of their "
                       "kind, on {}: their NVLink traffic runs at that share of its "
                       "bandwidth, and a GPU with none goes through PCIe",
                       join(parts, "; ", 4)),
           {}, about));
}

}  // namespace rankcheck
