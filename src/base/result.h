#pragma once
// Failures of the environment (a socket, a parse, dlopen) travel as values.

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace rankcheck {

/// What kind of failure an Error is, for the callers that act on the kind (most
/// only print the message). One typed list, so no caller compares numbers; it names
/// the upper layers' kinds (a frame, a listen) because Result, below them all, carries
/// every one of them, and a list per layer would need a conversion at each crossing.
enum class Fault {
  kNone,  ///< nothing a caller acts on: the message says it all
  // A frame (wire.h): not a rankcheck frame, or not one this build reads.
  kBadMagic,      ///< not a rankcheck peer
  kOtherVersion,  ///< another protocol version
  kUnknownType,   ///< a message type this build does not know
  kTooLarge,      ///< longer than the type's cap
  // A socket call (rendezvous/socket.h, host/resolve.h).
  kClosed,       ///< the peer closed the connection
  kTimeout,      ///< the deadline passed
  kInterrupted,  ///< a signal asked the run to stop
  kSystem,       ///< the OS refused; the message carries strerror
  // Listening (server.h).
  kInUse,     ///< EADDRINUSE: another process holds the port
  kNotLocal,  ///< EADDRNOTAVAIL: not an address of this host
  kDenied,    ///< EACCES, EPERM: a port below 1024 without the privilege, or a policy
  kListen,    ///< anything else; the message carries the OS error
  // Authentication (member.h).
  kAuthFailed,  ///< a verdict that the job token does not vouch for
};

/// A failure with its context already in the message ("connect 10.0.0.1:29500: ...").
struct Error {
  std::string message;
  Fault fault = Fault::kNone;
};

/// A value or an Error; the small subset of std::expected this project needs.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const {
    assert(!ok());
    return std::get<1>(v_);
  }

 private:
  std::variant<T, Error> v_;
};

/// Result of an operation that yields nothing but can fail.
struct Ok {};
using Status = Result<Ok>;

inline Status ok_status() {
  return Ok{};
}

}  // namespace rankcheck
