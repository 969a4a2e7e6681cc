// `rankcheck local -n N`: a process supervisor. This process is rank 0 and hosts
// the master; it starts N-1 members of itself on loopback, with a job token of
// their own, and reaps them by the deadline.

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rankcheck/auth.h>
#include <rankcheck/identity.h>
#include <rankcheck/procfs.h>
#include <rankcheck/run.h>

#include "session.h"

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

// The descriptor a member reads its token from.
constexpr int kTokenFd = 3;

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

int run_local(const LocalOptions& lo, const EnvMap& env) {
  const RunOptions& o = lo.run;
  Session s(o);
  const Log& log = s.log;
  Deadline end = s.end;
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
  s.stage = make_gpu_stage(stage_options(o, env));
  s.plan = gpu_plan(id, o, child_env);
  s.token = std::move(*token);
  Record self =
      build_self(id, o.host_name, child_env, Deadline::after(Millis(2000)), probe_gpus(s));
  s.out.set_self(self.rank, self.host);  // rank 0 writes the report
  if (auto ok = check_json_path(s.out.json_path); !ok) {
    Log::error(ok.error().message);
    return exit_code::kUsage;
  }

  auto self_exe = ProcFs{}.self_exe();
  if (!self_exe) {
    Log::error(self_exe.error().message);
    return exit_code::kInternal;
  }
  std::string exe = *self_exe;

  std::vector<pid_t> children;
  auto spawn_members = [&](uint16_t port) {
    for (int k = 1; k < lo.nprocs; ++k) {
      EnvMap e = member_env(k, std::to_string(port));
      std::vector<std::string> storage;
      for (const auto& [key, value] : e)
        storage.push_back(key + "=" + value);
      std::vector<char*> envp;
      for (auto& entry : storage)
        envp.push_back(entry.data());
      envp.push_back(nullptr);
      // Children end by the same deadline as this process.
      double left = std::max(0.5, double(end.remaining().count()) / 1000.0);
      std::vector<std::string> args = {exe,
                                       "run",
                                       "--quiet",
                                       "--job-id",
                                       job_id,
                                       "--timeout",
                                       fmt::format("{:.3f}", left),
                                       "--handshake-timeout",
                                       fmt::format("{}", o.handshake_timeout_s)};
      if (o.no_gpu) args.push_back("--no-gpu");
      if (o.no_relay) args.push_back("--no-relay");
      args.insert(args.end(), {"--nccl-roots-every", std::to_string(o.nccl_roots_every)});
      int pipe_fd = -1;
      if (!secret.empty()) {
        auto fd = token_pipe(secret);
        if (!fd) {
          Log::error(fmt::format("cannot start member {}: {}", k, fd.error().message));
          continue;
        }
        pipe_fd = *fd;
        args.insert(args.end(), {"--token-fd", std::to_string(kTokenFd)});
      } else if (token_file) {
        args.insert(args.end(), {"--token-file", *token_file});
      }
      if (!o.nccl_lib.empty()) args.insert(args.end(), {"--nccl-lib", o.nccl_lib});
      if (o.bandwidth_bytes > 0) {
        args.insert(args.end(), {"--bandwidth", std::to_string(o.bandwidth_bytes)});
      }
      if (o.host_name) {
        args.push_back("--host-name");
        args.push_back(*o.host_name);
      }
      std::vector<char*> argv;
      for (auto& a : args)
        argv.push_back(a.data());
      argv.push_back(nullptr);
      posix_spawn_file_actions_t fa;
      posix_spawn_file_actions_init(&fa);
      posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
      // dup2 clears close-on-exec on the copy: the member alone inherits it.
      if (pipe_fd >= 0) posix_spawn_file_actions_adddup2(&fa, pipe_fd, kTokenFd);
      pid_t pid = 0;
      int rc = ::posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), envp.data());
      posix_spawn_file_actions_destroy(&fa);
      if (pipe_fd >= 0) ::close(pipe_fd);
      if (rc != 0) {
        Log::error(fmt::format("cannot start member {}: {}", k, std::strerror(rc)));
        continue;
      }
      children.push_back(pid);
    }
  };

  MasterSetup setup;
  setup.addresses = {"127.0.0.1"};
  setup.port = static_cast<uint16_t>(id.rendezvous_port);
  // Another master on --master-port is not this job's, whatever its job id: no
  // member of this job would ever reach this process.
  auto code = master_path(self, id, s, setup, /*join_other=*/false, spawn_members);

  // Reap the members; any still running past the deadline are killed.
  Deadline reap_by = end.extended(Millis(1500));
  int odd = 0;
  for (pid_t pid : children) {
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (reap_by.expired()) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(Millis(5));
    }
    int child_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code && *code != exit_code::kUsage && child_code != *code && ++odd <= 4) {
      log.error(fmt::format("member pid {} exited with {}, the job's verdict is {}", pid,
                            child_code, *code));
    }
  }
  return code ? *code : exit_code::kInternal;
}

}  // namespace rankcheck
