#pragma once
// NVLink and the NVSwitch fabric of this member's GPUs, through NVML dlopen'd as the
// CUDA driver is (libnvidia-ml.so.1, RANKCHECK_NVML_LIB): each GPU's fabric
// registration (nvmlDeviceGetGpuFabricInfoV, else nvmlDeviceGetGpuFabricInfo) and
// its active NVLinks (nvmlDeviceGetNvLinkState per link). NVML's types are declared
// here as NCCL's own src/include/nvmlwrap.h declares them: no nvml.h is needed.
// Private to src/gpu/.

#include <string>
#include <vector>

#include "model/gpu.h"

namespace rankcheck::dl {

/// Fills each device's fabric_state, fabric_status and nvlinks from NVML (by its PCI
/// bus id); the devices are left as they are, and the reason returned, when NVML
/// cannot be loaded or initialised ("" when it was read).
std::string read_nvml(const std::string& library, std::vector<GpuDevice>& devices);

}  // namespace rankcheck::dl
