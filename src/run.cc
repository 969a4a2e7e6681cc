#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rankcheck/auth.h>
#include <rankcheck/bootstrap.h>
#include <rankcheck/checks.h>
#include <rankcheck/gpu.h>
#include <rankcheck/interrupt.h>
#include <rankcheck/member.h>
#include <rankcheck/net.h>
#include <rankcheck/report.h>
#include <rankcheck/run.h>
#include <rankcheck/server.h>
#include <rankcheck/text.h>

namespace rankcheck {
namespace {

// How long after --timeout the watchdog ends a process that is still running.
constexpr Millis kWatchdogGrace{1800};
// How long past --timeout a member waits for a master that decided at the deadline.
constexpr Millis kVerdictGrace{1000};

// Ends the process if the run outlives its deadline: the last word on "never hangs".
class Watchdog {
 public:
  Watchdog(Clock::time_point at, std::atomic<int>& exit_code)
      : thread_([this, at, &exit_code] {
          std::unique_lock lock(mu_);
          if (cv_.wait_until(lock, at, [this] { return cancelled_; })) return;
          std::string msg = fmt::format(
              "rankcheck: watchdog: still running {} ms past the deadline; exiting with {}\n",
              kWatchdogGrace.count(), exit_code.load());
          [[maybe_unused]] ssize_t n = ::write(2, msg.data(), msg.size());
          ::_exit(exit_code.load());
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool cancelled_ = false;
  std::thread thread_;
};

class Log {
 public:
  explicit Log(bool quiet) : quiet_(quiet) {}
  /// Progress: dropped with --quiet.
  void progress(const std::string& line) const {
    if (!quiet_) error(line);
  }
  /// Always printed.
  static void error(const std::string& line) {
    std::string s = "rankcheck: " + line + "\n";
    std::fwrite(s.data(), 1, s.size(), stderr);
  }

 private:
  bool quiet_;
};

Millis seconds(double s) {
  return Millis(static_cast<long>(s * 1000.0));
}

// Time the master keeps between its decision and --timeout, to send verdicts.
Millis reserve_for(double timeout_s) {
  return std::clamp(seconds(timeout_s / 10), Millis(500), Millis(5000));
}

bool all_loopback(const std::vector<std::string>& addrs) {
  if (addrs.empty()) return false;
  for (const auto& a : addrs) {
    if (!is_loopback_address(a)) return false;
  }
  return true;
}

// Writes the report where --json asked, and the text to stdout otherwise.
struct Output {
  std::string json_path;
  bool color;

  /// --json PATH with {rank} and {host} filled in: one command line serves every
  /// process of a job (srun, torchrun, mpirun).
  void set_self(long rank, const std::string& host) {
    for (auto [key, value] :
         {std::pair<std::string, std::string>{"{rank}", std::to_string(rank)}, {"{host}", host}}) {
      for (size_t at; (at = json_path.find(key)) != std::string::npos;) {
        json_path.replace(at, key.size(), value);
      }
    }
  }

  template <class Text, class Json>
  void emit(Text text, Json json) const {
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
};

// Fails early, before any rendezvous, when --json names a directory that is not there.
Status check_json_path(const std::string& path) {
  if (path.empty() || path == "-") return ok_status();
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::access(dir.c_str(), W_OK) != 0) {
    return Error{fmt::format("--json {}: cannot write in {}: {}", path, dir, std::strerror(errno))};
  }
  return ok_status();
}

// What one run carries from step to step.
// What every run starts with: its deadline, the watchdog behind it, the signal
// handlers, and where its words go.
struct RunFrame {
  explicit RunFrame(const RunOptions& o)
      : start(Clock::now()),
        end(start + seconds(o.timeout_s)),
        watchdog(end.extended(kWatchdogGrace).when(), watchdog_code),
        log(o.quiet),
        out{o.json_path, o.color} {
    install_interrupt_handlers();
  }
  Clock::time_point start;
  Deadline end;
  std::atomic<int> watchdog_code{exit_code::kIncomplete};  // by phase: 4, then 5 in the GPU stage
  Watchdog watchdog;
  Log log;
  Output out;
};

// A job token made for `rankcheck local`, removed with it.
class TempToken {
 public:
  TempToken() = default;
  TempToken(const TempToken&) = delete;
  TempToken& operator=(const TempToken&) = delete;
  ~TempToken();
  Result<std::string> make();

 private:
  std::string dir_;
  std::string path_;
};

struct Session {
  const RunOptions& o;
  Log log;
  Output out;
  Clock::time_point start;
  Deadline end;
  std::atomic<int>& watchdog_code;  // what the watchdog exits with, by phase
  std::unique_ptr<GpuStage> stage;
  GpuPlan plan;
  std::optional<JobToken> token;
};

// The job token from --token-file or RANKCHECK_TOKEN_FILE, if one is given.
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
                  const EnvMap& env, Deadline resolve_by, GpuFacts gpu = {}) {
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

// Runs this member's GPU stage on the master's go; the results for its ranks.
StageReport run_gpu_stage(Session& s, const Verdict& go, long world_size) {
  s.watchdog_code = exit_code::kGpu;
  // Leave time to abort NCCL and send the results before the master's stage deadline.
  Millis margin = stage_margin(go.stage_ms);
  Deadline by = Deadline::after(std::max(Millis(0), Millis(go.stage_ms) - margin)).sooner(s.end);
  s.log.progress(fmt::format("go: NCCL init and all-reduce ({} s left)", by.seconds_left()));
  return StageReport{s.stage->run(*go.nccl_id, world_size, s.plan, by)};
}

int print_member(const MemberReport& m, const Output& out) {
  out.emit([&] { return render_member_text(m, {out.color}); },
           [&] { return render_member_json(m); });
  return m.exit_code;
}

int interrupted_exit(const Log& log, Record& self, const Output& out, Clock::time_point start) {
  int sig = interrupted();
  log.error(fmt::format("interrupted by {}", signal_name(sig)));
  MemberReport m;
  m.self = self;
  m.exit_code = exit_code::kSignalBase + sig;
  m.headline = fmt::format("interrupted by {} before the verdict", signal_name(sig));
  m.total_ms = ms_between(start, Clock::now());
  print_member(m, out);
  return m.exit_code;
}

// The member side of a run: join, wait for the verdict, print the one-line summary.
int member_path(Record& self, const Identity& id, Session& s) {
  const RunOptions& o = s.o;
  const Log& log = s.log;
  const Output& out = s.out;
  Clock::time_point start = s.start;
  Deadline end = s.end;
  JoinOptions jo;
  jo.master_addr = id.master_addr;
  jo.master_port = static_cast<uint16_t>(id.rendezvous_port);
  jo.give_up = end;
  jo.handshake = seconds(o.handshake_timeout_s);
  jo.progress_interval = seconds(o.progress_interval_s);
  jo.log = [&log](const std::string& line) { log.progress(line); };
  jo.token = s.token ? &*s.token : nullptr;
  JoinResult joined = join_master(self, jo);
  if (interrupted()) return interrupted_exit(log, self, out, start);

  auto took = [start] { return ms_between(start, Clock::now()); };
  if (joined.failure) return print_member(failure_report(self, *joined.failure, took()), out);
  log.progress(fmt::format("joined {}:{} ({}/{} ranks so far)", id.master_addr, id.rendezvous_port,
                           joined.admit.joined_ranks, joined.admit.world_size));
  auto verdict = wait_verdict(joined.socket, end.extended(kVerdictGrace), joined, jo.token);
  if (verdict && !verdict->final && verdict->run_gpu && verdict->nccl_id) {
    StageReport results = run_gpu_stage(s, *verdict, id.world_size);
    auto sent = joined.socket.write_all(encode(results), Deadline::after(Millis(1000)));
    if (!sent) log.error("sending the GPU stage results: " + sent.error().message);
    verdict = wait_verdict(joined.socket, end.extended(kVerdictGrace), joined, jo.token,
                           VerdictWait::kFinal);
  }
  if (interrupted()) return interrupted_exit(log, self, out, start);
  if (verdict) return print_member(verdict_report(self, *verdict, took()), out);
  Finding f =
      verdict.error().code == kAuthFailed
          ? Finding{"auth-failed",
                    Severity::kError,
                    exit_code::kRejected,
                    fmt::format("the master at {}:{} answered, but {}", printable(id.master_addr),
                                id.rendezvous_port, verdict.error().message),
                    "something other than rank 0 answered on MASTER_PORT, or rank 0 has "
                    "another token: give every process the same --token-file",
                    {self.rank},
                    {self.host}}
          : Finding{
                "master-lost",
                Severity::kError,
                exit_code::kIncomplete,
                fmt::format("{} joined the master at {}:{}, then: {}", member_label(self),
                            printable(id.master_addr), id.rendezvous_port, verdict.error().message),
                "read rank 0's log and report: it was killed, crashed, or the network "
                "between the hosts failed",
                {self.rank},
                {self.host}};
  return print_member(failure_report(self, std::move(f), took()), out);
}

// A master holds one descriptor per member: raise the soft limit where the hard one
// allows, and say so when the machine cannot take the job.
void check_capacity(long world_size, const Log& log) {
  rlimit rl{};
  auto need = static_cast<rlim_t>(world_size + 64);
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need) {
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = std::min(need, rl.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < need) {
      log.error(
          fmt::format("the open-file limit ({} soft, {} hard) is below the {} this master "
                      "needs for {} members: raise `ulimit -n`",
                      was, rl.rlim_max, need, world_size));
    }
  }
  std::ifstream somaxconn("/proc/sys/net/core/somaxconn");
  long backlog = 0;
  if (somaxconn >> backlog && backlog < world_size) {
    log.progress(
        fmt::format("net.core.somaxconn is {}, below the {} members: connections beyond "
                    "it wait for a SYN retry (about 1 s)",
                    backlog, world_size));
  }
}

struct MasterSetup {
  std::vector<std::string> addresses;  // to listen on
  uint16_t port = 0;
};

// Hosts the master in this process, joins it as a member, and prints the report.
// Returns nullopt when another master of this job already answers and
// `join_other` (this process then joins it as an ordinary member); without it,
// that master holding the port is master-port-in-use.
std::optional<int> master_path(Record& self, const Identity& id, Session& s,
                               const MasterSetup& setup, bool join_other = true,
                               const std::function<void(uint16_t)>& on_listening = {}) {
  const RunOptions& o = s.o;
  const Log& log = s.log;
  const Output& out = s.out;
  Clock::time_point start = s.start;
  Deadline end = s.end;
  ServerConfig cfg;
  MasterConfig& mc = cfg.master;
  mc.world_size = id.world_size;
  mc.job_id = self.job_id;  // as the hellos carry it (cut to its cap)
  mc.master_addr = id.master_addr;
  mc.master_host = self.host;
  mc.master_resolved = self.master_resolved.get();
  mc.start = start;
  mc.log = [&log](const std::string& line) { log.progress(line); };
  mc.gpu_stage = !o.no_gpu;
  mc.make_nccl_id = [&s] { return s.stage->unique_id(); };
  mc.stage_by = Deadline(end.when() - Millis(600));
  mc.min_busbw_gbps = o.min_busbw_gbps;
  mc.authenticated = s.token.has_value();
  cfg.token = s.token;
  cfg.decide_by = Deadline(end.when() - reserve_for(o.timeout_s));
  cfg.handshake_timeout = seconds(o.handshake_timeout_s);
  cfg.progress_interval = seconds(o.progress_interval_s);

  check_capacity(id.world_size, log);
  Server server(cfg);
  auto port = server.listen(setup.addresses, setup.port);
  if (!port) {
    // A master of this job may already be there: then this is a duplicate rank 0,
    // and the report that says so comes from that master.
    auto other = probe_master(setup.addresses.front(), setup.port, Deadline::after(Millis(1500)));
    if (join_other && other &&
        (other->job_id.empty() || id.job_id.empty() || other->job_id == id.job_id)) {
      log.error(fmt::format(
          "a rankcheck master of this job already listens on {}:{}: joining it as a member so "
          "that it reports the duplicate rank 0",
          printable(id.master_addr), setup.port));
      return std::nullopt;
    }
    auto fault = static_cast<ListenFault>(port.error().code);
    Finding f;
    f.severity = Severity::kError;
    f.exit_code = exit_code::kCannotListen;
    f.ranks = {self.rank};
    f.hosts = {self.host};
    if (fault == ListenFault::kNotLocal) {
      f.id = "master-addr-not-local";
      f.message = fmt::format("MASTER_ADDR {} ({}) is not an address of {}, where rank 0 runs; {}",
                              printable(id.master_addr), format_list(self.master_resolved.get(), 4),
                              printable(self.host), port.error().message);
      f.hint = fmt::format("run rank 0 on the host MASTER_ADDR names, or set MASTER_ADDR to {}",
                           printable(self.host));
    } else if (fault == ListenFault::kInUse || other) {
      f.id = "master-port-in-use";
      f.message = fmt::format(
          "MASTER_PORT {} is taken on {}: {}{}", setup.port, printable(self.host),
          port.error().message,
          other ? fmt::format(" (by a rankcheck master of job '{}')", printable(other->job_id))
                : "");
      f.hint = fmt::format(
          "pick another MASTER_PORT, or stop the holder (ss -ltnp 'sport = :{}' "
          "names it)",
          setup.port);
    } else {
      // Not a port someone holds: say what the system said, and what usually causes it.
      f.id = "master-listen-failed";
      f.message = fmt::format("rank 0 cannot listen on MASTER_PORT {} on {}: {}", setup.port,
                              printable(self.host), port.error().message);
      f.hint =
          fault == ListenFault::kDenied
              ? std::string(
                    "ports below 1024 need root or CAP_NET_BIND_SERVICE (and a security policy "
                    "may deny others): pick a MASTER_PORT of 1024 or above")
              : std::string(
                    "the training job would fail to listen the same way: check MASTER_ADDR and "
                    "MASTER_PORT against this host's addresses and policies");
    }
    log.error(f.message);
    return print_member(failure_report(self, std::move(f), ms_between(start, Clock::now())), out);
  }
  if (setup.port == 0) self.master_port = *port;  // a free port was picked: it is MASTER_PORT
  if (on_listening) on_listening(*port);
  log.progress(fmt::format(
      "master listening on {} port {}; waiting for {} ({} s left)", format_list(setup.addresses, 4),
      *port, plural(size_t(id.world_size), "rank", "ranks"), cfg.decide_by.seconds_left()));
  server.start();
  auto verdict = server.join_local(self);
  Deadline verdict_by = end.extended(kVerdictGrace);
  // Waits for a verdict; a signal cuts the wait short (the server decides at once).
  bool cut_short = false;
  auto await = [&](std::future<Verdict>& f) {
    while (f.wait_for(Millis(20)) != std::future_status::ready && !verdict_by.expired()) {
      if (interrupted() && !cut_short) {
        cut_short = true;
        server.interrupt(interrupted());
      }
    }
    return f.wait_for(Millis(0)) == std::future_status::ready;
  };
  if (await(verdict)) {
    Verdict first = verdict.get();
    if (!first.final && first.run_gpu && first.nccl_id && !interrupted()) {
      auto final_verdict = server.submit_local(run_gpu_stage(s, first, id.world_size));
      await(final_verdict);
    }
  }
  Report report = server.finish(verdict_by.sooner(Deadline::after(Millis(500))));
  out.emit([&] { return render_text(report, {out.color}); }, [&] { return render_json(report); });
  if (interrupted()) return exit_code::kSignalBase + interrupted();
  return report.exit_code();
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

int usage_problems(const Identity& id) {
  for (const auto& p : id.problems)
    Log::error("cannot run: " + p);
  Log::error("`rankcheck env` shows every source rankcheck looked at");
  return exit_code::kUsage;
}

}  // namespace

int run_probe(const RunOptions& o, const EnvMap& env) {
  RunFrame frame(o);
  if (auto ok = check_json_path(o.json_path); !ok) {
    Log::error(ok.error().message);
    return exit_code::kUsage;
  }
  Clock::time_point start = frame.start;
  Deadline end = frame.end;
  std::atomic<int>& watchdog_code = frame.watchdog_code;
  Log& log = frame.log;
  Output& out = frame.out;

  Identity id = detect_identity(env, o.flags);
  BootstrapFn over_mpi = nullptr;
  if (o.bootstrap == "mpi") {
    over_mpi = mpi_bootstrap();
    if (over_mpi == nullptr) {
      Log::error(
          "--bootstrap mpi: this binary was built without MPI; use rankcheck-mpi, built "
          "where Open MPI's headers are found");
      return exit_code::kUsage;
    }
    without_master_addr(id);  // the records travel over MPI
  }
  if (!id.usable()) return usage_problems(id);
  for (const std::string& note : id.notes)
    log.progress("note: " + note);
  auto token = load_token(o, env, log);
  if (!token) {
    Log::error(token.error().message);
    return exit_code::kUsage;
  }
  Session s{o,
            log,
            out,
            start,
            end,
            watchdog_code,
            make_gpu_stage(stage_options(o, env)),
            gpu_plan(id, o, env),
            std::move(*token)};
  Record self =
      build_self(id, o.host_name, env, end.sooner(Deadline::after(Millis(5000))), probe_gpus(s));
  s.out.set_self(self.rank, self.host);
  for (const Finding& f : local_checks(self)) {
    log.error(fmt::format("{} {}: {}", f.is_error() ? "✗" : "!", f.id, f.message));
  }

  if (over_mpi != nullptr) {
    BootstrapContext ctx{
        id,
        self,
        *s.stage,
        s.plan,
        start,
        end,
        !o.no_gpu,
        o.min_busbw_gbps,
        [&s](const std::string& line) { s.log.progress(line); },
        [&watchdog_code](int code) { watchdog_code = code; },
        [&s](const Report& r) {
          s.out.emit([&] { return render_text(r, {s.out.color}); }, [&] { return render_json(r); });
          return interrupted() ? exit_code::kSignalBase + interrupted() : r.exit_code();
        },
        [&s](const MemberReport& m) { return print_member(m, s.out); }};
    return over_mpi(ctx);
  }
  if (id.rank == 0) {
    // Rank 0 may come up before DNS publishes its own name (a Kubernetes headless
    // service): it keeps trying, like the members do, until its decision deadline.
    Deadline resolve_by(end.when() - reserve_for(o.timeout_s));
    for (Millis pause(100); !self.resolve_error.empty() && !resolve_by.expired() && !interrupted();
         pause = std::min(pause * 2, Millis(1000))) {
      log.progress(fmt::format("rank 0: {} (not resolvable yet?), retrying ({} s left)",
                               self.resolve_error, resolve_by.seconds_left()));
      std::this_thread::sleep_for(std::min(pause, resolve_by.remaining()));
      auto again = resolve_host(id.master_addr, resolve_by.sooner(Deadline::after(Millis(5000))));
      if (again) {
        self.master_resolved = *again;
        self.resolve_error.clear();
      } else {
        self.resolve_error = again.error().message;
      }
    }
    if (!self.resolve_error.empty()) {
      Log::error(fmt::format("rank 0 cannot resolve its own MASTER_ADDR: {}", self.resolve_error));
      Finding f{"master-addr-not-local",
                Severity::kError,
                exit_code::kCannotListen,
                fmt::format("MASTER_ADDR {} does not resolve on {}, where rank 0 runs: {}",
                            printable(id.master_addr), printable(self.host), self.resolve_error),
                "set MASTER_ADDR to a name or address of the host rank 0 runs on",
                {self.rank},
                {self.host}};
      return print_member(failure_report(self, std::move(f), ms_between(start, Clock::now())),
                          s.out);
    }
    MasterSetup setup;
    setup.port = static_cast<uint16_t>(id.rendezvous_port);
    setup.addresses = self.master_resolved.get();
    if (all_loopback(self.master_resolved.get()) && spans_hosts(self)) {
      // Listening on loopback would leave every other host out of the report.
      log.error(
          fmt::format("MASTER_ADDR {} is loopback here but the job spans hosts: listening "
                      "on all interfaces so that the others still reach this master",
                      printable(id.master_addr)));
      setup.addresses = {"0.0.0.0"};
    }
    if (auto code = master_path(self, id, s, setup)) return *code;
  }
  return member_path(self, id, s);
}

namespace {
BootstrapFn g_mpi_bootstrap = nullptr;
}  // namespace

void set_mpi_bootstrap(BootstrapFn fn) {
  g_mpi_bootstrap = fn;
}
BootstrapFn mpi_bootstrap() {
  return g_mpi_bootstrap;
}

TempToken::~TempToken() {
  if (!path_.empty()) {
    std::remove(path_.c_str());
    ::rmdir(dir_.c_str());
  }
}

Result<std::string> TempToken::make() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/rankcheck-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    return Error{fmt::format("cannot make a directory for the job token in {}: {}", pattern,
                             std::strerror(errno))};
  }
  dir_ = buf.data();
  std::array<uint8_t, 32> secret{};
  if (auto ok = fill_random(secret); !ok) {
    return Error{fmt::format("cannot make a job token: {}", ok.error().message)};
  }
  std::string hex;
  for (uint8_t b : secret)
    hex += fmt::format("{:02x}", b);
  path_ = dir_ + "/token";
  int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || ::write(fd, hex.data(), hex.size()) != static_cast<ssize_t>(hex.size())) {
    if (fd >= 0) ::close(fd);
    return Error{fmt::format("cannot write the job token {}: {}", path_, std::strerror(errno))};
  }
  ::close(fd);
  return path_;
}

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
  RunFrame frame(o);
  if (auto ok = check_json_path(o.json_path); !ok) {
    Log::error(ok.error().message);
    return exit_code::kUsage;
  }
  Clock::time_point start = frame.start;
  Deadline end = frame.end;
  std::atomic<int>& watchdog_code = frame.watchdog_code;
  Log& log = frame.log;
  Output& out = frame.out;
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
  // A job on one machine still authenticates: a token of its own unless one is given,
  // in a file only this user can read, removed at the end.
  TempToken temp;
  RunOptions with_token = o;
  if (with_token.token_file.empty() && !env_get(env, "RANKCHECK_TOKEN_FILE")) {
    auto made = temp.make();
    if (!made) {
      Log::error(made.error().message);
      return exit_code::kInternal;
    }
    with_token.token_file = *made;
  }
  auto token = load_token(with_token, env, log);
  if (!token) {
    Log::error(token.error().message);
    return exit_code::kUsage;
  }
  Session s{o,
            log,
            out,
            start,
            end,
            watchdog_code,
            make_gpu_stage(stage_options(o, env)),
            gpu_plan(id, o, child_env),
            std::move(*token)};
  Record self =
      build_self(id, o.host_name, child_env, Deadline::after(Millis(2000)), probe_gpus(s));
  s.out.set_self(self.rank, self.host);  // rank 0 writes the report

  char exe[4096] = {};
  ssize_t exe_len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (exe_len <= 0) {
    Log::error(fmt::format("cannot find this program's path: {}", std::strerror(errno)));
    return exit_code::kInternal;
  }

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
      if (!with_token.token_file.empty()) {
        args.insert(args.end(), {"--token-file", with_token.token_file});
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
      pid_t pid = 0;
      int rc = ::posix_spawn(&pid, exe, &fa, nullptr, argv.data(), envp.data());
      posix_spawn_file_actions_destroy(&fa);
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
    if (code && child_code != *code && ++odd <= 4) {
      log.error(fmt::format("member pid {} exited with {}, the job's verdict is {}", pid,
                            child_code, *code));
    }
  }
  return code ? *code : exit_code::kInternal;
}

int run_env(const EnvOptions& o, const EnvMap& env) {
  Identity id = detect_identity(env, o.flags);
  RunOptions ro;
  ro.no_gpu = o.no_gpu;
  ro.nccl_lib = o.nccl_lib;
  ro.device = o.device;
  GpuFacts gpu;
  if (!o.no_gpu) gpu = make_gpu_stage(stage_options(ro, env))->inventory(gpu_plan(id, ro, env));
  Record self = build_self(id, o.host_name, env, Deadline::after(seconds(o.resolve_timeout_s)),
                           std::move(gpu));
  std::vector<Finding> local = id.usable() ? local_checks(self) : std::vector<Finding>{};
  if (o.json) {
    std::fputs(render_env_json(id, self, local).c_str(), stdout);
  } else {
    std::fputs(render_env_text(id, self, local, {::isatty(1) && !env.count("NO_COLOR")}).c_str(),
               stdout);
  }
  if (!id.usable()) return exit_code::kUsage;
  return exit_code_for(local);
}

}  // namespace rankcheck
