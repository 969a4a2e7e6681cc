// The order of a run's deadlines (model/timeline.h): each wait ends before the wait
// of whoever waits for it, at every --timeout a run may be given.

#include "model/timeline.h"

#include <catch2/catch.hpp>

using namespace rankcheck;
using namespace rankcheck::timing;

TEST_CASE("timeline: the phases end in their order, for every timeout") {
  const Clock::time_point t0 = Clock::now();
  for (double timeout : {1.0, 2.0, 5.0, 10.0, 30.0, 120.0, 300.0, 3600.0}) {
    INFO("--timeout " << timeout);
    Timeline t(t0, timeout);
    CHECK(t.start() < t.decide_by().when());
    CHECK(t.decide_by().when() < t.end().when());
    CHECK(t.stage_by().when() < t.stage_closed_by().when());
    // The master closes the stage before the run's end, with time to send the final
    // verdict and print its report.
    CHECK(t.stage_closed_by().when() < t.end().when());
    // After the run's end: a member waits for a verdict decided at the deadline, its
    // host's relay serves it a little longer, the aborts of a stage taken over get
    // their time; the watchdog comes last.
    CHECK(t.end().when() < t.verdict_by().when());
    CHECK(t.verdict_by().when() < t.relay_until().when());
    CHECK(t.relay_until().when() <= t.aborts_by().when());
    CHECK(t.aborts_by().when() < t.watchdog_at());
    CHECK(t.reap_by().when() < t.watchdog_at());
    CHECK(t.end().when() < t.reap_by().when());
  }
}

TEST_CASE("timeline: a member's stage ends in time for the master to take its results") {
  for (uint32_t stage_ms : {100u, 1000u, 5000u, 60000u, 600000u}) {
    INFO("stage of " << stage_ms << " ms");
    Millis margin = stage_margin(stage_ms);
    // A member ends its stage `margin` before the stage's end; the stage may overrun
    // its own deadline by kStageOverrun; its results are then on their way, and the
    // master waits kStageGrace past the stage's end for them.
    CHECK(kStageOverrun < margin + kStageGrace);
    CHECK(kRunGrace < kStageOverrun);
  }
}

TEST_CASE("timeline: the master's reserve for the verdicts is a tenth of the timeout, bounded") {
  CHECK(decision_reserve(1) == Millis(500));
  CHECK(decision_reserve(30) == Millis(3000));
  CHECK(decision_reserve(600) == Millis(5000));
}

TEST_CASE("timeline: the GPU stage margin grows with the stage, within bounds") {
  CHECK(stage_margin(0) == Millis(150));
  CHECK(stage_margin(3000) == Millis(150));
  CHECK(stage_margin(20000) == Millis(1000));
  CHECK(stage_margin(295000) == Millis(2000));
  CHECK(stage_margin(UINT32_MAX) == Millis(2000));
}
