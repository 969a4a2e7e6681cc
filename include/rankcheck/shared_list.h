#pragma once
// An immutable list that records holding the same one can share: 16k members
// with one interface list and one NCCL environment keep one copy at the master.

#include <algorithm>
#include <initializer_list>
#include <map>
#include <memory>
#include <vector>

namespace rankcheck {

template <class T>
class SharedList {
 public:
  SharedList() = default;
  SharedList(std::vector<T> v)  // NOLINT(google-explicit-constructor): a list is a list
      : p_(v.empty() ? nullptr : std::make_shared<const std::vector<T>>(std::move(v))) {}
  SharedList(std::initializer_list<T> v) : SharedList(std::vector<T>(v)) {}

  const std::vector<T>& get() const {
    static const std::vector<T> kEmpty;
    return p_ ? *p_ : kEmpty;
  }
  auto begin() const { return get().begin(); }
  auto end() const { return get().end(); }
  size_t size() const { return get().size(); }
  bool empty() const { return get().empty(); }
  const T& front() const { return get().front(); }
  const T& operator[](size_t i) const { return get()[i]; }
  bool operator==(const SharedList& o) const { return p_ == o.p_ || get() == o.get(); }

 private:
  template <class>
  friend class ListPool;
  std::shared_ptr<const std::vector<T>> p_;
};

/// Hands out one shared copy per distinct list. It holds no list itself: a list
/// that no record holds any more is forgotten, so that members who join and leave
/// in a loop leave nothing behind.
template <class T>
class ListPool {
 public:
  void intern(SharedList<T>& list) {
    if (list.empty()) return;
    auto [it, fresh] = pool_.try_emplace(list.get(), list.p_);
    if (!fresh) {
      if (auto held = it->second.lock()) {
        list.p_ = std::move(held);
        return;
      }
      it->second = list.p_;  // its last holder is gone: this copy takes its place
    }
    if (pool_.size() > prune_at_) prune();
  }
  /// Distinct lists remembered, some perhaps no longer held.
  size_t size() const { return pool_.size(); }

 private:
  // Amortised: the pool is swept when it has doubled since the last sweep.
  void prune() {
    std::erase_if(pool_, [](const auto& entry) { return entry.second.expired(); });
    prune_at_ = std::max<size_t>(kMinPrune, 2 * pool_.size());
  }
  static constexpr size_t kMinPrune = 64;
  std::map<std::vector<T>, std::weak_ptr<const std::vector<T>>> pool_;
  size_t prune_at_ = kMinPrune;
};

}  // namespace rankcheck
