#pragma once
// The job as the master holds it when it decides: the members it admitted, those
// that left, the connections it refused, and what it saw of its own process. The
// rules read it (rules/rules.h), the report shows it (report/report.h).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/record.h"

namespace rankcheck {

/// An admitted member as the master saw it.
struct Member {
  Record record;
  double joined_ms = 0;  ///< since the master started
  SharedString peer;     ///< "10.0.0.12:51234", or "in-process" for the master's own; a
                         ///< relay's members share their relay's
};

/// A member that joined, then lost its connection before the verdict.
struct Departure {
  Record record;
  double joined_ms = 0;
  double left_ms = 0;
};

enum class RefusalKind {
  kForeignJob,  ///< hello for another job id
  kVersion,     ///< another protocol version
  kAuth,        ///< missing or wrong token
  kRelayAuth,   ///< a host relay's hello without the job token (no record: a host name)
  kMalformed,   ///< not rankcheck, or a broken hello
  kLate,        ///< arrived after the master decided
  kFlood,       ///< one per address whose silent handshakes were dropped to make room
};

/// A connection the master turned away.
struct Refusal {
  RefusalKind kind = RefusalKind::kMalformed;
  std::string peer;
  std::string reason;
  std::optional<Record> record;  ///< when a hello could be read
  double at_ms = 0;
};

/// A process that started this much later than the first is named (late-start):
/// more than a launcher's spread, and than the clock skew between synchronised hosts.
inline constexpr uint64_t kLateStartMs = 2000;

/// How the members met the master.
enum class Transport : uint8_t {
  kTcp,  ///< the TCP rendezvous on MASTER_ADDR:MASTER_PORT (and the host relays)
  kMpi,  ///< MPI_COMM_WORLD (rankcheck-mpi --bootstrap mpi)
};
/// The master's address as a report names it for a job that met over MPI.
inline constexpr std::string_view kMpiMasterAddr = "MPI_COMM_WORLD";

/// Connections the master could not accept (out of file descriptors or memory).
struct AcceptFailures {
  size_t count = 0;      ///< failed accepts (each retried 100 ms later)
  std::string error;     ///< the first one's error
  double first_ms = 0;   ///< when, from the master's start
  size_t open = 0;       ///< connections the master held then
  long files_soft = -1;  ///< RLIMIT_NOFILE at the decision, -1 when unknown
  long files_hard = -1;
  /// The address whose handshakes held the most of them, and how many: a flood
  /// that took the descriptors, not the master's host, when it held most.
  std::string held_by;
  size_t held = 0;
};

/// A host's relay whose connection to the master closed before the decision.
struct LostRelay {
  std::string host;
  uint32_t pid = 0;
  size_t members = 0;  ///< members it carried then
  double at_ms = 0;    ///< when, from the master's start
};

/// What the master's own process had when it decided: measured by its transport
/// (host/procfs.h, process_facts()) so that the decision stays a function of its inputs.
struct ProcessFacts {
  long files_soft = -1, files_hard = -1;  ///< RLIMIT_NOFILE; -1: unknown or unlimited
  long rss_kib = -1, peak_kib = -1;       ///< VmRSS, VmHWM; -1: unknown
};

/// Everything the rules look at: what the master holds when it decides.
struct JobView {
  long world_size = 0;  ///< the master's
  Transport transport = Transport::kTcp;
  bool authenticated = false;  ///< every member proved the job token
  std::string job_id;
  std::vector<Member> members;  ///< admitted, in arrival order
  std::vector<Departure> departed;
  std::vector<Refusal> refused;
  size_t refused_total = 0;  ///< refusals, including those not kept
  bool timed_out = false;    ///< decided at the deadline rather than on the last join
  std::string master_addr;   ///< MASTER_ADDR as the master was given it
  uint16_t master_port = 0;
  std::string master_host;                   ///< host name of the master
  std::vector<std::string> master_resolved;  ///< what MASTER_ADDR resolved to on the master
  std::vector<std::string> master_bound;     ///< what the master listened on
  AcceptFailures accept_failures;            ///< connections it could not accept
  std::vector<LostRelay> lost_relays;        ///< host relays gone before the decision
  bool gpu_stage = false;  ///< the master will run the GPU stage: check the GPUs too
  /// The master's start by its own clock, and its --timeout: what a member's claimed
  /// start is held against (clock-skew). 0: unknown.
  uint64_t master_started_unix_ms = 0;
  double timeout_ms = 0;
};

/// A member whose claimed start is further than this from what the master's clock
/// allows has a clock that is off (clock-skew), rather than a late start.
inline constexpr double kClockSkewMs = 2000;

}  // namespace rankcheck
