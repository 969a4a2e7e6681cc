// `rankcheck token [PATH]`: a fresh job token, for --token-file. Written to PATH
// (a new file, mode 0600, never over an existing one or through a link), or to
// stdout for a launcher that keeps it in a secret store of its own.

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include "app/cli.h"
#include "app/output.h"
#include "base/text.h"
#include "model/finding.h"
#include "protocol/auth.h"

namespace rankcheck::cli {
namespace {

int make_token(const std::string& path) {
  std::array<uint8_t, 32> raw{};
  if (auto ok = fill_random(raw); !ok) {
    Log::error("cannot make a token: " + ok.error().message);
    return exit_code::kInternal;
  }
  std::string text;
  for (uint8_t b : raw)
    text += fmt::format("{:02x}", b);
  text += '\n';
  if (path.empty() || path == "-") {
    std::fputs(text.c_str(), stdout);
    return std::fflush(stdout) == 0 ? exit_code::kPass : exit_code::kInternal;
  }
  int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
  if (fd < 0) {
    int e = errno;
    Log::error(fmt::format("cannot make the token file {}: {}{}", printable(path), std::strerror(e),
                           e == EEXIST ? " (a token file is never replaced: remove it, or pick "
                                         "another path)"
                                       : ""));
    return exit_code::kUsage;
  }
  bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  bool closed = ::close(fd) == 0;
  if (!written || !closed) {
    Log::error(
        fmt::format("cannot write the token file {}: {}", printable(path), std::strerror(errno)));
    ::unlink(path.c_str());
    return exit_code::kInternal;
  }
  return exit_code::kPass;
}

}  // namespace

Command add_token(CLI::App& root) {
  auto* app = root.add_subcommand(
      "token",
      "Make a job token: 32 random bytes as 64 hex digits, written to a new file of mode 0600 "
      "(or to stdout, without PATH or with -), for every process's --token-file");
  auto path = std::make_shared<std::string>();
  shown(app->add_option("path", *path, "The file to create; it must not exist"), "PATH");
  return {app, [path] { return make_token(*path); }};
}

}  // namespace rankcheck::cli
