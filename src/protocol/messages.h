#pragma once
// The messages of the rendezvous, each encoded field by field into a frame.
//
//   member                          master
//     |  <------ challenge ---------  |   on accept: nonce, version, job id (with a
//     |                                |   job token: no version, the job's tag)
//     |  -------- hello ----------->  |   the member's record
//     |  <------ admit / reject ----  |
//     |  <------ verdict -----------  |   once, when the master decides
//     |  ------- stage result ----->  |   only when the verdict says go
//     |  <------ verdict (final) ---  |

#include <array>
#include <optional>

#include "model/finding.h"
#include "model/gpu.h"
#include "model/path.h"
#include "model/record.h"
#include "model/watch.h"
#include "protocol/auth.h"
#include "protocol/wire.h"

namespace rankcheck {

/// In a late member's refusal: the master decided with every rank, so the late
/// one is an extra copy (members tell it from a slow one by this phrase).
inline constexpr std::string_view kJobWasComplete = "the job was already complete";

inline constexpr size_t kNonceSize = 16;
inline constexpr size_t kNcclIdSize = 128;  // sizeof(ncclUniqueId)
inline constexpr uint32_t kMaxVerdictNotes = 8;
inline constexpr uint32_t kMaxNoteRanks = 256;  ///< ranks a note carries (the rest: see the master)
// More notes than kMaxVerdictNotes: the last one carried says how many more.
inline constexpr uint32_t kMaxNoteHosts = 16;

using Nonce = std::array<uint8_t, kNonceSize>;
using NcclIdBytes = std::array<uint8_t, kNcclIdSize>;
using Digest = std::array<uint8_t, 32>;
/// The most roots a scalable NCCL init is given (one per 4,096 ranks by default).
inline constexpr uint32_t kMaxNcclRoots = 1024;

struct Challenge {
  Nonce nonce{};               ///< fresh per connection: what a hello's MAC covers
  std::string master_version;  ///< rankcheck version of the master; "" with a job token
  std::string job_id;          ///< with a job token, job_tag() of it instead
  bool auth = false;           ///< the master has a job token: hellos must carry a MAC
};

/// What a master with a job token shows for its job id: "tag:" and the hex of a
/// MAC over the id and the challenge's nonce. A stranger learns nothing of the
/// job; a rank 0 holding the token tells its own job's master from another.
/// "" when the HMAC fails.
std::string job_tag(const JobToken& token, const Nonce& nonce, std::string_view job_id);

/// The record, the member's nonce (which the verdict's MAC covers), and a MAC
/// over both and the master's nonce (zeros without a job token).
struct Hello {
  Record record;
  Nonce client_nonce{};
  Mac mac{};
  /// A block leader's own ncclGetUniqueId, for a scalable NCCL init (see NcclRoots).
  std::optional<NcclIdBytes> nccl_root;
};

struct Admit {
  uint32_t joined_ranks = 0;
  uint32_t world_size = 0;
};

enum class RejectCode : uint16_t {
  kVersion = 1,
  kForeignJob = 2,
  kAuth = 3,
  kMalformed = 4,
  kLate = 5,
  kBusy = 6,
};

/// Layout fixed across protocol versions: u16 code, then the reason.
struct Reject {
  RejectCode code = RejectCode::kMalformed;
  std::string reason;
};

struct Verdict {
  uint8_t exit_code = 0;
  bool final = true;        ///< false: the GPU stage follows, then a final verdict
  bool run_gpu = false;     ///< go for the GPU stage
  std::string headline;     ///< the job's leading problem, "" on pass
  std::string headline_id;  ///< its finding's id ("missing-rank"), "" on pass
  uint32_t errors = 0;
  uint32_t warnings = 0;
  uint32_t joined_ranks = 0;
  std::vector<Finding> notes;  ///< findings about the receiving member (id, severity, text)
  uint32_t stage_ms = 0;       ///< time the GPU stage may take from now
  std::optional<std::array<uint8_t, kNcclIdSize>> nccl_id;
  /// With more than one: NCCL is initialised with ncclCommInitRankScalable over
  /// that many roots, sent before the verdict in an NcclRoots frame whose SHA-256
  /// is `roots_digest` (the verdict's MAC covers it; the frame itself is shared).
  uint32_t nccl_roots = 0;
  Digest roots_digest{};
  /// On a pass, where rank 0 watches the job (`run -- CMD`): the port of its watch
  /// server on the master's address; 0 when it watches nothing.
  uint16_t watch_port = 0;
  Mac mac{};  ///< over both nonces and the rest (zeros without a job token)
  /// Not on the wire: the roots the member was sent, checked against the digest.
  std::vector<NcclIdBytes> roots;
};

/// The roots of a scalable NCCL init, in order: root k is the unique id the
/// leader of block k made (rank 0's first). One frame for every member: a relay
/// is sent it once and hands it to each of its members.
struct NcclRoots {
  std::vector<NcclIdBytes> ids;
};
std::vector<uint8_t> encode(const NcclRoots& m);
Result<NcclRoots> decode_nccl_roots(std::span<const uint8_t> payload);
/// SHA-256 over the ids, in order.
Digest roots_digest(const std::vector<NcclIdBytes>& ids);

/// A member's GPU stage results, one per rank it stands for.
struct StageReport {
  std::vector<RankResult> ranks;
  Mac mac{};  ///< over both nonces and the results (zeros without a job token)
};

// Every encoder makes a frame its decoder accepts: a field longer than its cap
// is cut (at a UTF-8 boundary), and where the fields together would pass the
// frame's cap, the texts share what it leaves (a verdict's notes, a stage
// report's NCCL errors, a hello's environment).
std::vector<uint8_t> encode(const Challenge& m);
std::vector<uint8_t> encode(const Hello& m);
std::vector<uint8_t> encode(const Admit& m);
std::vector<uint8_t> encode(const Reject& m);
std::vector<uint8_t> encode(const Verdict& m);
std::vector<uint8_t> encode(const StageReport& m);

/// With a job token: the frame with its MAC filled in (the MAC is the payload's
/// last kMacSize bytes, and covers everything before it).
std::vector<uint8_t> encode_signed(const Hello& m, const JobToken& token, const Nonce& server);
std::vector<uint8_t> encode_signed(const Verdict& m, const JobToken& token, const Nonce& server,
                                   const Nonce& client);
std::vector<uint8_t> encode_signed(const StageReport& m, const JobToken& token, const Nonce& server,
                                   const Nonce& client);
/// Whether a decoded payload's trailing MAC is right. A verdict's MAC is over
/// another label for a go verdict than for a final one (`final`): one cannot
/// stand in for the other.
bool verify_hello(std::span<const uint8_t> payload, const JobToken& token, const Nonce& server);
bool verify_verdict(std::span<const uint8_t> payload, const JobToken& token, const Nonce& server,
                    const Nonce& client, bool final);
bool verify_stage_report(std::span<const uint8_t> payload, const JobToken& token,
                         const Nonce& server, const Nonce& client);

/// Trims a record to what a hello carries: each field to its decoder's cap and,
/// where the whole would pass the hello's cap, the tracked environment and the
/// identity conflicts to a share of it (values cut evenly, the digest
/// recomputed). A no-op for any record a hello could carry. Returns whether
/// anything was cut. The master's own record goes through it too, so that its
/// environment digest compares with its members'.
bool fit_hello(Record& record);

/// The rehearsal of NCCL's connections (rehearsal/plan.h): what one member per host is to
/// try, after the identity checks pass and before any verdict.
struct PathPlan {
  uint32_t self_host = 0;  ///< the receiver's index in the master's host list
  std::string self_identity;
  uint32_t per_conn_ms = 2000;
  uint32_t total_ms = 0;  ///< everything by then
  uint32_t in_flight = 32;
  std::vector<PathTarget> targets;
  Mac mac{};  ///< over both nonces of the connection and the rest (zeros without a job token)
};
/// What each connection of a plan found, in the plan's order.
struct PathReport {
  std::vector<PathResult> results;
  Mac mac{};  ///< over both nonces of the connection and the results (zeros without a token)
};
inline constexpr uint32_t kMaxPathTargets = 8192;
// What a member takes from a plan at most: the master's own plans give each
// connection 2 s, 32 at once, and end before the master's deadline.
inline constexpr uint32_t kMaxPathConnMs = 10'000;
inline constexpr uint32_t kMaxPathInFlight = 64;
inline constexpr uint32_t kMaxPathTotalMs = 600'000;
std::vector<uint8_t> encode(const PathPlan& m);
std::vector<uint8_t> encode(const PathReport& m);
/// With a job token: signed over the connection's nonces, each under its own
/// label (a plan only goes master -> member, a report the other way).
std::vector<uint8_t> encode_signed(const PathPlan& m, const JobToken& token, const Nonce& server,
                                   const Nonce& client);
std::vector<uint8_t> encode_signed(const PathReport& m, const JobToken& token, const Nonce& server,
                                   const Nonce& client);
bool verify_path_plan(std::span<const uint8_t> payload, const JobToken& token, const Nonce& server,
                      const Nonce& client);
bool verify_path_report(std::span<const uint8_t> payload, const JobToken& token,
                        const Nonce& server, const Nonce& client);
/// The master's ticket for one question to the listener that answers as `identity`.
std::array<uint8_t, kMacSize> path_ticket(const JobToken& token, std::span<const uint8_t> nonce,
                                          std::string_view identity);
/// A member acts on a plan only within these bounds: at most one connection per
/// other host of a job of `world_size` ranks, each host once and never itself,
/// and the time limits and parallelism above. An error naming what is out of bounds.
Status check_path_plan(const PathPlan& p, uint32_t world_size);
Result<PathPlan> decode_path_plan(std::span<const uint8_t> payload);
Result<PathReport> decode_path_report(std::span<const uint8_t> payload);

/// The job under watch (`rankcheck run -- CMD`): after the check passes, every wrapper
/// opens a connection to rank 0's watch server (the verdict's `watch_port`), which sends
/// it a Challenge first:
///
///   wrapper                       watch server
///     |  <------ challenge --------  |   nonce, job id (a tag with a job token)
///     |  -------- watch hello ---->  |   its ranks and host, its nonce, a MAC
///     |  <------ order: start -----  |   MASTER_PORT is free: start the command
///     |  -------- watch event ---->  |   started, markers, first lines, heartbeats, exit
///     |  <------ order: end -------  |   --fail-fast: end the command, exit with the code
///
/// With a job token each frame after the challenge carries a MAC over both nonces and
/// its sequence number, so that none is forged, replayed or reordered on the way.
struct WatchHello {
  uint32_t rank = 0;  ///< its first rank
  uint32_t nranks = 1;
  std::string host;
  Nonce client_nonce{};
  Mac mac{};
};
struct WatchEventFrame {
  uint32_t seq = 0;  ///< 1, 2, ... on its connection
  WatchEvent event;
  Mac mac{};
};
enum class WatchOrderKind : uint8_t { kStart = 1, kEnd = 2 };
struct WatchOrder {
  uint32_t seq = 0;
  WatchOrderKind kind = WatchOrderKind::kStart;
  uint8_t exit_code = 0;  ///< kEnd: what every process exits with
  std::string finding;    ///< kEnd: the finding that ended the job
  std::string headline;   ///< kEnd: its message
  Mac mac{};
};
std::vector<uint8_t> encode(const WatchHello& m);
std::vector<uint8_t> encode(const WatchEventFrame& m);
std::vector<uint8_t> encode(const WatchOrder& m);
/// With a job token: signed over both nonces (and, for an event or an order, its
/// sequence number, which the body holds).
std::vector<uint8_t> encode_signed(const WatchHello& m, const JobToken& token, const Nonce& server);
std::vector<uint8_t> encode_signed(const WatchEventFrame& m, const JobToken& token,
                                   const Nonce& server, const Nonce& client);
std::vector<uint8_t> encode_signed(const WatchOrder& m, const JobToken& token, const Nonce& server,
                                   const Nonce& client);
bool verify_watch_hello(std::span<const uint8_t> payload, const JobToken& token,
                        const Nonce& server);
bool verify_watch_event(std::span<const uint8_t> payload, const JobToken& token,
                        const Nonce& server, const Nonce& client);
bool verify_watch_order(std::span<const uint8_t> payload, const JobToken& token,
                        const Nonce& server, const Nonce& client);
Result<WatchHello> decode_watch_hello(std::span<const uint8_t> payload);
Result<WatchEventFrame> decode_watch_event(std::span<const uint8_t> payload);
Result<WatchOrder> decode_watch_order(std::span<const uint8_t> payload);

/// Payload decoders: every one validates lengths and bounds and refuses trailing bytes.
Result<Challenge> decode_challenge(std::span<const uint8_t> payload);
Result<Hello> decode_hello(std::span<const uint8_t> payload);
Result<Admit> decode_admit(std::span<const uint8_t> payload);
Result<Reject> decode_reject(std::span<const uint8_t> payload);
Result<Verdict> decode_verdict(std::span<const uint8_t> payload);
Result<StageReport> decode_stage_report(std::span<const uint8_t> payload);

}  // namespace rankcheck
