// The rehearsal's plan and the reading of its results.

#include <set>

#include <catch2/catch.hpp>

#include "rehearsal/plan.h"
#include "rules/paths.h"

using namespace rankcheck;

namespace {

std::vector<PathHost> three() {
  return {{"h0", "eth0", "198.18.0.1", 32768, 60999},
          {"h1", "eth0", "198.18.0.2", 32768, 60999},
          {"h2", "eth0", "198.18.0.3", 32768, 60999}};
}

std::vector<PathResult> all_ok(size_t n) {
  std::vector<PathResult> rs;
  for (const PathEdge& e : rehearsal_plan(n, 1))
    rs.push_back({e, PathOutcome::kOk, 300, ""});
  return rs;
}

void set(std::vector<PathResult>& rs, uint32_t from, uint32_t to, PathOutcome o,
         std::string detail = "") {
  for (PathResult& r : rs) {
    if (r.edge.from == from && r.edge.to == to) r.outcome = o, r.detail = detail;
  }
}

}  // namespace

TEST_CASE("rehearsal plan: every pair up to 64 hosts") {
  CHECK(rehearsal_plan(1, 1).empty());
  CHECK(rehearsal_plan(2, 1) == std::vector<PathEdge>{{0, 1}, {1, 0}});
  CHECK(rehearsal_plan(64, 1).size() == 64u * 63u);
}

TEST_CASE("rehearsal plan: beyond 64 hosts, root, ring, trees and a sample, O(log hosts) each") {
  for (size_t n : {65u, 1024u, 4097u}) {
    auto plan = rehearsal_plan(n, 7);
    std::set<PathEdge> edges(plan.begin(), plan.end());
    CHECK(edges.size() == plan.size());
    for (uint32_t i = 1; i < n; ++i) {
      CHECK(edges.count({0, i}));  // the root reaches every host and back
      CHECK(edges.count({i, 0}));
      CHECK(edges.count({i, uint32_t((i + 1) % n)}));  // the ring, both ways
      CHECK(edges.count({uint32_t((i + 1) % n), i}));
    }
    std::vector<size_t> per_host(n, 0);
    for (const PathEdge& e : plan)
      ++per_host[e.from];
    size_t most = 0;
    for (size_t i = 1; i < n; ++i)
      most = std::max(most, per_host[i]);
    size_t log2n = 0;
    while ((size_t(1) << log2n) < n)
      ++log2n;
    CHECK(most <= 2 + 2 + 6 + log2n);     // root, ring, two trees (parent and children), sample
    CHECK(plan == rehearsal_plan(n, 7));  // the same seed, the same plan
  }
}

TEST_CASE("nccl-path-blocked: a healthy rehearsal has no findings") {
  CHECK(attribute_paths(three(), all_ok(3)).empty());
}

TEST_CASE("nccl-path-blocked: a host nobody reaches is inbound-blocked, named first") {
  auto rs = all_ok(3);
  set(rs, 0, 2, PathOutcome::kTimeout);
  set(rs, 1, 2, PathOutcome::kTimeout);
  auto fs = attribute_paths(three(), rs);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].name() == "nccl-path-blocked");
  CHECK(fs[0].exit_code == 3);
  CHECK(fs[0].message ==
        "inbound connections to h2 on ephemeral ports 32768-60999 of eth0 (198.18.0.3) are "
        "blocked: timed out from h0 and h1");
  CHECK(fs[0].hosts == std::vector<std::string>{"h2"});
  CHECK(fs[0].fix ==
        "open h2's ephemeral port range (32768-60999) to the other hosts, or narrow it with "
        "net.ipv4.ip_local_port_range and open that; or set NCCL_SOCKET_IFNAME to the interface "
        "that routes between the hosts");
}

TEST_CASE("nccl-path-blocked: a host that reaches nobody is outbound-blocked") {
  auto rs = all_ok(3);
  set(rs, 1, 0, PathOutcome::kRefused, "Connection refused");
  set(rs, 1, 2, PathOutcome::kRefused, "Connection refused");
  auto fs = attribute_paths(three(), rs);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].message ==
        "outbound connections from h1 over eth0 (198.18.0.2) are blocked: refused to h0 and h2");
}

TEST_CASE("nccl-path-blocked: a split between groups of hosts") {
  std::vector<PathHost> hosts = {{"h0", "eth1", "198.18.1.1"},
                                 {"h1", "eth1", "198.18.1.2"},
                                 {"h2", "eth1", "198.19.1.3"},
                                 {"h3", "eth1", "198.19.1.4"}};
  auto rs = all_ok(4);
  for (uint32_t a : {0u, 1u}) {
    for (uint32_t b : {2u, 3u}) {
      set(rs, a, b, PathOutcome::kUnreachable, "No route to host");
      set(rs, b, a, PathOutcome::kUnreachable, "No route to host");
    }
  }
  auto fs = attribute_paths(hosts, rs);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].message ==
        "h0, h1, h2 and h3 cannot reach h0, h1, h2 and h3 over eth1: no route to host (No "
        "route to host) (8 of the connections tried)");
}

TEST_CASE("nccl-path-blocked: a host cut off both ways, and one that reaches itself") {
  auto rs = all_ok(3);
  for (uint32_t h : {0u, 1u}) {
    set(rs, h, 2, PathOutcome::kTimeout);
    set(rs, 2, h, PathOutcome::kTimeout);
  }
  auto fs = attribute_paths(three(), rs);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].message ==
        "h2 is cut off over eth0 (198.18.0.3): no host reaches it and it reaches no host (timed "
        "out; tried with h0 and h1)");

  rs = all_ok(3);
  set(rs, 0, 1, PathOutcome::kSelf);
  fs = attribute_paths(three(), rs);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].message ==
        "h0 cannot reach h1 over eth0: each reached itself: the address answers on every host (1 "
        "of the connections tried)");
}
