#include "model/nccl_net.h"

#include <set>

#include <fmt/format.h>

namespace rankcheck {

std::string IbPortFacts::name() const {
  return fmt::format("{}:{}", device.str(), port);
}

std::vector<const IbPortFacts*> NcclNetFacts::used_ports() const {
  std::vector<const IbPortFacts*> out;
  for (const IbPortFacts& p : ports) {
    if (p.used()) out.push_back(&p);
  }
  return out;
}

std::string NcclNetFacts::link_text() const {
  bool ib = false, roce = false;
  for (const IbPortFacts* p : used_ports()) {
    ib = ib || p->link == IbPortFacts::kInfiniBand;
    roce = roce || p->link == IbPortFacts::kEthernet;
  }
  return ib && roce ? "IB+RoCE" : ib ? "IB" : roce ? "RoCE" : "";
}

std::string nccl_net_reason_text(const NcclNetFacts& f) {
  switch (f.reason) {
    case NcclNetFacts::kNoDevice:
      return "no IB device";
    case NcclNetFacts::kDisabled:
      return "NCCL_IB_DISABLE set";
    case NcclNetFacts::kNoVerbs:
      return "no libibverbs";
    case NcclNetFacts::kNoUverbs:
      return "no /dev/infiniband";
    case NcclNetFacts::kHcaNone:
      return "NCCL_IB_HCA matches no port";
    case NcclNetFacts::kNoActive:
      return "no ACTIVE port";
    case NcclNetFacts::kNetNamed:
      return "NCCL_NET=Socket";
    case NcclNetFacts::kNetMissing:
      return fmt::format("NCCL_NET={} not found", f.net_name.str());
    default:
      return "";
  }
}

std::string ib_counters_moved(const IbCounters& before, const IbCounters& after) {
  std::string out;
  for (const auto& [port, now] : after) {
    auto was = before.find(port);
    if (was == before.end()) continue;
    std::string moved;
    for (size_t i = 0; i < kIbErrorCounters.size(); ++i) {
      if (was->second[i] < 0 || now[i] <= was->second[i]) continue;
      moved += fmt::format("{}{} +{}", moved.empty() ? "" : ", ", kIbErrorCounters[i],
                           now[i] - was->second[i]);
    }
    if (!moved.empty()) out += fmt::format("{}{} {}", out.empty() ? "" : "; ", port, moved);
  }
  return out;
}

std::string nccl_plugin_abi_text(uint16_t abi) {
  std::vector<int> v;
  for (int n = 0; n < 16; ++n) {
    if ((abi & (1u << n)) != 0) v.push_back(n);
  }
  if (v.empty()) return "no ncclNetPlugin_v symbol";
  if (v.size() > 2 && v.back() - v.front() + 1 == int(v.size()))
    return fmt::format("v{}-v{}", v.front(), v.back());
  std::string out;
  for (int n : v)
    out += fmt::format("{}v{}", out.empty() ? "" : ", ", n);
  return out;
}

std::string nccl_plugin_short_name(std::string_view library) {
  size_t slash = library.rfind('/');
  if (slash != std::string_view::npos) library.remove_prefix(slash + 1);
  constexpr std::string_view kPrefix = "libnccl-net-", kSuffix = ".so";
  if (library.starts_with(kPrefix) && library.ends_with(kSuffix) &&
      library.size() > kPrefix.size() + kSuffix.size()) {
    return std::string(
        library.substr(kPrefix.size(), library.size() - kPrefix.size() - kSuffix.size()));
  }
  return std::string(library);
}

std::string NcclNetFacts::text() const {
  switch (transport) {
    case kPlugin:
      return "plugin " + nccl_plugin_short_name(plugin.str());
    case kSocket:
      return fmt::format("Socket ({})", nccl_net_reason_text(*this));
    case kNoNet:
      return fmt::format("none ({})", nccl_net_reason_text(*this));
    case kIb:
      break;
    default:
      return "-";
  }
  std::vector<const IbPortFacts*> used = used_ports();
  std::string names;
  uint64_t gbps = 0;
  std::set<std::string> gids;
  for (const IbPortFacts* p : used) {
    if (!names.empty()) names += ",";
    names += p->name();
    gbps += p->rate_gbps;
    if (p->link == IbPortFacts::kEthernet && p->gid_index >= 0) {
      gids.insert(p->gid_roce != 0 ? fmt::format("v{} gid {}", p->gid_roce, p->gid_index)
                                   : fmt::format("gid {}", p->gid_index));
    }
  }
  // Eight rails do not fit a table's cell: the first and last port, and how many.
  if (used.size() > 3)
    names = fmt::format("{}..{} ({})", used.front()->name(), used.back()->name(), used.size());
  std::string link = link_text();
  std::string gid = gids.size() == 1 ? " " + *gids.begin() : gids.empty() ? "" : " gid mixed";
  return fmt::format("{}{} {} {}G", link, gid, names, gbps);
}

}  // namespace rankcheck
