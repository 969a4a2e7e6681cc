#pragma once
// Rank 0's watch server (`rankcheck run -- CMD`): after the check passes, every
// wrapper's link comes here, on a port of its own (MASTER_PORT is the job's once the
// check is over). It tells each wrapper when to start its command, takes their
// events into a WatchState, asks the rules again on every event and every tick,
// hands the report on whenever it changes, and with --fail-fast tells every wrapper
// to end its command at the first failure. Asio, on a thread of its own.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/result.h"
#include "master/watch_state.h"
#include "protocol/auth.h"

namespace rankcheck {

struct WatchServerConfig {
  WatchConfig watch;  ///< its members are given to start()
  std::optional<JobToken> token;
  std::string job_id;
  Millis handshake{5000};  ///< a link's hello must come this soon
  Millis tick{1000};       ///< how often the rules are asked again with nothing new
  /// The report, whenever it changed (at most once a tick, and at once when its
  /// findings did); called on the server's thread.
  std::function<void(const JobReport&)> on_report = [](const JobReport&) {};
  /// A finding's line when it is first raised, and the server's own words.
  std::function<void(const std::string&)> log = [](const std::string&) {};
};

class WatchServer {
 public:
  explicit WatchServer(WatchServerConfig config);
  ~WatchServer();
  WatchServer(const WatchServer&) = delete;
  WatchServer& operator=(const WatchServer&) = delete;

  /// Listens on each numeric address at `port` (0: a free one). Before the check's
  /// verdict, so that the verdict can carry the port.
  Result<uint16_t> listen(const std::vector<std::string>& addresses, uint16_t port);
  /// The listening sockets, handed over (the check's process listens, the wrapper's
  /// serves: watch/handoff.h); this server no longer has them.
  std::vector<int> release_listeners();
  /// Serves on listening sockets another process opened (release_listeners()'s).
  Status adopt(const std::vector<int>& fds);
  /// Serves, on a thread of its own, the members the check admitted.
  void start(std::vector<MemberWatch> members);
  /// MASTER_PORT is free: the job's clock starts, and every link (now, and each later
  /// one once it said hello) is told to start its command.
  void start_job();
  /// Waits until every member's command has ended or its link is lost, or `linger`
  /// after every member that ever connected is done (a member whose wrapper never came
  /// is not waited for longer), or `by`; stops serving and returns the last report.
  /// `stop`, asked every tenth of a second, ends the wait at once when it says so.
  JobReport finish(Deadline by, Millis linger, const std::function<bool()>& stop = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rankcheck
