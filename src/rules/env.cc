// The environment every rank must share: variables that differ between members.

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "base/odd_ones_out.h"
#include "base/text.h"
#include "rules/context.h"

namespace rankcheck {
namespace {

// Past this many variables that differ, the rest are counted in one finding: a
// report stays readable, and members with hundreds of odd variables cannot make
// it (or the decision) grow with their product.
constexpr size_t kMaxEnvFindings = 16;

// " (from /etc/nccl.conf)" when NCCL reads the value from one of its files.
std::string from_file(const Record& r, std::string_view name) {
  for (const EnvVar& e : r.env_sources) {
    if (e.name == name) return fmt::format(" (from {})", printable(e.value, 64));
  }
  return "";
}

}  // namespace

void check_env_mismatch(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  // Compare digests first: 16k members with one environment cost one comparison each.
  bool same = true;
  for (const Member& m : v.members) {
    same = same && m.record.env_digest == v.members.front().record.env_digest;
  }
  if (same) return;
  std::map<uint64_t, Records> groups;
  for (const Member& m : v.members)
    groups[m.record.env_digest].push_back(&m.record);
  if (groups.size() < 2) return;
  // Which groups set each name, in one pass over every group's variables: a
  // name's differences are then found without visiting the groups that lack it.
  std::vector<const Records*> group_list;
  for (const auto& [digest, rs] : groups)
    group_list.push_back(&rs);
  std::map<std::string_view, std::vector<std::pair<size_t, const std::string*>>> setters;
  for (size_t g = 0; g < group_list.size(); ++g) {
    for (const EnvVar& e : group_list[g]->front()->env)
      setters[e.name].emplace_back(g, &e.value);
  }
  size_t reported = 0;
  size_t more = 0;  // names that differ past the cap: counted, not itemised
  for (const auto& [name, set_by] : setters) {
    bool everywhere = set_by.size() == group_list.size();
    const std::string& first = *set_by.front().second;  // (clang 14 captures no bindings)
    bool one_value = std::all_of(set_by.begin(), set_by.end(),
                                 [&first](const auto& p) { return *p.second == first; });
    if (everywhere && one_value) continue;
    if (name == "NCCL_COMM_ID") continue;  // an error of its own: nccl-comm-id-mismatch
    if (reported == kMaxEnvFindings) {
      ++more;
      continue;
    }
    ++reported;
    // Each member with its group's value of `name` (nullopt: unset).
    std::vector<std::pair<const Record*, std::optional<std::string_view>>> said;
    std::vector<bool> sets(group_list.size(), false);
    for (const auto& [g, value] : set_by) {
      sets[g] = true;
      for (const Record* r : *group_list[g])
        said.emplace_back(r, std::string_view(*value));
    }
    for (size_t g = 0; g < group_list.size(); ++g) {
      if (sets[g]) continue;
      for (const Record* r : *group_list[g])
        said.emplace_back(r, std::nullopt);
    }
    // The most common value first; "unset" after the values someone set.
    auto sayings = odd_ones_out<std::optional<std::string_view>>(
        said, [](const auto& s) { return std::optional(s.second); },
        [](const auto& a, const auto& b) { return a.key.has_value() && !b.key.has_value(); });
    std::vector<std::pair<std::optional<std::string_view>, Records>> vals;
    for (const auto& [value, items] : sayings) {
      Records rs;
      for (const auto& s : items)
        rs.push_back(s.first);
      vals.emplace_back(value, std::move(rs));
    }
    std::string parts;
    Records odd;
    for (size_t i = 0; i < vals.size(); ++i) {
      const auto& [value, rs] = vals[i];
      if (!parts.empty()) parts += "; ";
      parts += fmt::format(
          "{} for {}",
          value ? printable(*value, 48) + from_file(*rs.front(), name) : std::string("unset"),
          where(rs));
      if (i > 0) odd.insert(odd.end(), rs.begin(), rs.end());
    }
    out.push_back(make(FindingId::kEnvMismatch,
                       fmt::format("{} differs: {}", printable(name), parts),
                       fmt::format("set {} the same way for every process (the job script, the "
                                   "container image, or the launcher's environment)",
                                   printable(name)),
                       odd));
  }
  if (more > 0) {
    out.push_back(
        make_finding(FindingId::kEnvMismatch,
                     fmt::format("and {} more {} differ between the members (not itemised)", more,
                                 more == 1 ? "variable" : "variables")));
  }
}

}  // namespace rankcheck
