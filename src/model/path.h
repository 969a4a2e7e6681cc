#pragma once
// The rehearsal of NCCL's connections as data that travels: a connection to try
// (in the master's plan), and what it found (in a member's report). The plan
// itself and what its results mean are rehearsal/plan.h; the probing,
// rehearsal/probe.h.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace rankcheck {

/// One connection to try: host `from` connects to host `to`'s listener.
struct PathEdge {
  uint32_t from = 0;
  uint32_t to = 0;
  auto operator<=>(const PathEdge&) const = default;
};

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
  kFlooded = 9,      ///< the listener was reached, but too busy with unproven connections
};
/// "timed out", "refused", "no route to host", ...
std::string_view outcome_text(PathOutcome o);

struct PathResult {
  PathEdge edge;
  PathOutcome outcome = PathOutcome::kNotRun;
  uint32_t connect_us = 0;  ///< time to the proven answer (or to the failure)
  std::string detail;       ///< strerror, or what answered
};

/// One connection the prober makes.
struct PathTarget {
  uint32_t host = 0;    ///< index in the master's host list
  std::string address;  ///< numeric, as the listener bound it
  std::string ifname;   ///< for an IPv6 link-local address
  uint16_t port = 0;
  std::string identity;  ///< what the right host answers
  /// The master's ticket for this one question: a fresh nonce, and with a job token
  /// a MAC over it and `identity` (kPathTicketLabel) that the listener checks
  /// before it answers. Zeros where there is no token.
  std::array<uint8_t, 16> nonce{};
  std::array<uint8_t, 32> ticket{};
};

/// A host as the rehearsal names it.
struct PathHost {
  std::string name;
  std::string ifname;                 ///< the interface NCCL would use there
  std::string address;                ///< its address, which the listener was bound to
  uint16_t port_lo = 0, port_hi = 0;  ///< its ip_local_port_range
};

}  // namespace rankcheck
