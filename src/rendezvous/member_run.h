#pragma once
// A member's whole side of the protocol, the counterpart of MasterState: join the
// master (through this host's relay, or directly when the relay is gone), rehearse
// the master's plan, wait for the verdict, run the GPU stage on a go and send its
// signed results, wait for the final verdict, and leave once rank 0's report is
// out. Each step is member.h's; this is their order.

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "model/finding.h"
#include "model/record.h"
#include "model/timeline.h"
#include "protocol/messages.h"
#include "rendezvous/member.h"
#include "rendezvous/relay.h"

namespace rankcheck {

/// This host's relay, when this member became it (relay.h): it serves the host's
/// other members until the master is done with them, then stops.
class HostRelay {
 public:
  HostRelay() = default;
  HostRelay(std::unique_ptr<Relay> relay, Deadline finish_by)
      : relay_(std::move(relay)), finish_by_(finish_by) {}
  HostRelay(HostRelay&&) = default;
  HostRelay& operator=(HostRelay&&) = default;
  ~HostRelay();

 private:
  std::unique_ptr<Relay> relay_;
  Deadline finish_by_ = Deadline::never();
};

/// Becomes this host's relay when it is the first member of the host to try, and
/// points `join` at the host's relay (its own or another member's); without one
/// (`join.relay` empty) the member joins the master directly. `self`'s rank and
/// world size pace the relay's first connection among the job's hosts (`backlog`:
/// the master's listen backlog); `time` holds the run's deadlines.
HostRelay start_host_relay(const Record& self, JoinOptions& join, const Timeline& time,
                           long backlog);

struct MemberRun {
  JoinOptions join;
  Timeline time;        ///< the run's deadlines
  PathPlanFn rehearse;  ///< the master's plan of connections from this host
  /// The GPU stage on the master's go: this member's results, by the go's deadline.
  std::function<StageReport(const Verdict&)> run_stage;
};

/// How a member's run ended: the verdict it was sent, or why it has none.
struct MemberOutcome {
  std::optional<Verdict> verdict;
  std::optional<Finding> failure;  ///< it could not join, or lost the master
  bool interrupted = false;        ///< a signal cut it short (interrupted() says which)
  Admit admit;                     ///< what the master said when it admitted this member
  Socket socket;                   ///< its connection to the master, still open
};

/// The member's protocol, from the join to the last verdict.
MemberOutcome member_protocol(Record& self, MemberRun& run);

/// After a failed job's verdict is printed: closes this member's end and waits,
/// timing::kReportWait at most, for rank 0 to print its report; says so when it did not.
void await_report(MemberOutcome& outcome, const Timeline& time,
                  const std::function<void(const std::string&)>& log);

}  // namespace rankcheck
