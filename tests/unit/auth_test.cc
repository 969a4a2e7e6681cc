// The job token: its MAC against a reference, and reading it from a pipe.

#include "protocol/auth.h"

#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include "protocol/messages.h"

using namespace rankcheck;

namespace {

std::string hex(const std::optional<Mac>& m) {
  std::string out;
  if (m) {
    for (uint8_t b : *m)
      out += fmt::format("{:02x}", b);
  }
  return out;
}

// The server's nonce 0..15, the client's 16..31, as in the known answers below.
std::pair<Nonce, Nonce> test_nonces() {
  Nonce server{}, client{};
  for (size_t i = 0; i < server.size(); ++i) {
    server[i] = static_cast<uint8_t>(i);
    client[i] = static_cast<uint8_t>(16 + i);
  }
  return {server, client};
}

}  // namespace

TEST_CASE("auth: the job token's MAC is HMAC-SHA256 over the length-prefixed parts") {
  // Known answers from Python's hmac module over the same bytes (each part's
  // length as 4 little-endian bytes, then the part): every build (OpenSSL 3 here,
  // 1.1.1 in the release) and every version must agree on the wire.
  JobToken token = JobToken::from_secret("0123456789abcdef0123456789abcdef");
  auto [server, client] = test_nonces();
  const std::string body = "abc";
  std::span<const uint8_t> body_bytes(reinterpret_cast<const uint8_t*>(body.data()), body.size());
  CHECK(hex(token.mac(kHelloLabel, server, client, body_bytes)) ==
        "c6a1b68b527d6188822468dc5dea6bbe7d444a3576a6dc3303d8ab76777d4b5b");
  CHECK(hex(token.mac(kVerdictLabel, {}, {}, {})) ==
        "999a569490a1e732ea57ce289f786ba450d7cca9e6314f81798fd0f02ba2701f");
  // The keyed state is copied, not used up: the same MAC again, and a copy of the
  // token agrees.
  JobToken copy = token;
  CHECK(hex(copy.mac(kHelloLabel, server, client, body_bytes)) ==
        hex(token.mac(kHelloLabel, server, client, body_bytes)));
  CHECK(token.verify(*token.mac(kVerdictLabel, {}, {}, {}), kVerdictLabel, {}, {}, {}));
  CHECK(!JobToken::from_secret("another token, not this job's")
             .verify(*token.mac(kVerdictLabel, {}, {}, {}), kVerdictLabel, {}, {}, {}));
}

TEST_CASE("auth: keys of SHA-256's block and longer, and a body past the MAC's buffer") {
  // The MAC is made from two SHA-256 states keyed once (RFC 2104): a key of 64 bytes
  // is used as it is, a longer one hashed first; a hello's body (hundreds of bytes)
  // goes past the buffer the short parts are gathered in. Known answers from
  // Python's hmac module, as above.
  auto [server, client] = test_nonces();
  std::vector<uint8_t> body(1000);
  for (size_t i = 0; i < body.size(); ++i)
    body[i] = static_cast<uint8_t>((i * 7) & 255);
  std::string block;
  for (int i = 0; i < 4; ++i)
    block += "0123456789abcdef";
  CHECK(hex(JobToken::from_secret(block).mac(kHelloLabel, server, client, body)) ==
        "10fecd1d96569a4aa2e78cdb217460026c0b1029a45689c13d101a0f738ce83c");
  JobToken longer = JobToken::from_secret(std::string(100, 'z'));
  CHECK(hex(longer.mac(kHelloLabel, server, client, body)) ==
        "4ab0ccbc82796332f740abfe8b9ee8548e39b361cffffeadb64534e0c5fccd02");
  const std::string abc = "abc";
  std::span<const uint8_t> abc_bytes(reinterpret_cast<const uint8_t*>(abc.data()), abc.size());
  CHECK(hex(longer.mac(kHelloLabel, server, client, abc_bytes)) ==
        "dcfbc883a888ea439851b8557d8939f180ec1c8c48ade94fcd10f4b0fac5e488");
}

TEST_CASE("auth: a job token from a pipe is read once, without waiting, and bounded") {
  // What `rankcheck local` hands each member instead of a file left behind.
  auto pipe_with = [](const std::string& text, bool close_writer) {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    if (!text.empty()) REQUIRE(::write(fds[1], text.data(), text.size()) == ssize_t(text.size()));
    if (close_writer) ::close(fds[1]);
    return std::pair<int, int>{fds[0], close_writer ? -1 : fds[1]};
  };
  auto [good, none] = pipe_with("0123456789abcdef0123456789abcdef\n", true);
  auto token = JobToken::load_fd(good);
  REQUIRE(token.ok());
  Nonce n{};
  CHECK(token->mac(kHelloLabel, n, n, {}) ==
        JobToken::from_secret("0123456789abcdef0123456789abcdef").mac(kHelloLabel, n, n, {}));
  CHECK(::fcntl(good, F_GETFD) == -1);  // closed once read

  // A writer that never writes, nor closes: refused at once, not waited on.
  auto [idle, writer] = pipe_with("", false);
  auto none_yet = JobToken::load_fd(idle);
  REQUIRE(!none_yet.ok());
  CHECK(none_yet.error().message.find("0 bytes; a token needs at least 16") != std::string::npos);
  ::close(writer);

  auto [shorter, w2] = pipe_with("short", true);
  CHECK(!JobToken::load_fd(shorter).ok());
  (void)none;
  (void)w2;
  CHECK(!JobToken::load_fd(-1).ok());
}
