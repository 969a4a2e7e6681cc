// The IB ports' error counters over the check: the reading (sysfs ports/N/counters/
// under a root), what moved between two readings, and the stage's finding.

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>
#include <unistd.h>

#include "helpers.h"
#include "host/sysfs_ib.h"

using namespace rankcheck;

namespace {

namespace fs = std::filesystem;

// A root holding `ports` ("mlx5_0:1") with their counters' files.
struct CounterTree {
  fs::path root = fs::temp_directory_path() / fmt::format("rankcheck-ibc-{}", ::getpid());
  CounterTree() { fs::remove_all(root); }
  ~CounterTree() { fs::remove_all(root); }
  void set(const std::string& dev, int port, const std::string& counter, const std::string& v) {
    fs::path dir =
        root / "sys/class/infiniband" / dev / "ports" / std::to_string(port) / "counters";
    fs::create_directories(dir);
    std::ofstream(dir / counter) << v;
  }
};

}  // namespace

TEST_CASE("IB counters: what moved between two readings", "[ib_counters]") {
  IbCounters before{{"mlx5_0:1", {0, 5, 0, 7}}, {"mlx5_1:1", {0, 0, 0, 0}}};
  CHECK(ib_counters_moved(before, before).empty());
  IbCounters after = before;
  after["mlx5_0:1"] = {1, 17, 0, 7};
  after["mlx5_1:1"] = {0, 0, 0, 3};
  CHECK(ib_counters_moved(before, after) ==
        "mlx5_0:1 link_downed +1, symbol_error +12; mlx5_1:1 port_rcv_errors +3");
  // Reset (down), unreadable (-1) and a port new in the second reading: not compared.
  IbCounters odd{{"mlx5_0:1", {0, 2, -1, 9}}, {"mlx5_2:1", {4, 4, 4, 4}}};
  IbCounters odd_before{{"mlx5_0:1", {0, 5, -1, -1}}};
  CHECK(ib_counters_moved(odd_before, odd).empty());
}

TEST_CASE("IB counters: read from sysfs under a root", "[ib_counters]") {
  CounterTree t;
  t.set("mlx5_0", 1, "symbol_error", "12\n");
  t.set("mlx5_0", 1, "link_downed", "0\n");
  t.set("mlx5_0", 1, "port_rcv_errors", "garbage\n");
  t.set("mlx5_1", 1, "link_error_recovery", "3\n");
  SysFs sys{t.root.string()};
  IbCounters c = sys.read_ib_counters();
  REQUIRE(c.size() == 2);
  CHECK(c["mlx5_0:1"] == std::array<int64_t, 4>{0, 12, -1, -1});
  CHECK(c["mlx5_1:1"] == std::array<int64_t, 4>{-1, -1, 3, -1});
  CHECK(SysFs{"/nonexistent-root"}.read_ib_counters().empty());
  // The fixture trees have ports without counters: every value unreadable.
  SysFs cx7{std::string(RANKCHECK_FIXTURES) + "/sysfs/ib-cx7"};
  IbCounters none = cx7.read_ib_counters();
  REQUIRE(none.count("mlx5_0:1") == 1);
  CHECK(none["mlx5_0:1"] == std::array<int64_t, 4>{-1, -1, -1, -1});
}

TEST_CASE("ib-port-errors: the ports that moved, with their hosts", "[ib_counters][rules]") {
  JobView v = test::healthy_job(4, 2);
  StageView sv;
  sv.world_size = 4;
  sv.members = &v.members;
  for (int k = 0; k < 4; ++k) {
    RankResult r;
    r.rank = k;
    r.init_ok = r.allreduce_ok = r.allreduce_done = true;
    r.expected = r.got = 10;
    sv.results.push_back(r);
  }
  CHECK(stage_checks(sv).empty());
  sv.results[2].ib_moved = sv.results[3].ib_moved = "mlx5_0:1 symbol_error +12";
  auto fs = stage_checks(sv);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].name() == "ib-port-errors");
  CHECK_FALSE(fs[0].is_error());
  CHECK(fs[0].hosts == std::vector<std::string>{"gpu-02"});
  CHECK(fs[0].ranks == std::vector<long>{2, 3});
  CHECK_THAT(fs[0].message, Catch::Contains("mlx5_0:1 symbol_error +12 on gpu-02"));
}
