#pragma once
// One run of the GPU stage on a thread of its own: NCCL init, the all-reduce and
// the timed all-reduce for this member's ranks. The caller's thread watches it:
// when a call into NCCL does not return by the deadline, the caller aborts the
// communicators from outside (as PyTorch's ProcessGroupNCCL watchdog does) and
// takes the results as they stand. Private to src/gpu/.

#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

#include "gpu/dl_libs.h"
#include "gpu/stage.h"
#include "model/gpu.h"

namespace rankcheck::dl {

/// What one run needs, copied: the run may outlive the stage that started it.
struct RunInput {
  CudaApi cuda;
  NcclApi nccl;
  std::vector<CUdevice> devices;  ///< one per rank of this member
  std::vector<int> ordinals;
  NcclInit init;
  long world = 0;
  long first_rank = 0;
  Deadline deadline = Deadline::never();
  uint64_t bandwidth_bytes = 0;
  int32_t nccl_version = 0;  ///< ncclGetVersion's, e.g. 22809
};

class StageRun {
 public:
  explicit StageRun(RunInput in);

  /// The stage, start to end: the body of its thread.
  void work();

  // ----- the watching thread -----
  /// Whether the run ended, waiting for it until `until`.
  bool wait_finished(Clock::time_point until);
  /// Stops the run where it is: the run makes no further call once the one it is in
  /// returns. The communicators it has not released yet, for the caller to abort;
  /// the call it is stuck in (nullptr when none). `how`: what the caller does about
  /// it, for the results ("aborted from another thread").
  std::vector<ncclComm_t> take_over(const char** blocked_in, const std::string& how);
  /// The communicators take_over returned are aborted (the run may free the
  /// buffers they used).
  void aborted_outside();
  /// The results: final when the run ended; after take_over, what was known, with
  /// every rank still waiting marked as timed out (or interrupted).
  std::vector<RankResult> results();

 private:
  enum class Phase { kInit, kAllreduce, kBandwidth, kCleanup };
  static constexpr int kTimedGroups = 3;  // the bandwidth figure is the best group's

  // One rank's CUDA and NCCL objects.
  struct Slot {
    CUcontext ctx = nullptr;
    CUstream stream = nullptr;
    CUdeviceptr buf = 0;  // two int64: this rank's input, then the total (the sentinel first)
    CUdeviceptr big = 0;  // the timed all-reduce's buffer
    CUevent marks[kTimedGroups + 1] = {};  // around the timed groups, on the stream
    ncclComm_t comm = nullptr;
    int64_t host[2] = {};  // what is copied into buf; stays until the copy has run
  };

  // Steps of work(); each returns false when the run must stop.
  bool prepare(std::vector<Slot>& slots);
  std::vector<CUresult> retain_contexts(std::vector<Slot>& slots);
  bool init(std::vector<Slot>& slots);
  bool allreduce(std::vector<Slot>& slots);
  void bandwidth(std::vector<Slot>& slots);
  void cleanup(std::vector<Slot>& slots, bool abort);

  // One call into NCCL, noted so that the watching thread knows where the run is
  // stuck. False when the run was taken over (before the call, or during it).
  bool nccl_call(const char* name, ncclResult_t& rc, const std::function<ncclResult_t()>& f);
  // ncclGroupStart, `body`, then ncclGroupEnd, always once the group started
  // (group depth is per thread in NCCL: an abort inside an open group is only
  // queued), unless the run was taken over. A body of one call needs no group
  // (`one_call`). The group's result; when it is an error, the call that gave it
  // in `call`.
  ncclResult_t grouped(const std::function<void()>& body, const char** call, bool one_call);
  // Polls ncclCommGetAsyncError for the slots in `waiting` until each leaves
  // ncclInProgress, the deadline, a signal or a take-over. For each slot that left
  // it, `on_done(i, state)`; those still waiting stay marked.
  bool settle(std::vector<Slot>& slots, std::vector<bool>& waiting, bool spin,
              const std::function<void(size_t, ncclResult_t)>& on_done);
  // Waits for each slot's stream (or event) to complete, asking NCCL for errors
  // while it waits, as nccl-tests does. `on_error(i, text)` for a failure;
  // slots still waiting stay marked. `before`: NCCL's last error before the launch.
  bool drain(std::vector<Slot>& slots, std::vector<bool>& waiting,
             const std::function<CUresult(size_t)>& query,
             const std::function<void(size_t, const std::string&)>& on_error,
             const std::string& before);
  // An all-reduce of one int64 per slot, from `inputs` into the receive half of
  // each slot's buffer: the totals in `got`, a failure's text in `errors`, and
  // `waiting` for the slots whose all-reduce did not complete, `took_part` (when
  // given) for those whose all-reduce completed on the GPU, read back or not.
  bool reduce_one(std::vector<Slot>& slots, const std::vector<int64_t>& inputs,
                  std::vector<int64_t>& got, std::vector<std::string>& errors,
                  std::vector<bool>& waiting, std::vector<bool>* took_part = nullptr);
  // The timed all-reduces, once every rank agreed to run them: failures in
  // `errors`, the ranks still waiting at the deadline in `waiting`.
  bool timed(std::vector<Slot>& slots, size_t count, std::vector<std::string>& errors,
             std::vector<bool>& waiting);
  // The figures of each rank's best timed round, from its events; failures in `errors`.
  void figures(std::vector<Slot>& slots, uint64_t bytes, std::vector<std::string>& errors);

  // NCCL's error for `rc` with its last error text: this call's own when it changed
  // from `before` (read before the call), else the process's, said to be older (one
  // buffer for every communicator, never cleared). `before` null: not any one call's.
  std::string nccl_error(const char* call, ncclResult_t rc, const std::string* before) const;
  bool stopping() const;
  void enter(Phase p);
  void publish();
  void finish();

  const RunInput in_;
  const size_t n_;
  std::vector<RankResult> out_;  // the run's own; copied into published_ under mu_

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RankResult> published_;
  std::vector<ncclComm_t> comms_;  // not yet released by the run
  Phase phase_ = Phase::kInit;
  const char* in_call_ = nullptr;
  bool taken_over_ = false;
  bool outside_aborts_done_ = false;
  bool finished_ = false;
};

/// "interrupted by SIGTERM".
std::string interrupted_text();

}  // namespace rankcheck::dl
