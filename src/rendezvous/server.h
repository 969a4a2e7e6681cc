#pragma once
// The master's rendezvous server: event-driven (Asio, C++20 coroutines), one
// thread for every connection, decides once.

#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/result.h"
#include "master/master_state.h"
#include "protocol/auth.h"
#include "protocol/messages.h"
#include "report/report.h"

namespace rankcheck {

struct ServerConfig {
  MasterConfig master;                     ///< what the master decides with
  Deadline decide_by = Deadline::never();  ///< decide at the latest here
  Millis handshake_timeout{5000};          ///< a hello must be complete this soon after accept
  Millis progress_interval{5000};
  /// Each of NCCL's connections in the rehearsal (NCCL itself retries a connect for longer).
  Millis rehearsal_per_connection{2000};
  size_t max_pending = 1024;      ///< connections not yet admitted, beyond which new ones wait
  std::optional<JobToken> token;  ///< with one, every hello and verdict is authenticated
};

class Server {
 public:
  explicit Server(ServerConfig config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Listens on each numeric address at `port` (0: a free port, the same for all).
  /// Returns the port. Succeeds when at least one address could be bound (the
  /// others are logged), unless the port is in use on any of them.
  Result<uint16_t> listen(const std::vector<std::string>& addresses, uint16_t port);
  /// Takes over `fd`, a TCP socket already listening on `address`; returns its port.
  Result<uint16_t> adopt(int fd, const std::string& address);
  /// Serves on a thread of its own until finish().
  void start();
  /// Admits the master's own member without a socket; its verdict arrives in the future.
  std::future<Verdict> join_local(Record self);
  /// The master's own GPU stage results; the final verdict arrives in the future.
  std::future<Verdict> submit_local(StageReport results);
  /// Cut short by `signal`: decides now with what is known, or ends the GPU stage.
  void interrupt(int signal);
  /// Waits until every member has been sent the verdict, or the deadline; stops
  /// serving and returns the report.
  Report finish(Deadline deadline);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rankcheck
