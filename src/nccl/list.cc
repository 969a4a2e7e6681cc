// NCCL's list grammar (see list.h), read in NVIDIA/nccl src/misc/utils.cc at
// v2.18.6-1, v2.28.9-1 (one loop over characters) and v2.30.7-1 (strtok_r, with
// rail and plane fields after the port, which no rankcheck rule reads).

#include "nccl/list.h"

#include <cstdlib>

namespace rankcheck::nccl {

List parse_list(std::string_view spec, size_t max, Version v) {
  List list;
  if (spec.starts_with('^')) {
    list.exclude = true;
    spec.remove_prefix(1);
  }
  if (spec.starts_with('=')) {
    list.exact = true;
    spec.remove_prefix(1);
  }
  while (!spec.empty() && list.items.size() < max) {
    size_t comma = spec.find(',');
    std::string_view entry = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    size_t colon = entry.find(':');
    std::string_view name = entry.substr(0, colon);
    if (name.empty()) continue;
    ListItem item;
    // NCCL before 2.30.7 copies the name without a bound (past 63 characters it
    // overruns its buffer); 2.30.7 cuts it at 63. Both are read as the cut.
    item.prefix = std::string(name.substr(0, 63));
    if (colon != std::string_view::npos) {
      std::string_view port = entry.substr(colon + 1);
      port = port.substr(0, port.find(':'));  // 2.30.7: the rail and plane follow
      bool every = port.empty() && rules_since(v, kEmptyPortIsEvery);
      item.port = every ? -1 : std::atoi(std::string(port).c_str());
    }
    list.items.push_back(std::move(item));
  }
  return list;
}

bool list_matches(const List& list, std::string_view name, int port) {
  bool listed = list.items.empty();
  for (const ListItem& item : list.items) {
    bool named = list.exact ? name == item.prefix : name.starts_with(item.prefix);
    listed = listed || (named && (port == -1 || item.port == -1 || port == item.port));
  }
  return listed != list.exclude;
}

bool list_selects_any(const List& list, const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    if (list_matches(list, n)) return true;
  }
  return false;
}

}  // namespace rankcheck::nccl
