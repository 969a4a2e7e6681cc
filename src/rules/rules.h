#pragma once
// Cross-checks: pure rules over every record the master holds (model/job.h). A
// rule returns findings; it never prints or exits.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/finding.h"
#include "model/job.h"
#include "model/record.h"
#include "model/watch.h"

namespace rankcheck {

/// What the GPU stage rules look at: every rank's result, after the stage.
struct StageView {
  long world_size = 0;
  const std::vector<Member>* members = nullptr;
  std::vector<RankResult> results;  ///< as reported, any order
  /// Ranks of members still connected when the stage ended, with no result: not
  /// gone (those are absent from `results` too), but stuck past their own deadline.
  std::vector<long> pending;
  double stage_ms = 0;        ///< the time the stage had
  double min_busbw_gbps = 0;  ///< --min-busbw; 0: no floor
};

/// The GPU stage rules: NCCL init, the all-reduce, the bandwidth floor (with what NCCL
/// itself said), and the networks NCCL chose on each host.
std::vector<Finding> stage_checks(const StageView& view);

/// The job under watch (`run -- CMD`): the first rank that failed, the ranks that
/// never reached init, the ranks that went quiet; over what the master holds now.
std::vector<Finding> job_checks(const JobWatch& job);

/// Whether the GPU stage can run at all: some member has a usable GPU and none
/// was started with --no-gpu. Otherwise the reason.
std::optional<std::string> gpu_stage_blocker(const std::vector<Member>& members);

/// What the rules share, built once per decision (claims per rank, members per host).
struct CheckContext;

/// What the join tracker keeps of the records that joined (join_tracker.h).
struct JoinWatch;

/// How a rule is kept to when the join tracker calls a job clean and the decision
/// skips the rules: every rule says which of these holds for it.
enum class FastPath {
  kWatch,       ///< `admits` tests each record as it joins
  kEvents,      ///< raises only on what taints the tracker by itself: a refusal, a
                ///< departure, a failed accept, a lost relay
  kIncomplete,  ///< raises only when ranks are missing (clean() needs every one)
  kAlways,      ///< cheap, and run on every decision, the clean ones too
};

/// One rule: a table row, like a launcher. `id` is the catalogue row of the
/// findings it leads with: a FindingId, so that the compiler checks it names one.
struct Rule {
  FindingId id;
  void (*check)(const CheckContext&, std::vector<Finding>&);
  FastPath fast;
  /// kWatch: false when this record, joining after those `watch` has seen, could make
  /// the rule raise anything (it then runs at the decision). It may note in `watch`
  /// what later records are held against.
  bool (*admits)(JoinWatch& watch, const Record& r, std::string_view peer) = nullptr;
};

/// The rules. Their findings are ordered by the catalogue's precedence
/// (order_findings), not by this table.
std::span<const Rule> rules();

/// How many hosts the joined members are on: a fact on all of them is the job's
/// (name_no_host_when_every_host).
size_t job_hosts(const std::vector<Member>& members);

/// Runs every rule and orders the findings: errors first, causes before effects. A
/// fault that every host shows names none (name_no_host_when_every_host).
std::vector<Finding> run_checks(const JobView& view);
/// Runs the kAlways rules only: the decision of a job the tracker calls clean.
std::vector<Finding> run_always(const JobView& view);

/// The rules that need only this member's own record, for `rankcheck env` and
/// for early warnings before the rendezvous.
std::vector<Finding> local_checks(const Record& self);

/// Rank 0 (on `host`) was stopped by `signal` `at_ms` after its start, before the
/// check was done: what every member learns of why its job failed.
/// Rank 0 stopped by `signal` at `at_ms`; `first_left`, the member that left the
/// rendezvous first, if any (then a launcher's stop, shortly after, names it).
Finding master_interrupted(const std::string& host, int signal, double at_ms,
                           const Departure* first_left = nullptr);

/// ncclGetUniqueId failed on the master (on `host`): no rank can start NCCL.
Finding unique_id_failed(const std::string& host, const std::string& error);

/// "rank 5 (gpu-02, pid 123)" or "ranks 8-11 (gpu-02, pid 77)".
std::string member_label(const Record& r);

/// What one record says about its job spanning several hosts: a launcher node list
/// of more than one host or, without a node list, fewer ranks per host than in the
/// world.
bool spans_hosts(const Record& r);

/// Whether an address string is loopback (127.0.0.0/8 or ::1).
bool is_loopback_address(std::string_view addr);

}  // namespace rankcheck
