// The job under watch: findings over what the master holds of every member's
// command while it runs (model/watch.h). The master asks again on every event and
// every tick; a finding names the initiating rank, its host and its line, as
// `diagnose` would, but from all ranks at once and in the order the master heard them.

#include <algorithm>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "base/text.h"
#include "rules/rules.h"

namespace rankcheck {
namespace {

// How many members' last lines a finding quotes.
constexpr size_t kQuoted = 2;
constexpr size_t kQuoteLen = 160;

std::vector<long> ranks_of(const std::vector<const MemberWatch*>& ms) {
  std::vector<long> out;
  for (const MemberWatch* m : ms) {
    for (long r = m->rank; r <= m->last_rank(); ++r)
      out.push_back(r);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> hosts_of(const std::vector<const MemberWatch*>& ms) {
  std::set<std::string> hs;
  for (const MemberWatch* m : ms) {
    if (!m->host.empty()) hs.insert(m->host);
  }
  return {hs.begin(), hs.end()};
}

// "ranks 8-15 on h2, h3".
std::string where(const std::vector<const MemberWatch*>& ms) {
  auto hosts = hosts_of(ms);
  std::string on = hosts.size() <= 3 ? format_list(hosts) : plural(hosts.size(), "host", "hosts");
  return hosts.empty() ? ranks_label(ranks_of(ms))
                       : fmt::format("{} on {}", ranks_label(ranks_of(ms)), on);
}

std::string when(double ms) {
  return "+" + format_seconds(ms);
}

Finding about(FindingId id, std::string message, const std::vector<const MemberWatch*>& ms) {
  Finding f = make_finding(id, std::move(message));
  f.ranks = ranks_of(ms);
  f.hosts = hosts_of(ms);
  return f;
}

// What a member last printed, quoted: "rank 8 (h2): 'loading shards'".
std::string last_words(const std::vector<const MemberWatch*>& ms) {
  std::vector<std::string> parts;
  for (const MemberWatch* m : ms) {
    if (parts.size() == kQuoted) break;
    if (m->last.text.empty()) continue;
    parts.push_back(fmt::format("{} ({}): '{}'", span_label(m->rank, m->nranks), m->host,
                                printable(m->last.text, kQuoteLen)));
  }
  if (parts.empty()) return "";
  return "; printed last: " + fmt::format("{}", fmt::join(parts, "; "));
}

// A member's failure as the master heard it: when (its first line of its own, or
// its end), what, and whether a peer's loss came before it (a downstream line first:
// then its failure follows another's). Only an end is a failure: a line of an error
// alone, in a process that goes on, may be one it handles.
struct Failure {
  const MemberWatch* m = nullptr;
  double at_ms = 0;
  bool after_downstream = false;
  std::string what;
};

std::string said(const WatchLine& l) {
  return fmt::format("'{}'", printable(l.text, kQuoteLen));
}

std::optional<Failure> failure_of(const MemberWatch& m) {
  double at = -1;
  std::string what;
  if (m.exited() && !m.ended_by_rankcheck && (m.exit_code != 0 || m.signal != 0)) {
    at = m.phase_ms[static_cast<size_t>(JobPhase::kExited)];
    what = m.signal != 0 ? fmt::format("was killed by signal {}", m.signal)
                         : fmt::format("exited with {}", m.exit_code);
  } else if (m.lost) {
    at = m.lost_ms;
    what =
        "went silent: its wrapper's link closed with no exit told (the host, the container or "
        "the wrapper itself died)";
  } else {
    return std::nullopt;
  }
  if (m.initiating.seen()) {
    at = std::min(at, m.initiating.at_ms);
    what += " after printing " + said(m.initiating);
  } else if (m.downstream.seen()) {
    what += " after printing " + said(m.downstream);
  } else if (!m.last.text.empty()) {
    what += "; it printed last " + said(m.last);
  }
  Failure f{&m, at, false, std::move(what)};
  f.after_downstream = m.downstream.seen() && m.downstream.at_ms < at;
  return f;
}

// The first rank whose command failed. A failure that follows a downstream line of
// its own (a peer gone, a timeout) yields to one that does not, whenever it came:
// the reset comes from the rank that died. While no command has failed, a running
// rank's own error line is a warning: the first place to look if the job stops.
void check_job_rank_failed(const JobWatch& job, std::vector<Finding>& out) {
  std::vector<Failure> all;
  for (const MemberWatch& m : job.members) {
    if (auto f = failure_of(m)) all.push_back(std::move(*f));
  }
  if (all.empty()) {
    const MemberWatch* first = nullptr;
    for (const MemberWatch& m : job.members) {
      if (m.initiating.seen() && (first == nullptr || m.initiating.at_ms < first->initiating.at_ms))
        first = &m;
    }
    if (first == nullptr) return;
    Finding f = about(FindingId::kJobRankFailed,
                      fmt::format("{} on {} printed an error of its own at {}: {}; it still runs",
                                  span_label(first->rank, first->nranks), first->host,
                                  when(first->initiating.at_ms), said(first->initiating)),
                      {first});
    f.severity = Severity::kWarning;
    out.push_back(std::move(f));
    return;
  }
  std::stable_sort(all.begin(), all.end(), [](const Failure& a, const Failure& b) {
    if (a.after_downstream != b.after_downstream) return !a.after_downstream;
    return a.at_ms < b.at_ms;
  });
  const Failure& first = all.front();
  std::string msg =
      fmt::format("{} on {} failed first, at {}: it {}", span_label(first.m->rank, first.m->nranks),
                  first.m->host, when(first.at_ms), first.what);
  // The others: each with an error of its own (the same fault on every rank: a
  // missing module, a bad path), or a consequence of the first.
  std::vector<const MemberWatch*> own, after;
  for (size_t i = 1; i < all.size(); ++i) {
    bool independent = all[i].m->initiating.seen() && !all[i].after_downstream;
    (independent ? own : after).push_back(all[i].m);
  }
  if (!own.empty())
    msg += fmt::format("; {} failed too, each with an error of its own", where(own));
  if (!after.empty()) msg += fmt::format("; then {} failed, downstream of it", where(after));
  out.push_back(about(FindingId::kJobRankFailed, std::move(msg), {first.m}));
}

// Some members began their init and others did not within --init-timeout: the
// others are what the first wait for ("NCCL init blocks waiting for ranks that
// never join").
void check_init_blocked(const JobWatch& job, std::vector<Finding>& out) {
  double t0 = -1;
  for (const MemberWatch& m : job.members) {
    for (auto p : {JobPhase::kInit, JobPhase::kInitDone}) {
      double at = m.phase_ms[static_cast<size_t>(p)];
      if (at >= 0 && (t0 < 0 || at < t0)) t0 = at;
    }
  }
  if (t0 < 0 || job.now_ms - t0 < job.init_timeout_ms) return;
  std::vector<const MemberWatch*> blocked, waiting, silent;
  for (const MemberWatch& m : job.members) {
    if (m.exited() || m.lost) continue;  // a failure of its own: job-rank-failed
    if (m.phase < JobPhase::kInit) {
      blocked.push_back(&m);
      if (!m.ever_connected) silent.push_back(&m);
    } else if (m.phase == JobPhase::kInit) {
      waiting.push_back(&m);
    }
  }
  if (blocked.empty()) return;
  std::string msg = fmt::format("{} never reached init in the {} since the first rank did",
                                where(blocked), format_seconds(job.init_timeout_ms));
  if (!waiting.empty()) msg += fmt::format("; {} wait in init since {}", where(waiting), when(t0));
  if (!silent.empty()) {
    msg += fmt::format("; no word at all from {} since the check (their wrappers never connected)",
                       ranks_label(ranks_of(silent)));
  }
  msg += last_words(blocked);
  out.push_back(about(FindingId::kInitBlocked, std::move(msg), blocked));
}

// --stall-after: running members that printed nothing and passed no marker for that
// long while others went on printing.
void check_job_stalled(const JobWatch& job, std::vector<Finding>& out) {
  if (job.stall_after_ms <= 0) return;
  std::vector<const MemberWatch*> quiet;
  bool others_on = false;
  for (const MemberWatch& m : job.members) {
    if (m.exited() || m.lost || m.phase == JobPhase::kWaiting) continue;
    double last = std::max(m.quiet_since_ms, m.phase_ms[static_cast<size_t>(m.phase)]);
    if (job.now_ms - last >= job.stall_after_ms) {
      quiet.push_back(&m);
    } else {
      others_on = true;
    }
  }
  if (quiet.empty() || !others_on) return;
  std::string msg =
      fmt::format("{} printed nothing and passed no marker for {} while the others went on",
                  where(quiet), format_seconds(job.stall_after_ms));
  msg += last_words(quiet);
  out.push_back(about(FindingId::kJobStalled, std::move(msg), quiet));
}

}  // namespace

std::vector<Finding> job_checks(const JobWatch& job) {
  std::vector<Finding> out;
  check_job_rank_failed(job, out);
  check_init_blocked(job, out);
  check_job_stalled(job, out);
  order_findings(out);
  return out;
}

}  // namespace rankcheck
