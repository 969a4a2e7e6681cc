// The job under watch in the master's report: a line of where its ranks are, its
// findings (the initiating failure first), and every member's phase in the JSON.

#include "report/job.h"

#include <algorithm>

#include "base/text.h"
#include "report/common.h"

namespace rankcheck {

size_t JobReport::count(JobPhase p) const {
  return static_cast<size_t>(std::count_if(members.begin(), members.end(),
                                           [p](const MemberWatch& m) { return m.phase == p; }));
}

std::string JobReport::fingerprint() const {
  if (findings.empty() || !findings.front().is_error()) return "";
  return std::string(findings.front().name());
}

namespace {

std::string state_words(const JobReport& j) {
  if (j.ended_by_rankcheck) return "ended by --fail-fast";
  return j.running ? "running" : "ended";
}

// "ranks 0-7 exited · 8-15 in init · 16 started": ranks, not members, by phase.
std::string phase_line(const JobReport& j) {
  std::vector<std::string> parts;
  for (JobPhase p : {JobPhase::kExited, JobPhase::kInitDone, JobPhase::kInit, JobPhase::kStarted,
                     JobPhase::kWaiting}) {
    std::vector<long> ranks;
    for (const MemberWatch& m : j.members) {
      if (m.phase != p) continue;
      for (long r = m.rank; r <= m.last_rank(); ++r)
        ranks.push_back(r);
    }
    if (ranks.empty()) continue;
    parts.push_back(fmt::format("{} {}", ranks_label(ranks, 6), phase_name(p)));
  }
  return fmt::format("{}", fmt::join(parts, " · "));
}

nlohmann::json line_json(const WatchLine& l) {
  if (!l.seen()) return nullptr;
  return {{"at_ms", l.at_ms},
          {"finding", l.finding.empty() ? nlohmann::json() : nlohmann::json(l.finding)},
          {"text", l.text}};
}

nlohmann::json ms_or_null(double ms) {
  return ms < 0 ? nlohmann::json() : nlohmann::json(ms);
}

}  // namespace

std::string render_job_text(const JobReport& j, const RenderStyle& style) {
  Paint paint{style.color};
  std::string out = fmt::format("\n{} {} · {} · {}\n", paint("1", "job under watch:"),
                                state_words(j), format_seconds(j.elapsed_ms), phase_line(j));
  for (const Finding& f : j.findings)
    out += render_finding(f, {.margin = 2, .wrap_indent = 6, .fix_at = 4}, style);
  if (std::string suspects = suspect_hosts(j.findings); !suspects.empty()) {
    out += fmt::format("  {} {}\n", paint("1", "suspect hosts:"), suspects);
  }
  return out;
}

namespace {

nlohmann::json job_json(const JobReport& j) {
  nlohmann::json out;
  out["state"] = j.ended_by_rankcheck ? "ended-by-rankcheck" : j.running ? "running" : "ended";
  out["command"] = j.command;
  out["elapsed_ms"] = j.elapsed_ms;
  out["fail_fast"] = j.fail_fast;
  out["init_timeout_ms"] = j.init_timeout_ms;
  out["stall_after_ms"] =
      j.stall_after_ms > 0 ? nlohmann::json(j.stall_after_ms) : nlohmann::json();
  out["fingerprint"] = j.fingerprint();
  out["suspect_hosts"] = suspect_hosts(j.findings);
  out["ranks"] = {{"waiting", 0}, {"started", 0}, {"in_init", 0}, {"init_done", 0}, {"exited", 0}};
  static constexpr const char* kKeys[] = {"waiting", "started", "in_init", "init_done", "exited"};
  for (const MemberWatch& m : j.members)
    out["ranks"][kKeys[static_cast<size_t>(m.phase)]] =
        out["ranks"][kKeys[static_cast<size_t>(m.phase)]].get<long>() + m.nranks;
  out["findings"] = nlohmann::json::array();
  for (const Finding& f : j.findings)
    out["findings"].push_back(finding_json(f));
  out["members"] = nlohmann::json::array();
  for (const MemberWatch& m : j.members) {
    nlohmann::json mj;
    mj["rank"] = m.rank;
    mj["nranks"] = m.nranks;
    mj["host"] = m.host;
    mj["pid"] = m.pid == 0 ? nlohmann::json() : nlohmann::json(m.pid);
    mj["phase"] = kKeys[static_cast<size_t>(m.phase)];
    mj["marker"] = m.marker.empty() ? nlohmann::json() : nlohmann::json(m.marker);
    mj["connected"] = m.connected;
    mj["lost"] = m.lost;
    mj["started_ms"] = ms_or_null(m.phase_ms[static_cast<size_t>(JobPhase::kStarted)]);
    mj["init_ms"] = ms_or_null(m.phase_ms[static_cast<size_t>(JobPhase::kInit)]);
    mj["init_done_ms"] = ms_or_null(m.phase_ms[static_cast<size_t>(JobPhase::kInitDone)]);
    mj["exited_ms"] = ms_or_null(m.phase_ms[static_cast<size_t>(JobPhase::kExited)]);
    mj["exit_code"] = m.exited() && m.signal == 0 ? nlohmann::json(m.exit_code) : nlohmann::json();
    mj["signal"] = m.signal != 0 ? nlohmann::json(m.signal) : nlohmann::json();
    mj["ended_by_rankcheck"] = m.ended_by_rankcheck;
    mj["initiating_line"] = line_json(m.initiating);
    mj["downstream_line"] = line_json(m.downstream);
    mj["last_line"] = m.last.text.empty() ? nlohmann::json() : nlohmann::json(m.last.text);
    out["members"].push_back(std::move(mj));
  }
  return out;
}

}  // namespace

std::string with_job_json(std::string_view report_json, const JobReport& job) {
  // The report is one object, written by dump(): its last '}' closes it.
  size_t end = report_json.rfind('}');
  if (end == std::string_view::npos) return std::string(report_json);
  std::string out(report_json.substr(0, end));
  while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
    out.pop_back();
  bool empty = !out.empty() && out.back() == '{';
  out += empty ? "\n  \"job\": " : ",\n  \"job\": ";
  append_indented(out, dump(job_json(job), false), "  ");
  out += "\n}\n";
  return out;
}

}  // namespace rankcheck
