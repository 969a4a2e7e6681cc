// The plumbing every run shares: deadline, watchdog, signals, log, output, token,
// this member's record and its GPU plan.

#include "session.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <unistd.h>

#include <rankcheck/interrupt.h>
#include <rankcheck/net.h>
#include <rankcheck/protocol.h>
#include <rankcheck/text.h>

namespace rankcheck {

Millis reserve_for(double timeout_s) {
  return std::clamp(seconds(timeout_s / 10), Millis(500), Millis(5000));
}

Watchdog::Watchdog(Clock::time_point at, std::atomic<int>& exit_code)
    : thread_([this, at, &exit_code] {
        std::unique_lock lock(mu_);
        if (cv_.wait_until(lock, at, [this] { return cancelled_; })) return;
        std::string msg = fmt::format(
            "rankcheck: watchdog: still running {} ms past the deadline; exiting with {}\n",
            kWatchdogGrace.count(), exit_code.load());
        [[maybe_unused]] ssize_t n = ::write(2, msg.data(), msg.size());
        ::_exit(exit_code.load());
      }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mu_);
    cancelled_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Log::error(const std::string& line) {
  std::string s = "rankcheck: " + line + "\n";
  std::fwrite(s.data(), 1, s.size(), stderr);
}

void Output::set_self(long rank, const std::string& host) {
  for (auto [key, value] :
       {std::pair<std::string, std::string>{"{rank}", std::to_string(rank)}, {"{host}", host}}) {
    for (size_t at; (at = json_path.find(key)) != std::string::npos;) {
      json_path.replace(at, key.size(), value);
    }
  }
}

void Output::emit(const std::function<std::string()>& text,
                  const std::function<std::string()>& json) const {
  if (json_path != "-") std::fputs(text().c_str(), stdout);
  if (json_path.empty()) return;
  std::string j = json();
  if (json_path == "-") {
    std::fputs(j.c_str(), stdout);
    return;
  }
  std::ofstream out(json_path, std::ios::trunc);
  out << j;
  if (!out) Log::error(fmt::format("cannot write the JSON report to {}", json_path));
}

Status check_json_path(const std::string& path) {
  if (path.empty() || path == "-") return ok_status();
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::access(dir.c_str(), W_OK) != 0) {
    return Error{fmt::format("--json {}: cannot write in {}: {}", path, dir, std::strerror(errno))};
  }
  return ok_status();
}

Session::Session(const RunOptions& options)
    : o(options),
      start(Clock::now()),
      end(start + seconds(options.timeout_s)),
      watchdog(end.extended(kWatchdogGrace).when(), watchdog_code),
      log(options.quiet),
      out{options.json_path, options.color} {
  install_interrupt_handlers();
}

Result<std::optional<JobToken>> load_token(const RunOptions& o, const EnvMap& env, const Log& log) {
  std::string path = o.token_file;
  if (path.empty()) {
    if (const std::string* p = env_get(env, "RANKCHECK_TOKEN_FILE")) path = *p;
  }
  if (path.empty()) return std::optional<JobToken>();
  std::string warning;
  auto token = JobToken::load(path, &warning);
  if (!token) return token.error();
  if (!warning.empty()) log.error("warning: " + warning);
  return std::optional<JobToken>(std::move(*token));
}

Record build_self(const Identity& id, const std::optional<std::string>& host_name,
                  const EnvMap& env, Deadline resolve_by, GpuFacts gpu) {
  HostFacts facts;
  facts.host = host_name ? *host_name : local_host_name();
  facts.pid = static_cast<uint32_t>(::getpid());
  facts.interfaces = interfaces_with_address();
  if (!id.master_addr.empty()) {
    auto resolved = resolve_host(id.master_addr, resolve_by);
    if (resolved) {
      facts.master_resolved = *resolved;
    } else {
      facts.resolve_error = resolved.error().message;
    }
  }
  Record self = make_record(id, facts, env, std::move(gpu));
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
  return plan;
}

GpuFacts probe_gpus(Session& s) {
  if (s.o.no_gpu) return GpuFacts{};  // kSkipped
  auto t0 = Clock::now();
  GpuFacts gpu = s.stage->inventory(s.plan);
  s.log.progress(fmt::format(
      "GPU inventory in {}: {}", format_seconds(ms_between(t0, Clock::now())),
      gpu.usable()
          ? fmt::format("{} ({}), NCCL {}", gpu.devices.empty() ? "-" : gpu.devices[0].uuid,
                        gpu.choice, nccl_version_text(gpu.nccl_version))
          : gpu.error.str()));
  return gpu;
}

int print_member(const MemberReport& m, const Output& out) {
  out.emit([&] { return render_member_text(m, {out.color}); },
           [&] { return render_member_json(m); });
  return m.exit_code;
}

int print_report(const Report& r, const Session& s) {
  s.out.emit([&] { return render_text(r, {s.out.color}); }, [&] { return render_json(r); });
  return interrupted() ? exit_code::kSignalBase + interrupted() : r.exit_code();
}

int usage_problems(const Identity& id) {
  for (const auto& p : id.problems)
    Log::error("cannot run: " + p);
  Log::error("`rankcheck env` shows every source rankcheck looked at");
  return exit_code::kUsage;
}

}  // namespace rankcheck
