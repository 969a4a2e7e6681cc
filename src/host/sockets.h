#pragma once
// Whether a process tree has met the job's rendezvous: a TCP socket of one of its
// processes connected (or connecting) to MASTER_ADDR:MASTER_PORT, or listening on
// MASTER_PORT. torch's init_process_group opens exactly that (its TCPStore), on
// every version and with no logging on: the marker the job under watch has for
// "this rank began its init" when the command prints nothing.

#include <cstdint>
#include <string>
#include <vector>

#include <sys/types.h>

#include "host/procfs.h"

namespace rankcheck {

/// One TCP socket as /proc/net/tcp{,6} lists it.
struct TcpSocket {
  std::string local_addr, remote_addr;  ///< numeric ("10.0.0.1", "::1")
  uint16_t local_port = 0, remote_port = 0;
  int state = 0;  ///< the kernel's: 1 established, 2 syn-sent, 10 listen
  unsigned long inode = 0;
};
/// The sockets of one /proc/net/tcp or tcp6 text; lines that do not parse are left out.
std::vector<TcpSocket> parse_proc_net_tcp(const std::string& text, bool v6);

/// Whether `root` or a process below it holds a socket that meets `port` on one of
/// `addrs` (any address when empty): connected or connecting to it, or listening on
/// the port. Reads the network namespace `root` is in; false when /proc says nothing.
bool tree_meets_endpoint(const ProcFs& proc, pid_t root, const std::vector<std::string>& addrs,
                         uint16_t port);

}  // namespace rankcheck
