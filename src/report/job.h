#pragma once
// The job under watch as a report shows it: a section of the master's report
// (text, JSON, metrics), rewritten while the job runs.

#include <string>
#include <string_view>
#include <vector>

#include "model/finding.h"
#include "model/watch.h"

namespace rankcheck {

struct RenderStyle;

/// What the master knows of the job under watch, now.
struct JobReport {
  bool running = true;
  bool ended_by_rankcheck = false;  ///< --fail-fast ended it
  double elapsed_ms = 0;            ///< since the command was started
  double init_timeout_ms = 0;
  double stall_after_ms = 0;
  bool fail_fast = false;
  std::string command;  ///< the command, as rank 0 was given it
  std::vector<MemberWatch> members;
  std::vector<Finding> findings;  ///< in report order

  /// Members in each phase, and the members whose wrapper never connected (waiting).
  size_t count(JobPhase p) const;
  /// The leading error's id, "" when there is none: the job's fingerprint.
  std::string fingerprint() const;
};

/// The job's section of the text report: a line of counts, and its findings.
std::string render_job_text(const JobReport& job, const RenderStyle& style);
/// The master's JSON report (as the check wrote it) with the job's section as its
/// last key, "job".
std::string with_job_json(std::string_view report_json, const JobReport& job);

}  // namespace rankcheck
