#include "gpu/nvml.h"

#include <dlfcn.h>
#include <fmt/format.h>

namespace rankcheck::dl {
namespace {

// From NVML's API as NCCL 2.28's src/include/nvmlwrap.h extracts it.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr unsigned kFabricUuidLen = 16;
struct FabricInfo {  // nvmlGpuFabricInfo_t
  unsigned char cluster_uuid[kFabricUuidLen];
  nvmlReturn_t status;
  unsigned int clique_id;
  unsigned char state;
};
struct FabricInfoV2 {  // nvmlGpuFabricInfo_v2_t
  unsigned int version;
  unsigned char cluster_uuid[kFabricUuidLen];
  nvmlReturn_t status;
  unsigned int clique_id;
  unsigned char state;
  unsigned int health_mask;
};
// NVML_STRUCT_VERSION(GpuFabricInfo, 2)
constexpr unsigned kFabricInfoV2 = unsigned(sizeof(FabricInfoV2)) | (2u << 24);
// NVML_NVLINK_MAX_LINKS: 18 on every NVSwitch generation so far; a link past the
// GPU's last answers NVML_ERROR_INVALID_ARGUMENT, a GPU without NVLink
// NVML_ERROR_NOT_SUPPORTED.
constexpr unsigned kMaxLinks = 18;

struct Nvml {
  nvmlReturn_t (*init)() = nullptr;  // nvmlInit_v2
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*by_bus_id)(const char*, nvmlDevice_t*) = nullptr;  // _v2
  nvmlReturn_t (*fabric_v)(nvmlDevice_t, FabricInfoV2*) = nullptr;
  nvmlReturn_t (*fabric)(nvmlDevice_t, FabricInfo*) = nullptr;
  nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned, int*) = nullptr;  // nvmlEnableState_t
  const char* (*error)(nvmlReturn_t) = nullptr;
};

template <typename F>
void sym(void* h, F& f, const char* name) {
  f = reinterpret_cast<F>(::dlsym(h, name));
}

}  // namespace

std::string read_nvml(const std::string& library, std::vector<GpuDevice>& devices) {
  // Loaded once and kept, as the CUDA driver is.
  void* h = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = ::dlerror();
    return e != nullptr ? e : library + ": cannot be loaded";
  }
  Nvml api;
  sym(h, api.init, "nvmlInit_v2");
  sym(h, api.shutdown, "nvmlShutdown");
  sym(h, api.by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
  sym(h, api.fabric_v, "nvmlDeviceGetGpuFabricInfoV");  // R550
  sym(h, api.fabric, "nvmlDeviceGetGpuFabricInfo");     // R535
  sym(h, api.link_state, "nvmlDeviceGetNvLinkState");
  sym(h, api.error, "nvmlErrorString");
  if (api.init == nullptr || api.shutdown == nullptr || api.by_bus_id == nullptr) {
    return library + ": not NVML (no nvmlInit_v2)";
  }
  nvmlReturn_t rc = api.init();
  if (rc != kNvmlSuccess) {
    return fmt::format("nvmlInit: {} ({})", api.error != nullptr ? api.error(rc) : "error", rc);
  }
  for (GpuDevice& d : devices) {
    nvmlDevice_t dev = nullptr;
    if (api.by_bus_id(d.pci_bus_id.str().c_str(), &dev) != kNvmlSuccess) continue;
    if (api.fabric_v != nullptr) {
      FabricInfoV2 info{};
      info.version = kFabricInfoV2;
      if (api.fabric_v(dev, &info) == kNvmlSuccess) {
        d.fabric_state = info.state;
        d.fabric_status = info.status;
      }
    } else if (api.fabric != nullptr) {
      FabricInfo info{};
      if (api.fabric(dev, &info) == kNvmlSuccess) {
        d.fabric_state = info.state;
        d.fabric_status = info.status;
      }
    }
    if (api.link_state != nullptr) {
      int active = 0, links = 0;
      for (unsigned link = 0; link < kMaxLinks; ++link) {
        int on = 0;
        if (api.link_state(dev, link, &on) != kNvmlSuccess) break;
        ++links;
        active += on != 0 ? 1 : 0;
      }
      if (links > 0) d.nvlinks = static_cast<int8_t>(active);
    }
  }
  api.shutdown();
  return "";
}

}  // namespace rankcheck::dl
