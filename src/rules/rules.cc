// The rules as a table, and the runs over them: the master's decision (every rule, or
// what runs on every decision when the join tracker calls the job clean), and the
// checks one process can make alone.

#include "rules/rules.h"

#include <algorithm>
#include <set>

#include "rules/context.h"
#include "rules/join_tracker.h"

namespace rankcheck {
namespace {

using enum FastPath;

// Each row: the catalogue row its findings lead with, the rule, and how the join
// tracker keeps to it (join_tracker.cc has the watches). The order of the rows is
// the order they run in; their findings are ordered by the catalogue's precedence.
constexpr Rule kRules[] = {
    {FindingId::kMasterOutOfFds, check_master_out_of_fds, kEvents},  // a failed accept
    {FindingId::kConnectionFlood, check_connection_flood, kEvents},  // refusals
    {FindingId::kForeignJob, check_foreign_job, kEvents},
    {FindingId::kAuthFailed, check_auth_failed, kEvents},
    {FindingId::kLauncherEnvConflict, check_launcher_conflicts, kWatch, watch_conflicts},
    {FindingId::kWorldSizeMismatch, check_world_size, kWatch, watch_world_size},
    {FindingId::kDuplicateRank, check_duplicate_rank, kWatch, watch_claims},
    {FindingId::kRankOutOfRange, check_rank_range, kWatch, watch_rank_range},
    {FindingId::kMasterAddrLoopback, check_master_addr_loopback, kWatch, watch_loopback_master},
    {FindingId::kLocalRankCollision, check_local_rank_collision, kWatch, watch_local_ranks},
    {FindingId::kLocalWorldSizeMismatch, check_local_world_size, kWatch, watch_local_world},
    {FindingId::kNcclIfnameMissing, check_ifname, kWatch, watch_ifname},
    {FindingId::kNcclCommIdMismatch, check_nccl_comm_id, kWatch, watch_comm_id},
    {FindingId::kNcclNoInterface, check_nccl_no_interface, kWatch, watch_nccl_if_found},
    {FindingId::kNcclInterfaceLoopback, check_nccl_interface_loopback, kWatch, watch_nccl_if_scope},
    {FindingId::kNcclInterfaceSharedAddress, check_nccl_interface_shared_address, kWatch,
     watch_nccl_if_stacks},
    {FindingId::kNcclInterfaceLinkLocal, check_nccl_interface_link_local, kWatch,
     watch_nccl_if_scope},
    {FindingId::kNcclNetUnavailable, check_nccl_net_unavailable, kWatch, watch_nccl_net_alone},
    {FindingId::kIbMemlockLow, check_ib_memlock, kWatch, watch_nccl_net_alone},
    {FindingId::kIbUverbsMissing, check_ib_uverbs_missing, kWatch, watch_nccl_net_alone},
    {FindingId::kShmTooSmall, check_shm, kWatch, watch_shm},
    {FindingId::kNcclTopoFileInvalid, check_topo_file, kWatch, watch_pcie_alone},
    {FindingId::kPcieAcsRedirect, check_pcie_acs, kWatch, watch_pcie_alone},
    {FindingId::kIommuTranslated, check_iommu, kWatch, watch_pcie_alone},
    {FindingId::kNcclNicFar, check_nic_far, kWatch, watch_pcie_alone},
    {FindingId::kNcclRailMismatch, check_rails, kWatch, watch_rails},
    {FindingId::kPcieLinkDegraded, check_pcie_link, kWatch, watch_pcie_alone},
    {FindingId::kNcclIbHcaNone, check_nccl_ib_hca_none, kWatch, watch_nccl_net_alone},
    {FindingId::kNcclIbPortNotActive, check_nccl_ib_port_not_active, kWatch, watch_nccl_net_alone},
    {FindingId::kNcclNetMismatch, check_nccl_net_mismatch, kWatch, watch_nccl_net_same},
    {FindingId::kNcclNetPluginMismatch, check_nccl_net_plugin, kWatch, watch_nccl_net_same},
    {FindingId::kNcclNetPluginUnsupported, check_nccl_net_plugin_unsupported, kWatch,
     watch_nccl_net_alone},
    {FindingId::kNcclIbLinkLayerMismatch, check_nccl_ib_link_layer, kWatch, watch_nccl_net_same},
    {FindingId::kNcclRoceGidLinkLocal, check_nccl_roce_gid, kWatch, watch_roce_gid},
    {FindingId::kDuplicateGpu, check_duplicate_gpu, kWatch, watch_gpu_devices},
    {FindingId::kNcclVersionMismatch, check_nccl_version, kWatch, watch_gpu_same},
    {FindingId::kNcclKnownFault, check_nccl_known_fault, kWatch, watch_nccl_known_fault},
    {FindingId::kUnevenRanksPerHost, check_uneven_hosts, kWatch, watch_uneven_hosts},
    {FindingId::kCudaDriverMissing, check_gpu_usable, kWatch, watch_gpu_usable},
    {FindingId::kNcclMissing, check_nccl_missing, kWatch, watch_gpu_usable},
    {FindingId::kMasterAddrMismatch, check_master_addr_mismatch, kWatch, watch_master_addr},
    {FindingId::kProtocolMismatch, check_protocol_mismatch, kEvents},  // refusals
    {FindingId::kRelayLost, check_relay_lost, kEvents},                // a lost relay
    {FindingId::kMemberDisconnected, check_departed, kEvents},         // departures
    {FindingId::kClockSkew, check_clock_skew, kWatch, watch_starts},
    {FindingId::kLateStart, check_late_start, kWatch, watch_starts},
    {FindingId::kMissingRank, check_missing, kIncomplete},
    {FindingId::kEnvMismatch, check_env_mismatch, kWatch, watch_env},
    {FindingId::kCudaDriverMismatch, check_cuda_driver_mismatch, kWatch, watch_gpu_same},
    {FindingId::kLocalRankWrapped, check_local_rank_wrapped, kWatch, watch_gpu_wrapped},
    {FindingId::kGpuLost, check_gpu_lost, kWatch, watch_gpu_lost},
    {FindingId::kNvlinkFabricDown, check_nvlink_fabric, kWatch, watch_nvlink},
    {FindingId::kNvlinkDown, check_nvlink_count, kWatch, watch_nvlink},
    {FindingId::kGpuUnavailable, check_gpu_unavailable, kWatch, watch_gpu_usable},
    {FindingId::kStrayConnection, check_stray_connections, kEvents},  // refusals
    {FindingId::kNoJobToken, check_no_job_token, kAlways},
};

}  // namespace

std::span<const Rule> rules() {
  return kRules;
}

size_t job_hosts(const std::vector<Member>& members) {
  std::set<std::string_view> hosts;
  for (const Member& m : members)
    hosts.insert(m.record.host.str());
  return hosts.size();
}

std::vector<Finding> run_checks(const JobView& view) {
  CheckContext ctx(view);
  std::vector<Finding> findings;
  for (const Rule& rule : kRules)
    rule.check(ctx, findings);
  name_no_host_when_every_host(findings, job_hosts(view.members));
  order_findings(findings);
  return findings;
}

std::vector<Finding> run_always(const JobView& view) {
  CheckContext ctx(view);
  std::vector<Finding> findings;
  for (const Rule& rule : kRules) {
    if (rule.fast == FastPath::kAlways) rule.check(ctx, findings);
  }
  name_no_host_when_every_host(findings, job_hosts(view.members));
  order_findings(findings);
  return findings;
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
  check_nccl_net_plugin_unsupported(ctx, findings);
  check_ib_memlock(ctx, findings);
  check_ib_uverbs_missing(ctx, findings);
  check_topo_file(ctx, findings);
  check_pcie_acs(ctx, findings);
  check_iommu(ctx, findings);
  check_nic_far(ctx, findings);
  check_pcie_link(ctx, findings);
  check_nccl_ib_hca_none(ctx, findings);
  check_nccl_ib_port_not_active(ctx, findings);
  check_self_master_loopback(self, findings);
  order_findings(findings);
  return findings;
}

}  // namespace rankcheck
