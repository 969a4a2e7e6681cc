#pragma once
// The rehearsal of NCCL's connections: which host connects to which (a pure
// function of the hosts), what each connection found, and what that means (the
// nccl-path-blocked findings, grouped by host and direction). The prober and the
// answering side are in netpath_io.cc; the server runs the rehearsal.

#include <cstdint>
#include <string>
#include <vector>

#include <rankcheck/finding.h>

namespace rankcheck {

/// One connection to try: host `from` connects to host `to`'s listener.
struct PathEdge {
  uint32_t from = 0;
  uint32_t to = 0;
  auto operator<=>(const PathEdge&) const = default;
};

/// Up to this many hosts every ordered pair is tried.
inline constexpr size_t kAllPairsHosts = 64;

/// The connections NCCL's init makes between `hosts` hosts in rank order (host 0
/// holds rank 0), sorted and unique:
/// - host 0 to every host and every host to host 0 (NCCL's root connects back to
///   each rank on an ephemeral port, and each rank connects to the root);
/// - each host to the next and the previous one (the bootstrap ring);
/// - up to kAllPairsHosts hosts every pair; beyond, the double binary tree NCCL
///   builds over nodes (src/graph/trees.cc), both ways, and for each host
///   ceil(log2 hosts) others drawn with `seed`: O(log hosts) connections per host.
std::vector<PathEdge> rehearsal_plan(size_t hosts, uint64_t seed);

/// What one connection found.
enum class PathOutcome : uint8_t {
  kOk = 0,
  kTimeout = 1,      ///< no answer by the deadline (a firewall that drops)
  kRefused = 2,      ///< ECONNREFUSED (nothing listens, or a firewall that rejects)
  kUnreachable = 3,  ///< EHOSTUNREACH / ENETUNREACH: no route
  kSelf = 4,         ///< the prober's own host answered: an address every host has
  kWrongHost = 5,    ///< another host answered, or an answer without the job token
  kOther = 6,        ///< reset, closed, another errno
  kNotRun = 7,       ///< the prober sent no result (gone, or out of time itself)
  kDenied = 8,       ///< EPERM / EACCES: a firewall on the prober's own host
};
/// "timed out", "refused", "no route to host", ...
std::string_view outcome_text(PathOutcome o);

struct PathResult {
  PathEdge edge;
  PathOutcome outcome = PathOutcome::kNotRun;
  uint32_t connect_us = 0;  ///< time to the proven answer (or to the failure)
  std::string detail;       ///< strerror, or what answered
};

/// A host as the rehearsal names it.
struct PathHost {
  std::string name;
  std::string ifname;                 ///< the interface NCCL would use there
  std::string address;                ///< its address, which the listener was bound to
  uint16_t port_lo = 0, port_hi = 0;  ///< its ip_local_port_range
};

/// The findings of a rehearsal, initiating failures first: hosts nobody reaches
/// (inbound blocked), hosts that reach nobody (outbound blocked), hosts cut off
/// both ways, then the remaining failures as splits between groups of hosts.
std::vector<Finding> attribute_paths(const std::vector<PathHost>& hosts,
                                     const std::vector<PathResult>& results);

}  // namespace rankcheck
