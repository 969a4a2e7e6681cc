// The plumbing every run shares: deadline, watchdog, signals, token, this member's
// record, its GPU plan and the rehearsal of NCCL's connections from this host.

#include "app/session.h"

#include <algorithm>
#include <cstdio>
#include <future>
#include <memory>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/interrupt.h"
#include "base/text.h"
#include "diagnose/diagnose.h"
#include "host/interfaces.h"
#include "host/self_record.h"
#include "protocol/messages.h"
#include "rendezvous/member.h"

namespace rankcheck {

namespace {

// How long the process waits for the aborts of a take-over before it ends without
// them: a real abort of a communicator that was set up (commReclaim, the proxy's
// stop, commFree) takes seconds, not milliseconds.
constexpr Millis kAbortGrace{5000};
// The share of --timeout the GPU inventory may take (the rest is the rendezvous's).
constexpr double kProbeShare = 0.4;
}  // namespace

Session::Session(const RunOptions& options)
    : o(options),
      start(Clock::now()),
      wall_start(std::chrono::system_clock::now()),
      time(start, options.timeout_s),
      watchdog(time.watchdog_at(), watchdog_code),
      log(options.quiet),
      out{options.json_path, options.color, options.metrics_path, options.exclude_path} {
  install_interrupt_handlers();
  reserve_spare_fd();
}

Result<std::optional<JobToken>> load_token(const RunOptions& o, const EnvMap& env, const Log& log) {
  // Given but empty is a mistake, never "no token": `export RANKCHECK_TOKEN_FILE=$TOK`
  // with TOK unset must not turn authentication off.
  std::string path;
  // The check of `run -- CMD`: its wrapper read the token (watch_run.h).
  if (o.watch.handoff_fd >= 0) {
    return o.watch.token ? std::optional<JobToken>(*o.watch.token) : std::optional<JobToken>();
  }
  if (o.token_fd) {
    auto token = JobToken::load_fd(*o.token_fd);
    if (!token) return token.error();
    return std::optional<JobToken>(std::move(*token));
  }
  if (o.token_file) {
    if (o.token_file->empty()) {
      return Error{"--token-file is empty: give the path of the job token file"};
    }
    path = *o.token_file;
  } else if (const std::string* p = env_get(env, "RANKCHECK_TOKEN_FILE")) {
    if (p->empty()) {
      return Error{
          "RANKCHECK_TOKEN_FILE is set but empty: give it the path of the job token file, or "
          "unset it to run without a token (is the variable it was set from unset?)"};
    }
    path = *p;
  } else {
    return std::optional<JobToken>();
  }
  std::string warning;
  auto token = JobToken::load(path, &warning);
  if (!token) return token.error();
  if (!warning.empty()) log.error("warning: " + warning);
  return std::optional<JobToken>(std::move(*token));
}

Record build_self(const Identity& id, const std::optional<std::string>& host_name,
                  const EnvMap& env, Deadline resolve_by, GpuFacts gpu, const HostView* view) {
  Record self = self_record(id, host_name, env, resolve_by, std::move(gpu), view);
  // What the master compares is what a hello carries, for its own record too.
  if (fit_hello(self)) {
    Log::error(
        "warning: this record is more than a hello carries (a very long tracked environment?): "
        "cut to fit");
  }
  return self;
}

StageOptions stage_options(const RunOptions& o, const EnvMap& env) {
  StageOptions so;
  if (const std::string* lib = env_get(env, "RANKCHECK_CUDA_LIB")) so.cuda_lib = *lib;
  if (const std::string* lib = env_get(env, "RANKCHECK_NCCL_LIB")) so.nccl_lib = *lib;
  if (const std::string* lib = env_get(env, "RANKCHECK_NVML_LIB")) so.nvml_lib = *lib;
  if (!o.nccl_lib.empty()) so.nccl_lib = o.nccl_lib;
  so.bandwidth_bytes = o.bandwidth_bytes;
  return so;
}

GpuPlan gpu_plan(const Identity& id, const RunOptions& o, const EnvMap& env) {
  GpuPlan plan;
  plan.first_rank = id.rank;
  plan.nranks = id.nranks;
  plan.local_rank = id.local_rank;
  plan.device = o.device;
  if (const std::string* cvd = env_get(env, "CUDA_VISIBLE_DEVICES")) plan.visible_devices = *cvd;
  plan.grant = gpu_grant(env);
  return plan;
}

void Session::open(const Identity& id, const EnvMap& env, const EnvMap& job_env,
                   std::optional<JobToken> job_token) {
  stage = make_gpu_stage(stage_options(o, env));
  plan = gpu_plan(id, o, job_env);
  token = std::move(job_token);
  capture_nccl_words(env);
  // The IB ports' error counters, against which the stage's end compares (none read
  // under --no-gpu: no stage, no second reading).
  if (!o.no_gpu) {
    ib_sys_ = sysfs_from_env(env);
    ib_start_ = ib_sys_.read_ib_counters();
  }
}

void Session::capture_nccl_words(const EnvMap& env) {
  if (o.no_gpu) return;
  // NCCL names the host in its file's %h as gethostname() up to its first '.'.
  std::string host = local_host_name();
  host = host.substr(0, host.find('.'));
  std::string why;
  NcclDebugPlan words = nccl_debug_plan(env, host, long(::getpid()), [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
  });
  if (!words.note.empty()) log.error("note: " + words.note);
  auto file = std::make_unique<NcclDebugFile>(std::move(words), &why, remove_at_watchdog_exit);
  if (!why.empty()) log.error("warning: " + why + ": the GPU stage's findings cannot quote NCCL");
  if (file->active()) nccl_debug = std::move(file);
}

GpuFacts Session::probe_gpus() {
  if (o.no_gpu) return GpuFacts{};  // kSkipped
  auto t0 = Clock::now();
  // cuInit and the device queries hang on a sick node (a GPU fallen off the bus, a
  // driver in recovery): the inventory gets a bound of its own, so that rank 0 still
  // listens and a member still joins, and the report names the host. A thread left
  // stuck in the driver cannot be joined: leave() then ends the process with _exit.
  auto done = std::make_shared<std::promise<GpuFacts>>();
  std::future<GpuFacts> got = done->get_future();
  std::thread([done, stage = stage.get(), p = plan] {
    done->set_value(stage->inventory(p));
  }).detach();
  Deadline by = Deadline::after(seconds(o.timeout_s * kProbeShare)).sooner(time.decide_by());
  if (got.wait_until(by.when()) != std::future_status::ready) {
    probe_stuck_ = true;
    GpuFacts stuck;
    stuck.state = GpuState::kStuck;
    stuck.error = fmt::format(
        "the GPU driver did not answer in {}: cuInit or a device query is stuck on this host "
        "(a GPU fallen off the bus, a driver in recovery: nvidia-smi, dmesg | grep -i xid)",
        format_seconds(ms_between(t0, Clock::now())));
    log.error(std::string(stuck.error.str()));
    stuck.granted = plan.grant.count;
    stuck.granted_by = plan.grant.by;
    return stuck;
  }
  GpuFacts gpu = got.get();
  log.progress(fmt::format(
      "GPU inventory in {}: {}", format_seconds(ms_between(t0, Clock::now())),
      gpu.usable()
          ? fmt::format("{} ({}), NCCL {}", gpu.devices.empty() ? "-" : gpu.devices[0].uuid,
                        gpu.choice, nccl_version_text(gpu.nccl_version))
          : gpu.error.str()));
  return gpu;
}

StageReport Session::run_gpu_stage(const Verdict& go, long world_size) {
  Session& s = *this;
  s.watchdog_code = exit_code::kGpu;
  // Leave time to abort NCCL and send the results before the master's stage deadline.
  Millis margin = stage_margin(go.stage_ms);
  Deadline by =
      Deadline::after(std::max(Millis(0), Millis(go.stage_ms) - margin)).sooner(s.time.end());
  s.log.progress(fmt::format("go: NCCL init and all-reduce ({} s left)", by.seconds_left()));
  NcclInit init = go.nccl_roots > 0 ? NcclInit{go.roots, true} : NcclInit{{*go.nccl_id}, false};
  StageReport report{s.stage->run(init, world_size, s.plan, by)};
  // One process: its IB ports, and its NCCL_DEBUG_FILE, go with each of its ranks.
  std::string moved = ib_counters_moved(ib_start_, ib_sys_.read_ib_counters());
  for (RankResult& r : report.ranks)
    r.ib_moved = moved;
  if (!s.nccl_debug) return report;
  diagnose::NcclWords words = diagnose::read_nccl_words(s.nccl_debug->read());
  for (RankResult& r : report.ranks) {
    r.nccl_warn = words.warn;
    r.nccl_finding = words.finding;
    r.nccl_net = words.network;
  }
  return report;
}

int Session::leave(int code) {
  Session& s = *this;
  if (probe_stuck_) {
    // A thread is inside the driver: no exit handler or destructor may run under it.
    s.nccl_debug.reset();
    std::fflush(nullptr);
    ::_exit(code);
  }
  if (!s.stage || !s.stage->took_over()) return code;
  // NVIDIA/nccl#1013: "if the main thread exits after detaching, the cuda driver can
  // start to reclaim all memory ... the proxy thread might still be running".
  auto until = std::min(Clock::now() + kAbortGrace, s.time.aborts_by().when());
  if (!s.stage->wait_for_aborts(until)) {
    s.log.error(
        "warning: ncclCommAbort has not returned: this process ends without it (NCCL's "
        "threads are left to the kernel)");
  }
  s.nccl_debug.reset();  // its file, which no destructor removes after _exit
  std::fflush(nullptr);
  ::_exit(code);  // not exit(): no handler or static destructor under NCCL's threads
}

}  // namespace rankcheck
