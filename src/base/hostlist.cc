#include "base/hostlist.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include <fmt/format.h>

#include "base/text.h"

namespace rankcheck {
namespace {

bool parse_uint(std::string_view s, unsigned long& out) {
  if (s.empty() || s.size() > 9) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// Splits at top-level commas (not inside brackets).
Result<std::vector<std::string_view>> split_top(std::string_view list) {
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    char c = list[i];
    if (c == '[') {
      if (++depth > 1) return Error{fmt::format("nested '[' at offset {}", i)};
    } else if (c == ']') {
      if (--depth < 0) return Error{fmt::format("unbalanced ']' at offset {}", i)};
    } else if (c == ',' && depth == 0) {
      parts.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return Error{"unclosed '['"};
  parts.push_back(list.substr(start));
  return parts;
}

// Expands the values of one bracket group, "01-04,07", keeping zero padding.
Result<std::vector<std::string>> expand_ranges(std::string_view body) {
  std::vector<std::string> out;
  while (true) {
    auto comma = body.find(',');
    std::string_view item = body.substr(0, comma);
    auto dash = item.find('-');
    std::string_view lo_s = item.substr(0, dash);
    std::string_view hi_s = dash == std::string_view::npos ? lo_s : item.substr(dash + 1);
    unsigned long lo = 0;
    unsigned long hi = 0;
    if (!parse_uint(lo_s, lo) || !parse_uint(hi_s, hi) || hi < lo) {
      return Error{fmt::format("bad range '{}'", item)};
    }
    if (hi - lo >= kMaxHosts || out.size() + (hi - lo) >= kMaxHosts) {
      return Error{fmt::format("range '{}' has more than {} hosts", item, kMaxHosts)};
    }
    for (unsigned long v = lo; v <= hi; ++v) {
      out.push_back(fmt::format("{:0{}}", v, lo_s.size()));
    }
    if (comma == std::string_view::npos) break;
    body = body.substr(comma + 1);
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> expand_hostlist(std::string_view list) {
  std::vector<std::string> hosts;
  size_t hosts_bytes = 0;
  auto too_long = [&] {
    return Error{fmt::format("host list '{}' expands to more than {} bytes of names",
                             list.substr(0, 64), kMaxHostListBytes)};
  };
  auto parts = split_top(list);
  if (!parts) return Error{fmt::format("host list '{}': {}", list, parts.error().message)};
  for (std::string_view part : *parts) {
    if (part.empty()) continue;
    // Cartesian product over the bracket groups of this name. Sizes are checked
    // before anything is built: a list is a peer's, and a 4 KiB prefix times
    // [0-65535] would otherwise take 256 MiB.
    std::vector<std::string> names{""};
    size_t names_bytes = 0;
    std::string_view rest = part;
    while (!rest.empty()) {
      auto open = rest.find('[');
      std::string_view lit = rest.substr(0, open);
      names_bytes += names.size() * lit.size();
      if (hosts_bytes + names_bytes > kMaxHostListBytes) return too_long();
      for (auto& n : names)
        n.append(lit);
      if (open == std::string_view::npos) break;
      auto close = rest.find(']', open);
      auto values = expand_ranges(rest.substr(open + 1, close - open - 1));
      if (!values) return Error{fmt::format("host list '{}': {}", list, values.error().message)};
      if (names.size() * values->size() + hosts.size() > kMaxHosts) {
        return Error{fmt::format("host list '{}' has more than {} hosts", list, kMaxHosts)};
      }
      size_t values_bytes = 0;
      for (const auto& v : *values)
        values_bytes += v.size();
      names_bytes = names_bytes * values->size() + names.size() * values_bytes;
      if (hosts_bytes + names_bytes > kMaxHostListBytes) return too_long();
      std::vector<std::string> next;
      next.reserve(names.size() * values->size());
      for (const auto& n : names) {
        for (const auto& v : *values)
          next.push_back(n + v);
      }
      names = std::move(next);
      rest = rest.substr(close + 1);
    }
    hosts_bytes += names_bytes;
    for (auto& n : names)
      hosts.push_back(std::move(n));
  }
  if (hosts.empty()) return Error{fmt::format("host list '{}' names no host", list)};
  return hosts;
}

std::string compress_hostlist(const std::vector<std::string>& hosts) {
  auto usable = [](const std::string& h) {
    return !h.empty() && h.size() <= 255 && std::all_of(h.begin(), h.end(), [](char c) {
      return is_alnum(c) || c == '.' || c == '-' || c == '_';
    });
  };
  // prefix -> its names' trailing numbers (value, digits as written), sorted and
  // unique; names without trailing digits stand alone.
  std::map<std::string, std::set<std::pair<unsigned long, std::string>>> numbered;
  std::set<std::string> plain;
  for (const std::string& h : hosts) {
    if (!usable(h)) continue;
    size_t d = h.size();
    while (d > 0 && h[d - 1] >= '0' && h[d - 1] <= '9')
      --d;
    unsigned long value = 0;
    // Nine digits at most: what expand_hostlist reads back.
    if (d == h.size() || h.size() - d > 9 || !parse_uint(std::string_view(h).substr(d), value)) {
      plain.insert(h);
      continue;
    }
    numbered[h.substr(0, d)].emplace(value, h.substr(d));
  }
  // Every entry, sorted by name: a prefix's group sits where its first name would.
  std::map<std::string, std::string> parts;
  for (const std::string& h : plain)
    parts.emplace(h, h);
  for (const auto& [prefix, numbers] : numbered) {
    if (numbers.size() == 1) {
      const std::string name = prefix + numbers.begin()->second;
      parts.emplace(name, name);
      continue;
    }
    // A run lo-hi reads back with lo's width for every value: it holds each next
    // name only when that name is the next value written at that width.
    std::string body;
    for (auto it = numbers.begin(); it != numbers.end();) {
      const std::string& lo_s = it->second;
      auto last = it;
      for (auto next = std::next(it); next != numbers.end(); ++next) {
        if (next->first != last->first + 1 ||
            next->second != fmt::format("{:0{}}", next->first, lo_s.size())) {
          break;
        }
        last = next;
      }
      if (!body.empty()) body += ',';
      body += last == it ? lo_s : lo_s + "-" + last->second;
      it = std::next(last);
    }
    parts.emplace(prefix + numbers.begin()->second, prefix + "[" + body + "]");
  }
  std::string out;
  for (const auto& [name, part] : parts) {
    if (!out.empty()) out += ',';
    out += part;
  }
  return out;
}

Result<std::vector<int>> expand_tasks_per_node(std::string_view spec) {
  std::vector<int> tasks;
  unsigned long total = 0;
  std::string_view rest = spec;
  while (!rest.empty()) {
    auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    unsigned long count = 0;
    unsigned long repeat = 1;
    auto paren = item.find('(');
    if (paren != std::string_view::npos) {
      if (item.size() < paren + 4 || item.substr(paren, 2) != "(x" || item.back() != ')' ||
          !parse_uint(item.substr(paren + 2, item.size() - paren - 3), repeat)) {
        return Error{fmt::format("tasks per node '{}': bad item '{}'", spec, item)};
      }
      item = item.substr(0, paren);
    }
    if (!parse_uint(item, count) || count == 0 || count > 1u << 20) {
      return Error{fmt::format("tasks per node '{}': bad count '{}'", spec, item)};
    }
    if (repeat == 0 || tasks.size() + repeat > kMaxHosts) {
      return Error{fmt::format("tasks per node '{}': bad repeat count", spec)};
    }
    // A job's tasks are its ranks: more than any world size is not a job (and would
    // have the master lay out billions of ranks for a peer's dozen bytes).
    total += count * repeat;
    if (total > kMaxTasks) {
      return Error{fmt::format("tasks per node '{}': more than {} tasks", spec, kMaxTasks)};
    }
    tasks.insert(tasks.end(), repeat, static_cast<int>(count));
  }
  if (tasks.empty()) return Error{fmt::format("tasks per node '{}' is empty", spec)};
  return tasks;
}

std::vector<int> node_of_each_rank(const std::vector<int>& tasks, Distribution dist) {
  std::vector<int> node_of;
  if (dist == Distribution::kUnknown) return node_of;
  if (dist == Distribution::kBlock) {
    for (size_t n = 0; n < tasks.size(); ++n) {
      node_of.insert(node_of.end(), static_cast<size_t>(std::max(tasks[n], 0)),
                     static_cast<int>(n));
    }
    return node_of;
  }
  // Cyclic: one rank to each node with room, round after round. A full node leaves
  // the round, so each pass places one rank per node still in it: the work is the
  // number of ranks, not nodes times the largest count.
  std::vector<int> left = tasks;
  std::vector<int> open;
  for (size_t n = 0; n < left.size(); ++n) {
    if (left[n] > 0) open.push_back(static_cast<int>(n));
  }
  while (!open.empty()) {
    size_t kept = 0;
    for (int n : open) {
      node_of.push_back(n);
      if (--left[size_t(n)] > 0) open[kept++] = n;
    }
    open.resize(kept);
  }
  return node_of;
}

}  // namespace rankcheck
