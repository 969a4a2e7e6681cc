#include "model/pcie.h"

#include <fmt/format.h>

#include "base/text.h"

namespace rankcheck {

uint16_t parse_link_speed(std::string_view text) {
  // "32.0 GT/s PCIe", "2.5 GT/s PCIe"; kernels before 5.4 wrote "8 GT/s", "2.5 GT/s".
  long whole = 0, tenth = 0;
  size_t n = read_digits(text, 0, 3, whole);
  if (n == 0) return 0;
  if (n < text.size() && text[n] == '.') {
    size_t m = read_digits(text, n + 1, 1, tenth);
    if (m == 0) return 0;
    n += 1 + m;
  }
  if (!starts_at(text, n, " GT/s")) return 0;
  return static_cast<uint16_t>(whole * 10 + tenth);
}

std::string link_speed_text(uint16_t tenths) {
  return fmt::format("{}.{} GT/s", tenths / 10, tenths % 10);
}

std::string_view pci_path_text(PciPath p) {
  switch (p) {
    case PciPath::kPix:
      return "PIX";
    case PciPath::kPxb:
      return "PXB";
    case PciPath::kPhb:
      return "PHB";
    case PciPath::kSys:
      return "SYS";
    case PciPath::kUnknown:
      break;
  }
  return "?";
}

std::vector<std::string> pci_parts(std::string_view path) {
  std::vector<std::string> parts;
  size_t at = path.find("/sys/devices/");
  if (at == std::string_view::npos) return parts;
  path.remove_prefix(at + 13);
  if (!path.starts_with("pci")) return parts;
  while (!path.empty()) {
    size_t slash = path.find('/');
    if (slash != 0) parts.emplace_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return parts;
}

PciPath pci_path_between(const std::vector<std::string>& a, int numa_a,
                         const std::vector<std::string>& b, int numa_b) {
  if (a.size() < 2 || b.size() < 2) return PciPath::kUnknown;
  size_t common = 0;
  while (common < a.size() && common < b.size() && a[common] == b[common])
    ++common;
  if (common == 0) return numa_a == numa_b ? PciPath::kPhb : PciPath::kSys;
  if (common == 1) return PciPath::kPhb;
  if (common == a.size() || common == b.size()) return PciPath::kPix;  // one above the other
  size_t between = (a.size() - common) + (b.size() - common) - 1;
  return between <= 3 ? PciPath::kPix : PciPath::kPxb;
}

std::string acs_ctl_text(uint16_t ctl) {
  static constexpr const char* kNames[] = {"SrcValid",    "TransBlk",   "ReqRedir",   "CmpltRedir",
                                           "UpstreamFwd", "EgressCtrl", "DirectTrans"};
  std::string out;
  for (int b = 0; b < 7; ++b) {
    if ((ctl & (1u << b)) == 0) continue;
    if (!out.empty()) out += ' ';
    out += kNames[b];
    out += '+';
  }
  return out.empty() ? "none" : out;
}

}  // namespace rankcheck
