#pragma once
// The last run as metrics: a file for node_exporter's textfile collector
// (Prometheus text format 0.0.4), so that a failing check is an alert.

#include <string>

#include "report/job.h"
#include "report/report.h"

namespace rankcheck {

/// The master's view: verdict, exit code, findings by id and severity, ranks
/// joined, rendezvous and NCCL init seconds, all-reduce bus bandwidth; `now_unix_s`
/// is the run's end. Metrics of a stage that did not run are left out, not zero.
std::string render_metrics(const Report& report, double now_unix_s);

/// A member's view: the job's verdict and exit code it was sent (or its own
/// failure), its findings when its own failure leads, and its run's length.
std::string render_member_metrics(const MemberReport& report, double now_unix_s);

/// The job under watch's families (rankcheck_job_*), to follow the check's metrics in
/// the same file while the job runs: its fingerprint for an alert, its ranks by phase.
std::string render_job_metrics(const JobReport& job, std::string_view job_id);

}  // namespace rankcheck
