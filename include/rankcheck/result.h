#pragma once
// Failures of the environment (a socket, a parse, dlopen) travel as values.

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace rankcheck {

/// A failure with its context already in the message ("connect 10.0.0.1:29500: ...").
struct Error {
  std::string message;
  int code = 0;  ///< optional machine-readable detail (errno, a reject code, ...)
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
