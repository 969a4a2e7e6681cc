#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/hostlist.h"
#include "base/interrupt.h"
#include "base/text.h"
#include "base/version.h"
#include "report/common.h"

namespace rankcheck {
namespace {

// The width text reports wrap to: set_text_width's, 100 until then.
size_t g_width = 100;

}  // namespace

void set_text_width(size_t columns) {
  g_width = std::clamp<size_t>(columns, kMinTextWidth, kMaxTextWidth);
}

std::string wrap(std::string_view text, size_t first_col, size_t indent) {
  std::string out;
  size_t col = first_col;
  bool first_word = true;
  while (!text.empty()) {
    auto sp = text.find(' ');
    std::string_view word = text.substr(0, sp);
    text = sp == std::string_view::npos ? std::string_view() : text.substr(sp + 1);
    if (word.empty()) continue;
    if (!first_word && col + 1 + word.size() > g_width) {
      out += '\n';
      out.append(indent, ' ');
      col = indent;
    } else if (!first_word) {
      out += ' ';
      ++col;
    }
    out += word;
    col += word.size();
    first_word = false;
  }
  return out;
}

namespace {

size_t host_count(const std::vector<Member>& members) {
  std::set<std::string_view> hosts;
  for (const Member& m : members)
    hosts.insert(m.record.host);
  return hosts.size();
}

long rank_count(const std::vector<Member>& members) {
  long n = 0;
  for (const Member& m : members)
    n += m.record.nranks;
  return n;
}

}  // namespace

std::string short_gpu_name(const std::string& name) {
  std::string n = name.rfind("NVIDIA ", 0) == 0 ? name.substr(7) : name;
  return printable(n.substr(0, n.find(' ')), 16);
}

namespace {

// null, not a sentinel, where a value is not known (-1, 0, ""): the schema
// (docs/report.schema.json) refuses the sentinels.
nlohmann::json or_null(long v, long unknown = -1) {
  return v == unknown ? nlohmann::json() : nlohmann::json(v);
}
nlohmann::json or_null(std::string_view v) {
  return v.empty() ? nlohmann::json() : nlohmann::json(v);
}

nlohmann::json gpu_json(const GpuFacts& g) {
  nlohmann::json devices = nlohmann::json::array();
  for (const GpuDevice& d : g.devices) {
    devices.push_back({{"rank", d.rank},
                       {"ordinal", d.ordinal},
                       {"uuid", d.uuid},
                       {"pci_bus_id", d.pci_bus_id},
                       {"name", d.name},
                       {"memory_bytes", d.memory_bytes},
                       {"fabric_state", fabric_state_text(d.fabric_state)},
                       {"fabric_status", d.fabric_status},
                       {"nvlinks", or_null(d.nvlinks)}});
  }
  static constexpr const char* kStates[] = {"usable",    "skipped",   "no-driver", "init-failed",
                                            "no-device", "not-built", "stuck"};
  return {{"state", kStates[static_cast<size_t>(g.state)]},
          {"error", g.error},
          {"cuda_version", or_null(g.cuda_version, 0)},
          {"driver", g.driver},
          {"device_count", or_null(g.device_count)},
          {"visible_devices", g.visible_devices},
          {"choice", g.choice},
          {"devices", devices},
          {"nccl_version", or_null(g.nccl_version, 0)},
          {"nccl_version_text", g.nccl_loaded() ? nccl_version_text(g.nccl_version) : ""},
          {"nccl_path", g.nccl_path},
          {"nccl_error", g.nccl_error},
          {"granted", or_null(g.granted)},
          {"granted_by", g.granted_by},
          {"nvml_error", g.nvml_error}};
}

nlohmann::json stage_json(const RankResult& r) {
  nlohmann::json j = {{"rank", r.rank},
                      {"init_ok", r.init_ok},
                      {"init_timed_out", r.init_timed_out},
                      {"init_error", r.init_error},
                      {"init_ms", r.init_ms},
                      {"allreduce_ok", r.allreduce_ok},
                      {"allreduce_timed_out", r.allreduce_timed_out},
                      {"allreduce_error", r.allreduce_error},
                      {"allreduce_us", r.allreduce_us},
                      {"expected", r.expected},
                      {"got", r.got}};
  if (r.bandwidth_bytes > 0) {
    j["bandwidth"] = {{"bytes", r.bandwidth_bytes},
                      {"algbw_gbps", r.algbw_gbps},
                      {"busbw_gbps", r.busbw_gbps},
                      {"method", kBandwidthMethod}};
  }
  // What NCCL said in the rank's process (its NCCL_DEBUG_FILE), where it said anything.
  if (!r.nccl_warn.empty()) j["nccl_warn"] = r.nccl_warn;
  if (!r.nccl_finding.empty()) j["nccl_finding"] = r.nccl_finding;
  if (!r.nccl_net.empty()) j["nccl_net"] = r.nccl_net;
  if (!r.ib_moved.empty()) j["ib_counters_moved"] = r.ib_moved;
  return j;
}

}  // namespace

std::map<long, std::string> nccl_net_by_rank(const Report& r) {
  std::map<long, std::string> out;
  for (const RankResult& x : r.stage_results) {
    if (!x.nccl_net.empty()) out[x.rank] = x.nccl_net;
  }
  return out;
}

std::map<std::string, std::string> nccl_networks(const Report& r) {
  std::map<long, std::string> by_rank = nccl_net_by_rank(r);
  if (by_rank.empty()) return {};
  std::map<std::string, std::set<std::string>> nets;
  for (const Member& m : r.members) {
    for (long k = m.record.rank; k <= m.record.last_rank(); ++k) {
      if (auto it = by_rank.find(k); it != by_rank.end()) nets[m.record.host].insert(it->second);
    }
  }
  std::map<std::string, std::string> out;
  for (const auto& [host, names] : nets) {
    std::string joined;
    for (const std::string& n : names)
      joined += (joined.empty() ? "" : ",") + n;
    out[host] = joined;
  }
  return out;
}

nlohmann::json finding_json(const Finding& f) {
  return {{"id", f.name()},
          {"severity", f.is_error() ? "error" : "warning"},
          {"exit_code", f.exit_code},
          {"message", f.message},
          {"hint", f.fix},
          {"ranks", f.ranks},
          {"hosts", f.hosts}};
}

nlohmann::json record_json(const Record& r) {
  nlohmann::json env = nlohmann::json::object();
  for (const EnvVar& e : r.env)
    env[e.name] = e.value;
  nlohmann::json env_sources = nlohmann::json::object();  // values from NCCL's files
  for (const EnvVar& e : r.env_sources)
    env_sources[e.name] = e.value;
  return {{"rank", or_null(r.rank)},
          {"nranks", r.nranks},
          {"world_size", or_null(r.world_size)},
          {"local_rank", or_null(r.local_rank)},
          {"local_world_size", or_null(r.local_world_size)},
          {"node_rank", or_null(r.node_rank)},
          {"nnodes", or_null(r.nnodes)},
          {"host", r.host},
          {"pid", r.pid},
          {"launcher", r.launcher},
          {"job_id", or_null(r.job_id.str())},
          {"master_addr", or_null(r.master_addr.str())},
          {"master_port", r.master_port},
          {"master_resolved", r.master_resolved.get()},
          {"version", r.version},
          {"started_unix_ms", or_null(static_cast<long>(r.started_unix_ms), 0)},
          {"env", env},
          {"env_sources", env_sources},
          {"nccl_if", nccl_if_json(r.nccl_if)},
          {"nccl_net", nccl_net_json(r.nccl_net)},
          {"shm", shm_json(r.shm)},
          {"arch", or_null(r.arch.str())},
          {"pcie", pcie_json(r.pcie)},
          {"gpu", gpu_json(r.gpu)}};
}

nlohmann::json nccl_if_json(const NcclIfFacts& f) {
  static constexpr const char* kStates[] = {"unknown", "found", "none"};
  nlohmann::json j = {{"state", kStates[f.state <= NcclIfFacts::kNone ? f.state : 0]}};
  if (!f.known()) return j;
  j["name"] = f.name;
  j["address"] = f.address;
  j["loopback"] = (f.flags & NcclIfFacts::kLoopback) != 0;
  j["link_local"] = (f.flags & NcclIfFacts::kLinkScope) != 0;
  j["rule"] = f.rule;
  j["error"] = f.error;
  j["socket"] = f.socket.get();
  j["rules_version"] = f.rules_version;
  return j;
}

nlohmann::json json_envelope(std::string_view role) {
  nlohmann::json j;
  j["schema_version"] = kSchemaVersion;
  j["rankcheck_version"] = kRankcheckVersion;
  j["role"] = role;
  return j;
}

nlohmann::json json_envelope(std::string_view role, std::string_view verdict, int exit_code) {
  nlohmann::json j = json_envelope(role);
  j["verdict"] = verdict;
  j["exit_code"] = exit_code;
  return j;
}

namespace {

// Every fractional number in the reports is a time in ms or µs, or a rate in GB/s:
// three decimals are all that was measured; the rest of a double's digits are noise
// (0.005438000000026477).
void round_fractions(nlohmann::json& j) {
  if (j.is_number_float()) {
    double v = j.get<double>();
    if (std::isfinite(v)) j = std::round(v * 1000) / 1000;
  } else if (j.is_structured()) {
    for (auto& e : j)
      round_fractions(e);
  }
}

}  // namespace

std::string dump(const nlohmann::json& j, bool final_newline) {
  nlohmann::json rounded = j;
  round_fractions(rounded);
  // Peers may send invalid UTF-8; the JSON stays valid with U+FFFD in its place.
  return rounded.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
         (final_newline ? "\n" : "");
}

// The value that stands for the members in the master's JSON until they are
// spliced in. Found as the top-level key's line: no string in the JSON holds a raw
// line break, so nothing a peer sent can look like it.
namespace {

constexpr const char* kMembersPlaceholder = "(members)";

}  // namespace

void append_indented(std::string& out, std::string_view text, std::string_view indent) {
  size_t from = 0;
  for (size_t nl = text.find('\n'); nl != std::string_view::npos; nl = text.find('\n', from)) {
    out.append(text.substr(from, nl + 1 - from));
    out.append(indent);
    from = nl + 1;
  }
  out.append(text.substr(from));
}

std::string render_finding(const Finding& f, const FindingLayout& l, RenderStyle style) {
  Paint paint{style.color};
  // A member renders what its master sent: nothing from there reaches the terminal
  // raw. (Text rankcheck composed is printable already; this changes nothing in it.)
  std::string id(f.name());
  std::string message = printable(f.message, 4096);
  std::string fix = printable(f.fix, 4096);
  std::string out(l.margin, ' ');
  // On a terminal the mark and the id in the finding's colour, and its fix marked:
  // a report of many findings is read by them, not only by its verdict word.
  const char* colour = f.is_error() ? "31" : "33";
  out += paint(colour, f.is_error() ? "✗" : "!");
  out += ' ';
  size_t col = l.margin + 2;
  std::string shown_id = paint(f.is_error() ? "1;31" : "1;33", id);
  if (l.id_width > 0) {
    out += shown_id + std::string(l.id_width > id.size() ? l.id_width - id.size() : 0, ' ') + "   ";
    col += l.id_width + 3;
  } else {
    out += shown_id + ": ";
    col += id.size() + 2;
  }
  auto text = [&](std::string_view s, size_t first_col) {
    return l.wrap ? wrap(s, first_col, l.wrap_indent) : std::string(s);
  };
  out += text(message, col);
  if (!l.fix) return out;
  out += '\n';
  if (!fix.empty()) {
    // Wrapped as plain text, painted after: the colour's bytes take no columns.
    out += std::string(l.fix_at, ' ') + paint("36", "fix:") +
           text("fix: " + fix, l.fix_at).substr(4) + '\n';
  }
  return out;
}

std::string render_finding_line(const Finding& f) {
  return render_finding(f, {.margin = 0, .wrap = false, .fix = false}, {});
}

std::string headline(const std::vector<Finding>& findings) {
  if (findings.empty()) return "";
  const std::string& m = findings.front().message;
  // Within the verdict's cap for it (512), so that a member prints all of it.
  return m.size() <= 500 ? m : m.substr(0, 497) + "...";
}

std::string brief_headline(const std::vector<Finding>& findings) {
  if (findings.empty()) return "";
  std::string_view m = findings.front().message;
  // The message up to its first clause break, when that leaves something to read.
  size_t cut = std::string_view::npos;
  for (std::string_view sep : {": ", "; "}) {
    size_t p = m.find(sep, 16);
    if (p != std::string_view::npos) cut = std::min(cut, p);
  }
  std::string h(m.substr(0, cut));
  if (h.size() <= 120) return h;
  // Cut long ones at a word, and never inside a parenthesis: "(--timeout 120" with
  // its ")" cut off reads as a broken line.
  size_t at = h.rfind(' ', 116);
  h.resize(at == std::string::npos || at < 40 ? 116 : at);
  size_t open = std::string::npos;
  int depth = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    if (h[i] == '(' && depth++ == 0) open = i;
    if (h[i] == ')' && depth > 0) --depth;
  }
  if (depth > 0 && open >= 40) h.resize(open);
  while (!h.empty() && (h.back() == ' ' || h.back() == ','))
    h.pop_back();
  return h + "...";
}

std::string suspect_hosts(const std::vector<Finding>& findings) {
  auto first =
      std::find_if(findings.begin(), findings.end(), [](const Finding& f) { return f.is_error(); });
  // A job-wide error (a world size, a duplicate RANK, another job on the port) is
  // nobody's host: leaving hosts out of the next try, or draining them, cannot fix it.
  if (first == findings.end() || finding_kind(first->id).cls == FindingClass::kJob) return {};
  return compress_hostlist(first->hosts);
}

std::string render_text(const Report& r, RenderStyle style) {
  Paint paint{style.color};
  std::string out;
  size_t errors = 0;
  size_t warnings = 0;
  for (const Finding& f : r.findings)
    (f.is_error() ? errors : warnings)++;

  std::string master = r.transport == Transport::kMpi
                           ? std::string("MPI rank 0")
                           : fmt::format("{}:{}", printable(r.master_addr, 64), r.master_port);
  out += fmt::format("rankcheck {} · job {} · {} on {} · master {}{}\n", kRankcheckVersion,
                     r.job_id.empty() ? std::string("-") : printable(r.job_id, 40),
                     plural(size_t(rank_count(r.members)), "rank", "ranks"),
                     plural(host_count(r.members), "host", "hosts"), master,
                     r.master_bound.empty() ? std::string()
                                            : fmt::format(" ({})", format_list(r.master_bound, 3)));
  if (errors == 0) {
    out += paint("1;32", "PASS");
    out += fmt::format(
        " — {} of {} joined{}\n", plural(size_t(rank_count(r.members)), "rank", "ranks"),
        r.world_size, warnings ? fmt::format(", {}", plural(warnings, "warning", "warnings")) : "");
  } else {
    out += paint("1;31", "FAIL");
    out += fmt::format(" — {}{}. First: {}\n", plural(errors, "error", "errors"),
                       warnings ? fmt::format(", {}", plural(warnings, "warning", "warnings")) : "",
                       brief_headline(r.findings));
  }

  if (!r.findings.empty()) out += "\n";
  size_t id_width = 0;
  for (const Finding& f : r.findings)
    id_width = std::max(id_width, f.name().size());
  FindingLayout aligned{.margin = 2,
                        .id_width = id_width,
                        .wrap_indent = 4 + id_width + 3,
                        .fix_at = 4 + id_width + 3};
  for (const Finding& f : r.findings)
    out += render_finding(f, aligned, style);
  if (!r.members.empty()) out += "\n" + member_table(r);
  out += fmt::format(
      "\n  rendezvous {} ({}) · decision {:.1f} ms · GPU stage {} · {}\n",
      format_seconds(r.rendezvous_ms),
      r.interrupted_by != 0 ? fmt::format("stopped by {}", signal_name(r.interrupted_by))
      : r.timed_out         ? std::string("deadline reached")
      : r.member_lost       ? std::string("a member's connection closed; every other rank joined")
                            : std::string("all joined"),
      r.decision_ms, r.gpu_stage,
      r.authenticated ? "authenticated with the job token" : "unauthenticated (no job token)");
  if (r.nccl_roots > 0)
    out += "  NCCL initialised with ncclCommInitRankScalable over " +
           plural(r.nccl_roots, "root", "roots") + "\n";
  if (r.relays > 0) {
    out += fmt::format("  {} of {} joined through {}; the master held {} at most\n",
                       r.relayed_members, plural(r.members.size(), "member", "members"),
                       plural(r.relays, "host relay", "host relays"),
                       plural(r.connections_peak, "connection", "connections"));
  }
  if (!r.paths.empty()) {
    size_t ok =
        static_cast<size_t>(std::count_if(r.paths.begin(), r.paths.end(), [](const PathTried& p) {
          return p.outcome == "connected";
        }));
    out += fmt::format("  NCCL's connections rehearsed in {}: {} of {} connected\n",
                       format_seconds(r.rehearsal_ms), ok, r.paths.size());
  }
  if (!r.rehearsal_not_run.empty()) {
    out += fmt::format("  NCCL's connections not rehearsed: {}\n", r.rehearsal_not_run);
  }
  // Last, where a script's `tail -1` finds it: the hosts to leave out of the next try.
  if (std::string suspects = suspect_hosts(r.findings); !suspects.empty()) {
    out += fmt::format("  {} {}\n", paint("1", "suspect hosts:"), suspects);
  }
  return out;
}

void write_json(const Report& r, const JsonSink& sink) {
  nlohmann::json j = json_envelope("master", r.exit_code() == 0 ? "pass" : "fail", r.exit_code());
  j["job_id"] = or_null(r.job_id);
  j["world_size"] = r.world_size;
  j["ranks_joined"] = rank_count(r.members);
  j["hosts_joined"] = host_count(r.members);
  j["master"] = {
      {"addr", r.transport == Transport::kMpi ? std::string(kMpiMasterAddr) : r.master_addr},
      {"port", r.master_port},
      {"host", r.master_host},
      {"bound", r.master_bound}};
  j["authenticated"] = r.authenticated;
  // The keys a member's report has too, meaning the same there (docs/report.schema.json).
  j["verdict_received"] = true;  // it decided it
  j["headline"] = headline(r.findings);
  j["errors"] = std::count_if(r.findings.begin(), r.findings.end(),
                              [](const Finding& f) { return f.is_error(); });
  j["warnings"] = r.findings.size() - static_cast<size_t>(j["errors"].get<long>());
  auto rank0 = std::find_if(r.members.begin(), r.members.end(),
                            [](const Member& m) { return m.record.rank == 0; });
  j["self"] = rank0 == r.members.end() ? nlohmann::json() : record_json(rank0->record);
  j["decided"] = r.interrupted_by != 0 ? "interrupted"
                 : r.timed_out         ? "deadline"
                 : r.member_lost       ? "member-lost"
                                       : "all-joined";
  j["suspect_hosts"] = suspect_hosts(r.findings);
  j["findings"] = nlohmann::json::array();
  for (const Finding& f : r.findings)
    j["findings"].push_back(finding_json(f));
  // The rehearsal of NCCL's connections: each host pair tried, with its connect time.
  j["paths"] = nlohmann::json::array();
  for (const PathTried& p : r.paths) {
    j["paths"].push_back(
        {{"from", p.from}, {"to", p.to}, {"outcome", p.outcome}, {"connect_ms", p.connect_ms}});
  }
  // The members are written one at a time (below): as one tree, 16k of them take
  // a hundred megabytes.
  j["rehearsal"] = {{"ran", r.rehearsal_ran}, {"not_run", or_null(r.rehearsal_not_run)}};
  j["members"] = kMembersPlaceholder;
  j["timings"] = {{"rendezvous_ms", r.rendezvous_ms},
                  {"decision_ms", r.decision_ms},
                  {"broadcast_ms", r.broadcast_ms},
                  {"rehearsal_ms", r.rehearsal_ms},
                  {"total_ms", r.total_ms}};
  // null where the master could not read its own /proc (out of file descriptors).
  auto kib = [](long v) { return v < 0 ? nlohmann::json() : nlohmann::json(v); };
  j["master_memory_kib"] = {{"resident_at_decision", kib(r.rss_kib)},
                            {"peak_at_decision", kib(r.peak_rss_kib)}};
  j["connections"] = {
      {"peak", r.connections_peak}, {"relays", r.relays}, {"relayed_members", r.relayed_members}};
  j["gpu_stage"] = r.gpu_stage;
  j["nccl_roots"] = r.nccl_roots;
  j["stage_results"] = nlohmann::json::array();
  for (const RankResult& x : r.stage_results)
    j["stage_results"].push_back(stage_json(x));
  // The network NCCL chose on each host, where its processes said (NCCL_DEBUG=INFO).
  if (auto nets = nccl_networks(r); !nets.empty()) j["nccl_networks"] = nets;
  // The document without its members, cut where they go; they follow one at a
  // time, so that no string holds them all.
  std::string frame = dump(j);
  std::string placeholder = fmt::format("\n  \"members\": \"{}\"", kMembersPlaceholder);
  size_t at = frame.find(placeholder);
  if (at == std::string::npos) throw std::logic_error("render_json: no members placeholder");
  size_t value_at = at + placeholder.size() - std::strlen(kMembersPlaceholder) - 2;  // the quote
  sink(std::string_view(frame).substr(0, value_at));
  if (r.members.empty()) {
    sink("[]");
  } else {
    sink("[\n");
    std::string out;
    for (size_t k = 0; k < r.members.size(); ++k) {
      const Member& m = r.members[k];
      nlohmann::json mj = record_json(m.record);
      mj["joined_ms"] = m.joined_ms;
      mj["peer"] = m.peer;
      out = "    ";
      append_indented(out, dump(mj, false), "    ");
      out += k + 1 < r.members.size() ? ",\n" : "\n";
      sink(out);
    }
    sink("  ]");
  }
  sink(std::string_view(frame).substr(at + placeholder.size()));
}

MemberReport failure_report(const Record& self, Finding failure, double total_ms) {
  MemberReport m;
  m.self = self;
  m.exit_code = failure.exit_code;
  m.headline = brief_headline({failure});       // the finding itself follows, whole
  m.headline_id = std::string(failure.name());  // its id ends the line, as a verdict's does
  m.findings.push_back(std::move(failure));
  m.total_ms = total_ms;
  return m;
}

std::string render_member_text(const MemberReport& r, RenderStyle style) {
  Paint paint{style.color};
  const Record& s = r.self;
  std::string self =
      fmt::format("this is {} on {}", span_label(s.rank, s.nranks), printable(s.host, 64));
  std::string job = s.job_id.empty() ? "" : fmt::format(" (job {})", printable(s.job_id, 40));
  std::string out;
  if (r.exit_code == 0) {
    out = fmt::format(
        "rankcheck: {}{}: {} joined{}; {}\n", paint("1;32", "PASS"), job,
        plural(r.joined_ranks, "rank", "ranks"),
        r.warnings ? fmt::format(", {}", plural(r.warnings, "warning", "warnings")) : "", self);
  } else {
    out = fmt::format(
        "rankcheck: {}{}: {}; {}{}\n", paint("1;31", "FAIL"), job,
        r.headline.empty() ? std::string("see the master's report") : printable(r.headline, 512),
        self, r.headline_id.empty() ? "" : fmt::format(" [{}]", printable(r.headline_id, 64)));
  }
  // A job's verdict is one line per member: rank 0 prints the findings and their
  // fixes once, and eight copies of them would bury its report. A member's own
  // failure (no master, a refusal) is in no other report: it prints it whole.
  if (r.verdict_received) return out;
  for (const Finding& f : r.findings)
    out += render_finding(f, {.margin = 2, .wrap_indent = 6, .fix_at = 4}, style);
  if (std::string suspects = suspect_hosts(r.findings); !suspects.empty()) {
    out += fmt::format("  suspect hosts: {}\n", suspects);
  }
  return out;
}

std::string render_member_json(const MemberReport& r) {
  nlohmann::json j = json_envelope("member", r.exit_code == 0 ? "pass" : "fail", r.exit_code);
  j["verdict_received"] = r.verdict_received;
  j["job_id"] = or_null(r.self.job_id.str());
  j["world_size"] = r.self.world_size < 0 ? nlohmann::json() : nlohmann::json(r.self.world_size);
  j["headline"] = r.headline;
  j["errors"] = r.errors;
  j["warnings"] = r.warnings;
  j["ranks_joined"] = r.joined_ranks;
  // Rank 0's report names the job's suspects; a member knows them only when its own
  // failure leads.
  j["suspect_hosts"] = r.verdict_received ? std::string() : suspect_hosts(r.findings);
  j["self"] = record_json(r.self);
  j["findings"] = nlohmann::json::array();
  for (const Finding& f : r.findings)
    j["findings"].push_back(finding_json(f));
  j["timings"] = {{"total_ms", r.total_ms}};
  return dump(j);
}

}  // namespace rankcheck
