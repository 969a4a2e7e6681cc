// The file NCCL writes its words to in the GPU stage, made and read back.

#include "gpu/nccl_debug_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fcntl.h>
#include <fmt/format.h>
#include <strings.h>
#include <unistd.h>

namespace rankcheck {
namespace {

std::vector<std::string> split_lines(std::string_view data) {
  std::vector<std::string> lines;
  while (!data.empty()) {
    size_t nl = data.find('\n');
    lines.emplace_back(data.substr(0, nl));
    if (nl == std::string_view::npos) break;
    data.remove_prefix(nl + 1);
  }
  return lines;
}

std::string read_at(std::ifstream& in, std::streamoff from, size_t n) {
  std::string buf(n, '\0');
  in.seekg(from);
  in.read(buf.data(), static_cast<std::streamsize>(n));
  buf.resize(static_cast<size_t>(std::max<std::streamsize>(0, in.gcount())));
  return buf;
}

}  // namespace

std::vector<std::string> read_bounded_lines(const std::string& path, size_t max_bytes,
                                            size_t head_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  if (size < 0) return {};
  if (static_cast<size_t>(size) <= max_bytes) return split_lines(read_at(in, 0, size_t(size)));
  head_bytes = std::min(head_bytes, max_bytes);
  std::string head = read_at(in, 0, head_bytes);
  head.resize(head.rfind('\n') == std::string::npos ? 0 : head.rfind('\n') + 1);
  // One byte before the tail too: whether the tail starts at a line's start.
  size_t tail_bytes = max_bytes - head_bytes;
  std::string tail = read_at(in, size - std::streamoff(tail_bytes) - 1, tail_bytes + 1);
  size_t first = tail.find('\n');
  tail.erase(0, first == std::string::npos ? tail.size() : first + 1);
  std::vector<std::string> lines = split_lines(head);
  for (std::string& line : split_lines(tail))
    lines.push_back(std::move(line));
  return lines;
}

NcclDebugFile::NcclDebugFile(NcclDebugPlan plan, std::string* why, KeepForExit keep)
    : plan_(std::move(plan)), keep_(keep) {
  if (!plan_.users_file) {
    // Made here, private and new, before NCCL opens it: NCCL's fopen(path, "w")
    // follows a link that someone else could have left at a guessable name in /tmp.
    std::string name = plan_.path;
    int fd = ::mkostemps(name.data(), 4, O_CLOEXEC);
    if (fd < 0) {
      if (why != nullptr) {
        *why = fmt::format("cannot make a file for NCCL's messages ({}): {}", plan_.path,
                           std::strerror(errno));
      }
      return;
    }
    // Unlinked at once, so that nothing is left on disk however the process ends (a
    // SIGKILL too): NCCL opens it through this descriptor, and it is read back so.
    // Without /proc the name stays, removed at the end and by the watchdog's exit.
    std::string via = fmt::format("/proc/self/fd/{}", fd);
    if (::access(via.c_str(), R_OK | W_OK) == 0 && ::unlink(name.c_str()) == 0) {
      fd_ = fd;
      plan_.path = via;
    } else {
      ::close(fd);
      plan_.path = name;
      named_ = true;
      if (keep_ != nullptr) keep_(name);
    }
    plan_.set.emplace_back("NCCL_DEBUG_FILE", escape_nccl_debug_file(plan_.path));
  }
  // NCCL reads these once, at its first message (debug.cc ncclDebugInit), from the
  // process's environment: set before NCCL is loaded, they hold for the whole stage.
  // (A variable given in nccl.conf yields to the environment: ours win there.)
  for (const auto& [key, value] : plan_.set)
    ::setenv(key.c_str(), value.c_str(), 1);
  active_ = true;
}

NcclDebugFile::~NcclDebugFile() {
  if (fd_ >= 0) ::close(fd_);
  if (named_) {
    ::unlink(plan_.path.c_str());
    if (keep_ != nullptr) keep_("");
  }
}

std::vector<std::string> NcclDebugFile::read() const {
  if (!active_) return {};
  std::vector<std::string> lines = read_bounded_lines(plan_.path);
  if (!plan_.own_lines.empty()) {
    // This process's lines only: "host:pid:tid [dev] NCCL ...", perhaps after a time
    // stamp (NCCL_DEBUG_TIMESTAMP_FORMAT).
    const std::string& mine = plan_.own_lines;
    std::erase_if(lines, [&mine](const std::string& line) {
      size_t at = line.find(mine);
      return at == std::string::npos || (at > 0 && line[at - 1] != ' ');
    });
  }
  if (plan_.echo) {
    // As NCCL would have printed them (their own prefixes, its blank line before a
    // WARN), on stderr: stdout carries the report.
    for (const std::string& line : lines) {
      std::fwrite(line.data(), 1, line.size(), stderr);
      std::fputc('\n', stderr);
    }
    std::fflush(stderr);
  }
  return lines;
}

}  // namespace rankcheck
