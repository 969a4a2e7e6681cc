#include "report/report.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "identity/identity.h"
#include "rules/rules.h"
#include "rules/self.h"

using namespace rankcheck;

namespace {
Report report_of(const JobView& v) {
  Report r;
  r.job_id = v.job_id;
  r.world_size = v.world_size;
  r.master_addr = v.master_addr;
  r.master_port = v.master_port;
  r.master_host = v.master_host;
  r.master_bound = {"10.0.0.11"};
  r.members = v.members;
  r.findings = test::checks(v);
  r.timed_out = v.timed_out;
  r.gpu_stage = "not run (--no-gpu)";
  r.rendezvous_ms = 1330;
  r.decision_ms = 0.4;
  return r;
}
}  // namespace

TEST_CASE("report text: verdict first, then findings, table, timings") {
  JobView v = test::healthy_job(16, 8);
  v.members.erase(v.members.begin() + 9);
  v.timed_out = true;
  std::string text = render_text(report_of(v), {});
  CHECK(text.rfind("rankcheck 0.1.0 · job 48213 · 15 ranks on 2 hosts · master node01:29500 "
                   "(10.0.0.11)\nFAIL — 1 error. First: rank 9 never joined (expected on gpu-02, "
                   "local rank 1)\n",
                   0) == 0);
  CHECK(text.find("  ✗ missing-rank   rank 9 never joined") != std::string::npos);
  CHECK(text.find("fix: the process for that rank on gpu-02") != std::string::npos);
  // Fifteen members collapse to one line per host with rank ranges.
  CHECK(text.find("  gpu-02   8,10-15   7         +") != std::string::npos);
  CHECK(text.find("rendezvous 1.33 s (deadline reached) · decision 0.4 ms · GPU stage not run "
                  "(--no-gpu) · unauthenticated (no job token)") != std::string::npos);
  CHECK(text.find('\x1b') == std::string::npos);  // no colour unless asked
  CHECK(render_text(report_of(v), {true}).find("\x1b[1;31mFAIL\x1b[0m") != std::string::npos);
}

TEST_CASE("report text: a small passing job lists every member") {
  std::string text = render_text(report_of(test::healthy_job(2, 2)), {});
  CHECK(text.find("PASS — 2 ranks of 2 joined\n") != std::string::npos);
  CHECK(text.find("  rank   host     local   pid    launcher   joined") != std::string::npos);
}

TEST_CASE("report: the network NCCL chose, by member and by host, once a member said") {
  Report r = report_of(test::healthy_job(4, 2));
  std::string text = render_text(r, {});
  CHECK(text.find("nccl net") == std::string::npos);
  CHECK(!nlohmann::json::parse(render_json(r)).contains("nccl_networks"));

  for (long k = 0; k < 4; ++k) {
    RankResult x;
    x.rank = static_cast<int32_t>(k);
    x.nccl_net = k < 2 ? "IB" : "Socket";
    if (k == 3) x.nccl_warn = "Call to ibv_modify_qp failed with 110 Connection timed out";
    r.stage_results.push_back(x);
  }
  text = render_text(r, {});
  CHECK(text.find("  rank   host     local   pid    launcher   nccl net   joined") !=
        std::string::npos);
  CHECK(text.find("   Socket     +") != std::string::npos);
  auto j = nlohmann::json::parse(render_json(r));
  CHECK(j["nccl_networks"] == nlohmann::json({{"gpu-01", "IB"}, {"gpu-02", "Socket"}}));
  CHECK(j["stage_results"][3]["nccl_net"] == "Socket");
  CHECK(j["stage_results"][3]["nccl_warn"] ==
        "Call to ibv_modify_qp failed with 110 Connection timed out");
  CHECK(!j["stage_results"][0].contains("nccl_warn"));

  // A large job's table: one line a host.
  Report big = report_of(test::healthy_job(16, 8));
  for (long k = 0; k < 16; ++k) {
    RankResult x;
    x.rank = static_cast<int32_t>(k);
    x.nccl_net = k < 8 ? "IB" : "Socket";
    big.stage_results.push_back(x);
  }
  text = render_text(big, {});
  CHECK(text.find("nccl net") != std::string::npos);
  CHECK(text.find("  gpu-02   8-15    8         Socket     +") != std::string::npos);
}

TEST_CASE("report text: hostile host names are escaped") {
  JobView v = test::healthy_job(2, 2);
  v.members[1].record.host = "evil\x1b]0;pwned\x07";
  v.members[1].record.rank = 0;  // a duplicate, so the name appears in a finding too
  std::string text = render_text(report_of(v), {});
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find("evil\\x1b]0;pwned\\x07") != std::string::npos);
}

TEST_CASE("report json: schema, verdict, findings with integer ranks, members, timings") {
  JobView v = test::healthy_job(4, 2);
  v.members[3].record.rank = 1;
  v.members[3].record.host = "bad\xff";
  auto j = nlohmann::json::parse(render_json(report_of(v)));
  CHECK(j["schema_version"] == 1);
  CHECK(j["verdict"] == "fail");
  CHECK(j["exit_code"] == 3);
  CHECK(j["findings"][0]["id"] == "duplicate-rank");
  CHECK(j["findings"][0]["severity"] == "error");
  CHECK(j["findings"][0]["ranks"] == nlohmann::json::array({1}));
  CHECK(j["findings"][0]["hosts"][0] == "bad\xef\xbf\xbd");  // invalid UTF-8 replaced
  CHECK(j["members"].size() == 4);
  CHECK(j["members"][0]["joined_ms"] == 10.0);
  CHECK(j["timings"]["rendezvous_ms"] == 1330.0);
  CHECK(j["gpu_stage"] == "not run (--no-gpu)");
}

TEST_CASE("report json: members written one by one read as one document") {
  JobView v = test::healthy_job(6, 3);
  v.members[4].record.rank = 1;
  v.members[4].record.host = "bad\xff";
  // A member that names itself like the spliced-in part of the report.
  v.members[5].record.host = "\n  \"members\": \"(members)\"";
  std::string out = render_json(report_of(v));
  auto j = nlohmann::json::parse(out);
  REQUIRE(j["members"].size() == 6);
  CHECK(j["members"][4]["host"] == "bad\xef\xbf\xbd");
  CHECK(j["members"][5]["host"] == "\n  \"members\": \"(members)\"");
  CHECK(j["members"][5]["peer"] == v.members[5].peer.str());
  // Byte for byte what the document would be, dumped as one tree.
  CHECK(out == j.dump(2) + "\n");

  Report empty = report_of(test::healthy_job(1, 1));
  empty.members.clear();
  auto e = nlohmann::json::parse(render_json(empty));
  CHECK(e["members"] == nlohmann::json::array());
  CHECK(render_json(empty) == e.dump(2) + "\n");
}

TEST_CASE("member line: the job-wide verdict and this member's part in it") {
  MemberReport m;
  m.self = test::member(3, 16, "gpu-01", 3, 8);
  m.self.job_id = "48213";
  m.exit_code = 4;
  m.verdict_received = true;
  m.headline = "rank 9 never joined (expected on gpu-02, local rank 1)";
  m.headline_id = "missing-rank";
  // The findings about this member stay in its JSON; rank 0 prints them, once.
  m.findings.push_back(make_finding(FindingId::kMissingRank, m.headline));
  CHECK(render_member_text(m, {}) ==
        "rankcheck: FAIL (job 48213): rank 9 never joined (expected on gpu-02, local rank 1); "
        "this is rank 3 on gpu-01 [missing-rank]\n");
  m.exit_code = 0;
  m.joined_ranks = 16;
  CHECK(render_member_text(m, {}) ==
        "rankcheck: PASS (job 48213): 16 ranks joined; this is rank 3 on gpu-01\n");
  auto j = nlohmann::json::parse(render_member_json(m));
  CHECK(j["role"] == "member");
  CHECK(j["verdict"] == "pass");
  CHECK(j["self"]["rank"] == 3);
}

TEST_CASE("env text: each value is credited to the source it was taken from") {
  // RANK does not parse, so SLURM_PROCID gives the rank: the row must say so.
  EnvMap env{{"RANK", "abc"}, {"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"MASTER_ADDR", "m"}};
  Identity id = detect_identity(env, {});
  REQUIRE(id.usable());
  HostFacts facts;  // set by name: a field added to HostFacts changes nothing here
  facts.host = "gpu-01";
  facts.pid = 77;
  Record self = make_record(id, facts, env);
  std::string text = render_env_text(id, self, {}, {});
  // The rank's row names its source, in the column every row's source starts at.
  size_t at = text.find("\n  rank  ");
  REQUIRE(at != std::string::npos);
  std::string row = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  CHECK(row.find("3 of 4") != std::string::npos);
  size_t col = row.find("SLURM_PROCID (Slurm srun)");
  REQUIRE(col != std::string::npos);
  CHECK(row.size() == col + std::string("SLURM_PROCID (Slurm srun)").size());  // no spaces after
  size_t world = text.find("\n  world size  ");
  REQUIRE(world != std::string::npos);
  CHECK(text.find("SLURM_NTASKS", world) - world - 1 == col);
  CHECK(text.find("RANK (torch env)") == std::string::npos);
}

TEST_CASE("member line: a member's own failure, in no other report, is printed whole") {
  Record self = test::member(3, 16, "gpu-01", 3, 8);
  Finding f = make_finding(FindingId::kMasterUnreachable,
                           "cannot reach the master at node01:29500 by the deadline: refused");
  std::string text = render_member_text(failure_report(self, f, 10), {});
  CHECK(text.find("rankcheck: FAIL: cannot reach the master at node01:29500 by the deadline; "
                  "this is rank 3 on gpu-01 [master-unreachable]\n") == 0);
  CHECK(text.find("fix: ") != std::string::npos);
}

TEST_CASE("member line: a member that lost the master says so in its one line") {
  Record self = test::member(3, 16, "gpu-01", 3, 8);
  Finding f = verdict_not_received(
      self, "node01:29500",
      Error{"the master closed the connection before its verdict (it exited or was killed)",
            Fault::kClosed});
  CHECK(f.name() == "master-lost");
  std::string text = render_member_text(failure_report(self, f, 10), {});
  std::string line = text.substr(0, text.find('\n'));
  CHECK(line == fmt::format("rankcheck: FAIL: {} lost the master at node01:29500 after joining "
                            "it; this is rank 3 on gpu-01 [master-lost]",
                            member_label(self)));
  CHECK(f.message.find("after joining it: the master closed the connection before its "
                       "verdict") != std::string::npos);
}

TEST_CASE("report table: a node-mode member's local ranks") {
  JobView v = test::healthy_job(2, 1);
  for (int k = 0; k < 2; ++k) {
    Record& r = v.members[size_t(k)].record;
    r.rank = 4 * k;
    r.nranks = 4;
    r.world_size = 8;
    r.local_rank = 0;
    r.local_world_size = 4;
  }
  std::string text = render_text(report_of(v), {});
  CHECK(text.find("\n  0-3    gpu-01   0-3     1000") != std::string::npos);
  CHECK(text.find("\n  4-7    gpu-02   0-3     1001") != std::string::npos);
}

TEST_CASE("report: a decision after a lost member says so") {
  Report r = report_of(test::healthy_job(2, 2));
  r.member_lost = true;
  CHECK(render_text(r, {}).find("(a member's connection closed; every other rank joined)") !=
        std::string::npos);
  CHECK(nlohmann::json::parse(render_json(r))["decided"] == "member-lost");
}

TEST_CASE("report: the hosts of the initiating failure end the text and sit in the JSON") {
  JobView v = test::healthy_job(16, 8);
  v.members.erase(v.members.begin() + 9);
  v.timed_out = true;
  Report r = report_of(v);
  std::string text = render_text(r, {});
  std::string last = "\n  suspect hosts: gpu-02\n";
  CHECK(text.substr(text.size() - last.size()) == last);
  CHECK(nlohmann::json::parse(render_json(r))["suspect_hosts"] == "gpu-02");
  CHECK(suspect_hosts(r.findings) == "gpu-02");

  Finding a = make_finding(FindingId::kMissingRank, "ranks 8-23 never joined");
  a.hosts = {"gpu-203", "gpu-017", "gpu-018"};
  Finding w =
      make_finding(FindingId::kEnvMismatch, "NCCL_SOCKET_IFNAME differs", {}, Severity::kWarning);
  w.hosts = {"gpu-001"};
  CHECK(suspect_hosts({w, a}) == "gpu-[017-018,203]");  // the first error's, not a warning's
  CHECK(suspect_hosts({w}).empty());
}

TEST_CASE("report: a passing job names no suspect host") {
  Report r = report_of(test::healthy_job(2, 2));
  CHECK(render_text(r, {}).find("suspect hosts") == std::string::npos);
  CHECK(nlohmann::json::parse(render_json(r))["suspect_hosts"] == "");
}

TEST_CASE("report: a member prints nothing its master sent raw to the terminal") {
  MemberReport m;
  m.self = test::member(1, 2, "gpu-01");
  m.exit_code = exit_code::kMismatch;
  m.verdict_received = true;
  m.headline = "\x1b]0;pwned\x07 and \x1b[2J";
  m.findings.push_back(Finding{FindingId::kDuplicateRank,
                               Severity::kError,
                               3,
                               "msg \x1b[2J",
                               "fix \x07",
                               {1},
                               {"gpu-01"}});  // its id is the catalogue's: a master sends no other
  std::string text = render_member_text(m, {});
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find('\x07') == std::string::npos);
  CHECK(text.find("\\x1b]0;pwned\\x07 and \\x1b[2J") != std::string::npos);
}

TEST_CASE("report: members with many odd variables give a bounded report") {
  // 199 members (one a host: 8 a host would leave the last short, another finding),
  // each with 128 NCCL_* variables no other member has: without a cap, 25,000
  // findings and seconds to decide.
  JobView v = test::healthy_job(199, 1);
  for (Member& m : v.members) {
    std::vector<EnvVar> env;
    for (int k = 0; k < 128; ++k)
      env.push_back({fmt::format("NCCL_X_{}_{:03d}", m.record.rank, k), "1"});
    test::set_env(m.record, env);
  }
  auto fs = test::checks(v);
  REQUIRE(fs.size() == 17);
  for (size_t i = 0; i < 16; ++i)
    CHECK(fs[i].name() == "env-mismatch");
  CHECK(fs.back().message ==
        fmt::format("and {} more variables differ between the members (not itemised)",
                    199 * 128 - 16));
}
