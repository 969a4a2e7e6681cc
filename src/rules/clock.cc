// Rules over when the members say they started: late starts, and clocks that are
// off. The master holds both a member's claimed start (its own clock) and when it
// joined (the master's clock): a claim the master's clock cannot allow is the
// member's clock, not its start.

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "base/text.h"
#include "rules/context.h"

namespace rankcheck {
namespace {

// How far a member's clock is ahead of the master's (negative: behind), when its
// claimed start shows it: a start after its own join (ahead), or one so long
// before its join that no process under --timeout waits that long (behind).
std::optional<double> clock_offset_ms(const JobView& v, const Member& m) {
  uint64_t claim = m.record.started_unix_ms;
  if (claim == 0 || v.master_started_unix_ms == 0) return std::nullopt;
  double joined_unix = double(v.master_started_unix_ms) + m.joined_ms;
  double offset = double(claim) - joined_unix;
  if (offset > kClockSkewMs) return offset;
  if (v.timeout_ms > 0 && -offset > v.timeout_ms + kClockSkewMs) return offset;
  return std::nullopt;
}

std::string how_far(double offset_ms) {
  return fmt::format("about {} {}", format_seconds(std::abs(offset_ms)),
                     offset_ms > 0 ? "ahead" : "behind");
}

}  // namespace

void check_clock_skew(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  std::map<std::string_view, std::pair<Records, double>> by_host;  // host -> members, offset
  size_t others = 0;
  for (const Member& m : v.members) {
    if (m.record.host == v.master_host) continue;
    ++others;
    if (auto off = clock_offset_ms(v, m)) {
      auto& [rs, offset] = by_host[m.record.host];
      rs.push_back(&m.record);
      if (std::abs(*off) > std::abs(offset)) offset = *off;
    }
  }
  if (by_host.empty()) return;
  // Every other host off the same way: the master's clock is the one that is off.
  bool all_ahead = true, all_behind = true;
  double least = 0;
  size_t skewed = 0;
  size_t skewed_members = 0;
  for (const auto& entry : by_host) {
    const auto& [rs, offset] = entry.second;
    all_ahead = all_ahead && offset > 0;
    all_behind = all_behind && offset < 0;
    if (skewed++ == 0 || std::abs(offset) < std::abs(least)) least = offset;
    skewed_members += rs.size();
  }
  if (by_host.size() >= 2 && skewed_members == others && (all_ahead || all_behind)) {
    Finding f = make_finding(
        FindingId::kClockSkew,
        fmt::format("the master's clock on {} is {} of every other host's: each member's start "
                    "as it says it is {} {} it joined",
                    printable(v.master_host), how_far(-least), format_seconds(std::abs(least)),
                    least > 0 ? "after" : "before"));
    f.hosts = {v.master_host};
    f.ranks = {0};
    out.push_back(std::move(f));
    return;
  }
  for (const auto& [host, item] : by_host) {
    const auto& [rs, offset] = item;
    out.push_back(
        make(FindingId::kClockSkew,
             fmt::format("{}'s clock is {} of the master's ({}): {} {} it started {} {} it joined, "
                         "which the master's clock does not allow",
                         printable(host), how_far(offset), printable(v.master_host), where(rs),
                         rs.size() == 1 ? "says" : "say", format_seconds(std::abs(offset)),
                         offset > 0 ? "after" : "before"),
             {}, rs));
  }
}

// Processes that started well after the first: each one's deadline counts from
// its own start, so a late process keeps the others waiting (or, when it is rank 0,
// members that gave up before it listened are reported missing). Members whose
// clock is off (clock-skew) are left out: their claimed start says nothing.
void check_late_start(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  std::vector<const Member*> timed;
  for (const Member& m : v.members) {
    if (m.record.started_unix_ms != 0 && !clock_offset_ms(v, m)) timed.push_back(&m);
  }
  const Record* first = nullptr;
  for (const Member* m : timed) {
    if (first == nullptr || m->record.started_unix_ms < first->started_unix_ms) first = &m->record;
  }
  if (first == nullptr) return;
  Records late;
  uint64_t most = 0;
  bool rank0 = false;
  for (const Member* m : timed) {
    uint64_t at = m->record.started_unix_ms;
    if (at <= first->started_unix_ms + kLateStartMs) continue;
    late.push_back(&m->record);
    most = std::max(most, at - first->started_unix_ms);
    rank0 = rank0 || m->record.rank == 0;
  }
  if (late.empty()) return;
  std::string who = late.size() == 1 ? fmt::format("{} started", member_label(*late.front()))
                                     : fmt::format("{} started up to", where(late));
  out.push_back(make(FindingId::kLateStart,
                     fmt::format("{} {} after the first process ({}){}", who,
                                 format_seconds(double(most)), member_label(*first),
                                 rank0 ? ": the others waited for rank 0 within their own "
                                         "deadline, and any that gave up before it listened "
                                         "are reported missing"
                                       : ""),
                     {}, late));
}

}  // namespace rankcheck
