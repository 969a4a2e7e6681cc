#pragma once
// The master's side of one rendezvous, whatever carries the messages: the Asio
// server over TCP, or the MPI bootstrap. It admits members, decides once, and
// judges the GPU stage; the transport only moves records and verdicts.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "master/host_facts.h"
#include "protocol/messages.h"
#include "report/report.h"
#include "rules/join_tracker.h"
#include "rules/rules.h"

namespace rankcheck {

struct MasterConfig {
  long world_size = 0;
  Transport transport = Transport::kTcp;
  /// Members the launcher started when that is more than the world size asks for
  /// (WORLD_SIZE=2 exported over 4 tasks): the master waits for all of them, so
  /// that the extra ones are reported, not turned away as late. 0: not so.
  long launcher_members = 0;
  std::string job_id;
  std::string master_addr;  ///< MASTER_ADDR as given, for the report ("" over MPI)
  std::string master_host;
  std::vector<std::string> master_resolved;
  Clock::time_point start = Clock::now();
  bool gpu_stage = false;                        ///< off: --no-gpu
  std::function<Result<NcclId>()> make_nccl_id;  ///< ncclGetUniqueId, on this host
  Deadline stage_by = Deadline::never();         ///< every rank's stage ends by then
  /// Above this many ranks, NCCL is initialised with ncclCommInitRankScalable, one
  /// root per this many ranks, each made by the first rank of its block (which
  /// sends it in its hello); 0: scalable at any size, with one root; -1: never.
  long nccl_roots_every = -1;
  double min_busbw_gbps = 0;
  bool authenticated = false;  ///< members proved the job token (for the report)
  uint64_t start_unix_ms = 0;  ///< `start` by this host's wall clock (clock-skew); 0: unknown
  double timeout_ms = 0;       ///< the master's --timeout (clock-skew)
  uint16_t watch_port = 0;     ///< rank 0's watch server (`run -- CMD`), told on a pass; 0: none
  std::function<void(const std::string&)> log = [](const std::string&) {};
};

/// What the transport saw up to the decision: decide() takes it whole, and nothing
/// writes the report afterwards but the master state itself.
struct DecisionFacts {
  bool timed_out = false;          ///< at the deadline, rather than on the last join
  uint16_t master_port = 0;        ///< the port it listened on (0 over MPI)
  std::vector<std::string> bound;  ///< what it listened on ("MPI_COMM_WORLD of 8")
  ProcessFacts process = {};       ///< the master process's limits and memory
  size_t connections_peak = 0;     ///< the most connections open at once
  size_t relays = 0;               ///< host relays carrying members at the decision
  size_t relayed_members = 0;      ///< members that came through one
};

class MasterState {
 public:
  explicit MasterState(MasterConfig config);

  /// Admits a member (`own`: the master's own); returns its index. Indices after a
  /// departed member shift down by one.
  size_t admit(Record rec, SharedString peer, bool own = false);
  /// Member `i` left before the verdict: its ranks are free again.
  void depart(size_t i);
  /// A connection turned away (kept for the report, up to a cap; always counted).
  void refuse(RefusalKind kind, std::string peer, std::string reason,
              std::optional<Record> record = std::nullopt);
  /// The server could not accept a connection for want of file descriptors or
  /// memory (`why`), with `open` connections open at the time, `held` of them in
  /// handshakes from `held_by` (the address with the most).
  void accept_failed(const std::string& why, size_t open, const std::string& held_by, size_t held);
  /// A block leader's NCCL unique id (its hello's), for a scalable init.
  void set_root(const Record& leader, const NcclIdBytes& id);
  /// A host's relay closed its connection before the decision, carrying `members`.
  void relay_lost(const std::string& host, uint32_t pid, size_t members);

  /// As many ranks as the world size have joined (whatever they claim), or every
  /// member but the master agrees on a smaller world that is all here. When the
  /// launcher started more members than that, every one of them has joined.
  bool ready() const;
  bool decided() const { return decided_; }
  /// Every rank is here but those of members whose connection closed (a crash, a
  /// kill -9): waiting to the deadline cannot bring those back, so the server
  /// decides after a short grace for a restarted process to rejoin.
  bool only_departed_missing() const;

  /// Whether the rules, run now, would find no error: the rehearsal of NCCL's
  /// connections runs only then (the decision that follows runs them again).
  bool would_pass() const;
  /// The rehearsal's findings and connections, for the decision to lead with.
  void set_paths(std::vector<Finding> findings, std::vector<PathTried> paths, double ms);

  /// Decides, once: the findings, and go or not for the GPU stage. Returns the
  /// verdict every member gets (with notes_for(i) added for member i).
  const Verdict& decide(DecisionFacts facts);
  /// The verdicts were queued for every member `ms` after the decision.
  void verdicts_sent(double ms) { report_.broadcast_ms = ms; }
  /// The findings that name member `i`'s ranks, all of them (a verdict carries
  /// the first kMaxVerdictNotes and says how many more there are).
  std::vector<Finding> notes_for(size_t i) const;

  bool stage_running() const { return stage_running_; }
  /// Member `i`'s GPU stage results (none: it is gone). True once every member reported.
  bool accept_results(size_t i, std::vector<RankResult> results);
  /// Ends the GPU stage (all results in, or its deadline): the final verdict.
  const Verdict& finalize();
  /// The master was interrupted by `signal`: the next decision or final verdict says so.
  void interrupt(int signal);
  /// The verdict as it stands (the final one once finalize() ran).
  const Verdict& verdict() const { return verdict_; }

  const std::vector<Member>& members() const { return decided_ ? report_.members : members_; }
  /// The distinct ranks of the world that joined: a rank claimed twice counts
  /// once, one outside the world not at all (what progress and verdicts say).
  long joined_ranks() const { return distinct_claimed_; }
  std::vector<long> missing_ranks() const;
  /// The report as it stands; taken whole once the run is over.
  const Report& report() const { return report_; }
  Report take_report() { return std::move(report_); }
  double now_ms() const { return ms_between(cfg_.start, Clock::now()); }

 private:
  void count(const Record& rec, int by, bool master);
  bool smaller_world_complete() const;
  bool complete_up_to(long world) const;
  Verdict verdict_base() const;
  // What the rules read of the configuration; the caller adds the members and
  // refusals (copied for a look ahead, moved at the decision).
  JobView config_view() const;

  MasterConfig cfg_;
  std::vector<Member> members_;         // admitted and still connected, in arrival order
  JoinTracker tracker_;                 // lets a clean job skip the rules at the decision
  ListPool<std::string> string_lists_;  // interfaces and resolved addresses, one copy each
  ListPool<EnvVar> envs_;
  StringPool strings_;                   // what members share: version, job id, host, NCCL path...
  HostFactPools host_facts_;             // NCCL's interface and network, /dev/shm: one copy a host
  std::vector<uint32_t> claims_;         // members claiming each rank in [0, world)
  long distinct_claimed_ = 0;            // ranks in [0, world) claimed at least once
  std::map<long, long> world_votes_;     // world size -> members (not the master) claiming it
  std::map<long, long> alt_votes_;       // world size another source of a member gives -> members
  long joined_ranks_ = 0;                // ranks the members stand for, counted each time: ready()
  std::vector<Departure> departed_;      // up to a cap, one per member
  std::optional<Departure> first_left_;  // first_gone() at the decision
  size_t departed_total_ = 0;            // every departure, kept or not
  std::vector<Refusal> refused_;
  size_t refused_total_ = 0;
  AcceptFailures accept_failures_;
  std::vector<LostRelay> lost_relays_;
  struct Root {
    uint32_t pid = 0;  // of the leader that made it: a leader that left takes it along
    NcclIdBytes id{};
  };
  std::map<long, Root> roots_;  // by the leader's rank
  // The roots of a scalable init, rank 0's (`first`) first; empty: one root, as
  // before (not asked for, NCCL older than 2.23 somewhere, or a leader's id missing).
  std::vector<NcclIdBytes> scalable_roots(const NcclIdBytes& first,
                                          const std::vector<Member>& members) const;
  double last_join_ms_ = 0;
  bool decided_ = false;
  Report report_;
  Verdict verdict_;
  // The GPU stage, between the go verdict and the final one.
  bool stage_running_ = false;
  long results_expected_ = 0;
  std::vector<bool> reported_;
  std::vector<RankResult> stage_results_;
  double stage_ms_ = 0;
  int signal_ = 0;
  bool signal_reported_ = false;
  std::vector<Finding> path_findings_;
  void report_signal();
  std::optional<Departure> first_gone() const;
  void say_not_rehearsed(const std::vector<Member>& members);
};

}  // namespace rankcheck
