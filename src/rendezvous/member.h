#pragma once
// A member's side of the rendezvous: connect with retries, hand over the record,
// wait for the verdict. Every step bounded by a deadline.

#include <functional>
#include <optional>
#include <string>

#include "protocol/messages.h"
#include "rendezvous/socket.h"
#include "report/report.h"

namespace rankcheck {

struct JoinOptions {
  std::string master_addr;
  uint16_t master_port = 0;
  Deadline give_up = Deadline::never();  ///< stop trying to join
  Millis handshake{5000};                ///< challenge and admit must arrive this soon
  Millis progress_interval{5000};
  const JobToken* token = nullptr;  ///< prove the hello, and check the verdict, with it
  /// This host's relay endpoint (relay.h): joined through it while it answers;
  /// "" joins the master directly.
  std::string relay;
  /// This member leads a block of a scalable NCCL init: its own unique id, sent in the hello.
  std::optional<NcclIdBytes> nccl_root;
  /// Waited before the first direct attempt (first_connect_delay); not before a relay's.
  Millis first_delay{0};
  std::function<void(const std::string&)> log = [](const std::string&) {};
};

/// How much of a second the master's listen backlog takes to drain: the pace at
/// which a large job's direct connections are spread (first_connect_delay).
inline constexpr Millis kBacklogDrain{250};

/// When more processes connect to the master than its listen backlog holds
/// (`backlog`: this host's net.core.somaxconn, the master's being alike), they would
/// all arrive at once, the kernel would drop what overflows, and those would wait
/// for its 1 s SYN timer. Instead the index-th of `count` connections waits
/// index * kBacklogDrain / backlog before its first attempt: about one backlog's
/// worth per kBacklogDrain. 0 when the backlog holds them all.
Millis first_connect_delay(long index, long count, long backlog);

/// A joined member's connection, or why it could not join (a finding about itself).
struct JoinResult {
  Socket socket;
  Admit admit;
  int attempts = 0;
  std::optional<Finding> failure;
  Nonce server_nonce{};  ///< both nonces: what the verdict's MAC covers
  Nonce client_nonce{};
  bool relayed = false;  ///< joined through this host's relay
};

/// Joins the master. Updates `self.master_resolved` with the addresses used.
JoinResult join_master(Record& self, const JoinOptions& options);

/// Which verdict a member waits for.
enum class VerdictWait {
  kFirst,  ///< the first one: a go for the GPU stage, or already the final verdict
  kFinal,  ///< the final verdict, after this member's GPU stage (a go verdict is refused)
};

/// Waits for the master's verdict on a joined connection; with a job token, checks
/// that the verdict is the master's (Error::fault kAuthFailed when it is not).
/// A plan to rehearse NCCL's connections (sent to one member per host before the
/// first verdict) is run with `on_plan` and its report sent back.
/// `progress.say` is called every `progress.every` while nothing comes.
using PathPlanFn = std::function<PathReport(const PathPlan&)>;
struct WaitProgress {
  Millis every{5000};
  std::function<void()> say;
};
Result<Verdict> wait_verdict(Socket& socket, Deadline deadline, const JoinResult& joined,
                             const JobToken* token, VerdictWait which = VerdictWait::kFirst,
                             const PathPlanFn& on_plan = {}, const WaitProgress& progress = {});

/// Closes this member's end and waits, until `deadline` at most, for the master
/// to close its own: it does so once its report is printed. A member whose job
/// failed does this before it exits non-zero, so that a launcher that stops the
/// job at the first failure (mpirun) cannot cut rank 0's report off. Whether the
/// master closed in time.
bool await_master_close(Socket& socket, Deadline deadline);

/// A member's report from the verdict it was sent.
MemberReport verdict_report(const Record& self, const Verdict& v, double total_ms);

/// Whether a rankcheck master already answers at addr:port: its challenge, if so.
std::optional<Challenge> probe_master(const std::string& addr, uint16_t port, Deadline deadline);

}  // namespace rankcheck
