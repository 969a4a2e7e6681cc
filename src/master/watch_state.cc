#include "master/watch_state.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/text.h"
#include "rules/rules.h"

namespace rankcheck {
namespace {

bool holds(const std::vector<Finding>& findings, FindingId id) {
  return std::any_of(findings.begin(), findings.end(),
                     [id](const Finding& f) { return f.id == id; });
}

}  // namespace

WatchState::WatchState(WatchConfig config) : cfg_(std::move(config)) {
  job_.members = cfg_.members;
  std::sort(job_.members.begin(), job_.members.end(),
            [](const MemberWatch& a, const MemberWatch& b) { return a.rank < b.rank; });
  job_.init_timeout_ms = cfg_.init_timeout_ms;
  job_.stall_after_ms = cfg_.stall_after_ms;
}

std::optional<size_t> WatchState::connect(long rank, long nranks, const std::string& host,
                                          double now_ms, std::string* why) {
  auto it = std::find_if(job_.members.begin(), job_.members.end(),
                         [&](const MemberWatch& m) { return m.rank == rank; });
  auto refuse = [&](std::string reason) -> std::optional<size_t> {
    if (why != nullptr) *why = std::move(reason);
    return std::nullopt;
  };
  if (it == job_.members.end() || it->nranks != nranks) {
    return refuse(fmt::format("{} was not a member of the check", span_label(rank, nranks)));
  }
  // The host is the one the check admitted: a wrapper of another host claiming the
  // rank is not this member's.
  if (it->host != host) {
    return refuse(fmt::format("{} is {}'s, not {}'s", span_label(rank, nranks), it->host,
                              printable(host, 64)));
  }
  if (it->connected || it->exited() || it->lost) {
    return refuse(fmt::format("{} already has a wrapper's link", span_label(rank, nranks)));
  }
  it->connected = it->ever_connected = true;
  it->heard_ms = now_ms;
  return static_cast<size_t>(it - job_.members.begin());
}

void WatchState::reach(MemberWatch& m, JobPhase p, double now_ms) {
  if (p <= m.phase) return;
  // An init reached past a phase not seen (Init COMPLETE without its START) dates
  // both; an exit dates only itself (a command that ended before its init never began it).
  auto from = p == JobPhase::kExited ? static_cast<size_t>(p) : static_cast<size_t>(m.phase) + 1;
  for (auto q = from; q <= static_cast<size_t>(p); ++q) {
    if (m.phase_ms[q] < 0) m.phase_ms[q] = now_ms;
  }
  m.phase = p;
}

void WatchState::event(size_t member, const WatchEvent& e, double now_ms) {
  MemberWatch& m = at(member);
  m.heard_ms = now_ms;
  switch (e.kind) {
    case WatchEventKind::kStarted:
      m.pid = e.pid;
      reach(m, JobPhase::kStarted, now_ms);
      break;
    case WatchEventKind::kMarker:
      if (e.phase > m.phase && e.phase < JobPhase::kExited) {
        reach(m, e.phase, now_ms);
        m.marker = e.marker;
      }
      break;
    case WatchEventKind::kLine: {
      WatchLine& l = e.role == LineRole::kInitiating ? m.initiating : m.downstream;
      if (!l.seen()) l = WatchLine{now_ms, e.finding, e.text};
      break;
    }
    case WatchEventKind::kExit:
      if (!e.text.empty()) m.last = WatchLine{now_ms, "", e.text};
      m.exit_code = e.exit_code;
      m.signal = e.signal;
      // An exit after the order to end is rankcheck's doing, unless it failed before.
      m.ended_by_rankcheck = job_.ended;
      reach(m, JobPhase::kExited, now_ms);
      break;
    case WatchEventKind::kHeartbeat:
      m.quiet_since_ms = now_ms - e.quiet_ms;
      if (!e.text.empty()) m.last = WatchLine{m.quiet_since_ms, "", e.text};
      break;
  }
}

void WatchState::disconnected(size_t member, double now_ms) {
  MemberWatch& m = at(member);
  m.connected = false;
  if (m.exited()) return;
  // Ended by rankcheck's own order and gone before it said so: not a failure.
  if (job_.ended) {
    m.ended_by_rankcheck = true;
    reach(m, JobPhase::kExited, now_ms);
    return;
  }
  m.lost = true;
  m.lost_ms = now_ms;
}

bool WatchState::evaluate(double now_ms) {
  job_.now_ms = now_ms;
  // Once rankcheck ended the job, what it ended it for stands: the exits that follow
  // are of its making.
  if (job_.ended) return false;
  std::vector<Finding> now = job_checks(job_);
  // A finding raised once and no longer held (ranks that reached init after all)
  // stays in the report, as a warning that says so.
  for (const Finding& was : findings_) {
    if (holds(now, was.id)) continue;
    cleared_.erase(std::remove_if(cleared_.begin(), cleared_.end(),
                                  [&](const Finding& f) { return f.id == was.id; }),
                   cleared_.end());
    Finding c = was;
    c.severity = Severity::kWarning;
    c.message += fmt::format(" (held until +{}, then no longer)", format_seconds(now_ms));
    cleared_.push_back(std::move(c));
  }
  auto same = [](const std::vector<Finding>& a, const std::vector<Finding>& b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](const Finding& x, const Finding& y) {
             return x.id == y.id && x.message == y.message && x.severity == y.severity;
           });
  };
  bool changed = !same(now, findings_);
  findings_ = std::move(now);
  return changed;
}

std::optional<Finding> WatchState::take_end_order() {
  if (!cfg_.fail_fast || end_ordered_ || findings_.empty() || !findings_.front().is_error()) {
    return std::nullopt;
  }
  end_ordered_ = true;
  job_.ended = true;
  return findings_.front();
}

bool WatchState::done() const {
  return std::all_of(job_.members.begin(), job_.members.end(),
                     [](const MemberWatch& m) { return m.exited() || m.lost; });
}

bool WatchState::all_connected_done() const {
  return std::all_of(job_.members.begin(), job_.members.end(), [](const MemberWatch& m) {
    return !m.ever_connected || m.exited() || m.lost;
  });
}

JobReport WatchState::report(double now_ms, bool running) const {
  JobReport r;
  r.running = running;
  r.ended_by_rankcheck = job_.ended;
  r.elapsed_ms = now_ms;
  r.init_timeout_ms = cfg_.init_timeout_ms;
  r.stall_after_ms = cfg_.stall_after_ms;
  r.fail_fast = cfg_.fail_fast;
  r.command = cfg_.command;
  r.members = job_.members;
  r.findings = findings_;
  for (const Finding& c : cleared_) {
    if (!holds(findings_, c.id)) r.findings.push_back(c);
  }
  order_findings(r.findings);
  return r;
}

}  // namespace rankcheck
