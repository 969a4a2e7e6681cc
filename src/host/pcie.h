#pragma once
// The PCIe facts under NCCL on this host (model/pcie.h), read from sysfs under the
// SysFs root as the IB facts are: each device's link, its IOMMU group's type, the ACS
// Control register of the bridges above it (from their config space: past 64 bytes
// only CAP_SYS_ADMIN reads it), and which HCA sits nearest each GPU.

#include <optional>
#include <string_view>

#include "host/sysfs_ib.h"
#include "model/gpu.h"
#include "model/nccl_net.h"
#include "model/pcie.h"

namespace rankcheck {

/// What a device's config space (its sysfs `config`, as read) says of ACS: whether the
/// extended capabilities were there to read (more than 256 bytes), and the ACS Control
/// register when an ACS capability is among them.
struct AcsRead {
  bool readable = false;
  std::optional<uint16_t> ctl;
};
AcsRead acs_from_config(std::string_view config);

/// "0000:18:00.0" from CUDA's or NVML's "00000000:18:00.0" (lower case, four-digit
/// domain, as sysfs names the device); "" when it is not a bus id.
std::string sysfs_bdf(std::string_view bus_id);

/// The facts for the GPUs `gpu` drives and the HCAs `net` opens (none collected when
/// neither has a PCI device under `sys`).
PcieFacts read_pcie(const SysFs& sys, const GpuFacts& gpu, const NcclNetFacts& net);

/// Why NCCL would not read the NCCL_TOPO_FILE `env` sets (under `sys`'s root, as the
/// rest of the host's files): "" when it would, or when the variable is unset.
std::string topo_file_problem(const SysFs& sys, const EnvMap& env, int32_t nccl_version);

}  // namespace rankcheck
