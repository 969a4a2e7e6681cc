#include "host/procfs.h"

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

namespace rankcheck {

std::optional<long> ProcFs::somaxconn() const {
  // Read by every member before it connects: one read(2), no stream machinery.
  int fd = ::open((root + "/sys/net/core/somaxconn").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[32];
  ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  long backlog = 0;
  if (n <= 0 || std::from_chars(buf, buf + n, backlog).ec != std::errc()) return std::nullopt;
  return backlog;
}

ProcFs::Memory ProcFs::self_memory() const {
  Memory m;
  std::ifstream status(root + "/self/status");
  for (std::string line; std::getline(status, line);) {
    long* slot = line.starts_with("VmHWM:")   ? &m.peak_kib
                 : line.starts_with("VmRSS:") ? &m.rss_kib
                                              : nullptr;
    if (slot != nullptr) *slot = std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return m;
}

std::string ProcFs::nvidia_version_banner() const {
  std::ifstream in(root + "/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return "";
  return line;
}

ProcessFacts process_facts(const ProcFs& proc) {
  ProcessFacts f;
  if (rlimit lim{}; ::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    f.files_soft = lim.rlim_cur == RLIM_INFINITY ? -1 : long(lim.rlim_cur);
    f.files_hard = lim.rlim_max == RLIM_INFINITY ? -1 : long(lim.rlim_max);
  }
  ProcFs::Memory memory = proc.self_memory();
  f.rss_kib = memory.rss_kib;
  f.peak_kib = memory.peak_kib;
  return f;
}

}  // namespace rankcheck
