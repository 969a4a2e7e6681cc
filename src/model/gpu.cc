#include "model/gpu.h"

#include <iterator>

#include <fmt/format.h>

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

}  // namespace

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
