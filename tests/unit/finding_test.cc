#include "model/finding.h"

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "rules/rules.h"

using namespace rankcheck;

namespace {

std::string read_findings_doc() {
  std::ifstream in(std::string(RANKCHECK_FIXTURES) + "/../../docs/findings.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct DocRow {
  std::string severity;
  std::string exit_code;
};

// The table of docs/findings.md: | [`id`](#id) | severity | exit code | who |
std::map<std::string, DocRow> doc_table(const std::string& doc) {
  std::map<std::string, DocRow> rows;
  std::regex row(R"(^\| \[`([a-z0-9-]+)`\]\(#[a-z0-9-]+\) \| ([^|]+) \| ([^|]+) \|)");
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row)) rows[m[1]] = {m[2], m[3]};
  }
  return rows;
}

}  // namespace

TEST_CASE("catalogue: every finding is documented with its severity and exit code") {
  std::string doc = read_findings_doc();
  auto table = doc_table(doc);
  REQUIRE(table.size() == finding_catalog().size());
  for (const FindingKind& k : finding_catalog()) {
    INFO(k.name);
    REQUIRE(table.count(std::string(k.name)) == 1);
    const DocRow& row = table[std::string(k.name)];
    CHECK(row.severity.find(k.severity == Severity::kError ? "error" : "warning") !=
          std::string::npos);
    if (row.severity == "warning") {
      CHECK(row.exit_code == "—");  // a warning never sets the exit code
    } else {
      CHECK(row.exit_code.rfind(std::to_string(k.exit_code), 0) == 0);
    }
    CHECK(doc.find(fmt::format("\n## `{}`\n", k.name)) != std::string::npos);
    CHECK(!k.fix.empty());
  }
}

TEST_CASE("catalogue: ids are unique, and every rule leads with a catalogued id") {
  std::map<std::string_view, int> seen;
  for (const FindingKind& k : finding_catalog()) {
    CHECK(++seen[k.name] == 1);
    CHECK(find_finding_kind(k.name) == &k);
    CHECK(&finding_kind(k.id) == &k);
  }
  CHECK(find_finding_kind("no-such-finding") == nullptr);
  for (const Rule& rule : rules()) {
    INFO(finding_kind(rule.id).name);
    CHECK(finding_kind(rule.id).id == rule.id);
  }
}

TEST_CASE("catalogue: a finding takes its severity, exit code and fix from its row") {
  Finding f = make_finding(FindingId::kMissingRank, "rank 3 never joined");
  CHECK(f.name() == "missing-rank");
  CHECK(f.severity == Severity::kError);
  CHECK(f.exit_code == exit_code::kIncomplete);
  CHECK(f.fix == finding_kind(FindingId::kMissingRank).fix);
  Finding g = make_finding(FindingId::kForeignJob, "m", "a fix of its own", Severity::kWarning);
  CHECK(g.fix == "a fix of its own");
  CHECK(!g.is_error());
  CHECK(g.exit_code == exit_code::kRejected);
  CHECK(exit_code_for({g, f}) == exit_code::kIncomplete);
  CHECK(exit_code_for({g}) == exit_code::kPass);
}
