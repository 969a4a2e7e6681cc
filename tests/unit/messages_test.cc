#include "protocol/messages.h"

#include <cstdio>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "protocol/record_codec.h"

using namespace rankcheck;

namespace {
std::span<const uint8_t> payload_of(const std::vector<uint8_t>& frame) {
  auto h = decode_header(frame);
  REQUIRE(h.ok());
  REQUIRE(frame.size() == kHeaderSize + h->length);
  return std::span(frame).subspan(kHeaderSize);
}

// What a signed message is signed with: the job's token (`other` is another job's) and the
// nonces of its connection, the master's and the member's.
struct SignedConnection {
  static Nonce nonce(uint8_t first) {
    Nonce n{};
    n[0] = first;
    return n;
  }
  JobToken token = JobToken::from_secret("0123456789abcdef-job-token");
  JobToken other = JobToken::from_secret("0123456789abcdef-other-one");
  Nonce server = nonce(1);
  Nonce client = nonce(2);
};
}  // namespace

TEST_CASE("protocol: a hello carries the whole record") {
  Record r = test::member(5, 8, "gpu-02", 1, 4);
  r.conflicts.push_back(Conflict{
      Field::kRank,
      {{Field::kRank, "torch", "RANK", "5"}, {Field::kRank, "slurm", "SLURM_PROCID", "3"}}});
  test::set_env(r, {{"NCCL_IB_HCA", "mlx5"}, {"NCCL_SOCKET_IFNAME", "eth0"}});
  r.node_list = "gpu-[01-02]";
  r.tasks_per_node = "4(x2)";
  r.distribution = 1;
  r.started_unix_ms = uint64_t{1'700'000'000'123};
  r.shm = ShmFacts{67108864, 1048576, 9637888, ShmFacts::kP2pDisabled};
  r.arch = "aarch64";
  auto frame = encode(Hello{r, {}, {}, {}});
  auto back = decode_hello(payload_of(frame));
  REQUIRE(back.ok());
  const Record& d = back->record;
  CHECK(d.rank == 5);
  CHECK(d.world_size == 8);
  CHECK(d.local_rank == 1);
  CHECK(d.host == "gpu-02");
  CHECK(d.pid == r.pid);
  CHECK(d.master_resolved == r.master_resolved);
  REQUIRE(d.conflicts.size() == 1);
  CHECK(d.conflicts[0].values[1].variable == "SLURM_PROCID");
  CHECK(d.env == r.env);
  CHECK(d.env_digest == r.env_digest);
  CHECK(d.node_list == "gpu-[01-02]");
  CHECK(d.distribution == 1);
  CHECK(d.started_unix_ms == uint64_t{1'700'000'000'123});
  CHECK(d.shm->size == 67108864);
  CHECK(d.shm->avail == 1048576);
  CHECK(d.shm->segment == 9637888);
  CHECK(d.shm->flags == ShmFacts::kP2pDisabled);
  CHECK(d.arch == "aarch64");
}

TEST_CASE("protocol: a block leader's NCCL root rides in its hello, and the roots in a frame") {
  Record r = test::member(2, 4, "h");
  NcclIdBytes id{};
  id[0] = 7;
  id[127] = 9;
  auto back = decode_hello(payload_of(encode(Hello{r, {}, {}, id})));
  REQUIRE(back.ok());
  REQUIRE(back->nccl_root.has_value());
  CHECK(*back->nccl_root == id);
  CHECK(back->record.rank == 2);
  auto none = decode_hello(payload_of(encode(Hello{r, {}, {}, {}})));
  REQUIRE(none.ok());
  CHECK(!none->nccl_root.has_value());

  std::vector<NcclIdBytes> ids(3, id);
  ids[2][5] = 1;
  auto roots = decode_nccl_roots(payload_of(encode(NcclRoots{ids})));
  REQUIRE(roots.ok());
  CHECK(roots->ids == ids);
  CHECK(roots_digest(roots->ids) == roots_digest(ids));
  CHECK(roots_digest(ids) != roots_digest({ids[0], ids[1]}));

  Verdict v;
  v.final = false;
  v.nccl_roots = 3;
  v.roots_digest = roots_digest(ids);
  auto vb = decode_verdict(payload_of(encode(v)));
  REQUIRE(vb.ok());
  CHECK(vb->nccl_roots == 3);
  CHECK(vb->roots_digest == v.roots_digest);
}

TEST_CASE("protocol: a hello that lies about its environment digest is refused") {
  Record r = test::member(1, 2, "h");
  test::set_env(r, {{"NCCL_ALGO", "Ring"}});
  r.env_digest ^= 1;
  auto back = decode_hello(payload_of(encode(Hello{r, {}, {}, {}})));
  REQUIRE(!back.ok());
  CHECK(back.error().message == "malformed hello: environment digest does not match");
}

namespace {
// A hello as a peer that is not rankcheck could send it: encode() would fit the
// record to what a hello carries first.
Result<Hello> decode_unfitted(const Record& r) {
  Writer w;
  encode_record(w, r);
  w.bytes(Nonce{});
  w.bytes(Mac{});
  return decode_hello(w.data());
}
}  // namespace

TEST_CASE("protocol: a host name longer than the cap is refused, not allocated") {
  // What a peer that is not rankcheck could send: encode() would cut the name.
  auto back = decode_unfitted(test::member(1, 2, std::string(64 * 1024 - 300, 'h')));
  REQUIRE(!back.ok());
  CHECK(back.error().message == "malformed hello: host name of 65236 bytes exceeds 255");
}

TEST_CASE("protocol: a conflict of fewer than two sources is refused") {
  // What a peer that is not rankcheck could send (found by the hello fuzzer: the
  // rules read a conflict's first source).
  for (int n : {0, 1}) {
    Record r = test::member(1, 2, "h");
    Conflict c{Field::kRank, {}};
    for (int k = 0; k < n; ++k)
      c.values.push_back(Observation{Field::kRank, "torch", "RANK", "1"});
    r.conflicts.push_back(c);
    auto back = decode_unfitted(r);
    REQUIRE(!back.ok());
    CHECK(back.error().message == "malformed hello: a conflict names fewer than two sources");
  }
}

TEST_CASE("protocol: every truncation of a hello fails cleanly") {
  auto frame = encode(Hello{test::member(3, 4, "gpu-01", 3, 4), {}, {}, {}});
  std::vector<uint8_t> full(frame.begin() + kHeaderSize, frame.end());
  for (size_t n = 0; n < full.size(); ++n) {
    auto back = decode_hello(std::span(full).first(n));
    REQUIRE(!back.ok());
  }
  CHECK(decode_hello(full).ok());
}

TEST_CASE("protocol: challenge, admit, reject, verdict round-trip") {
  Challenge c;
  c.nonce[3] = 7;
  c.master_version = "0.1.0";
  c.job_id = "48213";
  auto cb = decode_challenge(payload_of(encode(c)));
  REQUIRE(cb.ok());
  CHECK(cb->nonce == c.nonce);
  CHECK(cb->job_id == "48213");

  auto ab = decode_admit(payload_of(encode(Admit{5, 8})));
  REQUIRE(ab.ok());
  CHECK(ab->joined_ranks == 5);

  auto rb = decode_reject(payload_of(encode(Reject{RejectCode::kForeignJob, "job 'x'"})));
  REQUIRE(rb.ok());
  CHECK(rb->code == RejectCode::kForeignJob);
  CHECK(rb->reason == "job 'x'");

  Verdict v;
  v.exit_code = 4;
  v.headline = "rank 9 did not join";
  v.headline_id = "missing-rank";
  v.errors = 1;
  v.joined_ranks = 15;
  v.notes.push_back(Finding{FindingId::kDuplicateRank, Severity::kError, 3, "m", "h", {}, {}});
  std::array<uint8_t, kNcclIdSize> id{};
  id[127] = 1;
  v.nccl_id = id;
  v.watch_port = 41234;
  auto vb = decode_verdict(payload_of(encode(v)));
  REQUIRE(vb.ok());
  CHECK(vb->exit_code == 4);
  CHECK(vb->watch_port == 41234);
  CHECK(vb->headline == v.headline);
  CHECK(vb->headline_id == "missing-rank");
  REQUIRE(vb->notes.size() == 1);
  CHECK(vb->notes[0].name() == "duplicate-rank");
  CHECK(vb->notes[0].exit_code == exit_code::kMismatch);  // its kind's, not the wire's
  CHECK(vb->notes[0].message == "m");
  REQUIRE(vb->nccl_id.has_value());
  CHECK((*vb->nccl_id)[127] == 1);
}

TEST_CASE_METHOD(SignedConnection,
                 "protocol: a signed hello and verdict verify only with the token and the nonces") {
  Hello h{test::member(1, 2, "gpu-01"), client, {}, {}};
  auto frame = encode_signed(h, token, server);
  auto payload = std::span<const uint8_t>(frame).subspan(kHeaderSize);
  CHECK(verify_hello(payload, token, server));
  CHECK(!verify_hello(payload, other, server));  // another token
  Nonce fresh = server;
  fresh[15] = 9;
  CHECK(!verify_hello(payload, token, fresh));  // replayed to another connection
  std::vector<uint8_t> tampered(payload.begin(), payload.end());
  tampered[10] ^= 1;
  CHECK(!verify_hello(tampered, token, server));
  CHECK(decode_hello(payload).ok());

  Verdict v;
  v.exit_code = 0;
  auto vf = encode_signed(v, token, server, client);
  auto vp = std::span<const uint8_t>(vf).subspan(kHeaderSize);
  CHECK(verify_verdict(vp, token, server, client, true));
  CHECK(!verify_verdict(vp, token, server, fresh, true));  // a verdict meant for another member
  CHECK(!verify_verdict(vp, other, server, client, true));
  CHECK(decode_verdict(vp).ok());
}

TEST_CASE_METHOD(SignedConnection,
                 "protocol: a go verdict's MAC does not pass for a final verdict's") {
  Verdict go;
  go.final = false;
  go.run_gpu = true;
  go.nccl_id = std::array<uint8_t, kNcclIdSize>{};
  auto gf = encode_signed(go, token, server, client);
  auto gp = std::span<const uint8_t>(gf).subspan(kHeaderSize);
  CHECK(verify_verdict(gp, token, server, client, false));
  CHECK(!verify_verdict(gp, token, server, client, true));  // replayed after the stage
  Verdict last;
  auto lf = encode_signed(last, token, server, client);
  auto lp = std::span<const uint8_t>(lf).subspan(kHeaderSize);
  CHECK(verify_verdict(lp, token, server, client, true));
  CHECK(!verify_verdict(lp, token, server, client, false));
}

TEST_CASE_METHOD(
    SignedConnection,
    "protocol: a stage report verifies only with the token and its connection's nonces") {
  RankResult r;
  r.rank = 3;
  r.init_ok = r.allreduce_ok = r.allreduce_done = true;
  StageReport m{{r}, {}};
  auto frame = encode_signed(m, token, server, client);
  auto p = payload_of(frame);
  CHECK(verify_stage_report(p, token, server, client));
  CHECK(!verify_stage_report(p, other, server, client));
  Nonce fresh = client;
  fresh[15] = 9;
  CHECK(!verify_stage_report(p, token, server, fresh));  // another member's connection
  std::vector<uint8_t> forged(p.begin(), p.end());
  forged[4] ^= 1;  // the rank
  CHECK(!verify_stage_report(forged, token, server, client));
  auto unsigned_frame = encode(m);
  CHECK(!verify_stage_report(payload_of(unsigned_frame), token, server, client));
  // A verdict's MAC over the same bytes is not a stage report's.
  CHECK(!verify_verdict(p, token, server, client, true));
  auto back = decode_stage_report(p);
  REQUIRE(back.ok());
  CHECK(back->ranks.at(0).rank == 3);
}

TEST_CASE("protocol: a job tag tells the same job and token apart and names neither") {
  JobToken token = JobToken::from_secret("0123456789abcdef-job-token");
  JobToken other = JobToken::from_secret("0123456789abcdef-other-one");
  Nonce n{};
  n[3] = 7;
  std::string tag = job_tag(token, n, "job-48213");
  CHECK(tag.rfind("tag:", 0) == 0);
  CHECK(tag.size() == 4 + 2 * kMacSize);
  CHECK(tag.find("48213") == std::string::npos);
  CHECK(tag == job_tag(token, n, "job-48213"));
  CHECK(tag != job_tag(token, n, "job-48214"));
  CHECK(tag != job_tag(other, n, "job-48213"));
  Nonce m = n;
  m[0] = 1;
  CHECK(tag != job_tag(token, m, "job-48213"));  // fresh per connection
  // It fits where the challenge carries the job id.
  Challenge c{n, "", tag, true};
  auto back = decode_challenge(payload_of(encode(c)));
  REQUIRE(back.ok());
  CHECK(back->job_id == tag);
}

TEST_CASE("job token: a MAC of zeros never verifies") {
  JobToken token = JobToken::from_secret("0123456789abcdef-job-token");
  Nonce n{};
  REQUIRE(token.mac(kVerdictLabel, n, n, {}).has_value());
  CHECK(!token.verify(Mac{}, kVerdictLabel, n, n, {}));
}

TEST_CASE("random bytes: a nonce is filled") {
  Nonce a{};
  Nonce b{};
  REQUIRE(fill_random(a).ok());
  REQUIRE(fill_random(b).ok());
  CHECK(a != b);
  std::vector<uint8_t> none;
  CHECK(fill_random(none).ok());
}

// ----- every encoder fits its decoder's caps ---------------------------------

namespace {

Finding huge_note(int k) {
  Finding f;
  f.id = FindingId::kNcclInterfaceSharedAddress;  // the longest name
  f.severity = k % 2 ? Severity::kWarning : Severity::kError;
  f.message = std::string(1500, 'm');
  f.fix = std::string(700, 'h');
  for (long r = 0; r < 1000; ++r)
    f.ranks.push_back(r);
  for (int h = 0; h < 40; ++h)
    f.hosts.push_back(std::string(300, char('a' + h % 26)));
  return f;
}

}  // namespace

TEST_CASE("protocol: a verdict of the largest notes still fits its cap and decodes") {
  Verdict v;
  v.exit_code = 3;
  v.final = false;
  v.run_gpu = true;
  v.headline = std::string(900, 'H');
  v.nccl_id = std::array<uint8_t, kNcclIdSize>{};
  for (int k = 0; k < 11; ++k)
    v.notes.push_back(huge_note(k));
  auto frame = encode(v);
  REQUIRE(frame.size() - kHeaderSize <= payload_cap(uint16_t(MsgType::kVerdict)));
  auto back = decode_verdict(payload_of(frame));
  REQUIRE(back.ok());
  CHECK(back->exit_code == 3);
  CHECK(back->headline.size() == 512);
  REQUIRE(back->notes.size() == kMaxVerdictNotes);
  for (const Finding& f : back->notes) {
    CHECK(!f.ranks.empty());
    CHECK(!f.hosts.empty());
    CHECK(f.message.size() > 200);  // cut, but still says something
  }
  CHECK(back->notes[1].severity == Severity::kWarning);
  const std::string& last = back->notes.back().message;
  std::string more = "(and 3 more findings about this member: see rank 0's report)";
  REQUIRE(last.size() > more.size());
  CHECK(last.substr(last.size() - more.size()) == more);
  REQUIRE(back->nccl_id.has_value());
}

TEST_CASE("protocol: notes that fit travel whole; one more than the cap is announced") {
  Verdict v;
  for (int k = 0; k < 9; ++k) {
    v.notes.push_back(Finding{FindingId::kMissingRank,
                              Severity::kError,
                              4,
                              fmt::format("rank {}", k),
                              "start it",
                              {long(k)},
                              {"gpu-01"}});
  }
  auto back = decode_verdict(payload_of(encode(v)));
  REQUIRE(back.ok());
  REQUIRE(back->notes.size() == 8);
  CHECK(back->notes[0].message == "rank 0");
  CHECK(back->notes[0].fix == "start it");
  CHECK(back->notes[0].ranks == std::vector<long>{0});
  CHECK(back->notes[0].exit_code == exit_code::kIncomplete);  // missing-rank's own
  // A note of a finding this build does not know (a newer master's) is left out.
  auto frame = encode(v);
  std::string bytes(frame.begin(), frame.end());
  for (size_t at = bytes.find("missing-rank"); at != std::string::npos;
       at = bytes.find("missing-rank", at + 1)) {
    bytes[at + 11] = 'X';
  }
  auto newer = decode_verdict(payload_of(std::vector<uint8_t>(bytes.begin(), bytes.end())));
  REQUIRE(newer.ok());
  CHECK(newer->notes.empty());
  CHECK(back->notes[7].message ==
        "rank 7 (and 1 more finding about this member: see rank 0's report)");
}

TEST_CASE("protocol: a cut never splits a UTF-8 character") {
  Verdict v;
  std::string euros;
  for (int k = 0; k < 400; ++k)
    euros += "€";  // 3 bytes each: 1200 bytes, over the message's 1024
  v.notes.push_back(Finding{FindingId::kEnvMismatch, Severity::kWarning, 3, euros, "", {1}, {"h"}});
  auto back = decode_verdict(payload_of(encode(v)));
  REQUIRE(back.ok());
  CHECK(back->notes[0].message.size() == 1023);
  CHECK(back->notes[0].message == euros.substr(0, 1023));
}

TEST_CASE("protocol: a stage report of 64 ranks with long NCCL errors fits and decodes") {
  StageReport m;
  for (int k = 0; k < 64; ++k) {
    RankResult r;
    r.rank = k;
    r.init_error = std::string(400, 'i');
    r.allreduce_error = k == 0 ? std::string("short") : std::string(400, 'a');
    r.init_ms = 12.5;
    r.expected = r.got = 2080;
    m.ranks.push_back(r);
  }
  auto frame = encode(m);
  REQUIRE(frame.size() - kHeaderSize <= payload_cap(uint16_t(MsgType::kStageResult)));
  auto back = decode_stage_report(payload_of(frame));
  REQUIRE(back.ok());
  REQUIRE(back->ranks.size() == 64);
  CHECK(back->ranks[63].rank == 63);
  CHECK(back->ranks[0].allreduce_error == "short");
  CHECK(back->ranks[5].init_error.size() > 64);
  CHECK(back->ranks[5].init_error.size() == back->ranks[5].allreduce_error.size());
  CHECK(back->ranks[9].expected == 2080);

  // One rank's report is not cut at all (but to the field's own cap).
  StageReport one;
  one.ranks.push_back(m.ranks[1]);
  auto b1 = decode_stage_report(payload_of(encode(one)));
  REQUIRE(b1.ok());
  CHECK(b1->ranks[0].init_error == std::string(256, 'i'));
}

TEST_CASE("protocol: a stage report carries NCCL's own words, once per process") {
  RankResult r;
  r.rank = 4;
  r.init_error = "ncclCommGetAsyncError: unhandled system error";
  r.nccl_warn =
      "Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_0:1, curr state "
      "INIT, next state RTR, local GID index 3, local GID ::ffff:10.0.0.1, remote GID "
      "::ffff:10.0.0.2";
  r.nccl_finding = "nccl-network-error";
  r.nccl_net = "IB";
  r.ib_moved = "mlx5_0:1 symbol_error +12, link_downed +1";
  RankResult quiet;
  quiet.rank = 5;
  quiet.init_ok = quiet.allreduce_ok = quiet.allreduce_done = true;
  // A member of three ranks: the first two share one process's words, the last has none.
  RankResult same = r;
  same.rank = 6;
  StageReport m{{r, same, quiet}, {}};
  auto frame = encode(m);
  auto back = decode_stage_report(payload_of(frame));
  REQUIRE(back.ok());
  REQUIRE(back->ranks.size() == 3);
  for (size_t i : {size_t(0), size_t(1)}) {
    CHECK(back->ranks[i].nccl_warn == r.nccl_warn);
    CHECK(back->ranks[i].nccl_finding == "nccl-network-error");
    CHECK(back->ranks[i].nccl_net == "IB");
    CHECK(back->ranks[i].ib_moved == r.ib_moved);
  }
  CHECK(back->ranks[2].ib_moved.empty());
  CHECK(back->ranks[1].rank == 6);
  CHECK(back->ranks[2].nccl_warn.empty());
  CHECK(back->ranks[2].nccl_net.empty());
  CHECK(back->ranks[2].rank == 5);
  // Said once: the second rank's words cost one byte, not the text again.
  StageReport alone{{r}, {}};
  CHECK(frame.size() < encode(alone).size() + encode(StageReport{{quiet}, {}}).size() + 80);

  // Covered by the MAC as the rest is.
  JobToken token = JobToken::from_secret("0123456789abcdef-job-token");
  Nonce server{}, client{};
  auto signed_frame = encode_signed(m, token, server, client);
  std::vector<uint8_t> forged(payload_of(signed_frame).begin(), payload_of(signed_frame).end());
  std::string text(forged.begin(), forged.end());
  size_t at = text.find("mlx5_0");
  REQUIRE(at != std::string::npos);
  forged[at + 5] = '1';
  CHECK(verify_stage_report(payload_of(signed_frame), token, server, client));
  CHECK(!verify_stage_report(forged, token, server, client));
}

TEST_CASE("protocol: NCCL's words that claim the previous rank's on the first rank are refused") {
  RankResult r;
  r.rank = 0;
  r.nccl_net = "IB";
  auto frame = encode(StageReport{{r}, {}});
  std::vector<uint8_t> p(payload_of(frame).begin(), payload_of(frame).end());
  // The words' kind sits after the fixed fields; make it "the previous rank's".
  size_t kind_at = 4 + 4 + 1 + 4 + 8 + 4 + 8 + 8 + 8 + 8 + 8 + 8;
  REQUIRE(p[kind_at] == 1);
  p[kind_at] = 2;
  auto back = decode_stage_report(p);
  REQUIRE(!back.ok());
  CHECK(back.error().message.find("neither its own nor the previous rank's") != std::string::npos);
}

TEST_CASE("protocol: a stage report of 64 ranks with long errors and NCCL's words fits") {
  StageReport m;
  for (int k = 0; k < 64; ++k) {
    RankResult r;
    r.rank = k;
    r.init_error = std::string(400, 'i');
    r.allreduce_error = std::string(400, 'a');
    r.nccl_warn = std::string(400, char('A' + k % 26));  // each rank's own
    r.nccl_finding = std::string(100, 'f');
    r.nccl_net = std::string(100, 'n');
    r.ib_moved = std::string(300, 'm');
    m.ranks.push_back(r);
  }
  auto frame = encode(m);
  REQUIRE(frame.size() - kHeaderSize <= payload_cap(uint16_t(MsgType::kStageResult)));
  auto back = decode_stage_report(payload_of(frame));
  REQUIRE(back.ok());
  CHECK(back->ranks[7].nccl_warn.size() == back->ranks[7].init_error.size());
  CHECK(back->ranks[7].nccl_finding.size() == 64);
  CHECK(back->ranks[7].nccl_net.size() == 64);
  CHECK(back->ranks[7].ib_moved.size() == back->ranks[7].init_error.size());
  // Alone, a warning travels to its own cap.
  auto one = decode_stage_report(payload_of(encode(StageReport{{m.ranks[3]}, {}})));
  REQUIRE(one.ok());
  CHECK(one->ranks[0].nccl_warn == std::string(320, 'D'));
  CHECK(one->ranks[0].init_error == std::string(256, 'i'));
  CHECK(one->ranks[0].ib_moved == std::string(200, 'm'));
}

TEST_CASE("protocol: a stage result of an older version is told apart from a malformed one") {
  // Version 1 knew no NCCL words: its frame is named by its version, not misread.
  RankResult r;
  r.rank = 1;
  auto now = encode(StageReport{{r}, {}});
  std::vector<uint8_t> payload(now.begin() + kHeaderSize, now.end());
  FrameBuffer buf;
  uint16_t peer = 0;
  buf.feed(encode_frame(MsgType::kStageResult, payload, 1));
  auto got = buf.next(&peer);
  REQUIRE(!got.ok());
  CHECK(got.error().fault == Fault::kOtherVersion);
  CHECK(peer == 1);
  CHECK(got.error().message ==
        fmt::format("protocol version 1 (this rankcheck speaks {})", kProtocolVersion));
}

TEST_CASE("protocol: a hello with every list at its largest fits and decodes") {
  Record r = test::member(8, 16, std::string(300, 'h'));
  std::vector<EnvVar> env;
  for (int k = 0; k < 200; ++k)
    env.push_back({fmt::format("NCCL_VAR_{:03d}", k), std::string(5000, char('a' + k % 26))});
  test::set_env(r, env);
  Conflict c{Field::kWorldSize, {}};
  for (int k = 0; k < 20; ++k)
    c.values.push_back({Field::kWorldSize, "slurm", std::string(600, 'V'), std::string(600, '4')});
  for (int f = 0; f < kFieldCount + 2; ++f)
    r.conflicts.push_back(c);
  std::vector<std::string> many;
  for (int k = 0; k < 100; ++k)
    many.push_back(std::string(100, 'e'));
  r.interfaces = many;
  r.master_resolved = many;
  r.node_list = std::string(5000, 'n');
  for (int k = 0; k < 80; ++k)
    r.gpu.devices.push_back(
        GpuDevice{k, k, std::string(100, 'u'), std::string(100, 'p'), std::string(200, 'g'), 1});
  r.gpu.granted_by = std::string(300, 'b');
  r.pcie.flags = PcieFacts::kRead;
  for (int k = 0; k < 200; ++k) {
    PcieDevice d;
    d.bdf = std::string(40, 'd');
    d.name = d.nic = d.near_nic = std::string(60, 'n');
    d.iommu_type = std::string(40, 't');
    d.near_why = std::string(100, 'w');
    r.pcie.devices.push_back(d);
    r.pcie.acs.push_back({std::string(40, 'a'), 0x1d});
  }
  r.pcie.cmdline = std::string(400, 'c');
  r.pcie.topo_error = std::string(1000, 'e');
  auto frame = encode(Hello{r, {}, {}, {}});
  REQUIRE(frame.size() - kHeaderSize <= payload_cap(uint16_t(MsgType::kHello)));
  auto back = decode_hello(payload_of(frame));
  REQUIRE(back.ok());
  const Record& d = back->record;
  CHECK(d.host == std::string(255, 'h'));
  CHECK(d.env.size() == kMaxEnvVars);
  CHECK(d.env[0].name == "NCCL_VAR_000");
  CHECK(d.env[0].value.size() > 100);  // each value cut to an even share
  CHECK(d.env_digest == env_digest(d.env.get()));
  CHECK(!d.conflicts.empty());
  CHECK(d.gpu.devices.size() == size_t(kMaxRanksPerMember));
  CHECK(!d.pcie.devices.empty());  // the first, within the PCIe facts' budget
  CHECK(d.pcie.devices.size() < 96);

  // The same record trimmed in place is what travels: the master's own record
  // compares with its members'.
  Record fitted = r;
  CHECK(fit_hello(fitted));
  CHECK(fitted.env_digest == d.env_digest);
}

TEST_CASE("protocol: fitting leaves a record a hello carries untouched") {
  Record r = test::member(5, 8, "gpu-02", 1, 4);
  test::set_env(r, {{"NCCL_IB_HCA", std::string(4096, 'x')}, {"NCCL_SOCKET_IFNAME", "eth0"}});
  Record same = r;
  CHECK(!fit_hello(same));
  CHECK(same.env == r.env);
  CHECK(same.env_digest == r.env_digest);
}

TEST_CASE("job token: loaded from a file, trailing newline dropped, short ones refused") {
  char path[] = "/tmp/rankcheck-token-test-XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "short\n", 6) == 6);
  ::close(fd);
  auto t = JobToken::load(path);
  REQUIRE(!t.ok());
  CHECK(t.error().message.find("5 bytes; a token needs at least 16") != std::string::npos);
  std::FILE* f = std::fopen(path, "w");
  std::fputs("0123456789abcdef0123\n", f);
  std::fclose(f);
  ::chmod(path, 0644);
  std::string warning;
  auto ok = JobToken::load(path, &warning);
  REQUIRE(ok.ok());
  CHECK(warning.find("can be read by other users (mode 644)") != std::string::npos);
  // The newline is not part of the secret: the same token as without it.
  JobToken same = JobToken::from_secret("0123456789abcdef0123");
  Nonce n{};
  CHECK(ok->mac("x", n, n, {}) == same.mac("x", n, n, {}));
  std::remove(path);
}
