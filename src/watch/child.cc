#include "watch/child.h"

#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

namespace rankcheck {
namespace {

// In the child, between fork and exec: only async-signal-safe calls.
[[noreturn]] void exec_child(char* const* argv, char* const* envp, int out_w, int err_w,
                             int report_w, const sigset_t& mask, bool take_terminal,
                             const rlimit* nofile) {
  ::setpgid(0, 0);
  if (nofile != nullptr) ::setrlimit(RLIMIT_NOFILE, nofile);
  // With a terminal, the command is its foreground, as it would be without the
  // wrapper: Ctrl-C reaches it (and not the wrapper twice), and it may read stdin.
  if (take_terminal) {
    ::signal(SIGTTOU, SIG_IGN);
    ::tcsetpgrp(0, ::getpid());
  }
  // Every disposition back to the default: an ignored signal stays ignored across
  // exec, and rankcheck ignores SIGPIPE (a pipeline in the command must not).
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
  ::dup2(out_w, 1);
  ::dup2(err_w, 2);
  if (out_w != 1 && out_w != 2) ::close(out_w);
  if (err_w != 1 && err_w != 2) ::close(err_w);
  ::execvpe(argv[0], argv, envp);
  int err = errno;
  [[maybe_unused]] ssize_t n = ::write(report_w, &err, sizeof err);
  ::_exit(err == ENOENT ? 127 : 126);
}

}  // namespace

Child::Child(Child&& o) noexcept : pid_(o.pid_), out_(o.out_), err_(o.err_) {
  o.pid_ = -1;
  o.out_ = o.err_ = -1;
}

Child& Child::operator=(Child&& o) noexcept {
  if (this != &o) {
    close_out();
    close_err();
    pid_ = std::exchange(o.pid_, -1);
    out_ = std::exchange(o.out_, -1);
    err_ = std::exchange(o.err_, -1);
  }
  return *this;
}

Child::~Child() {
  close_out();
  close_err();
}

void Child::close_out() {
  if (out_ >= 0) ::close(out_);
  out_ = -1;
}

void Child::close_err() {
  if (err_ >= 0) ::close(err_);
  err_ = -1;
}

void Child::signal(int sig) const {
  if (pid_ > 0) ::kill(pid_, sig);
}

void Child::signal_group(int sig) const {
  if (pid_ > 0) ::kill(-pid_, sig);
}

Result<Child> Child::spawn(const std::vector<std::string>& argv, const EnvMap& env,
                           bool take_terminal, const rlimit* nofile) {
  if (argv.empty()) return Error{"no command to run"};
  take_terminal = take_terminal && ::isatty(0) == 1 && ::tcgetpgrp(0) == ::getpgrp();
  // Made before the fork: the child may only call what is async-signal-safe.
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> pairs;
  for (const auto& [k, v] : env)
    pairs.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& p : pairs)
    envp.push_back(p.data());
  envp.push_back(nullptr);

  std::array<int, 2> out{-1, -1}, err{-1, -1}, report{-1, -1};
  auto close_all = [&] {
    for (int fd : {out[0], out[1], err[0], err[1], report[0], report[1]})
      if (fd >= 0) ::close(fd);
  };
  if (::pipe2(out.data(), O_CLOEXEC) != 0 || ::pipe2(err.data(), O_CLOEXEC) != 0 ||
      ::pipe2(report.data(), O_CLOEXEC) != 0) {
    int e = errno;
    close_all();
    return Error{fmt::format("cannot start {}: pipe: {}", argv[0], std::strerror(e))};
  }
  // The signals the wrapper handles are blocked across the fork, so that none runs
  // its handler in the child; the child restores the mask the wrapper started with.
  sigset_t all, before;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, &before);
  pid_t pid = ::fork();
  if (pid == 0)
    exec_child(args.data(), envp.data(), out[1], err[1], report[1], before, take_terminal, nofile);
  int fork_err = errno;
  ::sigprocmask(SIG_SETMASK, &before, nullptr);
  ::close(out[1]);
  ::close(err[1]);
  ::close(report[1]);
  out[1] = err[1] = report[1] = -1;
  if (pid < 0) {
    close_all();
    return Error{fmt::format("cannot start {}: fork: {}", argv[0], std::strerror(fork_err))};
  }
  // Set here too: whichever of parent and child runs first, the group exists before
  // the wrapper signals it.
  ::setpgid(pid, pid);
  // The report pipe closes on a successful exec, or carries the exec's errno.
  int exec_err = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &exec_err, sizeof exec_err);
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  report[0] = -1;
  Child c;
  c.pid_ = pid;
  c.out_ = out[0];
  c.err_ = err[0];
  if (n == static_cast<ssize_t>(sizeof exec_err)) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    c.pid_ = -1;
    return Error{fmt::format("cannot run {}: {}", argv[0], std::strerror(exec_err)),
                 exec_err == ENOENT ? Fault::kNone : Fault::kDenied};
  }
  return c;
}

int shell_exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace rankcheck
