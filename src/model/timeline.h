#pragma once
// One run's deadlines, every one computed here from --timeout and the run's start,
// so that their order is written once and held by a test (tests/unit/timeline_test.cc):
// each side's wait ends before the wait of whoever waits for it.
//
//   start ─ resolve/decide ─ stage ends ─ stage closed ─ END ─ verdict ─ relay ─ aborts ─ watchdog
//            (END - reserve)  (END - 0.6 s) (+0.3 s)     --timeout (+1 s)  (+1.5 s)  (+1.5 s) (+1.8
//            s)
//
// Durations that bound one step rather than the run (a resolve attempt, a write, a
// pause between tries) are named where the step is; those that the order above
// depends on are named here.

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "base/deadline.h"

namespace rankcheck {

namespace timing {
/// Every rank's GPU stage ends this long before --timeout: the final verdict's time.
inline constexpr Millis kStageEndsBefore{600};
/// How long past the stage's end the master waits for results before its final
/// verdict: the members' results are on their way (each ends its stage sooner).
inline constexpr Millis kStageGrace{300};
/// How long past its deadline the GPU stage may take to end itself, at most.
inline constexpr Millis kStageOverrun{300};
/// Of that, what a run has to end (abort its communicators, free its buffers) before
/// it is taken for blocked inside NCCL.
inline constexpr Millis kRunGrace{150};
/// How long a member's GPU stage results may take to be written to the master.
inline constexpr Millis kResultsSendTime{1000};
/// How long past --timeout a member waits for a master that decided at the deadline.
inline constexpr Millis kVerdictGrace{1000};
/// How long past the verdict's grace a host's relay still serves its members.
inline constexpr Millis kRelayLinger{500};
/// How long after --timeout the watchdog ends a process that is still running.
inline constexpr Millis kWatchdogGrace{1800};
/// The watchdog's line is for a process that hangs, not for one that is leaving: the
/// aborts of a stage taken over end this much before it.
inline constexpr Millis kBeforeWatchdog{300};
/// How long a member whose job failed waits for rank 0 to print its report.
inline constexpr Millis kReportWait{5000};
/// How long the members of `rankcheck local` have past the deadline to end, before
/// they are killed.
inline constexpr Millis kReapGrace{1500};
}  // namespace timing

/// Time the master keeps between its decision and --timeout, to send the verdicts:
/// a tenth of the timeout, from 0.5 s to 5 s.
inline Millis decision_reserve(double timeout_s) {
  auto tenth = std::chrono::duration_cast<Millis>(std::chrono::duration<double>(timeout_s / 10));
  return std::clamp(tenth, Millis(500), Millis(5000));
}

/// What a member keeps between the end of its GPU stage and the stage's end at the
/// master, to abort NCCL, free and send its results: 5% of the stage, from 150 ms to
/// 2 s. A slow ncclCommAbort on a long stage is then not taken for a dead process.
inline Millis stage_margin(uint32_t stage_ms) {
  return std::clamp(Millis(stage_ms / 20), Millis(150), Millis(2000));
}

/// The deadlines of one run.
class Timeline {
 public:
  /// No deadline at all (a run that was given none).
  Timeline() : start_(Clock::now()), end_(Deadline::never()), timeout_s_(0) {}
  /// `timeout_s` from `start` (a job's start, or this process's), to the millisecond.
  Timeline(Clock::time_point start, double timeout_s)
      : start_(start),
        end_(start + Millis(static_cast<long>(timeout_s * 1000.0))),
        timeout_s_(timeout_s) {}

  Clock::time_point start() const { return start_; }
  /// --timeout after the start: the run's own deadline.
  Deadline end() const { return end_; }
  /// Rank 0 resolves its own MASTER_ADDR, and the master decides, by then.
  Deadline decide_by() const { return Deadline(end_.when() - decision_reserve(timeout_s_)); }
  /// Every rank's GPU stage ends by then.
  Deadline stage_by() const { return Deadline(end_.when() - timing::kStageEndsBefore); }
  /// The master closes the stage, with what results came in.
  Deadline stage_closed_by() const { return stage_by().extended(timing::kStageGrace); }
  /// A member waits this long for a master that decided at the deadline.
  Deadline verdict_by() const { return end_.extended(timing::kVerdictGrace); }
  /// A host's relay serves its members until then.
  Deadline relay_until() const { return verdict_by().extended(timing::kRelayLinger); }
  /// The aborts of a GPU stage taken over get until then.
  Deadline aborts_by() const {
    return end_.extended(timing::kWatchdogGrace - timing::kBeforeWatchdog);
  }
  /// `rankcheck local` kills the members still running then.
  Deadline reap_by() const { return end_.extended(timing::kReapGrace); }
  /// The watchdog ends the process then: the last word on "never hangs".
  Clock::time_point watchdog_at() const { return end_.extended(timing::kWatchdogGrace).when(); }

 private:
  Clock::time_point start_;
  Deadline end_;
  double timeout_s_;
};

}  // namespace rankcheck
