#pragma once
// The master's side of the job under watch, whatever carries the events: which
// member is where, the findings over all of them (rules/job.cc) as they change, and
// the order to end the job on the first failure with --fail-fast. Transport-free,
// and clock-free: every call says what time it is on the master's clock.

#include <optional>
#include <string>
#include <vector>

#include "model/watch.h"
#include "report/job.h"

namespace rankcheck {

struct WatchConfig {
  std::vector<MemberWatch> members;  ///< every member the check admitted: rank, nranks, host
  double init_timeout_ms = 300'000;  ///< --init-timeout
  double stall_after_ms = 0;         ///< --stall-after; 0: not watched
  bool fail_fast = false;            ///< --fail-fast
  std::string command;               ///< for the report
};

class WatchState {
 public:
  explicit WatchState(WatchConfig config);

  /// A wrapper introduced itself as ranks [rank, rank + nranks) on `host`: the index
  /// of its member, or why it is refused (no such member, or one already connected).
  std::optional<size_t> connect(long rank, long nranks, const std::string& host, double now_ms,
                                std::string* why = nullptr);
  void event(size_t member, const WatchEvent& e, double now_ms);
  /// Member `member`'s link closed: lost, unless it told its command's exit first.
  void disconnected(size_t member, double now_ms);
  /// Asks the rules again; true when the findings changed (the report is written again).
  bool evaluate(double now_ms);
  /// With --fail-fast, the first time the findings hold an error: the one that ends
  /// the job (every member is then told to end its command and exit with its code).
  std::optional<Finding> take_end_order();
  /// The job is over: every member's command exited or its link was lost.
  bool done() const;
  /// Every member that ever connected is gone (exited or lost); those that never did
  /// are not waited for once this holds.
  bool all_connected_done() const;
  /// The report's section, now (`running`: false once the job is over).
  JobReport report(double now_ms, bool running) const;

 private:
  MemberWatch& at(size_t i) { return job_.members[i]; }
  void reach(MemberWatch& m, JobPhase p, double now_ms);

  WatchConfig cfg_;
  JobWatch job_;
  std::vector<Finding> findings_;
  std::vector<Finding> cleared_;  ///< raised once, no longer held: kept, as warnings
  bool end_ordered_ = false;
};

}  // namespace rankcheck
