#pragma once
// Which interface NCCL will use on this host: NCCL's own selection rules
// (ncclFindInterfaces, bootstrapNetInit) as a pure function of an interface list,
// the effective NCCL_* settings and the NCCL version the host loads. And where
// those settings come from: NCCL also reads NCCL_CONF_FILE (or ~/.nccl.conf) and
// /etc/nccl.conf, under the environment.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"

namespace rankcheck {

/// One getifaddrs entry (IPv4 or IPv6), in getifaddrs order: NCCL keeps the first
/// address of each name, so the order is part of the input.
struct IfAddr {
  std::string name;
  int family = 4;         ///< 4 or 6
  std::string address;    ///< numeric, without a scope ("fe80::1", not "fe80::1%eth0")
  int prefix_len = 0;     ///< the netmask, as a prefix length
  uint32_t scope_id = 0;  ///< IPv6 link scope (the interface index), 0 for global
  bool running = true;    ///< IFF_RUNNING
  bool loopback = false;  ///< IFF_LOOPBACK
};

/// An interface NCCL would use, with the one address it would use on it.
struct NcclIf {
  std::string name;
  std::string address;
  int family = 4;
  bool loopback = false;

  /// "eth1 198.18.1.2"
  std::string text() const { return name + " " + address; }
};

/// What NCCL's rules pick on one host.
struct NcclIfChoice {
  std::optional<NcclIf> bootstrap;  ///< bootstrap, the NET/IB out-of-band socket, the proxy
  std::vector<NcclIf> socket;       ///< the NET/Socket transport: every match, up to 16
  std::string rule;                 ///< how: "NCCL_SOCKET_IFNAME=eth1", "default order: ib"
  std::string error;                ///< NCCL's own words when it finds nothing for bootstrap
  int32_t rules_version = 0;        ///< the NCCL version whose rules applied; 0: the newest
};

/// NCCL_SOCKET_IFNAME and NCCL's built-in orders are read with NCCL's list grammar
/// (nccl/list.h), at most nccl::kMaxIfs entries; interface matching ignores
/// an entry's ":port".

/// NCCL_COMM_ID as NCCL parses it: "<ipv4|host>:<port>" or "[<ipv6>%if]:<port>".
struct CommId {
  std::string host;      ///< "10.0.0.1", "gpu-01", "fe80::1"
  std::string scope_if;  ///< the interface after '%' of a link-scope IPv6 address
};
/// nullopt when NCCL would refuse its form ("Invalid NCCL_COMM_ID").
std::optional<CommId> parse_comm_id(std::string_view comm_id);

/// What the rules read besides the interfaces.
struct NcclIfInput {
  const EnvMap* env = nullptr;  ///< the effective NCCL_* values (environment, then conf files)
  int32_t nccl_version = 0;     ///< ncclGetVersion of the library the host loads; 0: unknown
  /// NCCL_COMM_ID's host as NCCL resolves it (numeric); empty when unset or unresolved.
  std::string comm_id_address;
};

/// NCCL's interface choice for this host, per the rules of `in.nccl_version`
/// (the newest rules when it is 0):
/// - NCCL_SOCKET_IFNAME longer than one character selects (find or fail);
/// - else the default order: "ib", then (with NCCL_COMM_ID) the interface in its
///   subnet, then "^docker,lo" ("^docker,lo,virbr" from 2.28), "docker", "lo"
///   (then "virbr" from 2.28);
/// - from 2.28 interfaces without IFF_RUNNING are skipped; IPv6 loopback always;
/// - only the first address of a name counts; NCCL_SOCKET_FAMILY (exactly
///   "AF_INET" or "AF_INET6") filters;
/// - with NCCL_COMM_ID set, bootstrap takes only the interface in its subnet
///   (2.29.x inverted that test for IPv4: it took the first one outside it).
NcclIfChoice choose_nccl_interfaces(const std::vector<IfAddr>& ifs, const NcclIfInput& in);

struct NcclIfFacts;
/// The choice as a record carries it (record.h): the bootstrap interface, the
/// socket transport's list, and whether NCCL_COMM_ID names one of `ifs`' addresses.
NcclIfFacts nccl_if_facts(const std::vector<IfAddr>& ifs, const NcclIfInput& in);

/// Whether `address` is IPv4 link-local (169.254/16) or IPv6 link-local (fe80::/10).
bool is_link_local_address(std::string_view address);
}  // namespace rankcheck
