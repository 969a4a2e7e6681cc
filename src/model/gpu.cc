#include "model/gpu.h"

#include <algorithm>
#include <iterator>
#include <set>

#include <fmt/format.h>

#include "base/text.h"

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

namespace {

// "535.104.05", "555.58": digits, then one or more ".digits".
bool looks_like_version(std::string_view w) {
  size_t dots = 0;
  bool digit = false;
  for (char c : w) {
    if (c >= '0' && c <= '9') {
      digit = true;
    } else if (c == '.' && digit) {
      ++dots;
      digit = false;
    } else {
      return false;
    }
  }
  return dots > 0 && digit;
}

// The entries of a GPU list, split at commas, blanks around each dropped.
std::vector<std::string_view> gpu_list(std::string_view list) {
  std::vector<std::string_view> out;
  while (true) {
    size_t comma = list.find(',');
    out.push_back(trim_blanks(list.substr(0, comma)));
    if (comma == std::string_view::npos) return out;
    list.remove_prefix(comma + 1);
  }
}

// An entry that can name a GPU: an index, or a GPU-/MIG- UUID or its prefix.
bool names_gpu(std::string_view e) {
  if (e.starts_with("GPU-") || e.starts_with("MIG-")) return e.size() > 4;
  return !e.empty() && e.size() <= 9 && std::all_of(e.begin(), e.end(), is_digit);
}

std::string shown_list(std::string_view list) {
  return printable(list, 48);
}

}  // namespace

std::string_view fabric_state_text(uint8_t state) {
  switch (state) {
    case GpuDevice::kFabricUnsupported:
      return "not supported";
    case GpuDevice::kFabricNotStarted:
      return "not started";
    case GpuDevice::kFabricInProgress:
      return "in progress";
    case GpuDevice::kFabricCompleted:
      return "completed";
    default:
      return "not read";
  }
}

GpuGrant gpu_grant(const EnvMap& env) {
  GpuGrant g;
  if (const std::string* cvd = env_get(env, "CUDA_VISIBLE_DEVICES")) {
    std::set<std::string_view> seen;
    int32_t n = 0;
    for (std::string_view e : gpu_list(*cvd)) {
      if (!names_gpu(e)) break;
      if (!seen.insert(e).second) return {};
      ++n;
    }
    g.count = n;
    g.by = fmt::format("CUDA_VISIBLE_DEVICES lists {} ({})", n, shown_list(*cvd));
    return g;
  }
  if (const std::string* nvd = env_get(env, "NVIDIA_VISIBLE_DEVICES")) {
    std::vector<std::string_view> items = gpu_list(*nvd);
    if (!std::all_of(items.begin(), items.end(), names_gpu)) return {};
    if (std::set<std::string_view>(items.begin(), items.end()).size() != items.size()) return {};
    g.count = static_cast<int32_t>(items.size());
    g.by = fmt::format("NVIDIA_VISIBLE_DEVICES lists {} ({})", g.count, shown_list(*nvd));
    return g;
  }
  if (const std::string* on = env_get(env, "SLURM_GPUS_ON_NODE")) {
    long n = 0;
    if (on->empty() || read_digits(*on, 0, 6, n) != on->size() || n <= 0) return {};
    g.count = static_cast<int32_t>(n);
    g.by = fmt::format("SLURM_GPUS_ON_NODE={}", n);
  }
  return g;
}

std::string driver_version_from_banner(std::string_view line) {
  auto at = line.find("Kernel Module");
  if (at == std::string_view::npos) return "";
  line.remove_prefix(at);
  while (!line.empty()) {
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string_view::npos) break;
    line.remove_prefix(start);
    size_t end = line.find_first_of(" \t");
    std::string_view word = line.substr(0, end);
    if (looks_like_version(word)) return std::string(word);
    if (end == std::string_view::npos) break;
    line.remove_prefix(end);
  }
  return "";
}

std::string driver_version_from_library(std::string_view path) {
  auto slash = path.rfind('/');
  if (slash != std::string_view::npos) path.remove_prefix(slash + 1);
  constexpr std::string_view kName = "libcuda.so.";
  if (path.substr(0, kName.size()) != kName) return "";
  path.remove_prefix(kName.size());
  // "1" alone is the soname, not a version.
  return path.find('.') != std::string_view::npos && looks_like_version(path) ? std::string(path)
                                                                              : "";
}

}  // namespace rankcheck
