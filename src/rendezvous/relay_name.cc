// A host relay's name and its proof to members (relay.h): with a job token,
// neither can be made without it.

#include <fmt/format.h>
#include <unistd.h>

#include "base/text.h"
#include "rendezvous/relay.h"

namespace rankcheck {

namespace {

std::string safe_name(std::string_view s, size_t n) {
  std::string out;
  for (char ch : s.substr(0, n)) {
    bool ok = is_alnum(ch) || ch == '.' || ch == '-' || ch == ':';
    out += ok ? ch : '_';
  }
  return out;
}

}  // namespace

std::string relay_endpoint(const std::string& master_addr, uint16_t master_port,
                           std::string_view job_id, const JobToken* token) {
  if (token != nullptr) {
    // Only token holders can name it (ss -xl shows it once bound, when it is taken).
    std::string what = fmt::format("{}\n{}\n{}", job_id, master_port, master_addr);
    auto mac = token->mac(kRelayEndpointLabel, {}, {},
                          std::span(reinterpret_cast<const uint8_t*>(what.data()), what.size()));
    std::string tag;
    for (size_t i = 0; mac && i < 16; ++i)
      tag += fmt::format("{:02x}", (*mac)[i]);
    return fmt::format("rankcheck-relay/{}/t/{}", ::geteuid(), tag);
  }
  // Readable in `ss -xl`: the user, the port, the address and the job (odd bytes made safe).
  std::string name =
      fmt::format("rankcheck-relay/{}/{}/{}", ::geteuid(), master_port, safe_name(master_addr, 64));
  if (!job_id.empty()) name += "/" + safe_name(job_id, 100);
  return name.substr(0, 106);  // an abstract name's room (sun_path less its NUL)
}

Mac relay_proof(const JobToken& token, const Nonce& member_nonce, std::string_view job_id) {
  auto id = std::span(reinterpret_cast<const uint8_t*>(job_id.data()), job_id.size());
  return token.mac(kRelayProofLabel, member_nonce, {}, id).value_or(Mac{});
}

bool verify_relay_proof(const JobToken& token, std::span<const uint8_t> payload,
                        const Nonce& member_nonce, std::string_view job_id) {
  if (payload.size() != kMacSize) return false;
  Mac got{};
  std::copy(payload.begin(), payload.end(), got.begin());
  auto id = std::span(reinterpret_cast<const uint8_t*>(job_id.data()), job_id.size());
  return token.verify(got, kRelayProofLabel, member_nonce, {}, id);
}

}  // namespace rankcheck
