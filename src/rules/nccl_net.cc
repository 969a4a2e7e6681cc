// The data network NCCL will carry the job over, decided before any NCCL call:
// the transport NCCL's rules pick on each host (its IB transport, a plugin or
// NET/Socket), the InfiniBand/RoCE ports and GIDs, and memory registration's limit
// (each record's NcclNetFacts, see nccl/ib.h). A transport or a link layer
// that differs between hosts fails or hangs NCCL's init where they meet; a host
// that falls back to sockets alone only runs slowly.

#include <map>
#include <set>

#include <fmt/format.h>

#include "base/odd_ones_out.h"
#include "base/text.h"
#include "model/gpu.h"
#include "nccl/ib.h"
#include "rules/context.h"

namespace rankcheck {
namespace {

// One record per host with known facts: a host's members share its devices.
struct HostNet {
  std::string_view host;
  const Record* first;
  Records members;
};

std::vector<HostNet> host_nets(const CheckContext& ctx) {
  std::vector<HostNet> out;
  for (const auto& [host, rs] : ctx.hosts) {
    for (const Record* r : rs) {
      if (!r->nccl_net->known()) continue;
      out.push_back({host, r, rs});
      break;
    }
  }
  return out;
}

Records members_of(const std::vector<const HostNet*>& hs) {
  Records out;
  for (const HostNet* h : hs)
    out.insert(out.end(), h->members.begin(), h->members.end());
  return out;
}

std::string host_list(const std::vector<const HostNet*>& hs) {
  std::vector<std::string> names;
  for (const HostNet* h : hs)
    names.push_back(printable(h->host, 40));
  return format_list(names, 4);
}

// Groups hosts by `key` ("" leaves a host out); `hs` is in host order. Between
// groups as big, the one with the first host.
template <class Key>
std::vector<Saying<std::string, const HostNet*>> by(const std::vector<HostNet>& hs, Key key) {
  std::vector<const HostNet*> all;
  for (const HostNet& h : hs)
    all.push_back(&h);
  return odd_ones_out<std::string>(
      all,
      [&key](const HostNet* h) -> std::optional<std::string> {
        std::string k = key(h->first->nccl_net);
        if (k.empty()) return std::nullopt;
        return k;
      },
      [](const auto& a, const auto& b) { return a.items.front() < b.items.front(); });
}

// "IB on gpu-01, gpu-02; Socket (no /dev/infiniband) on gpu-03", and the hosts
// outside the biggest group, which the finding names.
template <class Groups>
std::pair<std::string, Records> describe(const Groups& groups) {
  std::vector<std::string> parts;
  std::vector<const HostNet*> odd;
  for (size_t i = 0; i < groups.size(); ++i) {
    parts.push_back(fmt::format("{} on {}", groups[i].key, host_list(groups[i].items)));
    if (i > 0) odd.insert(odd.end(), groups[i].items.begin(), groups[i].items.end());
  }
  return {join(parts, "; ", 6), members_of(odd)};
}

std::string ports_text(const NcclNetFacts& f, size_t max = 4) {
  std::vector<std::string> names;
  for (const IbPortFacts& p : f.ports)
    names.push_back(p.name());
  return names.empty() ? std::string("none") : format_list(names, max);
}

std::string memlock_text(int64_t v) {
  return v >= (int64_t{1} << 20) ? fmt::format("{} MiB", v >> 20) : fmt::format("{} KiB", v >> 10);
}

// The address families of every used RoCE port's GID: "IPv4 GIDs", or, when a host's
// rails differ, "IPv4 GIDs but IPv6 on mlx5_1:1"; "" when none is known.
std::string gid_families(const std::vector<const IbPortFacts*>& ps) {
  std::map<int, std::vector<std::string>> by_family;
  for (const IbPortFacts* p : ps) {
    if (p->gid_family != 0) by_family[p->gid_family].push_back(p->name());
  }
  if (by_family.empty()) return "";
  if (by_family.size() == 1) return fmt::format("IPv{} GIDs", by_family.begin()->first);
  // The family of most ports first; the others by their ports.
  auto most = std::max_element(
      by_family.begin(), by_family.end(),
      [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
  std::string text = fmt::format("IPv{} GIDs", most->first);
  for (const auto& [family, names] : by_family) {
    if (family != most->first)
      text += fmt::format(" but IPv{} on {}", family, format_list(names, 4));
  }
  return text;
}

// Whether a record's registrations are held to its RLIMIT_MEMLOCK, and it is too low.
bool memlock_low(const NcclNetFacts& f) {
  return (f.flags & NcclNetFacts::kIpcLock) == 0 && f.memlock >= 0 && f.memlock < f.memlock_need;
}

}  // namespace

void check_nccl_net_mismatch(const CheckContext& ctx, std::vector<Finding>& out) {
  std::vector<HostNet> hs = host_nets(ctx);
  auto groups = by(hs, [](const NcclNetFacts& f) -> std::string {
    if (f.transport == NcclNetFacts::kIb) return "IB";
    if (f.transport == NcclNetFacts::kSocket) return f.text();
    return "";  // a plugin, or no network at all: their own findings
  });
  std::set<bool> ib;
  for (const auto& g : groups)
    ib.insert(g.key == "IB");
  if (ib.size() < 2) return;
  auto [text, odd] = describe(groups);
  out.push_back(make(FindingId::kNcclNetMismatch,
                     fmt::format("NCCL would carry the job over different networks: {}; ranks on "
                                 "IB and on sockets exchange connection handles the other side "
                                 "cannot use, so NCCL's init fails or hangs between them",
                                 text),
                     {}, odd));
}

void check_nccl_net_unavailable(const CheckContext& ctx, std::vector<Finding>& out) {
  for (const HostNet& h : host_nets(ctx)) {
    const NcclNetFacts& f = h.first->nccl_net;
    if (f.transport != NcclNetFacts::kNoNet) continue;
    std::string why =
        f.reason != NcclNetFacts::kNetMissing
            ? "its IB transport has no port: " + nccl_net_reason_text(f)
        : (f.flags & NcclNetFacts::kPluginUnsupported) != 0
            ? fmt::format("its plugin {} exports {}, which NCCL does not read",
                          printable(f.plugin, 120), nccl_plugin_abi_text(f.plugin_abi))
            : fmt::format("no plugin library found (tried {})", printable(f.plugin_tried, 120));
    out.push_back(make(FindingId::kNcclNetUnavailable,
                       fmt::format("NCCL_NET={} names a network {} does not have ({}): NCCL's "
                                   "init fails there with \"Error: network {} not found.\"",
                                   printable(f.net_name, 32), printable(h.host, 40), why,
                                   printable(f.net_name, 32)),
                       {}, h.members));
  }
}

void check_nccl_net_plugin(const CheckContext& ctx, std::vector<Finding>& out) {
  std::vector<HostNet> hs = host_nets(ctx);
  auto groups = by(hs, [](const NcclNetFacts& f) -> std::string {
    if (f.transport == NcclNetFacts::kNoNet) return "";
    return f.plugin.empty() || (f.flags & NcclNetFacts::kPluginUnsupported) != 0
               ? fmt::format("no plugin ({})", f.transport == NcclNetFacts::kIb ? "IB" : "Socket")
               : "plugin " + nccl_plugin_short_name(f.plugin.str());
  });
  if (groups.size() < 2) return;
  bool any_plugin = std::any_of(groups.begin(), groups.end(),
                                [](const auto& g) { return g.key.starts_with("plugin"); });
  if (!any_plugin) return;
  auto [text, odd] = describe(groups);
  out.push_back(make(FindingId::kNcclNetPluginMismatch,
                     fmt::format("The loader finds a network plugin on some hosts only: {}; NCCL "
                                 "uses a plugin it finds instead of its own transports, and the "
                                 "hosts' networks cannot connect",
                                 text),
                     {}, odd));
}

// A plugin NCCL unloads: its release reads none of the ncclNetPlugin_vN it exports.
// One finding per plugin, release and fallback, naming its hosts.
void check_nccl_net_plugin_unsupported(const CheckContext& ctx, std::vector<Finding>& out) {
  std::vector<HostNet> hs = host_nets(ctx);
  std::map<std::string, std::vector<const HostNet*>> groups;
  for (const HostNet& h : hs) {
    const NcclNetFacts& f = h.first->nccl_net;
    if ((f.flags & NcclNetFacts::kPluginUnsupported) == 0) continue;
    groups[fmt::format("{}\n{}\n{}\n{}", f.plugin.str(), f.plugin_abi, f.rules_version, f.text())]
        .push_back(&h);
  }
  for (const auto& [key, group] : groups) {
    const NcclNetFacts& f = group.front()->first->nccl_net;
    std::string release = f.rules_version == 0 ? std::string("the newest NCCL")
                                               : "NCCL " + nccl_version_text(f.rules_version);
    out.push_back(make(
        FindingId::kNcclNetPluginUnsupported,
        fmt::format("the network plugin the loader finds on {} ({}) exports {}, and {} reads {}: "
                    "NCCL unloads it (\"External network plugin ... is unsupported\", an INFO "
                    "line) and carries the job over {}",
                    host_list(group), printable(f.plugin, 120), nccl_plugin_abi_text(f.plugin_abi),
                    release, nccl_plugin_abi_text(nccl_plugin_abi_read(f.rules_version)), f.text()),
        {}, members_of(group)));
  }
}

void check_nccl_ib_hca_none(const CheckContext& ctx, std::vector<Finding>& out) {
  for (const HostNet& h : host_nets(ctx)) {
    const NcclNetFacts& f = h.first->nccl_net;
    if (f.reason != NcclNetFacts::kHcaNone) continue;
    // Ports it names whose device libibverbs does not list (no uverbs node that opens).
    std::vector<std::string> hidden;
    for (const IbPortFacts& p : f.ports) {
      if ((p.flags & IbPortFacts::kSelected) != 0 && (p.flags & IbPortFacts::kNoCdev) != 0)
        hidden.push_back(p.name());
    }
    std::string unmapped = hidden.empty()
                               ? std::string()
                               : fmt::format(
                                     " ({} {} no /dev/infiniband/uverbs node that opens here, so "
                                     "libibverbs does not list {})",
                                     format_list(hidden, 4), hidden.size() == 1 ? "has" : "have",
                                     hidden.size() == 1 ? "it" : "them");
    out.push_back(
        make(FindingId::kNcclIbHcaNone,
             fmt::format("{} matches none of {}'s ports ({}){}: NCCL's IB transport finds "
                         "no device (\"NET/IB : No device found.\") and NCCL falls back "
                         "to sockets there",
                         printable(f.rule, 120), printable(h.host, 40), ports_text(f, 8), unmapped),
             {}, h.members));
  }
}

void check_nccl_ib_port_not_active(const CheckContext& ctx, std::vector<Finding>& out) {
  std::vector<HostNet> hs = host_nets(ctx);
  std::set<std::string> used_elsewhere;  // "mlx5_0:1" used on some host
  for (const HostNet& h : hs) {
    for (const IbPortFacts* p : h.first->nccl_net->used_ports())
      used_elsewhere.insert(p->name());
  }
  for (const HostNet& h : hs) {
    const NcclNetFacts& f = h.first->nccl_net;
    if (f.transport == NcclNetFacts::kPlugin) continue;
    bool named = f.rule.str().starts_with("NCCL_IB_HCA=");
    std::vector<std::string> idle;
    for (const IbPortFacts& p : f.ports) {
      bool selected = (p.flags & IbPortFacts::kSelected) != 0;
      if (!selected || p.state == IbPortFacts::kActive || (p.flags & IbPortFacts::kNoCdev) != 0)
        continue;
      // Unnamed, an idle port is only news when other hosts use the same port.
      if (named || used_elsewhere.count(p.name()) > 0) {
        static constexpr const char* kStates[] = {"NOP",   "DOWN",   "INIT",
                                                  "ARMED", "ACTIVE", "ACTIVE_DEFER"};
        idle.push_back(fmt::format("{} {}", p.name(), kStates[p.state <= 5 ? p.state : 0]));
      }
    }
    if (idle.empty()) continue;
    std::string then = f.used_ports().empty()
                           ? "no port is left, and NCCL falls back to sockets"
                           : fmt::format("it uses {} port(s) there instead", f.used_ports().size());
    out.push_back(make(FindingId::kNcclIbPortNotActive,
                       fmt::format("{} on {} {} not ACTIVE: NCCL's IB transport skips ports that "
                                   "are not; {}",
                                   format_list(idle, 6), printable(h.host, 40),
                                   idle.size() == 1 ? "is" : "are", then),
                       {}, h.members));
  }
}

void check_nccl_ib_link_layer(const CheckContext& ctx, std::vector<Finding>& out) {
  std::vector<HostNet> hs = host_nets(ctx);
  auto groups = by(hs, [](const NcclNetFacts& f) {
    return f.transport == NcclNetFacts::kIb ? f.link_text() : std::string();
  });
  if (groups.size() > 1) {
    auto [text, odd] = describe(groups);
    out.push_back(make(FindingId::kNcclIbLinkLayerMismatch,
                       fmt::format("NCCL's IB transport would use different link layers: {}; an "
                                   "InfiniBand port and a RoCE port cannot connect, so NCCL's init "
                                   "fails between them",
                                   text),
                       {}, odd));
    return;  // the port counts of different fabrics say nothing more
  }
  auto counts = by(hs, [](const NcclNetFacts& f) {
    return f.transport == NcclNetFacts::kIb ? fmt::format("{} port{}", f.used_ports().size(),
                                                          f.used_ports().size() == 1 ? "" : "s")
                                            : std::string();
  });
  if (counts.size() < 2) return;
  auto [text, odd] = describe(counts);
  out.push_back(make(FindingId::kNcclIbPortCountMismatch,
                     fmt::format("Hosts would give NCCL different numbers of usable ports: {}; "
                                 "NCCL's rings and trees run at the pace of the host with the "
                                 "fewest",
                                 text),
                     {}, odd));
}

void check_nccl_roce_gid(const CheckContext& ctx, std::vector<Finding>& out) {
  std::vector<HostNet> hs = host_nets(ctx);
  auto roce_used = [](const NcclNetFacts& f) {
    std::vector<const IbPortFacts*> ps;
    for (const IbPortFacts* p : f.used_ports()) {
      if (f.transport == NcclNetFacts::kIb && p->link == IbPortFacts::kEthernet &&
          p->gid_index >= 0)
        ps.push_back(p);
    }
    return ps;
  };
  auto local = by(hs, [&](const NcclNetFacts& f) {
    auto ps = roce_used(f);
    if (ps.empty()) return std::string();
    bool ll = std::any_of(ps.begin(), ps.end(), [](const IbPortFacts* p) {
      return (p->flags & IbPortFacts::kGidLinkLocal) != 0;
    });
    return ll ? std::string("link local") : std::string("routable");
  });
  for (const auto& [kind, group] : local) {
    if (kind != "link local") continue;
    bool others_routable = local.size() > 1;
    const NcclNetFacts& f = group.front()->first->nccl_net;
    const IbPortFacts* p = nullptr;
    for (const IbPortFacts* q : roce_used(f)) {
      if ((q->flags & IbPortFacts::kGidLinkLocal) != 0 && p == nullptr) p = q;
    }
    std::string gid =
        p ? fmt::format("GID {} ({}) on {}", p->gid_index, printable(p->gid, 40), p->name()) : "";
    out.push_back(make(FindingId::kNcclRoceGidLinkLocal,
                       fmt::format("NCCL would use a link-local or unset RoCE {} on {} ({}): it "
                                   "reaches no other subnet{}",
                                   gid, host_list(group), printable(f.gid_rule, 80),
                                   others_routable ? ", and the other hosts use routable GIDs, so "
                                                     "their queue pairs never connect"
                                                   : ""),
                       {}, members_of(group),
                       others_routable ? Severity::kError : Severity::kWarning));
  }
  auto family = by(hs, [&](const NcclNetFacts& f) { return gid_families(roce_used(f)); });
  if (family.size() < 2) return;
  auto [text, odd] = describe(family);
  out.push_back(make(FindingId::kNcclRoceGidFamilyMismatch,
                     fmt::format("NCCL would pick RoCE GIDs of different address families: {}; "
                                 "an IPv4 and an IPv6 GID cannot address each other",
                                 text),
                     {}, odd));
}

void check_ib_memlock(const CheckContext& ctx, std::vector<Finding>& out) {
  for (const HostNet& h : host_nets(ctx)) {
    const NcclNetFacts& f = h.first->nccl_net;
    if (f.transport != NcclNetFacts::kIb && f.transport != NcclNetFacts::kPlugin) continue;
    if (!memlock_low(f)) continue;
    out.push_back(make(
        FindingId::kIbMemlockLow,
        fmt::format("The locked-memory limit (RLIMIT_MEMLOCK) on {} is {}; NCCL's "
                    "RDMA buffers pin about {}: ibv_reg_mr fails with \"Cannot "
                    "allocate memory\" and NCCL's init fails",
                    printable(h.host, 40), memlock_text(f.memlock), memlock_text(f.memlock_need)),
        {}, h.members));
  }
}

void check_ib_uverbs_missing(const CheckContext& ctx, std::vector<Finding>& out) {
  for (const HostNet& h : host_nets(ctx)) {
    const NcclNetFacts& f = h.first->nccl_net;
    if (f.reason != NcclNetFacts::kNoUverbs) continue;
    bool container = (f.flags & NcclNetFacts::kContainer) != 0;
    out.push_back(make(FindingId::kIbUverbsMissing,
                       fmt::format("{} has RDMA devices ({}) but {} /dev/infiniband/uverbs*{}: "
                                   "NCCL cannot open them (\"NET/IB : Unable to open device\") "
                                   "and falls back to sockets there",
                                   printable(h.host, 40), ports_text(f),
                                   (f.flags & NcclNetFacts::kUverbs) ? "cannot open" : "no",
                                   container ? " in its container" : ""),
                       {}, h.members));
  }
}

}  // namespace rankcheck

namespace rankcheck {

std::string nccl_net_signature(const NcclNetFacts& f) {
  if (!f.known()) return "";
  std::vector<const IbPortFacts*> used = f.used_ports();
  bool link_local = std::any_of(used.begin(), used.end(), [](const IbPortFacts* p) {
    return p->link == IbPortFacts::kEthernet && (p->flags & IbPortFacts::kGidLinkLocal) != 0;
  });
  std::set<std::string> used_names;
  for (const IbPortFacts* p : used)
    used_names.insert(p->name());
  std::string names;
  for (const std::string& n : used_names)
    names += n + ",";
  std::vector<const IbPortFacts*> roce;
  for (const IbPortFacts* p : used) {
    if (p->link == IbPortFacts::kEthernet && p->gid_index >= 0) roce.push_back(p);
  }
  return fmt::format("{}\n{}\n{}\n{}\n{}\n{}\n{}", f.transport,
                     f.plugin.empty() ? "" : nccl_plugin_short_name(f.plugin.str()), f.link_text(),
                     used.size(), gid_families(roce), link_local, names);
}

bool nccl_net_alone_ok(const NcclNetFacts& f) {
  if (!f.known()) return true;
  if ((f.flags & NcclNetFacts::kPluginUnsupported) != 0) return false;
  if (f.transport == NcclNetFacts::kNoNet || f.reason == NcclNetFacts::kHcaNone ||
      f.reason == NcclNetFacts::kNoUverbs)
    return false;
  bool registers = f.transport == NcclNetFacts::kIb || f.transport == NcclNetFacts::kPlugin;
  if (registers && memlock_low(f)) return false;
  bool named = f.rule.str().starts_with("NCCL_IB_HCA=");
  for (const IbPortFacts& p : f.ports) {
    if (named && (p.flags & IbPortFacts::kSelected) != 0 && (p.flags & IbPortFacts::kNoCdev) == 0 &&
        p.state != IbPortFacts::kActive)
      return false;
  }
  return true;
}

}  // namespace rankcheck
