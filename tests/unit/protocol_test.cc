#include <cstdio>

#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <rankcheck/protocol.h>

#include "helpers.h"

using namespace rankcheck;

namespace {
std::span<const uint8_t> payload_of(const std::vector<uint8_t>& frame) {
  auto h = decode_header(frame);
  REQUIRE(h.ok());
  REQUIRE(frame.size() == kHeaderSize + h->length);
  return std::span(frame).subspan(kHeaderSize);
}
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
  auto frame = encode(Hello{r, {}, {}});
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
}

TEST_CASE("protocol: a hello that lies about its environment digest is refused") {
  Record r = test::member(1, 2, "h");
  test::set_env(r, {{"NCCL_ALGO", "Ring"}});
  r.env_digest ^= 1;
  auto back = decode_hello(payload_of(encode(Hello{r, {}, {}})));
  REQUIRE(!back.ok());
  CHECK(back.error().message == "malformed hello: environment digest does not match");
}

TEST_CASE("protocol: a host name longer than the cap is refused, not allocated") {
  Record r = test::member(1, 2, std::string(64 * 1024 - 300, 'h'));
  auto frame = encode(Hello{r, {}, {}});
  auto back = decode_hello(std::span(frame).subspan(kHeaderSize));
  REQUIRE(!back.ok());
  CHECK(back.error().message == "malformed hello: host name of 65236 bytes exceeds 255");
}

TEST_CASE("protocol: every truncation of a hello fails cleanly") {
  auto frame = encode(Hello{test::member(3, 4, "gpu-01", 3, 4), {}, {}});
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
  v.errors = 1;
  v.joined_ranks = 15;
  v.notes.push_back(Finding{"duplicate-rank", Severity::kError, 3, "m", "h", {}, {}});
  std::array<uint8_t, kNcclIdSize> id{};
  id[127] = 1;
  v.nccl_id = id;
  auto vb = decode_verdict(payload_of(encode(v)));
  REQUIRE(vb.ok());
  CHECK(vb->exit_code == 4);
  CHECK(vb->headline == v.headline);
  REQUIRE(vb->notes.size() == 1);
  CHECK(vb->notes[0].id == "duplicate-rank");
  CHECK(vb->notes[0].message == "m");
  REQUIRE(vb->nccl_id.has_value());
  CHECK((*vb->nccl_id)[127] == 1);
}

TEST_CASE("protocol: a signed hello and verdict verify only with the token and the nonces") {
  JobToken token = JobToken::from_secret("0123456789abcdef-job-token");
  JobToken other = JobToken::from_secret("0123456789abcdef-other-one");
  Nonce server{};
  server[0] = 1;
  Nonce client{};
  client[0] = 2;
  Hello h{test::member(1, 2, "gpu-01"), client, {}};
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
  CHECK(verify_verdict(vp, token, server, client));
  CHECK(!verify_verdict(vp, token, server, fresh));  // a verdict meant for another member
  CHECK(!verify_verdict(vp, other, server, client));
  CHECK(decode_verdict(vp).ok());
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
