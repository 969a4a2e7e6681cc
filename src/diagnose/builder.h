#pragma once
// How conclude.cc and the comparisons across hosts (hosts.cc) make their findings.

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/text.h"
#include "diagnose/internal.h"

namespace rankcheck::diagnose {

/// "ranks 0-3,7" (ranks_label) of a set.
inline std::string ranks_text(const std::set<long>& ranks) {
  return ranks_label(std::vector<long>(ranks.begin(), ranks.end()));
}

/// "file:line (time)" of a note.
inline std::string where(const Note& n) {
  std::string s = fmt::format("{}:{}", n.evidence.file, n.evidence.line);
  if (!n.time.empty()) s += fmt::format(" ({})", n.time);
  return s;
}

/// The findings of a diagnosis as they are made, each with its first evidence line.
struct Builder {
  std::vector<DiagFinding> out;

  DiagFinding& add(FindingId id, std::string message, bool initiating, const Note& first,
                   std::string fix = {}) {
    DiagFinding f;
    f.finding = make_finding(id, std::move(message), std::move(fix));
    f.initiating = initiating;
    f.first_seen = where(first);
    f.order = first.seq;
    f.stamp = first.stamp;
    f.evidence.push_back(first.evidence);
    out.push_back(std::move(f));
    return out.back();
  }
  bool any_initiating() const {
    return std::any_of(out.begin(), out.end(), [](const DiagFinding& f) { return f.initiating; });
  }
};

/// Names the ranks and hosts of `f`, and adds evidence lines (three at most).
inline void attach(DiagFinding& f, const std::set<long>& ranks, const std::set<std::string>& hosts,
                   const std::vector<Evidence>& evidence) {
  f.finding.ranks.assign(ranks.begin(), ranks.end());
  f.finding.hosts.assign(hosts.begin(), hosts.end());
  for (const Evidence& e : evidence) {
    if (f.evidence.size() >= 3) break;
    bool dup = std::any_of(f.evidence.begin(), f.evidence.end(),
                           [&](const Evidence& x) { return x.file == e.file && x.line == e.line; });
    if (!dup) f.evidence.push_back(e);
  }
}

/// 1. What the hosts say of themselves, compared (hosts.cc).
void add_host_differences(Builder& b, const Knowledge& k);

/// 3. Ranks that joined after their peers had given up waiting (waits.cc).
bool add_late_join(Builder& b, const Knowledge& k);
/// 3. A process that could not reach the store others waited in (waits.cc).
bool add_unreachable_store(Builder& b, const Knowledge& k);
/// 4. Collective timeouts: downstream of a failure above, else a desync or a hang
/// (timeouts.cc).
void add_timeouts(Builder& b, const Knowledge& k);

/// 5. Pointers to a peer gone: downstream of a failure above, else the peer, or for
/// NCCL's remote error the network (pointers.cc). The store's, when `skip_unreachable`
/// (added already by add_unreachable_store), is left out.
void add_pointers(Builder& b, const std::map<FindingId, Group>& pointers, bool skip_unreachable);

/// 1. The setup errors (setup.cc): ranks that waited for different world sizes, a
/// rank two processes said they were, the process a setup error no prefix names
/// belongs to, then the findings, initiating wherever they appear.
void group_world_sizes(Knowledge& k);
void group_rank_claims(Knowledge& k);
void attribute_setup_errors(Knowledge& k);
void add_setup_errors(Builder& b, const std::map<FindingId, Group>& setup);

/// Last, alone: logs that end in torchrun's agent waiting for its rendezvous
/// (rendezvous.cc).
void add_hung_rendezvous(Builder& b, const Knowledge& k);
/// Last, alone: fewer ranks said they started than their world, and nothing failed
/// (rendezvous.cc).
void add_partial_world(Builder& b, const Knowledge& k);

}  // namespace rankcheck::diagnose
