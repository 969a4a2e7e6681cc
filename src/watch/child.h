#pragma once
// The command under watch as a child process: started with the environment the
// job was given, stdin inherited, stdout and stderr through pipes the wrapper reads,
// in a process group of its own (the terminal's foreground when there is one, as tini
// does), and every signal disposition back to the default.

#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/types.h>

#include "base/env.h"
#include "base/result.h"

namespace rankcheck {

class Child {
 public:
  Child() = default;
  Child(Child&& o) noexcept;
  Child& operator=(Child&& o) noexcept;
  ~Child();

  /// Starts `argv` (its first word found on PATH as a shell finds it) with `env` as its
  /// whole environment. `take_terminal`: when this process is the terminal's foreground,
  /// the command becomes it (one wrapper of a terminal; not the members of `local`,
  /// who share one). `nofile`: its open-file limit, when not this process's. An error names the
  /// command and the system's reason (a missing file, no permission) when it could not start.
  static Result<Child> spawn(const std::vector<std::string>& argv, const EnvMap& env,
                             bool take_terminal, const rlimit* nofile = nullptr);

  pid_t pid() const { return pid_; }
  /// The read ends of its stdout and stderr (-1 once closed).
  int out_fd() const { return out_; }
  int err_fd() const { return err_; }
  void close_out();
  void close_err();
  /// Sends `sig` to the child itself (a forwarded signal), or to its whole process group.
  void signal(int sig) const;
  void signal_group(int sig) const;

 private:
  pid_t pid_ = -1;
  int out_ = -1, err_ = -1;
};

/// A wait status as the shell reports it: the exit code, or 128 + the signal.
int shell_exit_code(int status);

}  // namespace rankcheck
