#pragma once
// What the rules share: the per-decision context, the helpers that name ranks and
// hosts, and each rule's entry point (the table that orders them is in rules.cc).
// Included only inside src/rules/: by the rule files, by rules.cc, and by the join
// tracker (join_tracker.cc), which mirrors some rules with the same predicates
// (peer_host, ifname_selects_nothing). Everything else goes through rules.h.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rules/rules.h"

namespace rankcheck {

using Records = std::vector<const Record*>;

// Naming ranks and hosts, and the predicates more than one rule asks (context.cc).

/// Every rank the records hold, sorted, unique.
std::vector<long> ranks_of(const Records& rs);
/// The records by first rank: a message's order that does not follow the join's.
Records by_rank(Records rs);
/// Their hosts, sorted, unique.
std::vector<std::string> hosts_of(const Records& rs);
/// Our own composed parts, already escaped: joined without cutting them.
std::string join(const std::vector<std::string>& parts, std::string_view sep, size_t max);
/// "rank 3" or "ranks 0-6".
std::string ranks_word(const std::vector<long>& ranks);
/// "ranks 0-6 on gpu-01", "rank 7 on gpu-02", "ranks 0-63 on 8 hosts".
std::string where(const Records& rs);
/// A finding of kind `id` about these members (their ranks and hosts).
Finding make(FindingId id, std::string message, std::string fix, const Records& about,
             std::optional<Severity> severity = std::nullopt);
/// The host part of a peer "10.0.0.12:4242" or "[::1]:4242".
std::string_view peer_host(std::string_view peer);
/// The NCCL_SOCKET_IFNAME a record sets that NCCL would use and that matches none
/// of its host's interfaces.
bool ifname_selects_nothing(const Record& r, const EnvVar& e);

// Built once per decision (context.cc): at 16k members, rules that each rebuilt
// maps of ranks and hosts took longer than the target for the whole decision.
struct CheckContext {
  explicit CheckContext(const JobView& v);

  bool present(long k) const { return k >= 0 && k < expected_world && claims[size_t(k)] > 0; }

  const JobView& view;
  long expected_world;
  std::vector<uint32_t> claims;  // members claiming each rank in [0, expected_world)
  std::vector<long> outside;     // claimed ranks outside it, sorted
  bool duplicates = false;       // some rank claimed twice
  std::vector<std::pair<std::string_view, Records>> hosts;  // members by host name, sorted
  bool multi_host = false;
};

// Rules over the records and the master's refusals and departures (records.cc).
void check_foreign_job(const CheckContext& ctx, std::vector<Finding>& out);
void check_auth_failed(const CheckContext& ctx, std::vector<Finding>& out);
void check_world_size(const CheckContext& ctx, std::vector<Finding>& out);
void check_duplicate_rank(const CheckContext& ctx, std::vector<Finding>& out);
void check_rank_range(const CheckContext& ctx, std::vector<Finding>& out);
void check_launcher_conflicts(const CheckContext& ctx, std::vector<Finding>& out);
void check_local_rank_collision(const CheckContext& ctx, std::vector<Finding>& out);
void check_local_world_size(const CheckContext& ctx, std::vector<Finding>& out);
void check_ifname(const CheckContext& ctx, std::vector<Finding>& out);
void check_protocol_mismatch(const CheckContext& ctx, std::vector<Finding>& out);
void check_stray_connections(const CheckContext& ctx, std::vector<Finding>& out);
void check_departed(const CheckContext& ctx, std::vector<Finding>& out);
void check_connection_flood(const CheckContext& ctx, std::vector<Finding>& out);

// When the members say they started, against the master's clock (clock.cc).
void check_clock_skew(const CheckContext& ctx, std::vector<Finding>& out);
void check_late_start(const CheckContext& ctx, std::vector<Finding>& out);

// The environment every rank must share (env.cc).
void check_env_mismatch(const CheckContext& ctx, std::vector<Finding>& out);

// MASTER_ADDR on the master and on each member (master_addr.cc).
void check_master_addr_loopback(const CheckContext& ctx, std::vector<Finding>& out);
void check_master_addr_mismatch(const CheckContext& ctx, std::vector<Finding>& out);
/// The loopback warning of a member away from the master's node.
void check_self_master_loopback(const Record& self, std::vector<Finding>& out);

// What the master saw of its own connections (master_connections.cc).
void check_master_out_of_fds(const CheckContext& ctx, std::vector<Finding>& out);
void check_no_job_token(const CheckContext& ctx, std::vector<Finding>& out);
void check_relay_lost(const CheckContext& ctx, std::vector<Finding>& out);

// The network NCCL will use, before any NCCL call (network.cc).
void check_nccl_comm_id(const CheckContext& ctx, std::vector<Finding>& out);
void check_nccl_no_interface(const CheckContext& ctx, std::vector<Finding>& out);
void check_nccl_interface_loopback(const CheckContext& ctx, std::vector<Finding>& out);
void check_nccl_interface_shared_address(const CheckContext& ctx, std::vector<Finding>& out);
void check_nccl_interface_link_local(const CheckContext& ctx, std::vector<Finding>& out);

// The data network NCCL will use: IB/RoCE ports, plugins, memlock (nccl_net.cc).
void check_nccl_net_mismatch(const CheckContext& ctx, std::vector<Finding>& out);
void check_nccl_net_unavailable(const CheckContext& ctx, std::vector<Finding>& out);
void check_nccl_net_plugin(const CheckContext& ctx, std::vector<Finding>& out);
void check_nccl_net_plugin_unsupported(const CheckContext& ctx, std::vector<Finding>& out);
void check_nccl_ib_hca_none(const CheckContext& ctx, std::vector<Finding>& out);
void check_nccl_ib_port_not_active(const CheckContext& ctx, std::vector<Finding>& out);
/// Also nccl-ib-port-count-mismatch, when the link layers agree.
void check_nccl_ib_link_layer(const CheckContext& ctx, std::vector<Finding>& out);
/// nccl-roce-gid-link-local and nccl-roce-gid-family-mismatch.
void check_nccl_roce_gid(const CheckContext& ctx, std::vector<Finding>& out);
void check_ib_memlock(const CheckContext& ctx, std::vector<Finding>& out);
void check_ib_uverbs_missing(const CheckContext& ctx, std::vector<Finding>& out);

// The NCCL releases' known faults, and hosts with different numbers of ranks
// (nccl_faults.cc).
namespace nccl {
struct KnownFault;
}
/// `f` is a fault of the release `r` loads, on its host, not avoided by its variables
/// (the uneven-hosts faults are the job's: check_uneven_hosts).
bool known_fault_here(const nccl::KnownFault& f, const Record& r);
void check_nccl_known_fault(const CheckContext& ctx, std::vector<Finding>& out);
void check_uneven_hosts(const CheckContext& ctx, std::vector<Finding>& out);

// /dev/shm against what NCCL's SHM transport maps for a host's ranks (shm.cc).
void check_shm(const CheckContext& ctx, std::vector<Finding>& out);
/// Whether a host's /dev/shm (`avail` bytes free, -1 unknown) is short of what the SHM
/// transport maps for `ranks` ranks of `segment` bytes each, when it is `on`.
bool shm_short(bool on, int64_t avail, int64_t segment, int64_t ranks);
/// For the join tracker: what must agree between hosts ("" when unknown), and
/// whether one host's facts alone raise nothing.
std::string nccl_net_signature(const NcclNetFacts& f);
bool nccl_net_alone_ok(const NcclNetFacts& f);

// The PCIe under NCCL (pcie.cc).
void check_pcie_link(const CheckContext& ctx, std::vector<Finding>& out);
void check_pcie_acs(const CheckContext& ctx, std::vector<Finding>& out);
void check_iommu(const CheckContext& ctx, std::vector<Finding>& out);
void check_nic_far(const CheckContext& ctx, std::vector<Finding>& out);
void check_rails(const CheckContext& ctx, std::vector<Finding>& out);
void check_topo_file(const CheckContext& ctx, std::vector<Finding>& out);
/// Whether a record's PCIe facts alone raise something (the join tracker's test).
bool pcie_alone_raises(const Record& r);

// Where the missing ranks were expected (missing.cc).
void check_missing(const CheckContext& ctx, std::vector<Finding>& out);

// GPUs, decided before any NCCL call (gpu.cc).
void check_duplicate_gpu(const CheckContext& ctx, std::vector<Finding>& out);
void check_nccl_version(const CheckContext& ctx, std::vector<Finding>& out);
void check_gpu_usable(const CheckContext& ctx, std::vector<Finding>& out);
void check_nccl_missing(const CheckContext& ctx, std::vector<Finding>& out);
void check_cuda_driver_mismatch(const CheckContext& ctx, std::vector<Finding>& out);
void check_local_rank_wrapped(const CheckContext& ctx, std::vector<Finding>& out);
/// Whether a member took device LOCAL_RANK % N because it sees fewer GPUs than its
/// LOCAL_RANK (rank mode, no --device).
bool local_rank_wrapped(const Record& r);
void check_gpu_lost(const CheckContext& ctx, std::vector<Finding>& out);
/// Whether a member shows fewer GPUs than it was given while each of its host's ranks
/// still has one (where they do not, gpu-count-mismatch says it).
bool gpu_lost(const Record& r);
void check_gpu_unavailable(const CheckContext& ctx, std::vector<Finding>& out);

// NVLink and the NVSwitch fabric (nvlink.cc).
void check_nvlink_fabric(const CheckContext& ctx, std::vector<Finding>& out);
void check_nvlink_count(const CheckContext& ctx, std::vector<Finding>& out);
/// Whether a member's GPUs are registered with a fabric that is not up.
bool nvlink_fabric_down(const Record& r);

}  // namespace rankcheck
