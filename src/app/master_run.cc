// Rank 0's side of `rankcheck run` (and of `rankcheck local`): the master's
// configuration, the server in this process, rank 0 as its first member, the
// GPU stage on the master's go, and the report.

#include "app/master_run.h"

#include <algorithm>
#include <future>
#include <thread>

#include <fmt/format.h>
#include <malloc.h>
#include <sys/resource.h>

#include "app/session.h"
#include "app/watch_run.h"
#include "base/interrupt.h"
#include "base/text.h"
#include "host/procfs.h"
#include "rendezvous/member.h"
#include "rendezvous/member_run.h"
#include "rendezvous/server.h"
#include "rules/self.h"

namespace rankcheck {

namespace {

// How long rank 0 gives a master that holds its port to show its challenge.
constexpr Millis kOtherMasterProbe{1500};
// How often a rank 0 away from MASTER_ADDR looks for the master there: first, at most.
constexpr Millis kOtherMasterFirstPause{50};
constexpr Millis kOtherMasterMaxPause{500};
// How often a waiting rank 0 looks for a verdict or a signal.
constexpr Millis kVerdictPoll{20};
// Time to write every member's verdict: this much, and 1 ms more for each 40 members.
constexpr Millis kVerdictWriteBase{500};
constexpr long kVerdictWritesPerMs = 40;
// File descriptors a master needs beyond one per member (its own files, the listener).
constexpr long kSpareFiles = 64;
// Handshakes under way at once: at most this many, and as many as the open-files
// limit leaves beyond the members, but never fewer than this many.
constexpr size_t kMaxHandshakes = 1024;
constexpr size_t kMinHandshakes = 16;

// A master holds one descriptor per member, and one for each handshake under way:
// the soft limit goes up to the hard one (a flood of silent connections must meet
// the handshake cap, never EMFILE), and the handshake slots are what the limit
// leaves beyond the members and the master's own files.
size_t check_capacity(long world_size, const Log& log) {
  rlimit rl{};
  auto need = static_cast<rlim_t>(world_size + kSpareFiles);
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return kMaxHandshakes;
  rlim_t was = rl.rlim_cur;
  // An unlimited hard limit is more than the kernel's nr_open allows: then what the
  // job needs, at least.
  for (rlim_t to : {rl.rlim_max, std::min(rl.rlim_max, std::max(need, was))}) {
    rlimit raised{to, rl.rlim_max};
    if (to <= rl.rlim_cur) break;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl.rlim_cur = to;
  }
  if (rl.rlim_cur < need) {
    log.error(
        fmt::format("the open-file limit ({} soft, {} hard) is below the {} this master "
                    "needs for {} members: raise `ulimit -n`",
                    was, rl.rlim_max, need, world_size));
  }
  long left = long(std::min<rlim_t>(rl.rlim_cur, 1 << 24)) - world_size - kSpareFiles;
  return size_t(std::clamp<long>(left, long(kMinHandshakes), long(kMaxHandshakes)));
}

void check_backlog(long world_size, const Log& log) {
  if (auto backlog = ProcFs{}.somaxconn(); backlog && *backlog < world_size) {
    log.progress(
        fmt::format("net.core.somaxconn is {}, below the {} members: those that connect "
                    "directly spread their first attempts, {} ms for each {}",
                    *backlog, world_size, kBacklogDrain.count(), *backlog));
  }
}

// The launcher started more members than the world size asks for: all are waited for.
long extra_launcher_members(const Identity& id, const Log& log) {
  long world_members = (id.world_size + id.nranks - 1) / std::max(1L, id.nranks);
  if (id.launcher_members <= world_members) return 0;
  log.progress(
      fmt::format("the launcher started {} ({}) but the world size is {}: waiting for all of them",
                  id.node_mode() ? plural(size_t(id.launcher_members), "node", "nodes")
                                 : plural(size_t(id.launcher_members), "process", "processes"),
                  id.launcher_members_from, id.world_size));
  return id.launcher_members;
}

// Whether the master that holds the port shows this job's id (with a token, a tag
// of it that only a holder of the same token computes). Without a token anyone may
// show an id: see serve_master for when that is enough to join.
bool same_job(const std::optional<Challenge>& other, const Record& self, const Session& s) {
  return other && other->auth == s.token.has_value() &&
         other->job_id ==
             (s.token ? job_tag(*s.token, other->nonce, self.job_id) : self.job_id.str());
}

// Waits for a verdict, to `by` at most; a signal cuts the wait short (the server
// then decides at once).
bool await_verdict(std::future<Verdict>& f, Deadline by, Server& server, bool& cut_short) {
  while (f.wait_for(kVerdictPoll) != std::future_status::ready && !by.expired()) {
    if (interrupted() && !cut_short) {
      cut_short = true;
      server.interrupt(interrupted());
    }
  }
  return f.wait_for(Millis(0)) == std::future_status::ready;
}

// MASTER_ADDR is another host's, so a rank 0 may be coming up there: this process
// then claims the same rank (two nodes at node rank 0: an unset NODE_RANK). It looks
// for that master until the decision deadline, as a member would, and joins it if
// it is this job's (its report names both claims). What answered, if anything.
std::optional<Challenge> await_other_master(const MasterSetup& setup, const Identity& id,
                                            const Record& self, const Session& s) {
  Deadline by = s.time.decide_by();
  s.log.error(fmt::format(
      "MASTER_ADDR {} is not an address of {}, yet this process is rank 0: looking for a rank 0 "
      "there until the deadline ({} s), in case this one's rank is wrong",
      printable(id.master_addr), printable(self.host), by.seconds_left()));
  std::optional<Challenge> seen;
  for (Millis pause = kOtherMasterFirstPause; !by.expired() && !interrupted();
       pause = std::min(pause * 2, kOtherMasterMaxPause)) {
    auto other = probe_master(setup.addresses.front(), setup.port,
                              by.sooner(Deadline::after(kOtherMasterProbe)));
    if (other) seen = other;
    if (same_job(other, self, s)) return other;
    std::this_thread::sleep_for(std::min(pause, by.remaining()));
  }
  return seen;
}

}  // namespace

MasterConfig master_config(const Identity& id, const Record& self, Session& s,
                           MasterTransport transport) {
  const Log& log = s.log;
  MasterConfig mc;
  mc.world_size = id.world_size;
  mc.job_id = self.job_id;  // as the hellos carry it (cut to its cap)
  mc.master_host = self.host;
  mc.start = s.start;
  mc.start_unix_ms = self.started_unix_ms;
  mc.timeout_ms = s.o.timeout_s * 1000;
  mc.log = [&log](const std::string& line) { log.progress(line); };
  mc.gpu_stage = !s.o.no_gpu;
  mc.make_nccl_id = [&s] { return s.stage->unique_id(); };
  mc.stage_by = s.time.stage_by();
  mc.min_busbw_gbps = s.o.min_busbw_gbps;
  if (transport == MasterTransport::kMpi) {
    // MPI_COMM_WORLD is the rendezvous: every process the launcher started is in it
    // at once (no launcher count to wait for), nothing was resolved, nothing is
    // signed, and the MPI bootstrap hands out one NCCL id (no scalable init).
    mc.transport = Transport::kMpi;
    return mc;
  }
  mc.launcher_members = extra_launcher_members(id, log);
  mc.master_addr = id.master_addr;
  mc.master_resolved = self.master_resolved.get();
  mc.nccl_roots_every = s.o.nccl_roots_every;
  mc.authenticated = s.token.has_value();
  return mc;
}

std::optional<int> serve_master(Record& self, const Identity& id, Session& s,
                                const MasterSetup& setup, bool join_other,
                                const std::function<void(uint16_t)>& on_listening) {
  const Log& log = s.log;
#ifdef __GLIBC__
  // One malloc arena for the master's threads: the report, made on this thread
  // after the server's, reuses what the server freed (its verdicts, its buffers)
  // instead of growing a second arena (9 MB more at 100k ranks).
  ::mallopt(M_ARENA_MAX, 1);
#endif
  ServerConfig cfg;
  cfg.master = master_config(id, self, s, MasterTransport::kTcp);
  cfg.token = s.token;
  cfg.decide_by = s.time.decide_by();
  cfg.handshake_timeout = seconds(s.o.handshake_timeout_s);
  cfg.progress_interval = seconds(s.o.progress_interval_s);
  cfg.rehearsal_per_connection = seconds(s.o.rehearsal_timeout_s);

  cfg.max_pending = check_capacity(id.world_size, log);
  check_backlog(id.world_size, log);
  cfg.master.watch_port = listen_for_watch(s, setup.addresses);
  Server server(cfg);
  auto port = setup.listen_fd >= 0 ? server.adopt(setup.listen_fd, setup.addresses.front())
                                   : server.listen(setup.addresses, setup.port);
  if (!port) {
    // A master of this job may already be there: then this is a duplicate rank 0,
    // and the report that says so comes from that master.
    bool elsewhere = port.error().fault == Fault::kNotLocal;
    auto other = elsewhere && join_other ? await_other_master(setup, id, self, s)
                                         : probe_master(setup.addresses.front(), setup.port,
                                                        Deadline::after(kOtherMasterProbe));
    // Rank 0 joins a master on its own port only with the job's token: without one,
    // whatever holds the port and shows this job's id (none, or Slurm's public
    // JOBID.STEP) could hand it a pass while the other ranks never started. On
    // another host (MASTER_ADDR elsewhere) it is a member like any other.
    bool shown = same_job(other, self, s);
    if (join_other && shown && (s.token || elsewhere)) {
      log.error(fmt::format(
          "a rankcheck master of this job already listens on {}:{}: joining it as a member so "
          "that it reports the duplicate rank 0",
          printable(id.master_addr), setup.port));
      return std::nullopt;
    }
    ListenFailure why;
    why.master_addr = id.master_addr;
    why.port = setup.port;
    why.error = port.error();
    why.waited_elsewhere = elsewhere && join_other;
    why.unproven_same_job = join_other && shown && !s.token && !elsewhere;
    if (other) {
      why.other_master = true;
      why.other_auth = other->auth;
      why.other_job_id = other->job_id;
    }
    Finding f = cannot_listen(self, why);
    log.error(f.message);
    return print_member(failure_report(self, std::move(f), ms_between(s.start, Clock::now())),
                        s.out);
  }
  if (setup.port == 0) self.master_port = *port;  // a free port was picked: it is MASTER_PORT
  if (on_listening) on_listening(*port);
  log.progress(fmt::format(
      "master listening on {} port {}; waiting for {} ({} s left)", format_list(setup.addresses, 4),
      *port, plural(size_t(id.world_size), "rank", "ranks"), cfg.decide_by.seconds_left()));
  server.start();
  auto verdict = server.join_local(self);
  Deadline verdict_by = s.time.verdict_by();
  bool cut_short = false;
  if (await_verdict(verdict, verdict_by, server, cut_short)) {
    Verdict first = verdict.get();
    if (!first.final && first.run_gpu && first.nccl_id && !interrupted()) {
      auto final_verdict = server.submit_local(s.run_gpu_stage(first, id.world_size));
      await_verdict(final_verdict, verdict_by, server, cut_short);
    }
  }
  // Every member's verdict written, and their ends closed: at 100k members the
  // writes alone take a second on a small machine.
  Millis write_time = kVerdictWriteBase + Millis(id.world_size / kVerdictWritesPerMs);
  Report report = server.finish(verdict_by.sooner(Deadline::after(write_time)));
  int code = print_report(report, s.out);
  hand_off_master(s, report, code);
  return code;
}

}  // namespace rankcheck
