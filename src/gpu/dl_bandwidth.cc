// The timed all-reduce of --bandwidth: agreed on by every rank first, then timed as
// nccl-tests times it (src/common.cu: warm-up iterations, then `iters` = 20 launches,
// each its own call, or one group over a thread's GPUs; out of place by default),
// with CUDA events on the GPU (see dl_run.h). Never 20 in one group: NCCL makes one
// plan of a group's collectives, and the figure would not be nccl-tests' busbw.

#include <algorithm>

#include <fmt/format.h>

#include "base/interrupt.h"
#include "base/text.h"
#include "gpu/dl_run.h"

namespace rankcheck::dl {
namespace {

constexpr int kWarmupIters = kBandwidthWarmup;  // launched before the timed ones, not timed
constexpr int kTimedIters = kBandwidthIters;    // per timed round: nccl-tests' default

}  // namespace

void StageRun::bandwidth(std::vector<Slot>& slots) {
  enter(Phase::kBandwidth);
  const size_t count = in_.bandwidth_bytes / sizeof(float);
  const uint64_t bytes = count * sizeof(float);
  if (count == 0) return;
  std::vector<std::string> errors(n_);
  std::vector<bool> waiting(n_, false);
  std::vector<int64_t> flags(n_);
  std::vector<std::string> alloc_errors(n_);
  std::vector<bool> was_ok(n_);
  for (size_t i = 0; i < n_; ++i) {
    was_ok[i] = out_[i].allreduce_ok;
    // Out of place, as nccl-tests times it: a one-rank all-reduce in place does no
    // work at all (NCCL's ncclLaunchOneRank). Sent from the first half, received in
    // the second.
    CUresult rc = in_.cuda.ctx_set_current(slots[i].ctx);
    if (rc == CUDA_SUCCESS && out_[i].allreduce_ok)
      rc = in_.cuda.mem_alloc(&slots[i].big, 2 * bytes);
    if (rc != CUDA_SUCCESS) alloc_errors[i] = "cuMemAlloc: " + in_.cuda.error(rc);
    flags[i] = out_[i].allreduce_ok && alloc_errors[i].empty() ? 1 : 0;
  }
  // A failure or a timeout of the timed part is the rank's all-reduce failing, and
  // says which all-reduce it was; a rank that had failed before keeps its own error.
  auto report = [&](const char* step) {
    bool ok = true;
    for (size_t i = 0; i < n_; ++i) {
      if (errors[i].empty() && !waiting[i]) continue;
      ok = false;
      if (!was_ok[i]) continue;
      RankResult& r = out_[i];
      r.allreduce_ok = r.allreduce_done = false;
      r.bandwidth_bytes = bytes;
      std::string why = !errors[i].empty() ? step + errors[i]
                        : interrupted()    ? interrupted_text()
                                           : std::string();
      r.allreduce_timed_out = why.empty();
      if (!why.empty()) {
        r.allreduce_error =
            fmt::format("the timed all-reduce of {} (--bandwidth): {}", bytes_text(bytes), why);
      }
    }
    publish();
    return ok;
  };
  // Every rank says whether it goes on: one with a wrong total or no buffer runs no
  // timed all-reduce, and the others must not start one and wait for it.
  std::vector<int64_t> agreed;
  if (!reduce_one(slots, flags, agreed, errors, waiting)) return;
  if (!report("agreeing to start: ")) return;
  errors = alloc_errors;
  if (!report("")) return;
  for (size_t i = 0; i < n_; ++i) {
    // Someone cannot: no figure, and no wait. A rank that cannot itself does not
    // trust the total either: its all-reduce gave a wrong one before.
    if (flags[i] != 1 || agreed[i] != in_.world) return;
  }
  if (!timed(slots, count, errors, waiting)) return;
  report("");
}

bool StageRun::timed(std::vector<Slot>& slots, size_t count, std::vector<std::string>& errors,
                     std::vector<bool>& waiting) {
  const CudaApi& cu = in_.cuda;
  errors.assign(n_, "");
  waiting.assign(n_, false);
  auto failing = [&] {
    for (size_t i = 0; i < n_; ++i) {
      if (!errors[i].empty() || waiting[i]) return true;
    }
    return false;
  };
  for (size_t i = 0; i < n_; ++i) {
    CUresult rc = cu.ctx_set_current(slots[i].ctx);
    for (CUevent& e : slots[i].marks) {
      if (rc == CUDA_SUCCESS) rc = cu.event_create(&e, CU_EVENT_DEFAULT);
    }
    if (rc != CUDA_SUCCESS) errors[i] = "cuEventCreate: " + cu.error(rc);
  }
  if (failing()) return true;
  const std::string before = in_.nccl.last();
  // One all-reduce on every rank of this member, as nccl-tests launches one
  // iteration: a call of its own, or one group over this member's GPUs (node mode);
  // then the wait for NCCL to put it on the stream (the next call would be refused
  // before). False when the run was taken over.
  auto launch_one = [&] {
    const char* group_call = nullptr;
    ncclResult_t group = grouped(
        [&] {
          for (size_t i = 0; i < n_; ++i) {
            Slot& s = slots[i];
            if (!errors[i].empty()) continue;
            CUresult crc = cu.ctx_set_current(s.ctx);
            if (crc != CUDA_SUCCESS) {
              errors[i] = "cuCtxSetCurrent: " + cu.error(crc);
              continue;
            }
            auto* send = reinterpret_cast<void*>(s.big);
            auto* recv = reinterpret_cast<void*>(s.big + count * sizeof(float));
            const std::string before_call = in_.nccl.last();
            ncclResult_t rc = ncclSuccess;
            if (!nccl_call("ncclAllReduce", rc, [&] {
                  return in_.nccl.all_reduce(send, recv, count, ncclFloat, ncclSum, s.comm,
                                             reinterpret_cast<cudaStream_t>(s.stream));
                })) {
              return;
            }
            if (rc != ncclSuccess && rc != ncclInProgress) {
              errors[i] = nccl_error("ncclAllReduce", rc, &before_call);
            }
          }
        },
        &group_call, n_ == 1);
    if (stopping()) return false;
    bool group_failed = group != ncclSuccess && group != ncclInProgress;
    for (size_t i = 0; i < n_; ++i) {
      if (group_failed && errors[i].empty()) errors[i] = nccl_error(group_call, group, &before);
      waiting[i] = errors[i].empty();
    }
    std::vector<std::pair<size_t, ncclResult_t>> failed;
    if (!settle(slots, waiting, true, [&](size_t i, ncclResult_t state) {
          if (state != ncclSuccess) failed.emplace_back(i, state);
        })) {
      return false;
    }
    for (auto [i, state] : failed)
      errors[i] = nccl_error("ncclAllReduce", state, n_ == 1 ? &before : nullptr);
    return true;
  };
  auto launch = [&](int iters) {
    for (int k = 0; k < iters && !failing(); ++k) {
      if (!launch_one()) return false;
    }
    return true;
  };
  auto record = [&](int mark) {
    for (size_t i = 0; i < n_; ++i) {
      CUresult rc = cu.ctx_set_current(slots[i].ctx);
      if (rc == CUDA_SUCCESS) rc = cu.event_record(slots[i].marks[mark], slots[i].stream);
      if (rc != CUDA_SUCCESS) errors[i] = "cuEventRecord: " + cu.error(rc);
    }
  };
  // Each launch is on the stream once NCCL says so, and the next follows while it
  // still runs: between two events the GPU waits for the host only where the host
  // took longer to launch one all-reduce than the GPU to run one. The best round
  // counts, so that one late launch does not make the figure.
  if (!launch(kWarmupIters)) return false;
  for (int g = 0; g < kTimedGroups; ++g) {
    if (failing()) return true;
    record(g);
    if (!launch(kTimedIters)) return false;
  }
  if (failing()) return true;
  record(kTimedGroups);
  if (failing()) return true;
  waiting.assign(n_, true);
  if (!drain(
          slots, waiting, [&](size_t i) { return cu.event_query(slots[i].marks[kTimedGroups]); },
          [&](size_t i, const std::string& text) { errors[i] = text; }, before)) {
    return false;
  }
  if (failing()) return true;
  figures(slots, count * sizeof(float), errors);
  return true;
}

void StageRun::figures(std::vector<Slot>& slots, uint64_t bytes, std::vector<std::string>& errors) {
  const CudaApi& cu = in_.cuda;
  for (size_t i = 0; i < n_; ++i) {
    float best = 0;
    CUresult rc = cu.ctx_set_current(slots[i].ctx);
    for (int g = 0; rc == CUDA_SUCCESS && g < kTimedGroups; ++g) {
      float ms = 0;
      rc = cu.event_elapsed(&ms, slots[i].marks[g], slots[i].marks[g + 1]);
      if (rc == CUDA_SUCCESS && (g == 0 || ms < best)) best = ms;
    }
    if (rc != CUDA_SUCCESS) {
      errors[i] = "cuEventElapsedTime: " + cu.error(rc);
      continue;
    }
    // Figures as nccl-tests defines them; events resolve about half a microsecond.
    double secs = std::max(double(best), 0.0005) / 1000.0 / kTimedIters;
    double algbw = double(bytes) / secs / 1e9;
    RankResult& r = out_[i];
    r.bandwidth_bytes = bytes;
    r.algbw_gbps = algbw;
    r.busbw_gbps = algbw * 2.0 * double(in_.world - 1) / double(in_.world);
  }
}

}  // namespace rankcheck::dl
