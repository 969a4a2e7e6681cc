// What the rehearsal of NCCL's connections found, as findings: pure functions of the
// hosts and of what each connection found (rehearsal/ makes the plan and probes).

#include "rules/paths.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "base/text.h"

namespace rankcheck {
namespace {

bool failed(PathOutcome o) {
  return o != PathOutcome::kOk && o != PathOutcome::kNotRun;
}

// The most common failure among `rs`, as words ("timed out", or "timed out, refused").
std::string classes(const std::vector<const PathResult*>& rs) {
  std::map<PathOutcome, size_t> n;
  for (const PathResult* r : rs)
    ++n[r->outcome];
  std::vector<std::pair<PathOutcome, size_t>> v(n.begin(), n.end());
  std::stable_sort(v.begin(), v.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> words;
  for (const auto& [o, k] : v)
    words.emplace_back(outcome_text(o));
  return format_list(words, 3);
}

std::string names(const std::vector<PathHost>& hosts, const std::set<uint32_t>& ids) {
  std::vector<std::string> v;
  for (uint32_t i : ids)
    v.push_back(printable(hosts[i].name, 40));
  return format_list(v, 6);
}

std::string range(const PathHost& h) {
  if (h.port_lo == 0 && h.port_hi == 0) return "its ephemeral ports";
  return fmt::format("ephemeral ports {}-{}", h.port_lo, h.port_hi);
}

std::string over(const PathHost& h) {
  return fmt::format("{} ({})", printable(h.ifname, 20), printable(h.address, 48));
}

// A listener too busy with a flood to answer the probes from `from`.
Finding flooded_finding(const std::vector<PathHost>& hosts, uint32_t h,
                        const std::set<uint32_t>& from) {
  Finding f = make_finding(
      FindingId::kNcclPathFlooded,
      fmt::format("the rehearsal listener of {} on {} was flooded: connections from {} "
                  "reached it, but it was too busy with unproven connections to prove which "
                  "host it is",
                  printable(hosts[h].name, 40), over(hosts[h]), names(hosts, from)));
  f.hosts.push_back(hosts[h].name);
  return f;
}

// Not a pass on paths nobody proved: a report rewritten on the way, a plan the
// member refused, or a prober gone before its report.
Finding unproven_finding(std::vector<std::string> hosts) {
  Finding f = make_finding(
      FindingId::kNcclPathUnproven,
      fmt::format("{} sent no report of NCCL's connections that the master could take (its "
                  "report did not carry this job's token, or its prober refused the plan or "
                  "left): the paths from there are unproven",
                  format_list(hosts, 6)));
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  f.hosts = std::move(hosts);
  return f;
}

}  // namespace

std::vector<Finding> attribute_paths(const std::vector<PathHost>& hosts,
                                     const std::vector<PathResult>& results,
                                     std::vector<std::string> unproven) {
  const size_t n = hosts.size();
  std::vector<std::vector<const PathResult*>> in(n), out(n);
  // A listener too busy with a flood of unproven connections: the path was reached
  // but nothing proven. Said as a flood, per host, never as a blocked path.
  std::map<uint32_t, std::set<uint32_t>> flooded;  // listener's host -> probers
  for (const PathResult& r : results) {
    if (r.outcome == PathOutcome::kNotRun || r.edge.from >= n || r.edge.to >= n) continue;
    if (r.outcome == PathOutcome::kFlooded) {
      flooded[r.edge.to].insert(r.edge.from);
      continue;
    }
    out[r.edge.from].push_back(&r);
    in[r.edge.to].push_back(&r);
  }
  auto all_failed = [](const std::vector<const PathResult*>& rs) {
    return !rs.empty() && std::all_of(rs.begin(), rs.end(),
                                      [](const PathResult* r) { return failed(r->outcome); });
  };
  std::vector<Finding> findings;
  std::set<const PathResult*> explained;
  auto finding = [&](std::string message, std::string fix, std::set<uint32_t> about) {
    Finding f = make_finding(FindingId::kNcclPathBlocked, std::move(message), std::move(fix));
    for (uint32_t h : about)
      f.hosts.push_back(hosts[h].name);
    std::sort(f.hosts.begin(), f.hosts.end());
    f.hosts.erase(std::unique(f.hosts.begin(), f.hosts.end()), f.hosts.end());
    findings.push_back(std::move(f));
  };
  const std::string ifname_fix =
      "or set NCCL_SOCKET_IFNAME to the interface that routes between the hosts";
  // A host cut off both ways, then hosts nobody reaches, then hosts that reach nobody.
  for (size_t h = 0; h < n; ++h) {
    if (!all_failed(in[h]) || !all_failed(out[h])) continue;
    std::set<uint32_t> peers;
    for (const PathResult* r : in[h])
      peers.insert(r->edge.from), explained.insert(r);
    for (const PathResult* r : out[h])
      peers.insert(r->edge.to), explained.insert(r);
    std::vector<const PathResult*> all = in[h];
    all.insert(all.end(), out[h].begin(), out[h].end());
    finding(
        fmt::format("{} is cut off over {}: no host reaches it and it reaches no host ({}; "
                    "tried with {})",
                    printable(hosts[h].name, 40), over(hosts[h]), classes(all),
                    names(hosts, peers)),
        fmt::format("check {}'s link and firewall, {}", printable(hosts[h].name, 40), ifname_fix),
        {uint32_t(h)});
  }
  for (size_t h = 0; h < n; ++h) {
    if (!all_failed(in[h]) || all_failed(out[h])) continue;
    std::set<uint32_t> from;
    for (const PathResult* r : in[h])
      from.insert(r->edge.from), explained.insert(r);
    finding(fmt::format("inbound connections to {} on {} of {} are blocked: {} from {}",
                        printable(hosts[h].name, 40), range(hosts[h]), over(hosts[h]),
                        classes(in[h]), names(hosts, from)),
            fmt::format("open {}'s ephemeral port range ({}) to the other hosts, or narrow it "
                        "with net.ipv4.ip_local_port_range and open that; {}",
                        printable(hosts[h].name, 40),
                        hosts[h].port_lo == 0
                            ? std::string("net.ipv4.ip_local_port_range")
                            : fmt::format("{}-{}", hosts[h].port_lo, hosts[h].port_hi),
                        ifname_fix),
            {uint32_t(h)});
  }
  for (size_t h = 0; h < n; ++h) {
    if (!all_failed(out[h]) || all_failed(in[h])) continue;
    std::set<uint32_t> to;
    for (const PathResult* r : out[h])
      to.insert(r->edge.to), explained.insert(r);
    finding(fmt::format("outbound connections from {} over {} are blocked: {} to {}",
                        printable(hosts[h].name, 40), over(hosts[h]), classes(out[h]),
                        names(hosts, to)),
            fmt::format("let {} connect out to the other hosts' ephemeral ports (an outbound "
                        "firewall rule), {}",
                        printable(hosts[h].name, 40), ifname_fix),
            {uint32_t(h)});
  }
  for (const auto& [h, from] : flooded)
    findings.push_back(flooded_finding(hosts, h, from));
  // The rest: which groups cannot reach which, by the way they fail.
  std::map<PathOutcome, std::vector<const PathResult*>> rest;
  for (const PathResult& r : results) {
    if (failed(r.outcome) && r.outcome != PathOutcome::kFlooded && r.edge.from < n &&
        r.edge.to < n && !explained.count(&r)) {
      rest[r.outcome].push_back(&r);
    }
  }
  for (const auto& [outcome, rs] : rest) {
    std::set<uint32_t> from, to, all;
    for (const PathResult* r : rs) {
      from.insert(r->edge.from);
      to.insert(r->edge.to);
    }
    all.insert(from.begin(), from.end());
    all.insert(to.begin(), to.end());
    const PathHost& target = hosts[*to.begin()];
    std::string why(outcome_text(outcome));
    if (outcome == PathOutcome::kSelf) {
      why = "each reached itself: the address answers on every host";
    } else if (!rs.front()->detail.empty() && outcome != PathOutcome::kTimeout) {
      why += " (" + printable(rs.front()->detail, 80) + ")";
    }
    finding(fmt::format("{} cannot reach {} over {}: {} ({} of the connections tried)",
                        names(hosts, from), names(hosts, to), printable(target.ifname, 20), why,
                        rs.size()),
            fmt::format("route or open the path between these hosts on {}, {}",
                        printable(target.ifname, 20), ifname_fix),
            all);
  }
  if (!unproven.empty()) findings.push_back(unproven_finding(std::move(unproven)));
  return findings;
}

}  // namespace rankcheck
