// The function tables of the dlopen'd CUDA driver and NCCL, and the texts made
// from what they return.

#include "gpu/dl_libs.h"

#include <climits>
#include <cstdlib>

#include <dlfcn.h>
#include <fmt/format.h>

namespace rankcheck::dl {
namespace {

// Loads `name` from `handle` into `fn`, remembering the first symbol missing.
template <class Fn>
void load(void* handle, Fn& fn, const char* name, std::string& missing) {
  fn = reinterpret_cast<Fn>(::dlsym(handle, name));
  if (fn == nullptr && missing.empty()) missing = name;
}

// The same, for a symbol the stage can do without.
template <class Fn>
void load_optional(void* handle, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(::dlsym(handle, name));
}

}  // namespace

std::string CudaApi::error(CUresult rc) const {
  const char* s = nullptr;
  if (error_string != nullptr) error_string(rc, &s);
  return s != nullptr ? fmt::format("{} ({})", s, static_cast<int>(rc))
                      : fmt::format("CUDA error {}", static_cast<int>(rc));
}

std::string NcclApi::describe(ncclResult_t rc) const {
  const char* s = error_string != nullptr ? error_string(rc) : nullptr;
  return s != nullptr ? std::string(s) : fmt::format("NCCL error {}", int(rc));
}

std::string NcclApi::last() const {
  const char* s = last_error != nullptr ? last_error(nullptr) : nullptr;
  return s != nullptr ? std::string(s) : std::string();
}

std::string load_cuda(void* h, CudaApi& api) {
  std::string missing;
  load(h, api.init, "cuInit", missing);
  load(h, api.driver_version, "cuDriverGetVersion", missing);
  load(h, api.device_count, "cuDeviceGetCount", missing);
  load(h, api.device_get, "cuDeviceGet", missing);
  load(h, api.device_name, "cuDeviceGetName", missing);
  // cuDeviceGetUuid_v2 (CUDA 11.4, driver R470) names a MIG slice by its own UUID;
  // an R450/R460 driver has only cuDeviceGetUuid, the GPU's, which does instead.
  load_optional(h, api.device_uuid, "cuDeviceGetUuid_v2");
  load_optional(h, api.device_gpu_uuid, "cuDeviceGetUuid");
  if (api.device_uuid == nullptr && api.device_gpu_uuid == nullptr && missing.empty()) {
    missing = "cuDeviceGetUuid_v2";
  }
  load(h, api.device_bus_id, "cuDeviceGetPCIBusId", missing);
  load(h, api.device_memory, "cuDeviceTotalMem_v2", missing);
  load(h, api.ctx_retain, "cuDevicePrimaryCtxRetain", missing);
  load(h, api.ctx_release, "cuDevicePrimaryCtxRelease_v2", missing);
  load(h, api.ctx_set_current, "cuCtxSetCurrent", missing);
  load(h, api.stream_create, "cuStreamCreate", missing);
  load(h, api.stream_query, "cuStreamQuery", missing);
  load(h, api.stream_destroy, "cuStreamDestroy_v2", missing);
  load(h, api.mem_alloc, "cuMemAlloc_v2", missing);
  load(h, api.mem_free, "cuMemFree_v2", missing);
  load(h, api.copy_to_device, "cuMemcpyHtoDAsync_v2", missing);
  load(h, api.copy_to_host, "cuMemcpyDtoH_v2", missing);
  load(h, api.event_create, "cuEventCreate", missing);
  load(h, api.event_record, "cuEventRecord", missing);
  load(h, api.event_query, "cuEventQuery", missing);
  load_optional(h, api.event_elapsed, "cuEventElapsedTime_v2");
  if (api.event_elapsed == nullptr) load(h, api.event_elapsed, "cuEventElapsedTime", missing);
  load(h, api.event_destroy, "cuEventDestroy_v2", missing);
  load(h, api.error_string, "cuGetErrorString", missing);
  return missing;
}

std::string load_nccl(void* h, NcclApi& api) {
  std::string missing;
  load(h, api.get_version, "ncclGetVersion", missing);
  load(h, api.get_unique_id, "ncclGetUniqueId", missing);
  load(h, api.init_rank_config, "ncclCommInitRankConfig", missing);
  load_optional(h, api.init_scalable, "ncclCommInitRankScalable");
  load(h, api.async_error, "ncclCommGetAsyncError", missing);
  load(h, api.abort, "ncclCommAbort", missing);
  load(h, api.destroy, "ncclCommDestroy", missing);
  load(h, api.all_reduce, "ncclAllReduce", missing);
  load(h, api.group_start, "ncclGroupStart", missing);
  load(h, api.group_end, "ncclGroupEnd", missing);
  load(h, api.error_string, "ncclGetErrorString", missing);
  load(h, api.last_error, "ncclGetLastError", missing);
  return missing;
}

std::string uuid_text(const CUuuid& u, bool mig) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  return fmt::format(
      "{}-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-"
      "{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
      mig ? "MIG" : "GPU", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
      b[12], b[13], b[14], b[15]);
}

std::string library_file(void* symbol) {
  Dl_info info{};
  if (symbol == nullptr || ::dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  char resolved[PATH_MAX];
  if (::realpath(info.dli_fname, resolved) == nullptr) return info.dli_fname;
  return resolved;
}

}  // namespace rankcheck::dl
