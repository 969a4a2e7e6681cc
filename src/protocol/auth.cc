#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/opensslv.h>
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
#include <openssl/core_names.h>
#include <openssl/params.h>
#endif
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

// OpenSSL 3 (the build's) through its MAC interface; 1.1.1 (the release's sysroot)
// through HMAC_CTX, which 3.0 deprecates. Both copy a keyed state per MAC.
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
struct JobToken::Keyed {
  EVP_MAC_CTX* ctx = nullptr;
  ~Keyed() { EVP_MAC_CTX_free(ctx); }
  EVP_MAC_CTX* copy() const { return EVP_MAC_CTX_dup(ctx); }
  static void drop(EVP_MAC_CTX* c) { EVP_MAC_CTX_free(c); }
  static bool update(EVP_MAC_CTX* c, const void* p, size_t n) {
    return EVP_MAC_update(c, static_cast<const unsigned char*>(p), n) == 1;
  }
  static bool final(EVP_MAC_CTX* c, Mac& out) {
    size_t len = 0;
    return EVP_MAC_final(c, out.data(), &len, out.size()) == 1 && len == kMacSize;
  }
  static std::shared_ptr<const Keyed> make(const std::string& secret);
};

std::shared_ptr<const JobToken::Keyed> JobToken::Keyed::make(const std::string& secret) {
  auto k = std::make_shared<Keyed>();
  EVP_MAC* hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (hmac == nullptr) return nullptr;
  k->ctx = EVP_MAC_CTX_new(hmac);
  EVP_MAC_free(hmac);  // the context holds its own reference
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  if (k->ctx == nullptr || secret.empty() ||
      EVP_MAC_init(k->ctx, reinterpret_cast<const unsigned char*>(secret.data()), secret.size(),
                   params) != 1) {
    return nullptr;
  }
  return k;
}
#else
struct JobToken::Keyed {
  HMAC_CTX* ctx = nullptr;
  ~Keyed() { HMAC_CTX_free(ctx); }
  HMAC_CTX* copy() const {
    HMAC_CTX* c = HMAC_CTX_new();
    // HMAC_CTX_copy only reads its source, though 1.1.1 declares it non-const.
    if (c != nullptr && HMAC_CTX_copy(c, const_cast<HMAC_CTX*>(ctx)) != 1) {
      HMAC_CTX_free(c);
      return nullptr;
    }
    return c;
  }
  static void drop(HMAC_CTX* c) { HMAC_CTX_free(c); }
  static bool update(HMAC_CTX* c, const void* p, size_t n) {
    return HMAC_Update(c, static_cast<const unsigned char*>(p), n) == 1;
  }
  static bool final(HMAC_CTX* c, Mac& out) {
    unsigned int len = 0;
    return HMAC_Final(c, out.data(), &len) == 1 && len == kMacSize;
  }
  static std::shared_ptr<const Keyed> make(const std::string& secret);
};

std::shared_ptr<const JobToken::Keyed> JobToken::Keyed::make(const std::string& secret) {
  auto k = std::make_shared<Keyed>();
  k->ctx = HMAC_CTX_new();
  if (k->ctx == nullptr || secret.empty() ||
      HMAC_Init_ex(k->ctx, secret.data(), static_cast<int>(secret.size()), EVP_sha256(), nullptr) !=
          1) {
    return nullptr;
  }
  return k;
}
#endif

JobToken::JobToken(std::string secret) : secret_(std::move(secret)) {
  // One HMAC-SHA256 needs neither openssl.cnf nor every cipher's name table nor
  // the error strings: loading them was a tenth of a member's CPU time. Nor a
  // cleanup at exit, which frees what the process's end frees anyway.
  static const bool initialised =
      OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG | OPENSSL_INIT_NO_ADD_ALL_CIPHERS |
                              OPENSSL_INIT_NO_ADD_ALL_DIGESTS |
                              OPENSSL_INIT_NO_LOAD_CRYPTO_STRINGS | OPENSSL_INIT_NO_ATEXIT,
                          nullptr) == 1;
  (void)initialised;  // a failure shows as a failed HMAC
  keyed_ = Keyed::make(secret_);
}

std::optional<Mac> JobToken::mac(std::string_view label, std::span<const uint8_t> server_nonce,
                                 std::span<const uint8_t> client_nonce,
                                 std::span<const uint8_t> body) const {
  // A failed HMAC leaves no MAC at all: never a zero one that a zero MAC would match.
  if (!keyed_) return std::nullopt;
  auto* c = keyed_->copy();
  if (c == nullptr) return std::nullopt;
  // Each part is length-prefixed, so that no two different messages share bytes to MAC.
  bool ok = true;
  auto part = [&](const void* p, size_t n) {
    uint8_t len[4];
    for (int i = 0; i < 4; ++i)
      len[i] = static_cast<uint8_t>(static_cast<uint32_t>(n) >> (8 * i));
    ok = ok && Keyed::update(c, len, sizeof len) && (n == 0 || Keyed::update(c, p, n));
  };
  part(label.data(), label.size());
  part(server_nonce.data(), server_nonce.size());
  part(client_nonce.data(), client_nonce.size());
  part(body.data(), body.size());
  Mac out{};
  ok = ok && Keyed::final(c, out);
  Keyed::drop(c);
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
