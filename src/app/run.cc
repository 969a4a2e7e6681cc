// `rankcheck run` and `rankcheck env`: this process is one member; rank 0 also
// hosts the master (master_run.cc). The member's protocol is rendezvous/member_run.h;
// `local` is local.cc.

#include "app/run.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>

#include "app/bootstrap.h"
#include "app/master_run.h"
#include "app/session.h"
#include "app/watch_run.h"
#include "base/interrupt.h"
#include "base/text.h"
#include "gpu/stage.h"
#include "host/procfs.h"
#include "host/resolve.h"
#include "nccl/version.h"
#include "rehearsal/probe.h"
#include "rendezvous/member.h"
#include "rendezvous/member_run.h"
#include "rules/rules.h"
#include "rules/self.h"

namespace rankcheck {
namespace {

// One attempt to resolve a name, at most.
constexpr Millis kResolveAttempt{5000};
// Rank 0's retries of its own MASTER_ADDR: from this pause, doubling, to the next.
constexpr Millis kResolveFirstPause{100};
constexpr Millis kResolveMaxPause{1000};
// A started-late note is said from this lateness on.
constexpr double kLateNoteMs = 1000;
// How long a member past the job's deadline (by its clock) tries the master.
constexpr Millis kPastDeadlineTry{5000};
// The listen backlog assumed where /proc does not say.
constexpr long kDefaultBacklog = 4096;

// Notes and this process's own early findings are said by rank 0, which speaks
// for the job, and by a member only when it fails: eight copies of "MASTER_PORT
// not set" in a passing job's log help nobody. (The master's rules find the same
// things over every record.)
class EarlyWords {
 public:
  EarlyWords(bool speaks, const Log& log) : speaks_(speaks), log_(log) {}
  void say(std::string line, bool error) {
    if (!speaks_) {
      held_.emplace_back(std::move(line), error);
    } else {
      print(line, error);
    }
  }
  /// The run's exit code, after what was held back when it is a failure.
  int done(int code) const {
    if (code == exit_code::kPass) return code;
    for (const auto& [line, error] : held_)
      print(line, error);
    return code;
  }

 private:
  void print(const std::string& line, bool error) const {
    if (error) {
      Log::error(line);
    } else {
      log_.progress(line);
    }
  }
  bool speaks_;
  const Log& log_;
  std::vector<std::pair<std::string, bool>> held_;  // (line, an error?)
};

bool all_loopback(const std::vector<std::string>& addrs) {
  if (addrs.empty()) return false;
  for (const auto& a : addrs) {
    if (!is_loopback_address(a)) return false;
  }
  return true;
}

int interrupted_exit(const Log& log, const Record& self, const Output& out,
                     Clock::time_point start) {
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

// `--bootstrap mpi` needs rankcheck-mpi under mpirun; the records then travel over
// MPI, not to MASTER_ADDR. nullopt when the bootstrap can be used.
std::optional<int> check_bootstrap(const RunOptions& o, const EnvMap& env, Identity& id) {
  if (o.bootstrap != "mpi") return std::nullopt;
  if (!have_mpi_bootstrap()) {
    Log::error(
        "--bootstrap mpi: this binary was built without MPI; use rankcheck-mpi, built "
        "where Open MPI's headers are found");
    return exit_code::kUsage;
  }
  if (auto problem = mpi_launch_problem(env)) {
    Log::error(*problem);
    return exit_code::kUsage;
  }
  without_master_addr(id);  // the records travel over MPI
  return std::nullopt;
}

// A job-wide start (the launch script's RANKCHECK_START_TIME): the deadline counts
// from it, so that a task that starts late does not keep the step running longer.
// How late this process started (nullopt without a job start), or a usage error.
Result<std::optional<double>> apply_job_start(Session& s, const EnvMap& env, EarlyWords& words) {
  auto job_start = job_start_time(env);
  if (!job_start) return job_start.error();
  if (!*job_start) return std::optional<double>();
  double now_s = std::chrono::duration<double>(s.wall_start.time_since_epoch()).count();
  double late_ms = std::max(0.0, (now_s - **job_start) * 1000.0);
  if (late_ms >= s.o.timeout_s * 1000) {
    // Past the job's deadline by this host's clock: started that late, or the clock
    // is ahead of the launch host's. Only the master can tell (clock-skew): members
    // try it anyway, within their own --timeout.
    s.log.error(fmt::format(
        "note: by this host's clock the job started {} ago (RANKCHECK_START_TIME), past "
        "--timeout {} s: this process started that late, or this host's clock is ahead",
        format_seconds(late_ms), s.o.timeout_s));
    return std::optional<double>(late_ms);
  }
  s.time = Timeline(s.start - Millis(static_cast<long>(late_ms)), s.o.timeout_s);
  if (late_ms >= kLateNoteMs) {
    words.say(fmt::format("note: this process started {} after the job's start "
                          "(RANKCHECK_START_TIME): {} s of --timeout {} left",
                          format_seconds(late_ms), s.time.end().seconds_left(), s.o.timeout_s),
              false);
  }
  return std::optional<double>(late_ms);
}

// The listener of the rehearsal of NCCL's connections on the address NCCL would use
// here (one member per host: local rank 0, or a node's member); sets the record's
// listen port and port range. Null where there is none.
std::unique_ptr<PathListener> open_path_listener(Record& self, const Session& s) {
  const NcclIfFacts& f = self.nccl_if;
  if (f.state != NcclIfFacts::kFound || self.local_rank > 0) return nullptr;
  auto l = PathListener::open(f.address, f.name, path_identity(self.host, f.netns),
                              s.token ? &*s.token : nullptr);
  if (!l) {
    s.log.error("warning: " + l.error().message + ": this host's paths are not rehearsed");
    return nullptr;
  }
  NcclIfFacts& own = self.nccl_if.edit();
  own.listen_port = (*l)->port();
  std::tie(own.port_lo, own.port_hi) = local_port_range();
  return std::move(*l);
}

// Without a job token nothing proves a plan is the master's (a squatter on
// MASTER_PORT could send one): a member then connects to no loopback or unspecified
// address, and to no more hosts than its own world size has. The targets left out
// are not run (the master, if it is one, counts them unproven).
std::vector<PathTarget> unproven_plan_targets(const PathPlan& plan, long world_size,
                                              const Log& log) {
  std::vector<PathTarget> kept;
  size_t most = size_t(std::max(world_size, 2L) - 1);
  size_t refused = 0;
  for (const PathTarget& t : plan.targets) {
    in6_addr any6{};
    bool nowhere =
        t.address == "0.0.0.0" ||
        (::inet_pton(AF_INET6, t.address.c_str(), &any6) == 1 && IN6_IS_ADDR_UNSPECIFIED(&any6));
    if (is_loopback_address(t.address) || nowhere || kept.size() >= most) {
      ++refused;
      continue;
    }
    kept.push_back(t);
  }
  if (refused > 0) {
    log.error(
        fmt::format("warning: left {} of the path plan's {} connections out (loopback, "
                    "unspecified, or more than a job of {} has hosts): without a job "
                    "token nothing proves the plan is the master's",
                    refused, plan.targets.size(), world_size));
  }
  return kept;
}

// Runs the master's plan of connections from this host.
PathReport rehearse(const PathPlan& plan, const Session& s, const Log& log, long world_size) {
  auto t0 = Clock::now();
  Deadline by = Deadline::after(Millis(plan.total_ms)).sooner(s.time.end());
  std::vector<PathTarget> unproven;
  if (!s.token) unproven = unproven_plan_targets(plan, world_size, log);
  PathReport r{probe_paths(plan.self_host, plan.self_identity, s.token ? plan.targets : unproven,
                           Millis(plan.per_conn_ms), plan.in_flight, by,
                           s.token ? &*s.token : nullptr)};
  size_t ok = 0;
  for (const PathResult& x : r.results)
    ok += x.outcome == PathOutcome::kOk;
  log.progress(fmt::format("rehearsed NCCL's connections from this host: {} of {} in {}", ok,
                           r.results.size(), format_seconds(ms_between(t0, Clock::now()))));
  return r;
}

// This member's record, with when it started (the master compares: late-start).
Record make_self(const Identity& id, Session& s, const EnvMap& env, const HostView* host) {
  Record self =
      build_self(id, s.o.host_name, env, s.time.end().sooner(Deadline::after(kResolveAttempt)),
                 s.probe_gpus(), host);
  self.started_unix_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(s.wall_start.time_since_epoch())
          .count());
  return self;
}

// Rank 0 binds its own MASTER_ADDR: a name that does not resolve here fails at once
// (as `env` says), except under Kubernetes, where a headless service publishes rank
// 0's own name only once its pod is ready: there it keeps trying, like the members
// do, until its decision deadline, and says so when the answer changes and every
// progress interval. A definite answer ("Name or service not known") is kept over a
// last attempt the deadline cut short.
void resolve_own_master_addr(Record& self, const Identity& id, const Session& s,
                             bool names_appear_late) {
  if (!names_appear_late) return;
  Deadline resolve_by = s.time.decide_by();
  std::string said;
  auto next_say = Clock::now();
  for (Millis pause = kResolveFirstPause;
       !self.resolve_error.empty() && !resolve_by.expired() && !interrupted();
       pause = std::min(pause * 2, kResolveMaxPause)) {
    if (self.resolve_error != said || Clock::now() >= next_say) {
      s.log.progress(
          fmt::format("rank 0: {} (not published yet, under Kubernetes?), retrying "
                      "({} s left)",
                      self.resolve_error, resolve_by.seconds_left()));
      said = self.resolve_error;
      next_say = Clock::now() + seconds(s.o.progress_interval_s);
    }
    std::this_thread::sleep_for(std::min(pause, resolve_by.remaining()));
    auto again = resolve_host(id.master_addr, resolve_by.sooner(Deadline::after(kResolveAttempt)));
    if (again) {
      self.master_resolved = *again;
      self.resolve_error.clear();
    } else if (again.error().fault != Fault::kTimeout || said.empty()) {
      self.resolve_error = again.error().message;
    }
  }
}

// Where rank 0's master listens: MASTER_ADDR's addresses, or every interface where
// they are loopback in a job that spans hosts (the others would be left out).
MasterSetup master_setup(const Record& self, const Identity& id, const Log& log) {
  MasterSetup setup;
  setup.port = static_cast<uint16_t>(id.rendezvous_port);
  setup.addresses = self.master_resolved.get();
  if (all_loopback(self.master_resolved.get()) && spans_hosts(self)) {
    log.error(
        fmt::format("MASTER_ADDR {} is loopback here but the job spans hosts: listening "
                    "on all interfaces so that the others still reach this master",
                    printable(id.master_addr)));
    setup.addresses = {"0.0.0.0"};
  }
  return setup;
}

// Rank 0: the master in this process. nullopt: another master of this job holds the
// port, and this process joins it as a member.
std::optional<int> serve_as_rank0(Record& self, const Identity& id, Session& s,
                                  bool names_appear_late) {
  if (!s.token && spans_hosts(self)) {
    // Said once, by the process whose report an impostor could decide.
    s.log.error(
        "warning: no job token (--token-file / RANKCHECK_TOKEN_FILE) on a job that spans "
        "hosts: anyone who reaches MASTER_PORT can claim a rank, pass or fail this job, and "
        "is handed the NCCL id (docs/security.md)");
  }
  resolve_own_master_addr(self, id, s, names_appear_late);
  if (!self.resolve_error.empty()) {
    Log::error(fmt::format("rank 0 cannot resolve its own MASTER_ADDR: {}", self.resolve_error));
    return print_member(failure_report(self, master_addr_unresolved(self, id.master_addr),
                                       ms_between(s.start, Clock::now())),
                        s.out);
  }
  return serve_master(self, id, s, master_setup(self, id, s.log));
}

// A rank out of its own world, found before any network, caused whatever the
// rendezvous then met: it leads the report of a member that could not get a
// verdict, and gives its exit code. (Other errors it found alone, such as a flag
// that overrides the launcher's variable, do not explain an unreachable master.)
MemberReport own_errors_first(const Record& self, Finding failure, double took) {
  std::vector<Finding> own;
  for (Finding& f : local_checks(self)) {
    if (f.is_error() && f.id == FindingId::kRankOutOfRange) own.push_back(std::move(f));
  }
  if (own.empty()) return failure_report(self, std::move(failure), took);
  MemberReport m = failure_report(self, std::move(own.front()), took);
  for (size_t i = 1; i < own.size(); ++i)
    m.findings.push_back(std::move(own[i]));
  m.findings.push_back(std::move(failure));
  return m;
}

// A member that leads a block of a scalable NCCL init (the first rank of every
// --nccl-roots-every) makes that block's root here, before its hello carries it:
// NCCL's bootstrap is then spread over the job's hosts, not all on rank 0's.
std::optional<NcclIdBytes> root_id(const Record& self, const Identity& id, Session& s) {
  long every = s.o.nccl_roots_every;
  if (s.o.no_gpu || every <= 0 || id.world_size <= every || self.rank % every != 0 ||
      self.nranks != 1 || !self.gpu.usable() ||
      !nccl::has(self.gpu.nccl_version, nccl::kScalableInit)) {
    return std::nullopt;
  }
  auto uid = s.stage->unique_id();
  if (!uid) {
    s.log.error(fmt::format("rank {} leads an NCCL root, but ncclGetUniqueId failed: {}", self.rank,
                            uid.error().message));
    return std::nullopt;
  }
  return *uid;
}

// How this member joins, and what it does on the master's word.
MemberRun member_plan(const Identity& id, Session& s) {
  MemberRun run;
  JoinOptions& jo = run.join;
  jo.master_addr = id.master_addr;
  jo.master_port = static_cast<uint16_t>(id.rendezvous_port);
  jo.give_up = s.time.end();
  jo.handshake = seconds(s.o.handshake_timeout_s);
  jo.progress_interval = seconds(s.o.progress_interval_s);
  const Log& log = s.log;
  jo.log = [&log](const std::string& line) { log.progress(line); };
  jo.token = s.token ? &*s.token : nullptr;
  run.time = s.time;
  run.rehearse = [&s, &id](const PathPlan& plan) {
    return rehearse(plan, s, s.log, id.world_size);
  };
  run.run_stage = [&s, &id](const Verdict& go) { return s.run_gpu_stage(go, id.world_size); };
  return run;
}

// A member: join (the members of a host through one of them, unless this one is
// alone on its host or stands for the whole node), wait for the verdict, print the
// one-line summary.
int join_as_member(Record& self, const Identity& id, Session& s, std::optional<double> past_ms) {
  MemberRun run = member_plan(id, s);
  // Past the job's deadline by its own clock: a master still there is this job's
  // (the clock was ahead); none answering soon means the others gave up.
  if (past_ms) run.join.give_up = s.time.end().sooner(Deadline::after(kPastDeadlineTry));
  // A job larger than the master's listen backlog spreads its first connections.
  long backlog = ProcFs{}.somaxconn().value_or(kDefaultBacklog);
  run.join.first_delay = first_connect_delay(self.rank, self.world_size, backlog);
  HostRelay relay;
  if (!s.o.no_relay && self.local_world_size != 1 && !id.node_mode()) {
    relay = start_host_relay(self, run.join, s.time, backlog);
  }
  run.join.nccl_root = root_id(self, id, s);
  MemberOutcome got = member_protocol(self, run);
  if (got.interrupted) return interrupted_exit(s.log, self, s.out, s.start);
  double took = ms_between(s.start, Clock::now());
  if (got.failure && past_ms && got.failure->id == FindingId::kMasterUnreachable) {
    got.failure = started_past_deadline(self, *past_ms, s.o.timeout_s, /*tried=*/true);
  }
  if (got.failure)
    return print_member(own_errors_first(self, std::move(*got.failure), took), s.out);
  int code = print_member(verdict_report(self, *got.verdict, took), s.out);
  // Rank 0's report matters most when the job failed: leave only once it is out.
  if (code != exit_code::kPass) await_report(got, s.time, run.join.log);
  hand_off_member(s, self, &*got.verdict, code);
  return code;
}

// The process's run, from its identity to its exit code.
int run_phases(Session& s, const EnvMap& env, const HostView* host) {
  const RunOptions& o = s.o;
  Identity id = detect_identity(env, o.flags);
  if (auto code = check_bootstrap(o, env, id)) return *code;
  if (!id.usable()) return usage_problems(id);
  EarlyWords words(id.rank == 0, s.log);
  for (const std::string& note : id.notes)
    words.say("note: " + note, false);
  auto late_ms = apply_job_start(s, env, words);
  if (!late_ms) {
    Log::error(late_ms.error().message);
    return words.done(exit_code::kUsage);
  }
  auto token = load_token(o, env, s.log);
  if (!token) {
    Log::error(token.error().message);
    return words.done(exit_code::kUsage);
  }
  s.open(id, env, env, std::move(*token));
  Record self = make_self(id, s, env, host);
  // Checked once {rank} and {host} are filled in, before any rendezvous.
  s.out.set_self(self.rank, self.host);
  if (auto ok = check_output_paths(s.out); !ok) {
    Log::error(ok.error().message);
    return words.done(exit_code::kUsage);
  }
  std::optional<double> past_ms;
  if (*late_ms && **late_ms >= o.timeout_s * 1000) past_ms = **late_ms;
  if (past_ms && id.rank == 0) {
    // Rank 0 past the job's deadline: the members it would serve have given up.
    Finding f = started_past_deadline(self, *past_ms, o.timeout_s);
    return words.done(print_member(failure_report(self, std::move(f), *past_ms), s.out));
  }
  for (const Finding& f : local_checks(self))
    words.say(render_finding_line(f), true);
  if (o.bootstrap == "mpi") return words.done(run_over_mpi(id, self, s));
  // The rehearsal of NCCL's connections listens where NCCL would; it answers until
  // this process ends.
  std::unique_ptr<PathListener> path_listener = open_path_listener(self, s);
  if (id.rank == 0) {
    bool kubernetes = env.count("KUBERNETES_SERVICE_HOST") > 0;
    if (auto code = serve_as_rank0(self, id, s, kubernetes)) return *code;
  }
  if (o.before_join && !o.before_join()) return words.done(exit_code::kInternal);
  return words.done(join_as_member(self, id, s, past_ms));
}

}  // namespace

int run_process(const RunOptions& o, const EnvMap& env, const HostView* host) {
  // With a command, this process becomes its wrapper and the check runs in a child.
  if (!o.watch.command.empty() && o.watch.handoff_fd < 0) return run_watched(o, env, host);
  Session s(o);
  return s.leave(run_phases(s, env, host));
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
  if (id.usable() && !self.resolve_error.empty()) {
    // What `run` would meet first. Rank 0 stops at once: it cannot listen. A member
    // retries until --timeout, and the name may be one that appears later (a
    // Kubernetes headless service before rank 0's pod is ready): a warning.
    if (id.rank == 0) {
      local.push_back(master_addr_unresolved(self, id.master_addr));
    } else {
      local.push_back(master_addr_unresolved_yet(self, id.master_addr));
    }
  }
  Output out{.json_path = o.json_path, .color = o.color, .metrics_path = {}, .exclude_path = {}};
  Status written = out.emit([&] { return render_env_text(id, self, local, {o.color}); },
                            [&](const JsonSink& sink) { sink(render_env_json(id, self, local)); });
  return with_written(written, id.usable() ? exit_code_for(local) : exit_code::kUsage);
}

}  // namespace rankcheck
