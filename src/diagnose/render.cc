// The diagnosis as text and JSON, with run's finding layout (report.h's
// render_finding) and its JSON of a finding; role, first seen and evidence added.

#include <fmt/format.h>

#include "base/text.h"
#include "base/version.h"
#include "diagnose/internal.h"
#include "report/common.h"
#include "report/report.h"

namespace rankcheck::diagnose {
namespace {

// A text report's evidence line ends by this column, like the rest of its lines end
// near report.cc's wrap width: a log line can be kilobytes (torchrun's error.json is
// one line), and the JSON report carries all of it.
constexpr size_t kEvidenceColumns = 160;
constexpr size_t kEvidenceMinText = 40;

// `s` (printable already) cut to `columns` display columns, "…" marking a cut.
std::string fit(const std::string& s, size_t columns) {
  if (display_width(s) <= columns) return s;
  size_t width = 0, i = 0;
  while (i < s.size() && width + 1 < columns) {
    size_t len = 1;
    while (i + len < s.size() && (static_cast<unsigned char>(s[i + len]) & 0xc0) == 0x80)
      ++len;
    i += len;
    ++width;
  }
  return s.substr(0, i) + "…";
}

std::string evidence_line(const Evidence& e, size_t indent) {
  std::string head = fmt::format("{}:{}  ", printable(e.file, 120), e.line);
  size_t used = indent + display_width(head);
  size_t room =
      used + kEvidenceMinText < kEvidenceColumns ? kEvidenceColumns - used : kEvidenceMinText;
  return head + fit(printable(e.text, kEvidenceBytes), room);
}

}  // namespace

int Diagnosis::exit_code() const {
  for (const DiagFinding& f : findings) {
    if (f.initiating && f.finding.is_error()) return f.finding.exit_code;
  }
  return findings.empty() ? exit_code::kPass : findings.front().finding.exit_code;
}

std::string render_text(const Diagnosis& d, bool color) {
  Paint paint{color};
  size_t initiating = 0;
  for (const DiagFinding& f : d.findings)
    initiating += f.initiating ? 1 : 0;
  std::string out = fmt::format(
      "rankcheck {} diagnose · {} · {}{}{}\n", kRankcheckVersion, plural(d.files, "file", "files"),
      plural(d.lines, "line", "lines"), d.launcher.empty() ? "" : " · launcher " + d.launcher,
      d.ranks_seen.empty()
          ? ""
          : fmt::format(" · {} on {}", ranks_label(d.ranks_seen, 6),
                        d.hosts_seen.empty() ? std::string("unnamed hosts")
                                             : plural(d.hosts_seen.size(), "host", "hosts")));
  if (d.findings.empty()) {
    out += paint("1;32", "NOTHING FOUND");
    out += " — no message of the catalogue in these logs (exit 0)\n";
    return out;
  }
  std::vector<Finding> plain;
  for (const DiagFinding& f : d.findings)
    plain.push_back(f.finding);
  out += paint("1;31", "FAIL");
  out += fmt::format(" — {} initiating, {} downstream. First: {}\n", initiating,
                     d.findings.size() - initiating, printable(brief_headline(plain), 160));
  out += "\n";
  size_t id_width = 0;
  for (const DiagFinding& f : d.findings)
    id_width = std::max(id_width, f.finding.name().size());
  size_t indent = 4 + id_width + 3;
  FindingLayout layout{
      .margin = 2, .id_width = id_width, .wrap_indent = indent, .fix_at = indent, .fix = false};
  std::string pad(indent, ' ');
  for (const DiagFinding& f : d.findings) {
    out += render_finding(f.finding, layout, {color}) + "\n";
    std::string facts = f.initiating ? paint("1", "initiating") : std::string("downstream");
    if (!f.finding.ranks.empty()) facts += " · " + ranks_label(f.finding.ranks, 8);
    if (!f.finding.hosts.empty()) facts += " · " + printable(format_list(f.finding.hosts, 4), 120);
    facts += " · first seen " + printable(f.first_seen, 160);
    out += pad + facts + "\n";
    for (const Evidence& e : f.evidence)
      out += pad + "  " + evidence_line(e, indent + 2) + "\n";
    if (f.initiating && !f.finding.fix.empty())
      out += pad + wrap("fix: " + printable(f.finding.fix, 4096), indent, indent) + "\n";
  }
  out += fmt::format("\n  verify with: {}\n", printable(d.verify_with, 400));
  if (!d.verify_note.empty()) out += fmt::format("    ({})\n", printable(d.verify_note, 400));
  out += fmt::format("  read {} ({}{}), {} matched a message of the catalogue\n",
                     plural(d.files, "file", "files"), bytes_text(d.bytes),
                     d.skipped_files ? fmt::format(", {} binary left out", d.skipped_files) : "",
                     plural(d.matched, "line", "lines"));
  return out;
}

std::string render_json(const Diagnosis& d) {
  nlohmann::json j =
      json_envelope("diagnose", d.findings.empty() ? "nothing found" : "fail", d.exit_code());
  j["launcher"] = d.launcher;
  j["verify_with"] = d.verify_with;
  j["inputs"] = {{"files", d.files},
                 {"lines", d.lines},
                 {"bytes", d.bytes},
                 {"matched_lines", d.matched},
                 {"binary_files_skipped", d.skipped_files}};
  j["ranks_seen"] = d.ranks_seen;
  j["hosts_seen"] = d.hosts_seen;
  j["findings"] = nlohmann::json::array();
  for (const DiagFinding& f : d.findings) {
    nlohmann::json fj = finding_json(f.finding);
    fj["role"] = f.initiating ? "initiating" : "downstream";
    fj["first_seen"] = f.first_seen;
    fj["evidence"] = nlohmann::json::array();
    for (const Evidence& e : f.evidence)
      fj["evidence"].push_back({{"file", e.file}, {"line", e.line}, {"text", e.text}});
    j["findings"].push_back(std::move(fj));
  }
  return dump(j);
}

}  // namespace rankcheck::diagnose
