#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fcntl.h>
#include <fmt/format.h>
// SHA256_Init and the rest are deprecated in OpenSSL 3.0 (see JobToken::Keyed).
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "protocol/auth.h"

namespace rankcheck {
namespace {

// Reads and closes `fd`: at most kMaxTokenFileSize bytes (one more is an
// error), trailing newlines dropped. A descriptor with nothing more to read now
// (EAGAIN) has ended.
Result<std::string> read_secret(int fd, const std::string& what) {
  constexpr auto kMax = static_cast<size_t>(JobToken::kMaxTokenFileSize);
  std::string secret(kMax + 1, '\0');
  size_t got = 0;
  while (got < secret.size()) {
    ssize_t n = ::read(fd, secret.data() + got, secret.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return Error{fmt::format("{}: {}", what, std::strerror(err))};
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got > kMax) return Error{fmt::format("{}: more than a token ({} bytes at most)", what, kMax)};
  secret.resize(got);
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r'))
    secret.pop_back();
  return secret;
}

}  // namespace

Result<JobToken> JobToken::load(const std::string& path, std::string* warning) {
  // Read through one descriptor, checked with fstat: what is checked is what is
  // read. Symbolic links are followed (a Kubernetes Secret's files are links into
  // a timestamped folder); what they lead to must be a small regular file.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Error{fmt::format("job token file {}: {}", path, std::strerror(errno))};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Error{fmt::format("job token file {}: {}", path, std::strerror(err))};
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return Error{fmt::format(
        "job token file {} is a directory: give the file inside it (for a Kubernetes Secret "
        "mounted there, the file named after the Secret's key, e.g. {}/token)",
        path, path)};
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{fmt::format(
        "job token file {} is not a regular file (a pipe, a device?): write the token into a "
        "file (`openssl rand -hex 32 > FILE`)",
        path)};
  }
  if (st.st_size > kMaxTokenFileSize) {
    ::close(fd);
    return Error{fmt::format("job token file {}: {} bytes, more than a token ({} at most)", path,
                             st.st_size, kMaxTokenFileSize)};
  }
  auto secret = read_secret(fd, fmt::format("job token file {}", path));
  if (!secret) return secret.error();
  if (secret->size() < 16) {
    return Error{
        fmt::format("job token file {}: {} bytes; a token needs at least 16 (e.g. "
                    "`openssl rand -hex 32 > {}`)",
                    path, secret->size(), path)};
  }
  if (warning != nullptr && (st.st_mode & 0077) != 0) {
    *warning = fmt::format(
        "job token file {} can be read by other users (mode {:o}): "
        "chmod 600 it",
        path, st.st_mode & 0777);
  } else if (warning != nullptr && st.st_uid != ::geteuid() && st.st_uid != 0) {
    *warning = fmt::format(
        "job token file {} belongs to another user (uid {}): whoever owns it can change it", path,
        st.st_uid);
  }
  return JobToken(std::move(*secret));
}

Result<JobToken> JobToken::load_fd(int fd) {
  std::string what = fmt::format("job token descriptor {}", fd);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    return Error{fmt::format("{}: {}", what, std::strerror(fd < 0 ? EBADF : errno))};
  }
  if (!S_ISFIFO(st.st_mode) && !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{what + " is neither a pipe nor a file (a terminal, a device?)"};
  }
  // Never wait on it: what the parent wrote is there, and the rest is its end.
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  auto secret = read_secret(fd, what);
  if (!secret) return secret.error();
  if (secret->size() < 16) {
    return Error{fmt::format("{}: {} bytes; a token needs at least 16", what, secret->size())};
  }
  return JobToken(std::move(*secret));
}

// HMAC-SHA256 (RFC 2104) over OpenSSL's SHA-256: the key's inner and outer padded
// blocks hashed once, and each MAC a copy of those two states, a plain struct each.
// OpenSSL 3's EVP_MAC_CTX_dup and 1.1.1's HMAC_CTX_copy allocate a context per MAC
// and go through the provider's dispatch for every part: a fifth of rank 0's CPU
// at 100k ranks (three MACs a member). The SHA256_* calls are what 3.0 deprecates,
// not removes; the release's OpenSSL 1.1.1 has them too.
struct JobToken::Keyed {
  SHA256_CTX inner{}, outer{};
  static std::shared_ptr<const Keyed> make(const std::string& secret);
};

std::shared_ptr<const JobToken::Keyed> JobToken::Keyed::make(const std::string& secret) {
  if (secret.empty()) return nullptr;
  constexpr size_t kBlock = 64;  // SHA-256's block
  std::array<uint8_t, kBlock> key{};
  if (secret.size() > kBlock) {
    SHA256(reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), key.data());
  } else {
    std::memcpy(key.data(), secret.data(), secret.size());
  }
  auto k = std::make_shared<Keyed>();
  std::array<uint8_t, kBlock> pad{};
  for (size_t i = 0; i < kBlock; ++i)
    pad[i] = key[i] ^ 0x36;
  bool ok = SHA256_Init(&k->inner) == 1 && SHA256_Update(&k->inner, pad.data(), kBlock) == 1;
  for (size_t i = 0; i < kBlock; ++i)
    pad[i] = key[i] ^ 0x5c;
  ok = ok && SHA256_Init(&k->outer) == 1 && SHA256_Update(&k->outer, pad.data(), kBlock) == 1;
  OPENSSL_cleanse(key.data(), key.size());
  OPENSSL_cleanse(pad.data(), pad.size());
  if (!ok) return nullptr;
  return k;
}

JobToken::JobToken(std::string secret) : secret_(std::move(secret)) {
  // SHA-256 alone needs no OpenSSL initialisation: no openssl.cnf, no name tables,
  // no error strings, no cleanup at exit (loading them was a tenth of a member's CPU).
  keyed_ = Keyed::make(secret_);
}

std::optional<Mac> JobToken::mac(std::string_view label, std::span<const uint8_t> server_nonce,
                                 std::span<const uint8_t> client_nonce,
                                 std::span<const uint8_t> body) const {
  // A failed HMAC leaves no MAC at all: never a zero one that a zero MAC would match.
  if (!keyed_) return std::nullopt;
  SHA256_CTX c = keyed_->inner;
  // Each part is length-prefixed, so that no two different messages share bytes to MAC.
  // The short parts (label, nonces) go in one update, the body in another.
  uint8_t head[256];
  size_t at = 0;
  bool ok = true;
  auto part = [&](const void* p, size_t n) {
    if (at + 4 + n > sizeof head) {
      ok = ok && SHA256_Update(&c, head, at) == 1;
      at = 0;
    }
    for (int i = 0; i < 4; ++i)
      head[at++] = static_cast<uint8_t>(static_cast<uint32_t>(n) >> (8 * i));
    if (n <= sizeof head - at) {
      if (n > 0) std::memcpy(head + at, p, n);
      at += n;
    } else {
      ok = ok && SHA256_Update(&c, head, at) == 1 && SHA256_Update(&c, p, n) == 1;
      at = 0;
    }
  };
  part(label.data(), label.size());
  part(server_nonce.data(), server_nonce.size());
  part(client_nonce.data(), client_nonce.size());
  part(body.data(), body.size());
  if (at > 0) ok = ok && SHA256_Update(&c, head, at) == 1;
  Mac inner{};
  ok = ok && SHA256_Final(inner.data(), &c) == 1;
  SHA256_CTX o = keyed_->outer;
  Mac out{};
  ok =
      ok && SHA256_Update(&o, inner.data(), inner.size()) == 1 && SHA256_Final(out.data(), &o) == 1;
  OPENSSL_cleanse(&c, sizeof c);
  OPENSSL_cleanse(&o, sizeof o);
  if (!ok) return std::nullopt;
  return out;
}

bool JobToken::verify(const Mac& mac, std::string_view label, std::span<const uint8_t> server_nonce,
                      std::span<const uint8_t> client_nonce, std::span<const uint8_t> body) const {
  std::optional<Mac> want = this->mac(label, server_nonce, client_nonce, body);
  return want && CRYPTO_memcmp(want->data(), mac.data(), kMacSize) == 0;
}

Status fill_random(std::span<uint8_t> out) {
  size_t got = 0;
  // getrandom(2) blocks only until the pool is first seeded, and returns at most
  // 32 MiB per call: a few calls at most, unless it fails (ENOSYS in an old
  // seccomp profile, EPERM): then /dev/urandom. The system call (Linux 3.17) is
  // made directly: glibc wraps it only from 2.25 on, and the release binary's
  // glibc floor should not hang on a wrapper (scripts/release.sh).
  for (int tries = 0; got < out.size() && tries < 16; ++tries) {
    long r = ::syscall(SYS_getrandom, out.data() + got, out.size() - got, 0U);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r < 0 && errno != EINTR) {
      break;
    }
  }
  if (got == out.size()) return ok_status();
  std::string why = std::strerror(errno);
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Error{
        fmt::format("no random bytes: getrandom: {}; /dev/urandom: {}", why, std::strerror(errno))};
  }
  for (int tries = 0; got < out.size() && tries < 16; ++tries) {
    ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0 || errno != EINTR) {
      break;
    }
  }
  int read_errno = errno;
  ::close(fd);
  if (got == out.size()) return ok_status();
  return Error{fmt::format("no random bytes: getrandom: {}; /dev/urandom: {}", why,
                           std::strerror(read_errno))};
}

}  // namespace rankcheck
