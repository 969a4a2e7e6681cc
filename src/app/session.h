#pragma once
// What every run starts with and carries from step to step: its deadline and the
// watchdog behind it, the signal handlers, where its words go, its GPU stage and
// its job token. Private to run.cc and local.cc.

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "protocol/auth.h"
#include "base/deadline.h"
#include "base/env.h"
#include "model/gpu.h"
#include "gpu/stage.h"
#include "identity/identity.h"

#include "protocol/messages.h"
#include "model/record.h"
#include "report/report.h"
#include "base/result.h"
#include "app/run.h"
#include "rehearsal/probe.h"

namespace rankcheck {

/// How long after --timeout the watchdog ends a process that is still running.
inline constexpr Millis kWatchdogGrace{1800};
/// How long past --timeout a member waits for a master that decided at the deadline.
inline constexpr Millis kVerdictGrace{1000};

inline Millis seconds(double s) {
  return Millis(static_cast<long>(s * 1000.0));
}

/// Time the master keeps between its decision and --timeout, to send verdicts.
Millis reserve_for(double timeout_s);

/// Ends the process if the run outlives its deadline: the last word on "never hangs".
/// One per process (it owns SIGALRM and the ITIMER_REAL timer).
class Watchdog {
 public:
  Watchdog(Clock::time_point at, std::atomic<int>& exit_code);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
};

/// stderr: progress (dropped with --quiet) and errors (always printed).
class Log {
 public:
  explicit Log(bool quiet) : quiet_(quiet) {}
  void progress(const std::string& line) const {
    if (!quiet_) error(line);
  }
  static void error(const std::string& line);

 private:
  bool quiet_;
};

/// Writes the report where --json asked, and the text to stdout otherwise; the
/// metrics and the suspect hosts where --metrics and --exclude-file ask.
struct Output {
  std::string json_path;
  bool color;
  std::string metrics_path;
  std::string exclude_path;

  /// --json PATH (and --metrics, --exclude-file) with {rank} and {host} filled in:
  /// one command line serves every process of a job (srun, torchrun, mpirun).
  void set_self(long rank, const std::string& host);
  /// Prints the text, writes the JSON (`json` hands it to its sink in pieces);
  /// whether the JSON could be written.
  Status emit(const std::function<std::string()>& text,
              const std::function<void(const JsonSink&)>& json) const;
};

/// Writes a report file whole or not at all (see session.cc), with the OS error;
/// `what` names it in that error ("the JSON report").
Status write_report_file(const std::string& path, std::string_view data,
                         std::string_view what = "the JSON report");
/// The same, for a file written in pieces: `produce` hands them to its sink.
Status write_report_file(const std::string& path,
                         const std::function<void(const JsonSink&)>& produce,
                         std::string_view what = "the JSON report");

/// Fails early, before any rendezvous, when --json names a directory that is not there.
Status check_json_path(const std::string& path);

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
/// The inventory of this member's GPUs, unless --no-gpu.
GpuFacts probe_gpus(Session& s);

/// Prints a member's report; its exit code.
int print_member(const MemberReport& m, const Output& out);
/// Prints the master's report; the job's exit code (128+N after signal N).
int print_report(const Report& r, const Session& s);
/// Prints why the identity is unusable; exit 2.
int usage_problems(const Identity& id);

/// The listener of the rehearsal of NCCL's connections on the address NCCL would
/// use here (one member per host: local rank 0, or a node's member); sets the
/// record's listen port and port range. Null where there is none.
std::unique_ptr<PathListener> open_path_listener(Record& self, const Session& s);
/// Runs the master's plan of connections from this host.
PathReport rehearse(const PathPlan& plan, const Session& s, const Log& log);

/// Where rank 0's master listens.
struct MasterSetup {
  std::vector<std::string> addresses;
  uint16_t port = 0;
};

/// Hosts the master in this process, joins it as a member, and prints the report
/// (run.cc). Returns nullopt when another master of this job already answers and
/// `join_other` (this process then joins it as an ordinary member); without it,
/// that master holding the port is master-port-in-use.
std::optional<int> master_path(Record& self, const Identity& id, Session& s,
                               const MasterSetup& setup, bool join_other = true,
                               const std::function<void(uint16_t)>& on_listening = {});

}  // namespace rankcheck
