#pragma once
// An immutable list that records holding the same one can share: 16k members
// with one interface list and one NCCL environment keep one copy at the master.

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "base/shared_value.h"

namespace rankcheck {

template <class T>
class SharedList {
 public:
  SharedList() = default;
  SharedList(std::vector<T> v) {  // NOLINT(google-explicit-constructor): a list is a list
    if (!v.empty()) v_ = SharedValue<std::vector<T>>(std::move(v));
  }
  SharedList(std::initializer_list<T> v) : SharedList(std::vector<T>(v)) {}

  const std::vector<T>& get() const { return v_.get(); }
  auto begin() const { return get().begin(); }
  auto end() const { return get().end(); }
  size_t size() const { return get().size(); }
  bool empty() const { return get().empty(); }
  const T& front() const { return get().front(); }
  const T& operator[](size_t i) const { return get()[i]; }
  bool operator==(const SharedList& o) const { return v_ == o.v_; }

 private:
  template <class>
  friend class ListPool;
  SharedValue<std::vector<T>> v_;  // one pointer; none for an empty list
};

/// The hash of a list item, found by argument-dependent lookup for other types
/// (see EnvVar in record.h).
inline size_t hash_item(const std::string& s) {
  return std::hash<std::string>{}(s);
}

/// Hands out one shared copy per distinct list (a ValuePool of lists): a list
/// that no record holds any more is dropped at the pool's next sweep, so that
/// members who join and leave in a loop leave nothing behind, and 16k distinct
/// environments cost the master their records' copies and no second one.
template <class T>
class ListPool {
 public:
  void intern(SharedList<T>& list) { pool_.intern(list.v_); }
  /// Distinct lists remembered, some perhaps no longer held.
  size_t size() const { return pool_.size(); }

 private:
  static size_t hash_of(const std::vector<T>& v) {
    size_t h = v.size();
    for (const T& item : v)
      h ^= hash_item(item) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
  }
  ValuePool<std::vector<T>> pool_{hash_of};
};

}  // namespace rankcheck
