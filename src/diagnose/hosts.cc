// What the hosts say of themselves, compared across hosts: the NCCL version each
// loads, the network NCCL chose there, the NCCL_* values it read from the environment.

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "base/odd_ones_out.h"
#include "base/text.h"
#include "diagnose/builder.h"

namespace rankcheck::diagnose {
namespace {

// Hosts grouped by what they say of one fact: value -> hosts, the hosts that said
// nothing left out.
using ByValue = std::map<std::string, std::set<std::string>>;

// "2.21.5 on h3; 2.18.3 on h1 and h2": the rarest value first (the odd host).
std::string values_text(const ByValue& by) {
  std::vector<std::pair<size_t, std::string>> order;
  for (const auto& [value, hosts] : by)
    order.emplace_back(hosts.size(), value);
  std::sort(order.begin(), order.end());
  std::vector<std::string> parts;
  for (const auto& [n, value] : order) {
    const std::set<std::string>& hosts = by.at(value);
    parts.push_back(fmt::format("{} on {}", printable(value, 80),
                                format_list({hosts.begin(), hosts.end()}, 4)));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

// The hosts of the values fewer hosts share than the most common one's: the odd
// ones out (with two values on as many hosts each, all of them).
std::set<std::string> odd_hosts(const ByValue& by) {
  std::vector<std::pair<std::string, std::string>> said;  // host, value
  for (const auto& [value, hosts] : by) {
    for (const std::string& host : hosts)
      said.emplace_back(host, value);
  }
  auto groups = odd_ones_out<std::string>(
      said, [](const auto& s) { return std::optional(s.second); }, no_order);
  bool tie = groups.size() > 1 && groups[1].items.size() == groups[0].items.size();
  std::set<std::string> out;
  for (size_t i = tie ? 0 : 1; i < groups.size(); ++i) {
    for (const auto& s : groups[i].items)
      out.insert(s.first);
  }
  return out;
}

// NCCL's IB ports as "NET/IB : Using" lists them ("[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE",
// merged NICs as "[0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE}"): the link layers, the count.
std::pair<std::string, size_t> ib_summary(const std::string& ports) {
  size_t ib = 0, roce = 0;
  for (size_t at = ports.find('/'); at != std::string::npos; at = ports.find('/', at + 1)) {
    ib += ports.compare(at, 3, "/IB") == 0;
    roce += ports.compare(at, 5, "/RoCE") == 0;
  }
  return {ib && roce ? "IB+RoCE" : ib ? "IB" : roce ? "RoCE" : "", ib + roce};
}

// 1. What the hosts say of themselves, compared: an NCCL version or a network that
// one host has and the others do not is a cause of its own (a host on NET/Socket
// beside hosts on NET/IB hangs or crawls); NCCL_* values that differ, a warning.
}  // namespace

void add_host_differences(Builder& b, const Knowledge& k) {
  ByValue versions, networks, links, counts, plugins;
  std::map<std::string, ByValue> env;
  for (const auto& [host, h] : k.host_logs) {
    if (!h.nccl_version.empty()) versions[h.nccl_version].insert(host);
    if (!h.network.empty()) networks[h.network].insert(host);
    if (auto [link, n] = ib_summary(h.ib_ports); n > 0) {
      links[link].insert(host);
      counts[fmt::format("{} port{}", n, n == 1 ? "" : "s")].insert(host);
    }
    if (!h.plugin.empty()) plugins[h.plugin].insert(host);
    for (const auto& [name, value] : h.env)
      env[name][value].insert(host);
  }
  // The line shown: the first an odd host printed of the fact.
  auto first_of = [&k](const std::set<std::string>& hosts, std::optional<Note> HostLog::*which) {
    const Note* first = nullptr;
    for (const std::string& host : hosts) {
      const std::optional<Note>& n = k.host_logs.at(host).*which;
      if (n && (!first || earlier(*n, *first))) first = &*n;
    }
    return first;
  };
  if (versions.size() > 1) {
    std::set<std::string> odd = odd_hosts(versions);
    DiagFinding& f =
        b.add(FindingId::kNcclVersionMismatch,
              fmt::format("the hosts load different NCCL versions: {}", values_text(versions)),
              true, *first_of(odd, &HostLog::version_note));
    attach(f, {}, odd, {});
  }
  if (networks.size() > 1) {
    std::set<std::string> odd = odd_hosts(networks);
    DiagFinding& f =
        b.add(FindingId::kNcclNetMismatch,
              fmt::format("NCCL chose different networks on the hosts: {}; a host that falls "
                          "back to NET/Socket hangs or crawls against the others",
                          values_text(networks)),
              true, *first_of(odd, &HostLog::network_note),
              "give the odd host what the others have (the IB devices, /dev/infiniband in its "
              "container, the same network plugin), or set NCCL_NET alike everywhere");
    f.finding.severity = Severity::kError;
    attach(f, {}, odd, {});
  }
  // NCCL's data network in its own words: the same findings as rankcheck run's.
  struct Fact {
    const ByValue& by;
    FindingId id;
    const char* what;
    std::optional<Note> HostLog::*note;
  };
  for (const Fact& fact :
       {Fact{links, FindingId::kNcclIbLinkLayerMismatch,
             "NCCL's IB transport used different link layers", &HostLog::ib_note},
        Fact{links.size() > 1 ? ByValue{} : counts, FindingId::kNcclIbPortCountMismatch,
             "NCCL's IB transport opened different numbers of ports", &HostLog::ib_note},
        Fact{plugins, FindingId::kNcclNetPluginMismatch, "NCCL loaded different network plugins",
             &HostLog::plugin_note}}) {
    if (fact.by.size() < 2) continue;
    std::set<std::string> odd = odd_hosts(fact.by);
    DiagFinding& f = b.add(fact.id, fmt::format("{}: {}", fact.what, values_text(fact.by)), true,
                           *first_of(odd, fact.note));
    attach(f, {}, odd, {});
  }
  // An interface the other hosts cannot reach, in a job across hosts: NCCL publishes
  // its address and the peers' connects go to themselves (loopback) or nowhere
  // (link-local). Named where it was chosen, before the connect errors it causes.
  if (k.hosts_seen.size() > 1) {
    for (bool loopback : {true, false}) {
      std::set<std::string> hosts;
      std::vector<std::string> ifs;
      for (const auto& [host, h] : k.host_logs) {
        if (h.unreachable_if.empty() || h.loopback != loopback) continue;
        hosts.insert(host);
        if (ifs.size() < 3) ifs.push_back(fmt::format("{} on {}", h.unreachable_if, host));
      }
      if (hosts.empty()) continue;
      DiagFinding& f = b.add(
          loopback ? FindingId::kNcclInterfaceLoopback : FindingId::kNcclInterfaceLinkLocal,
          fmt::format("NCCL's sockets use {} in a job across {} hosts: {}", format_list(ifs, 3),
                      k.hosts_seen.size(),
                      loopback ? "the address it gives the other hosts leads back to themselves"
                               : "a link-local address reaches no host beyond its own link"),
          true, *first_of(hosts, &HostLog::if_note));
      attach(f, {}, hosts, {});
    }
  }
  for (const auto& [name, by] : env) {
    if (by.size() < 2) continue;
    std::set<std::string> odd = odd_hosts(by);
    const Note* note = first_of(odd, &HostLog::env_note);
    if (!note) continue;
    DiagFinding& f =
        b.add(FindingId::kEnvMismatch,
              fmt::format("{} differs between the hosts: {}", printable(name, 64), values_text(by)),
              false, *note);
    attach(f, {}, odd, {});
  }
}

}  // namespace rankcheck::diagnose
