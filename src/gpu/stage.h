#pragma once
// The GPU stage, behind one interface: inventory before the rendezvous, then a
// real NCCL init and a one-element all-reduce once the master says go. The real
// stage dlopen()s the CUDA driver and NCCL; tests load fake libraries with the
// same symbols through the same path.

#include <memory>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/result.h"
#include "model/gpu.h"
#include "model/timeline.h"

namespace rankcheck {

struct StageOptions {
  std::string cuda_lib = "libcuda.so.1";       ///< RANKCHECK_CUDA_LIB
  std::string nccl_lib = "libnccl.so.2";       ///< --nccl-lib, RANKCHECK_NCCL_LIB
  std::string nvml_lib = "libnvidia-ml.so.1";  ///< RANKCHECK_NVML_LIB
  uint64_t bandwidth_bytes = 0;                ///< --bandwidth
};

/// How NCCL is initialised: ncclCommInitRankConfig with the one id, or (a large
/// job, NCCL 2.23 and newer) ncclCommInitRankScalable over every root's id.
struct NcclInit {
  std::vector<NcclId> ids;
  bool scalable = false;
};

/// The seam where the GPU enters. Real: dlopen'd CUDA driver and NCCL.
class GpuStage {
 public:
  virtual ~GpuStage() = default;
  /// Loads the libraries, finds this member's devices. Never throws, never exits.
  virtual GpuFacts inventory(const GpuPlan& plan) = 0;
  /// ncclGetUniqueId, on the master's host.
  virtual Result<NcclId> unique_id() = 0;
  /// NCCL init and the all-reduce for each rank of the plan, by the deadline;
  /// aborts communicators that are still in progress when it passes. Returns by the
  /// deadline plus timing::kStageOverrun even when a call into NCCL never returns (the
  /// communicators are then aborted from another thread, and an abort that blocks
  /// too is left behind).
  virtual std::vector<RankResult> run(const NcclInit& init, long world_size, const GpuPlan& plan,
                                      Deadline deadline) = 0;
  /// Whether run() took over a call into NCCL that did not return: threads of the
  /// stage may still be inside NCCL (an abort takes seconds, or never returns). The
  /// process must then end with _exit: exit()'s handlers and cudart's static
  /// destructors must not run under NCCL's threads (NVIDIA/nccl#1013).
  virtual bool took_over() const { return false; }
  /// After a take-over: waits until the aborts it started have returned and the run
  /// has ended, or `until`. Whether they have.
  virtual bool wait_for_aborts(Clock::time_point until) {
    (void)until;
    return true;
  }
};

/// The real stage (or, without the CUDA/NCCL headers at build time, one that
/// reports itself unavailable).
std::unique_ptr<GpuStage> make_gpu_stage(const StageOptions& options);

/// Whether this build can run the real stage at all.
bool gpu_stage_built();

}  // namespace rankcheck
