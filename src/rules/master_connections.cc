// Rules over what the master saw of itself and its own connections: those its
// process could not accept (out of file descriptors or memory), its relays' that
// closed, whether its members proved the job token, and a signal that stopped it.
// Each takes its inputs and returns or appends findings; none prints or exits.

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/interrupt.h"
#include "base/text.h"
#include "rules/context.h"

namespace rankcheck {

namespace {
// One address held a flood's share of the master's connections: this many eighths.
constexpr size_t kFloodShare = 4;
}  // namespace

// Connections rank 0 could not accept (out of file descriptors or memory): the
// members left in the kernel's backlog are missing for that reason.
// An error when ranks are still missing; a warning when every rank got in after all.
// When one address's handshakes held most of the descriptors, that address is the
// cause (connection-flood names it): this one names no host, and is a warning.
void check_master_out_of_fds(const CheckContext& ctx, std::vector<Finding>& out) {
  const AcceptFailures& a = ctx.view.accept_failures;
  if (a.count == 0) return;
  bool missing = false;
  for (long k = 0; k < ctx.expected_world && !missing; ++k)
    missing = !ctx.present(k);
  bool flood = !a.held_by.empty() && a.held >= kFloodShare * std::max<size_t>(a.open, 1) / 8;
  auto limit = [](long v) {
    return v < 0 ? std::string("unlimited or unknown") : std::to_string(v);
  };
  std::string why =
      flood ? fmt::format(
                  ": {} held {} of them in handshakes that sent nothing, a flood rather "
                  "than this host's limit",
                  printable(a.held_by, 60), a.held)
      : missing ? std::string(
                      ": the members it could not take waited in the kernel's backlog, "
                      "and ranks are still missing")
                : std::string("; every rank got in after all, but a larger job would not");
  Finding f = make_finding(
      FindingId::kMasterOutOfFds,
      fmt::format("the master on {} could not accept connections from +{}: {} ({} {}); it held "
                  "{} then, and its open-files limit is {} (hard limit {}){}",
                  printable(ctx.view.master_host), format_seconds(a.first_ms),
                  printable(a.error, 120), a.count,
                  a.count == 1 ? "failed accept" : "failed accepts",
                  a.open == 1 ? std::string("1 connection") : fmt::format("{} connections", a.open),
                  limit(a.files_soft), limit(a.files_hard), why),
      {}, missing && !flood ? Severity::kError : Severity::kWarning);
  if (!flood) {
    f.ranks = {0};
    f.hosts = {ctx.view.master_host};
  }
  out.push_back(std::move(f));
}

// A host's relay gone before the decision: its members came directly (or are
// missing, and named so by missing-rank); the relay's own process most likely died.
void check_relay_lost(const CheckContext& ctx, std::vector<Finding>& out) {
  for (const LostRelay& r : ctx.view.lost_relays) {
    bool self_here = false;
    for (const Member& m : ctx.view.members)
      self_here = self_here || (m.record.host == r.host && m.record.pid == r.pid);
    Finding f = make_finding(
        FindingId::kRelayLost,
        fmt::format("the relay on {} (pid {}) closed its connection to the master at +{} "
                    "carrying {}; they were to join directly{}",
                    printable(r.host), r.pid, format_seconds(r.at_ms),
                    plural(r.members, "member", "members"),
                    self_here ? std::string()
                              : fmt::format(", and the relay's own process (pid {}) did not "
                                            "come back: it died or was killed",
                                            r.pid)));
    f.hosts = {r.host};
    out.push_back(std::move(f));
  }
}

// A job over hosts without a token: nothing in its report is authenticated. Over
// MPI the members met in MPI_COMM_WORLD, which only the launcher's processes reach.
void check_no_job_token(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (v.authenticated || v.transport == Transport::kMpi || v.members.empty()) return;
  bool spans = std::any_of(v.members.begin(), v.members.end(), [&v](const Member& m) {
    return spans_hosts(m.record) || m.record.host != v.members.front().record.host;
  });
  if (!spans) return;
  out.push_back(make_finding(
      FindingId::kNoJobToken,
      "no job token on a job that spans hosts: whoever reaches MASTER_PORT can claim a rank, "
      "pass or fail this job, and is handed the NCCL id; nothing in this report is "
      "authenticated"));
}

Finding master_interrupted(const std::string& host, int signal, double at_ms,
                           const Departure* first_left) {
  // A member that left shortly before: a launcher that stops every process when one
  // ends (torchrun's agent, srun --kill-on-bad-exit, mpirun) sent the signal, and the
  // member that ended first is where to look, not the scheduler.
  constexpr double kLauncherStopWithinMs = 30'000;
  if (first_left != nullptr && at_ms >= first_left->left_ms &&
      at_ms - first_left->left_ms <= kLauncherStopWithinMs) {
    const Record& r = first_left->record;
    Finding f = make_finding(
        FindingId::kMasterInterrupted,
        fmt::format("rank 0 ({}) was stopped by {} at +{}, {} after {} left the rendezvous: a "
                    "launcher that stops every process when one ends (torchrun, srun "
                    "--kill-on-bad-exit, mpirun) stopped it",
                    printable(host), signal_name(signal), format_seconds(at_ms),
                    format_seconds(at_ms - first_left->left_ms), member_label(r)),
        fmt::format("see why {} ended first: its own output, and the kernel log on {} (an "
                    "out-of-memory kill)",
                    span_label(r.rank, r.nranks), printable(r.host)));
    f.ranks = {r.rank};
    f.hosts = {r.host.str()};
    return f;
  }
  Finding f =
      make_finding(FindingId::kMasterInterrupted,
                   fmt::format("rank 0 ({}) was stopped by {} at +{}, before the check "
                               "was done",
                               printable(host), signal_name(signal), format_seconds(at_ms)));
  f.ranks = {0};
  f.hosts = {host};
  return f;
}

}  // namespace rankcheck
