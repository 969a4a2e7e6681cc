// NCCL's interface choice, as NCCL's own source makes it (src/misc/socket.cc
// ncclFindInterfaces, from 2.29 src/os/linux.cc ncclOsFindInterfaces, and
// src/bootstrap.cc bootstrapNetInit). Each version difference is a named gate
// (nccl/version.h).

#include "nccl/socket_if.h"

#include <algorithm>
#include <array>
#include <cstring>

#include <arpa/inet.h>
#include <fmt/format.h>

#include "model/record.h"
#include "nccl/list.h"
#include "nccl/version.h"

namespace rankcheck {
namespace {

using nccl::kMaxIfs;

constexpr std::string_view kNoInterface = "Bootstrap : no socket interface found";
constexpr std::string_view kNoSubnetInterface = "NET/Socket : No usable listening interface found";
constexpr std::string_view kBadCommId =
    "Invalid NCCL_COMM_ID, please use format: <ipv4>:<port> or [<ipv6>]:<port> or "
    "<hostname>:<port>";

bool skips_not_running(int32_t v) {
  return nccl::rules_since(v, nccl::kSkipsNotRunning);
}
bool virbr_last(int32_t v) {
  return nccl::rules_since(v, nccl::kVirbrLast);
}
// 2.29.x (src/os/linux.cc matchSubnet) returns "not in the subnet" for an IPv4
// address in it and the reverse: with NCCL_COMM_ID it binds the first interface
// outside its subnet.
bool inverted_ipv4_subnet(int32_t v) {
  return v >= nccl::kInvertedSubnetFrom && v < nccl::kInvertedSubnetUntil;
}

struct Parsed {
  int family = 0;
  std::array<uint8_t, 16> bytes{};
};

std::optional<Parsed> parse_address(std::string_view a) {
  std::string s(a.substr(0, a.find('%')));
  Parsed p;
  if (::inet_pton(AF_INET, s.c_str(), p.bytes.data()) == 1) {
    p.family = 4;
    return p;
  }
  if (::inet_pton(AF_INET6, s.c_str(), p.bytes.data()) == 1) {
    p.family = 6;
    return p;
  }
  return std::nullopt;
}

bool masked_equal(const Parsed& x, const Parsed& y, int prefix_len) {
  size_t n = x.family == 4 ? 4 : 16;
  int bits = std::clamp(prefix_len, 0, static_cast<int>(n * 8));
  for (size_t i = 0; i < n; ++i, bits -= 8) {
    uint8_t mask = bits >= 8 ? 0xff : bits <= 0 ? 0 : static_cast<uint8_t>(0xff << (8 - bits));
    if ((x.bytes[i] & mask) != (y.bytes[i] & mask)) return false;
  }
  return true;
}

int socket_family(const EnvMap& env) {
  const std::string* f = env_get(env, "NCCL_SOCKET_FAMILY");
  if (f == nullptr) return 0;
  if (*f == "AF_INET") return 4;
  if (*f == "AF_INET6") return 6;
  return 0;  // anything else: not forced
}

bool is_ipv6_loopback(const IfAddr& a) {
  return a.family == 6 && a.address == "::1";
}

NcclIf to_nccl_if(const IfAddr& a) {
  return NcclIf{a.name, a.address, a.family,
                a.loopback || is_ipv6_loopback(a) || a.address.rfind("127.", 0) == 0};
}

// ncclOsFindInterfaces: the matches of `spec`, first address per name, up to `max`.
std::vector<NcclIf> find_interfaces(const std::vector<IfAddr>& ifs, const nccl::List& spec,
                                    int family, int32_t version, size_t max) {
  std::vector<NcclIf> found;
  for (const IfAddr& a : ifs) {
    if (found.size() >= max) break;
    if (a.family != 4 && a.family != 6) continue;
    if (skips_not_running(version) && !a.running) continue;
    if (family != 0 && a.family != family) continue;
    if (is_ipv6_loopback(a)) continue;
    if (!nccl::list_matches(spec, a.name)) continue;
    bool seen =
        std::any_of(found.begin(), found.end(), [&a](const NcclIf& f) { return f.name == a.name; });
    if (!seen) found.push_back(to_nccl_if(a));
  }
  return found;
}

// The scope a "%if" names: the index of that interface, as if_nametoindex gives it;
// the scope of a global address is 0.
uint32_t scope_of(const std::vector<IfAddr>& ifs, const std::string& scope_if) {
  if (scope_if.empty()) return 0;
  for (const IfAddr& a : ifs) {
    if (a.name == scope_if && a.scope_id != 0) return a.scope_id;
  }
  return 0;
}

// ncclFindInterfaceMatchSubnet: the first entry (any flags, any family setting) in
// the remote address's subnet.
std::optional<NcclIf> match_subnet(const std::vector<IfAddr>& ifs, const std::string& remote,
                                   uint32_t remote_scope, int32_t version) {
  auto r = parse_address(remote);
  if (!r) return std::nullopt;
  for (const IfAddr& a : ifs) {
    auto l = parse_address(a.address);
    if (!l || l->family != r->family) continue;
    bool same = masked_equal(*l, *r, a.prefix_len);
    if (l->family == 4 && inverted_ipv4_subnet(version)) same = !same;
    if (l->family == 6) same = same && a.scope_id == remote_scope;
    if (same) return to_nccl_if(a);
  }
  return std::nullopt;
}

}  // namespace

std::optional<CommId> parse_comm_id(std::string_view id) {
  if (id.size() <= 1) return std::nullopt;
  CommId c;
  if (id.front() == '[') {
    size_t close = id.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    std::string_view inner = id.substr(1, close - 1);
    size_t pct = inner.rfind('%');
    c.host = std::string(inner.substr(0, pct));
    if (pct != std::string_view::npos) c.scope_if = std::string(inner.substr(pct + 1));
  } else {
    std::string_view entry = id.substr(0, id.find(','));
    c.host = std::string(entry.substr(0, entry.find(':')));
  }
  if (c.host.empty()) return std::nullopt;
  return c;
}

bool is_link_local_address(std::string_view address) {
  auto p = parse_address(address);
  if (!p) return false;
  if (p->family == 4) return p->bytes[0] == 169 && p->bytes[1] == 254;
  return p->bytes[0] == 0xfe && (p->bytes[1] & 0xc0) == 0x80;
}

NcclIfChoice choose_nccl_interfaces(const std::vector<IfAddr>& ifs, const NcclIfInput& in) {
  static const EnvMap kEmpty;
  const EnvMap& env = in.env != nullptr ? *in.env : kEmpty;
  const int32_t v = in.nccl_version;
  const int family = socket_family(env);
  NcclIfChoice c;
  c.rules_version = v;
  std::string family_note =
      family == 0 ? ""
                  : fmt::format(", NCCL_SOCKET_FAMILY={}", *env_get(env, "NCCL_SOCKET_FAMILY"));

  const std::string* comm_id = env_get(env, "NCCL_COMM_ID");
  std::optional<CommId> parsed_id = comm_id ? parse_comm_id(*comm_id) : std::nullopt;
  uint32_t id_scope = parsed_id ? scope_of(ifs, parsed_id->scope_if) : 0;
  auto subnet_of_id = [&]() -> std::optional<NcclIf> {
    if (!parsed_id || in.comm_id_address.empty()) return std::nullopt;
    return match_subnet(ifs, in.comm_id_address, id_scope, v);
  };

  // The socket transport (and, without NCCL_COMM_ID, bootstrap): ncclFindInterfaces.
  const std::string* ifname = env_get(env, "NCCL_SOCKET_IFNAME");
  std::string rule;
  if (ifname != nullptr && nccl::ifname_is_read(*ifname)) {
    c.socket = find_interfaces(ifs, nccl::parse_list(*ifname, kMaxIfs, v), family, v, kMaxIfs);
    rule = fmt::format("NCCL_SOCKET_IFNAME={}", *ifname);
  } else {
    std::vector<std::string_view> order = {"ib", "(comm id)", "^docker,lo", "docker", "lo"};
    if (virbr_last(v)) order = {"ib", "(comm id)", "^docker,lo,virbr", "docker", "lo", "virbr"};
    for (std::string_view step : order) {
      if (step == "(comm id)") {
        if (comm_id == nullptr || comm_id->size() <= 1) continue;
        if (auto m = subnet_of_id()) c.socket = {*m};
        rule = "default order: NCCL_COMM_ID's subnet";
      } else {
        c.socket = find_interfaces(ifs, nccl::parse_list(step, kMaxIfs, v), family, v, kMaxIfs);
        rule = fmt::format("default order: {}", step);
      }
      if (!c.socket.empty()) break;
    }
  }

  if (comm_id != nullptr) {
    // bootstrapNetInit: with NCCL_COMM_ID, bootstrap binds the interface in its
    // subnet and nothing else (NCCL_SOCKET_IFNAME does not apply).
    if (!parsed_id) {
      c.error = std::string(kBadCommId);
    } else if (in.comm_id_address.empty()) {
      c.error = fmt::format("{} ({} does not resolve)", kBadCommId, parsed_id->host);
    } else if (auto m = subnet_of_id()) {
      c.bootstrap = *m;
    } else {
      c.error = std::string(kNoSubnetInterface);
    }
    c.rule =
        fmt::format("NCCL_COMM_ID={}: the interface in {}'s subnet", *comm_id,
                    in.comm_id_address.empty() ? std::string("its address") : in.comm_id_address);
    if (inverted_ipv4_subnet(v)) c.rule += " (2.29's inverted subnet test: outside it)";
  } else {
    if (!c.socket.empty()) c.bootstrap = c.socket.front();
    if (!c.bootstrap) c.error = std::string(kNoInterface);
    c.rule = rule + family_note;
  }
  return c;
}

NcclIfFacts nccl_if_facts(const std::vector<IfAddr>& ifs, const NcclIfInput& in) {
  NcclIfChoice c = choose_nccl_interfaces(ifs, in);
  NcclIfFacts f;
  f.state = c.bootstrap ? NcclIfFacts::kFound : NcclIfFacts::kNone;
  if (c.bootstrap) {
    f.name = c.bootstrap->name;
    f.address = c.bootstrap->address;
    if (c.bootstrap->loopback) f.flags |= NcclIfFacts::kLoopback;
    if (is_link_local_address(c.bootstrap->address)) f.flags |= NcclIfFacts::kLinkScope;
  }
  if (!in.comm_id_address.empty()) {
    auto id = parse_address(in.comm_id_address);
    bool local = std::any_of(ifs.begin(), ifs.end(), [&id](const IfAddr& a) {
      auto p = parse_address(a.address);
      return id && p && p->family == id->family && p->bytes == id->bytes;
    });
    if (local) f.flags |= NcclIfFacts::kCommIdLocal;
  }
  f.rule = c.rule;
  f.error = c.error;
  std::vector<std::string> socket;
  for (const NcclIf& i : c.socket)
    socket.push_back(i.text());
  f.socket = std::move(socket);
  f.rules_version = c.rules_version;
  return f;
}

}  // namespace rankcheck
