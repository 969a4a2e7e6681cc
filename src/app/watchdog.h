#pragma once
// Ends the process if the run outlives its deadline.

#include <atomic>

#include "base/deadline.h"

namespace rankcheck {

/// How long after --timeout the watchdog ends a process that is still running.
inline constexpr Millis kWatchdogGrace{1800};

/// Ends the process if the run outlives its deadline: the last word on "never hangs".
/// One per process (it owns SIGALRM and the ITIMER_REAL timer).
class Watchdog {
 public:
  Watchdog(Clock::time_point at, std::atomic<int>& exit_code);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
};

}  // namespace rankcheck
