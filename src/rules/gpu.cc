// The GPU rules before any NCCL call, over the records: one GPU per rank, one NCCL,
// a driver everywhere. The stage's results have theirs in stage.cc.

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "base/text.h"
#include "rules/context.h"

namespace rankcheck {
namespace {

const char* state_text(GpuState s) {
  switch (s) {
    case GpuState::kUsable:
      return "usable";
    case GpuState::kSkipped:
      return "skipped (--no-gpu)";
    case GpuState::kNoDriver:
      return "no CUDA driver";
    case GpuState::kInitFailed:
      return "CUDA init failed";
    case GpuState::kNoDevice:
      return "no GPU";
    case GpuState::kUnavailable:
      return "GPU stage not built";
  }
  return "?";
}

// Members grouped by a key, the largest group first: "who says what".
template <class Key, class Fn>
std::vector<std::pair<Key, Records>> group_by(const JobView& v, Fn key_of) {
  std::map<Key, Records> groups;
  for (const Member& m : v.members) {
    if (auto k = key_of(m.record)) groups[*k].push_back(&m.record);
  }
  std::vector<std::pair<Key, Records>> out(groups.begin(), groups.end());
  // Largest first; between equals, the one with the lowest rank (the master's side).
  auto lowest = [](const Records& rs) {
    long low = kMaxWorldSize;
    for (const Record* r : rs)
      low = std::min(low, long(r->rank));
    return low;
  };
  std::stable_sort(out.begin(), out.end(), [&](const auto& a, const auto& b) {
    if (a.second.size() != b.second.size()) return a.second.size() > b.second.size();
    return lowest(a.second) < lowest(b.second);
  });
  return out;
}

bool any_usable(const JobView& v) {
  return std::any_of(v.members.begin(), v.members.end(),
                     [](const Member& m) { return m.record.gpu.usable(); });
}

}  // namespace

void check_duplicate_gpu(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!v.gpu_stage) return;
  // Two ranks on one host with one GPU: one PCI bus id, which MIG slices of a GPU
  // share under UUIDs of their own (NCCL: "Duplicate GPU detected"); the UUID
  // where the bus id is not known.
  std::map<std::pair<std::string, std::string>,
           std::vector<std::pair<const Record*, const GpuDevice*>>>
      by_gpu;
  for (const Member& m : v.members) {
    for (const GpuDevice& d : m.record.gpu.devices) {
      if (!d.pci_bus_id.empty()) {
        by_gpu[{m.record.host, "bus " + d.pci_bus_id.str()}].emplace_back(&m.record, &d);
      } else if (!d.uuid.empty()) {
        by_gpu[{m.record.host, "uuid " + d.uuid}].emplace_back(&m.record, &d);
      }
    }
  }
  for (const auto& [key, users] : by_gpu) {
    if (users.size() < 2) continue;
    Records rs;
    std::vector<std::string> how;
    std::vector<long> ranks;
    std::vector<std::string> uuids;
    for (const auto& [rec, dev] : users) {
      rs.push_back(rec);
      ranks.push_back(dev->rank);
      if (std::find(uuids.begin(), uuids.end(), dev->uuid) == uuids.end()) {
        uuids.push_back(dev->uuid);
      }
      std::string cvd =
          rec->gpu.visible_devices.empty()
              ? std::string("CUDA_VISIBLE_DEVICES unset")
              : fmt::format("CUDA_VISIBLE_DEVICES={}", printable(rec->gpu.visible_devices, 40));
      how.push_back(fmt::format("rank {} (LOCAL_RANK={}, {}, device {})", dev->rank,
                                rec->local_rank, cvd, dev->ordinal));
    }
    Finding f;
    if (uuids.size() == 1) {
      f = make(FindingId::kDuplicateGpu,
               fmt::format("{} on {} use the same GPU {}: {}", ranks_word(ranks),
                           printable(key.first), printable(uuids.front(), 64), join(how, "; ", 4)),
               "NCCL refuses two ranks on one GPU at init, after every other rank has "
               "waited: give each process its own device (LOCAL_RANK must differ, and "
               "CUDA_VISIBLE_DEVICES must not pin them to one GPU)",
               rs);
    } else {
      std::vector<std::string> names;
      for (const std::string& u : uuids)
        names.push_back(printable(u, 64));
      f = make(FindingId::kDuplicateGpu,
               fmt::format("{} on {} use the same GPU {} through different MIG slices ({}): {}",
                           ranks_word(ranks), printable(key.first),
                           printable(users.front().second->pci_bus_id, 32), format_list(names, 4),
                           join(how, "; ", 4)),
               "NCCL refuses two ranks on one GPU at init, and MIG slices of one GPU are one "
               "GPU to it: give each rank a slice of a different GPU, or a whole GPU",
               rs);
    }
    f.ranks = ranks;
    std::sort(f.ranks.begin(), f.ranks.end());
    out.push_back(std::move(f));
  }
}

void check_nccl_version(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!v.gpu_stage) return;
  auto groups = group_by<int32_t>(v, [](const Record& r) -> std::optional<int32_t> {
    if (!r.gpu.usable() || !r.gpu.nccl_loaded()) return std::nullopt;
    return r.gpu.nccl_version;
  });
  if (groups.size() < 2) return;
  std::string parts;
  Records odd;
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& [version, rs] = groups[i];
    if (!parts.empty()) parts += i + 1 == groups.size() ? " but " : ", ";
    parts += fmt::format("{} loads NCCL {} ({})", where(rs), nccl_version_text(version),
                         printable(rs.front()->gpu.nccl_path, 80));
    if (i > 0) odd.insert(odd.end(), rs.begin(), rs.end());
  }
  out.push_back(make(FindingId::kNcclVersionMismatch,
                     fmt::format("hosts load different NCCL versions: {}", parts),
                     "every rank must load the same NCCL: install one version everywhere, or "
                     "point --nccl-lib (RANKCHECK_NCCL_LIB) at the library the training job "
                     "loads, e.g. the one inside its PyTorch",
                     odd));
}

void check_gpu_usable(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!v.gpu_stage || !any_usable(v)) return;
  // Hosts without a usable driver, and ranks without a device, while others have them.
  auto groups = group_by<std::pair<int, std::string>>(
      v, [](const Record& r) -> std::optional<std::pair<int, std::string>> {
        if (r.gpu.usable()) return std::nullopt;
        return std::pair{static_cast<int>(r.gpu.state), r.gpu.error};
      });
  for (const auto& [key, rs] : groups) {
    auto state = static_cast<GpuState>(key.first);
    bool node = rs.front()->nranks > 1 && state == GpuState::kNoDevice;
    FindingId id = state == GpuState::kNoDriver || state == GpuState::kInitFailed ||
                           state == GpuState::kUnavailable
                       ? FindingId::kCudaDriverMissing
                   : node ? FindingId::kGpuCountMismatch
                          : FindingId::kGpuMissing;
    // The catalogue's fix, unless the cause is a build or a flag, not the host.
    std::string hint =
        state == GpuState::kUnavailable
            ? "the rankcheck on that host was built without the CUDA and NCCL headers, so it "
              "cannot probe GPUs: run the same GPU-enabled build on every host (rebuild with "
              "cuda.h and nccl.h installed), or pass --no-gpu to every process"
        : state == GpuState::kSkipped
            ? "pass --no-gpu to every process or to none: the NCCL stage runs only when every "
              "rank probes its GPUs"
            : "";
    std::string why = key.second.empty() ? "" : ": " + printable(key.second, 200);
    out.push_back(make(id,
                       fmt::format("{} for {}, while the other ranks have GPUs{}",
                                   state_text(state), where(rs), why),
                       hint, rs));
  }
}

void check_nccl_missing(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!v.gpu_stage) return;
  auto groups = group_by<std::string>(v, [](const Record& r) -> std::optional<std::string> {
    if (!r.gpu.usable() || r.gpu.nccl_loaded()) return std::nullopt;
    return r.gpu.nccl_error;
  });
  for (const auto& [error, rs] : groups) {
    out.push_back(make(FindingId::kNcclMissing,
                       fmt::format("NCCL not found for {}: {}", where(rs), printable(error, 200)),
                       "install NCCL on that host, or point --nccl-lib (RANKCHECK_NCCL_LIB) at "
                       "the libnccl.so.2 the training job loads",
                       rs));
  }
}

void check_cuda_driver_mismatch(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!v.gpu_stage) return;
  auto groups = group_by<std::pair<int32_t, std::string>>(
      v, [](const Record& r) -> std::optional<std::pair<int32_t, std::string>> {
        if (!r.gpu.usable()) return std::nullopt;
        return std::pair{r.gpu.cuda_version, r.gpu.driver};
      });
  if (groups.size() < 2) return;
  std::string parts;
  Records odd;
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& [key, rs] = groups[i];
    if (!parts.empty()) parts += "; ";
    parts += fmt::format("{} on {}",
                         key.second.empty()
                             ? "CUDA " + cuda_version_text(key.first)
                             : fmt::format("driver {} (CUDA {})", printable(key.second, 32),
                                           cuda_version_text(key.first)),
                         where(rs));
    if (i > 0) odd.insert(odd.end(), rs.begin(), rs.end());
  }
  out.push_back(make(FindingId::kCudaDriverMismatch,
                     fmt::format("hosts run different NVIDIA drivers: {}", parts),
                     "usually harmless for NCCL, but a mixed fleet hides bugs: upgrade the "
                     "stragglers",
                     odd));
}

void check_gpu_unavailable(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!v.gpu_stage || v.members.empty() || any_usable(v)) return;
  auto groups = group_by<std::string>(v, [](const Record& r) -> std::optional<std::string> {
    if (r.gpu.error.empty()) return std::string(state_text(r.gpu.state));
    return fmt::format("{} ({})", state_text(r.gpu.state), r.gpu.error);
  });
  std::string why =
      fmt::format("{}: {}", where(groups.front().second), printable(groups.front().first, 200));
  if (groups.size() > 1) why += fmt::format(" (and {} other reasons)", groups.size() - 1);
  out.push_back(make_finding(
      FindingId::kGpuUnavailable,
      fmt::format("no member has a usable GPU, so the NCCL stage did not run; {}", why)));
}

std::optional<std::string> gpu_stage_blocker(const std::vector<Member>& members) {
  for (const Member& m : members) {
    if (m.record.gpu.state == GpuState::kSkipped) {
      return fmt::format("{} was started with --no-gpu", member_label(m.record));
    }
  }
  bool usable = std::any_of(members.begin(), members.end(),
                            [](const Member& m) { return m.record.gpu.usable(); });
  if (!usable) return std::string("no member has a usable GPU");
  return std::nullopt;
}

}  // namespace rankcheck
