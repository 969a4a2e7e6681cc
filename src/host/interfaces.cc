#include "host/interfaces.h"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/interrupt.h"

namespace rankcheck {

std::string local_host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "unknown";
  return buf;
}

std::vector<std::string> interfaces_with_address(const std::vector<IfAddr>& addresses) {
  std::set<std::string> names;
  for (const IfAddr& a : addresses)
    names.insert(a.name);
  return {names.begin(), names.end()};
}

namespace {

int prefix_length(const sockaddr* mask) {
  if (mask == nullptr) return 0;
  const uint8_t* b = nullptr;
  size_t n = 0;
  if (mask->sa_family == AF_INET) {
    b = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(mask)->sin_addr);
    n = 4;
  } else if (mask->sa_family == AF_INET6) {
    b = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr);
    n = 16;
  }
  int bits = 0;
  for (size_t i = 0; i < n; ++i)
    bits += __builtin_popcount(b[i]);
  return bits;
}

}  // namespace

std::vector<IfAddr> host_interfaces() {
  std::vector<IfAddr> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* p = list; p != nullptr; p = p->ifa_next) {
    if (p->ifa_addr == nullptr || p->ifa_name == nullptr) continue;
    int family = p->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    IfAddr a;
    a.name = p->ifa_name;
    a.family = family == AF_INET ? 4 : 6;
    char buf[INET6_ADDRSTRLEN] = {};
    if (family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(p->ifa_addr)->sin_addr, buf,
                  sizeof buf);
    } else {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(p->ifa_addr);
      ::inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof buf);
      a.scope_id = sin6->sin6_scope_id;
    }
    a.address = buf;
    a.prefix_len = prefix_length(p->ifa_netmask);
    a.running = (p->ifa_flags & IFF_RUNNING) != 0;
    a.loopback = (p->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(std::move(a));
  }
  ::freeifaddrs(list);
  return out;
}

HostView read_host_view() {
  return {host_interfaces(), network_namespace_id()};
}

std::string network_namespace_id() {
  struct stat st = {};
  if (::stat("/proc/self/ns/net", &st) != 0) return "";
  std::string boot;
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "re")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, f) != nullptr) boot = buf;
    std::fclose(f);
  }
  while (!boot.empty() && (boot.back() == '\n' || boot.back() == ' '))
    boot.pop_back();
  return fmt::format("{}/{}", boot, static_cast<unsigned long long>(st.st_ino));
}

}  // namespace rankcheck
