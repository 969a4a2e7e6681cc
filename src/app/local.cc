// `rankcheck local -n N`: a process supervisor. This process is rank 0 and hosts
// the master; it starts N-1 members of itself on loopback, with a job token of
// their own, and reaps them by the deadline.

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/master_run.h"
#include "app/output.h"
#include "app/run.h"
#include "app/session.h"
#include "base/interrupt.h"
#include "host/interfaces.h"
#include "host/sysfs_ib.h"
#include "identity/identity.h"
#include "protocol/auth.h"

namespace rankcheck {
namespace {

// A job token made for `rankcheck local`: it lives in this process and in a pipe
// per member, never in a file, so that nothing is left behind however the run
// ends (the watchdog's _exit, a SIGKILL).
Result<std::string> make_secret() {
  std::array<uint8_t, 32> secret{};
  if (auto ok = fill_random(secret); !ok) {
    return Error{fmt::format("cannot make a job token: {}", ok.error().message)};
  }
  std::string hex;
  for (uint8_t b : secret)
    hex += fmt::format("{:02x}", b);
  return hex;
}

// A pipe holding the token, its write end closed: the read end, for one member.
Result<int> token_pipe(const std::string& secret) {
  std::array<int, 2> fds{};
  if (::pipe2(fds.data(), O_CLOEXEC) != 0) {
    return Error{fmt::format("cannot make a pipe for the job token: {}", std::strerror(errno))};
  }
  // 64 bytes: far below the pipe's buffer, so the write never waits.
  bool written =
      ::write(fds[1], secret.data(), secret.size()) == static_cast<ssize_t>(secret.size());
  int err = errno;
  ::close(fds[1]);
  if (!written) {
    ::close(fds[0]);
    return Error{fmt::format("cannot write the job token into a pipe: {}", std::strerror(err))};
  }
  return fds[0];
}

}  // namespace

namespace {

// One word of rank 0's from `start_fd`, by `end`: its port once its socket listens,
// then "go" once its master accepts. nullopt when the pipe closes first (the master
// never started) or time runs out. A byte at a time: what follows is the next word.
std::optional<std::string> read_word(int start_fd, Deadline end) {
  std::string word;
  for (;;) {
    pollfd p{start_fd, POLLIN, 0};
    int n = ::poll(&p, 1, end.poll_ms(Millis(1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 && !end.expired()) continue;
    char c = 0;
    ssize_t got = n > 0 ? ::read(start_fd, &c, 1) : 0;
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return std::nullopt;
    if (c == '\n') return word;
    if (word.size() >= 16) return std::nullopt;
    word += c;
  }
}

// A member of `rankcheck local`: a fork of this process, made before it starts any
// thread (so no lock is held in the copy) and before the master's socket exists (so
// no member ever holds it). It reads the master's port from `start_fd` as soon as
// rank 0 listens, then runs as `rankcheck run` would: the same code on the same
// options, without the exec, the dynamic loader and the page faults of a fresh
// process (most of a member's cost on a small machine). It reads its own facts while
// rank 0 readies its server, and meets the master on rank 0's "go" (`start_fd` closed
// without a word: the master never started).
[[noreturn]] void member_child(int start_fd, const RunOptions& o, const EnvMap& env, Deadline end,
                               const HostView* host);

// How long rank 0 gives its own MASTER_ADDR (127.0.0.1) to resolve.
constexpr Millis kLocalResolve{2000};
// A member started with less time than this is given this much.
constexpr Millis kMemberMinTime{500};
// Member exits that differ from the verdict named on stderr, at most.
constexpr int kOddExitsShown = 4;

[[noreturn]] void member_child(int start_fd, const RunOptions& o, const EnvMap& env, Deadline end,
                               const HostView* host) {
  std::optional<std::string> port = read_word(start_fd, end);
  unsigned number = 0;
  if (!port || port->empty() ||
      std::from_chars(port->data(), port->data() + port->size(), number).ec != std::errc() ||
      number == 0 || number > 65535) {
    ::_exit(exit_code::kInternal);  // the master gave up before it listened
  }
  EnvMap e = env;
  e["MASTER_PORT"] = *port;
  // The process's own environment too: NCCL and CUDA read theirs, not this map.
  ::clearenv();
  for (const auto& [key, value] : e)
    ::setenv(key.c_str(), value.c_str(), 1);
  int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, report_fd());
    ::close(null);
  }
  RunOptions mo = o;
  // Ends by the same deadline as rank 0.
  mo.timeout_s =
      double(std::max<long>(kMemberMinTime.count(), static_cast<long>(end.remaining().count()))) /
      1000.0;
  mo.before_join = [start_fd, end] {
    std::optional<std::string> word = read_word(start_fd, end);
    ::close(start_fd);
    return word == "go";
  };
  int code = run_process(mo, e, host);
  std::fflush(nullptr);
  ::_exit(code);
}

// A usage error in `local`'s options, said; nullopt when they are fine.
std::optional<int> check_local_options(const LocalOptions& lo) {
  const RunOptions& o = lo.run;
  if (lo.nprocs < 1 || lo.nprocs > 1024) {
    Log::error(fmt::format("-n {}: rankcheck local runs 1 to 1024 members", lo.nprocs));
    return exit_code::kUsage;
  }
  // Each member takes the GPU of its LOCAL_RANK: one --device for all of them would
  // put rank 0 on a GPU a member also takes, a duplicate-gpu of the check's making.
  if (o.device) {
    Log::error(fmt::format(
        "--device {}: rankcheck local gives each member the GPU of its local rank; restrict "
        "the GPUs with CUDA_VISIBLE_DEVICES instead",
        *o.device));
    return exit_code::kUsage;
  }
  if (o.token_fd) {
    Log::error(
        "--token-fd: rankcheck local hands its members a token itself; give it one with "
        "--token-file");
    return exit_code::kUsage;
  }
  return std::nullopt;
}

// The job `local` runs: its id, and the environment each member gets (rank 0's too).
struct LocalJob {
  std::string job_id;
  EnvMap child_env;
  int nprocs = 1;
  EnvMap member_env(int rank, const std::string& port) const {
    EnvMap e = child_env;
    e["RANK"] = e["LOCAL_RANK"] = std::to_string(rank);
    e["WORLD_SIZE"] = e["LOCAL_WORLD_SIZE"] = std::to_string(nprocs);
    e["MASTER_ADDR"] = "127.0.0.1";
    if (!port.empty()) e["MASTER_PORT"] = port;
    return e;
  }
};

// A job on one machine still authenticates: a token of its own unless one is given,
// handed to each member through a pipe (`secret`), or the file the members read.
struct LocalToken {
  std::optional<JobToken> token;
  std::string secret;                     ///< the token made here; "" when one was given
  std::optional<std::string> token_file;  ///< the given one's file, for the members
};

// `given`: the token --token-file or RANKCHECK_TOKEN_FILE gives, if one does.
Result<LocalToken> local_token(std::optional<JobToken> given, const RunOptions& o,
                               const EnvMap& env) {
  LocalToken t{std::move(given), "", o.token_file};
  if (!t.token) {
    auto made = make_secret();
    if (!made) return made.error();
    t.secret = std::move(*made);
    t.token = JobToken::from_secret(t.secret);
  }
  const std::string* env_file = env_get(env, "RANKCHECK_TOKEN_FILE");
  if (!t.token_file && t.secret.empty() && env_file != nullptr) t.token_file = *env_file;
  return t;
}

// What each member runs with: `local`'s options that a member needs, quiet.
RunOptions member_options(const RunOptions& o, const LocalJob& job, const LocalToken& t) {
  RunOptions mo;
  mo.flags.job_id = job.job_id;
  mo.host_name = o.host_name;
  mo.handshake_timeout_s = o.handshake_timeout_s;
  mo.no_gpu = o.no_gpu;
  // Every member runs on rank 0's machine: a host relay would be one more hop to it,
  // a thread and a socket more in one member (a millisecond of an 8-member check).
  mo.no_relay = true;
  mo.nccl_roots_every = o.nccl_roots_every;
  mo.nccl_lib = o.nccl_lib;
  mo.bandwidth_bytes = o.bandwidth_bytes;
  mo.quiet = true;
  mo.token_file = t.secret.empty() ? t.token_file : std::nullopt;
  // A --json path with {rank} in it is one report per member, as under a launcher.
  if (o.json_path.find("{rank}") != std::string::npos) mo.json_path = o.json_path;
  return mo;
}

struct Child {
  pid_t pid;
  int start_fd;  // the write end of its start pipe; -1 once written or closed
};

// The members, forked now: this process has no thread yet. Each waits on its start
// pipe for the master's port, then for its "go"; a pipe closed unwritten sends it home.
std::vector<Child> fork_members(const LocalJob& job, const RunOptions& mo, const LocalToken& t,
                                const HostView& host, Deadline end) {
  std::vector<Child> children;
  std::fflush(nullptr);  // nothing buffered here is written again by a child
  for (int k = 1; k < job.nprocs; ++k) {
    std::array<int, 2> start{-1, -1};
    int token_fd = -1;
    if (::pipe2(start.data(), O_CLOEXEC) != 0) {
      Log::error(fmt::format("cannot start member {}: pipe: {}", k, std::strerror(errno)));
      continue;
    }
    if (!t.secret.empty()) {
      auto fd = token_pipe(t.secret);
      if (!fd) {
        Log::error(fmt::format("cannot start member {}: {}", k, fd.error().message));
        ::close(start[0]);
        ::close(start[1]);
        continue;
      }
      token_fd = *fd;
    }
    pid_t pid = ::fork();
    if (pid == 0) {
      for (const Child& c : children)
        ::close(c.start_fd);  // only the master's process may hold another member's pipe
      ::close(start[1]);
      RunOptions mine = mo;
      if (token_fd >= 0) mine.token_fd = token_fd;
      member_child(start[0], mine, job.member_env(k, ""), end, &host);
    }
    int err = errno;
    ::close(start[0]);
    if (token_fd >= 0) ::close(token_fd);
    if (pid < 0) {
      ::close(start[1]);
      Log::error(fmt::format("cannot start member {}: fork: {}", k, std::strerror(err)));
      continue;
    }
    children.push_back({pid, start[1]});
  }
  return children;
}

// Once rank 0's socket listens: each member is told its port, and reads its own facts
// while rank 0 readies its server.
void tell_port(const std::vector<Child>& children, uint16_t port) {
  std::string line = fmt::format("{}\n", port);
  for (const Child& c : children) {
    // A few bytes into an empty pipe: the write never waits.
    if (::write(c.start_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      Log::error(fmt::format("cannot start member pid {}: {}", c.pid, std::strerror(errno)));
    }
  }
}

// Once the master accepts: each member is told to meet it.
void start_members(std::vector<Child>& children) {
  for (Child& c : children) {
    // A few bytes into an empty pipe: the write never waits.
    if (::write(c.start_fd, "go\n", 3) != 3) {
      Log::error(fmt::format("cannot start member pid {}: {}", c.pid, std::strerror(errno)));
    }
    ::close(c.start_fd);
    c.start_fd = -1;
  }
}

// The master's socket on 127.0.0.1 at `port` (0: a free one), made once the members
// are forked (no member ever holds it): returns it and its port.
Result<std::pair<int, uint16_t>> listen_on_loopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Error{fmt::format("socket: {}", std::strerror(errno))};
  int one = 1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  socklen_t len = sizeof a;
  bool ok = ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
            ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
            ::listen(fd, SOMAXCONN) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  int err = errno;
  if (!ok) {
    ::close(fd);
    return Error{fmt::format("cannot listen on 127.0.0.1:{}: {}", port, std::strerror(err))};
  }
  return std::pair{fd, ntohs(a.sin_port)};
}

// Members the master never started go home (their pipe closes unwritten); the rest
// are reaped, and any still running past the deadline killed. The wait starts short:
// members end within a millisecond of rank 0's verdict. Exits that differ from the
// job's verdict `code` are named.
void reap_members(std::vector<Child>& children, const Timeline& time, std::optional<int> code,
                  const Log& log) {
  bool started = true;
  for (Child& c : children) {
    if (c.start_fd >= 0) {
      ::close(c.start_fd);
      c.start_fd = -1;
      started = false;
    }
  }
  Deadline reap_by = time.reap_by();
  int odd = 0;
  for (const Child& c : children) {
    int status = 0;
    auto pause = std::chrono::microseconds(50);
    while (::waitpid(c.pid, &status, WNOHANG) == 0) {
      if (reap_by.expired()) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, Millis(5));
    }
    int child_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (started && code && *code != exit_code::kUsage && child_code != *code &&
        ++odd <= kOddExitsShown) {
      log.error(fmt::format("member pid {} exited with {}, the job's verdict is {}", c.pid,
                            child_code, *code));
    }
  }
}

// A free port on loopback for a job whose members each run `run -- CMD`: the check's
// master binds it first, then the command's rank 0 (its TCPStore).
Result<uint16_t> free_loopback_port() {
  auto listener = listen_on_loopback(0);
  if (!listener) return Error{"no free port: " + listener.error().message};
  ::close(listener->first);
  return listener->second;
}

// One member of `local -n N -- CMD`: `run -- CMD` with its rank's environment. A
// member other than rank 0 keeps quiet (its words to /dev/null) but its command's
// output is the job's.
[[noreturn]] void watched_child(int k, const RunOptions& mo, const EnvMap& e,
                                const HostView& host) {
  RunOptions mine = mo;
  if (k > 0) {
    mine.watch.command_stdout = ::fcntl(report_fd(), F_DUPFD_CLOEXEC, 3);
    int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) {
      ::dup2(null, report_fd());
      ::close(null);
    }
  }
  ::clearenv();
  for (const auto& [key, value] : e)
    ::setenv(key.c_str(), value.c_str(), 1);
  int code = run_process(mine, e, &host);
  std::fflush(nullptr);
  ::_exit(code);
}

// `local -n N -- CMD`: every member, rank 0 too, is a child running `run -- CMD` on
// loopback, each its own check and wrapper, as on a cluster. This process starts them,
// passes signals on, reaps them when their commands end, and exits with rank 0's code.
int run_local_watched(const LocalOptions& lo, const LocalJob& job, const LocalToken& t,
                      const HostView& host) {
  const RunOptions& o = lo.run;
  std::string port = o.flags.master_port.value_or("");
  if (port.empty()) {
    auto p = free_loopback_port();
    if (!p) {
      Log::error(p.error().message);
      return exit_code::kInternal;
    }
    port = std::to_string(*p);
  }
  RunOptions members = member_options(o, job, t);
  members.watch = o.watch;
  members.watch.take_terminal = false;
  RunOptions rank0 = o;
  rank0.flags = Flags{};
  rank0.flags.job_id = job.job_id;
  rank0.token_file = members.token_file;
  rank0.watch.take_terminal = false;
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int k = 0; k < job.nprocs; ++k) {
    int token_fd = -1;
    if (!t.secret.empty()) {
      auto fd = token_pipe(t.secret);
      if (!fd) {
        Log::error(fmt::format("cannot start member {}: {}", k, fd.error().message));
        continue;
      }
      token_fd = *fd;
    }
    pid_t pid = ::fork();
    if (pid == 0) {
      RunOptions mine = k == 0 ? rank0 : members;
      if (token_fd >= 0) mine.token_fd = token_fd;
      watched_child(k, mine, job.member_env(k, port), host);
    }
    if (token_fd >= 0) ::close(token_fd);
    if (pid < 0) {
      Log::error(fmt::format("cannot start member {}: fork: {}", k, std::strerror(errno)));
      continue;
    }
    pids.push_back(pid);
  }
  install_interrupt_handlers();
  int rank0_code = exit_code::kInternal;
  int first_failure = 0;
  bool forwarded = false;
  // No deadline: the members end when their commands do (or their checks, by theirs).
  for (size_t left = pids.size(); left > 0;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0) break;
    if (pid == 0) {
      pollfd p{interrupt_fd(), POLLIN, 0};
      ::poll(&p, interrupt_fd() >= 0 ? 1 : 0, 100);
      if (interrupted() && !forwarded) {
        forwarded = true;
        for (pid_t c : pids)
          ::kill(c, interrupted());
      }
      continue;
    }
    --left;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (pid == pids.front()) {
      rank0_code = code;
    } else if (code != 0 && first_failure == 0) {
      first_failure = code;
    }
  }
  // As a launcher says it: rank 0's code, or where rank 0 passed, the first member's
  // failure (torchrun too fails a job when any worker failed).
  return rank0_code != 0 ? rank0_code : first_failure;
}

}  // namespace

int run_local(const LocalOptions& lo, const EnvMap& env) {
  const RunOptions& o = lo.run;
  if (auto code = check_local_options(lo)) return *code;
  // Rank 0 is this process, with the environment its members get (rank 0's).
  LocalJob job{o.flags.job_id ? *o.flags.job_id : fmt::format("local-{}", ::getpid()),
               without_launcher_env(env), lo.nprocs};
  Flags flags;
  flags.job_id = job.job_id;
  Identity id = detect_identity(job.member_env(0, o.flags.master_port.value_or("")), flags);
  id.rendezvous_port = o.flags.master_port ? id.master_port : 0;  // 0: pick a free port
  if (!id.usable()) return usage_problems(id);
  Log log(o.quiet);
  auto given = load_token(o, env, log);
  if (!given) {
    Log::error(given.error().message);
    return exit_code::kUsage;
  }
  auto token = local_token(std::move(*given), o, env);
  if (!token) {
    Log::error(token.error().message);
    return exit_code::kInternal;
  }
  // Every output path checked before any member starts: rank 0's, {rank} and {host}
  // filled in.
  Output report_to{o.json_path, false, o.metrics_path, o.exclude_path};
  report_to.set_self(0, o.host_name.value_or(local_host_name()));
  if (auto ok = check_output_paths(report_to); !ok) {
    Log::error(ok.error().message);
    return exit_code::kUsage;
  }
  // One host, one network namespace: its interfaces are read once, not by each member.
  HostView host = read_host_view();
  if (!o.watch.command.empty()) return run_local_watched(lo, job, *token, host);
  // The loader's folders, which each member's data network asks for: read here once.
  (void)sysfs_from_env(job.child_env).loader_dirs();
  std::vector<Child> children = fork_members(job, member_options(o, job, *token), *token, host,
                                             Deadline::after(seconds(o.timeout_s)));
  MasterSetup setup;
  setup.addresses = {"127.0.0.1"};
  setup.port = static_cast<uint16_t>(id.rendezvous_port);
  // The master's socket, then its port to the members at once: they read their facts
  // while this process reads its own and readies the server. Where it cannot be had
  // (another process holds --master-port), the master's own attempt below fails the
  // same way and its report says why; the members, told nothing, go home.
  if (auto listener = listen_on_loopback(setup.port)) {
    setup.listen_fd = listener->first;
    tell_port(children, listener->second);
  }
  Session s(o);
  s.open(id, env, job.child_env, std::move(token->token));  // the members open their own
  Record self = build_self(id, o.host_name, job.child_env, Deadline::after(kLocalResolve),
                           s.probe_gpus(), &host);
  s.out.set_self(self.rank, self.host);  // rank 0 writes the report
  // Another master on --master-port is not this job's, whatever its job id: no
  // member of this job would ever reach this process.
  auto code = serve_master(self, id, s, setup, /*join_other=*/false,
                           [&](uint16_t) { start_members(children); });
  reap_members(children, s.time, code, log);
  return s.leave(code ? *code : exit_code::kInternal);
}

}  // namespace rankcheck
