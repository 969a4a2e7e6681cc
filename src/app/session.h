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
#include "identity/identity.h"
#include "model/gpu.h"
#include "model/record.h"
#include "protocol/auth.h"
#include "protocol/messages.h"
#include "rehearsal/probe.h"

namespace rankcheck {

inline Millis seconds(double s) {
  return Millis(static_cast<long>(s * 1000.0));
}

/// Time the master keeps between its decision and --timeout, to send verdicts.
Millis reserve_for(double timeout_s);

/// One run, from its start to its exit code.
struct Session {
  /// Starts the clock, the deadline and the watchdog, and installs the signal handlers.
  explicit Session(const RunOptions& options);

  const RunOptions& o;
  Clock::time_point start;
  std::chrono::system_clock::time_point wall_start;  ///< the same moment, for other hosts
  Deadline end;
  std::atomic<int> watchdog_code{exit_code::kIncomplete};  // by phase: 4, then 5 in the GPU stage
  Watchdog watchdog;
  Log log;
  Output out;
  std::unique_ptr<GpuStage> stage;  // set once the identity is known
  GpuPlan plan;
  std::optional<JobToken> token;
  std::unique_ptr<NcclDebugFile> nccl_debug;  // where NCCL writes its words, once set up
};

/// The job token from --token-fd, --token-file or RANKCHECK_TOKEN_FILE, if one is given.
Result<std::optional<JobToken>> load_token(const RunOptions& o, const EnvMap& env, const Log& log);

/// This member's record: its identity, host facts, MASTER_ADDR resolved, its GPUs.
/// `view`: the host's interfaces and network namespace when already read (null: read here).
Record build_self(const Identity& id, const std::optional<std::string>& host_name,
                  const EnvMap& env, Deadline resolve_by, GpuFacts gpu = {},
                  const HostView* view = nullptr);

StageOptions stage_options(const RunOptions& o, const EnvMap& env);
GpuPlan gpu_plan(const Identity& id, const RunOptions& o, const EnvMap& env);
/// Has NCCL write its own words to a file of this process (or the user's
/// NCCL_DEBUG_FILE), unless --no-gpu: before the inventory loads NCCL. `env`: the
/// environment NCCL will see, this process's.
void capture_nccl_words(Session& s, const EnvMap& env);
/// The inventory of this member's GPUs, unless --no-gpu.
GpuFacts probe_gpus(Session& s);

/// The listener of the rehearsal of NCCL's connections on the address NCCL would
/// use here (one member per host: local rank 0, or a node's member); sets the
/// record's listen port and port range. Null where there is none.
std::unique_ptr<PathListener> open_path_listener(Record& self, const Session& s);
/// Runs the master's plan of connections from this host.
PathReport rehearse(const PathPlan& plan, const Session& s, const Log& log);

/// This member's GPU stage on the master's go: NCCL init and the all-reduce for
/// each of its ranks, ended in time to send the results before the master's
/// stage deadline, with what NCCL said in this process.
StageReport run_gpu_stage(Session& s, const Verdict& go, long world_size);

/// The end of a run whose GPU stage took over a call into NCCL: waits (seconds, the
/// watchdog still armed) for the aborts it started, then flushes and ends the process
/// with _exit(code), so that no exit() handler or static destructor runs under NCCL's
/// threads. Otherwise returns `code`.
int leave_after_stage(Session& s, int code);

}  // namespace rankcheck
