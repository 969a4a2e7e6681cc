#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <rankcheck/auth.h>

namespace rankcheck {

Result<JobToken> JobToken::load(const std::string& path, std::string* warning) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{fmt::format("job token file {}: {}", path, std::strerror(errno))};
  std::string secret((std::istreambuf_iterator<char>(in)), {});
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r'))
    secret.pop_back();
  if (secret.size() < 16) {
    return Error{
        fmt::format("job token file {}: {} bytes; a token needs at least 16 (e.g. "
                    "`openssl rand -hex 32 > {}`)",
                    path, secret.size(), path)};
  }
  struct stat st {};
  if (warning != nullptr && ::stat(path.c_str(), &st) == 0 && (st.st_mode & 0077) != 0) {
    *warning = fmt::format(
        "job token file {} can be read by other users (mode {:o}): "
        "chmod 600 it",
        path, st.st_mode & 0777);
  }
  return JobToken(std::move(secret));
}

Mac JobToken::mac(std::string_view label, std::span<const uint8_t> server_nonce,
                  std::span<const uint8_t> client_nonce, std::span<const uint8_t> body) const {
  // Each part is length-prefixed, so that no two different messages share bytes to MAC.
  std::string data;
  for (std::string_view part :
       {label,
        std::string_view(reinterpret_cast<const char*>(server_nonce.data()), server_nonce.size()),
        std::string_view(reinterpret_cast<const char*>(client_nonce.data()), client_nonce.size()),
        std::string_view(reinterpret_cast<const char*>(body.data()), body.size())}) {
    uint32_t n = static_cast<uint32_t>(part.size());
    for (int i = 0; i < 4; ++i)
      data.push_back(static_cast<char>(n >> (8 * i)));
    data.append(part);
  }
  Mac out{};
  unsigned int len = 0;
  ::HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
         reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &len);
  return out;
}

bool JobToken::verify(const Mac& mac, std::string_view label, std::span<const uint8_t> server_nonce,
                      std::span<const uint8_t> client_nonce, std::span<const uint8_t> body) const {
  Mac want = this->mac(label, server_nonce, client_nonce, body);
  return CRYPTO_memcmp(want.data(), mac.data(), kMacSize) == 0;
}

void fill_random(std::span<uint8_t> out) {
  size_t got = 0;
  while (got < out.size()) {
    ssize_t r = ::getrandom(out.data() + got, out.size() - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
}

}  // namespace rankcheck
