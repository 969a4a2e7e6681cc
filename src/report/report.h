#pragma once
// Structure first, text last: one Report, rendered as text for people and JSON
// for machines.

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "model/finding.h"
#include "model/job.h"

namespace rankcheck {

inline constexpr int kSchemaVersion = 1;

struct RenderStyle {
  bool color = false;
};

/// The width the text reports wrap their prose to (100 by default: a log's), set
/// once at start from COLUMNS or the terminal; held within these bounds.
inline constexpr size_t kMinTextWidth = 60;
inline constexpr size_t kMaxTextWidth = 200;
void set_text_width(size_t columns);

/// One connection of the rehearsal of NCCL's connections, as the report shows it.
struct PathTried {
  std::string from, to;  ///< host names
  std::string outcome;   ///< "connected", "timed out", "refused", ...
  double connect_ms = 0;
};

/// What the master knows at the end of a run.
struct Report {
  std::string job_id;
  long world_size = 0;
  Transport transport = Transport::kTcp;
  std::string master_addr;  ///< MASTER_ADDR as given ("" over MPI)
  uint16_t master_port = 0;
  std::string master_host;
  std::vector<std::string> master_bound;  ///< addresses it listened on
  std::vector<Member> members;
  std::vector<Finding> findings;
  bool timed_out = false;
  bool member_lost = false;  ///< decided once every rank but a departed member's was in
  int interrupted_by = 0;    ///< the signal that cut the run short, if one did
  bool authenticated = false;
  std::string gpu_stage = "not run";      ///< one phrase: "not run (--no-gpu)", "passed", ...
  std::vector<RankResult> stage_results;  ///< by rank, when the GPU stage ran
  double rendezvous_ms = 0;               ///< master start to decision
  double decision_ms = 0;                 ///< last join (or deadline) to verdict computed
  double broadcast_ms = 0;                ///< verdict computed to a frame queued for every member
  long peak_rss_kib = -1;                 ///< the master process's peak memory at the decision
  long rss_kib = -1;                      ///< its resident memory at the decision (-1: unknown)
  double total_ms = 0;
  /// The rehearsal of NCCL's connections: one per host pair tried (JSON `paths`).
  std::vector<PathTried> paths;
  double rehearsal_ms = 0;  ///< from the plan to the last report
  bool rehearsal_ran = false;
  /// Why the rehearsal did not run where it would have mattered (several hosts); "" otherwise.
  std::string rehearsal_not_run;
  /// The master's connections: the most open at once (members' and relays'), the
  /// host relays admitted, and the members that came through one.
  size_t connections_peak = 0;
  /// NCCL was initialised with ncclCommInitRankScalable over this many roots (0: not).
  size_t nccl_roots = 0;
  size_t relays = 0;
  size_t relayed_members = 0;
  int exit_code() const { return exit_code_for(findings); }
};

/// Where a finding's lines sit in a text report.
struct FindingLayout {
  size_t margin = 2;       ///< columns before the mark
  size_t id_width = 0;     ///< 0: "id: message"; else the id padded to this width, three spaces
  size_t wrap_indent = 6;  ///< where the message's and the fix's later lines start
  size_t fix_at = 4;       ///< the column of "fix:"
  bool wrap = true;        ///< false: one line each, however long
  bool fix = true;         ///< false: the message only
};

/// A finding as text: its mark (✗ error, ! warning), id and message, then its fix.
std::string render_finding(const Finding& f, const FindingLayout& layout, RenderStyle style);
/// "✗ id: message" on one line, for a log.
std::string render_finding_line(const Finding& f);

/// The first error (or warning), whole: what the verdict tells every member, who
/// prints only this line.
std::string headline(const std::vector<Finding>& findings);
/// The same, up to its first clause break: the master's summary line, above the
/// findings themselves.
std::string brief_headline(const std::vector<Finding>& findings);

/// The hosts that hold the initiating failure (the first error's), as a Slurm host
/// list (`gpu-[017,203]`): what to exclude from the job's next try. "" when the
/// findings hold no error, or the first names no host or is job-wide (FindingClass::kJob).
std::string suspect_hosts(const std::vector<Finding>& findings);

std::string render_text(const Report& report, RenderStyle style);
/// The JSON report, handed to `sink` in pieces (a member at a time): a report of
/// 100k members is 100 MB of JSON that need never be in memory at once.
using JsonSink = std::function<void(std::string_view)>;
void write_json(const Report& report, const JsonSink& sink);
inline std::string render_json(const Report& report) {
  std::string out;
  write_json(report, [&out](std::string_view piece) { out += piece; });
  return out;
}

/// What a member that is not the master knows: the job-wide verdict it was sent,
/// or its own failure to get one.
struct MemberReport {
  Record self;
  int exit_code = exit_code::kInternal;
  bool verdict_received = false;
  std::string headline;     ///< the job's leading problem, or "" on pass
  std::string headline_id;  ///< its finding's id (the verdict's, or its own failure's)
  uint32_t errors = 0, warnings = 0;
  uint32_t joined_ranks = 0;      ///< ranks the master counted
  std::vector<Finding> findings;  ///< about this member, or its own failure
  double total_ms = 0;
};

/// A member's report when it could not get the verdict: its own failure leads.
MemberReport failure_report(const Record& self, Finding failure, double total_ms);

std::string render_member_text(const MemberReport& report, RenderStyle style);
std::string render_member_json(const MemberReport& report);

/// `rankcheck env`: identity, every source, notes, problems and local checks.
std::string render_env_text(const Identity& id, const Record& self,
                            const std::vector<Finding>& local, RenderStyle style);
std::string render_env_json(const Identity& id, const Record& self,
                            const std::vector<Finding>& local);

}  // namespace rankcheck
