#pragma once
// An immutable value that records can share: the members of one host carry the same
// facts of it (NCCL's interface and data network, /dev/shm), and the master keeps one
// copy per host, not one per member (100k of them). A handle is one pointer; a handle
// that holds nothing reads as a default T. Writing goes through edit(), which copies
// a value that other handles share first.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <unordered_set>
#include <utility>

namespace rankcheck {

template <class T>
class SharedValue {
 public:
  SharedValue() = default;
  SharedValue(T v) : p_(new Node{{1}, std::move(v)}) {}  // NOLINT: a value is a value
  SharedValue(const SharedValue& o) noexcept : p_(o.p_) { retain(); }
  SharedValue(SharedValue&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  SharedValue& operator=(SharedValue o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~SharedValue() { release(); }

  const T& get() const { return p_ != nullptr ? p_->value : empty_value(); }
  const T& operator*() const { return get(); }
  const T* operator->() const { return &get(); }
  operator const T&() const { return get(); }  // NOLINT: reads as the value

  /// The value, this handle's own: a shared one is copied first.
  T& edit() {
    if (p_ == nullptr) {
      p_ = new Node{{1}, T{}};
    } else if (p_->refs.load(std::memory_order_acquire) != 1) {
      Node* own = new Node{{1}, p_->value};
      release();
      p_ = own;
    }
    return p_->value;
  }

  friend bool operator==(const SharedValue& a, const SharedValue& b) {
    return a.p_ == b.p_ || a.get() == b.get();
  }

 private:
  template <class>
  friend class ValuePool;
  struct Node {
    std::atomic<uint32_t> refs;
    T value;
  };
  static const T& empty_value() {
    static const T kEmpty{};
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

/// Hands out one shared copy per distinct value, hashed by `Hash` (which must give
/// equal values equal hashes). Used on one thread (the master's). A value that only
/// the pool still holds is dropped at the next sweep, as StringPool's strings are.
template <class T>
class ValuePool {
 public:
  explicit ValuePool(std::function<size_t(const T&)> hash) : pool_(16, Hash{std::move(hash)}) {}
  void intern(SharedValue<T>& v) {
    if (v.p_ == nullptr) return;
    if (v.get() == SharedValue<T>::empty_value()) {
      v = SharedValue<T>();  // the default value: nothing to hold
      return;
    }
    auto [it, fresh] = pool_.insert(v);
    if (!fresh) {
      v = *it;
      return;
    }
    if (pool_.size() > sweep_at_) sweep();
  }
  size_t size() const { return pool_.size(); }

 private:
  struct Hash {
    std::function<size_t(const T&)> of;
    size_t operator()(const SharedValue<T>& v) const { return of(v.get()); }
  };
  // Amortised: the pool is swept when it has doubled since the last sweep.
  void sweep() {
    std::erase_if(pool_, [](const SharedValue<T>& v) { return v.holders() == 1; });
    sweep_at_ = std::max<size_t>(kMinSweep, 2 * pool_.size());
  }
  static constexpr size_t kMinSweep = 64;
  std::unordered_set<SharedValue<T>, Hash> pool_;
  size_t sweep_at_ = kMinSweep;
};

}  // namespace rankcheck
