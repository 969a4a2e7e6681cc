#pragma once
// NCCL's one grammar for the lists its users give it (NCCL_SOCKET_IFNAME, NCCL_IB_HCA,
// the built-in interface orders), as src/misc/utils.cc parseStringList and matchIfList
// read them, with the '^' (exclude) and '=' (exact names) that their callers strip
// first. Everything that reads such a list goes through here.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "nccl/version.h"

namespace rankcheck::nccl {

/// One entry: a name (a prefix unless the list is exact) and an optional port.
struct ListItem {
  std::string prefix;  ///< at most 63 characters (NCCL's char prefix[64])
  int port = -1;       ///< -1: every port
};

struct List {
  bool exclude = false;  ///< a leading '^'
  bool exact = false;    ///< a '=' after it: whole names, not prefixes
  std::vector<ListItem> items;
};

/// NCCL_SOCKET_IFNAME and the built-in orders: MAX_IFS.
inline constexpr size_t kMaxIfs = 16;
/// NCCL_IB_HCA: MAX_IB_DEVS.
inline constexpr size_t kMaxHcas = 32;

/// `spec` as NCCL reads it at version `v`: entries end at ','; an entry's ':' starts
/// its port (atoi; an empty port is 0 before 2.30.7 and every port from then on);
/// an entry with an empty name is dropped; at most `max` entries are kept.
List parse_list(std::string_view spec, size_t max, Version v = 0);

/// matchIfList, then '^': an empty list matches every name (so "^" alone none); a
/// port of -1 on either side matches any port.
bool list_matches(const List& list, std::string_view name, int port = -1);

/// Whether the list selects any of `names` (ports not considered).
bool list_selects_any(const List& list, const std::vector<std::string>& names);

/// NCCL reads NCCL_SOCKET_IFNAME only when it is longer than one character
/// (ncclFindInterfaces: strlen(env) > 1); a shorter value leaves the choice to NCCL.
constexpr bool ifname_is_read(std::string_view value) {
  return value.size() > 1;
}

}  // namespace rankcheck::nccl
