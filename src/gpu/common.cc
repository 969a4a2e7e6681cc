#include <fmt/format.h>

#include <rankcheck/gpu.h>

namespace rankcheck {

std::string nccl_version_text(int32_t v) {
  if (v <= 0) return "none";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch; older ones major*1000 + minor*100 + patch.
  if (v >= 10000) return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
  return fmt::format("{}.{}.{}", v / 1000, v / 100 % 10, v % 100);
}

std::string cuda_version_text(int32_t v) {
  if (v <= 0) return "none";
  return fmt::format("{}.{}", v / 1000, v % 1000 / 10);
}

}  // namespace rankcheck
