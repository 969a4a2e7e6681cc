#pragma once
// A problem of the cluster, as data: rules return these, the report renders them.
// Every kind of finding is one row of the catalogue (model/finding.cc): its id, its
// severity, the exit code it gives the job and the fix to try first.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rankcheck {

enum class Severity { kError, kWarning };

/// Exit codes, stable and documented in the README.
namespace exit_code {
inline constexpr int kPass = 0;
inline constexpr int kInternal = 1;
inline constexpr int kUsage = 2;
inline constexpr int kMismatch = 3;
inline constexpr int kIncomplete = 4;
inline constexpr int kGpu = 5;
inline constexpr int kRejected = 6;
inline constexpr int kCannotListen = 7;
inline constexpr int kSignalBase = 128;
}  // namespace exit_code

struct Finding {
  std::string id;  ///< stable kebab-case id, documented in docs/findings.md
  Severity severity = Severity::kError;
  int exit_code = exit_code::kMismatch;  ///< what the job exits with when this leads
  std::string message;
  std::string hint;                ///< the fix
  std::vector<long> ranks;         ///< sorted, unique
  std::vector<std::string> hosts;  ///< sorted, unique

  bool is_error() const { return severity == Severity::kError; }
};

/// Every finding rankcheck raises, in the order of docs/findings.md.
enum class FindingId {
  kMasterAddrLoopback,
  kForeignJob,
  kAuthFailed,
  kWorldSizeMismatch,
  kDuplicateRank,
  kRankOutOfRange,
  kLauncherEnvConflict,
  kLocalRankCollision,
  kLocalWorldSizeMismatch,
  kNcclIfnameMissing,
  kNcclNoInterface,
  kNcclInterfaceLoopback,
  kNcclInterfaceLinkLocal,
  kNcclInterfaceSharedAddress,
  kNcclCommIdMismatch,
  kNcclPathBlocked,
  kNcclPathFlooded,
  kNcclPathUnproven,
  kDuplicateGpu,
  kNcclVersionMismatch,
  kCudaDriverMissing,
  kGpuMissing,
  kGpuCountMismatch,
  kNcclMissing,
  kMasterAddrMismatch,
  kProtocolMismatch,
  kMemberDisconnected,
  kMissingRank,
  kEnvMismatch,
  kCudaDriverMismatch,
  kGpuUnavailable,
  kNcclInitFailed,
  kNcclInitTimeout,
  kAllreduceWrongResult,
  kAllreduceFailed,
  kAllreduceTimeout,
  kBandwidthLow,
  kStrayConnection,
  kMasterInterrupted,
  kMasterUnreachable,
  kMasterLost,
  kLateJoin,
  kMasterPortInUse,
  kMasterAddrNotLocal,
  kMasterListenFailed,
  kConnectionFlood,
  kMasterOutOfFds,
  kLateStart,
  kRelayLost,
  // Raised only by `rankcheck diagnose`, from the logs of a job that already failed.
  kProcessDied,
  kPeerFailed,
  kCollectiveDesync,
  kCollectiveTimeout,
  kJobCancelled,
  kGpuOutOfMemory,
  kHostOutOfMemory,
  kCudaError,
  kNcclNetworkError,
  kSharedMemoryExhausted,
  kUnexplainedError,
};

/// One row of the catalogue.
struct FindingKind {
  FindingId id;
  std::string_view name;  ///< "missing-rank": what reports, JSON and scripts use
  Severity severity;      ///< as usually raised; some are warnings where they explain nothing
  int exit_code;          ///< the job's exit code when this finding leads
  std::string_view fix;   ///< the fix to try first; a finding may name a more specific one
};

/// The catalogue, in FindingId order.
std::span<const FindingKind> finding_catalog();
const FindingKind& finding_kind(FindingId id);
/// The row named `name`, if there is one.
const FindingKind* find_finding_kind(std::string_view name);

/// A finding of kind `id`: its severity (unless `severity` is given), its exit
/// code, and the catalogue's fix unless `fix` names a more specific one.
Finding make_finding(FindingId id, std::string message, std::string fix = {},
                     std::optional<Severity> severity = std::nullopt);

/// The job's exit code: the leading error's, or 0 when there is none.
/// `findings` must already be in report order.
int exit_code_for(const std::vector<Finding>& findings);

}  // namespace rankcheck
