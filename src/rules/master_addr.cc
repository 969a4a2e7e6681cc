// Rules over MASTER_ADDR: what it resolves to on the master and on each member.
// Each takes the decision's context (or a member's own record) and appends
// findings; none prints or exits. What the master saw of its connections is in
// master_connections.cc.

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/text.h"
#include "rules/context.h"

namespace rankcheck {

void check_master_addr_loopback(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (v.master_resolved.empty()) return;
  for (const auto& a : v.master_resolved) {
    if (!is_loopback_address(a)) return;
  }
  // Members that came in over loopback share the master's machine: for them a
  // loopback master works. It fails a member that arrived from elsewhere (the
  // master then listens on every interface), and ranks a multi-host layout expects.
  bool remote_member = false;  // arrived from another machine
  bool local_other = false;    // another host name, but over loopback: one machine
  long ranks = 0;
  for (const Member& m : v.members) {
    ranks += m.record.nranks;
    if (m.peer.find(':') == std::string::npos) continue;  // the master's own
    bool loop = is_loopback_address(peer_host(m.peer));
    remote_member = remote_member || !loop;
    local_other = local_other || (loop && m.record.host != v.master_host);
  }
  bool missing = ranks < v.world_size;
  if (!remote_member && !(missing && !local_other && ctx.multi_host)) return;
  Records master;
  for (const Member& m : v.members) {
    if (m.record.rank == 0) master.push_back(&m.record);
  }
  std::string wildcard;  // what the master listened on instead, if all interfaces
  for (const std::string& a : v.master_bound) {
    if (a == "0.0.0.0" || a == "::") wildcard = a;
  }
  Finding f = make(
      FindingId::kMasterAddrLoopback,
      fmt::format(
          "MASTER_ADDR {} resolves to {} (loopback) on the master's host {}, but the job "
          "spans more than one host: ranks on other hosts cannot reach a master there{}",
          printable(v.master_addr), format_list(v.master_resolved), printable(v.master_host),
          wildcard.empty() ? std::string()
                           : fmt::format(" (rankcheck's master listened on all interfaces, {}, so "
                                         "that this report hears from them; the training job's "
                                         "would not, and whoever reaches {} reached this one)",
                                         wildcard, printable(v.master_host))),
      fmt::format("set MASTER_ADDR to an address of {} that the other hosts reach (its cluster "
                  "network IP), or fix /etc/hosts on {}, which maps the name to loopback",
                  printable(v.master_host), printable(v.master_host)),
      master);
  if (f.hosts.empty()) f.hosts.push_back(v.master_host);
  out.push_back(std::move(f));
}

void check_master_addr_mismatch(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (v.members.empty()) return;
  const Record& first = v.members.front().record;
  bool same = true;
  for (const Member& m : v.members) {
    same = same && m.record.master_addr == first.master_addr &&
           m.record.master_port == first.master_port &&
           m.record.master_resolved == first.master_resolved;
  }
  if (same) return;
  std::map<std::string, Records> by_addr;
  for (const Member& m : v.members) {
    by_addr[fmt::format("{}:{}", m.record.master_addr, m.record.master_port)].push_back(&m.record);
  }
  if (by_addr.size() > 1) {
    std::string parts;
    Records all;
    for (const auto& [addr, rs] : by_addr) {
      if (!parts.empty()) parts += "; ";
      parts += fmt::format("{} for {}", printable(addr), where(rs));
      all.insert(all.end(), rs.begin(), rs.end());
    }
    out.push_back(make(FindingId::kMasterAddrMismatch,
                       fmt::format("members were given different master addresses: {}. All "
                                   "reached this master, but the training job may not",
                                   parts),
                       "give every process the same MASTER_ADDR and MASTER_PORT", all));
  }
  // The same name resolving differently on different hosts (loopback is its own rule).
  for (const auto& [addr, rs] : by_addr) {
    std::map<std::vector<std::string>, Records> by_result;
    for (const Record* r : rs) {
      std::vector<std::string> res;
      for (const auto& a : r->master_resolved) {
        if (!is_loopback_address(a)) res.push_back(a);
      }
      std::sort(res.begin(), res.end());
      if (!res.empty()) by_result[res].push_back(r);
    }
    if (by_result.size() < 2) continue;
    std::string parts;
    Records all;
    for (const auto& [res, group] : by_result) {
      if (!parts.empty()) parts += " but to ";
      parts += fmt::format("{} for {}", format_list(res, 4), where(group));
      all.insert(all.end(), group.begin(), group.end());
    }
    out.push_back(make(
        FindingId::kMasterAddrMismatch,
        fmt::format("MASTER_ADDR {} resolves to {}", printable(rs.front()->master_addr), parts),
        "make the name resolve the same everywhere (DNS, /etc/hosts), or use the "
        "master's IP address",
        all));
  }
}

// A member away from the master's node that resolves MASTER_ADDR to loopback
// would knock on its own door.
void check_self_master_loopback(const Record& self, std::vector<Finding>& out) {
  bool away =
      self.node_rank > 0 || (self.local_world_size >= 1 && self.rank >= self.local_world_size);
  bool all_loopback = !self.master_resolved.empty();
  for (const auto& a : self.master_resolved)
    all_loopback = all_loopback && is_loopback_address(a);
  if (self.rank == 0 || !away || !all_loopback) return;
  // A warning: it is fatal unless rank 0 runs on this very machine after all.
  out.push_back(
      make(FindingId::kMasterAddrLoopback,
           fmt::format("MASTER_ADDR {} resolves to {} (loopback) on {}, which is not the master's "
                       "node: unless rank 0 runs on this machine, this process cannot reach it",
                       printable(self.master_addr), format_list(self.master_resolved.get()),
                       printable(self.host)),
           "set MASTER_ADDR to the master's cluster network address, or fix the name's entry in "
           "/etc/hosts on this host",
           {&self}, Severity::kWarning));
}

}  // namespace rankcheck
