#pragma once
// What the GPU stage finds and reports, as plain data: a member's GPUs and NCCL
// (sent in its record), its device plan, and one rank's NCCL init and all-reduce
// result. The stage itself is gpu/stage.h.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/shared_string.h"

namespace rankcheck {

inline constexpr size_t kNcclUniqueIdSize = 128;
using NcclId = std::array<uint8_t, kNcclUniqueIdSize>;

/// Why a member has no usable GPU (or that it has one).
enum class GpuState : uint8_t {
  kUsable = 0,
  kSkipped = 1,      ///< --no-gpu
  kNoDriver = 2,     ///< libcuda.so.1 could not be loaded
  kInitFailed = 3,   ///< cuInit or a device query failed
  kNoDevice = 4,     ///< the driver sees no device (or fewer than this member needs)
  kUnavailable = 5,  ///< built without the CUDA/NCCL headers
  kStuck = 6,        ///< cuInit or a device query did not return in the inventory's time
};

/// One GPU a rank will use.
struct GpuDevice {
  int32_t rank = -1;
  int32_t ordinal = -1;  ///< CUDA device ordinal, after CUDA_VISIBLE_DEVICES
  std::string uuid;      ///< "GPU-8f3c..."
  SharedString pci_bus_id;
  SharedString name;
  uint64_t memory_bytes = 0;
  /// NVML's fabric registration (nvmlGpuFabricState_t: 0 not supported, 1 not
  /// started, 2 in progress, 3 completed), kFabricUnread when NVML was not read; and
  /// its status (nvmlReturn_t) once completed.
  uint8_t fabric_state = kFabricUnread;
  int32_t fabric_status = 0;
  int8_t nvlinks = -1;  ///< NVLinks active; -1: no NVLink, or not read
  auto operator<=>(const GpuDevice&) const = default;

  static constexpr uint8_t kFabricUnsupported = 0;
  static constexpr uint8_t kFabricNotStarted = 1;
  static constexpr uint8_t kFabricInProgress = 2;
  static constexpr uint8_t kFabricCompleted = 3;
  static constexpr uint8_t kFabricUnread = 0xff;
  /// Registered with a fabric that is not (yet) up, or up with an error.
  bool fabric_down() const {
    return fabric_state == kFabricNotStarted || fabric_state == kFabricInProgress ||
           (fabric_state == kFabricCompleted && fabric_status != 0);
  }
};

/// What a member found on its host, sent with its record before the verdict.
struct GpuFacts {
  // The numbers first, then the strings: no padding between them (the master keeps
  // one of these a member, 100k of them).
  GpuState state = GpuState::kSkipped;
  int32_t cuda_version = 0;        ///< cuDriverGetVersion, e.g. 13000
  int32_t device_count = -1;       ///< devices visible to this process
  int32_t nccl_version = 0;        ///< ncclGetVersion, e.g. 22809; 0 when not loaded
  int32_t granted = -1;            ///< GPUs the launcher or container gave this process (gpu_grant)
  SharedString error;              ///< why not usable
  SharedString driver;             ///< NVIDIA driver version, when the host tells it
  SharedString visible_devices;    ///< CUDA_VISIBLE_DEVICES as set, "" when unset
  SharedString choice;             ///< how the devices were picked ("LOCAL_RANK 3 of 8 visible")
  std::vector<GpuDevice> devices;  ///< one per rank this member stands for
  SharedString nccl_path;          ///< the library loaded
  SharedString nccl_error;         ///< why NCCL could not be loaded
  SharedString nvml_error;         ///< why NVML (fabric, NVLink) could not be read, "" when read
  SharedString granted_by;         ///< who says so: "CUDA_VISIBLE_DEVICES lists 8", "" when none

  bool usable() const { return state == GpuState::kUsable; }
  bool nccl_loaded() const { return nccl_version > 0; }
};

/// How many GPUs this process was given, and who says so; count -1 where nothing
/// does. In the order the GPUs are narrowed down to the process:
/// - CUDA_VISIBLE_DEVICES: its entries, each an index or a GPU-/MIG- UUID (or its
///   prefix). The driver shows them in order and stops at the first that names no
///   GPU (the CUDA Programming Guide's "CUDA Environment Variables"), so an entry that
///   cannot name one ("-1", "") ends the count as it ends the list; a list that
///   repeats an entry is not counted (what the driver then shows is not documented).
/// - NVIDIA_VISIBLE_DEVICES, where CUDA_VISIBLE_DEVICES is unset: the GPUs the NVIDIA
///   container runtime put in the container (the Kubernetes device plugin's envvar
///   strategy names each by UUID); "all", "none", "void" and a path (the
///   volume-mounts strategy) say no count.
/// - SLURM_GPUS_ON_NODE, where neither is set: the GPUs Slurm allocated to the step on
///   this node (gres_common.c: the allocation's bit count).
struct GpuGrant {
  int32_t count = -1;
  std::string by;  ///< "CUDA_VISIBLE_DEVICES lists 8 (0,1,2,3,4,5,6,7)", "SLURM_GPUS_ON_NODE=8"
};
GpuGrant gpu_grant(const EnvMap& env);

/// "completed", "in progress", "not started", "not supported", "not read".
std::string_view fabric_state_text(uint8_t state);

/// "2.28.9" from 22809 (and the old 2.x scheme, 2703 -> 2.7.3).
std::string nccl_version_text(int32_t v);
/// "13.0" from 13000.
std::string cuda_version_text(int32_t v);
/// The driver version from the first line of /proc/driver/nvidia/version, for both
/// the proprietary ("... x86_64 Kernel Module  535.104.05 ...") and the open
/// ("... Open Kernel Module for x86_64  555.58.02 ...") modules; "" when it has none.
std::string driver_version_from_banner(std::string_view line);
/// The driver version from the file libcuda.so.1 links to, which the driver names
/// after itself ("/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06"): where /proc has
/// no banner (some containers); "" when the name carries none.
std::string driver_version_from_library(std::string_view path);

/// What the all-reduce's receive buffer holds before the all-reduce writes it: a
/// total that is still this value was never written.
inline constexpr int64_t kAllreduceSentinel = -0x5a5a5a5a5a5a5a5b;

/// How --bandwidth times the all-reduce: as nccl-tests does (src/common.cu), so that
/// its figure compares with nccl-tests' busbw. Said in the report.
inline constexpr int kBandwidthWarmup = 5;
inline constexpr int kBandwidthIters = 20;
inline constexpr const char* kBandwidthMethod =
    "as nccl-tests: out of place, 5 warm-up launches, then 3 rounds of 20 separate launches "
    "timed with CUDA events, the best round; busbw = algbw * 2(n-1)/n, undefined for one rank; "
    "on the check's non-blocking communicator, where NCCL starts a thread for each launch: "
    "sizes whose all-reduce takes less time than that read lower than nccl-tests";

/// How a member picks its devices.
struct GpuPlan {
  long first_rank = 0;
  long nranks = 1;                             ///< node mode: one device per rank, ordinals 0..N-1
  long local_rank = -1;                        ///< rank mode: LOCAL_RANK picks the device...
  std::optional<int> device;                   ///< ...unless --device says which
  std::optional<std::string> visible_devices;  ///< CUDA_VISIBLE_DEVICES; set but empty hides all
  GpuGrant grant;                              ///< what the launcher gave, for the record
};

/// One rank's GPU stage, as it reports it to the master.
struct RankResult {
  int32_t rank = -1;
  bool init_ok = false;
  bool init_timed_out = false;
  std::string init_error;  ///< ncclGetErrorString + ncclGetLastError
  double init_ms = 0;
  bool allreduce_ok = false;    ///< completed with the exact total
  bool allreduce_done = false;  ///< completed at all
  bool allreduce_timed_out = false;
  std::string allreduce_error;
  int64_t expected = 0;
  int64_t got = 0;
  double allreduce_us = 0;
  uint64_t bandwidth_bytes = 0;  ///< 0: no bandwidth test
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  // NCCL's own words in this rank's process (its NCCL_DEBUG_FILE, read after the
  // stage); the same for every rank a member stands for.
  std::string nccl_warn;     ///< the first warning that reads as a cause ("Call to ibv_...")
  std::string nccl_finding;  ///< what that warning reads as ("nccl-network-error"), or ""
  std::string nccl_net;      ///< the network NCCL chose ("IB", "Socket", a plugin's name)
  /// The IB ports' error counters that moved in this rank's process from the check's
  /// start to the end of its stage (ib_counters_moved), "" when none did.
  std::string ib_moved;
};

}  // namespace rankcheck
