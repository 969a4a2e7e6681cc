#pragma once
// One Deadline threads through every wait, so no path outlives --timeout.

#include <algorithm>
#include <chrono>

namespace rankcheck {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

/// A point in time after which a wait must give up.
class Deadline {
 public:
  explicit Deadline(Clock::time_point when) : when_(when) {}
  static Deadline after(Clock::duration d) { return Deadline(Clock::now() + d); }
  static Deadline never() { return Deadline(Clock::time_point::max()); }

  Clock::time_point when() const { return when_; }
  bool expired() const { return Clock::now() >= when_; }

  /// Time left, never negative.
  Millis remaining() const {
    if (when_ == Clock::time_point::max()) return Millis(INT32_MAX);
    auto left = std::chrono::duration_cast<Millis>(when_ - Clock::now());
    return std::max(left, Millis(0));
  }
  /// Whole seconds left, for messages ("41 s left").
  long seconds_left() const { return static_cast<long>(remaining().count() / 1000); }
  /// A poll(2) timeout: time left, rounded up, capped.
  int poll_ms(Millis cap = Millis(INT32_MAX)) const {
    if (when_ == Clock::time_point::max()) return static_cast<int>(cap.count());
    auto left = std::chrono::ceil<Millis>(when_ - Clock::now());
    return static_cast<int>(std::clamp(left, Millis(0), cap).count());
  }

  Deadline sooner(Deadline other) const { return Deadline(std::min(when_, other.when_)); }
  /// This deadline moved later by `margin`; never() stays never() (no overflow).
  Deadline extended(Clock::duration margin) const {
    if (margin <= Clock::duration::zero()) return *this;
    if (when_ > Clock::time_point::max() - margin) return never();
    return Deadline(when_ + margin);
  }

 private:
  Clock::time_point when_;
};

/// Milliseconds between two instants, as a double, for timings in reports.
inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace rankcheck
