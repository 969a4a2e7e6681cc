#pragma once
// A summary of the admitted members, kept as they join, so that a clean job is
// decided without running every rule over every record.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "model/record.h"

namespace rankcheck {

/// A summary kept up to date as members join, so that a clean job needs no pass
/// over every record at the moment of the decision. Conservative: when clean()
/// is true, run_checks() on the same members finds nothing; when it is false,
/// run the rules.
class JoinTracker {
 public:
  /// Most local ranks one host may have for the tracker to follow it; a peer that
  /// claims more is left to the rules (taints), so memory stays small per host.
  static constexpr long kMaxTrackedLocal = 1024;

  JoinTracker(long world_size, std::vector<std::string> master_resolved, bool gpu_stage = false);
  void add(const Record& r, std::string_view peer);
  /// Anything that is never clean: a departure, a refusal.
  void taint() { tainted_ = true; }
  bool clean() const { return !tainted_ && distinct_ == world_size_; }

 private:
  struct HostState {
    int32_t local_world_size;
    int32_t ranks = 0;
    std::vector<bool> locals;
  };
  long world_size_;
  bool master_loopback_;
  bool gpu_stage_;
  std::set<std::string, std::less<>> uuids_;
  GpuFacts first_gpu_;
  bool tainted_ = false;
  long distinct_ = 0;  // ranks in [0, world) claimed exactly once so far
  std::vector<uint8_t> claimed_;
  bool have_first_ = false;  // what every member must share with the first
  uint64_t first_digest_ = 0;
  std::string first_addr_;
  uint16_t first_port_ = 0;
  std::vector<std::string> first_resolved_;
  std::map<std::string, HostState, std::less<>> hosts_;
  std::map<std::string, std::string, std::less<>> nccl_addrs_;  // NCCL's address -> its stack
  std::string first_net_;  // the first known nccl_net_signature
};

}  // namespace rankcheck
