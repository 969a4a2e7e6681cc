#pragma once
// An immutable string that records can share: a job's 16k members carry the same
// version, job id, node list and NCCL path, and the master keeps one copy of each.
// A handle is one pointer (a std::string is four); an empty string holds nothing.

#include <compare>
#include <functional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "base/shared_value.h"

namespace rankcheck {

class SharedString {
 public:
  SharedString() = default;
  SharedString(std::string s) {  // NOLINT(google-explicit-constructor): a string is a string
    if (!s.empty()) v_ = SharedValue<std::string>(std::move(s));
  }
  SharedString(std::string_view s) : SharedString(std::string(s)) {}  // NOLINT
  SharedString(const char* s) : SharedString(std::string(s)) {}       // NOLINT

  const std::string& str() const { return v_.get(); }
  operator const std::string&() const { return str(); }  // NOLINT
  operator std::string_view() const { return str(); }    // NOLINT
  bool empty() const { return str().empty(); }
  size_t size() const { return str().size(); }
  auto begin() const { return str().begin(); }
  auto end() const { return str().end(); }
  size_t find(char c, size_t pos = 0) const { return str().find(c, pos); }
  size_t find_first_of(std::string_view s, size_t pos = 0) const {
    return str().find_first_of(s, pos);
  }
  std::string substr(size_t pos, size_t n = std::string::npos) const {
    return str().substr(pos, n);
  }
  void clear() { v_ = SharedValue<std::string>(); }

  friend bool operator==(const SharedString& a, const SharedString& b) { return a.v_ == b.v_; }
  friend bool operator==(const SharedString& a, std::string_view b) { return a.str() == b; }
  friend bool operator==(const SharedString& a, const std::string& b) { return a.str() == b; }
  friend bool operator==(const SharedString& a, const char* b) { return a.str() == b; }
  friend std::strong_ordering operator<=>(const SharedString& a, const SharedString& b) {
    return a.str() <=> b.str();
  }
  friend std::strong_ordering operator<=>(const SharedString& a, std::string_view b) {
    return std::string_view(a.str()) <=> b;
  }
  friend std::strong_ordering operator<=>(const SharedString& a, const std::string& b) {
    return a.str() <=> b;
  }
  friend std::string operator+(const SharedString& a, std::string_view b) {
    return a.str() + std::string(b);
  }
  friend std::string operator+(const SharedString& a, char b) { return a.str() + b; }

 private:
  friend class StringPool;
  SharedValue<std::string> v_;  // one pointer; none for ""
};

/// Hands out one shared copy per distinct string (a ValuePool of strings). Used on
/// one thread (the master's). A string that only the pool still holds is dropped at
/// the next sweep, so that members who join and leave in a loop leave nothing behind.
class StringPool {
 public:
  void intern(SharedString& s) { pool_.intern(s.v_); }
  size_t size() const { return pool_.size(); }

 private:
  ValuePool<std::string> pool_{[](const std::string& s) { return std::hash<std::string>{}(s); }};
};

}  // namespace rankcheck

template <>
struct fmt::formatter<rankcheck::SharedString> : fmt::formatter<std::string_view> {
  auto format(const rankcheck::SharedString& s, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(s.str()), ctx);
  }
};
