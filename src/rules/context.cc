// What the rules share: naming ranks and hosts, the per-decision context, and the
// small predicates the record rules and the join tracker both use.

#include "rules/context.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "base/text.h"
#include "nccl/list.h"

namespace rankcheck {
namespace {

// The world size missing ranks are counted against: the master's, unless the
// members disagree, in which case the one most ranks claim (ties: the master's).
long expected_world(const JobView& v) {
  bool agree = true;
  for (const Member& m : v.members)
    agree = agree && m.record.world_size == v.world_size;
  if (agree) return std::clamp(v.world_size, 1L, kMaxWorldSize);
  std::map<long, long> votes;
  for (const Member& m : v.members)
    votes[m.record.world_size] += m.record.nranks;
  long best = v.world_size;
  long best_votes = votes.count(best) ? votes[best] : 0;
  for (auto [w, n] : votes) {
    if (n > best_votes) best = w, best_votes = n;
  }
  return std::clamp(best, 1L, kMaxWorldSize);
}

}  // namespace

std::vector<long> ranks_of(const Records& rs) {
  std::vector<long> out;
  for (const Record* r : rs) {
    for (long k = r->rank; k <= r->last_rank(); ++k)
      out.push_back(k);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::string> hosts_of(const Records& rs) {
  std::set<std::string> hosts;
  for (const Record* r : rs)
    hosts.insert(r->host);
  return {hosts.begin(), hosts.end()};
}

std::string join(const std::vector<std::string>& parts, std::string_view sep, size_t max) {
  std::string out;
  for (size_t i = 0; i < parts.size() && i < max; ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  if (parts.size() > max) out += fmt::format("{}and {} more", sep, parts.size() - max);
  return out;
}

std::string ranks_word(const std::vector<long>& ranks) {
  return ranks_label(ranks);
}

Records by_rank(Records rs) {
  std::sort(rs.begin(), rs.end(),
            [](const Record* a, const Record* b) { return a->rank < b->rank; });
  return rs;
}

std::string where(const Records& rs) {
  auto hosts = hosts_of(rs);
  std::string on = hosts.size() <= 3 ? format_list(hosts) : plural(hosts.size(), "host", "hosts");
  return fmt::format("{} on {}", ranks_word(ranks_of(rs)), on);
}

Finding make(FindingId id, std::string message, std::string fix, const Records& about,
             std::optional<Severity> severity) {
  Finding f = make_finding(id, std::move(message), std::move(fix), severity);
  f.ranks = ranks_of(about);
  f.hosts = hosts_of(about);
  return f;
}

CheckContext::CheckContext(const JobView& v)
    : view(v), expected_world(rankcheck::expected_world(v)) {
  claims.assign(static_cast<size_t>(expected_world), 0);
  std::unordered_map<std::string_view, size_t> host_index;
  for (const Member& m : v.members) {
    const Record& r = m.record;
    for (long k = r.rank; k <= r.last_rank(); ++k) {
      if (k >= 0 && k < expected_world) {
        if (++claims[size_t(k)] > 1) duplicates = true;
      } else {
        outside.push_back(k);
      }
    }
    auto [it, fresh] = host_index.try_emplace(r.host, hosts.size());
    if (fresh) hosts.emplace_back(r.host, Records{});
    hosts[it->second].second.push_back(&r);
    multi_host = multi_host || spans_hosts(r);
  }
  std::sort(outside.begin(), outside.end());
  duplicates = duplicates || std::adjacent_find(outside.begin(), outside.end()) != outside.end();
  std::sort(hosts.begin(), hosts.end());
  multi_host = multi_host || hosts.size() > 1;
}

std::string_view peer_host(std::string_view peer) {
  if (!peer.empty() && peer.front() == '[') return peer.substr(1, peer.find(']') - 1);
  return peer.substr(0, peer.rfind(':'));
}

bool ifname_selects_nothing(const Record& r, const EnvVar& e) {
  return e.name == "NCCL_SOCKET_IFNAME" && nccl::ifname_is_read(e.value) &&
         !nccl::list_selects_any(nccl::parse_list(e.value, nccl::kMaxIfs), r.interfaces.get());
}

std::string member_label(const Record& r) {
  return fmt::format("{} ({}, pid {})", span_label(r.rank, r.nranks), printable(r.host, 64), r.pid);
}

bool spans_hosts(const Record& r) {
  // The launcher's node list says it outright; only without one is it inferred
  // from a world larger than this host's share (WORLD_SIZE=8 exported over 4
  // tasks on one node is not a job of two hosts).
  if (!r.node_list.empty()) return r.node_list.find_first_of(",[") != std::string::npos;
  return r.local_world_size >= 1 && r.local_world_size < r.world_size;
}

bool is_loopback_address(std::string_view a) {
  return a.rfind("127.", 0) == 0 || a == "::1" || a.rfind("::ffff:127.", 0) == 0;
}

}  // namespace rankcheck
