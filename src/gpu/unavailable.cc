// Built when cuda.h or nccl.h was not found: the stage says so instead of running.

#include "gpu/stage.h"
#include "model/gpu.h"

namespace rankcheck {
namespace {

constexpr const char* kWhy =
    "this rankcheck was built without the CUDA and NCCL headers (cuda.h, nccl.h)";

class Unavailable final : public GpuStage {
 public:
  GpuFacts inventory(const GpuPlan& plan) override {
    GpuFacts f;
    f.state = GpuState::kUnavailable;
    f.error = kWhy;
    f.nccl_error = kWhy;
    f.visible_devices = plan.visible_devices.value_or("");
    f.granted = plan.grant.count;
    f.granted_by = plan.grant.by;
    return f;
  }
  Result<NcclId> unique_id() override { return Error{kWhy}; }
  std::vector<RankResult> run(const NcclInit&, long, const GpuPlan& plan, Deadline) override {
    std::vector<RankResult> out(static_cast<size_t>(plan.nranks));
    for (size_t i = 0; i < out.size(); ++i) {
      out[i].rank = static_cast<int32_t>(plan.first_rank + long(i));
      out[i].init_error = kWhy;
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<GpuStage> make_gpu_stage(const StageOptions&) {
  return std::make_unique<Unavailable>();
}

bool gpu_stage_built() {
  return false;
}

}  // namespace rankcheck
