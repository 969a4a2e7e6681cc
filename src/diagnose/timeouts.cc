// 4. Collective timeouts (NCCL's watchdog, gloo's): which collective each rank timed
// out in, and what that says once the rules above have spoken (conclude.cc calls it).

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "base/text.h"
#include "diagnose/builder.h"

namespace rankcheck::diagnose {
namespace {

// The collectives the ranks timed out in, by SeqNum and OpType.
struct Timeouts {
  std::map<std::pair<long, std::string>, std::set<long>> by_op;
  std::optional<Note> first;
  std::vector<Evidence> evidence;
};

std::string op_text(const std::pair<long, std::string>& op) {
  return fmt::format("SeqNum {}{}", op.first, op.second.empty() ? "" : " (" + op.second + ")");
}

// 4. What the timeouts said, a process at a time.
Timeouts gather_timeouts(const std::map<std::string, Proc>& procs) {
  Timeouts t;
  std::map<long, std::string> op_of_seq;  // a progress line names no OpType: take its peers'
  for (const auto& [key, p] : procs) {
    if (p.timeout && !p.op.empty()) op_of_seq.emplace(p.seq_no, p.op);
  }
  // A timeout that names neither its rank nor its collective ("Some NCCL operations have
  // failed or timed out", a terminal's wrapped line) says nothing the named ones do not:
  // counted apart, it would be a second collective.
  bool named = std::any_of(procs.begin(), procs.end(), [](const auto& kv) {
    return kv.second.timeout && (kv.second.rank >= 0 || kv.second.seq_no >= 0);
  });
  for (const auto& [key, p] : procs) {
    if (!p.timeout) continue;
    if (named && p.rank < 0 && p.seq_no < 0 && p.op.empty()) continue;
    std::string op = p.op.empty() && op_of_seq.count(p.seq_no) ? op_of_seq[p.seq_no] : p.op;
    t.by_op[{p.seq_no, op}].insert(p.rank);
    if (!t.first || earlier(*p.timeout, *t.first)) t.first = *p.timeout;
    if (t.evidence.size() < 3) t.evidence.push_back(p.timeout->evidence);
  }
  return t;
}

// 4. Collective timeouts: downstream of a failure above; else ranks in different
// collectives, or one rank alone, are a desync, and all alike a hang.
}  // namespace

void add_timeouts(Builder& b, const Knowledge& k) {
  Timeouts t = gather_timeouts(k.procs);
  if (!t.first) return;
  std::set<long> all;
  for (const auto& [key, r] : t.by_op)
    all.insert(r.begin(), r.end());
  bool explained = b.any_initiating();
  if (explained) {
    DiagFinding& f = b.add(
        FindingId::kCollectiveTimeout,
        fmt::format("{} timed out in a collective, waiting for the failure above", ranks_text(all)),
        false, *t.first);
    attach(f, all, {}, t.evidence);
  } else if (t.by_op.size() > 1) {
    auto most = std::max_element(t.by_op.begin(), t.by_op.end(), [](const auto& a, const auto& c) {
      return a.second.size() < c.second.size();
    });
    // With no majority, every side is named.
    bool tie = std::count_if(t.by_op.begin(), t.by_op.end(), [&](const auto& kv) {
                 return kv.second.size() == most->second.size();
               }) > 1;
    std::set<long> odd;
    std::vector<std::string> parts;
    for (const auto& [key, ranks] : t.by_op) {
      if (!tie && &key == &most->first) continue;
      odd.insert(ranks.begin(), ranks.end());
      parts.push_back(fmt::format("{} in {}", ranks_text(ranks), op_text(key)));
    }
    DiagFinding& f = b.add(
        FindingId::kCollectiveDesync,
        tie ? fmt::format("the ranks timed out in different collectives: {}", format_list(parts, 4))
            : fmt::format(
                  "the ranks timed out in different collectives: {}, while {} timed out in {}",
                  format_list(parts, 4), ranks_text(most->second), op_text(most->first)),
        true, *t.first);
    attach(f, odd, {}, t.evidence);
  } else if (all.size() == 1 && (k.ranks_seen.size() > 1 || k.world > 1)) {
    DiagFinding& f =
        b.add(FindingId::kCollectiveDesync,
              fmt::format("only {} timed out, in {}: the other ranks did not enter that collective "
                          "(or left it)",
                          ranks_text(all), op_text(t.by_op.begin()->first)),
              true, *t.first);
    attach(f, all, {}, t.evidence);
  } else {
    DiagFinding& f = b.add(
        FindingId::kCollectiveTimeout,
        fmt::format("{} timed out in the same collective, {}, and no rank shows an error of its "
                    "own: a hang in the network or NCCL",
                    ranks_text(all), op_text(t.by_op.begin()->first)),
        true, *t.first);
    attach(f, all, {}, t.evidence);
  }
}

}  // namespace rankcheck::diagnose
