// `rankcheck run` and `rankcheck env`: this process is one member; rank 0 also
// hosts the master. The session plumbing is in session.cc, `local` in local.cc.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include "rules/rules.h"
#include "model/gpu.h"
#include "gpu/stage.h"
#include "base/interrupt.h"
#include "rendezvous/member.h"
#include "rendezvous/socket.h"
#include "host/resolve.h"

#include "host/procfs.h"
#include "rendezvous/relay.h"
#include "report/report.h"
#include "app/run.h"
#include "rendezvous/server.h"
#include "base/text.h"

#include "app/bootstrap.h"
#include "app/session.h"
#include "host/interfaces.h"
#include "rehearsal/probe.h"

namespace rankcheck {
namespace {

bool all_loopback(const std::vector<std::string>& addrs) {
  if (addrs.empty()) return false;
  for (const auto& a : addrs) {
    if (!is_loopback_address(a)) return false;
  }
  return true;
}

// Runs this member's GPU stage on the master's go; the results for its ranks.
StageReport run_gpu_stage(Session& s, const Verdict& go, long world_size) {
  s.watchdog_code = exit_code::kGpu;
  // Leave time to abort NCCL and send the results before the master's stage deadline.
  Millis margin = stage_margin(go.stage_ms);
  Deadline by = Deadline::after(std::max(Millis(0), Millis(go.stage_ms) - margin)).sooner(s.end);
  s.log.progress(fmt::format("go: NCCL init and all-reduce ({} s left)", by.seconds_left()));
  NcclInit init = go.nccl_roots > 0 ? NcclInit{go.roots, true} : NcclInit{{*go.nccl_id}, false};
  return StageReport{s.stage->run(init, world_size, s.plan, by)};
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

// A member that leads a block of a scalable NCCL init (the first rank of every
// --nccl-roots-every) makes that block's root here, before its hello carries it:
// NCCL's bootstrap is then spread over the job's hosts, not all on rank 0's.
std::optional<NcclIdBytes> root_id(const Record& self, const Identity& id, Session& s) {
  long every = s.o.nccl_roots_every;
  if (s.o.no_gpu || every <= 0 || id.world_size <= every || self.rank % every != 0 ||
      self.nranks != 1 || !self.gpu.usable() || self.gpu.nccl_version < 22300) {
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
  // A job larger than the master's listen backlog spreads its first connections.
  long backlog = ProcFs{}.somaxconn().value_or(4096);
  jo.first_delay = first_connect_delay(self.rank, self.world_size, backlog);
  // The members of a host meet the master through one of them (relay.h), unless
  // this one is alone on its host or stands for the whole node.
  std::unique_ptr<Relay> relay;
  struct Finish {
    std::unique_ptr<Relay>& relay;
    Deadline by;
    // The relay serves the host's other members until the master is done with them.
    ~Finish() {
      // Interrupted: at once; its members join the master directly.
      if (relay) relay->finish(interrupted() ? Deadline::after(Millis(0)) : by);
    }
  } finish_relay{relay, end.extended(kVerdictGrace + Millis(2000))};
  if (!o.no_relay && self.local_world_size != 1 && !id.node_mode()) {
    RelayOptions ro;
    ro.endpoint = relay_endpoint(jo.master_addr, jo.master_port);
    ro.master_addr = jo.master_addr;
    ro.master_port = jo.master_port;
    ro.host = self.host;
    ro.pid = self.pid;
    ro.job_id = self.job_id;
    ro.token = jo.token;
    ro.give_up = end;
    ro.stop_by = end.extended(kVerdictGrace + Millis(2000));
    ro.handshake = jo.handshake;
    // One connection a host: paced by the host's place among the job's hosts.
    long per_host = std::max<long>(1, self.local_world_size);
    ro.first_delay = first_connect_delay(self.rank / per_host, self.world_size / per_host, backlog);
    ro.log = jo.log;
    std::string why;
    relay = Relay::start(ro, &why);
    if (relay)
      log.progress(fmt::format("relaying this host's members to the master (@{})", ro.endpoint));
    if (why.empty()) jo.relay = ro.endpoint;  // ours, or another member's
    if (!why.empty()) log.progress(why + "; joining the master directly");
  }
  jo.nccl_root = root_id(self, id, s);
  JoinResult joined = join_master(self, jo);
  if (interrupted()) return interrupted_exit(log, self, out, start);

  auto took = [start] { return ms_between(start, Clock::now()); };
  if (joined.failure) return print_member(failure_report(self, *joined.failure, took()), out);
  log.progress(fmt::format("joined {}:{} ({}/{} ranks so far)", id.master_addr, id.rendezvous_port,
                           joined.admit.joined_ranks, joined.admit.world_size));
  auto on_plan = [&s, &log](const PathPlan& plan) { return rehearse(plan, s, log); };
  auto verdict = wait_verdict(joined.socket, end.extended(kVerdictGrace), joined, jo.token,
                              VerdictWait::kFirst, on_plan);
  if (!verdict && joined.relayed && verdict.error().fault == Fault::kClosed && !interrupted()) {
    // The relay died before the verdict: the master takes this process back directly.
    log.progress("this host's relay closed before the verdict; joining the master directly");
    jo.relay.clear();
    joined = join_master(self, jo);
    if (interrupted()) return interrupted_exit(log, self, out, start);
    if (joined.failure) return print_member(failure_report(self, *joined.failure, took()), out);
    verdict = wait_verdict(joined.socket, end.extended(kVerdictGrace), joined, jo.token,
                           VerdictWait::kFirst, on_plan);
  }
  if (verdict && !verdict->final && verdict->run_gpu && verdict->nccl_id) {
    StageReport results = run_gpu_stage(s, *verdict, id.world_size);
    auto frame = jo.token
                     ? encode_signed(results, *jo.token, joined.server_nonce, joined.client_nonce)
                     : encode(results);
    auto sent = joined.socket.write_all(frame, Deadline::after(Millis(1000)));
    if (!sent) log.error("sending the GPU stage results: " + sent.error().message);
    verdict = wait_verdict(joined.socket, end.extended(kVerdictGrace), joined, jo.token,
                           VerdictWait::kFinal);
  }
  if (interrupted()) return interrupted_exit(log, self, out, start);
  if (verdict) {
    int code = print_member(verdict_report(self, *verdict, took()), out);
    // Rank 0's report matters most when the job failed: leave only once it is out.
    if (code != exit_code::kPass) {
      std::fflush(stdout);
      if (!await_master_close(joined.socket,
                              Deadline::after(Millis(5000)).sooner(end.extended(kVerdictGrace)))) {
        log.progress("rank 0 had not printed its report by the deadline; exiting");
      }
    }
    return code;
  }
  Finding f =
      verdict.error().fault == Fault::kAuthFailed
          ? make_finding(
                FindingId::kAuthFailed,
                fmt::format("the master at {}:{} answered, but {}", printable(id.master_addr),
                            id.rendezvous_port, verdict.error().message),
                "something other than rank 0 answered on MASTER_PORT, or rank 0 has "
                "another token: give every process the same --token-file")
          : make_finding(FindingId::kMasterLost,
                         fmt::format("{} joined the master at {}:{}, then: {}", member_label(self),
                                     printable(id.master_addr), id.rendezvous_port,
                                     verdict.error().message));
  f.ranks = {self.rank};
  f.hosts = {self.host};
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
  if (auto backlog = ProcFs{}.somaxconn(); backlog && *backlog < world_size) {
    log.progress(
        fmt::format("net.core.somaxconn is {}, below the {} members: those that connect "
                    "directly spread their first attempts, {} ms for each {}",
                    *backlog, world_size, kBacklogDrain.count(), *backlog));
  }
}

}  // namespace

std::optional<int> master_path(Record& self, const Identity& id, Session& s,
                               const MasterSetup& setup, bool join_other,
                               const std::function<void(uint16_t)>& on_listening) {
  const RunOptions& o = s.o;
  const Log& log = s.log;
  const Output& out = s.out;
  Clock::time_point start = s.start;
  Deadline end = s.end;
#ifdef __GLIBC__
  // One malloc arena for the master's threads: the report, made on this thread
  // after the server's, reuses what the server freed (its verdicts, its buffers)
  // instead of growing a second arena (9 MB more at 100k ranks).
  ::mallopt(M_ARENA_MAX, 1);
#endif
  ServerConfig cfg;
  MasterConfig& mc = cfg.master;
  mc.world_size = id.world_size;
  // The launcher started more members than the world size asks for: all are waited for.
  long world_members = (id.world_size + id.nranks - 1) / std::max(1L, id.nranks);
  if (id.launcher_members > world_members) {
    mc.launcher_members = id.launcher_members;
    log.progress(fmt::format(
        "the launcher started {} ({}) but the world size is {}: waiting for all of them",
        id.node_mode() ? plural(size_t(id.launcher_members), "node", "nodes")
                       : plural(size_t(id.launcher_members), "process", "processes"),
        id.launcher_members_from, id.world_size));
  }
  mc.job_id = self.job_id;  // as the hellos carry it (cut to its cap)
  mc.master_addr = id.master_addr;
  mc.master_host = self.host;
  mc.master_resolved = self.master_resolved.get();
  mc.start = start;
  mc.log = [&log](const std::string& line) { log.progress(line); };
  mc.gpu_stage = !o.no_gpu;
  mc.make_nccl_id = [&s] { return s.stage->unique_id(); };
  mc.nccl_roots_every = o.nccl_roots_every;
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
    // Only a master that shows this job's id, and the job token when there is
    // one (the join checks it), is joined: whatever else answers on the port
    // could hand rank 0 a verdict of its own making.
    // With a token, that master shows a tag of its job id that only a holder
    // of the same token computes.
    bool same_job = other && !self.job_id.empty() && other->auth == s.token.has_value() &&
                    other->job_id == (s.token ? job_tag(*s.token, other->nonce, self.job_id)
                                              : self.job_id.str());
    if (join_other && same_job) {
      log.error(fmt::format(
          "a rankcheck master of this job already listens on {}:{}: joining it as a member so "
          "that it reports the duplicate rank 0",
          printable(id.master_addr), setup.port));
      return std::nullopt;
    }
    Fault fault = port.error().fault;
    Finding f;
    if (fault == Fault::kNotLocal) {
      f = make_finding(FindingId::kMasterAddrNotLocal, "");
      f.message = fmt::format("MASTER_ADDR {} ({}) is not an address of {}, where rank 0 runs; {}",
                              printable(id.master_addr), format_list(self.master_resolved.get(), 4),
                              printable(self.host), port.error().message);
      // Not "set it to <this host's name>": that name may resolve to loopback here.
      f.hint = fmt::format(
          "run rank 0 on the host MASTER_ADDR names, or set MASTER_ADDR to an address of {} "
          "that the other hosts reach (`hostname -I` lists them)",
          printable(self.host));
    } else if (fault == Fault::kInUse || other) {
      f = make_finding(FindingId::kMasterPortInUse, "");
      f.message = fmt::format(
          "MASTER_PORT {} is taken on {}: {}{}", setup.port, printable(self.host),
          port.error().message,
          !other ? std::string()
          : other->auth
              ? std::string(" (by a rankcheck master that wants a job token: another job's, or "
                            "this job's with another token or job id)")
          : self.job_id.empty()
              ? fmt::format(" (by a rankcheck master of job '{}'; this process has no job id to "
                            "tell whether it is this job's: give every process the same --job-id)",
                            printable(other->job_id))
              : fmt::format(" (by a rankcheck master of job '{}')", printable(other->job_id)));
      f.hint = fmt::format(
          "pick another MASTER_PORT, or stop the holder (ss -ltnp 'sport = :{}' "
          "names it)",
          setup.port);
    } else {
      // Not a port someone holds: say what the system said, and what usually causes it.
      f = make_finding(FindingId::kMasterListenFailed, "");
      f.message = fmt::format("rank 0 cannot listen on MASTER_PORT {} on {}: {}", setup.port,
                              printable(self.host), port.error().message);
      f.hint =
          fault == Fault::kDenied
              ? std::string(
                    "ports below 1024 need root or CAP_NET_BIND_SERVICE (and a security policy "
                    "may deny others): pick a MASTER_PORT of 1024 or above")
              : f.hint;
    }
    f.ranks = {self.rank};
    f.hosts = {self.host};
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
  // Every member's verdict written, and their ends closed: at 100k members the
  // writes alone take a second on a small machine.
  Report report =
      server.finish(verdict_by.sooner(Deadline::after(Millis(500) + Millis(id.world_size / 40))));
  return print_report(report, s);
}

int run_probe(const RunOptions& o, const EnvMap& env) {
  Session s(o);
  const Log& log = s.log;
  Deadline end = s.end;

  Identity id = detect_identity(env, o.flags);
  bool over_mpi = o.bootstrap == "mpi";
  if (over_mpi) {
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
  }
  if (!id.usable()) return usage_problems(id);
  // Notes and this process's own early findings are said by rank 0, which speaks
  // for the job, and by a member only when it fails: eight copies of "MASTER_PORT
  // not set" in a passing job's log help nobody. (The master's rules find the
  // same things over every record.)
  std::vector<std::pair<std::string, bool>> held;  // (line, an error?)
  auto say = [&](std::string line, bool error) {
    if (id.rank != 0) {
      held.emplace_back(std::move(line), error);
    } else if (error) {
      Log::error(line);
    } else {
      log.progress(line);
    }
  };
  auto failed = [&](int code) {
    if (code == exit_code::kPass) return code;
    for (const auto& [line, error] : held) {
      if (error) {
        Log::error(line);
      } else {
        log.progress(line);
      }
    }
    return code;
  };
  for (const std::string& note : id.notes)
    say("note: " + note, false);
  // A job-wide start (the launch script's RANKCHECK_START_TIME): the deadline counts
  // from it, so that a task that starts late does not keep the step running longer.
  auto job_start = job_start_time(env);
  if (!job_start) {
    Log::error(job_start.error().message);
    return failed(exit_code::kUsage);
  }
  double late_ms = 0;
  if (*job_start) {
    double now_s = std::chrono::duration<double>(s.wall_start.time_since_epoch()).count();
    late_ms = std::max(0.0, (now_s - **job_start) * 1000.0);
    s.end = Deadline(s.start + seconds(o.timeout_s) - Millis(static_cast<long>(late_ms)));
    end = s.end;
    if (late_ms >= 1000) {
      say(fmt::format("note: this process started {} after the job's start "
                      "(RANKCHECK_START_TIME): {} s of --timeout {} left",
                      format_seconds(late_ms), end.seconds_left(), o.timeout_s),
          false);
    }
  }
  auto token = load_token(o, env, log);
  if (!token) {
    Log::error(token.error().message);
    return failed(exit_code::kUsage);
  }
  s.stage = make_gpu_stage(stage_options(o, env));
  s.plan = gpu_plan(id, o, env);
  s.token = std::move(*token);
  Record self = build_self(id, o.host_name, env, end.sooner(Deadline::after(Millis(5000))),
                           probe_gpus(s), o.host_view.get());
  // The master compares when each process started (late-start).
  self.started_unix_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(s.wall_start.time_since_epoch())
          .count());
  // Checked once {rank} and {host} are filled in, before any rendezvous.
  s.out.set_self(self.rank, self.host);
  if (auto ok = check_json_path(s.out.json_path); !ok) {
    Log::error(ok.error().message);
    return failed(exit_code::kUsage);
  }
  if (*job_start && end.expired()) {
    // Started past the job's deadline: the others have given up (or decided).
    Finding f = make_finding(
        FindingId::kLateJoin,
        fmt::format("{} started {} after the job's start (RANKCHECK_START_TIME), past the "
                    "job's deadline (--timeout {} s): the others have given up on it",
                    member_label(self), format_seconds(late_ms), o.timeout_s),
        fmt::format("find why it started late on {} (a slow node, a container image pull), or "
                    "raise --timeout",
                    printable(self.host)));
    f.ranks = {self.rank};
    f.hosts = {self.host};
    return failed(print_member(failure_report(self, std::move(f), late_ms), s.out));
  }
  for (const Finding& f : local_checks(self))
    say(render_finding_line(f), true);

  if (over_mpi) return failed(run_over_mpi(id, self, s));
  // The rehearsal of NCCL's connections listens where NCCL would; it answers until
  // this process ends.
  std::unique_ptr<PathListener> path_listener = open_path_listener(self, s);
  if (id.rank == 0) {
    if (!s.token && spans_hosts(self)) {
      // Said once, by the process whose report an impostor could decide.
      log.error(
          "warning: no job token (--token-file / RANKCHECK_TOKEN_FILE) on a job that spans "
          "hosts: anyone who reaches MASTER_PORT can claim a rank, pass or fail this job, and "
          "is handed the NCCL id (docs/security.md)");
    }
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
      Finding f = make_finding(
          FindingId::kMasterAddrNotLocal,
          fmt::format("MASTER_ADDR {} does not resolve on {}, where rank 0 runs: {}",
                      printable(id.master_addr), printable(self.host), self.resolve_error));
      f.ranks = {self.rank};
      f.hosts = {self.host};
      return print_member(failure_report(self, std::move(f), ms_between(s.start, Clock::now())),
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
  return failed(member_path(self, id, s));
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
