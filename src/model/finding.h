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

/// Exit codes, stable and documented in the README and docs/usage.md.
namespace exit_code {
inline constexpr int kPass = 0;
inline constexpr int kInternal = 1;
inline constexpr int kUsage = 2;
inline constexpr int kMismatch = 3;
inline constexpr int kIncomplete = 4;
inline constexpr int kGpu = 5;
inline constexpr int kRejected = 6;
inline constexpr int kCannotListen = 7;
/// The job under watch (`run -- CMD --fail-fast`) was ended because a rank of it failed
/// or stopped (job-rank-failed, job-stalled).
inline constexpr int kJobFailed = 8;
inline constexpr int kSignalBase = 128;
}  // namespace exit_code

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
  kNcclNetMismatch,
  kNcclNetUnavailable,
  kNcclNetPluginMismatch,
  kNcclNetPluginUnsupported,
  kNcclIbHcaNone,
  kNcclIbPortNotActive,
  kNcclIbLinkLayerMismatch,
  kNcclIbPortCountMismatch,
  kNcclRoceGidLinkLocal,
  kNcclRoceGidFamilyMismatch,
  kIbMemlockLow,
  kIbUverbsMissing,
  kShmTooSmall,
  kPcieLinkDegraded,
  kPcieAcsRedirect,
  kIommuTranslated,
  kNcclNicFar,
  kNcclRailMismatch,
  kNcclTopoFileInvalid,
  kNcclPathFlooded,
  kNcclPathUnproven,
  kDuplicateGpu,
  kNcclVersionMismatch,
  kUnevenRanksPerHost,
  kNcclKnownFault,
  kCudaDriverMissing,
  kGpuMissing,
  kGpuCountMismatch,
  kGpuLost,
  kNvlinkFabricDown,
  kNvlinkDown,
  kNcclMissing,
  kMasterAddrMismatch,
  kProtocolMismatch,
  kMemberDisconnected,
  kMissingRank,
  kEnvMismatch,
  kCudaDriverMismatch,
  kLocalRankWrapped,
  kGpuUnavailable,
  kNcclInitFailed,
  kNcclInitTimeout,
  kAllreduceWrongResult,
  kAllreduceFailed,
  kAllreduceTimeout,
  kBandwidthLow,
  kIbPortErrors,
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
  kClockSkew,
  kNoJobToken,
  // Raised while the job runs under watch (`rankcheck run -- CMD`).
  kInitBlocked,
  kJobRankFailed,
  kJobStalled,
  // Raised only by `rankcheck diagnose`, from the logs of a job that already failed.
  kLaunchFailed,
  kNodeLost,
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
  kIdentityInvalid,
  kUnexplainedError,
};

/// One problem, as the rules raise it: its kind (the catalogue's row), and what this
/// one says. The kind's name ("missing-rank") is used only where a finding is written
/// out: a report, the wire, the metrics.
struct Finding {
  FindingId id = FindingId::kUnexplainedError;
  Severity severity = Severity::kError;
  int exit_code = exit_code::kMismatch;  ///< what the job exits with when this leads
  std::string message;
  std::string fix;                 ///< what to try first ("hint" in the JSON, schema 1)
  std::vector<long> ranks;         ///< sorted, unique
  std::vector<std::string> hosts;  ///< sorted, unique

  bool is_error() const { return severity == Severity::kError; }
  /// The kind's kebab-case name, documented in docs/findings.md.
  std::string_view name() const;
};

/// What kind of fault a finding is: whether the hosts it names are to blame (the
/// suspect hosts a retry leaves out), and which of them a drain may take.
enum class FindingClass {
  kJob,         ///< job-wide: configuration, another job, a stranger; names no suspect host
  kHostConfig,  ///< one host's setup (its environment, software, limits, clock)
  kProcess,     ///< a process on a host did not start, died, or started late
  kHardware,    ///< a host's GPUs, driver or the GPU stage on them
  kNetwork,     ///< a host's network, as NCCL would use it
};

/// "job", "host-config", "process", "hardware", "network": what reports, metrics
/// and RANKCHECK_DRAIN_FINDINGS use.
std::string_view class_name(FindingClass c);

/// One row of the catalogue.
struct FindingKind {
  FindingId id;
  std::string_view name;  ///< "missing-rank": what reports, JSON and scripts use
  Severity severity;      ///< as usually raised; some are warnings where they explain nothing
  int exit_code;          ///< the job's exit code when this finding leads
  std::string_view fix;   ///< the fix to try first; a finding may name a more specific one
  /// kJob unless the fault lies with the hosts the finding names.
  FindingClass cls = FindingClass::kJob;
};

/// The catalogue, in FindingId order.
std::span<const FindingKind> finding_catalog();
const FindingKind& finding_kind(FindingId id);
/// The row named `name`, if there is one.
const FindingKind* find_finding_kind(std::string_view name);
/// The class of the finding named `name` (kJob for a name the catalogue lacks).
FindingClass finding_class(std::string_view name);

/// Which finding leads when several are raised: the catalogue's precedence, causes
/// before their effects (a path NCCL would hang on before the ranks it leaves
/// waiting; a stale RANK before the duplicates it makes). Lower leads.
int lead_rank(FindingId id);

/// Orders findings as a report shows them: errors first, then by lead_rank, keeping
/// the order in which each kind's findings were raised.
void order_findings(std::vector<Finding>& findings);

/// A fact that holds on every host of a job is the job's, not a host's: the errors of
/// one id, of a host's class (host-config, hardware, network; not a path's, which names
/// its two ends), whose hosts together are every one of the job's `job_hosts` (two or
/// more) name no host, so that no
/// report suspects, drains or leaves out a host for them. Their messages still say
/// where. Returns whether it cleared any.
bool name_no_host_when_every_host(std::vector<Finding>& findings, size_t job_hosts);

/// A finding of kind `id`: its severity (unless `severity` is given), its exit
/// code, and the catalogue's fix unless `fix` names a more specific one.
Finding make_finding(FindingId id, std::string message, std::string fix = {},
                     std::optional<Severity> severity = std::nullopt);

/// The job's exit code: the leading error's, or 0 when there is none.
/// `findings` must already be in report order.
int exit_code_for(const std::vector<Finding>& findings);

}  // namespace rankcheck
