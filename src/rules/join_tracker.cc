// The join tracker: a summary kept as members join, so that a clean job is
// decided without a pass of every rule over every record.

#include "rules/join_tracker.h"

#include <algorithm>

#include "rules/context.h"
#include "rules/rules.h"

namespace rankcheck {

JoinTracker::JoinTracker(long world_size, std::vector<std::string> master_resolved, bool gpu_stage)
    : world_size_(world_size),
      master_loopback_(!master_resolved.empty() &&
                       std::all_of(master_resolved.begin(), master_resolved.end(),
                                   [](const std::string& a) { return is_loopback_address(a); })),
      gpu_stage_(gpu_stage) {
  claimed_.assign(static_cast<size_t>(std::clamp(world_size, 0L, kMaxWorldSize)), 0);
}

// Each condition mirrors a rule's: anything one rule could report taints.
void JoinTracker::add(const Record& r, std::string_view peer) {
  if (tainted_) return;
  bool ok = r.world_size == world_size_ && r.in_range() && r.conflicts.empty();  // world size,
  for (long k = r.rank; ok && k <= r.last_rank(); ++k) {  // range, conflicts, duplicates
    ok = claimed_[size_t(k)] == 0;
    claimed_[size_t(k)] = 1;
    ++distinct_;
  }
  for (const EnvVar& e : r.env) {  // NCCL_SOCKET_IFNAME
    ok = ok && !ifname_selects_nothing(r, e);
  }
  // NCCL's interface: found, not loopback or link-local (whose rules ask whether the
  // job spans network stacks), no address in two stacks, NCCL_COMM_ID on rank 0's host.
  if (const NcclIfFacts& f = r.nccl_if; f.known()) {
    ok = ok && f.state == NcclIfFacts::kFound &&
         (f.flags & (NcclIfFacts::kLoopback | NcclIfFacts::kLinkScope)) == 0;
    std::string stack = f.netns.empty() ? "host " + r.host.str() : f.netns.str();
    auto [it, fresh] = nccl_addrs_.try_emplace(f.address.str(), stack);
    ok = ok && (fresh || it->second == stack);
    for (const EnvVar& e : r.env) {
      ok = ok &&
           !(r.rank == 0 && e.name == "NCCL_COMM_ID" && (f.flags & NcclIfFacts::kCommIdLocal) == 0);
    }
  }
  // NCCL's data network: nothing one host raises alone, the same everywhere.
  ok = ok && nccl_net_alone_ok(r.nccl_net);
  if (std::string net = nccl_net_signature(r.nccl_net); !net.empty()) {
    if (first_net_.empty()) first_net_ = net;
    ok = ok && net == first_net_;
  }
  if (master_loopback_ && peer.find(':') != std::string_view::npos) {  // loopback master
    ok = ok && is_loopback_address(peer_host(peer));
  }
  if (!have_first_) {
    have_first_ = true;
    first_digest_ = r.env_digest;
    first_addr_ = r.master_addr;
    first_port_ = r.master_port;
    first_resolved_ = r.master_resolved.get();
    first_gpu_ = r.gpu;
  }
  ok = ok && r.env_digest == first_digest_ && r.master_addr == first_addr_ &&
       r.master_port == first_port_ && r.master_resolved.get() == first_resolved_;
  if (gpu_stage_) {  // usable, one NCCL and one driver everywhere, no GPU twice
    const GpuFacts& g = r.gpu;
    ok = ok && g.usable() && g.nccl_loaded() && g.nccl_version == first_gpu_.nccl_version &&
         g.cuda_version == first_gpu_.cuda_version && g.driver == first_gpu_.driver &&
         long(g.devices.size()) == r.nranks;
    for (const GpuDevice& d : g.devices) {  // by UUID, and by bus id (MIG slices share it)
      ok = ok && uuids_.insert(r.host + '\n' + d.uuid).second;
      ok = ok &&
           (d.pci_bus_id.empty() || uuids_.insert(r.host + "\nbus " + d.pci_bus_id.str()).second);
    }
  }
  // Per host: one local world size, room for these ranks, no local rank twice. The
  // bits per host are bounded by the world and a host's plausible size, not by what
  // a peer claims: anything larger is left to the rules.
  long max_local = std::min(world_size_, kMaxTrackedLocal);
  if (!ok || r.local_world_size > max_local || r.local_rank + r.nranks > max_local) {
    tainted_ = true;
    return;
  }
  auto it = hosts_.find(r.host);
  if (it == hosts_.end()) {
    it = hosts_.emplace(r.host, HostState{r.local_world_size, 0, {}}).first;
    if (r.local_world_size > 0) it->second.locals.assign(size_t(r.local_world_size), false);
  }
  HostState& h = it->second;
  h.ranks += r.nranks;
  ok = r.local_world_size == h.local_world_size &&
       (h.local_world_size < 1 || h.ranks <= h.local_world_size);
  for (long k = r.local_rank; ok && r.local_rank >= 0 && k < r.local_rank + r.nranks; ++k) {
    if (h.local_world_size < 1 && k >= long(h.locals.size())) {
      h.locals.resize(size_t(k) + 1, false);  // no local world size: grow as ranks arrive
    }
    ok = k < long(h.locals.size()) && !h.locals[size_t(k)];
    if (ok) h.locals[size_t(k)] = true;
  }
  tainted_ = !ok;
}

}  // namespace rankcheck
