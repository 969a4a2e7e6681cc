#pragma once
// A wrapper's link to rank 0's watch server (`rankcheck run -- CMD`): opened once,
// with a deadline, then driven by the wrapper's own poll loop without ever waiting:
// events queue in a bounded outbox, orders are read as they come. A link that fails
// is dropped; the command it reports on goes on.

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/result.h"
#include "protocol/messages.h"
#include "rendezvous/socket.h"

namespace rankcheck {

struct WatchLinkOptions {
  std::vector<std::string> addresses;  ///< rank 0's, numeric, tried in order
  uint16_t port = 0;
  long rank = 0;
  long nranks = 1;
  std::string host;
  std::string job_id;
  const JobToken* token = nullptr;
};

class WatchLink {
 public:
  WatchLink() = default;
  /// Connects and introduces itself (the challenge, the hello), by `by`.
  static Result<WatchLink> open(const WatchLinkOptions& o, Deadline by);
  /// Waits, until `by`, for the order to start the command; an end order (the job
  /// was ended before it started) is kept for take_orders().
  Status await_start(Deadline by);

  bool up() const { return socket_.valid(); }
  int fd() const { return socket_.fd(); }
  /// Queues an event; past the outbox's bound a heartbeat is dropped, never another kind.
  void send(const WatchEvent& e);
  bool wants_write() const { return !out_.empty(); }
  /// Writes what the socket takes now. False: the link is gone (closed, reset).
  bool flush();
  /// Reads what arrived, without waiting. False: the link is gone, or sent an order
  /// that does not verify (it is then closed).
  bool read();
  /// The orders read so far, oldest first, handed over.
  std::vector<WatchOrder> take_orders();
  /// Why the link went down ("" while it is up).
  const std::string& why_down() const { return why_; }
  void close(std::string why = "closed");

  /// Events held back at most, in bytes: a minute of a busy job's events, far more
  /// than a healthy one sends; a link that cannot write them is stuck.
  static constexpr size_t kMaxOutbox = 256 * 1024;

 private:
  bool take(const Frame& f);

  Socket socket_;
  FrameBuffer rx_;
  std::deque<std::vector<uint8_t>> out_;
  size_t out_bytes_ = 0;
  size_t out_sent_ = 0;  // of out_.front()
  std::vector<WatchOrder> orders_;
  const JobToken* token_ = nullptr;
  Nonce server_{}, client_{};
  uint32_t sent_seq_ = 0, read_seq_ = 0;
  bool started_ = false;
  std::string why_;
};

}  // namespace rankcheck
