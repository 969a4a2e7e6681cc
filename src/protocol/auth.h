#pragma once
// The job token: a secret every process of one job can read (a file only the job
// can read, a Kubernetes Secret). With it, every hello and every verdict carries
// an HMAC-SHA256 over the master's fresh nonce, the member's nonce and the
// message, so a process without the token cannot join, a replayed hello from
// another run is refused, and members know the verdict came from their master.
// It authenticates; it does not encrypt.

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/result.h"

namespace rankcheck {

inline constexpr size_t kMacSize = 32;
using Mac = std::array<uint8_t, kMacSize>;

class JobToken {
 public:
  /// Reads the token from `path` (trailing newlines dropped). Refuses an empty or
  /// short (< 16 bytes) token; `warning` gets a note if others can read the file.
  static Result<JobToken> load(const std::string& path, std::string* warning = nullptr);
  /// A token file larger than this is refused: a token is a line of hex, and a
  /// path naming /dev/zero or a log file must not be read forever.
  static constexpr long kMaxTokenFileSize = 4096;
  /// Reads the token from an inherited descriptor (a pipe its parent filled and
  /// closed: `rankcheck local` hands its members the token so, leaving no file
  /// behind), at most kMaxTokenFileSize bytes, without waiting; closes it.
  static Result<JobToken> load_fd(int fd);
  static JobToken from_secret(std::string secret) { return JobToken(std::move(secret)); }

  /// HMAC-SHA256(token, label | server nonce | client nonce | body); nullopt when
  /// the HMAC itself fails (no memory, a FIPS policy).
  std::optional<Mac> mac(std::string_view label, std::span<const uint8_t> server_nonce,
                         std::span<const uint8_t> client_nonce,
                         std::span<const uint8_t> body) const;
  /// The same, compared in constant time; false when the HMAC fails.
  bool verify(const Mac& mac, std::string_view label, std::span<const uint8_t> server_nonce,
              std::span<const uint8_t> client_nonce, std::span<const uint8_t> body) const;

 private:
  explicit JobToken(std::string secret);
  std::string secret_;  // never printed
  // The HMAC state after the key, made once and copied for each MAC: a rank 0 of
  // 100,000 members makes hundreds of thousands, and OpenSSL 3 would otherwise look
  // the algorithm up and hash the key again for each. Read-only once made, so that
  // a member's relay thread may MAC alongside its main thread. Null when OpenSSL
  // refused it: every MAC then fails.
  struct Keyed;
  std::shared_ptr<const Keyed> keyed_;
};

/// Fresh random bytes for a nonce or a token (getrandom, else /dev/urandom); an
/// error when neither gives them.
[[nodiscard]] Status fill_random(std::span<uint8_t> out);

/// What each MAC is over, so that no message's MAC is valid for another kind.
inline constexpr std::string_view kHelloLabel = "rankcheck hello 1";
/// A final verdict (after the GPU stage, or the only one).
inline constexpr std::string_view kVerdictLabel = "rankcheck verdict 1";
/// A go verdict (the GPU stage follows): replayed where the final verdict
/// belongs, its MAC does not verify.
inline constexpr std::string_view kGoVerdictLabel = "rankcheck go verdict 1";
/// A member's GPU stage results, on the connection its hello authenticated.
inline constexpr std::string_view kStageLabel = "rankcheck stage result 1";
/// The job id as a challenge shows it with a job token: a tag only token
/// holders can compute, so that the challenge names no job to a stranger.
inline constexpr std::string_view kJobTagLabel = "rankcheck job tag 1";
/// A host's relay introducing itself to the master (relay.h).
inline constexpr std::string_view kRelayLabel = "rankcheck relay 1";
/// The rehearsal's plan (master -> member) and its report (member -> master), on
/// the connection its hello authenticated: each its own label, so that neither
/// stands in for the other, and one of each per connection.
inline constexpr std::string_view kPathPlanLabel = "rankcheck path plan 1";
inline constexpr std::string_view kPathReportLabel = "rankcheck path report 1";
/// A plan target's ticket: the master's word that a prober may ask that listener
/// (over the ticket's nonce and the listener's identity).
inline constexpr std::string_view kPathTicketLabel = "rankcheck path ticket 1";
/// A relay's proof to a member that it holds the token (over the member's nonce).
inline constexpr std::string_view kRelayProofLabel = "rankcheck relay proof 1";
/// The job under watch: a wrapper's hello, its events, and the watch server's orders,
/// each on the connection the hello authenticated.
inline constexpr std::string_view kWatchHelloLabel = "rankcheck watch hello 1";
inline constexpr std::string_view kWatchEventLabel = "rankcheck watch event 1";
inline constexpr std::string_view kWatchOrderLabel = "rankcheck watch order 1";
/// The name of a host's relay endpoint with a token: not guessable without it.
inline constexpr std::string_view kRelayEndpointLabel = "rankcheck relay endpoint 1";

}  // namespace rankcheck
