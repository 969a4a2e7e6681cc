#pragma once
// What the master's server (server_impl.h) and a host's relay (relay.cc) share on
// their Asio sockets: reading a frame, and the outbox a connection writes from.

#include <algorithm>
#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>

#include "base/result.h"
#include "protocol/wire.h"
#include "rendezvous/socket.h"

namespace rankcheck {

/// co_await an Asio operation for (error_code, ...): its errors are values, not exceptions.
inline constexpr auto kAwait = asio::experimental::as_tuple(asio::use_awaitable);

/// A frame as written: shared by every connection it is the same for (a verdict, the roots).
using Bytes = std::shared_ptr<const std::vector<uint8_t>>;

// ----- reading ---------------------------------------------------------------

/// A frame read that ended short: why, and how far it got.
struct ReadError {
  /// decode_header's (a frame fault), or the socket's: "connection closed" or
  /// "connection closed mid-frame" (kClosed), "recv: ..." (kSystem).
  Error error;
  size_t got = 0;  ///< bytes read of the step that failed: the header, or the payload
  bool io() const { return is_io_fault(error.fault); }
};

/// The socket's error as a ReadError; `mid`: some of the frame was read already.
ReadError read_error(std::error_code ec, bool mid, size_t got);

/// A frame's header, checked (magic, version, type, cap) before its payload is
/// allocated; for another protocol version `peer_version` is set (decode_header).
template <class Sock>
asio::awaitable<std::optional<FrameHeader>> read_header(Sock& s, ReadError* why = nullptr,
                                                        uint16_t* peer_version = nullptr) {
  std::array<uint8_t, kHeaderSize> hdr{};
  auto [ec, n] = co_await asio::async_read(s, asio::buffer(hdr), kAwait);
  if (ec) {
    if (why) *why = read_error(ec, n > 0, n);
    co_return std::nullopt;
  }
  auto h = decode_header(hdr, peer_version);
  if (!h) {
    if (why) *why = ReadError{h.error(), n};
    co_return std::nullopt;
  }
  co_return *h;
}

/// The payload that `h` announces, within its cap (read_header checked it).
template <class Sock>
asio::awaitable<std::optional<std::vector<uint8_t>>> read_payload(Sock& s, const FrameHeader& h,
                                                                  ReadError* why = nullptr) {
  std::vector<uint8_t> payload(h.length);
  auto [ec, n] = co_await asio::async_read(s, asio::buffer(payload), kAwait);
  if (ec) {
    if (why) *why = read_error(ec, true, n);
    co_return std::nullopt;
  }
  co_return payload;
}

/// A whole frame: read_header, then read_payload.
template <class Sock>
asio::awaitable<std::optional<Frame>> read_frame(Sock& s, ReadError* why = nullptr) {
  auto h = co_await read_header(s, why);
  if (!h) co_return std::nullopt;
  auto payload = co_await read_payload(s, *h, why);
  if (!payload) co_return std::nullopt;
  co_return Frame{*h, std::move(*payload)};
}

// ----- listening -------------------------------------------------------------

/// Where a server's listening sockets and the addresses they hold go.
struct Listeners {
  std::vector<std::unique_ptr<asio::ip::tcp::acceptor>>& acceptors;
  std::vector<std::string>& bound;
};

/// Takes over `fd`, a TCP socket listening on `address` (numeric), into `out`;
/// returns its port. On failure `fd` is closed.
Result<uint16_t> adopt_listener(asio::io_context& io, int fd, const std::string& address,
                                Listeners& out);

/// Listens on each numeric address at `port` (0: a free port, the same for all), and
/// returns the port. A host name may resolve to addresses this host cannot bind, each
/// for its own reason (localhost's ::1 where IPv6 is off): listening on one is enough,
/// and the others are logged. A port in use on any of them fails, as it would fail
/// the training job.
Result<uint16_t> listen_on(asio::io_context& io, const std::vector<std::string>& addresses,
                           uint16_t port, Listeners& out,
                           const std::function<void(const std::string&)>& log);

// ----- writing ---------------------------------------------------------------

/// The frames a connection writes, oldest first, with one write under way at a
/// time. The owner's pump starts the next write when none is under way, and
/// decides what an empty outbox means (a close, a half-close, the run's end).
class Outbox {
 public:
  void push(Bytes frame) {
    bytes_ += frame->size();
    queue_.push_back(std::move(frame));
  }
  void push(std::vector<uint8_t> frame);
  /// The bytes of the frames not yet written, the write under way included.
  size_t queued_bytes() const { return bytes_; }
  /// A write is under way.
  bool writing() const { return in_write_ > 0; }
  /// Nothing left to write, the write under way (if any) included.
  bool empty() const { return head_ == queue_.size(); }
  /// Drops the frames not yet written; those of the write under way stay until it ends.
  void clear();

  /// Writes the oldest frames on `sock`, up to `max_gather` of them in one write (a
  /// writev); then `done(ec)`, the frames written gone (every frame, on an error).
  /// `done` keeps this outbox and `sock` alive (it holds their owner) and pumps on.
  /// Not while writing(), nor when empty().
  template <class Sock, class Done>
  void write_next(Sock& sock, size_t max_gather, Done done) {
    assert(!writing() && !empty());
    size_t n = std::min(queue_.size() - head_, max_gather);
    std::vector<asio::const_buffer> pieces;
    pieces.reserve(n);
    for (size_t i = head_; i < head_ + n; ++i)
      pieces.emplace_back(asio::buffer(*queue_[i]));
    in_write_ = static_cast<uint32_t>(n);
    asio::async_write(sock, pieces,
                      [this, done = std::move(done)](std::error_code ec, size_t) mutable {
                        written(ec);
                        done(ec);
                      });
  }

 private:
  void written(std::error_code ec);

  std::vector<Bytes> queue_;  // from head_ on: not yet written
  size_t bytes_ = 0;          // their size, together
  uint32_t head_ = 0;
  uint32_t in_write_ = 0;  // queue_[head_, head_ + in_write_) is being written
};

}  // namespace rankcheck
