// The rules in the order their findings lead the report, and the runs over them:
// the master's decision, and the checks one process can make alone.

#include "rules/rules.h"

#include <algorithm>

#include "rules/context.h"

namespace rankcheck {
namespace {

constexpr Rule kRules[] = {
    {FindingId::kMasterOutOfFds, check_master_out_of_fds},  // what kept the missing ranks out
    {FindingId::kConnectionFlood, check_connection_flood},
    {FindingId::kForeignJob, check_foreign_job},
    {FindingId::kAuthFailed, check_auth_failed},
    {FindingId::kLauncherEnvConflict, check_launcher_conflicts},  // a stale RANK causes duplicates
    {FindingId::kWorldSizeMismatch, check_world_size},
    {FindingId::kDuplicateRank, check_duplicate_rank},
    {FindingId::kRankOutOfRange, check_rank_range},
    {FindingId::kMasterAddrLoopback, check_master_addr_loopback},  // before the ranks it leaves out
    {FindingId::kLocalRankCollision, check_local_rank_collision},
    {FindingId::kLocalWorldSizeMismatch, check_local_world_size},
    {FindingId::kNcclIfnameMissing, check_ifname},
    {FindingId::kNcclCommIdMismatch, check_nccl_comm_id},  // before the hosts it leaves without one
    {FindingId::kNcclNoInterface, check_nccl_no_interface},
    {FindingId::kNcclInterfaceLoopback, check_nccl_interface_loopback},
    {FindingId::kNcclInterfaceSharedAddress, check_nccl_interface_shared_address},
    {FindingId::kNcclInterfaceLinkLocal, check_nccl_interface_link_local},
    {FindingId::kNcclNetUnavailable, check_nccl_net_unavailable},
    {FindingId::kIbMemlockLow, check_ib_memlock},
    {FindingId::kIbUverbsMissing, check_ib_uverbs_missing},  // causes of a Socket fallback
    {FindingId::kNcclIbHcaNone, check_nccl_ib_hca_none},
    {FindingId::kNcclIbPortNotActive, check_nccl_ib_port_not_active},
    {FindingId::kNcclNetMismatch, check_nccl_net_mismatch},  // ... and its effect between hosts
    {FindingId::kNcclNetPluginMismatch, check_nccl_net_plugin},
    {FindingId::kNcclIbLinkLayerMismatch, check_nccl_ib_link_layer},  // also the port count
    {FindingId::kNcclRoceGidLinkLocal, check_nccl_roce_gid},          // also the GID family
    {FindingId::kDuplicateGpu, check_duplicate_gpu},
    {FindingId::kNcclVersionMismatch, check_nccl_version},
    {FindingId::kCudaDriverMissing, check_gpu_usable},  // also gpu-missing, gpu-count-mismatch
    {FindingId::kNcclMissing, check_nccl_missing},
    {FindingId::kMasterAddrMismatch, check_master_addr_mismatch},
    {FindingId::kProtocolMismatch, check_protocol_mismatch},
    {FindingId::kRelayLost, check_relay_lost},
    {FindingId::kMemberDisconnected, check_departed},
    {FindingId::kClockSkew, check_clock_skew},  // before the late starts it would fake
    {FindingId::kLateStart, check_late_start},  // before the ranks a late rank 0 left missing
    {FindingId::kMissingRank, check_missing},
    {FindingId::kEnvMismatch, check_env_mismatch},
    {FindingId::kCudaDriverMismatch, check_cuda_driver_mismatch},
    {FindingId::kGpuUnavailable, check_gpu_unavailable},
    {FindingId::kStrayConnection, check_stray_connections},
};

std::vector<Finding> order(std::vector<Finding> findings) {
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    return a.is_error() && !b.is_error();
  });
  return findings;
}

}  // namespace

std::span<const Rule> rules() {
  return kRules;
}

void order_findings(std::vector<Finding>& findings) {
  findings = order(std::move(findings));
}

std::vector<Finding> run_checks(const JobView& view) {
  CheckContext ctx(view);
  std::vector<Finding> findings;
  for (const Rule& rule : kRules)
    rule.check(ctx, findings);
  return order(std::move(findings));
}

std::vector<Finding> local_checks(const Record& self) {
  JobView view;
  view.world_size = self.world_size;
  view.job_id = self.job_id;
  view.master_addr = self.master_addr;
  view.master_port = self.master_port;
  view.members.push_back(Member{self, 0, "in-process"});
  if (self.rank == 0) {
    view.master_host = self.host;
    view.master_resolved = self.master_resolved.get();
  }
  CheckContext ctx(view);
  std::vector<Finding> findings;
  check_master_addr_loopback(ctx, findings);
  check_rank_range(ctx, findings);
  check_launcher_conflicts(ctx, findings);
  check_ifname(ctx, findings);
  check_nccl_no_interface(ctx, findings);
  check_nccl_net_unavailable(ctx, findings);
  check_ib_memlock(ctx, findings);
  check_ib_uverbs_missing(ctx, findings);
  check_nccl_ib_hca_none(ctx, findings);
  check_nccl_ib_port_not_active(ctx, findings);
  check_self_master_loopback(self, findings);
  return order(std::move(findings));
}

}  // namespace rankcheck
