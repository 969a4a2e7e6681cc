#pragma once
// What every run starts with and carries from step to step: its deadline and the
// watchdog behind it, the signal handlers, where its words go, its GPU stage and
// its job token; and the steps every run shares (the token, the record, the GPU
// plan, the rehearsal's listener).

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/output.h"
#include "app/run.h"
#include "app/watchdog.h"
#include "base/deadline.h"
#include "base/env.h"
#include "base/result.h"
#include "gpu/nccl_debug_file.h"
#include "gpu/stage.h"
#include "host/sysfs_ib.h"
#include "identity/identity.h"
#include "model/gpu.h"
#include "model/record.h"
#include "model/timeline.h"
#include "protocol/auth.h"
#include "protocol/messages.h"
#include "rehearsal/probe.h"
#include "rendezvous/watch_server.h"

namespace rankcheck {

inline Millis seconds(double s) {
  return Millis(static_cast<long>(s * 1000.0));
}

/// One run, from its start to its exit code: its clock and deadlines, its watchdog,
/// its output; once the identity is known (open()), its GPU stage, its plan and the
/// job token. Its steps that need these are its methods.
struct Session {
  /// Starts the clock, the deadline and the watchdog, and installs the signal handlers.
  explicit Session(const RunOptions& options);

  /// The identity is known: the GPU stage (loaded from `env`, the process's own),
  /// the plan of its devices (from `job_env`, the environment the job's processes
  /// see), the token, and NCCL's words captured to a file of this process's (unless
  /// --no-gpu; before the inventory loads NCCL). Once, before any step below.
  void open(const Identity& id, const EnvMap& env, const EnvMap& job_env,
            std::optional<JobToken> job_token);

  /// The inventory of this member's GPUs, unless --no-gpu.
  GpuFacts probe_gpus();
  /// This member's GPU stage on the master's go: NCCL init and the all-reduce for
  /// each of its ranks, ended in time to send the results before the master's
  /// stage deadline, with what NCCL said in this process.
  StageReport run_gpu_stage(const Verdict& go, long world_size);
  /// The end of a run whose GPU stage took over a call into NCCL: waits (seconds, the
  /// watchdog still armed) for the aborts it started, then flushes and ends the
  /// process with _exit(code), so that no exit() handler or static destructor runs
  /// under NCCL's threads. Otherwise returns `code`.
  int leave(int code);

  const RunOptions& o;
  Clock::time_point start;                           ///< this process's, for its timings
  std::chrono::system_clock::time_point wall_start;  ///< the same moment, for other hosts
  /// Every deadline of the run, from --timeout and the job's start (this process's
  /// start, or RANKCHECK_START_TIME's: apply_job_start).
  Timeline time;
  std::atomic<int> watchdog_code{exit_code::kIncomplete};  // by phase: 4, then 5 in the GPU stage
  Watchdog watchdog;
  Log log;
  Output out;
  // Set by open().
  std::unique_ptr<GpuStage> stage;
  GpuPlan plan;
  std::optional<JobToken> token;
  std::unique_ptr<NcclDebugFile> nccl_debug;  // where NCCL writes its words
  // `run -- CMD` on rank 0: the watch server's sockets, opened before the check's
  // verdict (which carries their port) and handed to the wrapper after it.
  std::unique_ptr<WatchServer> watch_listen;
  uint16_t watch_port = 0;

 private:
  void capture_nccl_words(const EnvMap& env);
  bool probe_stuck_ = false;  // the inventory's thread never came back from the driver
  // The IB ports' error counters at open(), against which the stage's end compares.
  SysFs ib_sys_;
  IbCounters ib_start_;
};

/// The job token from --token-fd, --token-file or RANKCHECK_TOKEN_FILE, if one is given.
Result<std::optional<JobToken>> load_token(const RunOptions& o, const EnvMap& env, const Log& log);

/// This member's record: its identity, host facts, MASTER_ADDR resolved, its GPUs,
/// cut to what a hello carries. `view`: the host's interfaces and network namespace
/// when already read (null: read here).
Record build_self(const Identity& id, const std::optional<std::string>& host_name,
                  const EnvMap& env, Deadline resolve_by, GpuFacts gpu = {},
                  const HostView* view = nullptr);

/// The GPU stage's libraries and options, and the devices a member's ranks use.
StageOptions stage_options(const RunOptions& o, const EnvMap& env);
GpuPlan gpu_plan(const Identity& id, const RunOptions& o, const EnvMap& env);

}  // namespace rankcheck
