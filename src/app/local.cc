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

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "protocol/auth.h"
#include "identity/identity.h"

#include "app/run.h"

#include "app/session.h"
#include "host/interfaces.h"

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

EnvMap without_launcher_env(const EnvMap& env) {
  EnvMap out = env;
  for (const Launcher& l : launchers()) {
    Identity sink;
    EnvMap empty;
    LauncherScan scan(empty, l.name, sink, /*catalogue=*/true);
    l.scan(scan);
    for (const Observation& o : sink.observations)
      out.erase(o.variable);
  }
  for (auto it = out.begin(); it != out.end();) {
    const std::string& k = it->first;
    bool launcher = k.rfind("SLURM_", 0) == 0 || k.rfind("OMPI_", 0) == 0 ||
                    k.rfind("PMI_", 0) == 0 || k.rfind("PMIX_", 0) == 0 ||
                    k.rfind("TORCHELASTIC_", 0) == 0;
    it = launcher ? out.erase(it) : std::next(it);
  }
  return out;
}

namespace {

// A member of `rankcheck local`: a fork of this process, made before it starts any
// thread (so no lock is held in the copy) and before the master's socket exists (so
// no member ever holds it). It reads the master's port from `start_fd` once the
// master listens (closed unwritten when it never does), then runs as `rankcheck run`
// would: the same code on the same options, without the exec, the dynamic loader
// and the page faults of a fresh process (most of a member's cost on a small machine).
[[noreturn]] void member_child(int start_fd, const RunOptions& o, const EnvMap& env, Deadline end) {
  std::string msg;  // "PORT MS_LEFT\n", or nothing when the master never started
  char buf[64];
  while (msg.find('\n') == std::string::npos) {
    pollfd p{start_fd, POLLIN, 0};
    int n = ::poll(&p, 1, end.poll_ms(Millis(1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 && !end.expired()) continue;
    ssize_t got = n > 0 ? ::read(start_fd, buf, sizeof buf) : 0;
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) ::_exit(exit_code::kInternal);  // the master gave up before it listened
    msg.append(buf, static_cast<size_t>(got));
  }
  ::close(start_fd);
  unsigned port = 0;
  long left_ms = 0;
  const char* end_of = msg.data() + msg.size();
  auto [at, bad] = std::from_chars(msg.data(), end_of, port);
  if (bad != std::errc() || at == end_of || *at != ' ' ||
      std::from_chars(at + 1, end_of, left_ms).ec != std::errc()) {
    ::_exit(exit_code::kInternal);
  }
  EnvMap e = env;
  e["MASTER_PORT"] = std::to_string(port);
  // The process's own environment too: NCCL and CUDA read theirs, not this map.
  ::clearenv();
  for (const auto& [key, value] : e)
    ::setenv(key.c_str(), value.c_str(), 1);
  int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 1);
    ::close(null);
  }
  RunOptions mo = o;
  mo.timeout_s = double(left_ms) / 1000.0;  // ends by the same deadline as rank 0
  int code = run_probe(mo, e);
  std::fflush(nullptr);
  ::_exit(code);
}

}  // namespace

int run_local(const LocalOptions& lo, const EnvMap& env) {
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

  // Rank 0 is this process, with the environment its members get (rank 0's).
  std::string job_id = o.flags.job_id ? *o.flags.job_id : fmt::format("local-{}", ::getpid());
  EnvMap child_env = without_launcher_env(env);
  auto member_env = [&child_env, &lo](int rank, const std::string& port) {
    EnvMap e = child_env;
    e["RANK"] = e["LOCAL_RANK"] = std::to_string(rank);
    e["WORLD_SIZE"] = e["LOCAL_WORLD_SIZE"] = std::to_string(lo.nprocs);
    e["MASTER_ADDR"] = "127.0.0.1";
    if (!port.empty()) e["MASTER_PORT"] = port;
    return e;
  };
  Flags flags;
  flags.job_id = job_id;
  Identity id = detect_identity(member_env(0, o.flags.master_port.value_or("")), flags);
  id.rendezvous_port = o.flags.master_port ? id.master_port : 0;  // 0: pick a free port
  if (!id.usable()) return usage_problems(id);
  // A job on one machine still authenticates: a token of its own unless one is
  // given, handed to each member through a pipe.
  Log log(o.quiet);
  auto token = load_token(o, env, log);
  if (!token) {
    Log::error(token.error().message);
    return exit_code::kUsage;
  }
  std::string secret;  // the token made here; "" when one was given
  if (!*token) {
    auto made = make_secret();
    if (!made) {
      Log::error(made.error().message);
      return exit_code::kInternal;
    }
    secret = std::move(*made);
    *token = JobToken::from_secret(secret);
  }
  std::optional<std::string> token_file = o.token_file;
  const std::string* env_file = env_get(env, "RANKCHECK_TOKEN_FILE");
  if (!token_file && secret.empty() && env_file != nullptr) token_file = *env_file;

  // --json checked before any member starts: rank 0's path, {rank} and {host} filled in.
  Output report_to{o.json_path, false, "", ""};
  report_to.set_self(0, o.host_name.value_or(local_host_name()));
  if (auto ok = check_json_path(report_to.json_path); !ok) {
    Log::error(ok.error().message);
    return exit_code::kUsage;
  }

  // The members, forked now: this process has no thread yet. Each waits on its
  // start pipe for the master's port; a pipe closed unwritten sends it home.
  RunOptions mo;
  mo.flags.job_id = job_id;
  mo.host_name = o.host_name;
  mo.handshake_timeout_s = o.handshake_timeout_s;
  mo.no_gpu = o.no_gpu;
  mo.no_relay = o.no_relay;
  mo.nccl_roots_every = o.nccl_roots_every;
  mo.nccl_lib = o.nccl_lib;
  mo.bandwidth_bytes = o.bandwidth_bytes;
  mo.quiet = true;
  mo.token_file = secret.empty() ? token_file : std::nullopt;
  // One host, one network namespace: its interfaces are read once, not by each member.
  mo.host_view = std::make_shared<const HostView>(read_host_view());
  Deadline end = Deadline::after(seconds(o.timeout_s));
  struct Child {
    pid_t pid;
    int start_fd;  // the write end of its start pipe; -1 once written or closed
  };
  std::vector<Child> children;
  std::fflush(nullptr);  // nothing buffered here is written again by a child
  // The token's keyed state is made with it; one MAC here does the rest of OpenSSL's
  // first-use setup, once, inherited by each fork.
  if (*token) (void)(*token)->mac("warmup", {}, {}, {});
  for (int k = 1; k < lo.nprocs; ++k) {
    std::array<int, 2> start{-1, -1};
    int token_fd = -1;
    if (::pipe2(start.data(), O_CLOEXEC) != 0) {
      Log::error(fmt::format("cannot start member {}: pipe: {}", k, std::strerror(errno)));
      continue;
    }
    if (!secret.empty()) {
      auto fd = token_pipe(secret);
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
      member_child(start[0], mine, member_env(k, ""), end);
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

  Session s(o);
  s.stage = make_gpu_stage(stage_options(o, env));
  s.plan = gpu_plan(id, o, child_env);
  s.token = std::move(*token);
  Record self = build_self(id, o.host_name, child_env, Deadline::after(Millis(2000)), probe_gpus(s),
                           mo.host_view.get());
  s.out.set_self(self.rank, self.host);  // rank 0 writes the report

  auto start_members = [&](uint16_t port) {
    for (Child& c : children) {
      // Children end by the same deadline as this process.
      long left_ms = std::max<long>(500, static_cast<long>(s.end.remaining().count()));
      std::string line = fmt::format("{} {}\n", port, left_ms);
      // A few bytes into an empty pipe: the write never waits.
      if (::write(c.start_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
        Log::error(fmt::format("cannot start member pid {}: {}", c.pid, std::strerror(errno)));
      }
      ::close(c.start_fd);
      c.start_fd = -1;
    }
  };

  MasterSetup setup;
  setup.addresses = {"127.0.0.1"};
  setup.port = static_cast<uint16_t>(id.rendezvous_port);
  // Another master on --master-port is not this job's, whatever its job id: no
  // member of this job would ever reach this process.
  auto code = master_path(self, id, s, setup, /*join_other=*/false, start_members);

  // Members the master never started go home now (their pipe closes unwritten).
  bool started = true;
  for (Child& c : children) {
    if (c.start_fd >= 0) {
      ::close(c.start_fd);
      c.start_fd = -1;
      started = false;
    }
  }
  // Reap the members; any still running past the deadline are killed. The wait
  // starts short: members end within a millisecond of rank 0's verdict.
  Deadline reap_by = s.end.extended(Millis(1500));
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
    if (started && code && *code != exit_code::kUsage && child_code != *code && ++odd <= 4) {
      log.error(fmt::format("member pid {} exited with {}, the job's verdict is {}", c.pid,
                            child_code, *code));
    }
  }
  return code ? *code : exit_code::kInternal;
}

}  // namespace rankcheck
