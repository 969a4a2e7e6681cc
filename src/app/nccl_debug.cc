// NCCL's own words in the GPU stage: where NCCL writes them, and reading them back.

#include "app/nccl_debug.h"

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

#include "app/watchdog.h"

namespace rankcheck {
namespace {

// The subsystems NCCL 2.28 logs at INFO when NCCL_DEBUG_SUBSYS is unset (debug.cc:
// INIT, BOOTSTRAP, ENV), and NET with them: "Using network IB" is an INIT line, and
// NET's say which device ("NET/IB : Using [0]mlx5_0:1/IB").
constexpr const char* kUsersSubsys = "INIT,BOOTSTRAP,ENV,NET";
// Ours, where the level is ours too: the network's choice and init, nothing more.
constexpr const char* kOwnSubsys = "INIT,NET";

const std::string* given(const EnvMap& env, std::string_view key) {
  const std::string* v = env_get(env, key);
  return v != nullptr && !v->empty() ? v : nullptr;
}

// A path as an NCCL_DEBUG_FILE value: NCCL expands '%', so a literal one is doubled.
std::string escape_percent(std::string_view path) {
  std::string out;
  for (char c : path) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

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

std::string expand_nccl_debug_file(std::string_view pattern, std::string_view host, long pid) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    char c = pattern[++i];
    if (c == '%') {
      out += '%';
    } else if (c == 'h') {
      out += host;
    } else if (c == 'p') {
      out += std::to_string(pid);
    } else {
      out += '%';
      out += c;
    }
  }
  return out;
}

NcclDebugPlan nccl_debug_plan(const EnvMap& env, std::string_view host, long pid) {
  NcclDebugPlan plan;
  const std::string* level = given(env, "NCCL_DEBUG");
  if (level == nullptr) plan.set.emplace_back("NCCL_DEBUG", "INFO");
  std::string lv = level != nullptr ? *level : "INFO";
  bool info = ::strcasecmp(lv.c_str(), "INFO") == 0 || ::strcasecmp(lv.c_str(), "TRACE") == 0;
  if (info && given(env, "NCCL_DEBUG_SUBSYS") == nullptr) {
    plan.set.emplace_back("NCCL_DEBUG_SUBSYS", level != nullptr ? kUsersSubsys : kOwnSubsys);
  }
  // The user's file counts only with the user's level: without NCCL_DEBUG, NCCL
  // would have written nothing there, and nothing is written there now.
  const std::string* file = given(env, "NCCL_DEBUG_FILE");
  if (level != nullptr && file != nullptr) {
    plan.path = expand_nccl_debug_file(*file, host, pid);
    plan.users_file = true;
    return plan;
  }
  const std::string* tmp = given(env, "TMPDIR");
  plan.path = fmt::format("{}/rankcheck-nccl-{}-XXXXXX.log", tmp != nullptr ? *tmp : "/tmp", pid);
  plan.echo = level != nullptr;
  return plan;
}

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

NcclDebugFile::NcclDebugFile(NcclDebugPlan plan, std::string* why) : plan_(std::move(plan)) {
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
      remove_at_watchdog_exit(name);
    }
    plan_.set.emplace_back("NCCL_DEBUG_FILE", escape_percent(plan_.path));
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
    remove_at_watchdog_exit("");
  }
}

diagnose::NcclWords NcclDebugFile::read() const {
  if (!active_) return {};
  std::vector<std::string> lines = read_bounded_lines(plan_.path);
  if (plan_.echo) {
    // As NCCL would have printed them (their own prefixes, its blank line before a
    // WARN), on stderr: stdout carries the report.
    for (const std::string& line : lines) {
      std::fwrite(line.data(), 1, line.size(), stderr);
      std::fputc('\n', stderr);
    }
    std::fflush(stderr);
  }
  return diagnose::read_nccl_words(lines);
}

}  // namespace rankcheck
