#pragma once
// A client socket for the rendezvous: connect, write and read whole frames, every
// call bounded by a Deadline and woken by an interrupt.

#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "base/deadline.h"
#include "base/result.h"
#include "protocol/wire.h"

namespace rankcheck {

/// "addr:port", or "[addr]:port" for an IPv6 address: how members name the master.
std::string endpoint(const std::string& addr, uint16_t port);

/// Marks a descriptor close-on-exec: sockets opened by Asio (which opens and
/// accepts without SOCK_CLOEXEC) are not inherited by the processes
/// `rankcheck local` starts, which would keep MASTER_PORT taken after this exits.
void set_cloexec(int fd);

/// Whether a fault is a socket call's (kClosed, kTimeout, kInterrupted, kSystem).
inline bool is_io_fault(Fault f) {
  return f == Fault::kClosed || f == Fault::kTimeout || f == Fault::kInterrupted ||
         f == Fault::kSystem;
}

/// A connected TCP socket with deadline-bounded I/O. Move-only.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_), rx_(std::move(o.rx_)) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  ~Socket();

  /// Connects to a numeric address; the message carries strerror.
  static Result<Socket> connect(const std::string& addr, uint16_t port, Deadline deadline);
  /// Connects to an abstract unix socket (`name` without its leading NUL), without
  /// waiting: a full backlog is an error like any other.
  static Result<Socket> connect_abstract(const std::string& name);
  /// The user id of the process at the other end of a unix socket; -1 if unknown.
  long peer_uid() const;

  Status write_all(std::span<const uint8_t> bytes, Deadline deadline);
  /// The next whole frame; Error::fault says why (a frame fault or a socket fault).
  Result<Frame> read_frame(Deadline deadline, uint16_t* peer_version = nullptr);

  /// The bytes read past the last whole frame, handed over with the reading: a caller
  /// that reads the descriptor itself from now on goes on from them.
  FrameBuffer take_buffered() { return std::exchange(rx_, FrameBuffer{}); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();

 private:
  int fd_ = -1;
  FrameBuffer rx_;
};

}  // namespace rankcheck
