#pragma once
// The CUDA driver and NCCL entry points the GPU stage calls, as function tables
// filled from dlopen'd libraries. Types come from cuda.h and nccl.h; nothing here
// links against either library. Private to src/gpu/.

#include <string>

#include <cuda.h>
#include <nccl.h>

namespace rankcheck::dl {

struct CudaApi {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDriverGetVersion) driver_version = nullptr;
  decltype(&::cuDeviceGetCount) device_count = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetName) device_name = nullptr;
  decltype(&::cuDeviceGetUuid) device_uuid = nullptr;      // cuDeviceGetUuid_v2 (R470+)
  decltype(&::cuDeviceGetUuid) device_gpu_uuid = nullptr;  // cuDeviceGetUuid: the GPU's (optional)
  decltype(&::cuDeviceGetPCIBusId) device_bus_id = nullptr;
  decltype(&::cuDeviceTotalMem) device_memory = nullptr;  // _v2
  decltype(&::cuDevicePrimaryCtxRetain) ctx_retain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) ctx_release = nullptr;  // _v2
  decltype(&::cuCtxSetCurrent) ctx_set_current = nullptr;
  decltype(&::cuStreamCreate) stream_create = nullptr;
  decltype(&::cuStreamQuery) stream_query = nullptr;
  decltype(&::cuStreamDestroy) stream_destroy = nullptr;    // _v2
  decltype(&::cuMemAlloc) mem_alloc = nullptr;              // _v2
  decltype(&::cuMemFree) mem_free = nullptr;                // _v2
  decltype(&::cuMemcpyHtoDAsync) copy_to_device = nullptr;  // _v2, on the rank's stream
  decltype(&::cuMemcpyDtoH) copy_to_host = nullptr;         // _v2
  decltype(&::cuEventCreate) event_create = nullptr;
  decltype(&::cuEventRecord) event_record = nullptr;
  decltype(&::cuEventQuery) event_query = nullptr;
  decltype(&::cuEventElapsedTime) event_elapsed = nullptr;  // _v2 (CUDA 12.8), else the first
  decltype(&::cuEventDestroy) event_destroy = nullptr;      // _v2
  decltype(&::cuGetErrorString) error_string = nullptr;

  /// "no CUDA-capable device is detected (100)".
  std::string error(CUresult rc) const;
};

struct NcclApi {
  decltype(&::ncclGetVersion) get_version = nullptr;
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRankConfig) init_rank_config = nullptr;
  /// NCCL 2.23 and newer; null before. Spelled out: older nccl.h do not declare it.
  ncclResult_t (*init_scalable)(ncclComm_t*, int nranks, int rank, int n_ids, ncclUniqueId* ids,
                                ncclConfig_t* config) = nullptr;
  decltype(&::ncclCommGetAsyncError) async_error = nullptr;
  decltype(&::ncclCommAbort) abort = nullptr;
  decltype(&::ncclCommDestroy) destroy = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
  decltype(&::ncclGetLastError) last_error = nullptr;

  /// ncclGetErrorString's text for `rc`.
  std::string describe(ncclResult_t rc) const;
  /// ncclGetLastError: NCCL's last warning in this process (one buffer for every
  /// communicator and thread); "" when there is none.
  std::string last() const;
};

/// Fills `api` from `handle`; the first symbol missing, or "" when none is.
std::string load_cuda(void* handle, CudaApi& api);
std::string load_nccl(void* handle, NcclApi& api);

/// "GPU-8f3c...", or "MIG-..." for a MIG slice (whose UUID is not its GPU's).
std::string uuid_text(const CUuuid& uuid, bool mig);

/// The file a symbol was loaded from, with symbolic links resolved ("" if unknown).
std::string library_file(void* symbol);

}  // namespace rankcheck::dl
