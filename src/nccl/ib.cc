// NCCL's IB device, port and GID choice and its network plugin lookup, as pure
// functions (see ib.h); read in NVIDIA/nccl at v2.18.6-1, v2.21.5-1, v2.28.9-1.

#include "nccl/ib.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <strings.h>

#include "nccl/list.h"
#include "nccl/param.h"
#include "nccl/version.h"

namespace rankcheck {
namespace {

using nccl::rules_since;
// NCCL opens at most MAX_IB_DEVS devices.
constexpr size_t kMaxIbDevs = 32;

std::string env_or(const EnvMap& env, std::string_view name) {
  const std::string* v = env_get(env, name);
  return v ? *v : std::string();
}

uint32_t word(const std::array<uint8_t, 16>& raw, int i) {
  return (uint32_t{raw[size_t(4 * i)]} << 24) | (uint32_t{raw[size_t(4 * i + 1)]} << 16) |
         (uint32_t{raw[size_t(4 * i + 2)]} << 8) | uint32_t{raw[size_t(4 * i + 3)]};
}

bool gid_configured(const std::array<uint8_t, 16>& raw) {
  uint32_t trailer = word(raw, 1) | word(raw, 2) | word(raw, 3);
  return !((word(raw, 0) | trailer) == 0 || (word(raw, 0) == 0xfe800000u && trailer == 0));
}

// NCCL_IB_ADDR_RANGE ("10.0.0.0/8") in the family NCCL_IB_ADDR_FAMILY names; an
// invalid one is ignored, as NCCL ignores it (with a WARN).
struct AddrRange {
  std::array<uint8_t, 16> base{};  // IPv4 in the first 4 bytes
  int prefix = 0;                  // 0: everything matches
};

AddrRange parse_range(const std::string& text, int family) {
  AddrRange r;
  size_t slash = text.find('/');
  if (text.empty() || slash == std::string::npos) return r;
  std::string addr = text.substr(0, slash);
  if (::inet_pton(family == 6 ? AF_INET6 : AF_INET, addr.c_str(), r.base.data()) != 1) return r;
  long mask = std::strtol(text.c_str() + slash + 1, nullptr, 10);
  if (mask < 0 || mask > (family == 6 ? 128 : 32)) return AddrRange{};
  r.prefix = static_cast<int>(mask);
  return r;
}

// matchGidAddrPrefix: IPv4 against the GID's last word, IPv6 word by word.
bool in_range(const AddrRange& r, int family, const std::array<uint8_t, 16>& gid) {
  auto masked = [](uint32_t v, int bits) { return bits >= 32 ? v : v & ~(0xffffffffu >> bits); };
  std::array<uint8_t, 16> b = r.base;
  if (family == 4)
    return r.prefix == 0 || masked(word(b, 0), r.prefix) == masked(word(gid, 3), r.prefix);
  int left = r.prefix;
  for (int i = 0; i < 4 && left > 0; ++i, left -= 32) {
    if (masked(word(b, i), left) != masked(word(gid, i), left)) return false;
  }
  return true;
}

// ncclIbGetPciPath: the device's PCI path with its function digit as 0 (one NIC's
// ports), and with NCCL_IB_MERGE_VFS (default 1) the two before it too.
std::string merged_pci_path(std::string path, bool merge_vfs) {
  if (path.empty()) return path;
  path.back() = '0';
  if (merge_vfs && path.size() >= 4) path[path.size() - 3] = path[path.size() - 4] = '0';
  return path;
}

uint8_t link_of(const std::string& layer) {
  return layer == "InfiniBand" ? IbPortFacts::kInfiniBand
         : layer == "Ethernet" ? IbPortFacts::kEthernet
                               : IbPortFacts::kLinkUnknown;
}

// Whether libibverbs lists each device and NCCL opens it, in the host's order. When
// sysfs names no device's uverbs, the host-wide answer stands for every device.
std::vector<bool> devices_open(const IbHostView& host) {
  bool any_named = std::any_of(host.devices.begin(), host.devices.end(),
                               [](const IbDeviceView& x) { return !x.uverbs.empty(); });
  std::vector<bool> out;
  for (const IbDeviceView& d : host.devices)
    out.push_back(any_named ? d.cdev && d.openable : host.uverbs_openable);
  return out;
}

// The ports of every device, in libibverbs' order, with NCCL_IB_HCA's and the
// port's own verdict, and on used RoCE ports the GID NCCL picks.
std::vector<IbPortFacts> port_facts(const IbHostView& host, const std::vector<bool>& listed,
                                    const nccl::List& spec, const EnvMap& env, int32_t version,
                                    std::string& gid_rule) {
  std::vector<IbPortFacts> out;
  size_t used = 0;
  for (size_t i = 0; i < host.devices.size(); ++i) {
    const IbDeviceView& d = host.devices[i];
    bool opens = listed[i];
    for (const IbPortView& p : d.ports) {
      IbPortFacts f;
      f.device = d.name;
      f.port = static_cast<uint8_t>(std::clamp(p.port, 0, 255));
      f.state = static_cast<uint8_t>(std::clamp(p.state, 0, 255));
      f.link = link_of(p.link_layer);
      f.rate_gbps = p.rate_gbps;
      if (nccl::list_matches(spec, d.name, p.port)) f.flags |= IbPortFacts::kSelected;
      if (!opens) f.flags |= IbPortFacts::kNoCdev;
      if (opens && (f.flags & IbPortFacts::kSelected) != 0 && f.state == IbPortFacts::kActive &&
          f.link != IbPortFacts::kLinkUnknown && used < kMaxIbDevs) {
        f.flags |= IbPortFacts::kUsed;
        ++used;
      }
      if (f.used() && f.link == IbPortFacts::kEthernet && !p.gids.empty()) {
        GidChoice g = choose_roce_gid(p.gids, env, version);
        gid_rule = g.rule;
        f.gid_index = static_cast<int16_t>(g.index);
        for (const IbGid& e : p.gids) {
          if (e.index != g.index) continue;
          f.gid_roce = static_cast<uint8_t>(e.roce);
          f.gid_family = gid_configured(e.raw) ? static_cast<uint8_t>(gid_family(e.raw)) : 0;
          f.gid = gid_text(e.raw);
          f.netdev = e.ndev;
          if (!gid_valid(e.raw)) f.flags |= IbPortFacts::kGidLinkLocal;
        }
      }
      out.push_back(std::move(f));
    }
  }
  // The record keeps kMaxIbPorts: the ports NCCL does not open go first, from the end
  // (NCCL's own cap is on the ports it opens, above).
  for (size_t i = out.size(); i-- > 0 && out.size() > kMaxIbPorts;) {
    if (!out[i].used()) out.erase(out.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return out;
}

// NCCL's NIC count: merged ports count once (ncclIbFindMatchingDev).
uint8_t nic_count(const IbHostView& host, const std::vector<IbPortFacts>& ports, const EnvMap& env,
                  int32_t version) {
  bool merge =
      rules_since(version, nccl::kMergeNics) && nccl::param(env, "NCCL_IB_MERGE_NICS", 1) != 0;
  bool merge_vfs = nccl::param(env, "NCCL_IB_MERGE_VFS", 1) != 0;
  size_t per_nic = rules_since(version, nccl::kFourDevsPerNic) ? 4 : 2;
  std::map<std::string, const IbDeviceView*> devices;
  for (const IbDeviceView& d : host.devices)
    devices[d.name] = &d;
  std::vector<std::pair<std::string, size_t>> nics;  // key, ports in it
  for (const IbPortFacts& p : ports) {
    if (!p.used()) continue;
    const IbDeviceView* d = devices[p.device.str()];
    std::string key = fmt::format("{}\n{}\n{}", merged_pci_path(d ? d->pci_path : "", merge_vfs),
                                  d ? d->sys_image_guid : "", p.link);
    auto it = std::find_if(nics.begin(), nics.end(), [&](const auto& n) {
      return merge && n.first == key && n.second < per_nic && !key.starts_with("\n");
    });
    if (it == nics.end()) {
      nics.emplace_back(key, 1);
    } else {
      ++it->second;
    }
  }
  return static_cast<uint8_t>(std::min<size_t>(nics.size(), 255));
}

std::string hca_rule(const EnvMap& env, const NcclNetInput& in) {
  const std::string* hca = env_get(env, "NCCL_IB_HCA");
  return hca ? fmt::format("NCCL_IB_HCA={}{}", *hca, in.hca_source) : "every device";
}

}  // namespace

int gid_family(const std::array<uint8_t, 16>& raw) {
  bool mapped = (word(raw, 0) | word(raw, 1) | (word(raw, 2) ^ 0x0000ffffu)) == 0;
  bool mapped_mc =
      word(raw, 0) == 0xff0e0000u && (word(raw, 1) | (word(raw, 2) ^ 0x0000ffffu)) == 0;
  return mapped || mapped_mc ? 4 : 6;
}

bool gid_link_local(const std::array<uint8_t, 16>& raw) {
  return word(raw, 0) == 0xfe800000u && word(raw, 1) == 0;
}

bool gid_valid(const std::array<uint8_t, 16>& raw) {
  return gid_configured(raw) && !gid_link_local(raw);
}

std::string gid_text(const std::array<uint8_t, 16>& raw) {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET6, raw.data(), buf, sizeof buf);
  return buf;
}

GidChoice choose_roce_gid(const std::vector<IbGid>& table, const EnvMap& env, int32_t version) {
  GidChoice c;
  if (!rules_since(version, nccl::kGidChoice)) {
    c.index = static_cast<int>(nccl::param(env, "NCCL_IB_GID_INDEX", 0));
    c.rule = env_get(env, "NCCL_IB_GID_INDEX") ? fmt::format("NCCL_IB_GID_INDEX={}", c.index)
                                               : "NCCL_IB_GID_INDEX's default 0 (before 2.21)";
    return c;
  }
  if (int64_t fixed = nccl::param(env, "NCCL_IB_GID_INDEX", -1); fixed >= 0) {
    c.index = static_cast<int>(fixed);
    c.rule = fmt::format("NCCL_IB_GID_INDEX={}", fixed);
    return c;
  }
  int family = env_or(env, "NCCL_IB_ADDR_FAMILY") == "AF_INET6" ? 6 : 4;
  int roce = static_cast<int>(nccl::param(env, "NCCL_IB_ROCE_VERSION_NUM", 2));
  AddrRange range = parse_range(env_or(env, "NCCL_IB_ADDR_RANGE"), family);
  // The table by index: a missing slot is an empty GID.
  auto at = [&](int i) -> const IbGid* {
    for (const IbGid& g : table) {
      if (g.index == i) return &g;
    }
    return nullptr;
  };
  static const IbGid kEmpty;
  int len = table.empty() ? 0 : table.back().index + 1;
  c.index = 0;
  for (int next = 1; next < len; ++next) {
    const IbGid& gid = at(c.index) ? *at(c.index) : kEmpty;
    const IbGid& cand = at(next) ? *at(next) : kEmpty;
    int cand_family = gid_family(cand.raw);
    bool cand_in_range = in_range(range, family, cand.raw);
    if (cand_family != gid_family(gid.raw) && cand_family == family && cand_in_range) {
      c.index = next;
    } else if (cand_family == family && gid_valid(cand.raw) && cand_in_range &&
               (gid.roce != cand.roce || !gid_valid(gid.raw)) && cand.roce == roce) {
      c.index = next;
    }
  }
  c.rule = fmt::format(
      "NCCL's own choice: RoCE v{}, {}{}", roce, family == 6 ? "AF_INET6" : "AF_INET",
      range.prefix > 0 ? ", NCCL_IB_ADDR_RANGE=" + env_or(env, "NCCL_IB_ADDR_RANGE") : "");
  return c;
}

std::vector<std::string> nccl_plugin_candidates(const EnvMap& env, int32_t version) {
  const std::string* set = env_get(env, "NCCL_NET_PLUGIN");
  if (set == nullptr || set->empty()) return {"libnccl-net.so"};
  std::vector<std::string> names;
  if (rules_since(version, nccl::kPluginList)) {
    if (rules_since(version, nccl::kPluginNone) && strcasecmp(set->c_str(), "none") == 0) return {};
    for (size_t start = 0; start < set->size();) {
      size_t comma = set->find(',', start);
      if (comma == std::string::npos) comma = set->size();
      if (comma > start) names.push_back(set->substr(start, comma - start));
      start = comma + 1;
    }
  } else {
    names.push_back(*set);
  }
  std::vector<std::string> out;
  for (const std::string& n : names) {
    std::string prefixed = "libnccl-net-" + n + ".so";
    bool lib_so = n.starts_with("lib") && n.ends_with(".so");
    if (!rules_since(version, nccl::kPluginAsIs)) {
      out.push_back(prefixed);
    } else if (rules_since(version, nccl::kPluginNoPrefix)) {
      out.push_back(n);
      if (n.find('/') == std::string::npos && !lib_so) out.push_back(prefixed);
    } else if (rules_since(version, nccl::kPluginList)) {  // 2.27.3, 2.27.4
      out.push_back(lib_so && n.size() >= 7 ? n : prefixed);
    } else {
      out.push_back(n);
      out.push_back(prefixed);
    }
  }
  return out;
}

uint16_t nccl_plugin_abi_read(int32_t version) {
  auto range = [](int from, int to) {
    return static_cast<uint16_t>(((1u << (to + 1)) - 1) & ~((1u << from) - 1));
  };
  int minor = version == 0 ? 99 : version >= 10000 ? version / 100 % 100 : 0;
  if (minor < 18) return 0xffff;
  if (minor == 18) return range(4, 6);
  if (minor == 19) return range(5, 7);
  if (minor <= 23) return range(5, 8);
  if (minor <= 25) return range(5, 9);
  if (minor <= 27) return range(6, 10);
  if (minor <= 29) return range(6, 11);
  return range(6, 12);
}

int64_t nccl_memlock_need(const EnvMap& env) {
  constexpr int64_t kDefaultBuffSize = int64_t{4} << 20;
  int64_t buff = nccl::param(env, "NCCL_BUFFSIZE", kDefaultBuffSize);
  if (buff <= 0) buff = kDefaultBuffSize;
  return 16 * buff;
}

NcclNetFacts choose_nccl_net(const IbHostView& host, const NcclNetInput& in) {
  static const EnvMap kNoEnv;
  const EnvMap& env = in.env ? *in.env : kNoEnv;
  NcclNetFacts f;
  f.rules_version = in.nccl_version;
  f.memlock = host.memlock;
  f.memlock_need = nccl_memlock_need(env);
  f.gdr = host.peermem ? NcclNetFacts::kGdrPeermem : NcclNetFacts::kGdrNone;
  f.ib_devices = static_cast<uint8_t>(std::min<size_t>(host.devices.size(), 255));
  f.flags = (host.container ? NcclNetFacts::kContainer : 0) |
            (host.uverbs.empty() ? 0 : NcclNetFacts::kUverbs) |
            (host.uverbs_openable ? NcclNetFacts::kUverbsOpen : 0) |
            (host.root.empty() ? 0 : NcclNetFacts::kFromRoot) |
            (host.ipc_lock ? NcclNetFacts::kIpcLock : 0);
  f.plugin = in.plugin;
  // A plugin without an ncclNetPlugin_vN the release reads is unloaded ("External
  // network plugin %s is unsupported"): NCCL goes on with its own transports.
  bool plugin_kept = !in.plugin.empty();
  if (plugin_kept && in.plugin_abi.has_value()) {
    f.flags |= NcclNetFacts::kPluginRead;
    f.plugin_abi = *in.plugin_abi;
    if ((f.plugin_abi & nccl_plugin_abi_read(in.nccl_version)) == 0) {
      f.flags |= NcclNetFacts::kPluginUnsupported;
      plugin_kept = false;
    }
  }
  std::string tried;
  for (const std::string& t : in.plugin_tried)
    tried += (tried.empty() ? "" : " ") + t;
  f.plugin_tried = tried;
  f.net_name = env_or(env, "NCCL_NET");
  nccl::List spec = nccl::parse_list(env_or(env, "NCCL_IB_HCA"), nccl::kMaxHcas, in.nccl_version);
  std::string gid_rule;
  std::vector<bool> listed = devices_open(host);
  f.ports = port_facts(host, listed, spec, env, in.nccl_version, gid_rule);
  f.gid_rule = gid_rule;
  f.root = host.root;
  f.nics = nic_count(host, f.ports, env, in.nccl_version);
  f.rule = hca_rule(env, in);

  // Why the IB transport would have no port, in the order ncclIbInit meets them.
  uint8_t ib_reason = NcclNetFacts::kNone;
  bool selected = std::any_of(f.ports.begin(), f.ports.end(), [](const IbPortFacts& p) {
    return (p.flags & IbPortFacts::kSelected) != 0 && (p.flags & IbPortFacts::kNoCdev) == 0;
  });
  bool any_opens = std::find(listed.begin(), listed.end(), true) != listed.end();
  if (nccl::param(env, "NCCL_IB_DISABLE", 0) != 0) {
    ib_reason = NcclNetFacts::kDisabled;
  } else if (!host.verbs_library) {
    ib_reason = NcclNetFacts::kNoVerbs;
  } else if (host.devices.empty()) {
    ib_reason = NcclNetFacts::kNoDevice;
  } else if (!any_opens) {
    ib_reason = NcclNetFacts::kNoUverbs;
  } else if (!selected) {
    ib_reason = NcclNetFacts::kHcaNone;
  } else if (f.used_ports().empty()) {
    ib_reason = NcclNetFacts::kNoActive;
  }
  std::string net = f.net_name.str();
  bool wants_ib = strcasecmp(net.c_str(), "IB") == 0;
  bool wants_socket = strcasecmp(net.c_str(), "Socket") == 0;
  if (plugin_kept && !wants_ib && !wants_socket) {
    f.transport = NcclNetFacts::kPlugin;
  } else if (wants_socket) {
    f.transport = NcclNetFacts::kSocket;
    f.reason = NcclNetFacts::kNetNamed;
  } else if (!net.empty() && !wants_ib) {
    f.transport = NcclNetFacts::kNoNet;  // "Error: network %s not found."
    f.reason = NcclNetFacts::kNetMissing;
  } else if (ib_reason == NcclNetFacts::kNone) {
    f.transport = NcclNetFacts::kIb;
  } else if (wants_ib) {
    f.transport = NcclNetFacts::kNoNet;
    f.reason = ib_reason;
  } else {
    f.transport = NcclNetFacts::kSocket;
    f.reason = ib_reason;
  }
  // Off its IB transport, NCCL opens none of the ports it would have used.
  if (f.transport != NcclNetFacts::kIb) {
    for (IbPortFacts& p : f.ports)
      p.flags &= static_cast<uint8_t>(~IbPortFacts::kUsed);
    f.nics = 0;
  }
  return f;
}

}  // namespace rankcheck
