#pragma once
// A summary of the admitted members, kept as they join, so that a clean job is
// decided without running every rule over every record. Each rule says in its
// table row (rules.cc) how the tracker keeps to it: most have a watch here, a test
// of each joining record.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "model/record.h"

namespace rankcheck {

/// What the watches keep of the records that joined: each piece is written by one
/// watch, and read by the others that need it.
struct JoinWatch {
  /// Most local ranks one host may have for the tracker to follow it; a peer that
  /// claims more is left to the rules, so memory stays small per host.
  static constexpr long kMaxTrackedLocal = 1024;

  long world_size = 0;
  bool master_loopback = false;  ///< MASTER_ADDR resolves to loopback on the master
  bool gpu_stage = false;
  std::vector<uint8_t> claimed;  ///< ranks in [0, world) claimed so far (watch_claims)
  long distinct = 0;             ///< of them, claimed exactly once
  struct Host {
    int32_t local_world_size = -1;
    int32_t ranks = 0;         ///< watch_local_world (watch_uneven_hosts reads it)
    std::vector<bool> locals;  ///< watch_local_ranks
    // watch_shm: the host's ranks, its least /dev/shm free, its largest segment, and
    // whether every record that read /dev/shm has NCCL's SHM transport off.
    int32_t shm_ranks = 0;
    int64_t shm_avail = -1;
    int64_t shm_segment = 0;
    bool shm_on = false;
  };
  std::map<std::string, Host, std::less<>> hosts;
  // What every member must share with the first (watch_env, watch_master_addr,
  // watch_gpu_same): taken from the first record before any watch reads it.
  bool seen_first = false;
  uint64_t first_digest = 0;
  std::string first_addr;
  uint16_t first_port = 0;
  std::vector<std::string> first_resolved;
  GpuFacts first_gpu;
  std::string first_net;                       ///< the first known nccl_net_signature
  std::set<std::string, std::less<>> devices;  ///< host + GPU UUID or bus id
  std::map<std::string, std::string, std::less<>> nccl_addrs;  ///< NCCL's address -> its stack
  uint64_t first_start = 0, last_start = 0;  ///< members' wall-clock starts (watch_starts)
  /// watch_rails: each GPU's (by its place on its host) path to its HCA, as first seen.
  std::map<std::string, uint8_t, std::less<>> rail_paths;
  /// watch_nvlink: each GPU kind's active NVLinks, as first seen.
  std::map<std::string, int8_t, std::less<>> nvlinks;

  Host& host(const Record& r);
};

// The watches of the rule table (rules.cc): false when the record could make the
// rule raise. Each is a test of one record against what the earlier ones left.
bool watch_conflicts(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_world_size(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_claims(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_rank_range(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_loopback_master(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_local_ranks(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_local_world(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_ifname(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_comm_id(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_nccl_if_found(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_nccl_if_scope(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_nccl_if_stacks(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_nccl_net_alone(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_shm(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_pcie_alone(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_rails(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_nccl_net_same(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_roce_gid(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_gpu_devices(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_gpu_same(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_nccl_known_fault(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_uneven_hosts(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_gpu_usable(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_gpu_wrapped(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_gpu_lost(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_nvlink(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_master_addr(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_starts(JoinWatch& w, const Record& r, std::string_view peer);
bool watch_env(JoinWatch& w, const Record& r, std::string_view peer);

/// Kept up to date as members join, so that a clean job needs no pass over every
/// record at the moment of the decision. Conservative: when clean() is true, the
/// rules on the same members find nothing but what run_always() finds; when it is
/// false, run the rules.
class JoinTracker {
 public:
  static constexpr long kMaxTrackedLocal = JoinWatch::kMaxTrackedLocal;

  JoinTracker(long world_size, std::vector<std::string> master_resolved, bool gpu_stage = false);
  /// Every kWatch rule's watch, in the table's order, until one refuses.
  void add(const Record& r, std::string_view peer);
  /// What no watch sees and every kEvents rule raises on: a departure, a refusal,
  /// a failed accept, a lost relay.
  void taint() { tainted_ = true; }
  bool clean() const { return !tainted_ && watch_.distinct == watch_.world_size; }

 private:
  JoinWatch watch_;
  bool tainted_ = false;
};

}  // namespace rankcheck
