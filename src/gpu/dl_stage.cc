// The real GPU stage: the CUDA driver API and NCCL, both loaded with dlopen so
// that the probe always starts and can say which library is missing where.
// Types and the config initializer come from cuda.h and nccl.h at build time;
// nothing here links against either library.

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include <dlfcn.h>
#include <fmt/format.h>

#include "base/interrupt.h"
#include "gpu/dl_libs.h"
#include "gpu/dl_run.h"
#include "gpu/nvml.h"
#include "gpu/stage.h"
#include "host/procfs.h"
#include "model/gpu.h"
#include "model/timeline.h"
#include "nccl/version.h"

namespace rankcheck {
namespace {

using dl::CudaApi;
using dl::NcclApi;

// timing::kRunGrace: how long after its deadline a run may take to end the stage
// itself (abort its communicators, free its buffers) before it is taken for blocked
// inside NCCL. The results are sent then; the aborts themselves get seconds more
// before the process ends (GpuStage::wait_for_aborts).
using timing::kRunGrace;
using timing::kStageOverrun;
// The NCCL variables the stage sets to 0 in this process before NCCL reads them (the
// record keeps the user's values; the training job keeps its own), and why, as the
// note says it.
struct ZeroedForTheCheck {
  const char* name;
  const char* why;
};
constexpr ZeroedForTheCheck kZeroed[] = {
    // NCCL_COMM_BLOCKING=1 overrides config.blocking = 0 (src/init.cc envConfigOverride,
    // since 2.14; read once, at the first init): init would then block in the stage's
    // thread, and the deadline could abort nothing.
    {"NCCL_COMM_BLOCKING", "whose deadline needs a non-blocking NCCL init"},
    // NCCL 2.22 and newer connect at init only what every collective needs
    // (src/init.cc: runtime connect, NCCL_RUNTIME_CONNECT=1 by default), and the rest at
    // the first collective of each algorithm (enqueue.cc ncclPrepareTasks): the
    // one-element all-reduce would set up one algorithm's connections (ring or tree,
    // LL), and a broken path that only the tree, NVLS or CollNet uses would pass the
    // check and stop the job at its first large collective. 0 makes init connect every
    // algorithm, as every NCCL before 2.22 did; it also keeps the stage off 2.22's
    // first-collective setup threads, which an abort from another thread does not wait
    // for (2.22 only, fixed in 2.23).
    {"NCCL_RUNTIME_CONNECT", "so that NCCL's init connects every algorithm's peers"},
};

// Sets each of kZeroed to 0; the values the user had given them, other than 0.
std::vector<std::pair<const ZeroedForTheCheck*, std::string>> zero_for_the_check() {
  std::vector<std::pair<const ZeroedForTheCheck*, std::string>> users;
  for (const ZeroedForTheCheck& z : kZeroed) {
    const char* v = std::getenv(z.name);
    if (v != nullptr && std::string_view(v) != "0") users.emplace_back(&z, v);
    ::setenv(z.name, "0", 1);
  }
  return users;
}

// The NVIDIA driver's own version: the kernel module's banner, else the name of
// the file libcuda.so.1 links to. "" when neither tells (the report then names the
// CUDA version cuDriverGetVersion gave).
std::string nvidia_driver_version(void* cuda_symbol) {
  std::string banner = ProcFs{}.nvidia_version_banner();
  std::string v = banner.empty() ? "" : driver_version_from_banner(banner);
  if (v.empty()) v = driver_version_from_library(dl::library_file(cuda_symbol));
  return v;
}

class DlStage final : public GpuStage {
 public:
  explicit DlStage(StageOptions o) : options_(std::move(o)) {}
  ~DlStage() override {
    // Libraries stay loaded: NCCL keeps threads that outlive a dlclose.
  }

  GpuFacts inventory(const GpuPlan& plan) override {
    GpuFacts f;
    f.visible_devices = plan.visible_devices.value_or("");
    f.granted = plan.grant.count;
    f.granted_by = plan.grant.by;
    auto users = zero_for_the_check();
    load_nccl(f);
    f.state = load_cuda(plan, f);
    if (f.state != GpuState::kUsable) return f;
    f.state = pick_devices(plan, f);
    if (f.state == GpuState::kUsable) f.nvml_error = dl::read_nvml(options_.nvml_lib, f.devices);
    for (const auto& [z, value] : users) {
      f.choice = fmt::format("{}; {}={} overridden to 0 for this check", f.choice, z->name, value);
      std::fprintf(stderr,
                   "rankcheck: note: %s=%s in the environment: set to 0 for this check, %s (the "
                   "training job keeps its own value)\n",
                   z->name, value.c_str(), z->why);
    }
    facts_ = f;
    return f;
  }

  bool took_over() const override { return left_ != nullptr; }
  bool wait_for_aborts(Clock::time_point until) override;

  Result<NcclId> unique_id() override {
    if (nccl_.get_unique_id == nullptr) return Error{"NCCL is not loaded on the master"};
    ncclUniqueId id{};
    ncclResult_t rc = nccl_.get_unique_id(&id);
    if (rc != ncclSuccess) {
      std::string last = nccl_.last();
      return Error{"ncclGetUniqueId: " + nccl_.describe(rc) +
                   (last.empty() ? std::string() : " (" + last + ")")};
    }
    NcclId out{};
    static_assert(sizeof(id.internal) == kNcclUniqueIdSize);
    std::memcpy(out.data(), id.internal, out.size());
    return out;
  }

  std::vector<RankResult> run(const NcclInit& init, long world, const GpuPlan& plan,
                              Deadline deadline) override;

 private:
  std::vector<RankResult> take_over(const std::shared_ptr<dl::StageRun>& job, std::thread& worker);

  void load_nccl(GpuFacts& f) {
    void* h = ::dlopen(options_.nccl_lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = ::dlerror();
      f.nccl_error = e != nullptr ? e : options_.nccl_lib + ": cannot be loaded";
      return;
    }
    std::string missing = dl::load_nccl(h, nccl_);
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

  static std::string cvd_text(const GpuPlan& plan) {
    return plan.visible_devices ? "CUDA_VISIBLE_DEVICES=" + *plan.visible_devices
                                : std::string("CUDA_VISIBLE_DEVICES unset");
  }

  GpuState load_cuda(const GpuPlan& plan, GpuFacts& f) {
    void* h = ::dlopen(options_.cuda_lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = ::dlerror();
      f.error = e != nullptr ? e : options_.cuda_lib + ": cannot be loaded";
      return GpuState::kNoDriver;
    }
    std::string missing = dl::load_cuda(h, cuda_);
    if (!missing.empty()) {
      f.error = fmt::format("{} has no {}: the driver is too old", options_.cuda_lib, missing);
      return GpuState::kNoDriver;
    }
    int v = 0;
    if (cuda_.driver_version(&v) == CUDA_SUCCESS) f.cuda_version = v;
    f.driver = nvidia_driver_version(reinterpret_cast<void*>(cuda_.init));
    CUresult rc = cuda_.init(0);
    if (rc == CUDA_ERROR_NO_DEVICE) {
      // The driver works and sees no GPU: CUDA_VISIBLE_DEVICES hides them all (or
      // names none that exists), or the container was given none.
      f.device_count = 0;
      f.error = plan.nranks > 1 ? fmt::format(
                                      "0 GPUs visible ({}), but this node stands for {} "
                                      "ranks: cuInit: {}",
                                      cvd_text(plan), plan.nranks, cuda_.error(rc))
                                : fmt::format("no GPU visible ({}): cuInit: {}", cvd_text(plan),
                                              cuda_.error(rc));
      return GpuState::kNoDevice;
    }
    if (rc == CUDA_ERROR_SYSTEM_NOT_READY) {
      // An NVSwitch system whose Fabric Manager has not brought the fabric up
      // (pytorch/pytorch#35710, jax-ml/jax#34113).
      f.error = "cuInit: " + cuda_.error(rc) +
                ": on an NVSwitch system, the Fabric Manager has not brought the NVLink fabric "
                "up (systemctl status nvidia-fabricmanager)";
      return GpuState::kInitFailed;
    }
    if (rc != CUDA_SUCCESS) {
      f.error = "cuInit: " + cuda_.error(rc);
      return GpuState::kInitFailed;
    }
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
    std::string cvd = cvd_text(plan);
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
      auto get_uuid = cuda_.device_uuid != nullptr ? cuda_.device_uuid : cuda_.device_gpu_uuid;
      if (get_uuid(&uuid, dev) == CUDA_SUCCESS) {
        // A MIG slice has a UUID of its own (cuDeviceGetUuid_v2), not its GPU's
        // (cuDeviceGetUuid): it is named MIG-..., as nvidia-smi and
        // CUDA_VISIBLE_DEVICES name it. A driver without _v2 tells the GPU's only.
        CUuuid gpu{};
        bool mig = cuda_.device_uuid != nullptr && cuda_.device_gpu_uuid != nullptr &&
                   cuda_.device_gpu_uuid(&gpu, dev) == CUDA_SUCCESS &&
                   std::memcmp(gpu.bytes, uuid.bytes, sizeof uuid.bytes) != 0;
        d.uuid = dl::uuid_text(uuid, mig);
      }
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
  CudaApi cuda_;
  NcclApi nccl_;
  GpuFacts facts_;
  std::vector<CUdevice> devices_;
  // After a take-over: the run, and whether the aborts started from outside returned
  // (null when none were started).
  std::shared_ptr<dl::StageRun> left_;
  std::shared_ptr<std::atomic<bool>> left_aborted_;
};

std::vector<RankResult> DlStage::run(const NcclInit& init, long world, const GpuPlan& plan,
                                     Deadline deadline) {
  std::vector<RankResult> out(static_cast<size_t>(std::max(0L, plan.nranks)));
  for (size_t i = 0; i < out.size(); ++i)
    out[i].rank = static_cast<int32_t>(plan.first_rank + long(i));
  auto fail_all = [&](const std::string& why) {
    for (RankResult& r : out)
      r.init_error = why;
    return out;
  };
  if (!facts_.usable() || devices_.size() != out.size()) {
    return fail_all("no usable GPU on this member");
  }
  if (nccl_.init_rank_config == nullptr) return fail_all("NCCL is not loaded");
  if (init.ids.empty()) return fail_all("no NCCL unique id");
  if (init.scalable && nccl_.init_scalable == nullptr) {
    return fail_all(
        fmt::format("{} has no ncclCommInitRankScalable (NCCL 2.23 or newer has)",
                    facts_.nccl_path.empty() ? options_.nccl_lib : facts_.nccl_path.str()));
  }

  dl::RunInput in;
  in.cuda = cuda_;
  in.nccl = nccl_;
  in.devices = devices_;
  for (const GpuDevice& d : facts_.devices)
    in.ordinals.push_back(d.ordinal);
  in.init = init;
  in.world = world;
  in.first_rank = plan.first_rank;
  in.deadline = deadline;
  in.bandwidth_bytes = options_.bandwidth_bytes;
  in.nccl_version = facts_.nccl_version;
  // The run has a thread of its own, so that a call into NCCL that never returns
  // (connection setup in the caller's thread before 2.23, an abort that blocks:
  // NVIDIA/nccl#863, #1777) cannot hold this one past the deadline.
  auto job = std::make_shared<dl::StageRun>(std::move(in));
  std::thread worker([job] { job->work(); });
  auto limit = deadline.extended(kRunGrace).when();
  bool finished = false;
  while (!(finished = job->wait_finished(std::min(limit, Clock::now() + Millis(20))))) {
    if (Clock::now() >= limit) break;
    if (interrupted()) limit = std::min(limit, Clock::now() + kRunGrace);
  }
  if (finished) {
    worker.join();
    return job->results();
  }
  return take_over(job, worker);
}

// Blocked: abort its communicators from here, as PyTorch's watchdog does; an abort
// that blocks as well is left behind, and so is the run on NCCL 2.18, where an abort
// from this thread is not safe.
std::vector<RankResult> DlStage::take_over(const std::shared_ptr<dl::StageRun>& job,
                                           std::thread& worker) {
  left_ = job;
  const char* blocked_in = nullptr;
  if (!nccl::has(facts_.nccl_version, nccl::kAbortFromAnyThread)) {
    std::fprintf(stderr,
                 "rankcheck: NCCL %s cannot abort a communicator from another thread "
                 "(NVIDIA/nccl#992, fixed in 2.19.1): the stage's stuck call is left as it "
                 "is, and this process ends without aborting it\n",
                 nccl_version_text(facts_.nccl_version).c_str());
    job->take_over(&blocked_in,
                   fmt::format("not aborted: NCCL {} cannot abort a communicator from another "
                               "thread (NVIDIA/nccl#992, fixed in 2.19.1), and the process "
                               "ends without it",
                               nccl_version_text(facts_.nccl_version)));
    worker.detach();
    return job->results();
  }
  std::vector<ncclComm_t> comms = job->take_over(&blocked_in, "aborted from another thread");
  auto aborted = std::make_shared<std::atomic<bool>>(false);
  left_aborted_ = aborted;
  std::thread aborter([abort = nccl_.abort, comms, aborted, job] {
    for (ncclComm_t c : comms)
      abort(c);
    aborted->store(true);
    job->aborted_outside();
  });
  auto until = Clock::now() + (kStageOverrun - kRunGrace);
  while (Clock::now() < until) {
    bool done = job->wait_finished(std::min(until, Clock::now() + Millis(5)));
    if (done && aborted->load()) break;
    if (done) std::this_thread::sleep_for(Millis(1));
  }
  bool finished = job->wait_finished(Clock::now());
  if (finished) {
    worker.join();
  } else {
    worker.detach();
  }
  if (aborted->load()) {
    aborter.join();
  } else {
    aborter.detach();
  }
  return job->results();
}

bool DlStage::wait_for_aborts(Clock::time_point until) {
  if (left_ == nullptr || left_aborted_ == nullptr) return true;  // nothing was aborted
  while (!(left_aborted_->load() && left_->wait_finished(Clock::now()))) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(Millis(5));
  }
  return true;
}

}  // namespace

std::unique_ptr<GpuStage> make_gpu_stage(const StageOptions& options) {
  return std::make_unique<DlStage>(options);
}

bool gpu_stage_built() {
  return true;
}

}  // namespace rankcheck
