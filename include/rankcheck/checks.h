#pragma once
// Cross-checks: pure rules over every record the master holds. A rule returns
// findings; it never prints or exits.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <rankcheck/finding.h>
#include <rankcheck/record.h>

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

/// The master's address in a job that met over MPI (rankcheck-mpi --bootstrap mpi).
inline constexpr std::string_view kMpiMasterAddr = "MPI_COMM_WORLD";

/// Everything the rules look at.
/// Connections the master could not accept (out of file descriptors or memory).
struct AcceptFailures {
  size_t count = 0;      ///< failed accepts (each retried 100 ms later)
  std::string error;     ///< the first one's error
  double first_ms = 0;   ///< when, from the master's start
  size_t open = 0;       ///< connections the master held then
  long files_soft = -1;  ///< RLIMIT_NOFILE at the decision, -1 when unknown
  long files_hard = -1;
};

/// A host's relay whose connection to the master closed before the decision.
struct LostRelay {
  std::string host;
  uint32_t pid = 0;
  size_t members = 0;  ///< members it carried then
  double at_ms = 0;    ///< when, from the master's start
};

struct JobView {
  long world_size = 0;  ///< the master's
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
};

/// What the GPU stage rules look at: every rank's result, after the stage.
struct StageView {
  long world_size = 0;
  const std::vector<Member>* members = nullptr;
  std::vector<RankResult> results;  ///< as reported, any order
  double stage_ms = 0;              ///< the time the stage had
  double min_busbw_gbps = 0;        ///< --min-busbw; 0: no floor
};

/// The GPU stage rules: NCCL init, the all-reduce, the bandwidth floor.
std::vector<Finding> stage_checks(const StageView& view);

/// Whether the GPU stage can run at all: some member has a usable GPU and none
/// was started with --no-gpu. Otherwise the reason.
std::optional<std::string> gpu_stage_blocker(const std::vector<Member>& members);

/// What the rules share, built once per decision (claims per rank, members per host).
struct CheckContext;

/// One rule: a table row, like a launcher. `id` names the catalogue row of the
/// findings it leads with.
struct Rule {
  std::string_view id;
  void (*check)(const CheckContext&, std::vector<Finding>&);
};

/// The rules, in the order their findings lead the report: causes before effects.
std::span<const Rule> rules();

/// Runs every rule and orders the findings: errors first, causes before effects.
std::vector<Finding> run_checks(const JobView& view);

/// Errors before warnings, keeping each group's order (causes before effects).
void order_findings(std::vector<Finding>& findings);

/// The rules that need only this member's own record, for `rankcheck env` and
/// for early warnings before the rendezvous.
std::vector<Finding> local_checks(const Record& self);

/// "rank 5 (gpu-02, pid 123)" or "ranks 8-11 (gpu-02, pid 77)".
std::string member_label(const Record& r);

/// Whether `ifname_spec` (NCCL_SOCKET_IFNAME syntax: prefixes, "^" to exclude,
/// "=" for exact names) selects at least one of `interfaces`.
bool ifname_matches_any(std::string_view ifname_spec, const std::vector<std::string>& interfaces);

/// What one record says about its job spanning several hosts: a launcher node list
/// of more than one host or, without a node list, fewer ranks per host than in the
/// world.
bool spans_hosts(const Record& r);

/// Whether an address string is loopback (127.0.0.0/8 or ::1).
bool is_loopback_address(std::string_view addr);

}  // namespace rankcheck
