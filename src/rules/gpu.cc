// The GPU rules before any NCCL call, over the records: one GPU per rank, one NCCL,
// a driver everywhere. The stage's results have theirs in stage.cc.

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "base/odd_ones_out.h"
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
    case GpuState::kStuck:
      return "the GPU driver stuck";
  }
  return "?";
}

// Members grouped by a key, the largest group first: "who says what". Between
// groups as big, the one with the lowest rank (the master's side).
template <class Key, class Fn>
std::vector<Saying<Key, const Record*>> group_by(const JobView& v, Fn key_of) {
  Records all;
  for (const Member& m : v.members)
    all.push_back(&m.record);
  auto lowest = [](const Records& rs) {
    long low = kMaxWorldSize;
    for (const Record* r : rs)
      low = std::min(low, long(r->rank));
    return low;
  };
  return odd_ones_out<Key>(
      all, [&key_of](const Record* r) { return key_of(*r); },
      [&lowest](const auto& a, const auto& b) { return lowest(a.items) < lowest(b.items); });
}

bool any_usable(const JobView& v) {
  return std::any_of(v.members.begin(), v.members.end(),
                     [](const Member& m) { return m.record.gpu.usable(); });
}

// What the GPU hosts must agree on: a table row each. A member says a value (or
// nothing: nullopt), the members are grouped by it (odd_ones_out), and the groups
// after the biggest are named as odd.
struct Agreement {
  FindingId id;
  std::optional<std::string> (*key)(const Record& r);  ///< what the member says
  const char* phrase;                                  ///< "hosts load different NCCL versions"
  /// One group in words, and what joins it to the next ("; ", or ", " then " but ").
  std::string (*part)(const Record& first, const std::string& where);
  bool but;
  const char* fix;
};

constexpr Agreement kAgreements[] = {
    {FindingId::kNcclVersionMismatch,
     [](const Record& r) -> std::optional<std::string> {
       if (!r.gpu.usable() || !r.gpu.nccl_loaded()) return std::nullopt;
       return fmt::format("{:010}", r.gpu.nccl_version);  // sorts as the number
     },
     "hosts load different NCCL versions",
     [](const Record& r, const std::string& where) {
       return fmt::format("{} loads NCCL {} ({})", where, nccl_version_text(r.gpu.nccl_version),
                          printable(r.gpu.nccl_path, 80));
     },
     true,
     "every rank must load the same NCCL: install one version everywhere, or point --nccl-lib "
     "(RANKCHECK_NCCL_LIB) at the library the training job loads, e.g. the one inside its "
     "PyTorch"},
    {FindingId::kCudaDriverMismatch,
     [](const Record& r) -> std::optional<std::string> {
       if (!r.gpu.usable()) return std::nullopt;
       return fmt::format("{:010}\n{}", r.gpu.cuda_version, r.gpu.driver.str());
     },
     "hosts run different NVIDIA drivers",
     [](const Record& r, const std::string& where) {
       return fmt::format("{} on {}",
                          r.gpu.driver.str().empty()
                              ? "CUDA " + cuda_version_text(r.gpu.cuda_version)
                              : fmt::format("driver {} (CUDA {})", printable(r.gpu.driver, 32),
                                            cuda_version_text(r.gpu.cuda_version)),
                          where);
     },
     false, "usually harmless for NCCL, but a mixed fleet hides bugs: upgrade the stragglers"},
};

void check_agreement(const CheckContext& ctx, const Agreement& a, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!v.gpu_stage) return;
  auto groups = group_by<std::string>(v, a.key);
  if (groups.size() < 2) return;
  std::string parts;
  for (size_t i = 0; i < groups.size(); ++i) {
    const Records& rs = groups[i].items;
    if (!parts.empty()) parts += !a.but ? "; " : i + 1 == groups.size() ? " but " : ", ";
    parts += a.part(*rs.front(), where(rs));
  }
  out.push_back(make(a.id, fmt::format("{}: {}", a.phrase, parts), a.fix, odd_items(groups)));
}

}  // namespace

namespace {

// Ranks that share a GPU because their host shows fewer GPUs than the ranks placed
// there, while another host of the job shows enough for its own, or the launcher or
// container gave the process more than it shows: the host lost a GPU (fallen off the
// bus, left out of its configuration), not the job's LOCAL_RANK. The finding, or
// nullopt where every host is short alike and nothing says more were given (the
// job's request).
std::optional<Finding> gpus_short_on_host(const JobView& v, const std::string& host,
                                          const Records& rs, const std::vector<long>& ranks) {
  const Record& r = *rs.front();
  int32_t shown = r.gpu.device_count;
  if (shown <= 0 || r.local_world_size <= shown) return std::nullopt;
  std::map<std::string, int32_t> enough;  // other hosts that show a GPU for each rank
  for (const Member& m : v.members) {
    const Record& o = m.record;
    if (o.host != host && o.gpu.usable() && o.local_world_size > 0 &&
        o.gpu.device_count >= o.local_world_size) {
      enough[o.host] = o.gpu.device_count;
    }
  }
  std::string evidence;
  if (r.gpu.granted > shown) {
    evidence = printable(r.gpu.granted_by, 100);
  } else if (!enough.empty()) {
    std::vector<std::string> others;
    for (const auto& [h, n] : enough)
      others.push_back(fmt::format("{} shows {}", printable(h), n));
    evidence = format_list(others, 3);
  } else {
    return std::nullopt;
  }
  Finding f = make(
      FindingId::kGpuCountMismatch,
      fmt::format("{} shows {}, the job placed {} ranks there, so {} share a GPU; {}: a GPU of "
                  "{} is missing",
                  printable(host), plural(size_t(shown), "GPU", "GPUs"), r.local_world_size,
                  ranks_word(ranks), evidence, printable(host)),
      fmt::format("look at {}'s GPUs (nvidia-smi -L; dmesg for Xid 79, 'fallen off the bus') and "
                  "keep it out of the job until all are back; a GPU left out of its configuration "
                  "(CUDA_VISIBLE_DEVICES, the node's GRES) shows the same",
                  printable(host)),
      rs);
  f.ranks = ranks;
  return f;
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
    std::sort(ranks.begin(), ranks.end());
    if (auto short_of = gpus_short_on_host(v, key.first, rs, ranks)) {
      out.push_back(std::move(*short_of));
      continue;
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
  check_agreement(ctx, kAgreements[0], out);
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
                           state == GpuState::kUnavailable || state == GpuState::kStuck
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
        : state == GpuState::kStuck
            ? "take the host out of service and look at its GPUs (nvidia-smi; dmesg for Xid "
              "errors, 'fallen off the bus'); a reset or a reboot usually brings them back"
            : "";
    std::string why = key.second.empty() ? "" : ": " + printable(key.second, 200);
    if (node && rs.size() == 1 && rs.front()->gpu.device_count >= 0) {
      // One node short of GPUs while the others have theirs: said as a count.
      const Record& r = *rs.front();
      out.push_back(
          make(id,
               fmt::format("{} shows {}, its node runs {} ranks ({}-{}), while the "
                           "other nodes have a GPU for each rank",
                           printable(r.host), plural(size_t(r.gpu.device_count), "GPU", "GPUs"),
                           r.nranks, r.rank, r.last_rank()),
               hint, rs));
      continue;
    }
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
  check_agreement(ctx, kAgreements[1], out);
}

bool local_rank_wrapped(const Record& r) {
  const GpuFacts& g = r.gpu;
  // The stage's own words for a device LOCAL_RANK picked (gpu/dl_stage.cc), not one
  // --device named.
  return g.usable() && r.nranks == 1 && g.device_count > 0 && r.local_rank >= g.device_count &&
         g.choice.str().starts_with("LOCAL_RANK");
}

// Ranks whose LOCAL_RANK is past the GPUs they see (each task given one GPU: Slurm's
// --gpus-per-task=1, a device plugin's): the stage took device LOCAL_RANK % N, each
// its own GPU, and passes; a training script that calls
// torch.cuda.set_device(LOCAL_RANK) fails there with "invalid device ordinal". Where
// two of them land on one GPU, duplicate-gpu says so instead.
void check_local_rank_wrapped(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!v.gpu_stage) return;
  // A GPU on its host: by bus id (MIG slices share it), else by UUID.
  auto gpu_of = [](const Record& r, const GpuDevice& d) {
    return std::pair<std::string_view, std::string_view>{
        r.host.str(), d.pci_bus_id.empty() ? d.uuid : d.pci_bus_id.str()};
  };
  std::map<std::pair<std::string_view, std::string_view>, int> users;
  for (const Member& m : v.members) {
    for (const GpuDevice& d : m.record.gpu.devices)
      ++users[gpu_of(m.record, d)];
  }
  auto groups = group_by<int32_t>(v, [&](const Record& r) -> std::optional<int32_t> {
    if (!local_rank_wrapped(r) || r.gpu.devices.empty()) return std::nullopt;
    if (users[gpu_of(r, r.gpu.devices.front())] > 1) return std::nullopt;
    return r.gpu.device_count;
  });
  for (const auto& [count, rs] : groups) {
    const Record& r = *rs.front();
    std::vector<long> locals;
    for (const Record* x : rs)
      locals.push_back(x->local_rank);
    std::string cvd = r.gpu.visible_devices.empty()
                          ? std::string("CUDA_VISIBLE_DEVICES unset")
                          : fmt::format("rank {}: CUDA_VISIBLE_DEVICES={}", r.rank,
                                        printable(r.gpu.visible_devices, 40));
    bool one = rs.size() == 1;
    out.push_back(make(
        FindingId::kLocalRankWrapped,
        fmt::format("{} {} LOCAL_RANK {} but {} {} ({}): rankcheck used device LOCAL_RANK % {}; "
                    "a script that calls torch.cuda.set_device(LOCAL_RANK) fails there with "
                    "'invalid device ordinal'",
                    where(rs), one ? "has" : "have", format_ranks(locals),
                    one ? "sees" : "each see", plural(size_t(count), "GPU", "GPUs"), cvd, count),
        "", rs));
  }
}

bool gpu_lost(const Record& r) {
  const GpuFacts& g = r.gpu;
  return g.usable() && g.device_count >= 0 && g.granted > g.device_count &&
         r.local_world_size <= g.device_count;
}

// A process that shows fewer GPUs than its launcher or container gave it, while each
// rank of its host still has one, so the check passes: the GPU given is not there
// (fallen off the bus; a CUDA_VISIBLE_DEVICES entry naming a GPU the host does not
// have, which also hides every entry after it). Where the ranks outnumber the GPUs
// shown, gpu-count-mismatch says it instead.
void check_gpu_lost(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!v.gpu_stage) return;
  using Key = std::tuple<std::string, int32_t, int32_t, std::string>;
  auto groups = group_by<Key>(v, [](const Record& r) -> std::optional<Key> {
    if (!gpu_lost(r)) return std::nullopt;
    return Key{r.host, r.gpu.device_count, r.gpu.granted, r.gpu.granted_by};
  });
  for (const auto& [key, rs] : groups) {
    const auto& [host, shown, given, by] = key;
    int32_t lost = given - shown;
    out.push_back(
        make(FindingId::kGpuLost,
             fmt::format("{} shows {}, but {}: {} given to {} {} not there; the check ran on the "
                         "GPUs shown",
                         printable(host), plural(size_t(shown), "GPU", "GPUs"), printable(by, 100),
                         lost == 1 ? std::string("a GPU") : fmt::format("{} GPUs", lost),
                         ranks_word(ranks_of(rs)), lost == 1 ? "is" : "are"),
             "", rs));
  }
}

void check_gpu_unavailable(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!v.gpu_stage || v.members.empty() || any_usable(v)) return;
  auto groups = group_by<std::string>(v, [](const Record& r) -> std::optional<std::string> {
    if (r.gpu.error.empty()) return std::string(state_text(r.gpu.state));
    return fmt::format("{} ({})", state_text(r.gpu.state), r.gpu.error);
  });
  std::string why =
      fmt::format("{}: {}", where(groups.front().items), printable(groups.front().key, 200));
  if (groups.size() > 1) why += fmt::format(" (and {} other reasons)", groups.size() - 1);
  // Its ranks and hosts are those the message names (the first reason's).
  Finding f = make_finding(
      FindingId::kGpuUnavailable,
      fmt::format("no member has a usable GPU, so the NCCL stage did not run; {}", why));
  f.ranks = ranks_of(groups.front().items);
  f.hosts = hosts_of(groups.front().items);
  out.push_back(std::move(f));
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

Finding unique_id_failed(const std::string& host, const std::string& error) {
  Finding f = make_finding(
      FindingId::kNcclInitFailed,
      fmt::format("ncclGetUniqueId failed on the master ({}): {}", printable(host), error),
      "NCCL_DEBUG=INFO on rank 0 shows why; NCCL_SOCKET_IFNAME must name an "
      "interface rank 0 has");
  f.ranks = {0};
  f.hosts = {host};
  return f;
}

}  // namespace rankcheck
