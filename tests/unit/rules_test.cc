#include "rules/rules.h"

#include <random>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "helpers.h"

using namespace rankcheck;
using test::find;
using test::healthy_job;
using test::sole;
using test::tracker_clean;
using Ranks = std::vector<long>;
using Hosts = std::vector<std::string>;

TEST_CASE("checks: a healthy job has no findings") {
  CHECK(test::checks(healthy_job(16, 8)).empty());
}

TEST_CASE("missing-rank: a rank absent from a host that sent the others") {
  JobView v = healthy_job(16, 8);
  v.members.erase(v.members.begin() + 9);
  v.timed_out = true;
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "missing-rank");
  CHECK(f.exit_code == 4);
  CHECK(f.ranks == Ranks{9});
  CHECK(f.hosts == Hosts{"gpu-02"});
  CHECK(f.message ==
        "rank 9 never joined (expected on gpu-02, local rank 1): gpu-02 sent ranks 8,10-15 but "
        "not 9");
  CHECK(f.fix ==
        "the process for that rank on gpu-02 was not started or died early: compare the "
        "launcher's task count on gpu-02 with --ntasks-per-node / --nproc-per-node, and check "
        "its log; a process given another MASTER_ADDR or MASTER_PORT than node01:29500 waits "
        "for a master that is not there: compare them in its log");
}

TEST_CASE("missing-rank: a whole host is one finding that names it (Slurm node list)") {
  JobView v = healthy_job(16, 8);
  v.members.resize(8);
  v.timed_out = true;
  for (Member& m : v.members) {
    m.record.node_list = "gpu-[01-02]";
    m.record.tasks_per_node = "8(x2)";
  }
  Finding f = sole(test::checks(v));
  CHECK(f.message == "gpu-02 never joined: all 8 of its ranks (8-15) are missing");
  CHECK(f.hosts == Hosts{"gpu-02"});
  CHECK(f.ranks == Ranks{8, 9, 10, 11, 12, 13, 14, 15});
  CHECK(f.fix ==
        "gpu-02 did not start the job, or cannot reach the master at node01:29500: check that it "
        "is up, resolves MASTER_ADDR and reaches that port; a process given another "
        "MASTER_ADDR or MASTER_PORT than node01:29500 waits for a master that is not there: "
        "compare them in its log");
}

TEST_CASE("missing-rank: Slurm cyclic distribution attributes ranks round-robin") {
  JobView v = healthy_job(4, 2);
  for (Member& m : v.members) {
    m.record.node_list = "n[1-2]";
    m.record.tasks_per_node = "2(x2)";
    m.record.distribution = uint8_t(Distribution::kCyclic);
  }
  v.members.erase(v.members.begin() + 3);  // rank 3: cyclic puts it on n2
  Finding f = sole(test::checks(v));
  CHECK(f.hosts == Hosts{"n2"});
}

TEST_CASE("missing-rank: without a node list, a node's worth of ranks is named as such") {
  JobView v = healthy_job(16, 8);
  v.members.resize(8);
  Finding f = sole(test::checks(v));
  CHECK(f.message ==
        "ranks 8-15 did not join: a whole node of 8 ranks, as if node 1 never started");
  CHECK(f.hosts.empty());
}

TEST_CASE("missing-rank: many missing hosts share one finding") {
  JobView v = healthy_job(48, 8);
  v.members.resize(8);
  for (Member& m : v.members) {
    m.record.node_list = "g[1-6]";
    m.record.tasks_per_node = "8(x6)";
  }
  Finding f = sole(test::checks(v));
  CHECK(f.hosts == Hosts{"g2", "g3", "g4", "g5", "g6"});
  CHECK(f.message.rfind("5 hosts did not join, with all their ranks: g2 (8-15), ", 0) == 0);
}

TEST_CASE("duplicate-rank leads, and the missing rank it caused follows") {
  JobView v = healthy_job(8, 4);
  v.members[3].record.rank = 1;  // rank 3's process was given rank 1
  v.members[3].record.local_rank = 1;
  auto fs = test::checks(v);
  REQUIRE(fs.size() >= 2);
  CHECK(fs[0].name() == "duplicate-rank");
  CHECK(fs[0].message == "rank 1 is claimed by 2 members: gpu-01 (pid 1001) and gpu-01 (pid 1003)");
  CHECK(fs[0].ranks == Ranks{1});
  CHECK(exit_code_for(fs) == 3);
  const Finding* missing = find(fs, "missing-rank");
  REQUIRE(missing != nullptr);
  CHECK(missing->ranks == Ranks{3});
  CHECK(missing->fix.find("1 member claimed a rank twice or out of range") != std::string::npos);
}

TEST_CASE("duplicate-rank names both hosts and pids") {
  JobView v = healthy_job(8, 4);
  v.members[5].record.rank = 1;
  v.members[5].record.pid = 777;
  auto fs = test::checks(v);
  const Finding* f = find(fs, "duplicate-rank");
  REQUIRE(f != nullptr);
  CHECK(f->message == "rank 1 is claimed by 2 members: gpu-01 (pid 1001) and gpu-02 (pid 777)");
  CHECK(f->hosts == Hosts{"gpu-01", "gpu-02"});
}

TEST_CASE("rank-out-of-range") {
  JobView v = healthy_job(4, 4);
  v.members[3].record.rank = 9;
  auto fs = test::checks(v);
  REQUIRE(!fs.empty());
  CHECK(fs[0].name() == "rank-out-of-range");
  CHECK(fs[0].message == "rank 9 (gpu-01, pid 1003) is outside 0..3 for its own world size 4");
  CHECK(fs[0].ranks == Ranks{9});
  CHECK(find(fs, "missing-rank")->ranks == Ranks{3});
}

TEST_CASE("world-size-mismatch names who says what") {
  JobView v = healthy_job(8, 8);
  v.members[7].record.world_size = 16;
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "world-size-mismatch");
  CHECK(f.message ==
        "members disagree on the world size: ranks 0-6 on gpu-01 say 8; rank 7 on gpu-01 says 16");
  CHECK(f.ranks == Ranks{7});
}

TEST_CASE("world-size-mismatch: a master with the wrong size is the odd one, nothing missing") {
  JobView v = healthy_job(8, 8);
  v.world_size = 16;
  v.members[0].record.world_size = 16;
  Finding f = sole(test::checks(v));
  CHECK(f.ranks == Ranks{0});
  CHECK(f.fix.find("most say 8 (the master says 16)") != std::string::npos);
}

TEST_CASE("launcher-env-conflict: a conflict without sources is skipped, not read") {
  // A decoded hello never has one (the decoder refuses it); the rules do not rely on that.
  JobView v = healthy_job(4, 4);
  v.members[2].record.conflicts.push_back(Conflict{Field::kRank, {}});
  CHECK(test::checks(v).empty());
}

TEST_CASE("launcher-env-conflict gathers members with the same disagreement") {
  JobView v = healthy_job(4, 4);
  for (int k : {1, 2}) {
    v.members[size_t(k)].record.conflicts.push_back(
        Conflict{Field::kRank,
                 {{Field::kRank, "torch", "RANK", std::to_string(k)},
                  {Field::kRank, "slurm", "SLURM_PROCID", std::to_string(k + 4)}}});
  }
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "launcher-env-conflict");
  CHECK(f.message ==
        "2 members have conflicting rank: ranks 1-2 on gpu-01; e.g. rank 1 (gpu-01, pid 1001): "
        "RANK=1 but SLURM_PROCID=5 (rankcheck used RANK)");
  CHECK(f.ranks == Ranks{1, 2});

  JobView one = healthy_job(4, 4);
  one.members[3].record.conflicts.push_back(
      Conflict{Field::kWorldSize,
               {{Field::kWorldSize, "torch", "WORLD_SIZE", "4"},
                {Field::kWorldSize, "openmpi", "OMPI_COMM_WORLD_SIZE", "8"}}});
  f = sole(test::checks(one));
  CHECK(f.message ==
        "rank 3 (gpu-01, pid 1003): WORLD_SIZE=4 but OMPI_COMM_WORLD_SIZE=8 (rankcheck used "
        "WORLD_SIZE)");
}

TEST_CASE("local-rank-collision") {
  JobView v = healthy_job(4, 4);
  v.members[3].record.local_rank = 1;
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "local-rank-collision");
  CHECK(f.message == "on gpu-01, 2 members share a local rank: local rank 1 by ranks 1,3");
  CHECK(f.ranks == Ranks{1, 3});
}

TEST_CASE("local-world-size-mismatch: disagreement and too many ranks on a host") {
  JobView v = healthy_job(8, 8);
  v.members[7].record.local_world_size = 4;
  auto fs = test::checks(v);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].message ==
        "on gpu-01, members disagree on LOCAL_WORLD_SIZE: 4 for rank 7; 8 for ranks 0-6");

  JobView w = healthy_job(8, 4);
  w.members[4].record.host = "gpu-01";  // a fifth process on gpu-01
  w.members[4].record.local_rank = 0;
  fs = test::checks(w);
  const Finding* f = find(fs, "local-world-size-mismatch");
  REQUIRE(f != nullptr);
  CHECK(f->message == "gpu-01 runs 5 ranks but LOCAL_WORLD_SIZE is 4");
}

TEST_CASE("master-addr-loopback: a multi-host job whose master resolves to 127.0.1.1") {
  JobView v = healthy_job(16, 8);
  v.master_resolved = {"127.0.1.1"};
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "master-addr-loopback");
  CHECK(f.message ==
        "MASTER_ADDR node01 resolves to 127.0.1.1 (loopback) on the master's host gpu-01, but the "
        "job spans more than one host: ranks on other hosts cannot reach a master there");
  CHECK(f.ranks == Ranks{0});
  // When rankcheck listened on every interface instead, the report says so: the
  // port was open to more than the training job's would be.
  v.master_bound = {"0.0.0.0"};
  f = sole(test::checks(v));
  CHECK(f.message.find("rankcheck's master listened on all interfaces, 0.0.0.0, so that this "
                       "report hears from them; the training job's would not") !=
        std::string::npos);
  // Members that came in over loopback share the master's machine: loopback works
  // for them, whatever host names they report.
  JobView single = healthy_job(16, 8);
  single.master_resolved = {"127.0.0.1"};
  for (Member& m : single.members) {
    if (m.peer != "in-process") m.peer = "127.0.0.1:50000";
  }
  CHECK(test::checks(single).empty());
}

TEST_CASE("master-addr-loopback leads the missing ranks it causes") {
  JobView v = healthy_job(16, 8);
  v.master_resolved = {"127.0.1.1"};
  v.members.resize(8);
  auto fs = test::checks(v);
  REQUIRE(fs.size() == 2);
  CHECK(fs[0].name() == "master-addr-loopback");
  CHECK(fs[1].name() == "missing-rank");
  CHECK(exit_code_for(fs) == 3);
}

TEST_CASE("master-addr-mismatch: different names, and one name resolving differently") {
  JobView v = healthy_job(4, 2);
  v.members[3].record.master_addr = "10.0.0.11";
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "master-addr-mismatch");
  CHECK(f.severity == Severity::kWarning);
  CHECK(f.message ==
        "members were given different master addresses: 10.0.0.11:29500 for rank 3 on gpu-02; "
        "node01:29500 for ranks 0-2 on gpu-01 and gpu-02. All reached this master, but the "
        "training job may not");

  JobView r = healthy_job(4, 2);
  r.members[2].record.master_resolved = {"10.0.1.11"};
  r.members[3].record.master_resolved = {"10.0.1.11"};
  auto fs = test::checks(r);
  f = sole(fs);
  CHECK(f.message ==
        "MASTER_ADDR node01 resolves to 10.0.0.11 for ranks 0-1 on gpu-01 but to 10.0.1.11 for "
        "ranks 2-3 on gpu-02");
  CHECK(exit_code_for(fs) == 0);
}

TEST_CASE("env-mismatch says which ranks and hosts have which value") {
  JobView v = healthy_job(16, 8);
  for (Member& m : v.members) {
    test::set_env(m.record, {{"NCCL_SOCKET_IFNAME", m.record.host == "gpu-01" ? "ib0" : "eth0"}});
    m.record.interfaces = {"eth0", "ib0", "lo"};
  }
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "env-mismatch");
  CHECK(f.severity == Severity::kWarning);
  CHECK(f.message ==
        "NCCL_SOCKET_IFNAME differs: eth0 for ranks 8-15 on gpu-02; ib0 for ranks 0-7 on gpu-01");
  CHECK(f.ranks == Ranks{0, 1, 2, 3, 4, 5, 6, 7});

  JobView u = healthy_job(2, 2);
  test::set_env(u.members[0].record, {{"NCCL_IB_DISABLE", "1"}});
  f = sole(test::checks(u));
  CHECK(f.message == "NCCL_IB_DISABLE differs: 1 for rank 0 on gpu-01; unset for rank 1 on gpu-01");
}

TEST_CASE("nccl-ifname-missing") {
  JobView v = healthy_job(4, 2);
  for (Member& m : v.members)
    test::set_env(m.record, {{"NCCL_SOCKET_IFNAME", "ib"}});
  v.members[0].record.interfaces = {"lo", "eth0", "ib0"};
  v.members[1].record.interfaces = {"lo", "eth0", "ib0"};
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "nccl-ifname-missing");
  CHECK(f.message ==
        "NCCL_SOCKET_IFNAME=ib selects no interface with an address on gpu-02 (ranks 2-3); it "
        "has lo and eth0");
  CHECK(f.hosts == Hosts{"gpu-02"});
}

TEST_CASE("foreign-job: a refused process of another job is a possible cause of a missing rank") {
  JobView v = healthy_job(4, 4);
  Record stray = v.members[2].record;
  stray.job_id = "99999";
  v.members.erase(v.members.begin() + 2);
  v.refused.push_back(Refusal{RefusalKind::kForeignJob, "10.0.0.12:4242", "job", stray, 5});
  auto fs = test::checks(v);
  // What a refused process claims proves nothing: the missing rank leads (exit 4).
  REQUIRE(fs.size() == 2);
  CHECK(fs[0].name() == "missing-rank");
  CHECK(exit_code_for(fs) == 4);
  CHECK(fs[0].fix.find("1 process claiming a missing rank was refused (another job id; see "
                       "below): if it is this job's, give it the job's id") != std::string::npos);
  Finding f = fs[1];
  CHECK(f.name() == "foreign-job");
  CHECK(f.severity == Severity::kWarning);
  CHECK(f.message ==
        "rank 2 (gpu-01, pid 1002) from 10.0.0.12:4242 was refused: it says job '99999', this "
        "master serves job '48213'; if it is the rank missing here, this is why (a wrong job "
        "id), else another job shares MASTER_PORT");

  // A stray from another job whose rank is present is a warning.
  JobView w = healthy_job(4, 4);
  w.refused.push_back(Refusal{RefusalKind::kForeignJob, "10.0.0.12:4242", "job", stray, 5});
  f = sole(test::checks(w));
  CHECK(f.severity == Severity::kWarning);
}

TEST_CASE("member-disconnected: joined, then gone before the verdict") {
  JobView v = healthy_job(4, 4);
  v.departed.push_back(Departure{v.members[1].record, 210, 930});
  v.members.erase(v.members.begin() + 1);
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "member-disconnected");
  CHECK(f.exit_code == 4);
  CHECK(f.message ==
        "rank 1 (gpu-01, pid 1001) joined at +0.21 s and its connection closed at +0.93 s, "
        "before the verdict");
}

TEST_CASE("stray connections are one warning") {
  JobView v = healthy_job(2, 2);
  v.refused.push_back(Refusal{RefusalKind::kMalformed, "127.0.0.1:5000", "bad magic", {}, 1});
  v.refused_total = 3;
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "stray-connection");
  CHECK(f.message ==
        "3 connections to the master port were not a member of this job and were closed (2 not "
        "itemised): first from 127.0.0.1:5000: bad magic");
}

TEST_CASE("local checks: the rules one record can answer") {
  Record r = test::member(9, 8, "gpu-02", 1, 8);
  test::set_env(r, {{"NCCL_SOCKET_IFNAME", "=ib0"}});
  r.conflicts.push_back(Conflict{
      Field::kRank,
      {{Field::kRank, "torch", "RANK", "9"}, {Field::kRank, "slurm", "SLURM_PROCID", "1"}}});
  auto fs = local_checks(r);
  REQUIRE(fs.size() == 3);
  CHECK(fs[0].name() == "launcher-env-conflict");  // the stale RANK leads what it causes
  CHECK(fs[1].name() == "rank-out-of-range");
  CHECK(fs[2].name() == "nccl-ifname-missing");

  Record away = test::member(9, 16, "gpu-02", 1, 8);
  away.master_resolved = {"127.0.1.1"};
  Finding f = sole(local_checks(away));
  CHECK(f.message ==
        "MASTER_ADDR node01 resolves to 127.0.1.1 (loopback) on gpu-02, which is not the master's "
        "node: unless rank 0 runs on this machine, this process cannot reach it");
  CHECK(f.severity == Severity::kWarning);
}

TEST_CASE("every rule has an entry in docs/findings.md") {
  std::ifstream in(std::string(RANKCHECK_FIXTURES) + "/../../docs/findings.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  for (const Rule& rule : rules()) {
    std::string_view name = finding_kind(rule.id).name;
    INFO(name);
    CHECK(ss.str().find(fmt::format("## `{}`", name)) != std::string::npos);
  }
}

TEST_CASE("every rule says how the join tracker keeps to it") {
  for (const Rule& rule : rules()) {
    INFO(finding_kind(rule.id).name);
    // A watch where the rule is watched, and none where it is not.
    CHECK((rule.fast == FastPath::kWatch) == (rule.admits != nullptr));
  }
  // What runs on every decision is cheap: one pass over the members at most.
  size_t always = 0;
  for (const Rule& rule : rules())
    always += rule.fast == FastPath::kAlways;
  CHECK(always == 1);  // no-job-token
}

TEST_CASE("join tracker: a healthy job is clean, so the decision skips the rules") {
  CHECK(tracker_clean(healthy_job(16, 4)));
  JobView loop = healthy_job(8, 8);
  loop.master_resolved = {"127.0.0.1"};
  for (Member& m : loop.members) {
    if (m.peer != "in-process") m.peer = "127.0.0.1:4000";
  }
  CHECK(tracker_clean(loop));
  JobView missing = healthy_job(8, 4);
  missing.members.pop_back();
  CHECK(!tracker_clean(missing));
}

TEST_CASE("join tracker: never clean when the rules would find something (random perturbations)") {
  std::minstd_rand rng(12345);
  int harmless = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    JobView v = healthy_job(16, 4);
    for (Member& m : v.members)
      test::set_env(m.record, {{"NCCL_SOCKET_IFNAME", "eth"}});
    int changes = 1 + int(rng() % 2);
    for (int c = 0; c < changes; ++c) {
      Record& r = v.members[rng() % v.members.size()].record;
      switch (rng() % 13) {
        case 0:
          r.rank = int32_t(rng() % 18) - 1;
          break;
        case 1:
          r.world_size = int32_t(rng() % 3) + 15;
          break;
        case 2:
          r.local_rank = int32_t(rng() % 5) - 1;
          break;
        case 3:
          r.local_world_size = int32_t(rng() % 6) - 1;
          break;
        case 4:
          r.host = "gpu-0" + std::to_string(rng() % 5 + 1);
          break;
        case 5:
          test::set_env(r, {{"NCCL_SOCKET_IFNAME", rng() % 2 ? "ib" : "eth"}});
          break;
        case 6:
          r.master_addr = rng() % 2 ? "node01" : "node02";
          break;
        case 7:
          r.master_resolved = {rng() % 2 ? "10.0.0.11" : "10.0.1.11"};
          break;
        case 8:
          r.interfaces = {"lo"};
          break;
        case 9:
          r.conflicts.push_back(Conflict{Field::kRank,
                                         {{Field::kRank, "torch", "RANK", "1"},
                                          {Field::kRank, "slurm", "SLURM_PROCID", "2"}}});
          break;
        case 10:
          v.members.erase(v.members.begin() + long(rng() % v.members.size()));
          break;
        case 11:
          v.master_resolved = {"127.0.1.1"};
          break;
        case 12:
          r.nranks = int32_t(rng() % 3) + 1;
          break;
      }
    }
    INFO("trial " << trial);
    if (test::clean_and_silent(v)) ++harmless;
  }
  CHECK(harmless > 0);  // some perturbations are harmless, and the tracker sees that
}

TEST_CASE("nccl-ifname-missing: a value NCCL ignores (one character or none) selects nothing") {
  // NCCL reads NCCL_SOCKET_IFNAME only when it is longer than one character.
  for (const char* value : {"", "^", "=", "x"}) {
    INFO(value);
    JobView v = healthy_job(4, 2);
    for (Member& m : v.members)
      test::set_env(m.record, {{"NCCL_SOCKET_IFNAME", value}});
    CHECK(test::checks(v).empty());
    CHECK(local_checks(v.members[1].record).empty());
    CHECK(tracker_clean(v));
  }
}

TEST_CASE("missing-rank: node list names and FQDN host names are matched by short name") {
  JobView v = healthy_job(16, 8);
  for (Member& m : v.members) {
    m.record.host = m.record.host + ".example.com";
    m.record.node_list = "gpu-[01-02]";
    m.record.tasks_per_node = "8(x2)";
  }
  v.members.erase(v.members.begin() + 9);
  Finding f = sole(test::checks(v));
  CHECK(f.message ==
        "rank 9 did not join (expected on gpu-02.example.com): gpu-02.example.com sent ranks "
        "8,10-15 but not 9");
  CHECK(f.hosts == Hosts{"gpu-02.example.com"});

  // A host that sent nothing keeps the node list's name.
  v.members.resize(8);
  f = sole(test::checks(v));
  CHECK(f.message == "gpu-02 did not join: all 8 of its ranks (8-15) are missing");
}

TEST_CASE("missing-rank: ranks a launcher dealt in an unknown way are not placed by guess") {
  // Slurm's plane distribution: a node's ranks are not RANK - LOCAL_RANK onwards.
  JobView v = healthy_job(16, 8);
  for (Member& m : v.members) {
    m.record.node_list = "gpu-[01-02]";
    m.record.distribution = uint8_t(Distribution::kUnknown);
  }
  v.members.erase(v.members.begin() + 9);
  Finding f = sole(test::checks(v));
  CHECK(f.message == "rank 9 did not join");
  CHECK(f.hosts.empty());

  JobView w = healthy_job(16, 8);
  for (Member& m : w.members)
    m.record.distribution = uint8_t(Distribution::kUnknown);
  w.members.resize(8);
  f = sole(test::checks(w));
  CHECK(f.message == "ranks 8-15 did not join");  // not "a whole node of 8 ranks"
}

TEST_CASE("missing-rank: whole nodes are named only when the members agree on their size") {
  JobView v = healthy_job(16, 8);
  v.members.resize(8);
  v.members[7].record.local_rank = 3;  // says its host has 4 ranks, the others 8
  v.members[7].record.local_world_size = 4;
  auto fs = test::checks(v);
  const Finding* f = find(fs, "missing-rank");
  REQUIRE(f != nullptr);
  CHECK(f->message == "ranks 8-15 did not join");
}

TEST_CASE("missing-rank: a peer's layout is bounded work") {
  // A count of 0 would let cyclic placement loop nodes x the largest count.
  JobView v = healthy_job(16, 8);
  v.world_size = 4096;
  for (Member& m : v.members) {
    m.record.world_size = 4096;
    m.record.node_list = "h[0-65535]";
    m.record.tasks_per_node = "4096,0(x65535)";
    m.record.distribution = uint8_t(Distribution::kCyclic);
  }
  auto fs = test::checks(v);
  const Finding* f = find(fs, "missing-rank");
  REQUIRE(f != nullptr);
  CHECK(f->ranks.size() == 4096 - 16);
  CHECK(f->hosts.empty());  // the layout was refused; the members' blocks do not cover them
}

TEST_CASE("rank-out-of-range: members with the same wrong world size are one finding") {
  JobView v = healthy_job(16, 8);
  for (Member& m : v.members) {
    if (m.record.host == "gpu-02") m.record.world_size = 8;
  }
  auto fs = test::checks(v);
  REQUIRE(std::count_if(fs.begin(), fs.end(),
                        [](const Finding& f) { return f.name() == "rank-out-of-range"; }) == 1);
  const Finding* f = find(fs, "rank-out-of-range");
  CHECK(f->message ==
        "8 members claim ranks outside 0..7 for their own world size 8: ranks 8-15 on gpu-02");
  CHECK(f->fix ==
        "RANK must be below WORLD_SIZE: check the ranks these processes got from torch on gpu-02");
  CHECK(f->ranks == Ranks{8, 9, 10, 11, 12, 13, 14, 15});
}

TEST_CASE("rank-out-of-range: the hint escapes the launcher and speaks of nodes in node mode") {
  JobView v = healthy_job(4, 4);
  v.members[3].record.rank = 9;
  v.members[3].record.launcher = "evil\x1b[2J";
  auto fs = test::checks(v);
  const Finding* f = find(fs, "rank-out-of-range");
  REQUIRE(f != nullptr);
  CHECK(f->fix ==
        "RANK must be below WORLD_SIZE: check the rank this process got from evil\\x1b[2J on "
        "gpu-01");

  JobView n = healthy_job(8, 4);
  n.members.resize(2);
  for (int k = 0; k < 2; ++k) {
    Record& r = n.members[size_t(k)].record;
    r.rank = k * 8;  // node 1 says ranks 8-11 of 8: NODE_RANK 2 for NNODES 2
    r.nranks = 4;
    r.local_rank = 0;
    r.launcher = "node";
    r.host = fmt::format("node{}", k);
  }
  fs = test::checks(n);
  f = find(fs, "rank-out-of-range");
  REQUIRE(f != nullptr);
  CHECK(f->message == "ranks 8-11 (node1, pid 1001) is outside 0..7 for its own world size 8");
  CHECK(f->fix ==
        "NODE_RANK must be below NNODES (each node stands for NPROC_PER_NODE ranks): check the "
        "node rank this process got from node on node1");
}

TEST_CASE("local-rank-collision counts each member once") {
  JobView v = healthy_job(16, 8);
  v.members.resize(2);  // node mode: two members of 8 ranks, both on gpu-01
  for (int k = 0; k < 2; ++k) {
    Record& r = v.members[size_t(k)].record;
    r.rank = k * 8;
    r.nranks = 8;
    r.local_rank = 0;
    r.local_world_size = 16;
    r.host = "gpu-01";
  }
  auto fs = test::checks(v);
  const Finding* f = find(fs, "local-rank-collision");
  REQUIRE(f != nullptr);
  CHECK(f->message.rfind("on gpu-01, 2 members share a local rank: local rank 0 by ranks 0,8", 0) ==
        0);
}

TEST_CASE("gpu rules: a build without the GPU stage, and --no-gpu on one member") {
  JobView v = healthy_job(4, 2);
  v.gpu_stage = true;
  for (Member& m : v.members) {
    GpuFacts& g = m.record.gpu;
    g.state = GpuState::kUsable;
    g.nccl_version = 22809;
    g.devices = {GpuDevice{m.record.rank, m.record.local_rank, fmt::format("GPU-{}", m.record.rank),
                           "", "H100", 0}};
  }
  JobView unbuilt = v;
  unbuilt.members[3].record.gpu = GpuFacts{};
  unbuilt.members[3].record.gpu.state = GpuState::kUnavailable;
  unbuilt.members[3].record.gpu.error = "built without CUDA/NCCL headers";
  Finding f = sole(test::checks(unbuilt));
  CHECK(f.name() == "cuda-driver-missing");
  CHECK(f.fix ==
        "the rankcheck on that host was built without the CUDA and NCCL headers, so it cannot "
        "probe GPUs: run the same GPU-enabled build on every host (rebuild with cuda.h and "
        "nccl.h installed), or pass --no-gpu to every process");

  JobView skipped = v;
  skipped.members[3].record.gpu = GpuFacts{};  // --no-gpu
  f = sole(test::checks(skipped));
  CHECK(f.name() == "gpu-missing");
  CHECK(f.message == "skipped (--no-gpu) for rank 3 on gpu-02, while the other ranks have GPUs");
  CHECK(f.fix ==
        "pass --no-gpu to every process or to none: the NCCL stage runs only when every rank "
        "probes its GPUs");
}

TEST_CASE("join tracker: a peer's local world size does not size the tracker's memory") {
  JobView v = healthy_job(16, 4);
  for (Member& m : v.members)
    m.record.local_world_size = 1 << 20;  // 2^20 bits per host, were it believed
  CHECK(!tracker_clean(v));               // left to the rules
  JobView far = healthy_job(16, 4);
  for (Member& m : far.members)
    m.record.local_world_size = -1;
  far.members[5].record.local_rank = 60000;  // a local rank far beyond any host
  CHECK(!tracker_clean(far));
}

TEST_CASE("master-addr-loopback: a one-node step's node list outweighs a larger world size") {
  // WORLD_SIZE=8 over 4 tasks of one node: loopback reaches every process there is.
  JobView v = healthy_job(8, 4);
  v.members.resize(4);
  v.master_resolved = {"127.0.0.1"};
  for (Member& m : v.members) {
    m.record.node_list = "gpu-01";
    m.record.tasks_per_node = "4";
    if (m.peer != "in-process") m.peer = "127.0.0.1:50000";
  }
  CHECK(!spans_hosts(v.members[1].record));
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "missing-rank");
  CHECK(f.ranks == Ranks{4, 5, 6, 7});
  CHECK(f.message ==
        "ranks 4-7 did not join: the launcher started 4 processes on 1 node (gpu-01), for a "
        "world size of 8");
  // A node list of two hosts spans them; without a node list, the world size tells.
  v.members[1].record.node_list = "gpu-[01-02]";
  CHECK(spans_hosts(v.members[1].record));
  v.members[1].record.node_list = "";
  CHECK(spans_hosts(v.members[1].record));
}

TEST_CASE("foreign-job: the processes of another job are one finding") {
  JobView v = healthy_job(4, 4);
  for (int k : {1, 2, 3}) {
    Record r = v.members[size_t(k)].record;
    r.job_id = "other";
    r.host = "gpu-09";
    v.refused.push_back(
        Refusal{RefusalKind::kForeignJob, fmt::format("10.0.0.19:{}", 4240 + k), "job", r, 5});
  }
  Finding f = sole(test::checks(v));
  CHECK(f.severity == Severity::kWarning);
  CHECK(f.ranks == Ranks{1, 2, 3});
  CHECK(f.hosts == Hosts{"gpu-09"});
  CHECK(f.message ==
        "3 processes of job 'other' (ranks 1-3 on gpu-09, from 10.0.0.19:4241, 10.0.0.19:4242 "
        "and 10.0.0.19:4243) reached this master (job '48213') and were refused");
  // Their ranks missing here: missing-rank leads, the refusal is a possible cause.
  v.members.resize(1);
  auto fs = test::checks(v);
  REQUIRE(fs.size() == 2);
  CHECK(fs[0].name() == "missing-rank");
  CHECK(exit_code_for(fs) == 4);
  f = fs[1];
  CHECK(f.severity == Severity::kWarning);
  CHECK(f.message ==
        "3 processes (ranks 1-3 on gpu-09, from 10.0.0.19:4241, 10.0.0.19:4242 and "
        "10.0.0.19:4243) were refused: they say job 'other', this master serves job '48213'; "
        "if they are the rank missing here, this is why (a wrong job id), else another job "
        "shares MASTER_PORT");
}

TEST_CASE("late-start: a process that started well after the first is named") {
  JobView v = healthy_job(4, 4);
  for (Member& m : v.members)
    m.record.started_unix_ms =
        uint64_t{1'700'000'000'000} + 100 * static_cast<uint64_t>(m.record.rank);
  CHECK(test::checks(v).empty());  // 0.3 s apart: a launcher's spread
  v.members[0].record.started_unix_ms += 8000;
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "late-start");
  CHECK(f.severity == Severity::kWarning);
  CHECK(f.ranks == Ranks{0});
  CHECK(f.message ==
        "rank 0 (gpu-01, pid 1000) started 7.90 s after the first process (rank 1 (gpu-01, pid "
        "1001)): the others waited for rank 0 within their own deadline, and any that gave up "
        "before it listened are reported missing");
  // Unknown starts (0) are left out.
  v.members[0].record.started_unix_ms = 0;
  CHECK(test::checks(v).empty());
}

TEST_CASE("master-out-of-fds: leads the ranks it left out; a warning when all got in") {
  JobView v = healthy_job(16, 8);
  v.members.resize(10);
  v.accept_failures = AcceptFailures{42, "Too many open files", 120.0, 25, 30, 30, "", 0};
  auto fs = test::checks(v);
  REQUIRE(fs.size() >= 2);
  CHECK(fs[0].name() == "master-out-of-fds");
  CHECK(fs[0].message ==
        "the master on gpu-01 could not accept connections from +0.12 s: Too many open files "
        "(42 failed accepts); it held 25 connections then, and its open-files limit is 30 (hard "
        "limit 30): the members it could not take waited in the kernel's backlog, and ranks are "
        "still missing");
  CHECK(fs[0].hosts == std::vector<std::string>{"gpu-01"});
  CHECK(fs[1].name() == "missing-rank");
  CHECK(exit_code_for(fs) == exit_code::kIncomplete);

  JobView all = healthy_job(16, 8);
  all.accept_failures = AcceptFailures{3, "Too many open files", 80.0, 14, 30, -1, "", 0};
  fs = test::checks(all);
  Finding f = sole(fs);
  CHECK(f.severity == Severity::kWarning);
  CHECK(f.message.find("hard limit unlimited or unknown); every rank got in after all") !=
        std::string::npos);
  CHECK(exit_code_for(fs) == exit_code::kPass);
}

TEST_CASE("master-out-of-fds: a flood that took the descriptors names no host of the job") {
  // One address held 900 of the 960 connections in handshakes: the master's host is
  // not the cause, and goes into no exclude list; missing-rank leads.
  JobView v = healthy_job(16, 8);
  v.members.resize(10);
  v.accept_failures =
      AcceptFailures{5, "Too many open files", 50.0, 960, 1024, 1024, "10.9.9.9", 900};
  auto fs = test::checks(v);
  auto it = std::find_if(fs.begin(), fs.end(),
                         [](const Finding& f) { return f.name() == "master-out-of-fds"; });
  REQUIRE(it != fs.end());
  CHECK(it->severity == Severity::kWarning);
  CHECK(it->hosts.empty());
  CHECK(it->ranks.empty());
  CHECK(it->message.find("10.9.9.9 held 900 of them in handshakes that sent nothing") !=
        std::string::npos);
  CHECK(fs[0].name() == "missing-rank");
  // A few handshakes from one address among many members: the host's limit.
  v.accept_failures.held = 40;
  fs = test::checks(v);
  CHECK(fs[0].name() == "master-out-of-fds");
  CHECK(fs[0].hosts == std::vector<std::string>{"gpu-01"});
}
