#include "base/hostlist.h"

#include <algorithm>
#include <chrono>

#include <catch2/catch.hpp>

using namespace rankcheck;
using V = std::vector<std::string>;

TEST_CASE("hostlist: ranges, padding, lists and plain names") {
  auto h = expand_hostlist("gpu-[01-04,07],cpu3");
  REQUIRE(h.ok());
  CHECK(*h == V{"gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-07", "cpu3"});
  CHECK(*expand_hostlist("node1") == V{"node1"});
  CHECK(*expand_hostlist("n[8-11]") == V{"n8", "n9", "n10", "n11"});
  CHECK(*expand_hostlist("n[098-101]") == V{"n098", "n099", "n100", "n101"});
  CHECK(*expand_hostlist("a,b,,c") == V{"a", "b", "c"});
}

TEST_CASE("hostlist: several bracket groups multiply, suffixes stay") {
  CHECK(*expand_hostlist("r[1-2]n[1-2]") == V{"r1n1", "r1n2", "r2n1", "r2n2"});
  CHECK(*expand_hostlist("gpu[1-2]-ib") == V{"gpu1-ib", "gpu2-ib"});
}

TEST_CASE("hostlist: malformed lists name what is wrong") {
  CHECK(expand_hostlist("gpu-[01-04").error().message == "host list 'gpu-[01-04': unclosed '['");
  CHECK(expand_hostlist("gpu-[04-01]").error().message ==
        "host list 'gpu-[04-01]': bad range '04-01'");
  CHECK(expand_hostlist("gpu-[a-b]").error().message == "host list 'gpu-[a-b]': bad range 'a-b'");
  CHECK(expand_hostlist("g]").error().message == "host list 'g]': unbalanced ']' at offset 1");
  CHECK(!expand_hostlist("").ok());
  CHECK(!expand_hostlist("x[[1]]").ok());
}

TEST_CASE("hostlist: a list that would expand past the limit is refused, not allocated") {
  auto h = expand_hostlist("n[0-99999999]");
  REQUIRE(!h.ok());
  CHECK(h.error().message.find("more than 65536 hosts") != std::string::npos);
  CHECK(!expand_hostlist("a[0-999]b[0-999]").ok());
}

TEST_CASE("tasks per node: counts and repeats") {
  CHECK(*expand_tasks_per_node("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(*expand_tasks_per_node("8") == std::vector<int>{8});
  CHECK(!expand_tasks_per_node("2(x)").ok());
  CHECK(!expand_tasks_per_node("x").ok());
  CHECK(!expand_tasks_per_node("2(x0)").ok());
  CHECK(!expand_tasks_per_node("").ok());
  // A dozen bytes from a peer must not lay out billions of ranks.
  auto huge = expand_tasks_per_node("1048576(x65536)");
  REQUIRE(!huge.ok());
  CHECK(huge.error().message == "tasks per node '1048576(x65536)': more than 1048576 tasks");
  CHECK(expand_tasks_per_node("8(x131072)").ok() == false);
}

TEST_CASE("node of each rank: block and cyclic distributions") {
  CHECK(node_of_each_rank({2, 2, 1}, Distribution::kBlock) == std::vector<int>{0, 0, 1, 1, 2});
  CHECK(node_of_each_rank({2, 2, 1}, Distribution::kCyclic) == std::vector<int>{0, 1, 2, 0, 1});
}

TEST_CASE("tasks per node: a node with no task is not a Slurm step") {
  CHECK(expand_tasks_per_node("0").error().message == "tasks per node '0': bad count '0'");
  CHECK(!expand_tasks_per_node("4096,0(x65535)").ok());
  CHECK(!expand_tasks_per_node("2,0,2").ok());
}

TEST_CASE("hostlist: names that would expand past the byte limit are refused, not allocated") {
  // 4000 bytes of prefix times 65536 hosts would be 256 MiB.
  std::string list = std::string(4000, 'h') + "[0-65535]";
  auto h = expand_hostlist(list);
  REQUIRE(!h.ok());
  CHECK(h.error().message.find("expands to more than 4194304 bytes of names") != std::string::npos);
  CHECK(!expand_hostlist("a[0-63]" + std::string(100000, 'x') + "[0-63]").ok());
  // A large list of ordinary names is fine.
  auto big = expand_hostlist("nid[000000-065535]");
  REQUIRE(big.ok());
  CHECK(big->size() == 65536);
  CHECK(big->back() == "nid065535");
}

TEST_CASE("node of each rank: cyclic work follows the ranks, not nodes times the largest count") {
  CHECK(node_of_each_rank({3, 1, 2}, Distribution::kCyclic) == std::vector<int>{0, 1, 2, 0, 2, 0});
  CHECK(node_of_each_rank({2, 2}, Distribution::kUnknown).empty());
  // One node of 200000 tasks and 65535 of one: 265535 placements. Dealt round by
  // round over every node, it took 200000 x 65536 steps.
  std::vector<int> tasks(65536, 1);
  tasks[0] = 200000;
  auto start = std::chrono::steady_clock::now();
  auto node_of = node_of_each_rank(tasks, Distribution::kCyclic);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(node_of.size() == 265535);
  CHECK(node_of[0] == 0);
  CHECK(node_of[1] == 1);
  CHECK(node_of[65536] == 0);
  CHECK(node_of.back() == 0);
  CHECK(s < 2.0);
}

TEST_CASE("hostlist: compressed as Slurm writes it, and read back the same") {
  CHECK(compress_hostlist({"gpu-203", "gpu-017"}) == "gpu-[017,203]");
  CHECK(compress_hostlist({"gpu-01", "gpu-02", "gpu-03", "gpu-07", "cpu3"}) ==
        "cpu3,gpu-[01-03,07]");
  CHECK(compress_hostlist({"n8", "n9", "n10", "n11"}) == "n[8-11]");
  CHECK(compress_hostlist({"n098", "n099", "n100"}) == "n[098-100]");
  CHECK(compress_hostlist({"node1"}) == "node1");
  CHECK(compress_hostlist({"login", "login", "gpu-1", "gpu-1"}) == "gpu-1,login");
  CHECK(compress_hostlist({}).empty());
  // 09 and 9 are two hosts; 9 then 010 is not a run (010 is not 10 written at width 1).
  CHECK(compress_hostlist({"n09", "n9"}) == "n[09,9]");
  CHECK(compress_hostlist({"n9", "n010"}) == "n[9,010]");
  CHECK(compress_hostlist({"r1n1", "r1n2", "r2n1"}) == "r1n[1-2],r2n1");
  CHECK(compress_hostlist({"gpu1.ib", "gpu2.ib"}) == "gpu1.ib,gpu2.ib");
}

TEST_CASE("hostlist: a name that cannot stand in a host list is left out") {
  CHECK(compress_hostlist({"gpu-01,gpu-02", "n[1-9]", "", "a b", "gpu-03"}) == "gpu-03");
}

TEST_CASE("hostlist: what compress_hostlist writes, expand_hostlist reads back") {
  std::vector<V> lists = {{"gpu-017", "gpu-203", "gpu-204"},
                          {"n8", "n9", "n10", "n012", "n013"},
                          {"a", "b1", "b2", "b003", "c-000001", "c-000002"},
                          {"node0999999999"}};
  for (const V& hosts : lists) {
    auto back = expand_hostlist(compress_hostlist(hosts));
    REQUIRE(back.ok());
    V sorted_back = *back;
    std::sort(sorted_back.begin(), sorted_back.end());
    V sorted = hosts;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted_back == sorted);
  }
}
