#include "report/metrics.h"

#include <string>

#include <catch2/catch.hpp>

#include "helpers.h"

using namespace rankcheck;

namespace {

bool has(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

Report failing_report() {
  Report r;
  r.job_id = "48213";
  r.world_size = 16;
  Finding missing = make_finding(FindingId::kMissingRank, "rank 9 never joined");
  missing.hosts = {"gpu-02"};
  Finding env =
      make_finding(FindingId::kEnvMismatch, "NCCL_SOCKET_IFNAME differs", {}, Severity::kWarning);
  r.findings = {missing, env};
  r.rendezvous_ms = 1330;
  r.total_ms = 1500;
  return r;
}

}  // namespace

TEST_CASE("metrics: a failing run's verdict, findings by id and severity, timings") {
  std::string m = render_metrics(failing_report(), 1718000000.5);
  CHECK(has(m, "# TYPE rankcheck_last_run_timestamp_seconds gauge"));
  CHECK(has(m, "rankcheck_last_run_timestamp_seconds 1718000000.5"));
  CHECK(has(m, "rankcheck_verdict{verdict=\"pass\"} 0"));
  CHECK(has(m, "rankcheck_verdict{verdict=\"fail\"} 1"));
  CHECK(has(m, "rankcheck_exit_code 4"));
  CHECK(has(m, "rankcheck_findings{id=\"missing-rank\",severity=\"error\"} 1"));
  CHECK(has(m, "rankcheck_findings{id=\"env-mismatch\",severity=\"warning\"} 1"));
  CHECK(has(m, "rankcheck_findings{id=\"duplicate-rank\",severity=\"error\"} 0"));
  CHECK(has(m, "rankcheck_findings_by_severity{severity=\"error\"} 1"));
  CHECK(has(m, "rankcheck_rendezvous_seconds 1.33"));
  CHECK(has(m,
            "rankcheck_run_info{job_id=\"48213\",role=\"master\",first_finding=\"missing-rank\","
            "first_finding_class=\"process\",suspect_hosts=\"gpu-02\",version=\"0.1.0\"} 1"));
  // The GPU stage did not run: its metrics are absent, not zero.
  CHECK(m.find("rankcheck_nccl_init_seconds") == std::string::npos);
  CHECK(m.find("rankcheck_allreduce_bus_bandwidth_bytes_per_second") == std::string::npos);
}

TEST_CASE("metrics: the GPU stage's slowest init and lowest bus bandwidth") {
  Report r = failing_report();
  r.findings.clear();
  RankResult a;
  a.rank = 0;
  a.init_ok = true;
  a.init_ms = 800;
  a.bandwidth_bytes = 1 << 28;
  a.busbw_gbps = 150;
  RankResult b = a;
  b.rank = 1;
  b.init_ms = 1250;
  b.busbw_gbps = 120.5;
  r.stage_results = {a, b};
  std::string m = render_metrics(r, 1);
  CHECK(has(m, "rankcheck_verdict{verdict=\"pass\"} 1"));
  CHECK(has(m, "rankcheck_nccl_init_seconds 1.25"));
  CHECK(has(m, "rankcheck_allreduce_bus_bandwidth_bytes_per_second 120500000000"));
}

TEST_CASE("metrics: label values are escaped") {
  Report r = failing_report();
  r.job_id = "a\"b\\c\nd";
  std::string m = render_metrics(r, 1);
  CHECK(m.find("job_id=\"a\\\"b\\\\cd\"") != std::string::npos);
}

TEST_CASE("metrics: a member says the job's verdict it was sent") {
  MemberReport mr;
  mr.self.job_id = "7";
  mr.exit_code = 3;
  mr.verdict_received = true;
  mr.headline_id = "duplicate-rank";
  mr.errors = 2;
  mr.total_ms = 250;
  std::string m = render_member_metrics(mr, 5);
  CHECK(has(m, "rankcheck_verdict{verdict=\"fail\"} 1"));
  CHECK(has(m, "rankcheck_exit_code 3"));
  CHECK(has(m, "rankcheck_findings_by_severity{severity=\"error\"} 2"));
  CHECK(has(m, "rankcheck_run_seconds 0.25"));
  CHECK(m.find("role=\"member\",first_finding=\"duplicate-rank\"") != std::string::npos);
}
