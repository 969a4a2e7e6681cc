// What the job token guards in the rehearsal: signed plans and reports, a plan's
// bounds, and a listener that answers only the master's tickets.

#include <catch2/catch.hpp>

#include "protocol/messages.h"
#include "rehearsal/plan.h"
#include "rehearsal/probe.h"
#include "rules/paths.h"

using namespace rankcheck;

namespace {

const JobToken kToken = JobToken::from_secret("s3cret-of-this-job-0123456789abcdef");

PathPlan plan_of(uint32_t targets) {
  PathPlan p;
  p.self_host = 0;
  p.self_identity = "h0\nns0";
  p.total_ms = 4000;
  for (uint32_t i = 1; i <= targets; ++i)
    p.targets.push_back({i, "127.0.0.1", "lo", uint16_t(20000 + i), "h\nns"});
  return p;
}

std::span<const uint8_t> payload(const std::vector<uint8_t>& frame) {
  return std::span(frame).subspan(kHeaderSize);
}

}  // namespace

TEST_CASE("a path plan and report are signed over their connection's nonces", "[rehearsal]") {
  Nonce server{}, client{}, other{};
  server[0] = 1, client[0] = 2, other[0] = 3;
  auto plan = encode_signed(plan_of(2), kToken, server, client);
  CHECK(verify_path_plan(payload(plan), kToken, server, client));
  CHECK_FALSE(verify_path_plan(payload(plan), kToken, other, client));  // another connection
  auto decoded = decode_path_plan(payload(plan));
  REQUIRE(decoded);
  CHECK(decoded->targets.size() == 2);

  PathReport report{{{{1, 0}, PathOutcome::kTimeout, 2000000, ""}}, {}};
  auto frame = encode_signed(report, kToken, server, client);
  CHECK(verify_path_report(payload(frame), kToken, server, client));
  // The outcome rewritten to "connected": not the member's report any more.
  auto forged = frame;
  forged[kHeaderSize + 8] = uint8_t(PathOutcome::kOk);
  CHECK_FALSE(verify_path_report(payload(forged), kToken, server, client));
  // A report's MAC is not a plan's (nor a plan's a report's): no reflection.
  CHECK_FALSE(verify_path_plan(payload(frame), kToken, server, client));
}

TEST_CASE("a member bounds a plan before it acts on it", "[rehearsal]") {
  CHECK(check_path_plan(plan_of(3), 4));
  auto many = check_path_plan(plan_of(4), 4);  // 4 ranks: 3 other hosts at most
  REQUIRE_FALSE(many);
  CHECK(many.error().message.find("4 connections") != std::string::npos);
  PathPlan p = plan_of(1);
  p.per_conn_ms = 60'000;
  CHECK_FALSE(check_path_plan(p, 4));
  p = plan_of(1);
  p.in_flight = 100'000;
  CHECK_FALSE(check_path_plan(p, 4));
  p = plan_of(1);
  p.total_ms = 3'600'000;
  CHECK_FALSE(check_path_plan(p, 4));
  p = plan_of(2);
  p.targets[1].host = p.targets[0].host;
  CHECK_FALSE(check_path_plan(p, 4));
  p = plan_of(1);
  p.targets[0].host = p.self_host;
  CHECK_FALSE(check_path_plan(p, 4));
}

TEST_CASE("a listener answers only the master's ticket for it, once", "[rehearsal]") {
  std::string me = path_identity("h1", "ns1");
  auto l = PathListener::open("127.0.0.1", "lo", me, &kToken);
  REQUIRE(l);
  PathTarget t{1, "127.0.0.1", "lo", (*l)->port(), me};
  t.nonce[0] = 7;
  t.ticket = path_ticket(kToken, t.nonce, me);
  auto probe = [&](const PathTarget& target) {
    return probe_paths(0, "h0\nns0", {target}, Millis(2000), 1, Deadline::after(Millis(3000)),
                       &kToken)
        .front();
  };
  CHECK(probe(t).outcome == PathOutcome::kOk);
  // The same ticket again (a replay, a forwarder's second try): no answer.
  CHECK(probe(t).outcome != PathOutcome::kOk);
  // A question of the prober's own (no ticket), or a ticket for another host: the
  // listener names nobody and proves nothing.
  PathTarget own = t;
  own.nonce[0] = 8;
  own.ticket = {};
  auto r = probe(own);
  CHECK(r.outcome != PathOutcome::kOk);
  CHECK(r.detail.find("h1") == std::string::npos);
  PathTarget other = t;
  other.nonce[0] = 9;
  other.ticket = path_ticket(kToken, other.nonce, path_identity("h2", "ns2"));
  CHECK(probe(other).outcome != PathOutcome::kOk);
}

TEST_CASE("nccl-path-flooded: a busy listener is flooded, not blocked", "[rehearsal]") {
  std::vector<PathHost> hosts = {{"h0", "eth0", "198.18.0.1", 32768, 60999},
                                 {"h1", "eth0", "198.18.0.2", 32768, 60999}};
  std::vector<PathResult> rs = {{{0, 1}, PathOutcome::kFlooded, 100, "busy"},
                                {{1, 0}, PathOutcome::kOk, 100, ""}};
  auto fs = attribute_paths(hosts, rs);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].name() == "nccl-path-flooded");
  CHECK(fs[0].hosts == std::vector<std::string>{"h1"});
  CHECK(fs[0].message.find("flooded") != std::string::npos);
}
