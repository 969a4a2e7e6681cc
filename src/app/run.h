#pragma once
// The pipeline of one run: identity, local checks, rendezvous, verdict, report.
// Returns the exit code; only main exits.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/env.h"
#include "host/interfaces.h"
#include "identity/identity.h"
#include "protocol/auth.h"

namespace rankcheck {

/// `rankcheck run [options] -- CMD`: after a pass, CMD runs under watch (watch/wrapper.h).
struct WatchOptions {
  std::vector<std::string> command;  ///< empty: no command, the check alone
  bool fail_fast = false;            ///< --fail-fast: end the job at its first failure
  double init_timeout_s = 0;         ///< --init-timeout; 0: the check's --timeout
  double stall_after_s = 0;          ///< --stall-after; 0: not watched
  double kill_grace_s = 10;          ///< --kill-grace: SIGTERM, then SIGKILL after this
  uint16_t port = 0;                 ///< --watch-port: rank 0's watch server; 0: a free port
  double linger_s = 60;  ///< --watch-linger: rank 0 waits this long for the others' ends
  // Not flags: how the wrapper and the check it forks work together (watch_run.h).
  int handoff_fd = -1;  ///< in the check's process: where its handoff goes (-1: not forked)
  std::shared_ptr<const JobToken> token;  ///< the token, read once by the wrapper
  int command_stdout = 1;                 ///< where the command's stdout goes
  bool take_terminal = true;              ///< Child::spawn's: false for `local`'s members
};

struct RunOptions {
  Flags flags;
  std::optional<std::string> host_name;  ///< overrides gethostname()
  double timeout_s = 300;                ///< bounds the whole run
  double handshake_timeout_s = 5;
  double progress_interval_s = 5;
  double rehearsal_timeout_s = 2;  ///< --rehearsal-timeout: each rehearsed connection
  std::string json_path;           ///< "" none, "-" stdout instead of text
  std::string metrics_path;        ///< --metrics: node_exporter textfile, "" none
  std::string exclude_path;        ///< --exclude-file: the suspect hosts as a host list, "" none
  bool no_gpu = false;
  bool no_relay = false;          ///< --no-relay: every member connects to the master itself
  long nccl_roots_every = 4096;   ///< --nccl-roots-every (MasterConfig::nccl_roots_every)
  std::string nccl_lib;           ///< --nccl-lib: the NCCL the training job loads
  std::optional<int> device;      ///< --device: the CUDA device, else LOCAL_RANK's
  uint64_t bandwidth_bytes = 0;   ///< --bandwidth: a timed all-reduce of this size
  double min_busbw_gbps = 0;      ///< --min-busbw: a lower bus bandwidth is a finding
  std::string bootstrap = "tcp";  ///< --bootstrap: tcp, or mpi (rankcheck-mpi)
  std::optional<std::string>
      token_file;               ///< --token-file, else RANKCHECK_TOKEN_FILE: the job token
  std::optional<int> token_fd;  ///< --token-fd: the job token from an inherited pipe
  bool quiet = false;           ///< no progress lines on stderr
  bool color = false;
  WatchOptions watch;  ///< `run -- CMD`: the job under watch
  /// A member of `rankcheck local`: waits, after its own facts are read, for rank 0's
  /// word that its master accepts; false: it never will (the member goes home).
  std::function<bool()> before_join;
};

struct LocalOptions {
  RunOptions run;
  int nprocs = 4;
};

struct EnvOptions {
  Flags flags;
  std::optional<std::string> host_name;
  std::string json_path;  ///< as run's --json: "-" for JSON instead of text, or a file
  double resolve_timeout_s = 2;
  bool no_gpu = false;
  std::string nccl_lib;
  std::optional<int> device;
  bool color = false;  ///< --color, with use_color's rules for auto
};

/// `rankcheck run`: this process is one member (rank 0 also hosts the master).
/// `host`: the host's interfaces and network namespace when already read (the
/// members `rankcheck local` forks share its reading); null: this process reads its own.
int run_process(const RunOptions& options, const EnvMap& env, const HostView* host = nullptr);
/// `rankcheck local -n N`: N members on this machine, the master in this process.
int run_local(const LocalOptions& options, const EnvMap& env);
/// `rankcheck env`: identity, sources and local checks; no rendezvous.
int run_env(const EnvOptions& options, const EnvMap& env);

/// The environment for a child member of `rankcheck local`: the parent's, less
/// every launcher variable, so that an enclosing Slurm or torchrun job does not leak in.

}  // namespace rankcheck
