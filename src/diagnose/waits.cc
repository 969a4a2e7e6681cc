// Who the waiting was for: the ranks that came after their peers had given up, and
// the process that could not reach the store the others waited in. Both decide the
// cause from the waits and ends the processes show (conclude.cc calls them before
// the missing ranks).

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "base/text.h"
#include "diagnose/builder.h"

namespace rankcheck::diagnose {
namespace {

// Processes that waited for their peers with one timeout give up within moments of
// each other when they started together. Ones that gave up this much later than the
// first to give up had started late, after their peers had already gone.
constexpr int64_t kLateByMicros = int64_t{10} * 1000 * 1000;

}  // namespace

// 3. Ranks that joined late: every process waited for its peers and ended, and some
// ended kLateByMicros or more after the first (by the times their launchers' records
// give). The first waited for them and gave up; they came after it had gone, and
// waited in turn for peers that were no longer there. True when it was added.
bool add_late_join(Builder& b, const Knowledge& k) {
  if (b.any_initiating()) return false;
  int64_t first = -1, last = -1;
  for (const auto& [key, p] : k.procs) {
    if (!p.died || p.killed_by_launcher) continue;
    if (!p.waiting || p.died_at < 0 || p.own) return false;  // a death that says otherwise
    first = first < 0 ? p.died_at : std::min(first, p.died_at);
    last = std::max(last, p.died_at);
  }
  if (first < 0 || last - first < kLateByMicros) return false;
  std::set<long> early, late;
  std::set<std::string> early_hosts, late_hosts;
  const Proc* late_first = nullptr;
  const Proc* early_first = nullptr;
  for (const auto& [key, p] : k.procs) {
    if (!p.died || p.killed_by_launcher || p.rank < 0) continue;
    bool is_late = p.died_at - first >= kLateByMicros;
    (is_late ? late : early).insert(p.rank);
    if (!p.host.empty()) (is_late ? late_hosts : early_hosts).insert(p.host);
    const Proc*& f = is_late ? late_first : early_first;
    if (!f || earlier(*p.waiting, *f->waiting)) f = &p;
  }
  if (late.empty() || early.empty()) return false;
  auto on = [](const std::set<std::string>& hosts) {
    return hosts.empty() ? std::string() : " on " + format_list({hosts.begin(), hosts.end()}, 4);
  };
  DiagFinding& f =
      b.add(FindingId::kLateJoin,
            fmt::format("{}{} joined late: {}{} waited for their peers and gave up first ({}); {} "
                        "ended {} s later, waiting for peers that had gone ({})",
                        ranks_text(late), on(late_hosts), ranks_text(early), on(early_hosts),
                        early_first->waiting->detail, ranks_text(late), (last - first) / 1000000,
                        late_first->waiting->detail),
            true, *late_first->waiting);
  attach(f, late, late_hosts, {early_first->waiting->evidence});
  return true;
}

// 3. A process that could not connect to the store while others waited in it for
// peers: the store was up (they waited in it), so the one that could not reach it is
// the peer they waited for, with an address or port of its own (a wrong MASTER_PORT,
// --master_addr or name on one node). It initiates; the waits follow from it. True
// when it was added.
bool add_unreachable_store(Builder& b, const Knowledge& k) {
  auto it = k.pointers.find(FindingId::kMasterUnreachable);
  if (it == k.pointers.end() || !k.absent_first || b.any_initiating()) return false;
  const Group& g = it->second;
  std::set<long> waiting;
  for (const auto& [key, p] : k.procs) {
    if (p.waiting && p.rank >= 0) waiting.insert(p.rank);
  }
  DiagFinding& f =
      b.add(FindingId::kMasterUnreachable,
            fmt::format("{} {}, while {} waited in the store for peers that never came ({}): the "
                        "process that could not connect is the peer they waited for; the address "
                        "and port it was given are not the store's, or do not reach it",
                        g.ranks.empty() ? std::string("a process") : ranks_text(g.ranks), g.detail,
                        waiting.empty() ? std::string("another process") : ranks_text(waiting),
                        k.absent_first->detail),
            true, g.first,
            "give every process the store's address and port (MASTER_ADDR and MASTER_PORT, or "
            "torchrun's --master_addr and --master_port, alike on every node), and check that the "
            "host that could not connect resolves that address and reaches that port");
  attach(f, g.ranks, {}, g.evidence);
  return true;
}

}  // namespace rankcheck::diagnose
