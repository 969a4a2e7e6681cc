#pragma once
// Ends the process if the run outlives its deadline.

#include <atomic>
#include <string>

#include "base/deadline.h"
#include "model/timeline.h"

namespace rankcheck {

/// Ends the process if the run outlives its deadline: the last word on "never hangs".
/// One per process (it owns SIGALRM and the ITIMER_REAL timer); its timer outlives it,
/// so that the exit after the session is bounded too.
class Watchdog {
 public:
  Watchdog(Clock::time_point at, std::atomic<int>& exit_code);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
};

/// The job's verdict is reached, with exit code `code`: the watchdog ends the
/// process with it from now on (writing the report can still block), rather than
/// with the code of the phase it was stuck in.
void watchdog_exit_with_verdict(int code);

/// A file of this process's own that the watchdog removes before it ends the
/// process ("" for none): its destructor will not run then.
void remove_at_watchdog_exit(const std::string& path);

}  // namespace rankcheck
