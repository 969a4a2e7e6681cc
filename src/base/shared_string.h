#pragma once
// An immutable string that records can share: a job's 16k members carry the same
// version, job id, node list and NCCL path, and the master keeps one copy of each.
// A handle is one pointer (a std::string is four); an empty string holds nothing.

#include <atomic>
#include <compare>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>

namespace rankcheck {

class SharedString {
 public:
  SharedString() = default;
  SharedString(std::string s)  // NOLINT(google-explicit-constructor): a string is a string
      : p_(s.empty() ? nullptr : new Node{{1}, std::move(s)}) {}
  SharedString(std::string_view s) : SharedString(std::string(s)) {}  // NOLINT
  SharedString(const char* s) : SharedString(std::string(s)) {}       // NOLINT
  SharedString(const SharedString& o) noexcept : p_(o.p_) { retain(); }
  SharedString(SharedString&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  SharedString& operator=(SharedString o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~SharedString() { release(); }

  const std::string& str() const { return p_ != nullptr ? p_->s : empty_string(); }
  operator const std::string&() const { return str(); }  // NOLINT
  operator std::string_view() const { return str(); }    // NOLINT
  bool empty() const { return p_ == nullptr; }
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
  void clear() { release(); }

  friend bool operator==(const SharedString& a, const SharedString& b) {
    return a.p_ == b.p_ || a.str() == b.str();
  }
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
  struct Node {
    std::atomic<uint32_t> refs;
    std::string s;
  };
  static const std::string& empty_string() {
    static const std::string kEmpty;
    return kEmpty;
  }
  void retain() const {
    if (p_ != nullptr) p_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  void release() {
    if (p_ != nullptr && p_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p_;
    p_ = nullptr;
  }
  uint32_t holders() const { return p_ != nullptr ? p_->refs.load(std::memory_order_acquire) : 0; }

  Node* p_ = nullptr;
};

/// Hands out one shared copy per distinct string. Used on one thread (the
/// master's). A string that only the pool still holds is dropped at the next
/// sweep, so that members who join and leave in a loop leave nothing behind.
class StringPool {
 public:
  void intern(SharedString& s) {
    if (s.empty()) return;
    auto [it, fresh] = pool_.insert(s);
    if (!fresh) {
      s = *it;
      return;
    }
    if (pool_.size() > sweep_at_) sweep();
  }
  size_t size() const { return pool_.size(); }

 private:
  struct Hash {
    size_t operator()(const SharedString& s) const { return std::hash<std::string>{}(s.str()); }
  };
  // Amortised: the pool is swept when it has doubled since the last sweep.
  void sweep() {
    std::erase_if(pool_, [](const SharedString& s) { return s.holders() == 1; });
    sweep_at_ = std::max<size_t>(kMinSweep, 2 * pool_.size());
  }
  static constexpr size_t kMinSweep = 64;
  std::unordered_set<SharedString, Hash> pool_;
  size_t sweep_at_ = kMinSweep;
};

}  // namespace rankcheck

template <>
struct fmt::formatter<rankcheck::SharedString> : fmt::formatter<std::string_view> {
  auto format(const rankcheck::SharedString& s, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(s.str()), ctx);
  }
};
