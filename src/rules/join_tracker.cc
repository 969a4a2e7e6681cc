// The join tracker: a summary kept as members join, so that a clean job is decided
// without a pass of every rule over every record. Each watch is one rule's (or a few
// rules' that read one fact) test of a joining record, listed in the rule table.

#include "rules/join_tracker.h"

#include <algorithm>
#include <array>

#include "nccl/known_faults.h"
#include "nccl/list.h"
#include "rules/context.h"
#include "rules/rules.h"

namespace rankcheck {

JoinWatch::Host& JoinWatch::host(const Record& r) {
  auto it = hosts.find(r.host);
  if (it == hosts.end()) {
    it = hosts.emplace(r.host, Host{r.local_world_size, 0, {}, 0, -1, 0, false}).first;
    if (r.local_world_size > 0) it->second.locals.assign(size_t(r.local_world_size), false);
  }
  return it->second;
}

bool watch_conflicts(JoinWatch&, const Record& r, std::string_view) {
  return r.conflicts.empty();
}

bool watch_world_size(JoinWatch& w, const Record& r, std::string_view) {
  return r.world_size == w.world_size;
}

bool watch_claims(JoinWatch& w, const Record& r, std::string_view) {
  if (!r.in_range()) return false;
  for (long k = r.rank; k <= r.last_rank(); ++k) {
    if (w.claimed[size_t(k)] != 0) return false;
    w.claimed[size_t(k)] = 1;
    ++w.distinct;
  }
  return true;
}

bool watch_rank_range(JoinWatch&, const Record& r, std::string_view) {
  return r.in_range();
}

// A loopback MASTER_ADDR is fine while every member comes from this host.
bool watch_loopback_master(JoinWatch& w, const Record&, std::string_view peer) {
  if (!w.master_loopback || peer.find(':') == std::string_view::npos) return true;
  return is_loopback_address(peer_host(peer));
}

// The bits per host are bounded by the world and a host's plausible size, not by what
// a peer claims (JoinTracker::add leaves larger claims to the rules).
bool watch_local_ranks(JoinWatch& w, const Record& r, std::string_view) {
  JoinWatch::Host& h = w.host(r);
  for (long k = r.local_rank; r.local_rank >= 0 && k < r.local_rank + r.nranks; ++k) {
    if (h.local_world_size < 1 && k >= long(h.locals.size())) {
      h.locals.resize(size_t(k) + 1, false);  // no local world size: grow as ranks arrive
    }
    if (k >= long(h.locals.size()) || h.locals[size_t(k)]) return false;
    h.locals[size_t(k)] = true;
  }
  return true;
}

bool watch_local_world(JoinWatch& w, const Record& r, std::string_view) {
  JoinWatch::Host& h = w.host(r);
  h.ranks += r.nranks;
  return r.local_world_size == h.local_world_size &&
         (h.local_world_size < 1 || h.ranks <= h.local_world_size);
}

bool watch_ifname(JoinWatch&, const Record& r, std::string_view) {
  return std::none_of(r.env.begin(), r.env.end(),
                      [&r](const EnvVar& e) { return ifname_selects_nothing(r, e); });
}

// NCCL_COMM_ID must name an address of rank 0's host.
bool watch_comm_id(JoinWatch&, const Record& r, std::string_view) {
  const NcclIfFacts& f = r.nccl_if;
  if (!f.known() || r.rank != 0 || (f.flags & NcclIfFacts::kCommIdLocal) != 0) return true;
  return std::none_of(r.env.begin(), r.env.end(),
                      [](const EnvVar& e) { return e.name == "NCCL_COMM_ID"; });
}

bool watch_nccl_if_found(JoinWatch&, const Record& r, std::string_view) {
  return !r.nccl_if->known() || r.nccl_if->state == NcclIfFacts::kFound;
}

// Loopback and link-local interfaces: their rules ask whether the job spans network
// stacks, which one record cannot tell.
bool watch_nccl_if_scope(JoinWatch&, const Record& r, std::string_view) {
  return !r.nccl_if->known() ||
         (r.nccl_if->flags & (NcclIfFacts::kLoopback | NcclIfFacts::kLinkScope)) == 0;
}

// No address of NCCL's in two network stacks.
bool watch_nccl_if_stacks(JoinWatch& w, const Record& r, std::string_view) {
  const NcclIfFacts& f = r.nccl_if;
  if (!f.known()) return true;
  std::string stack = f.netns.empty() ? "host " + r.host.str() : f.netns.str();
  auto [it, fresh] = w.nccl_addrs.try_emplace(f.address.str(), stack);
  return fresh || it->second == stack;
}

bool watch_nccl_net_alone(JoinWatch&, const Record& r, std::string_view) {
  return nccl_net_alone_ok(r.nccl_net);
}

// What check_shm reads, kept per host as members join: its need only grows.
bool watch_shm(JoinWatch& w, const Record& r, std::string_view) {
  JoinWatch::Host& h = w.host(r);
  h.shm_ranks += r.nranks;
  if (r.shm->known()) {
    h.shm_avail = h.shm_avail < 0 ? r.shm->avail : std::min(h.shm_avail, r.shm->avail);
    h.shm_segment = std::max(h.shm_segment, r.shm->segment);
    h.shm_on = h.shm_on || (r.shm->flags & ShmFacts::kShmDisabled) == 0;
  }
  return !shm_short(h.shm_on, h.shm_avail, h.shm_segment, h.shm_ranks);
}

bool watch_nccl_net_same(JoinWatch& w, const Record& r, std::string_view) {
  std::string net = nccl_net_signature(r.nccl_net);
  if (net.empty()) return true;
  if (w.first_net.empty()) w.first_net = net;
  return net == w.first_net;
}

// A link-local RoCE GID is a finding even where every host has one (a warning then:
// the job works on one L2 segment only).
bool watch_roce_gid(JoinWatch& w, const Record& r, std::string_view peer) {
  const NcclNetFacts& f = r.nccl_net;
  if (f.transport != NcclNetFacts::kIb) return true;
  for (const IbPortFacts* p : f.used_ports()) {
    if (p->link == IbPortFacts::kEthernet && p->gid_index >= 0 &&
        (p->flags & IbPortFacts::kGidLinkLocal) != 0)
      return false;
  }
  return watch_nccl_net_same(w, r, peer);  // the GID family is part of what hosts share
}

// No GPU twice, by UUID and by bus id (MIG slices share it).
bool watch_gpu_devices(JoinWatch& w, const Record& r, std::string_view) {
  if (!w.gpu_stage) return true;
  for (const GpuDevice& d : r.gpu.devices) {
    if (!w.devices.insert(r.host + '\n' + d.uuid).second) return false;
    if (!d.pci_bus_id.empty() && !w.devices.insert(r.host + "\nbus " + d.pci_bus_id.str()).second)
      return false;
  }
  return true;
}

bool watch_gpu_same(JoinWatch& w, const Record& r, std::string_view) {
  const GpuFacts& g = r.gpu;
  return !w.gpu_stage ||
         (g.nccl_version == w.first_gpu.nccl_version &&
          g.cuda_version == w.first_gpu.cuda_version && g.driver == w.first_gpu.driver);
}

bool watch_nccl_known_fault(JoinWatch& w, const Record& r, std::string_view) {
  const auto faults = nccl::known_faults();
  return !w.gpu_stage || std::none_of(faults.begin(), faults.end(),
                                      [&r](const auto& f) { return known_fault_here(f, r); });
}

// Hosts with different numbers of ranks: known once every rank has joined, from the
// counts watch_local_world keeps (its row runs first).
bool watch_uneven_hosts(JoinWatch& w, const Record&, std::string_view) {
  if (w.distinct < w.world_size || w.hosts.size() < 2) return true;
  int32_t first = w.hosts.begin()->second.ranks;
  return std::all_of(w.hosts.begin(), w.hosts.end(),
                     [first](const auto& h) { return h.second.ranks == first; });
}

bool watch_gpu_usable(JoinWatch& w, const Record& r, std::string_view) {
  const GpuFacts& g = r.gpu;
  return !w.gpu_stage || (g.usable() && g.nccl_loaded() && long(g.devices.size()) == r.nranks);
}

bool watch_gpu_wrapped(JoinWatch& w, const Record& r, std::string_view) {
  return !w.gpu_stage || !local_rank_wrapped(r);
}

bool watch_pcie_alone(JoinWatch&, const Record& r, std::string_view) {
  return !pcie_alone_raises(r);
}

// Every GPU at its place reaches its HCA as far as the first host's did.
bool watch_rails(JoinWatch& w, const Record& r, std::string_view) {
  for (const PcieDevice& d : r.pcie.devices) {
    if (d.kind != PcieDevice::kGpu || d.nic_path == 0 || d.name.str() == "GPU") continue;
    auto [it, fresh] = w.rail_paths.emplace(d.name.str(), d.nic_path);
    if (!fresh && it->second != d.nic_path) return false;
  }
  return true;
}

// No fabric down, and every GPU of a kind with the NVLinks the first one had.
bool watch_nvlink(JoinWatch& w, const Record& r, std::string_view) {
  if (!w.gpu_stage) return true;
  if (nvlink_fabric_down(r)) return false;
  for (const GpuDevice& d : r.gpu.devices) {
    if (d.nvlinks < 0) continue;
    auto [it, fresh] = w.nvlinks.emplace(d.name.str(), d.nvlinks);
    if (!fresh && it->second != d.nvlinks) return false;
  }
  return true;
}

bool watch_gpu_lost(JoinWatch& w, const Record& r, std::string_view) {
  return !w.gpu_stage || !gpu_lost(r);
}

bool watch_master_addr(JoinWatch& w, const Record& r, std::string_view) {
  return r.master_addr == w.first_addr && r.master_port == w.first_port &&
         r.master_resolved.get() == w.first_resolved;
}

// Starts within kLateStartMs of one another: no late start, and no clock off by
// more than that (a skewed clock makes a start look that far off).
bool watch_starts(JoinWatch& w, const Record& r, std::string_view) {
  if (uint64_t at = r.started_unix_ms; at != 0) {
    w.first_start = w.first_start == 0 ? at : std::min(w.first_start, at);
    w.last_start = std::max(w.last_start, at);
  }
  return w.last_start <= w.first_start + kLateStartMs;
}

bool watch_env(JoinWatch& w, const Record& r, std::string_view) {
  return r.env_digest == w.first_digest;
}

JoinTracker::JoinTracker(long world_size, std::vector<std::string> master_resolved,
                         bool gpu_stage) {
  watch_.world_size = world_size;
  watch_.master_loopback = !master_resolved.empty() &&
                           std::all_of(master_resolved.begin(), master_resolved.end(),
                                       [](const std::string& a) { return is_loopback_address(a); });
  watch_.gpu_stage = gpu_stage;
  watch_.claimed.assign(static_cast<size_t>(std::clamp(world_size, 0L, kMaxWorldSize)), 0);
}

void JoinTracker::add(const Record& r, std::string_view peer) {
  if (tainted_) return;
  JoinWatch& w = watch_;
  long max_local = std::min(w.world_size, kMaxTrackedLocal);
  if (r.local_world_size > max_local || r.local_rank + r.nranks > max_local) {
    tainted_ = true;
    return;
  }
  if (!w.seen_first) {
    w.seen_first = true;
    w.first_digest = r.env_digest;
    w.first_addr = r.master_addr;
    w.first_port = r.master_port;
    w.first_resolved = r.master_resolved.get();
    w.first_gpu = r.gpu;
  }
  // A watch several rows share (one fact, several rules) runs once per record.
  std::array<decltype(Rule::admits), 32> ran{};
  size_t n = 0;
  for (const Rule& rule : rules()) {
    if (rule.admits == nullptr ||
        std::find(ran.begin(), ran.begin() + n, rule.admits) != ran.begin() + long(n))
      continue;
    if (n < ran.size()) ran[n++] = rule.admits;
    if (!rule.admits(w, r, peer)) {
      tainted_ = true;
      return;
    }
  }
}

}  // namespace rankcheck
