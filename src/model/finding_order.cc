// Which finding leads a report: the order of the ids, kept apart from the catalogue
// (finding.cc) that says what each one is.

#include <algorithm>
#include <iterator>

#include "model/finding.h"

namespace rankcheck {
namespace {

using enum FindingId;

// Which finding leads when several are raised, first to last. The initiating failure
// leads: the master stopped by a signal; a connection NCCL would hang on; what kept
// members out (descriptors, a flood, another job, the token); a stale variable before
// the duplicates and wrong sizes it makes; a host's setup (interfaces, data network,
// GPUs) before the rendezvous's effects (lost relays, departures, late starts, the
// missing ranks they leave); then the GPU stage, init before the all-reduce; then what
// explains nothing by itself (differences, strays, no token). A member's own findings
// and diagnose's follow; they lead only in reports of their own.
constexpr FindingId kLeadOrder[] = {
    kMasterInterrupted,
    kNcclPathUnproven,
    kNcclPathBlocked,
    kNcclPathFlooded,
    kMasterOutOfFds,
    kConnectionFlood,
    kForeignJob,
    kAuthFailed,
    kLauncherEnvConflict,
    kWorldSizeMismatch,
    kDuplicateRank,
    kRankOutOfRange,
    kMasterAddrLoopback,
    kLocalRankCollision,
    kLocalWorldSizeMismatch,
    kNcclIfnameMissing,
    kNcclCommIdMismatch,
    kNcclNoInterface,
    kNcclInterfaceLoopback,
    kNcclInterfaceSharedAddress,
    kNcclInterfaceLinkLocal,
    kNcclNetUnavailable,
    kIbMemlockLow,
    kIbUverbsMissing,
    kShmTooSmall,
    kNcclTopoFileInvalid,
    kPcieAcsRedirect,
    kIommuTranslated,
    kNcclNicFar,
    kNcclRailMismatch,
    kPcieLinkDegraded,
    kNcclIbHcaNone,
    kNcclIbPortNotActive,
    kNcclNetMismatch,
    kNcclNetPluginMismatch,
    kNcclNetPluginUnsupported,
    kNcclIbLinkLayerMismatch,
    kNcclIbPortCountMismatch,
    kNcclRoceGidLinkLocal,
    kNcclRoceGidFamilyMismatch,
    kDuplicateGpu,
    kNcclVersionMismatch,
    kUnevenRanksPerHost,
    kNcclKnownFault,
    kCudaDriverMissing,
    kGpuCountMismatch,
    kGpuLost,
    kNvlinkFabricDown,
    kNvlinkDown,
    kGpuMissing,
    kNcclMissing,
    kMasterAddrMismatch,
    kProtocolMismatch,
    kRelayLost,
    kMemberDisconnected,
    kClockSkew,
    kLateStart,
    kMissingRank,
    kNcclInitFailed,
    kNcclInitTimeout,
    kAllreduceWrongResult,
    kAllreduceFailed,
    kAllreduceTimeout,
    kBandwidthLow,
    kIbPortErrors,
    kEnvMismatch,
    kCudaDriverMismatch,
    kLocalRankWrapped,
    kGpuUnavailable,
    kStrayConnection,
    kNoJobToken,
    kJobRankFailed,
    kInitBlocked,
    kJobStalled,
    kMasterUnreachable,
    kMasterLost,
    kLateJoin,
    kMasterPortInUse,
    kMasterAddrNotLocal,
    kMasterListenFailed,
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

// Every FindingId once in kLeadOrder: its position, built at compile time.
struct LeadRanks {
  int rank[static_cast<size_t>(kUnexplainedError) + 1] = {};
  bool complete = true;
  constexpr LeadRanks() {
    for (int& r : rank)
      r = -1;
    for (size_t i = 0; i < std::size(kLeadOrder); ++i) {
      int& r = rank[static_cast<size_t>(kLeadOrder[i])];
      complete = complete && r == -1;
      r = static_cast<int>(i);
    }
    for (int r : rank)
      complete = complete && r >= 0;
  }
};
constexpr LeadRanks kLeadRanks;
static_assert(kLeadRanks.complete, "kLeadOrder holds every FindingId exactly once");

}  // namespace

int lead_rank(FindingId id) {
  return kLeadRanks.rank[static_cast<size_t>(id)];
}

void order_findings(std::vector<Finding>& findings) {
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    if (a.is_error() != b.is_error()) return a.is_error();
    return lead_rank(a.id) < lead_rank(b.id);
  });
}

}  // namespace rankcheck
