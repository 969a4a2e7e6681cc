// The job under watch: its wire messages, the rules over it, the master's state, the
// live reader of a command's output, the sockets that mark an init, the handoff.

#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "diagnose/live.h"
#include "host/sockets.h"
#include "master/watch_state.h"
#include "protocol/codec.h"
#include "protocol/messages.h"
#include "report/job.h"
#include "rules/rules.h"
#include "watch/handoff.h"

using namespace rankcheck;

namespace {

std::span<const uint8_t> payload(const std::vector<uint8_t>& frame) {
  return std::span(frame).subspan(kHeaderSize);
}

MemberWatch member(long rank, std::string host, long nranks = 1) {
  MemberWatch m;
  m.rank = rank;
  m.nranks = nranks;
  m.host = std::move(host);
  return m;
}

WatchEvent ev(WatchEventKind k) {
  WatchEvent e;
  e.kind = k;
  return e;
}

WatchEvent marker(JobPhase p, std::string id = "rendezvous") {
  WatchEvent e = ev(WatchEventKind::kMarker);
  e.phase = p;
  e.marker = std::move(id);
  return e;
}

WatchEvent exited(int code, std::string last = "", int sig = 0) {
  WatchEvent e = ev(WatchEventKind::kExit);
  e.exit_code = code;
  e.signal = sig;
  e.text = std::move(last);
  return e;
}

WatchEvent line(LineRole role, std::string text, std::string finding = "process-died") {
  WatchEvent e = ev(WatchEventKind::kLine);
  e.role = role;
  e.text = std::move(text);
  e.finding = std::move(finding);
  return e;
}

// A job of four members on two hosts, every wrapper connected and started.
WatchState four(bool fail_fast = false, double init_timeout_ms = 10'000) {
  WatchConfig c;
  c.members = {member(0, "h0"), member(1, "h0"), member(2, "h1"), member(3, "h1")};
  c.init_timeout_ms = init_timeout_ms;
  c.fail_fast = fail_fast;
  WatchState s(c);
  for (long r = 0; r < 4; ++r) {
    auto i = s.connect(r, 1, r < 2 ? "h0" : "h1", 0);
    REQUIRE(i.has_value());
    WatchEvent st = ev(WatchEventKind::kStarted);
    st.pid = static_cast<uint32_t>(100 + r);
    s.event(*i, st, 10);
  }
  return s;
}

}  // namespace

TEST_CASE("watch messages: hello, event and order round-trip, signed") {
  JobToken token = JobToken::from_secret("0123456789abcdef0123456789abcdef");
  Nonce server{}, client{};
  server[0] = 1;
  client[0] = 2;
  WatchHello h{8, 4, "gpu-02", client, {}};
  auto hf = encode_signed(h, token, server);
  auto hb = decode_watch_hello(payload(hf));
  REQUIRE(hb.ok());
  CHECK(hb->rank == 8);
  CHECK(hb->nranks == 4);
  CHECK(hb->host == "gpu-02");
  CHECK(verify_watch_hello(payload(hf), token, server));
  Nonce other = server;
  other[1] = 9;
  CHECK_FALSE(verify_watch_hello(payload(hf), token, other));  // another connection's

  WatchEventFrame e{3, line(LineRole::kInitiating, "ValueError: boom", "process-died"), {}};
  e.event.at_ms = 1234;
  auto ef = encode_signed(e, token, server, client);
  auto eb = decode_watch_event(payload(ef));
  REQUIRE(eb.ok());
  CHECK(eb->seq == 3);
  CHECK(eb->event.kind == WatchEventKind::kLine);
  CHECK(eb->event.text == "ValueError: boom");
  CHECK(eb->event.finding == "process-died");
  CHECK(eb->event.at_ms == 1234);
  CHECK(verify_watch_event(payload(ef), token, server, client));
  CHECK_FALSE(verify_watch_event(payload(ef), token, client, server));

  WatchOrder o{2, WatchOrderKind::kEnd, 8, "job-rank-failed", "rank 1 failed first", {}};
  auto of = encode_signed(o, token, server, client);
  auto ob = decode_watch_order(payload(of));
  REQUIRE(ob.ok());
  CHECK(ob->kind == WatchOrderKind::kEnd);
  CHECK(ob->exit_code == 8);
  CHECK(ob->finding == "job-rank-failed");
  CHECK(verify_watch_order(payload(of), token, server, client));
  // An order's MAC is not an event's: neither stands in for the other.
  CHECK_FALSE(verify_watch_event(payload(of), token, server, client));
}

TEST_CASE("watch messages: a text longer than its cap is cut; a bad kind is refused") {
  WatchEventFrame e{1, ev(WatchEventKind::kHeartbeat), {}};
  e.event.text = std::string(5000, 'x');
  auto f = encode(e);
  auto b = decode_watch_event(payload(f));
  REQUIRE(b.ok());
  CHECK(b->event.text.size() == kWatchTextMax);
  std::vector<uint8_t> bad = f;
  bad[kHeaderSize + 4] = 99;  // the event's kind
  CHECK_FALSE(decode_watch_event(payload(bad)).ok());
}

TEST_CASE("job rules: the first rank to fail leads; the others that followed are downstream") {
  WatchState s = four();
  s.event(3, line(LineRole::kDownstream, "Connection reset by peer", "peer-failed"), 2000);
  s.event(3, exited(1), 2100);
  s.event(1, line(LineRole::kInitiating, "ValueError: boom"), 2500);
  s.event(1, exited(1), 2600);
  s.evaluate(3000);
  JobReport r = s.report(3000, true);
  REQUIRE_FALSE(r.findings.empty());
  const Finding& f = r.findings.front();
  CHECK(f.name() == "job-rank-failed");
  CHECK(f.is_error());
  // Rank 3 ended first, but after a line that points at a peer: rank 1 is the cause.
  CHECK(f.ranks == std::vector<long>{1});
  CHECK(f.hosts == std::vector<std::string>{"h0"});
  CHECK(f.message ==
        "rank 1 on h0 failed first, at +2.50 s: it exited with 1 after printing 'ValueError: "
        "boom'; then rank 3 on h1 failed, downstream of it");
  CHECK(f.exit_code == exit_code::kJobFailed);
  CHECK(r.fingerprint() == "job-rank-failed");
}

TEST_CASE("job rules: an error line of a rank that still runs is a warning, not a failure") {
  WatchState s = four(/*fail_fast=*/true);
  s.event(2, line(LineRole::kInitiating, "RuntimeError: retrying the download"), 1000);
  s.evaluate(1500);
  JobReport r = s.report(1500, true);
  REQUIRE(r.findings.size() == 1);
  CHECK(r.findings[0].name() == "job-rank-failed");
  CHECK_FALSE(r.findings[0].is_error());
  // --fail-fast never ends a job on a warning: a process may handle what it printed.
  CHECK_FALSE(s.take_end_order().has_value());
}

TEST_CASE("job rules: ranks that never reach init are init-blocked once the others waited") {
  WatchState s = four(/*fail_fast=*/true, /*init_timeout_ms=*/5000);
  WatchEvent hb = ev(WatchEventKind::kHeartbeat);
  hb.text = "loading shards 3/40";
  s.event(2, hb, 900);
  s.event(3, hb, 900);
  s.event(0, marker(JobPhase::kInit), 1000);
  s.event(1, marker(JobPhase::kInit, "nccl-init-start"), 1200);
  s.evaluate(5900);  // not yet: 4.9 s after the first
  CHECK(s.report(5900, true).findings.empty());
  CHECK(s.evaluate(6100));
  JobReport r = s.report(6100, true);
  REQUIRE(r.findings.size() == 1);
  const Finding& f = r.findings[0];
  CHECK(f.name() == "init-blocked");
  CHECK(f.ranks == std::vector<long>{2, 3});
  CHECK(f.hosts == std::vector<std::string>{"h1"});
  CHECK(f.message ==
        "ranks 2-3 on h1 never reached init in the 5.00 s since the first rank did; ranks 0-1 on "
        "h0 wait in init since +1.00 s; printed last: rank 2 (h1): 'loading shards 3/40'; rank 3 "
        "(h1): 'loading shards 3/40'");
  auto end = s.take_end_order();
  REQUIRE(end.has_value());
  CHECK(end->exit_code == exit_code::kIncomplete);
  CHECK_FALSE(s.take_end_order().has_value());  // once
  // The exits that the order causes change nothing: what the job was ended for stands.
  for (size_t i = 0; i < 4; ++i)
    s.event(i, exited(143, "", 15), 7000);
  s.evaluate(7100);
  JobReport after = s.report(7100, false);
  REQUIRE(after.findings.size() == 1);
  CHECK(after.findings[0].name() == "init-blocked");
  CHECK(after.ended_by_rankcheck);
  CHECK(s.done());
}

TEST_CASE("job rules: a finding no longer held stays, as a warning that says so") {
  WatchState s = four(false, 1000);
  s.event(0, marker(JobPhase::kInit), 100);
  s.evaluate(1200);
  REQUIRE(s.report(1200, true).fingerprint() == "init-blocked");
  for (size_t i = 1; i < 4; ++i)
    s.event(i, marker(JobPhase::kInitDone, "nccl-init-complete"), 1500);
  s.evaluate(1600);
  JobReport r = s.report(1600, true);
  REQUIRE(r.findings.size() == 1);
  CHECK_FALSE(r.findings[0].is_error());
  CHECK(r.findings[0].message.find("(held until +1.60 s, then no longer)") != std::string::npos);
  CHECK(r.fingerprint().empty());
}

TEST_CASE("job rules: a link lost with no exit told is a failure; a wrapper never heard is named") {
  WatchConfig c;
  c.members = {member(0, "h0"), member(1, "h1"), member(2, "h2")};
  c.init_timeout_ms = 1000;
  WatchState s(c);
  REQUIRE(s.connect(0, 1, "h0", 0) == std::optional<size_t>(0));
  REQUIRE(s.connect(1, 1, "h1", 0) == std::optional<size_t>(1));
  std::string why;
  CHECK_FALSE(s.connect(1, 1, "h1", 0, &why).has_value());
  CHECK(why == "rank 1 already has a wrapper's link");
  CHECK_FALSE(s.connect(2, 1, "h9", 0, &why).has_value());
  CHECK(why == "rank 2 is h2's, not h9's");
  CHECK_FALSE(s.connect(7, 1, "h0", 0, &why).has_value());
  s.event(0, marker(JobPhase::kInit), 100);
  s.disconnected(1, 300);
  s.evaluate(2000);
  JobReport r = s.report(2000, true);
  REQUIRE(r.findings.size() == 2);
  CHECK(r.findings[0].name() == "job-rank-failed");
  CHECK(r.findings[0].ranks == std::vector<long>{1});
  CHECK(r.findings[0].message.find("went silent") != std::string::npos);
  CHECK(r.findings[1].name() == "init-blocked");
  CHECK(r.findings[1].ranks == std::vector<long>{2});
  CHECK(r.findings[1].message.find("no word at all from rank 2") != std::string::npos);
  CHECK(s.all_connected_done() == false);  // rank 0 still runs
}

TEST_CASE("job rules: --stall-after names the quiet rank while the others go on") {
  WatchConfig c;
  c.members = {member(0, "h0"), member(1, "h0")};
  c.stall_after_ms = 10'000;
  WatchState s(c);
  s.connect(0, 1, "h0", 0);
  s.connect(1, 1, "h0", 0);
  s.event(0, ev(WatchEventKind::kStarted), 0);
  s.event(1, ev(WatchEventKind::kStarted), 0);
  WatchEvent hb = ev(WatchEventKind::kHeartbeat);
  hb.quiet_ms = 0;
  hb.text = "step 100";
  s.event(0, hb, 20'000);
  WatchEvent quiet = ev(WatchEventKind::kHeartbeat);
  quiet.quiet_ms = 15'000;
  s.event(1, quiet, 20'000);
  s.evaluate(20'000);
  JobReport r = s.report(20'000, true);
  REQUIRE(r.findings.size() == 1);
  CHECK(r.findings[0].name() == "job-stalled");
  CHECK(r.findings[0].ranks == std::vector<long>{1});
}

TEST_CASE("job report: the JSON section is the report's last key, counts by phase") {
  WatchState s = four();
  s.event(0, exited(0), 500);
  JobReport r = s.report(600, true);
  CHECK(r.count(JobPhase::kExited) == 1);
  CHECK(r.count(JobPhase::kStarted) == 3);
  std::string json = with_job_json("{\n  \"role\": \"master\"\n}\n", r);
  CHECK(json.rfind("{\n  \"role\": \"master\",\n  \"job\": {", 0) == 0);
  CHECK(json.find("\"exited\": 1") != std::string::npos);
  CHECK(json.back() == '\n');
}

TEST_CASE("live reader: markers once each, the first line of each role, the last line") {
  std::vector<diagnose::LiveNote> notes;
  diagnose::LiveReader r([&](const diagnose::LiveNote& n) { notes.push_back(n); });
  r.feed("rank 3: starting\nh1:100:200 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n");
  r.feed("h1:100:200 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 3 nranks 8 cudaDev 0 ");
  r.feed("nvmlDev 0 busId 1000 commId 0x5 - Init START\n");  // a line cut in two reads
  r.feed("Traceback (most recent call last):\nValueError: boom\n");
  r.feed("RuntimeError: second error\nprogress 10%\rprogress 50%");
  r.end();
  REQUIRE(notes.size() == 2);
  CHECK(notes[0].kind == diagnose::LiveNote::Kind::kMarker);
  CHECK(notes[0].marker->id == "nccl-bootstrap");
  CHECK(notes[0].marker->phase == JobPhase::kInit);
  CHECK(notes[1].kind == diagnose::LiveNote::Kind::kLine);
  CHECK(notes[1].role == LineRole::kInitiating);
  CHECK(notes[1].text == "ValueError: boom");
  CHECK(r.last_line() == "progress 50%");  // a carriage return redraws the line
  CHECK(r.lines() == 7);
}

TEST_CASE("live reader: a marker of a later phase counts; an earlier one after it does not") {
  std::vector<std::string> ids;
  diagnose::LiveReader r([&](const diagnose::LiveNote& n) {
    if (n.kind == diagnose::LiveNote::Kind::kMarker) ids.emplace_back(n.marker->id);
  });
  r.feed(
      "INFO:torch.distributed.distributed_c10d:Rank 0: Completed store-based barrier for "
      "key:store_based_barrier_key:1 with 2 nodes.\n");
  r.feed(
      "INFO:torch.distributed.distributed_c10d:Added key: store_based_barrier_key:2 to store for "
      "rank: 0\n");
  CHECK(ids == std::vector<std::string>{"store-barrier-done"});
}

TEST_CASE("live reader: a line past the longest kept is read as its start") {
  int markers = 0;
  diagnose::LiveReader r([&](const diagnose::LiveNote&) { ++markers; });
  std::string huge(diagnose::LiveReader::kMaxLine + 100, 'a');
  r.feed(huge);
  r.feed("\nnext\n");
  CHECK(r.lines() == 2);
  CHECK(r.last_line() == "next");
  CHECK(markers == 0);
}

TEST_CASE("sockets: /proc/net/tcp's lines, v4 and v6") {
  std::string v4 =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
      "timeout inode\n"
      "   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        "
      "0 4242 1 0000000000000000 100 0 0 10 0\n"
      "   1: 0100007F:D431 0100007F:7530 01 00000000:00000000 00:00000000 00000000     0        "
      "0 4343 1 0000000000000000 20 4 30 10 -1\n"
      "   2: garbage\n";
  auto s = parse_proc_net_tcp(v4, false);
  REQUIRE(s.size() == 2);
  CHECK(s[0].local_addr == "127.0.0.1");
  CHECK(s[0].local_port == 30000);
  CHECK(s[0].state == 10);
  CHECK(s[0].inode == 4242);
  CHECK(s[1].remote_port == 30000);
  CHECK(s[1].state == 1);
  std::string v6 =
      "  sl  local_address                         remote_address                        st "
      "tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
      "   0: 00000000000000000000000001000000:7530 00000000000000000000000000000000:0000 0A "
      "00000000:00000000 00:00000000 00000000     0        0 77 1 0000000000000000 100 0 0 10 "
      "0\n";
  auto s6 = parse_proc_net_tcp(v6, true);
  REQUIRE(s6.size() == 1);
  CHECK(s6[0].local_addr == "::1");
  CHECK(s6[0].inode == 77);
}

TEST_CASE("sockets: this process's own listener on a port is found, another port is not") {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 1) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  uint16_t port = ntohs(a.sin_port);
  CHECK(tree_meets_endpoint(ProcFs{}, ::getpid(), {}, port));
  CHECK_FALSE(tree_meets_endpoint(ProcFs{}, ::getpid(), {}, static_cast<uint16_t>(port + 1)));
  ::close(fd);
}

TEST_CASE("handoff: what the check hands the wrapper arrives whole, sockets too") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  Handoff h;
  h.code = 0;
  h.rank = 0;
  h.nranks = 2;
  h.host = "h0";
  h.job_id = "48213";
  h.rendezvous_port = 29500;
  h.watch_port = 41000;
  h.addresses = {"10.0.0.1"};
  h.master = true;
  h.members = {member(0, "h0", 2), member(2, "h1", 2)};
  h.json_path = "/tmp/r.json";
  h.check_json = std::string(300'000, 'j');  // more than a socket buffer
  h.listeners = {listener};
  std::optional<Handoff> got;
  std::thread reader([&] {
    auto r = read_handoff(sv[1], Deadline::after(Millis(10'000)));
    if (r.ok()) got = std::move(*r);
  });
  REQUIRE(send_handoff(sv[0], h, Deadline::after(Millis(10'000))).ok());
  reader.join();
  REQUIRE(got.has_value());
  CHECK(got->job_id == "48213");
  CHECK(got->watch_port == 41000);
  CHECK(got->members.size() == 2);
  CHECK(got->members[1].host == "h1");
  CHECK(got->members[1].nranks == 2);
  CHECK(got->check_json.size() == 300'000);
  REQUIRE(got->listeners.size() == 1);
  CHECK(got->listeners[0] != listener);  // a descriptor of its own for the same socket
  ::close(got->listeners[0]);
  ::close(listener);
  ::close(sv[0]);
  auto none = read_handoff(sv[1], Deadline::after(Millis(1000)));
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());  // closed with nothing: the check did not pass
  ::close(sv[1]);
}
