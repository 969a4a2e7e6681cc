// What the NCCL release each host loads is known to do wrong (nccl/known_faults.h),
// and hosts that carry different numbers of ranks: a launcher's slip most often, and a
// deadlock in the releases with that fault.

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "base/text.h"
#include "nccl/known_faults.h"
#include "nccl/param.h"
#include "rules/context.h"

namespace rankcheck {
namespace {

// The fault's variable is set to the value that avoids it, as NCCL reads a number.
bool avoided(const Record& r, const nccl::KnownFault& f) {
  size_t eq = f.avoided_by.find('=');
  if (eq == std::string_view::npos) return false;
  std::string_view name = f.avoided_by.substr(0, eq);
  auto want = nccl::param_value(std::string(f.avoided_by.substr(eq + 1)));
  for (const EnvVar& e : r.env) {
    if (e.name == name) return want.has_value() && nccl::param_value(e.value) == want;
  }
  return false;
}

// The fault of an uneven job that the release some record loads has, if any.
const nccl::KnownFault* uneven_fault(const Records& rs) {
  for (const Record* r : rs) {
    if (!r->gpu.usable()) continue;
    for (const nccl::KnownFault& f : nccl::known_faults()) {
      if (f.when == nccl::FaultWhen::kUnevenHosts && nccl::in_release(f, r->gpu.nccl_version))
        return &f;
    }
  }
  return nullptr;
}

}  // namespace

bool known_fault_here(const nccl::KnownFault& f, const Record& r) {
  if (!r.gpu.usable() || !nccl::in_release(f, r.gpu.nccl_version) || avoided(r, f)) return false;
  switch (f.when) {
    case nccl::FaultWhen::kAlways:
      return true;
    case nccl::FaultWhen::kAarch64:
      return r.arch == "aarch64";
    case nccl::FaultWhen::kUnevenHosts:
      return false;  // check_uneven_hosts: a fact of the job, not of one record
  }
  return false;
}

void check_nccl_known_fault(const CheckContext& ctx, std::vector<Finding>& out) {
  if (!ctx.view.gpu_stage) return;
  for (const nccl::KnownFault& f : nccl::known_faults()) {
    std::map<int32_t, Records> by_release;
    for (const Member& m : ctx.view.members) {
      if (known_fault_here(f, m.record)) by_release[m.record.gpu.nccl_version].push_back(&m.record);
    }
    for (const auto& [version, about] : by_release) {
      std::string avoid =
          f.avoided_by.empty() ? std::string() : fmt::format(" ({} avoids it)", f.avoided_by);
      out.push_back(
          make(FindingId::kNcclKnownFault,
               fmt::format("{} load NCCL {}, a release with a known fault: {} ({}){}", where(about),
                           nccl_version_text(version), f.what, f.source, avoid),
               std::string(f.fix), about));
    }
  }
}

// Ranks per host, once every rank has joined once (missing and duplicate ranks have
// their own findings, and leave hosts short or long for their own reasons).
void check_uneven_hosts(const CheckContext& ctx, std::vector<Finding>& out) {
  if (ctx.hosts.size() < 2 || ctx.duplicates || !ctx.outside.empty()) return;
  for (long k = 0; k < ctx.expected_world; ++k) {
    if (!ctx.present(k)) return;
  }
  std::map<long, std::vector<size_t>> by_count;  // ranks on a host -> the hosts
  for (size_t i = 0; i < ctx.hosts.size(); ++i) {
    long ranks = 0;
    for (const Record* r : ctx.hosts[i].second)
      ranks += r->nranks;
    by_count[ranks].push_back(i);
  }
  if (by_count.size() < 2) return;
  // The most hosts first (between as many, the more ranks): the others are the odd ones.
  std::vector<std::pair<long, std::vector<size_t>>> groups(by_count.begin(), by_count.end());
  std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
    return a.second.size() != b.second.size() ? a.second.size() > b.second.size()
                                              : a.first > b.first;
  });
  std::vector<std::string> parts;
  Records odd, all;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<std::string> names;
    for (size_t i : groups[g].second) {
      names.push_back(printable(ctx.hosts[i].first, 40));
      const Records& rs = ctx.hosts[i].second;
      all.insert(all.end(), rs.begin(), rs.end());
      if (g > 0) odd.insert(odd.end(), rs.begin(), rs.end());
    }
    parts.push_back(fmt::format(
        "{} on {}", plural(size_t(groups[g].first), "rank", "ranks"),
        names.size() <= 3 ? format_list(names) : plural(names.size(), "host", "hosts")));
  }
  std::string message = fmt::format(
      "hosts carry different numbers of ranks: {}. NCCL runs such a job, but a host whose "
      "count differs from the others' is most often one the launcher placed unevenly (a GPU "
      "fewer, tasks packed without --ntasks-per-node)",
      join(parts, ", ", 4));
  const nccl::KnownFault* fault = uneven_fault(all);
  if (fault != nullptr) {
    message += fmt::format("; and the NCCL loaded here is a release where {} ({})", fault->what,
                           fault->source);
  }
  out.push_back(make(FindingId::kUnevenRanksPerHost, std::move(message),
                     fault != nullptr ? std::string(fault->fix) : std::string(), odd,
                     fault != nullptr ? std::optional(Severity::kError) : std::nullopt));
}

}  // namespace rankcheck
