// The rules in the order their findings lead the report, and the runs over them:
// the master's decision, and the checks one process can make alone.

#include "rules/rules.h"

#include <algorithm>

#include "rules/context.h"

namespace rankcheck {
namespace {

constexpr Rule kRules[] = {
    {"master-out-of-fds", check_master_out_of_fds},  // what kept the missing ranks out
    {"connection-flood", check_connection_flood},
    {"foreign-job", check_foreign_job},
    {"auth-failed", check_auth_failed},
    {"launcher-env-conflict", check_launcher_conflicts},  // a stale RANK causes duplicates
    {"world-size-mismatch", check_world_size},
    {"duplicate-rank", check_duplicate_rank},
    {"rank-out-of-range", check_rank_range},
    {"master-addr-loopback", check_master_addr_loopback},  // before the ranks it leaves out
    {"local-rank-collision", check_local_rank_collision},
    {"local-world-size-mismatch", check_local_world_size},
    {"nccl-ifname-missing", check_ifname},
    {"nccl-comm-id-mismatch", check_nccl_comm_id},  // before the hosts it leaves without one
    {"nccl-no-interface", check_nccl_no_interface},
    {"nccl-interface-loopback", check_nccl_interface_loopback},
    {"nccl-interface-shared-address", check_nccl_interface_shared_address},
    {"nccl-interface-link-local", check_nccl_interface_link_local},
    {"duplicate-gpu", check_duplicate_gpu},
    {"nccl-version-mismatch", check_nccl_version},
    {"cuda-driver-missing", check_gpu_usable},  // also gpu-missing, gpu-count-mismatch
    {"nccl-missing", check_nccl_missing},
    {"master-addr-mismatch", check_master_addr_mismatch},
    {"protocol-mismatch", check_protocol_mismatch},
    {"relay-lost", check_relay_lost},
    {"member-disconnected", check_departed},
    {"late-start", check_late_start},  // before the ranks a late rank 0 left missing
    {"missing-rank", check_missing},
    {"env-mismatch", check_env_mismatch},
    {"cuda-driver-mismatch", check_cuda_driver_mismatch},
    {"gpu-unavailable", check_gpu_unavailable},
    {"stray-connection", check_stray_connections},
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
  check_self_master_loopback(self, findings);
  return order(std::move(findings));
}

}  // namespace rankcheck
