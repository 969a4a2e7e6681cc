#pragma once
// The wrapper of `rankcheck run -- CMD` once the check has passed: it starts the
// command, passes its output through byte for byte while it reads it with the
// diagnose catalogue, forwards signals as tini does, reaps, and tells rank 0's watch
// server what the command does (watch_link.h). It never changes what the command
// sees, and without an order from the watch server (--fail-fast) never changes its
// exit code: the link can fail, the job goes on.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "base/deadline.h"
#include "base/env.h"
#include "rendezvous/watch_link.h"

namespace rankcheck {

struct WrapOptions {
  std::vector<std::string> command;
  EnvMap env;                    ///< the command's whole environment: the one the job was given
  bool take_terminal = true;     ///< Child::spawn's
  uint16_t rendezvous_port = 0;  ///< MASTER_PORT: a socket on it marks the start of init; 0: none
  Millis heartbeat{2000};
  Millis marker_poll{1000};  ///< how often the command's sockets are looked at, until init
  Millis kill_grace{10000};  ///< an order to end: SIGTERM, then SIGKILL to its group after this
  /// With --fail-fast: after the command failed, how long to wait for the watch server's
  /// order (whose exit code then says the job's failure, as every other rank's does).
  Millis order_wait{0};
  int stdout_fd = 1;  ///< where the command's stdout and stderr go
  int stderr_fd = 2;
  /// The open-file limit the command gets: the one this process started with, before
  /// rank 0's watch server raised its own (the job's limits are the job's).
  std::optional<rlimit> nofile;
  std::function<void(const std::string&)> log = [](const std::string&) {};
};

struct WrapOutcome {
  bool started = false;
  int status = 0;     ///< the command's wait status
  int exit_code = 0;  ///< what the wrapper exits with: the command's, or an order's
  bool ended_by_order = false;
  std::string order_finding;  ///< the finding that ended the job
  std::string order_headline;
};

/// Runs the command to its end. `link`: the watch server's (null, or down: unwatched).
WrapOutcome wrap_command(const WrapOptions& o, WatchLink* link);

/// After the command ended: whether SIGTERM, SIGINT, SIGHUP or SIGQUIT came since (the
/// wrapper's handlers stay: rank 0 then stops waiting for the others' ends).
bool wrapper_told_to_stop();

}  // namespace rankcheck
