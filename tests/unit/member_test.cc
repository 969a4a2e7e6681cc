#include "rendezvous/member.h"

#include <catch2/catch.hpp>
#include <sys/socket.h>

#include "host/resolve.h"

using namespace rankcheck;

namespace {

// Both ends of a connection: the member's socket and what plays the master.
struct Pair {
  Pair() {
    int fds[2] = {-1, -1};
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    member = Socket(fds[0]);
    master = Socket(fds[1]);
  }
  void send(const std::vector<uint8_t>& frame) {
    REQUIRE(master.write_all(frame, Deadline::after(Millis(1000))).ok());
  }
  Socket member;
  Socket master;
};

Verdict go_verdict() {
  Verdict go;
  go.final = false;
  go.run_gpu = true;
  go.stage_ms = 3000;
  go.nccl_id = std::array<uint8_t, kNcclIdSize>{};
  return go;
}

}  // namespace

TEST_CASE("member: a go verdict replayed after the GPU stage is not taken as final") {
  JobToken token = JobToken::from_secret("0123456789abcdef-job-token");
  JoinResult joined;
  joined.server_nonce[0] = 1;
  joined.client_nonce[0] = 2;
  Pair p;
  auto go = encode_signed(go_verdict(), token, joined.server_nonce, joined.client_nonce);
  p.send(go);
  auto first = wait_verdict(p.member, Deadline::after(Millis(1000)), joined, &token);
  REQUIRE(first.ok());
  CHECK(!first->final);

  p.send(go);  // the same bytes again, where the final verdict belongs
  auto replayed =
      wait_verdict(p.member, Deadline::after(Millis(1000)), joined, &token, VerdictWait::kFinal);
  REQUIRE(!replayed.ok());
  CHECK(replayed.error().fault == Fault::kAuthFailed);
  CHECK(replayed.error().message ==
        "it sent another go verdict where its final verdict belonged, without this job's token "
        "on it: a replay, not this job's master");

  Verdict last;
  last.exit_code = 5;
  p.send(encode_signed(last, token, joined.server_nonce, joined.client_nonce));
  auto final_verdict =
      wait_verdict(p.member, Deadline::after(Millis(1000)), joined, &token, VerdictWait::kFinal);
  REQUIRE(final_verdict.ok());
  CHECK(final_verdict->final);
  CHECK(final_verdict->exit_code == 5);
}

TEST_CASE("member: without a token, a second go verdict is not a final verdict either") {
  JoinResult joined;
  Pair p;
  p.send(encode(go_verdict()));
  auto v =
      wait_verdict(p.member, Deadline::after(Millis(1000)), joined, nullptr, VerdictWait::kFinal);
  REQUIRE(!v.ok());
  CHECK(v.error().fault != Fault::kAuthFailed);
  CHECK(v.error().message == "it sent another go verdict where its final verdict belonged");
}

TEST_CASE("member: a scalable init's roots count only when the signed verdict's digest matches") {
  JobToken token = JobToken::from_secret("0123456789abcdef-job-token");
  JoinResult joined;
  joined.server_nonce[0] = 1;
  joined.client_nonce[0] = 2;
  std::vector<NcclIdBytes> roots(2);
  roots[0][0] = 10;
  roots[1][0] = 20;
  Verdict go = go_verdict();
  go.nccl_roots = 2;
  go.roots_digest = roots_digest(roots);
  SECTION("the roots as sent") {
    Pair p;
    p.send(encode(NcclRoots{roots}));
    p.send(encode_signed(go, token, joined.server_nonce, joined.client_nonce));
    auto v = wait_verdict(p.member, Deadline::after(Millis(1000)), joined, &token);
    REQUIRE(v.ok());
    CHECK(v->roots == roots);
  }
  SECTION("other roots, or none") {
    std::vector<NcclIdBytes> forged = roots;
    forged[1][0] = 21;
    for (bool send_any : {true, false}) {
      Pair p;
      if (send_any) p.send(encode(NcclRoots{forged}));
      p.send(encode_signed(go, token, joined.server_nonce, joined.client_nonce));
      auto v = wait_verdict(p.member, Deadline::after(Millis(1000)), joined, &token);
      REQUIRE(!v.ok());
      CHECK(v.error().message ==
            "its go verdict names 2 NCCL roots, and the roots it sent before it do not match "
            "them");
    }
  }
}

TEST_CASE("resolve_host: numeric addresses come back canonical, without a lookup") {
  auto v4 = resolve_host("10.0.0.7", Deadline::after(Millis(1000)));
  REQUIRE(v4.ok());
  CHECK(*v4 == std::vector<std::string>{"10.0.0.7"});
  auto v6 = resolve_host("fd00:0:0:0::1", Deadline::after(Millis(1000)));
  REQUIRE(v6.ok());
  CHECK(*v6 == std::vector<std::string>{"fd00::1"});
  // A name still goes to the resolver, which answers for localhost from /etc/hosts.
  auto name = resolve_host("localhost", Deadline::after(Millis(5000)));
  REQUIRE(name.ok());
  CHECK(!name->empty());
}

TEST_CASE("first_connect_delay: none while the backlog holds every connection, then spread") {
  CHECK(first_connect_delay(4000, 4096, 4096) == Millis(0));
  CHECK(first_connect_delay(0, 16000, 4096) == Millis(0));
  // One backlog's worth per kBacklogDrain: the 4096th of 16,000 waits one drain.
  CHECK(first_connect_delay(4096, 16000, 4096) == kBacklogDrain);
  CHECK(first_connect_delay(15999, 16000, 4096) == Millis(15999 * kBacklogDrain.count() / 4096));
  // Monotonic in the index, so that ranks arrive in order, a slot apart.
  CHECK(first_connect_delay(100, 16000, 4096) <= first_connect_delay(101, 16000, 4096));
  // Nonsense in, no wait out: an unreadable somaxconn, an index past the count.
  CHECK(first_connect_delay(10, 16000, 0) == Millis(0));
  CHECK(first_connect_delay(20000, 16000, 4096) == first_connect_delay(16000, 16000, 4096));
}
