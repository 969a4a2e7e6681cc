#include "master/master_state.h"

#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "base/shared_list.h"
#include "base/shared_string.h"
#include "base/shared_value.h"
#include "helpers.h"

using namespace rankcheck;

namespace {

// A member whose WORLD_SIZE says 8 while two launchers of its own say 4.
Record says_four_twice(int rank) {
  Record r = test::member(rank, 8, "gpu-01");
  r.conflicts.push_back(Conflict{Field::kWorldSize,
                                 {{Field::kWorldSize, "torch", "WORLD_SIZE", "8"},
                                  {Field::kWorldSize, "slurm", "SLURM_NTASKS", "4"},
                                  {Field::kWorldSize, "openmpi", "OMPI_COMM_WORLD_SIZE", "4"}}});
  return r;
}

MasterConfig config(long world, std::vector<std::string>* lines = nullptr) {
  MasterConfig cfg;
  cfg.world_size = world;
  cfg.job_id = "48213";
  cfg.master_host = "gpu-01";
  if (lines != nullptr) cfg.log = [lines](const std::string& l) { lines->push_back(l); };
  return cfg;
}

}  // namespace

TEST_CASE("master: a member's two sources of one smaller world are one vote") {
  MasterState m(config(8));
  m.admit(test::member(0, 8, "gpu-01"), "in-process", /*own=*/true);
  m.admit(says_four_twice(1), "10.0.0.11:40001");
  m.admit(says_four_twice(2), "10.0.0.11:40002");
  m.admit(test::member(3, 8, "gpu-01"), "10.0.0.11:40003");
  // Two members of four say 4: not every member, so the master keeps waiting.
  CHECK(!m.ready());
}

TEST_CASE("master: every member saying a smaller world that is all here decides early") {
  MasterState m(config(8));
  m.admit(says_four_twice(0), "in-process", /*own=*/true);
  for (int k = 1; k < 4; ++k)
    m.admit(says_four_twice(k), fmt::format("10.0.0.11:{}", 40000 + k));
  CHECK(m.ready());
}

TEST_CASE("master: members that join and leave in a loop are bounded in memory and log") {
  std::vector<std::string> lines;
  MasterState m(config(4, &lines));
  m.admit(test::member(0, 4, "gpu-01"), "in-process", /*own=*/true);
  for (int k = 0; k < 3000; ++k) {
    Record r = test::member(1 + k % 3, 4, fmt::format("client-{}", k));
    test::set_env(r, {{"NCCL_SOCKET_IFNAME", fmt::format("eth{}", k)}});
    r.interfaces = {fmt::format("eth{}", k)};
    size_t i = m.admit(std::move(r), "10.0.0.99:40000");
    m.depart(i);
  }
  size_t logged = 0;
  for (const std::string& l : lines)
    logged += l.find("disconnected before the verdict") != std::string::npos;
  CHECK(logged == 9);  // eight, then one saying the rest are only counted
  m.decide({.timed_out = true, .master_port = 29500, .bound = {"127.0.0.1"}});
  size_t itemised = 0;
  for (const Finding& f : m.report().findings)
    itemised += f.name() == "member-disconnected";
  CHECK(itemised == 64);
  CHECK(std::find(lines.begin(), lines.end(),
                  "3000 disconnections before the verdict; the report names 64 of them") !=
        lines.end());
}

TEST_CASE("master: the same member leaving twice is one departure") {
  MasterState m(config(3));
  m.admit(test::member(0, 3, "gpu-01"), "in-process", /*own=*/true);
  for (int k = 0; k < 2; ++k)
    m.depart(m.admit(test::member(1, 3, "gpu-02"), "10.0.0.12:40000"));
  m.decide({.timed_out = true, .master_port = 29500, .bound = {"127.0.0.1"}});
  size_t itemised = 0;
  for (const Finding& f : m.report().findings)
    itemised += f.name() == "member-disconnected";
  CHECK(itemised == 1);
}

TEST_CASE("list pool: lists no record holds are forgotten; held ones are shared") {
  ListPool<EnvVar> pool;
  for (int k = 0; k < 10000; ++k) {
    SharedList<EnvVar> gone(std::vector<EnvVar>{{"NCCL_ALGO", std::to_string(k)}});
    pool.intern(gone);
  }
  CHECK(pool.size() <= 128);

  SharedList<EnvVar> a(std::vector<EnvVar>{{"NCCL_ALGO", "Ring"}});
  SharedList<EnvVar> b(std::vector<EnvVar>{{"NCCL_ALGO", "Ring"}});
  pool.intern(a);
  pool.intern(b);
  CHECK(&a.get() == &b.get());

  // Once its holders are gone, a new copy takes the entry's place.
  std::vector<EnvVar> tree{{"NCCL_ALGO", "Tree"}};
  {
    SharedList<EnvVar> first(tree);
    pool.intern(first);
  }
  SharedList<EnvVar> second(tree);
  SharedList<EnvVar> third(tree);
  pool.intern(second);
  pool.intern(third);
  CHECK(&second.get() == &third.get());
}

TEST_CASE("shared string: reads, compares and copies as the string it holds") {
  SharedString empty;
  CHECK(empty.empty());
  CHECK(empty.str().empty());
  CHECK(SharedString(std::string()).empty());  // "" holds nothing either

  SharedString host = std::string("gpu-01.example.com");
  CHECK(host == "gpu-01.example.com");
  CHECK(host == std::string_view("gpu-01.example.com"));
  CHECK(host.size() == 18);
  CHECK(host.find('.') == 6);
  CHECK(host.substr(0, 6) == "gpu-01");
  CHECK(host + ":29500" == "gpu-01.example.com:29500");
  CHECK(fmt::format("[{:>20}]", host) == "[  gpu-01.example.com]");
  CHECK(SharedString("a") < SharedString("b"));
  CHECK(SharedString("gpu-02") > std::string_view("gpu-01"));

  SharedString copy = host;
  CHECK(&copy.str() == &host.str());  // one string, two holders
  SharedString moved = std::move(copy);
  CHECK(copy.empty());  // NOLINT(bugprone-use-after-move): a moved-from handle is empty
  CHECK(moved == host);
  moved.clear();
  CHECK(moved.empty());
  CHECK(host == "gpu-01.example.com");  // the other holder keeps it
}

TEST_CASE("string pool: equal strings are one copy; those only the pool holds are dropped") {
  StringPool pool;
  SharedString a = std::string("/usr/lib/x86_64-linux-gnu/libnccl.so.2");
  SharedString b = std::string("/usr/lib/x86_64-linux-gnu/libnccl.so.2");
  CHECK(&a.str() != &b.str());
  pool.intern(a);
  pool.intern(b);
  CHECK(&a.str() == &b.str());
  CHECK(a == "/usr/lib/x86_64-linux-gnu/libnccl.so.2");

  // A member joining and leaving in a loop, with a new host name each time.
  for (int k = 0; k < 10000; ++k) {
    SharedString gone = fmt::format("sim-{:05}", k);
    pool.intern(gone);
  }
  CHECK(pool.size() <= 128);
  CHECK(a == "/usr/lib/x86_64-linux-gnu/libnccl.so.2");  // still held: still there

  SharedString none;
  pool.intern(none);  // nothing to share
  CHECK(none.empty());
}

TEST_CASE("master: members' common strings are kept once") {
  MasterState m(config(4));
  for (int k = 0; k < 4; ++k) {
    Record r = test::member(k, 4, k < 2 ? "gpu-01" : "gpu-02");
    r.job_id = fmt::format("{}", 48213);  // a fresh copy per member, as a decoded hello has
    r.gpu.nccl_path = std::string("/opt/nccl/lib/libnccl.so.2");
    m.admit(std::move(r), fmt::format("198.18.0.{}:40000", k + 1));
  }
  const auto& ms = m.members();
  REQUIRE(ms.size() == 4);
  CHECK(&ms[0].record.job_id.str() == &ms[3].record.job_id.str());
  CHECK(&ms[0].record.gpu.nccl_path.str() == &ms[3].record.gpu.nccl_path.str());
  CHECK(&ms[0].record.host.str() == &ms[1].record.host.str());
  CHECK(ms[1].record.host != ms[2].record.host);
}

TEST_CASE("shared value: reads as its value; edit() copies one that others hold") {
  SharedValue<ShmFacts> none;
  CHECK(!none->known());  // holds nothing: reads as a default ShmFacts
  SharedValue<ShmFacts> a = ShmFacts{64 << 20, 32 << 20, 9637888, 0};
  SharedValue<ShmFacts> b = a;
  CHECK(&*a == &*b);  // one value, two holders
  b.edit().avail = 1 << 20;
  CHECK(&*a != &*b);  // b's write made b a copy of its own
  CHECK(a->avail == 32 << 20);
  CHECK(b->avail == 1 << 20);
  const ShmFacts* own = &*b;
  b.edit().flags = ShmFacts::kShmDisabled;
  CHECK(&*b == own);  // its only holder writes in place
  none.edit().size = 1;
  CHECK(none->size == 1);
}

TEST_CASE("master: a host's facts are kept once a host, not once a member") {
  MasterState m(config(4));
  for (int k = 0; k < 4; ++k) {
    std::string host = k < 2 ? "gpu-01" : "gpu-02";
    Record r = test::member(k, 4, host);
    // Fresh copies per member, as decoded hellos have.
    NcclIfFacts& nif = r.nccl_if.edit();
    nif.state = NcclIfFacts::kFound;
    nif.name = std::string("eth0");
    nif.address = fmt::format("198.18.0.{}", k < 2 ? 1 : 2);
    r.nccl_net.edit().transport = NcclNetFacts::kSocket;
    r.shm = ShmFacts{64 << 20, 60 << 20, 9637888, 0};
    m.admit(std::move(r), fmt::format("198.18.0.{}:40000", k + 1));
  }
  const auto& ms = m.members();
  REQUIRE(ms.size() == 4);
  CHECK(&*ms[0].record.nccl_if == &*ms[1].record.nccl_if);
  CHECK(&*ms[2].record.nccl_if == &*ms[3].record.nccl_if);
  CHECK(ms[1].record.nccl_if->address != ms[2].record.nccl_if->address);
  CHECK(&*ms[0].record.nccl_net == &*ms[3].record.nccl_net);  // alike on both hosts
  CHECK(&*ms[0].record.shm == &*ms[3].record.shm);
  CHECK(ms[3].record.shm->avail == 60 << 20);
}

TEST_CASE("master: more processes than the world size are all waited for") {
  // WORLD_SIZE=2 exported over 4 Slurm tasks: "2 of 2 joined" is not the end.
  MasterConfig cfg = config(2);
  cfg.launcher_members = 4;
  MasterState m(cfg);
  m.admit(test::member(0, 2, "gpu-01"), "in-process", /*own=*/true);
  m.admit(test::member(1, 2, "gpu-01"), "10.0.0.11:40001");
  CHECK(!m.ready());
  m.admit(test::member(2, 2, "gpu-01"), "10.0.0.11:40002");
  CHECK(!m.ready());
  m.admit(test::member(3, 2, "gpu-01"), "10.0.0.11:40003");
  CHECK(m.ready());
  m.decide({.timed_out = false, .master_port = 29500, .bound = {"127.0.0.1"}});
  CHECK(m.report().exit_code() == 3);
  CHECK(test::find(m.report().findings, "rank-out-of-range") != nullptr);
}

TEST_CASE("master: only a member that left is missing") {
  MasterState m(config(3));
  m.admit(test::member(0, 3, "gpu-01"), "in-process", /*own=*/true);
  size_t one = m.admit(test::member(1, 3, "gpu-01"), "10.0.0.11:40001");
  CHECK(!m.only_departed_missing());
  m.depart(one);
  CHECK(!m.only_departed_missing());  // rank 2 has not joined yet
  m.admit(test::member(2, 3, "gpu-01"), "10.0.0.11:40002");
  CHECK(m.only_departed_missing());
  CHECK(!m.ready());
  // It comes back (a restarted process): complete, nothing lost.
  m.admit(test::member(1, 3, "gpu-01"), "10.0.0.11:40004");
  CHECK(!m.only_departed_missing());
  CHECK(m.ready());
}

TEST_CASE("master: decided after a lost member, the report says so") {
  MasterState m(config(2));
  m.admit(test::member(0, 2, "gpu-01"), "in-process", /*own=*/true);
  m.depart(m.admit(test::member(1, 2, "gpu-01"), "10.0.0.11:40001"));
  REQUIRE(m.only_departed_missing());
  m.decide({.timed_out = false, .master_port = 29500, .bound = {"127.0.0.1"}});
  CHECK(m.report().member_lost);
  CHECK(m.report().findings.front().name() == "member-disconnected");
}

TEST_CASE("master: a member is not sent findings about another job's process") {
  MasterState m(config(3));
  m.admit(test::member(0, 3, "gpu-01"), "in-process", /*own=*/true);
  Record stranger = test::member(1, 3, "gpu-07");
  stranger.job_id = "other";
  m.refuse(RefusalKind::kForeignJob, "10.0.0.17:40001", "job", stranger);
  m.admit(test::member(1, 3, "gpu-01"), "10.0.0.11:40001");
  m.admit(test::member(2, 3, "gpu-01"), "10.0.0.11:40002");
  m.decide({.timed_out = false, .master_port = 29500, .bound = {"127.0.0.1"}});
  REQUIRE(test::find(m.report().findings, "foreign-job") != nullptr);
  CHECK(m.notes_for(1).empty());
  CHECK(m.verdict().exit_code == 0);
}

TEST_CASE("master: at the stage's end, a silent member still connected is not called gone") {
  MasterConfig cfg = config(3);
  cfg.gpu_stage = true;
  cfg.make_nccl_id = [] { return Result<NcclId>(NcclId{}); };
  cfg.stage_by = Deadline::after(Millis(20000));
  MasterState m(cfg);
  for (int k = 0; k < 3; ++k) {
    Record r = test::member(k, 3, "gpu-01", k, 3);
    r.gpu.state = GpuState::kUsable;
    r.gpu.device_count = 3;
    r.gpu.nccl_version = 22809;
    r.gpu.devices = {GpuDevice{k, k, fmt::format("GPU-0{}00-0000-0000-0000-000000000000", k),
                               fmt::format("00000000:1{}:00.0", k), "NVIDIA H200", 141ull << 30}};
    m.admit(std::move(r), k == 0 ? "in-process" : "10.0.0.11:4000" + std::to_string(k), k == 0);
  }
  REQUIRE(m.decide({.timed_out = false, .master_port = 29500, .bound = {"127.0.0.1"}}).run_gpu);
  RankResult ok;
  ok.rank = 0;
  ok.init_ok = ok.allreduce_ok = ok.allreduce_done = true;
  ok.expected = ok.got = 6;
  CHECK(!m.accept_results(0, {ok}));
  CHECK(!m.accept_results(1, {}));  // rank 1's connection closed: no result
  // Rank 2 is still connected when the stage's deadline ends it.
  m.finalize();
  REQUIRE(!m.report().findings.empty());
  const Finding& f = m.report().findings.front();
  CHECK(f.name() == "nccl-init-timeout");
  CHECK(f.ranks == std::vector<long>{1, 2});
  CHECK(f.message.find("for rank 1 on gpu-01 (rank 1 sent no result: the process died or lost "
                       "its connection); rank 2 on gpu-01 sent no result within ") !=
        std::string::npos);
  CHECK(f.message.find(", though still connected: stuck in NCCL") != std::string::npos);
}
