#pragma once
// The PCIe facts under NCCL on a member's host, as a record carries them: the link of
// each GPU the member drives and of each HCA NCCL opens, the IOMMU's mode for them,
// the bridges above them whose ACS redirects peer-to-peer traffic, and which HCA sits
// nearest each GPU (host/pcie.h reads them; nccl/topo.h says how near).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/shared_string.h"

namespace rankcheck {

/// A device's PCIe link as sysfs says it (current_link_{speed,width}, max_link_*).
struct PcieLink {
  uint16_t speed = 0;      ///< in tenths of GT/s ("32.0 GT/s PCIe" -> 320); 0: unknown
  uint16_t max_speed = 0;  ///< the same, the device's maximum
  uint8_t width = 0;       ///< lanes; 0: unknown
  uint8_t max_width = 0;

  bool width_short() const { return width > 0 && max_width > 0 && width < max_width; }
  bool speed_short() const { return speed > 0 && max_speed > 0 && speed < max_speed; }
};

/// "32.0 GT/s PCIe" (the kernel's pci_speed_string, and the older "8 GT/s") -> 320;
/// 0 for "Unknown" or anything else.
uint16_t parse_link_speed(std::string_view text);
/// 320 -> "32.0 GT/s", 25 -> "2.5 GT/s".
std::string link_speed_text(uint16_t tenths);

/// How far apart two PCIe devices are, in NCCL's words (nvidia-smi topo -m's too).
enum class PciPath : uint8_t {
  kUnknown = 0,
  kPix = 1,  ///< through at most one PCIe switch (or one device's functions)
  kPxb = 2,  ///< through more than one switch, not through a CPU's host bridge
  kPhb = 3,  ///< through a CPU's host bridge (one NUMA node)
  kSys = 4,  ///< across CPUs (NUMA nodes)
};
std::string_view pci_path_text(PciPath p);
/// A device's place in the PCI tree: its sysfs path's parts below /sys/devices, the
/// host bridge first ("pci0000:15", "0000:15:01.0", "0000:16:00.0", ..., the device);
/// none when the path is not under a host bridge (a virtual device).
std::vector<std::string> pci_parts(std::string_view sysfs_path);
/// How far apart two devices are, from their parts and NUMA nodes (-1: none): below
/// one root port, PIX when at most three devices lie between them (a switch's two
/// downstream ports and its upstream port), else PXB; under one host bridge, or two of
/// one NUMA node, PHB; else SYS. NCCL flattens a Broadcom switch's two internal levels
/// into one (ncclTopoFlattenBcmSwitches), so it may call PIX what this calls PXB.
PciPath pci_path_between(const std::vector<std::string>& a, int numa_a,
                         const std::vector<std::string>& b, int numa_b);

/// One GPU or HCA, with its link and what the IOMMU does to its DMA.
struct PcieDevice {
  enum Kind : uint8_t { kGpu = 1, kHca = 2 };
  /// iommu_group/type: no group (no IOMMU over it), identity (passthrough, iommu=pt),
  /// DMA or DMA-FQ (addresses translated).
  enum Iommu : uint8_t { kIommuUnknown = 0, kIommuNone = 1, kIommuIdentity = 2, kIommuDma = 3 };
  uint8_t kind = kGpu;
  uint8_t iommu = kIommuUnknown;
  SharedString bdf;   ///< "0000:18:00.0"
  SharedString name;  ///< an HCA's ("mlx5_0"); a GPU's: "GPU 3" (its place among the host's)
  int32_t rank = -1;  ///< a GPU's: the rank it serves
  PcieLink link;
  SharedString iommu_type;  ///< the type file as read ("DMA-FQ"), "" when none
  // A GPU's: the HCA NCCL would give it (the nearest it opens), and the nearest HCA
  // of the host where that one is nearer (with why NCCL does not open it).
  SharedString nic;
  uint8_t nic_path = 0;  ///< PciPath
  SharedString near_nic;
  uint8_t near_path = 0;  ///< PciPath
  SharedString near_why;  ///< "NCCL_IB_HCA leaves it out", "its port is not ACTIVE"
};

/// A bridge above a GPU or HCA whose ACS control register has P2P Request Redirect or
/// Completion Redirect on: peer-to-peer traffic below it goes up to the root complex.
struct AcsBridge {
  SharedString bdf;
  uint16_t ctl = 0;  ///< the ACS Control register
  auto operator<=>(const AcsBridge&) const = default;
};
inline size_t hash_item(const AcsBridge& b) {
  return std::hash<std::string_view>{}(b.bdf.str()) * 31 + b.ctl;
}

/// ACS Control register bits (PCIe Base Specification, ACS Extended Capability).
inline constexpr uint16_t kAcsSourceValidation = 1 << 0;
inline constexpr uint16_t kAcsTranslationBlocking = 1 << 1;
inline constexpr uint16_t kAcsRequestRedirect = 1 << 2;
inline constexpr uint16_t kAcsCompletionRedirect = 1 << 3;
inline constexpr uint16_t kAcsUpstreamForwarding = 1 << 4;
inline constexpr uint16_t kAcsEgressControl = 1 << 5;
inline constexpr uint16_t kAcsDirectTranslated = 1 << 6;
/// "SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+", the bits set as lspci names them.
std::string acs_ctl_text(uint16_t ctl);
/// Whether a bridge's ACS sends P2P requests or completions up to the root complex,
/// unless Direct Translated P2P lets a device with ATS go direct (a VM's documented
/// configuration).
inline bool acs_redirects(uint16_t ctl) {
  return (ctl & (kAcsRequestRedirect | kAcsCompletionRedirect)) != 0 &&
         (ctl & kAcsDirectTranslated) == 0;
}

struct PcieFacts {
  enum Flags : uint8_t {
    kRead = 1,           ///< collected (a GPU's or HCA's PCI device was found)
    kAcsUnreadable = 2,  ///< a bridge's config space past 64 bytes did not read (not root)
  };
  uint8_t flags = 0;
  std::vector<PcieDevice> devices;  ///< the member's GPUs, then the HCAs NCCL opens
  std::vector<AcsBridge> acs;       ///< the bridges above them that redirect
  SharedString cmdline;             ///< the kernel command line's IOMMU words ("iommu=pt")
  /// NCCL_TOPO_FILE as NCCL would read it: why NCCL would not ("" when it would, or
  /// when the variable is unset; nccl/topo_file.h).
  SharedString topo_error;

  bool known() const { return (flags & kRead) != 0; }
  bool empty() const { return !known() && topo_error.empty(); }
};

}  // namespace rankcheck
