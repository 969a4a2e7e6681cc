// NCCL init, the all-reduce and the timed all-reduce for one member's ranks, on a
// thread of its own (see dl_run.h).
//
// What NCCL promises, and what this code waits for: on a non-blocking communicator
// NCCL 2.23 and later run every group (a collective outside one is a group of its
// own) in a thread NCCL starts, and return ncclInProgress; the work reaches the
// stream only once ncclCommGetAsyncError says ncclSuccess, and until then the
// communicator refuses any other call. So a result is read only after NCCL said
// ncclSuccess and the stream completed, and every wait asks NCCL for its errors
// (a network or proxy error shows there, never on the stream).

#include "gpu/dl_run.h"

#include <algorithm>
#include <cstring>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "base/interrupt.h"
#include "base/text.h"
#include "nccl/version.h"

namespace rankcheck::dl {
namespace {

// Between two polls. A wait for a collective spins (yielding the core): the timed
// launches must follow one another without a gap on the GPU. A wait for init, which
// takes milliseconds at least, sleeps.
class Pause {
 public:
  explicit Pause(bool spin) : spin_(spin) {}
  void operator()() {
    if (spin_) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  }

 private:
  bool spin_;
};

}  // namespace

std::string interrupted_text() {
  return fmt::format("interrupted by {}", signal_name(interrupted()));
}

StageRun::StageRun(RunInput in) : in_(std::move(in)), n_(in_.devices.size()) {
  out_.resize(n_);
  for (size_t i = 0; i < n_; ++i)
    out_[i].rank = static_cast<int32_t>(in_.first_rank + long(i));
  published_ = out_;
  comms_.assign(n_, nullptr);
}

// ----- the watching thread ----------------------------------------------------

bool StageRun::wait_finished(Clock::time_point until) {
  std::unique_lock lock(mu_);
  return cv_.wait_until(lock, until, [this] { return finished_; });
}

std::vector<ncclComm_t> StageRun::take_over(const char** blocked_in, const std::string& how) {
  std::lock_guard lock(mu_);
  taken_over_ = true;
  *blocked_in = in_call_;
  std::vector<ncclComm_t> comms;
  for (ncclComm_t& c : comms_) {
    if (c != nullptr) comms.push_back(c);
    c = nullptr;
  }
  // What each rank was waiting for when the run stopped answering.
  const bool signal = interrupted() != 0;
  const std::string why = signal ? interrupted_text()
                                 : fmt::format("{} did not return by the deadline: {}",
                                               in_call_ != nullptr ? in_call_ : "a CUDA call", how);
  for (RankResult& r : published_) {
    if (phase_ == Phase::kInit && !r.init_ok && !r.init_timed_out && r.init_error.empty()) {
      r.init_timed_out = !signal;
      r.init_error = why;
    } else if (phase_ == Phase::kAllreduce && r.init_ok && !r.allreduce_done &&
               !r.allreduce_timed_out && r.allreduce_error.empty()) {
      r.allreduce_timed_out = !signal;
      r.allreduce_error = why;
    } else if (phase_ == Phase::kBandwidth && r.allreduce_ok && r.bandwidth_bytes == 0) {
      r.allreduce_ok = r.allreduce_done = false;
      r.allreduce_timed_out = !signal;
      r.bandwidth_bytes = in_.bandwidth_bytes / sizeof(float) * sizeof(float);
      r.allreduce_error = fmt::format("the timed all-reduce of {} (--bandwidth): {}",
                                      bytes_text(r.bandwidth_bytes), why);
    }
  }
  return comms;
}

std::vector<RankResult> StageRun::results() {
  std::lock_guard lock(mu_);
  return published_;
}

// ----- the run's own thread -----------------------------------------------------

bool StageRun::stopping() const {
  std::lock_guard lock(mu_);
  return taken_over_;
}

void StageRun::enter(Phase p) {
  std::lock_guard lock(mu_);
  if (taken_over_) return;
  phase_ = p;
  published_ = out_;
}

void StageRun::publish() {
  std::lock_guard lock(mu_);
  if (!taken_over_) published_ = out_;
}

void StageRun::finish() {
  {
    std::lock_guard lock(mu_);
    if (!taken_over_) published_ = out_;
    finished_ = true;
  }
  cv_.notify_all();
}

bool StageRun::nccl_call(const char* name, ncclResult_t& rc,
                         const std::function<ncclResult_t()>& f) {
  {
    std::lock_guard lock(mu_);
    if (taken_over_) return false;
    in_call_ = name;
  }
  rc = f();
  std::lock_guard lock(mu_);
  in_call_ = nullptr;
  return !taken_over_;
}

std::string StageRun::nccl_error(const char* call, ncclResult_t rc,
                                 const std::string* before) const {
  std::string s = in_.nccl.describe(rc);
  if (call != nullptr) s = fmt::format("{}: {}", call, s);
  std::string last = in_.nccl.last();
  if (last.empty()) return s;
  // ncclGetLastError is the process's, and never cleared: the text is this call's
  // only when it changed during the call.
  if (before != nullptr && last != *before) return fmt::format("{} ({})", s, last);
  return fmt::format("{}; NCCL's last error in this process{}: {}", s,
                     before != nullptr ? ", from before this call" : "", last);
}

ncclResult_t StageRun::grouped(const std::function<void()>& body, const char** call,
                               bool one_call) {
  if (one_call) {
    body();
    return ncclSuccess;
  }
  ncclResult_t rc = ncclSuccess;
  *call = "ncclGroupStart";
  if (!nccl_call("ncclGroupStart", rc, [&] { return in_.nccl.group_start(); })) return rc;
  if (rc != ncclSuccess) return rc;
  body();
  // Ended whatever the body met: a group left open on this thread would hold back
  // the NCCL calls the thread makes next, the aborts of the cleanup included. Only
  // a run taken over leaves it open: its communicators were aborted from outside,
  // and this thread makes no further call into NCCL.
  *call = "ncclGroupEnd";
  nccl_call("ncclGroupEnd", rc, [&] { return in_.nccl.group_end(); });
  return rc;
}

bool StageRun::settle(std::vector<Slot>& slots, std::vector<bool>& waiting, bool spin,
                      const std::function<void(size_t, ncclResult_t)>& on_done) {
  Pause pause(spin);
  while (true) {
    bool any = false;
    for (size_t i = 0; i < n_; ++i) {
      if (!waiting[i]) continue;
      ncclResult_t state = ncclInProgress;
      ncclResult_t rc = ncclSuccess;
      if (!nccl_call("ncclCommGetAsyncError", rc,
                     [&] { return in_.nccl.async_error(slots[i].comm, &state); })) {
        return false;
      }
      if (rc != ncclSuccess) state = rc;  // cannot even ask: that is the answer
      if (state == ncclInProgress) {
        any = true;
        continue;
      }
      waiting[i] = false;
      on_done(i, state);
    }
    if (!any || in_.deadline.expired() || interrupted()) return true;
    pause();
  }
}

bool StageRun::drain(std::vector<Slot>& slots, std::vector<bool>& waiting,
                     const std::function<CUresult(size_t)>& query,
                     const std::function<void(size_t, const std::string&)>& on_error,
                     const std::string& before) {
  Pause pause(true);
  while (true) {
    bool any = false;
    for (size_t i = 0; i < n_; ++i) {
      if (!waiting[i]) continue;
      CUresult rc = in_.cuda.ctx_set_current(slots[i].ctx);
      if (rc == CUDA_SUCCESS) rc = query(i);
      if (rc == CUDA_SUCCESS) {
        waiting[i] = false;
        continue;
      }
      if (rc != CUDA_ERROR_NOT_READY) {
        waiting[i] = false;
        on_error(i, "waiting for the all-reduce: " + in_.cuda.error(rc));
        continue;
      }
      // Still running: NCCL reports network and proxy errors here, never on the stream.
      ncclResult_t state = ncclSuccess;
      ncclResult_t nrc = ncclSuccess;
      if (!nccl_call("ncclCommGetAsyncError", nrc,
                     [&] { return in_.nccl.async_error(slots[i].comm, &state); })) {
        return false;
      }
      if (nrc != ncclSuccess) state = nrc;
      if (state != ncclSuccess && state != ncclInProgress) {
        waiting[i] = false;
        on_error(i, nccl_error("ncclAllReduce", state, n_ == 1 ? &before : nullptr));
        continue;
      }
      any = true;
    }
    if (!any || in_.deadline.expired() || interrupted()) return true;
    pause();
  }
}

// A device's primary context takes the driver 0.1-0.5 s to create the first time: a
// node's eight would take seconds of the deadline one after the other. They are
// made on a thread each (the driver API is thread-safe; contexts of different
// devices are independent), joined before anything else; where a thread cannot be
// started, the rest are made here.
std::vector<CUresult> StageRun::retain_contexts(std::vector<Slot>& slots) {
  const CudaApi& cu = in_.cuda;
  std::vector<CUresult> rcs(n_, CUDA_SUCCESS);
  std::vector<std::thread> threads;
  size_t started = 0;
  if (n_ > 1) {
    try {
      for (; started < n_; ++started) {
        threads.emplace_back(
            [&, i = started] { rcs[i] = cu.ctx_retain(&slots[i].ctx, in_.devices[i]); });
      }
    } catch (const std::system_error&) {
      // No more threads: the rest below, on this one.
    }
  }
  for (size_t i = started; i < n_; ++i)
    rcs[i] = cu.ctx_retain(&slots[i].ctx, in_.devices[i]);
  for (std::thread& t : threads)
    t.join();
  return rcs;
}

bool StageRun::prepare(std::vector<Slot>& slots) {
  const CudaApi& cu = in_.cuda;
  const std::vector<CUresult> retained = retain_contexts(slots);
  for (size_t i = 0; i < n_; ++i) {
    CUresult rc = retained[i];
    if (rc == CUDA_SUCCESS) rc = cu.ctx_set_current(slots[i].ctx);
    if (rc == CUDA_SUCCESS) rc = cu.stream_create(&slots[i].stream, CU_STREAM_NON_BLOCKING);
    if (rc == CUDA_SUCCESS) rc = cu.mem_alloc(&slots[i].buf, 2 * sizeof(int64_t));
    if (rc != CUDA_SUCCESS) {
      const std::string why = fmt::format("preparing device {}: {}", in_.ordinals[i], cu.error(rc));
      for (RankResult& r : out_) {
        if (r.init_error.empty()) r.init_error = why;
      }
      return false;
    }
  }
  return true;
}

bool StageRun::init(std::vector<Slot>& slots) {
  enter(Phase::kInit);
  std::vector<ncclUniqueId> uids(in_.init.ids.size());
  for (size_t k = 0; k < uids.size(); ++k)
    std::memcpy(uids[k].internal, in_.init.ids[k].data(), in_.init.ids[k].size());
  bool scalable = in_.init.scalable;
  const char* call = scalable ? "ncclCommInitRankScalable" : "ncclCommInitRankConfig";
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  auto t0 = Clock::now();
  std::vector<bool> waiting(n_, false);
  const char* group_call = nullptr;
  const std::string before = in_.nccl.last();
  ncclResult_t group = grouped(
      [&] {
        for (size_t i = 0; i < n_; ++i) {
          CUresult crc = in_.cuda.ctx_set_current(slots[i].ctx);
          if (crc != CUDA_SUCCESS) {
            out_[i].init_error = "cuCtxSetCurrent: " + in_.cuda.error(crc);
            continue;
          }
          const std::string before_call = in_.nccl.last();
          ncclComm_t comm = nullptr;
          ncclResult_t rc = ncclSuccess;
          bool go_on = nccl_call(call, rc, [&] {
            int world = static_cast<int>(in_.world);
            int rank = static_cast<int>(out_[i].rank);
            return scalable
                       ? in_.nccl.init_scalable(&comm, world, rank, static_cast<int>(uids.size()),
                                                uids.data(), &config)
                       : in_.nccl.init_rank_config(&comm, world, uids[0], rank, &config);
          });
          if (comm != nullptr) {
            std::lock_guard lock(mu_);
            comms_[i] = comm;  // from now on, someone must abort or destroy it
          }
          if (!go_on) return;
          slots[i].comm = comm;
          if (rc != ncclSuccess && rc != ncclInProgress) {
            // Failed at once: nothing to wait for, and the error is the one to report.
            out_[i].init_error = nccl_error(call, rc, &before_call);
          } else if (comm == nullptr) {
            out_[i].init_error = fmt::format("{} returned no communicator", call);
          } else {
            waiting[i] = true;
          }
        }
      },
      &group_call, n_ == 1);
  if (stopping()) return false;
  if (group != ncclSuccess && group != ncclInProgress) {
    for (size_t i = 0; i < n_; ++i) {
      if (out_[i].init_error.empty()) out_[i].init_error = nccl_error(group_call, group, &before);
      waiting[i] = false;
    }
  }
  std::vector<std::pair<size_t, ncclResult_t>> failed;
  bool go_on = settle(slots, waiting, false, [&](size_t i, ncclResult_t state) {
    if (state == ncclSuccess) {
      out_[i].init_ok = out_[i].init_error.empty();
      out_[i].init_ms = ms_between(t0, Clock::now());
    } else {
      failed.emplace_back(i, state);
    }
  });
  if (!go_on) return false;
  // NCCL's last error is the process's, read once all have settled: with several
  // communicators here it is not any one rank's own.
  for (auto [i, state] : failed) {
    if (out_[i].init_error.empty()) {
      out_[i].init_error = nccl_error(nullptr, state, n_ == 1 ? &before : nullptr);
    }
  }
  bool all_ok = true;
  for (size_t i = 0; i < n_; ++i) {
    if (waiting[i]) {
      out_[i].init_timed_out = !interrupted();
      if (interrupted()) out_[i].init_error = interrupted_text();
    }
    all_ok = all_ok && out_[i].init_ok;
  }
  publish();
  return all_ok;
}

bool StageRun::reduce_one(std::vector<Slot>& slots, const std::vector<int64_t>& inputs,
                          std::vector<int64_t>& got, std::vector<std::string>& errors,
                          std::vector<bool>& waiting, std::vector<bool>* took_part) {
  const CudaApi& cu = in_.cuda;
  got.assign(n_, kAllreduceSentinel);
  errors.assign(n_, "");
  waiting.assign(n_, false);
  if (took_part != nullptr) took_part->assign(n_, false);
  // The input, and the sentinel where the total goes: a total never written shows.
  for (size_t i = 0; i < n_; ++i) {
    Slot& s = slots[i];
    s.host[0] = inputs[i];
    s.host[1] = kAllreduceSentinel;
    CUresult rc = cu.ctx_set_current(s.ctx);
    if (rc == CUDA_SUCCESS) rc = cu.copy_to_device(s.buf, s.host, sizeof s.host, s.stream);
    if (rc != CUDA_SUCCESS) {
      // No rank here takes part, so none of them can complete.
      errors.assign(n_, "copying the input to the GPU: " + cu.error(rc));
      return true;
    }
  }
  const char* group_call = nullptr;
  std::vector<bool> launched(n_, false);
  const std::string before = in_.nccl.last();
  ncclResult_t group = grouped(
      [&] {
        for (size_t i = 0; i < n_; ++i) {
          Slot& s = slots[i];
          CUresult crc = cu.ctx_set_current(s.ctx);
          if (crc != CUDA_SUCCESS) {
            errors[i] = "cuCtxSetCurrent: " + cu.error(crc);
            continue;
          }
          auto* send = reinterpret_cast<void*>(s.buf);
          auto* recv = reinterpret_cast<void*>(s.buf + sizeof(int64_t));
          const std::string before_call = in_.nccl.last();
          ncclResult_t rc = ncclSuccess;
          if (!nccl_call("ncclAllReduce", rc, [&] {
                return in_.nccl.all_reduce(send, recv, 1, ncclInt64, ncclSum, s.comm,
                                           reinterpret_cast<cudaStream_t>(s.stream));
              })) {
            return;
          }
          if (rc != ncclSuccess && rc != ncclInProgress) {
            errors[i] = nccl_error("ncclAllReduce", rc, &before_call);
          } else {
            launched[i] = true;
          }
        }
      },
      &group_call, n_ == 1);
  if (stopping()) return false;
  if (group != ncclSuccess && group != ncclInProgress) {
    // Nothing of the group was launched.
    for (size_t i = 0; i < n_; ++i) {
      if (errors[i].empty()) errors[i] = nccl_error(group_call, group, &before);
      launched[i] = false;
    }
  }
  // Launched is handed to NCCL: the work is on the stream once NCCL says ncclSuccess.
  std::vector<bool> enqueuing = launched;
  std::vector<std::pair<size_t, ncclResult_t>> failed;
  std::vector<bool> running(n_, false);
  if (!settle(slots, enqueuing, true, [&](size_t i, ncclResult_t state) {
        if (state == ncclSuccess) {
          running[i] = true;
        } else {
          failed.emplace_back(i, state);
        }
      })) {
    return false;
  }
  for (auto [i, state] : failed)
    errors[i] = nccl_error("ncclAllReduce", state, n_ == 1 ? &before : nullptr);
  std::vector<bool> on_stream = running;
  if (!drain(
          slots, on_stream, [&](size_t i) { return cu.stream_query(slots[i].stream); },
          [&](size_t i, const std::string& text) { errors[i] = text; }, before)) {
    return false;
  }
  for (size_t i = 0; i < n_; ++i) {
    waiting[i] = enqueuing[i] || on_stream[i];
    if (!running[i] || waiting[i] || !errors[i].empty()) continue;
    if (took_part != nullptr) (*took_part)[i] = true;
    int64_t total = kAllreduceSentinel;
    CUresult rc = cu.ctx_set_current(slots[i].ctx);  // the copy is made in the slot's context
    if (rc == CUDA_SUCCESS)
      rc = cu.copy_to_host(&total, slots[i].buf + sizeof(int64_t), sizeof total);
    if (rc != CUDA_SUCCESS) {
      errors[i] = "copying the result from the GPU: " + cu.error(rc);
    } else {
      got[i] = total;
    }
  }
  return true;
}

bool StageRun::allreduce(std::vector<Slot>& slots) {
  enter(Phase::kAllreduce);
  // One value per rank, summed: every rank checks the exact total.
  const auto expected = static_cast<int64_t>(in_.world) * (in_.world + 1) / 2;
  std::vector<int64_t> inputs(n_);
  for (size_t i = 0; i < n_; ++i)
    inputs[i] = out_[i].rank + 1;
  std::vector<int64_t> got;
  std::vector<std::string> errors;
  std::vector<bool> waiting;
  std::vector<bool> took_part;
  auto t0 = Clock::now();
  if (!reduce_one(slots, inputs, got, errors, waiting, &took_part)) return false;
  double us = ms_between(t0, Clock::now()) * 1000.0;
  bool all_took_part = true;
  for (size_t i = 0; i < n_; ++i) {
    RankResult& r = out_[i];
    if (waiting[i]) {
      r.allreduce_timed_out = !interrupted();
      if (interrupted()) r.allreduce_error = interrupted_text();
    } else if (!errors[i].empty()) {
      r.allreduce_error = errors[i];
    } else {
      r.allreduce_done = true;
      r.allreduce_us = us;
      r.expected = expected;
      r.got = got[i];
      r.allreduce_ok = got[i] == expected;
    }
    all_took_part = all_took_part && took_part[i];
  }
  publish();
  // A rank whose all-reduce completed on the GPU, whatever it read back, takes part
  // in what follows (the round that agrees on the timed all-reduce), so that its
  // peers are not left waiting in it.
  return all_took_part;
}

void StageRun::cleanup(std::vector<Slot>& slots, bool abort) {
  enter(Phase::kCleanup);
  const CudaApi& cu = in_.cuda;
  for (size_t i = 0; i < n_ && !stopping(); ++i) {
    ncclComm_t comm = nullptr;
    {
      std::lock_guard lock(mu_);
      std::swap(comm, comms_[i]);
    }
    if (comm == nullptr) continue;
    if (slots[i].ctx != nullptr) cu.ctx_set_current(slots[i].ctx);
    ncclResult_t rc = ncclSuccess;
    // A communicator that failed or is stuck must be aborted: ncclCommDestroy
    // refuses one that is not ready, and would wait for work that never ends.
    ncclResult_t state = ncclSuccess;
    bool healthy =
        !abort && in_.nccl.async_error(comm, &state) == ncclSuccess && state == ncclSuccess;
    if (healthy) {
      if (!nccl_call("ncclCommDestroy", rc, [&] { return in_.nccl.destroy(comm); })) break;
      if (rc == ncclSuccess || rc == ncclInProgress) continue;
      // From 2.24, a destroy that finds the communicator not ready returns with this
      // thread inside the group it started (src/init.cc, ncclCommDestroy: its
      // NCCLCHECK(ncclCommEnsureReady(comm)) returns before ncclGroupEndInternal;
      // tags v2.24.3-1 to v2.29.7-1): the abort would only be queued in it. Ended here.
      if (nccl::has(in_.nccl_version, nccl::kDestroyLeavesGroup) &&
          !nccl_call("ncclGroupEnd", rc, [&] { return in_.nccl.group_end(); })) {
        break;
      }
    }
    if (!nccl_call("ncclCommAbort", rc, [&] { return in_.nccl.abort(comm); })) break;
  }
  if (stopping()) {
    // The watching thread aborts the communicators left: the buffers their kernels
    // may still use are freed once it has (never, if an abort never returns).
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return outside_aborts_done_; });
  }
  for (Slot& s : slots) {
    if (s.ctx != nullptr) cu.ctx_set_current(s.ctx);
    for (CUevent e : s.marks) {
      if (e != nullptr) cu.event_destroy(e);
    }
    if (s.buf != 0) cu.mem_free(s.buf);
    if (s.big != 0) cu.mem_free(s.big);
    if (s.stream != nullptr) cu.stream_destroy(s.stream);
  }
  for (size_t i = 0; i < n_; ++i) {
    if (slots[i].ctx != nullptr) cu.ctx_release(in_.devices[i]);
  }
}

void StageRun::aborted_outside() {
  {
    std::lock_guard lock(mu_);
    outside_aborts_done_ = true;
  }
  cv_.notify_all();
}

void StageRun::work() {
  std::vector<Slot> slots(n_);
  bool completed = prepare(slots) && init(slots) && allreduce(slots);
  if (completed && in_.bandwidth_bytes > 0 && !stopping()) bandwidth(slots);
  bool clean = completed;
  for (const RankResult& r : out_)
    clean = clean && r.allreduce_ok;
  cleanup(slots, !clean);
  finish();
}

}  // namespace rankcheck::dl
