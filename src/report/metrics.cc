// The metrics file: Prometheus text format, as node_exporter's textfile collector
// reads it. Every metric has its HELP and TYPE lines once, before its samples.

#include "report/metrics.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "base/version.h"

namespace rankcheck {
namespace {

// A label value as the format wants it: backslash, quote and line break escaped.
// Text a peer chose (a job id) is cut, and bytes outside printable ASCII dropped.
std::string label_value(std::string_view v) {
  std::string out;
  for (char c : v.substr(0, 128)) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c >= 0x20 && c < 0x7f) {
      out += c;
    }
  }
  return out;
}

class Metrics {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(std::string_view name, double value, std::string_view labels = {}) {
    // To the microsecond: the rest of a double's digits are noise (10.800385033000001).
    if (std::isfinite(value)) value = std::round(value * 1e6) / 1e6;
    out_ += labels.empty() ? fmt::format("{} {}\n", name, value)
                           : fmt::format("{}{{{}}} {}\n", name, labels, value);
  }
  void gauge(std::string_view name, std::string_view help, double value) {
    family(name, "gauge", help);
    sample(name, value);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

struct Common {
  std::string role;
  std::string job_id;
  int exit_code = 0;
  std::string first_finding;
  std::string suspects;
  size_t errors = 0, warnings = 0;
  double total_s = 0;
};

// What master and member both say, in the same words.
void common(Metrics& m, const Common& c, double now_unix_s) {
  m.family("rankcheck_last_run_timestamp_seconds", "gauge",
           "When the last rankcheck run on this node ended, in seconds since the epoch.");
  m.sample("rankcheck_last_run_timestamp_seconds", std::floor(now_unix_s * 1000) / 1000);
  m.family("rankcheck_verdict", "gauge",
           "The last run's job-wide verdict: 1 for the one it reached, 0 for the other.");
  bool pass = c.exit_code == exit_code::kPass;
  m.sample("rankcheck_verdict", pass ? 1 : 0, "verdict=\"pass\"");
  m.sample("rankcheck_verdict", pass ? 0 : 1, "verdict=\"fail\"");
  m.gauge("rankcheck_exit_code",
          "The last run's exit code (0 pass, 3 mismatch, 4 incomplete, 5 GPU/NCCL, 6 rejected, "
          "7 cannot listen, 128+N signal N).",
          c.exit_code);
  m.family("rankcheck_run_info", "gauge",
           "The last run: its job id, this process's role, the id and class of the finding that "
           "leads, the hosts that hold it, and the rankcheck version.");
  m.sample("rankcheck_run_info", 1,
           fmt::format("job_id=\"{}\",role=\"{}\",first_finding=\"{}\",first_finding_class=\"{}\","
                       "suspect_hosts=\"{}\",version=\"{}\"",
                       label_value(c.job_id), c.role, label_value(c.first_finding),
                       c.first_finding.empty() ? std::string_view()
                                               : class_name(finding_class(c.first_finding)),
                       label_value(c.suspects), kRankcheckVersion));
  m.family("rankcheck_findings_by_severity", "gauge",
           "How many findings the last run reported, by severity.");
  m.sample("rankcheck_findings_by_severity", double(c.errors), "severity=\"error\"");
  m.sample("rankcheck_findings_by_severity", double(c.warnings), "severity=\"warning\"");
  m.gauge("rankcheck_run_seconds", "How long the last run took, start to exit.", c.total_s);
}

// Findings by id and severity: every id of the catalogue at 0 unless raised, so
// that a query over one id finds a series on every node that ran. A raised id has
// the severity it was raised with (a foreign-job refused is a warning), and no
// second series at 0 with the catalogue's.
void findings(Metrics& m, const std::vector<Finding>& list) {
  std::map<std::pair<std::string, std::string>, int> count;
  std::set<FindingId> raised;
  for (const Finding& f : list) {
    ++count[{std::string(f.name()), f.is_error() ? "error" : "warning"}];
    raised.insert(f.id);
  }
  for (const FindingKind& k : finding_catalog()) {
    if (raised.count(k.id) != 0) continue;
    count[{std::string(k.name), k.severity == Severity::kError ? "error" : "warning"}] = 0;
  }
  m.family("rankcheck_findings", "gauge",
           "Findings of the last run, by id (docs/findings.md) and severity.");
  for (const auto& [key, n] : count) {
    m.sample("rankcheck_findings", n,
             fmt::format("id=\"{}\",severity=\"{}\"", label_value(key.first), key.second));
  }
}

Common common_of(const std::vector<Finding>& list) {
  Common c;
  for (const Finding& f : list)
    (f.is_error() ? c.errors : c.warnings)++;
  auto first =
      std::find_if(list.begin(), list.end(), [](const Finding& f) { return f.is_error(); });
  if (first != list.end()) c.first_finding = first->name();
  c.suspects = suspect_hosts(list);
  return c;
}

// The job under watch: its fingerprint (the leading finding, 1 while it holds, for an
// alert), where its ranks are, whether it runs.
void job_metrics(Metrics& m, const JobReport& j, std::string_view job_id) {
  std::string job = fmt::format("job_id=\"{}\"", label_value(job_id));
  m.family("rankcheck_job_running", "gauge",
           "Whether the job under watch (rankcheck run -- CMD) still runs: 1 while it does.");
  m.sample("rankcheck_job_running", j.running ? 1 : 0, job);
  m.family("rankcheck_job_fingerprint", "gauge",
           "The job under watch's failures as rankcheck names them, by finding id: 1 for the "
           "leading one (init-blocked, job-rank-failed, job-stalled), 0 for the others.");
  std::string lead = j.fingerprint();
  for (std::string_view id : {"init-blocked", "job-rank-failed", "job-stalled"}) {
    m.sample("rankcheck_job_fingerprint", lead == id ? 1 : 0, fmt::format("{},id=\"{}\"", job, id));
  }
  const Finding* first =
      j.findings.empty() || !j.findings.front().is_error() ? nullptr : &j.findings.front();
  m.family("rankcheck_job_info", "gauge",
           "The job under watch: the id and class of the finding that leads it now, and the "
           "hosts that hold it (\"\" while it has none).");
  m.sample(
      "rankcheck_job_info", 1,
      fmt::format("{},first_finding=\"{}\",first_finding_class=\"{}\",suspect_hosts=\"{}\"", job,
                  first ? first->name() : "", first ? class_name(finding_kind(first->id).cls) : "",
                  label_value(suspect_hosts(j.findings))));
  m.family("rankcheck_job_ranks", "gauge",
           "Ranks of the job under watch in each phase: waiting (not started), started, in_init, "
           "init_done, exited.");
  static constexpr const char* kPhase[] = {"waiting", "started", "in_init", "init_done", "exited"};
  for (size_t p = 0; p < std::size(kPhase); ++p) {
    long ranks = 0;
    for (const MemberWatch& mw : j.members) {
      if (static_cast<size_t>(mw.phase) == p) ranks += mw.nranks;
    }
    m.sample("rankcheck_job_ranks", double(ranks), fmt::format("{},phase=\"{}\"", job, kPhase[p]));
  }
}

}  // namespace

std::string render_job_metrics(const JobReport& job, std::string_view job_id) {
  Metrics m;
  job_metrics(m, job, job_id);
  return m.take();
}

std::string render_metrics(const Report& r, double now_unix_s) {
  Metrics m;
  Common c = common_of(r.findings);
  c.role = "master";
  c.job_id = r.job_id;
  c.exit_code = r.exit_code();
  c.total_s = r.total_ms / 1000;
  common(m, c, now_unix_s);
  findings(m, r.findings);
  long joined = 0;
  std::set<std::string_view> hosts;
  for (const Member& mem : r.members) {
    joined += mem.record.nranks;
    hosts.insert(mem.record.host);
  }
  m.gauge("rankcheck_world_size", "Ranks the last run's job has.", double(r.world_size));
  m.gauge("rankcheck_ranks_joined", "Ranks that joined the last run's rendezvous.", double(joined));
  m.gauge("rankcheck_hosts_joined", "Hosts whose ranks joined the last run's rendezvous.",
          double(hosts.size()));
  m.gauge("rankcheck_rendezvous_seconds",
          "The last run's rendezvous: from the master's start to its decision.",
          r.rendezvous_ms / 1000);
  // The GPU stage: the slowest rank's NCCL init, the lowest bus bandwidth; only
  // what ran is written.
  double init_ms = -1;
  double busbw = -1;
  for (const RankResult& x : r.stage_results) {
    if (x.init_ok || x.init_ms > 0) init_ms = std::max(init_ms, x.init_ms);
    if (x.bandwidth_bytes > 0 && x.busbw_gbps > 0) {
      busbw = busbw < 0 ? x.busbw_gbps : std::min(busbw, x.busbw_gbps);
    }
  }
  if (init_ms >= 0) {
    m.gauge("rankcheck_nccl_init_seconds",
            "The last run's ncclCommInitRank: the slowest rank's time to a usable communicator.",
            init_ms / 1000);
  }
  if (busbw >= 0) {
    m.gauge("rankcheck_allreduce_bus_bandwidth_bytes_per_second",
            "The last run's timed all-reduce (--bandwidth): the lowest rank's bus bandwidth, "
            "as nccl-tests computes it.",
            busbw * 1e9);
  }
  return m.take();
}

std::string render_member_metrics(const MemberReport& r, double now_unix_s) {
  Metrics m;
  Common c = common_of(r.findings);
  c.role = "member";
  c.job_id = r.self.job_id;
  c.exit_code = r.exit_code;
  c.total_s = r.total_ms / 1000;
  if (r.verdict_received) {
    // The job's verdict: rank 0 counted the findings and named the leading one.
    c.errors = r.errors;
    c.warnings = r.warnings;
    c.first_finding = r.headline_id;
    c.suspects.clear();
  }
  common(m, c, now_unix_s);
  if (!r.verdict_received) findings(m, r.findings);
  return m.take();
}

}  // namespace rankcheck
