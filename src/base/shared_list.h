#pragma once
// An immutable list that records holding the same one can share: 16k members
// with one interface list and one NCCL environment keep one copy at the master.

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <unordered_map>
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

/// The hash of a list item, found by argument-dependent lookup for other types
/// (see EnvVar in record.h).
inline size_t hash_item(const std::string& s) {
  return std::hash<std::string>{}(s);
}

/// Hands out one shared copy per distinct list. It holds no list itself, only
/// each list's hash and a weak pointer to the copy records share: a list that no
/// record holds any more is forgotten, so that members who join and leave in a
/// loop leave nothing behind, and 16k distinct environments cost the master
/// their records' copies and no second one.
template <class T>
class ListPool {
 public:
  void intern(SharedList<T>& list) {
    if (list.empty()) return;
    std::vector<std::weak_ptr<const std::vector<T>>>& bucket = pool_[hash_of(list.get())];
    std::weak_ptr<const std::vector<T>>* free_slot = nullptr;
    for (auto& slot : bucket) {
      auto held = slot.lock();
      if (!held) {
        free_slot = &slot;
      } else if (*held == list.get()) {
        list.p_ = std::move(held);
        return;
      }
    }
    if (free_slot != nullptr) {
      *free_slot = list.p_;  // a copy whose last holder is gone: this one takes its place
      return;
    }
    bucket.push_back(list.p_);
    if (++entries_ > prune_at_) prune();
  }
  /// Distinct lists remembered, some perhaps no longer held.
  size_t size() const { return entries_; }

 private:
  static size_t hash_of(const std::vector<T>& v) {
    size_t h = v.size();
    for (const T& item : v)
      h ^= hash_item(item) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
  }
  // Amortised: the pool is swept when it has doubled since the last sweep.
  void prune() {
    entries_ = 0;
    for (auto it = pool_.begin(); it != pool_.end();) {
      std::erase_if(it->second, [](const auto& slot) { return slot.expired(); });
      entries_ += it->second.size();
      it = it->second.empty() ? pool_.erase(it) : std::next(it);
    }
    prune_at_ = std::max<size_t>(kMinPrune, 2 * entries_);
  }
  static constexpr size_t kMinPrune = 64;
  std::unordered_map<size_t, std::vector<std::weak_ptr<const std::vector<T>>>> pool_;
  size_t entries_ = 0;
  size_t prune_at_ = kMinPrune;
};

}  // namespace rankcheck
