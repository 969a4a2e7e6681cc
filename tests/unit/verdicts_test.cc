// What a failing verdict blames: the suspect hosts (by the finding's class), what a
// refused process may and may not decide, the clock, and the counts members see.

#include <catch2/catch.hpp>

#include "helpers.h"
#include "identity/identity.h"
#include "master/master_state.h"
#include "report/metrics.h"
#include "report/report.h"

namespace rankcheck {
namespace {

using test::healthy_job;
using test::sole;
using Hosts = std::vector<std::string>;

TEST_CASE("suspects: a job-wide configuration error names no host") {
  // WORLD_SIZE=4 exported under 6 MPI tasks: every host has the conflict.
  JobView v = healthy_job(4, 2);
  for (Member& m : v.members) {
    m.record.conflicts.push_back(
        Conflict{Field::kWorldSize,
                 {{Field::kWorldSize, "torch", "WORLD_SIZE", "4", false},
                  {Field::kWorldSize, "openmpi", "OMPI_COMM_WORLD_SIZE", "6", false}}});
  }
  auto fs = test::checks(v);
  REQUIRE(fs.front().name() == "launcher-env-conflict");
  CHECK(fs.front().hosts == Hosts{"gpu-01", "gpu-02"});  // still named in the finding
  CHECK(suspect_hosts(fs).empty());
  // A port in use, a duplicate rank, another job: the same.
  for (FindingId id : {FindingId::kMasterPortInUse, FindingId::kDuplicateRank,
                       FindingId::kWorldSizeMismatch, FindingId::kForeignJob}) {
    Finding f = make_finding(id, "x");
    f.hosts = {"h0"};
    CHECK(suspect_hosts({f}).empty());
  }
  // A host's own fault still names it.
  Finding gpu = make_finding(FindingId::kGpuMissing, "x");
  gpu.hosts = {"gpu-017", "gpu-203"};
  CHECK(suspect_hosts({gpu}) == "gpu-[017,203]");
}

TEST_CASE("suspects: every finding has a class; drains default to hardware and network") {
  CHECK(finding_class("nccl-path-blocked") == FindingClass::kNetwork);
  CHECK(finding_class("gpu-missing") == FindingClass::kHostConfig);  // the job's GPU request
  CHECK(finding_class("nccl-interface-loopback") == FindingClass::kHostConfig);
  CHECK(finding_class("gpu-count-mismatch") == FindingClass::kHardware);
  CHECK(finding_class("missing-rank") == FindingClass::kProcess);
  CHECK(finding_class("nccl-ifname-missing") == FindingClass::kHostConfig);
  CHECK(finding_class("launcher-env-conflict") == FindingClass::kJob);
  CHECK(finding_class("no-such-finding") == FindingClass::kJob);
  CHECK(class_name(FindingClass::kHostConfig) == "host-config");
  // The metrics carry the class, for the sbatch recipe's RANKCHECK_DRAIN_FINDINGS.
  Report r;
  Finding f = make_finding(FindingId::kNcclPathBlocked, "x");
  f.hosts = {"gpu-02"};
  r.findings = {f};
  std::string prom = render_metrics(r, 1.7e9);
  CHECK(prom.find("first_finding=\"nccl-path-blocked\",first_finding_class=\"network\","
                  "suspect_hosts=\"gpu-02\"") != std::string::npos);
}

TEST_CASE("suspects: a fact that holds on every host is the job's, and names none") {
  // NCCL_SOCKET_IFNAME=ib0 on every host, none of which has ib0: one finding per host.
  Finding a = make_finding(FindingId::kNcclIfnameMissing, "ib0 on cn1");
  a.hosts = {"cn1"};
  Finding b = make_finding(FindingId::kNcclIfnameMissing, "ib0 on cn2");
  b.hosts = {"cn2"};
  std::vector<Finding> every{a, b};
  CHECK(name_no_host_when_every_host(every, 2));
  CHECK(suspect_hosts(every).empty());
  CHECK(every[0].message == "ib0 on cn1");  // still says where
  // On one host of two: that host's.
  std::vector<Finding> one{a};
  CHECK_FALSE(name_no_host_when_every_host(one, 2));
  CHECK(suspect_hosts(one) == "cn1");
  // One host in all: that host is the job, and still the suspect.
  std::vector<Finding> alone{a};
  CHECK_FALSE(name_no_host_when_every_host(alone, 1));
  CHECK(suspect_hosts(alone) == "cn1");
  // A process's fault (missing ranks on every host) stays where it was.
  Finding missing = make_finding(FindingId::kMissingRank, "x");
  missing.hosts = {"cn1", "cn2"};
  std::vector<Finding> procs{missing};
  CHECK_FALSE(name_no_host_when_every_host(procs, 2));
  CHECK(suspect_hosts(procs) == "cn[1-2]");
}

TEST_CASE("auth-failed: a stranger's claimed host is never a suspect; the rank stays missing") {
  JobView v = healthy_job(3, 1);
  Record claim = v.members[2].record;
  claim.host = "login01";
  v.members.erase(v.members.begin() + 2);
  v.refused.push_back(Refusal{RefusalKind::kAuth, "10.0.0.99:4242", "bad token", claim, 5});
  auto fs = test::checks(v);
  REQUIRE(fs.size() == 2);
  CHECK(fs[0].name() == "missing-rank");
  CHECK(exit_code_for(fs) == exit_code::kIncomplete);
  CHECK(fs[1].name() == "auth-failed");
  CHECK(fs[1].severity == Severity::kWarning);
  CHECK(fs[1].hosts.empty());
  CHECK(suspect_hosts(fs).find("login01") == std::string::npos);
}

TEST_CASE("stray-connection: a relay without the token is not a stranger") {
  JobView v = healthy_job(2, 1);
  v.refused.push_back(Refusal{RefusalKind::kRelayAuth,
                              "10.0.0.12:4242",
                              "the relay of gpu-02 does not carry this job's token",
                              {},
                              5});
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "auth-failed");
  CHECK(f.message.find("a host relay from 10.0.0.12:4242 was refused") == 0);
}

TEST_CASE("missing-rank: a world-size disagreement blames no duplicate; a tie is no majority") {
  JobView v = healthy_job(4, 4);
  v.members.erase(v.members.begin() + 3);
  v.members[1].record.world_size = 3;  // in range of both
  auto fs = test::checks(v);
  const Finding* missing = test::find(fs, "missing-rank");
  REQUIRE(missing != nullptr);
  CHECK(missing->fix.find("claimed a rank twice or out of range") == std::string::npos);
  // The fix says a wrong MASTER_PORT/ADDR is a cause, where the host is known.
  CHECK(missing->fix.find("a process given another MASTER_ADDR or MASTER_PORT than "
                          "node01:29500 waits for a master that is not there") !=
        std::string::npos);

  JobView tie = healthy_job(2, 2);
  tie.members[1].record.world_size = 3;
  const Finding* ws = test::find(test::checks(tie), "world-size-mismatch");
  REQUIRE(ws != nullptr);
  CHECK(ws->fix.find("most say") == std::string::npos);
  CHECK(ws->fix.find("as many say 2 as say another size (the master says 2)") != std::string::npos);
}

TEST_CASE("clock-skew: a start claim the master's clock cannot allow is the clock") {
  JobView v = healthy_job(4, 2);
  v.master_started_unix_ms = 1'700'000'000'000;
  v.timeout_ms = 30'000;
  for (Member& m : v.members)
    m.record.started_unix_ms = v.master_started_unix_ms;
  // gpu-02's clock is 300 s ahead: it "started" 300 s after the first, yet joined at +0.1 s.
  for (Member& m : v.members) {
    m.joined_ms = 100;
    if (m.record.host == "gpu-02") m.record.started_unix_ms += 300'000;
  }
  auto fs = test::checks(v);
  CHECK(test::find(fs, "late-start") == nullptr);
  Finding f = sole(fs);
  CHECK(f.name() == "clock-skew");
  CHECK(f.hosts == Hosts{"gpu-02"});
  CHECK(f.message.find("gpu-02's clock is about 300 s ahead of the master's (gpu-01)") == 0);
  // Behind by more than --timeout allows a wait: the same, the other way.
  for (Member& m : v.members) {
    if (m.record.host == "gpu-02") m.record.started_unix_ms -= 600'000;
  }
  f = sole(test::checks(v));
  CHECK(f.message.find("gpu-02's clock is about 300 s behind") == 0);
  // A real late start (a claim near the join) is still late-start.
  for (Member& m : v.members) {
    m.record.started_unix_ms = v.master_started_unix_ms;
    if (m.record.rank == 3) {
      m.record.started_unix_ms += 8000;
      m.joined_ms = 8100;
    }
  }
  CHECK(sole(test::checks(v)).name() == "late-start");
}

TEST_CASE("master: join counts are distinct ranks of the world") {
  MasterConfig cfg;
  cfg.world_size = 3;
  MasterState m(cfg);
  m.admit(test::member(0, 3, "vm"), "in-process", /*own=*/true);
  m.admit(test::member(1, 3, "vm"), "10.0.0.1:1");
  m.admit(test::member(1, 3, "vm"), "10.0.0.1:2");  // RANK=0,1,1
  CHECK(m.joined_ranks() == 2);
  m.admit(test::member(5, 3, "vm"), "10.0.0.1:3");  // outside the world
  CHECK(m.joined_ranks() == 2);
  const Verdict& v = m.decide({.timed_out = false, .master_port = 29500, .bound = {"127.0.0.1"}});
  CHECK(v.joined_ranks == 2);
}

TEST_CASE("master: a job across hosts without a token says so among the findings") {
  MasterConfig cfg;
  cfg.world_size = 2;
  cfg.master_addr = "node01";
  MasterState m(cfg);
  m.admit(test::member(0, 2, "gpu-01"), "in-process", /*own=*/true);
  m.admit(test::member(1, 2, "gpu-02"), "10.0.0.12:1");
  const Verdict& v = m.decide({.timed_out = false, .master_port = 29500, .bound = {"10.0.0.11"}});
  CHECK(v.exit_code == 0);
  Finding f = sole(m.report().findings);
  CHECK(f.name() == "no-job-token");
  CHECK(f.severity == Severity::kWarning);
  CHECK(suspect_hosts(m.report().findings).empty());
}

TEST_CASE("brief headline: a long one is cut at a word, never inside a parenthesis") {
  Finding f = make_finding(
      FindingId::kLateJoin,
      "rank 6 (h3, pid 4242) started 300 s after the job's start (RANKCHECK_START_TIME) by its "
      "host's clock, past the job's deadline (--timeout 120 s), and no master answered: the "
      "others have given up on it");
  std::string h = brief_headline({f});
  CHECK(h.size() <= 120);
  CHECK(h ==
        "rank 6 (h3, pid 4242) started 300 s after the job's start (RANKCHECK_START_TIME) "
        "by its host's clock, past the job's...");
  // Where the cut would fall inside a parenthesis, it goes before it.
  f.message =
      "ranks 6-7 on host-with-a-rather-long-name-03 started late (after the first "
      "process, which was rank 0 on host-with-a-rather-long-name-00 by far) and more";
  h = brief_headline({f});
  CHECK(h == "ranks 6-7 on host-with-a-rather-long-name-03 started late...");
}

TEST_CASE("identity: mpirun's own job id is the job id when --job-id is not given") {
  EnvMap env{{"OMPI_COMM_WORLD_RANK", "1"},
             {"OMPI_COMM_WORLD_SIZE", "4"},
             {"OMPI_MCA_ess_base_jobid", "107282433"},
             {"PMIX_NAMESPACE", "107282433"},
             {"MASTER_ADDR", "h0"},
             {"MASTER_PORT", "29500"}};
  CHECK(detect_identity(env, {}).job_id == "107282433");
  env.erase("OMPI_MCA_ess_base_jobid");
  env["PMIX_NAMESPACE"] = "prterun-h0-4242@1";  // Open MPI 5
  CHECK(detect_identity(env, {}).job_id == "prterun-h0-4242@1");
  Flags flags;
  flags.job_id = "mine";
  CHECK(detect_identity(env, flags).job_id == "mine");
}

}  // namespace
}  // namespace rankcheck
