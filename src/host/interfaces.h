#pragma once
// This host's network as NCCL's rules read it: its name, its interfaces and
// addresses, and the network stack the process runs in.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nccl/socket_if.h"

namespace rankcheck {

/// This host's name (gethostname), or "unknown".
std::string local_host_name();
/// Every IPv4 and IPv6 address of this host in getifaddrs order, with its
/// interface's flags: what NCCL's interface rules read (nccl/socket_if.h).
std::vector<IfAddr> host_interfaces();
/// Names of the interfaces among `addresses` (host_interfaces()), sorted, unique.
std::vector<std::string> interfaces_with_address(const std::vector<IfAddr>& addresses);
/// This process's network stack: the kernel's boot id and the inode of its
/// network namespace ("<boot id>/<inode>"), "" when /proc does not say.
std::string network_namespace_id();

/// What every process in one network namespace of a host sees alike: read once by
/// `rankcheck local` before it forks its members, instead of once by each of them.
struct HostView {
  std::vector<IfAddr> interfaces;  ///< host_interfaces()
  std::string netns;               ///< network_namespace_id()
};
HostView read_host_view();

}  // namespace rankcheck
