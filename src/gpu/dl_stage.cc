// The real GPU stage: the CUDA driver API and NCCL, both loaded with dlopen so
// that the probe always starts and can say which library is missing where.
// Types and the config initializer come from cuda.h and nccl.h at build time;
// nothing here links against either library.

#include <cstring>
#include <fstream>
#include <thread>

#include <cuda.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <nccl.h>

#include <rankcheck/gpu.h>
#include <rankcheck/interrupt.h>
#include <rankcheck/procfs.h>

namespace rankcheck {
namespace {

// Loads `name` from `handle` into `fn`, remembering the first symbol missing.
template <class Fn>
void load(void* handle, Fn& fn, const char* name, std::string& missing) {
  fn = reinterpret_cast<Fn>(::dlsym(handle, name));
  if (fn == nullptr && missing.empty()) missing = name;
}

struct CudaApi {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDriverGetVersion) driver_version = nullptr;
  decltype(&::cuDeviceGetCount) device_count = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetName) device_name = nullptr;
  decltype(&::cuDeviceGetUuid) device_uuid = nullptr;  // cuDeviceGetUuid_v2
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
  decltype(&::cuGetErrorString) error_string = nullptr;

  std::string error(CUresult rc) const {
    const char* s = nullptr;
    if (error_string != nullptr) error_string(rc, &s);
    return s != nullptr ? fmt::format("{} ({})", s, static_cast<int>(rc))
                        : fmt::format("CUDA error {}", static_cast<int>(rc));
  }
};

struct NcclApi {
  decltype(&::ncclGetVersion) get_version = nullptr;
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRankConfig) init_rank_config = nullptr;
  decltype(&::ncclCommGetAsyncError) async_error = nullptr;
  decltype(&::ncclCommAbort) abort = nullptr;
  decltype(&::ncclCommDestroy) destroy = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
  decltype(&::ncclGetLastError) last_error = nullptr;

  std::string error(ncclResult_t rc, ncclComm_t comm) const {
    std::string s =
        error_string != nullptr ? error_string(rc) : fmt::format("NCCL error {}", int(rc));
    const char* last = last_error != nullptr ? last_error(comm) : nullptr;
    if (last != nullptr && *last != '\0') s += fmt::format(" ({})", last);
    return s;
  }
};

std::string uuid_text(const CUuuid& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  return fmt::format(
      "GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-"
      "{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
      b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
      b[15]);
}

// The NVIDIA driver's own version, where the kernel module tells it.
std::string nvidia_driver_version() {
  std::string banner = ProcFs{}.nvidia_version_banner();
  return banner.empty() ? "" : driver_version_from_banner(banner);
}

class DlStage final : public GpuStage {
 public:
  explicit DlStage(StageOptions o) : options_(std::move(o)) {}
  ~DlStage() override {
    // Libraries stay loaded: NCCL keeps threads that outlive a dlclose.
  }

  GpuFacts inventory(const GpuPlan& plan) override {
    GpuFacts f;
    f.visible_devices = plan.visible_devices;
    load_nccl(f);
    f.state = load_cuda(f);
    if (f.state != GpuState::kUsable) return f;
    f.state = pick_devices(plan, f);
    plan_ = plan;
    facts_ = f;
    return f;
  }

  Result<NcclId> unique_id() override {
    if (nccl_.get_unique_id == nullptr) return Error{"NCCL is not loaded on the master"};
    ncclUniqueId id{};
    ncclResult_t rc = nccl_.get_unique_id(&id);
    if (rc != ncclSuccess) return Error{"ncclGetUniqueId: " + nccl_.error(rc, nullptr)};
    NcclId out{};
    static_assert(sizeof(id.internal) == kNcclUniqueIdSize);
    std::memcpy(out.data(), id.internal, out.size());
    return out;
  }

  std::vector<RankResult> run(const NcclId& id, long world, const GpuPlan& plan,
                              Deadline deadline) override;

 private:
  void load_nccl(GpuFacts& f) {
    nccl_handle_ = ::dlopen(options_.nccl_lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (nccl_handle_ == nullptr) {
      const char* e = ::dlerror();
      f.nccl_error = e != nullptr ? e : options_.nccl_lib + ": cannot be loaded";
      return;
    }
    std::string missing;
    load(nccl_handle_, nccl_.get_version, "ncclGetVersion", missing);
    load(nccl_handle_, nccl_.get_unique_id, "ncclGetUniqueId", missing);
    load(nccl_handle_, nccl_.init_rank_config, "ncclCommInitRankConfig", missing);
    load(nccl_handle_, nccl_.async_error, "ncclCommGetAsyncError", missing);
    load(nccl_handle_, nccl_.abort, "ncclCommAbort", missing);
    load(nccl_handle_, nccl_.destroy, "ncclCommDestroy", missing);
    load(nccl_handle_, nccl_.all_reduce, "ncclAllReduce", missing);
    load(nccl_handle_, nccl_.group_start, "ncclGroupStart", missing);
    load(nccl_handle_, nccl_.group_end, "ncclGroupEnd", missing);
    load(nccl_handle_, nccl_.error_string, "ncclGetErrorString", missing);
    load(nccl_handle_, nccl_.last_error, "ncclGetLastError", missing);
    Dl_info info{};
    if (nccl_.get_version != nullptr &&
        ::dladdr(reinterpret_cast<void*>(nccl_.get_version), &info) != 0 && info.dli_fname) {
      f.nccl_path = info.dli_fname;
    } else {
      f.nccl_path = options_.nccl_lib;
    }
    if (!missing.empty()) {
      f.nccl_error =
          fmt::format("{} has no {}: NCCL 2.14 or newer is needed", f.nccl_path, missing);
      nccl_ = {};
      return;
    }
    int v = 0;
    if (nccl_.get_version(&v) != ncclSuccess || v <= 0) {
      f.nccl_error = fmt::format("{}: ncclGetVersion failed", f.nccl_path);
      nccl_ = {};
      return;
    }
    f.nccl_version = v;
  }

  GpuState load_cuda(GpuFacts& f) {
    void* h = ::dlopen(options_.cuda_lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = ::dlerror();
      f.error = e != nullptr ? e : options_.cuda_lib + ": cannot be loaded";
      return GpuState::kNoDriver;
    }
    std::string missing;
    load(h, cuda_.init, "cuInit", missing);
    load(h, cuda_.driver_version, "cuDriverGetVersion", missing);
    load(h, cuda_.device_count, "cuDeviceGetCount", missing);
    load(h, cuda_.device_get, "cuDeviceGet", missing);
    load(h, cuda_.device_name, "cuDeviceGetName", missing);
    load(h, cuda_.device_uuid, "cuDeviceGetUuid_v2", missing);
    load(h, cuda_.device_bus_id, "cuDeviceGetPCIBusId", missing);
    load(h, cuda_.device_memory, "cuDeviceTotalMem_v2", missing);
    load(h, cuda_.ctx_retain, "cuDevicePrimaryCtxRetain", missing);
    load(h, cuda_.ctx_release, "cuDevicePrimaryCtxRelease_v2", missing);
    load(h, cuda_.ctx_set_current, "cuCtxSetCurrent", missing);
    load(h, cuda_.stream_create, "cuStreamCreate", missing);
    load(h, cuda_.stream_query, "cuStreamQuery", missing);
    load(h, cuda_.stream_destroy, "cuStreamDestroy_v2", missing);
    load(h, cuda_.mem_alloc, "cuMemAlloc_v2", missing);
    load(h, cuda_.mem_free, "cuMemFree_v2", missing);
    load(h, cuda_.copy_to_device, "cuMemcpyHtoDAsync_v2", missing);
    load(h, cuda_.copy_to_host, "cuMemcpyDtoH_v2", missing);
    load(h, cuda_.error_string, "cuGetErrorString", missing);
    if (!missing.empty()) {
      f.error = fmt::format("{} has no {}: the driver is too old", options_.cuda_lib, missing);
      return GpuState::kNoDriver;
    }
    CUresult rc = cuda_.init(0);
    if (rc != CUDA_SUCCESS) {
      f.error = "cuInit: " + cuda_.error(rc);
      return GpuState::kInitFailed;
    }
    int v = 0;
    if (cuda_.driver_version(&v) == CUDA_SUCCESS) f.cuda_version = v;
    f.driver = nvidia_driver_version();
    int count = 0;
    rc = cuda_.device_count(&count);
    if (rc != CUDA_SUCCESS) {
      f.error = "cuDeviceGetCount: " + cuda_.error(rc);
      return GpuState::kInitFailed;
    }
    f.device_count = count;
    return GpuState::kUsable;
  }

  GpuState pick_devices(const GpuPlan& plan, GpuFacts& f) {
    std::string cvd = f.visible_devices.empty() ? std::string("CUDA_VISIBLE_DEVICES unset")
                                                : "CUDA_VISIBLE_DEVICES=" + f.visible_devices;
    std::vector<int> ordinals;
    if (plan.nranks > 1) {
      if (f.device_count < plan.nranks) {
        f.error = fmt::format("{} GPUs visible ({}), but this node stands for {} ranks",
                              f.device_count, cvd, plan.nranks);
        return GpuState::kNoDevice;
      }
      for (int i = 0; i < plan.nranks; ++i)
        ordinals.push_back(i);
      f.choice =
          fmt::format("node mode: devices 0-{} of {} visible", plan.nranks - 1, f.device_count);
    } else {
      if (f.device_count < 1) {
        f.error = fmt::format("no GPU visible ({})", cvd);
        return GpuState::kNoDevice;
      }
      if (plan.device) {
        if (*plan.device < 0 || *plan.device >= f.device_count) {
          f.error = fmt::format("--device {} but {} GPUs visible ({})", *plan.device,
                                f.device_count, cvd);
          return GpuState::kNoDevice;
        }
        ordinals.push_back(*plan.device);
        f.choice = fmt::format("--device {} of {} visible", *plan.device, f.device_count);
      } else {
        long local = std::max(0L, plan.local_rank);
        ordinals.push_back(static_cast<int>(local % f.device_count));
        f.choice = fmt::format("LOCAL_RANK {} % {} visible = device {}", plan.local_rank,
                               f.device_count, ordinals.back());
      }
    }
    for (size_t i = 0; i < ordinals.size(); ++i) {
      CUdevice dev = 0;
      CUresult rc = cuda_.device_get(&dev, ordinals[i]);
      if (rc != CUDA_SUCCESS) {
        f.error = fmt::format("cuDeviceGet({}): {}", ordinals[i], cuda_.error(rc));
        return GpuState::kInitFailed;
      }
      GpuDevice d;
      d.rank = static_cast<int32_t>(plan.first_rank + long(i));
      d.ordinal = ordinals[i];
      char name[256] = {};
      if (cuda_.device_name(name, sizeof name - 1, dev) == CUDA_SUCCESS) d.name = name;
      CUuuid uuid{};
      if (cuda_.device_uuid(&uuid, dev) == CUDA_SUCCESS) d.uuid = uuid_text(uuid);
      char bus[64] = {};
      if (cuda_.device_bus_id(bus, sizeof bus - 1, dev) == CUDA_SUCCESS) d.pci_bus_id = bus;
      size_t mem = 0;
      if (cuda_.device_memory(&mem, dev) == CUDA_SUCCESS) d.memory_bytes = mem;
      f.devices.push_back(std::move(d));
      devices_.push_back(dev);
    }
    return GpuState::kUsable;
  }

  StageOptions options_;
  void* nccl_handle_ = nullptr;
  CudaApi cuda_;
  NcclApi nccl_;
  GpuPlan plan_;
  GpuFacts facts_;
  std::vector<CUdevice> devices_;
};

// One rank's CUDA and NCCL objects.
struct Slot {
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  CUdeviceptr buf = 0;
  CUdeviceptr big = 0;  // bandwidth buffer
  ncclComm_t comm = nullptr;
  bool pending = false;
  Clock::time_point start{};
};

std::vector<RankResult> DlStage::run(const NcclId& id, long world, const GpuPlan& plan,
                                     Deadline deadline) {
  const size_t n = devices_.size();
  std::vector<RankResult> out(static_cast<size_t>(plan.nranks));
  for (size_t i = 0; i < out.size(); ++i)
    out[i].rank = static_cast<int32_t>(plan.first_rank + long(i));
  auto fail_all = [&](const std::string& why) {
    for (RankResult& r : out) {
      if (!r.init_ok && r.init_error.empty()) r.init_error = why;
    }
    return out;
  };
  if (!facts_.usable() || n != out.size()) return fail_all("no usable GPU on this member");
  if (nccl_.init_rank_config == nullptr) return fail_all("NCCL is not loaded");

  std::vector<Slot> slots(n);
  auto cleanup = [&](bool abort) {
    for (Slot& s : slots) {
      if (s.ctx != nullptr) cuda_.ctx_set_current(s.ctx);
      if (s.comm != nullptr) (abort ? nccl_.abort : nccl_.destroy)(s.comm);
      if (s.buf != 0) cuda_.mem_free(s.buf);
      if (s.big != 0) cuda_.mem_free(s.big);
      if (s.stream != nullptr) cuda_.stream_destroy(s.stream);
    }
    for (size_t i = 0; i < n; ++i) {
      if (slots[i].ctx != nullptr) cuda_.ctx_release(devices_[i]);
    }
  };
  for (size_t i = 0; i < n; ++i) {
    CUresult rc = cuda_.ctx_retain(&slots[i].ctx, devices_[i]);
    if (rc == CUDA_SUCCESS) rc = cuda_.ctx_set_current(slots[i].ctx);
    if (rc == CUDA_SUCCESS) rc = cuda_.stream_create(&slots[i].stream, CU_STREAM_NON_BLOCKING);
    if (rc == CUDA_SUCCESS) rc = cuda_.mem_alloc(&slots[i].buf, sizeof(int64_t));
    if (rc != CUDA_SUCCESS) {
      out[i].init_error =
          fmt::format("preparing device {}: {}", facts_.devices[i].ordinal, cuda_.error(rc));
      cleanup(true);
      return fail_all(out[i].init_error);
    }
  }

  // Init: non-blocking, polled against the deadline, aborted when it passes.
  ncclUniqueId uid{};
  std::memcpy(uid.internal, id.data(), id.size());
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  auto t_init = Clock::now();
  // A group call that fails names itself on every rank that has no error of its own.
  auto group_failed = [&](const char* call, ncclResult_t rc, std::string RankResult::*field) {
    if (rc == ncclSuccess || rc == ncclInProgress) return false;
    for (RankResult& r : out) {
      if ((r.*field).empty()) r.*field = fmt::format("{}: {}", call, nccl_.error(rc, nullptr));
    }
    return true;
  };
  bool group_ok =
      n == 1 || !group_failed("ncclGroupStart", nccl_.group_start(), &RankResult::init_error);
  for (size_t i = 0; group_ok && i < n; ++i) {
    CUresult crc = cuda_.ctx_set_current(slots[i].ctx);
    if (crc != CUDA_SUCCESS) {
      out[i].init_error = "cuCtxSetCurrent: " + cuda_.error(crc);
      continue;
    }
    ncclResult_t rc = nccl_.init_rank_config(&slots[i].comm, static_cast<int>(world), uid,
                                             static_cast<int>(out[i].rank), &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      // Failed at once: nothing to wait for, and the error is the one to report.
      out[i].init_error = "ncclCommInitRankConfig: " + nccl_.error(rc, slots[i].comm);
    } else if (slots[i].comm == nullptr) {
      out[i].init_error = "ncclCommInitRankConfig returned no communicator";
    } else {
      slots[i].pending = true;
    }
  }
  if (n > 1 && group_ok) group_failed("ncclGroupEnd", nccl_.group_end(), &RankResult::init_error);
  // Waits until every communicator left the in-progress state, or the deadline.
  auto settle = [&](auto on_done) {
    bool any = true;
    while (any) {
      any = false;
      for (size_t i = 0; i < n; ++i) {
        if (!slots[i].pending || slots[i].comm == nullptr) continue;
        ncclResult_t state = ncclInProgress;
        ncclResult_t rc = nccl_.async_error(slots[i].comm, &state);
        if (rc != ncclSuccess) state = rc;  // cannot even ask: that is the answer
        if (state == ncclInProgress) {
          any = true;
          continue;
        }
        slots[i].pending = false;
        on_done(i, state);
      }
      if (!any || deadline.expired() || interrupted()) break;
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    return any;
  };
  bool stuck = settle([&](size_t i, ncclResult_t state) {
    if (state == ncclSuccess) {
      out[i].init_ok = out[i].init_error.empty();
      out[i].init_ms = ms_between(t_init, Clock::now());
    } else if (out[i].init_error.empty()) {
      out[i].init_error = nccl_.error(state, slots[i].comm);
    }
  });
  bool init_failed = false;
  for (size_t i = 0; i < n; ++i) {
    if (slots[i].pending) {
      out[i].init_timed_out = !interrupted();
      if (interrupted())
        out[i].init_error = fmt::format("interrupted by {}", signal_name(interrupted()));
    }
    init_failed = init_failed || !out[i].init_ok;
  }
  if (stuck || init_failed) {
    cleanup(true);  // abort first: a communicator in a bad state must not be destroyed
    return out;
  }

  // One value per rank, summed: every rank checks the exact total. The copy goes on
  // the rank's own stream, so the all-reduce queued behind it reads the value.
  const auto expected = static_cast<int64_t>(world) * (world + 1) / 2;
  for (size_t i = 0; i < n; ++i) {
    int64_t v = out[i].rank + 1;
    CUresult rc = cuda_.ctx_set_current(slots[i].ctx);
    if (rc == CUDA_SUCCESS) rc = cuda_.copy_to_device(slots[i].buf, &v, sizeof v, slots[i].stream);
    if (rc != CUDA_SUCCESS) {
      const std::string why = "copying the input to the GPU: " + cuda_.error(rc);
      for (RankResult& r : out)
        r.allreduce_error = why;
      cleanup(true);
      return out;
    }
  }
  auto t_ar = Clock::now();
  group_ok =
      n == 1 || !group_failed("ncclGroupStart", nccl_.group_start(), &RankResult::allreduce_error);
  for (size_t i = 0; group_ok && i < n; ++i) {
    CUresult crc = cuda_.ctx_set_current(slots[i].ctx);
    if (crc != CUDA_SUCCESS) {
      out[i].allreduce_error = "cuCtxSetCurrent: " + cuda_.error(crc);
      continue;
    }
    auto* p = reinterpret_cast<void*>(slots[i].buf);
    ncclResult_t rc = nccl_.all_reduce(p, p, 1, ncclInt64, ncclSum, slots[i].comm,
                                       reinterpret_cast<cudaStream_t>(slots[i].stream));
    if (rc != ncclSuccess && rc != ncclInProgress) {
      out[i].allreduce_error = "ncclAllReduce: " + nccl_.error(rc, slots[i].comm);
    }
    slots[i].pending = true;
  }
  if (n > 1 && group_ok) {
    group_failed("ncclGroupEnd", nccl_.group_end(), &RankResult::allreduce_error);
  }
  settle([&](size_t i, ncclResult_t state) {
    if (state != ncclSuccess && out[i].allreduce_error.empty()) {
      out[i].allreduce_error = "ncclAllReduce: " + nccl_.error(state, slots[i].comm);
    }
  });
  // Enqueued: now the streams.
  std::vector<bool> done(n, false);
  for (size_t i = 0; i < n; ++i)
    done[i] = !out[i].allreduce_error.empty();
  while (true) {
    bool all = true;
    for (size_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      CUresult rc = cuda_.ctx_set_current(slots[i].ctx);
      if (rc == CUDA_SUCCESS) rc = cuda_.stream_query(slots[i].stream);
      if (rc == CUDA_ERROR_NOT_READY) {
        all = false;
        continue;
      }
      done[i] = true;
      if (rc != CUDA_SUCCESS) {
        out[i].allreduce_error = "waiting for the all-reduce: " + cuda_.error(rc);
        continue;
      }
      out[i].allreduce_us = ms_between(t_ar, Clock::now()) * 1000.0;
      int64_t got = 0;
      rc = cuda_.copy_to_host(&got, slots[i].buf, sizeof got);
      if (rc != CUDA_SUCCESS) {
        out[i].allreduce_error = "copying the result from the GPU: " + cuda_.error(rc);
        continue;
      }
      out[i].allreduce_done = true;
      out[i].expected = expected;
      out[i].got = got;
      out[i].allreduce_ok = got == expected;
    }
    if (all || deadline.expired() || interrupted()) break;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  bool clean = true;
  for (size_t i = 0; i < n; ++i) {
    if (!done[i]) {
      out[i].allreduce_timed_out = !interrupted();
      if (interrupted())
        out[i].allreduce_error = fmt::format("interrupted by {}", signal_name(interrupted()));
    }
    clean = clean && out[i].allreduce_ok;
  }

  // Optional: a timed all-reduce of --bandwidth bytes, figures as nccl-tests define them.
  if (clean && options_.bandwidth_bytes > 0) {
    size_t count = options_.bandwidth_bytes / sizeof(float);
    bool ok = count > 0;
    for (size_t i = 0; ok && i < n; ++i) {
      cuda_.ctx_set_current(slots[i].ctx);
      ok = cuda_.mem_alloc(&slots[i].big, count * sizeof(float)) == CUDA_SUCCESS;
    }
    constexpr int kIters = 5;
    Clock::time_point t0{};
    for (int iter = 0; ok && iter <= kIters; ++iter) {  // iteration 0 warms up
      if (iter == 1) t0 = Clock::now();
      ok = n == 1 || nccl_.group_start() == ncclSuccess;
      for (size_t i = 0; ok && i < n; ++i) {
        ok = cuda_.ctx_set_current(slots[i].ctx) == CUDA_SUCCESS;
        if (!ok) break;
        auto* p = reinterpret_cast<void*>(slots[i].big);
        ncclResult_t rc = nccl_.all_reduce(p, p, count, ncclFloat, ncclSum, slots[i].comm,
                                           reinterpret_cast<cudaStream_t>(slots[i].stream));
        ok = ok && (rc == ncclSuccess || rc == ncclInProgress);
        slots[i].pending = true;
      }
      if (n > 1 && ok) {
        ncclResult_t rc = nccl_.group_end();
        ok = rc == ncclSuccess || rc == ncclInProgress;
      }
      settle([&](size_t, ncclResult_t state) { ok = ok && state == ncclSuccess; });
      for (size_t i = 0; ok && i < n; ++i) {
        CUresult rc = cuda_.ctx_set_current(slots[i].ctx);
        if (rc != CUDA_SUCCESS) ok = false;
        while (ok && (rc = cuda_.stream_query(slots[i].stream)) == CUDA_ERROR_NOT_READY) {
          if (deadline.expired() || interrupted()) ok = false;
          std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
        ok = ok && rc == CUDA_SUCCESS;
      }
    }
    if (ok) {
      double secs = ms_between(t0, Clock::now()) / 1000.0 / kIters;
      double algbw = double(count * sizeof(float)) / secs / 1e9;
      for (RankResult& r : out) {
        r.bandwidth_bytes = count * sizeof(float);
        r.algbw_gbps = algbw;
        r.busbw_gbps = algbw * 2.0 * double(world - 1) / double(world);
      }
    } else {
      clean = false;
      for (RankResult& r : out) {
        r.allreduce_error = "the bandwidth all-reduce did not complete";
        r.allreduce_ok = false;
      }
    }
  }
  cleanup(!clean);
  return out;
}

}  // namespace

std::unique_ptr<GpuStage> make_gpu_stage(const StageOptions& options) {
  return std::make_unique<DlStage>(options);
}

bool gpu_stage_built() {
  return true;
}

}  // namespace rankcheck
