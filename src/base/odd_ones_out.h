#pragma once
// Who disagrees with whom: items grouped by what each says of one fact, the most
// common saying first; the groups after it are the odd ones out. Every "the hosts
// (or ranks) must agree on X" rule of `run` and of `diagnose` groups through here.

#include <algorithm>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace rankcheck {

/// One saying of a fact, and the items that say it.
template <class Key, class Item>
struct Saying {
  Key key;
  std::vector<Item> items;
};

/// The groups of `items` by `key(item)` (a std::optional: nullopt leaves the item
/// out), the biggest first; between groups as big, the one `before(a, b)` puts first;
/// groups it does not order stay in key order. Pass no_order for key order alone.
template <class Key, class Item, class KeyFn, class Before>
std::vector<Saying<Key, Item>> odd_ones_out(const std::vector<Item>& items, KeyFn key,
                                            Before before) {
  std::map<Key, std::vector<Item>> by;
  for (const Item& item : items) {
    if (std::optional<Key> k = key(item)) by[*k].push_back(item);
  }
  std::vector<Saying<Key, Item>> out;
  out.reserve(by.size());
  for (auto& [k, v] : by)
    out.push_back({k, std::move(v)});
  std::stable_sort(out.begin(), out.end(), [&before](const auto& a, const auto& b) {
    if (a.items.size() != b.items.size()) return a.items.size() > b.items.size();
    return before(a, b);
  });
  return out;
}

/// For odd_ones_out: between groups as big, key order.
inline constexpr auto no_order = [](const auto&, const auto&) { return false; };

/// The items of every group after the first: the odd ones out.
template <class Key, class Item>
std::vector<Item> odd_items(const std::vector<Saying<Key, Item>>& groups) {
  std::vector<Item> out;
  for (size_t i = 1; i < groups.size(); ++i)
    out.insert(out.end(), groups[i].items.begin(), groups[i].items.end());
  return out;
}

}  // namespace rankcheck
