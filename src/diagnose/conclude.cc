// Knowledge::conclude: the findings, initiating first (the rules are listed at the
// top of reason.cc), and the rankcheck command that checks the fix.

#include <algorithm>
#include <map>
#include <regex>

#include <fmt/format.h>

#include "base/hostlist.h"
#include "base/text.h"
#include "diagnose/builder.h"
#include "diagnose/internal.h"

namespace rankcheck::diagnose {
namespace {

std::string name_of(const Proc& p) {
  std::string who = p.rank >= 0         ? fmt::format("rank {}", p.rank)
                    : p.local_rank >= 0 ? fmt::format("local rank {}", p.local_rank)
                    : p.pid >= 0        ? fmt::format("pid {}", p.pid)
                                        : std::string("a process");
  if (!p.host.empty()) who += fmt::format(" on {}", printable(p.host, 64));
  return who;
}

std::string signal_text(long sig) {
  switch (sig) {
    case 6:
      return "signal 6 (SIGABRT)";
    case 9:
      return "signal 9 (SIGKILL)";
    case 11:
      return "signal 11 (SIGSEGV)";
    case 15:
      return "signal 15 (SIGTERM)";
    default:
      return fmt::format("signal {}", sig);
  }
}

// The processes that ended as a consequence of another failure, gathered with
// the deaths and reported after the missing ranks.
struct Consequences {
  std::set<long> ranks;
  std::set<std::string> hosts;
  std::vector<Evidence> evidence;
  std::optional<Note> first;
  std::vector<std::string> why;
};

// The ranks a rankcheck message names ("ranks 6-7 never joined", "rank 0 on vm
// says 2; rank 1 on vm says 3"): its own rank lists, at most kMaxRanks of them.
std::set<long> ranks_named(const std::string& text) {
  constexpr size_t kMaxRanks = 4096;
  static const std::regex kList(R"(\branks? ([0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*))");
  std::set<long> out;
  for (std::sregex_iterator it(text.begin(), text.end(), kList), end; it != end; ++it) {
    std::string list = (*it)[1].str();
    for (size_t from = 0; from < list.size() && out.size() < kMaxRanks;) {
      size_t comma = std::min(list.find(',', from), list.size());
      std::string run = list.substr(from, comma - from);
      size_t dash = run.find('-');
      long lo = number(run.substr(0, dash));
      long hi = dash == std::string::npos ? lo : number(run.substr(dash + 1));
      for (long r = lo; r >= 0 && r <= hi && out.size() < kMaxRanks; ++r)
        out.insert(r);
      from = comma + 1;
    }
  }
  return out;
}

// A master stopped by a signal (master-interrupted) that its launcher sent after
// another process of the job exited with an error of its own (torchrun's Root Cause,
// srun's task exit): that exit is the cause, the interruption its consequence.
bool verdict_is_consequence(const Knowledge& k) {
  if (!k.rankcheck || k.rankcheck->id != FindingId::kMasterInterrupted) return false;
  for (const auto& [key, p] : k.procs) {
    if (p.died && p.exit > 0 && p.exit < 128 && p.signal == 0 && !p.killed_by_launcher) return true;
  }
  return false;
}

// 1. rankcheck's own verdict leads the report: it was decided already. Its fix is
// the report's own (it names hosts and values), its hosts the report's suspects
// (none for a job-wide error, as `rankcheck run` names none).
void add_verdict(Builder& b, const Knowledge& k) {
  if (!k.rankcheck) return;
  const Knowledge::Verdict& v = *k.rankcheck;
  bool consequence = verdict_is_consequence(k);
  // Its own words first (the headline quotes them), then where they come from.
  DiagFinding& f =
      b.add(v.id, v.note.detail + " (rankcheck's report)", !consequence, v.note, v.fix);
  if (!consequence) f.order = 0;
  auto suspects = k.suspects.find(v.source);
  if (suspects == k.suspects.end()) suspects = k.suspects.begin();
  std::set<std::string> hosts;
  if (suspects != k.suspects.end()) {
    if (auto names = expand_hostlist(suspects->second)) hosts.insert(names->begin(), names->end());
  }
  attach(f, ranks_named(v.note.detail), hosts, {});
}

// 6. The scheduler's end of the job. One with Slurm's reason (time limit,
// pre-emption, node failure) initiates. "DUE TO TASK FAILURE" is a consequence, and
// so is a cancel without a reason after a task had ended: srun --kill-on-bad-exit
// stopping the others (it prints that cancel right after the task's exit), or a
// user's scancel when the job had already failed. True when one initiates.
bool add_job_ends(Builder& b, const Knowledge& k) {
  std::optional<Note> first_end;
  for (const auto& [key, p] : k.procs) {
    if (p.died && !p.killed_by_launcher && (!first_end || earlier(*p.died, *first_end)))
      first_end = *p.died;
  }
  // srun's "Force Terminated job" and the like name neither node nor reason: an echo
  // of slurmstepd's line that names them ("*** STEP 1.0 ON nid01934 CANCELLED AT ...
  // DUE TO TIME LIMIT ***"), which leads where both are printed.
  bool named = std::any_of(k.external.begin(), k.external.end(), [](const auto& e) {
    return !e.host.empty() && !e.reason.empty() && e.reason != "TASK FAILURE";
  });
  bool ended_outside = false;
  for (const Knowledge::External& e : k.external) {
    bool after_task = e.reason.empty() && first_end && earlier(*first_end, e.note);
    bool echo = named && e.reason.empty() && e.host.empty();
    bool consequence = e.reason == "TASK FAILURE" || after_task || echo;
    ended_outside |= !consequence;
    DiagFinding& f = b.add(FindingId::kJobCancelled,
                           after_task ? e.note.detail +
                                            ", after a task had ended (srun --kill-on-bad-exit "
                                            "stops the others when one fails)"
                                      : e.note.detail,
                           !consequence, e.note);
    // The node the scheduler names: where the job (or its step) ran out.
    if (!e.host.empty() && f.finding.hosts.empty()) f.finding.hosts = {e.host};
  }
  return ended_outside;
}

// The finding an error of a process's own leads to: its row's, where the row names
// a cause (out of memory, a CUDA or network error), else that the process died of it.
FindingId own_finding(const Pattern& row) {
  switch (row.finding) {
    case FindingId::kGpuOutOfMemory:
    case FindingId::kHostOutOfMemory:
    case FindingId::kCudaError:
    case FindingId::kNcclNetworkError:
    case FindingId::kSharedMemoryExhausted:
    case FindingId::kNcclInitFailed:
    case FindingId::kCollectiveDesync:
    case FindingId::kMasterUnreachable:
    case FindingId::kMasterPortInUse:
    case FindingId::kCudaDriverMismatch:
      return row.finding;
    default:
      return FindingId::kProcessDied;
  }
}

// Last, and only when no other finding says anything: the first failure that no
// row explains, named with its rank and host, so that a failed job is never
// "nothing found"; by its shape where the line has one.
void add_unexplained(Builder& b, const Knowledge& k) {
  if (!k.error_line) return;
  const auto& [note, o] = *k.error_line;
  Shape shape = catalogue()[note.row].name == "launcher_help_text"
                    ? Shape{FindingId::kLaunchFailed,
                            "could not launch the job; its launcher's help text, which no row "
                            "reads, begins"}
                    : shape_of(note.evidence.text);
  // A launcher's or the job step's failure, printed before the processes died (of an
  // error of no cause of its own, or without a word), is why they died: a container
  // that could not be set up, a module that would not load, then the task's exit.
  bool launch_first = shape.id == FindingId::kLaunchFailed;
  for (const DiagFinding& f : b.out) {
    if (!f.finding.is_error()) continue;
    bool later = f.stamp != note.stamp ? note.stamp < f.stamp : note.seq < f.order;
    if (!f.initiating || f.finding.id != FindingId::kProcessDied || !later) launch_first = false;
  }
  bool any_error = std::any_of(b.out.begin(), b.out.end(),
                               [](const DiagFinding& f) { return f.finding.is_error(); });
  if (any_error && !launch_first) return;
  std::set<long> ranks;  // the processes that could not start: those that then died
  std::set<std::string> hosts;
  for (DiagFinding& f : b.out) {
    if (!f.finding.is_error()) continue;
    f.initiating = false;
    ranks.insert(f.finding.ranks.begin(), f.finding.ranks.end());
    hosts.insert(f.finding.hosts.begin(), f.finding.hosts.end());
  }
  if (o.rank >= 0) ranks = {o.rank};
  if (!o.host.empty()) hosts = {o.host};
  std::string who = o.rank >= 0 ? fmt::format("rank {}", o.rank) : std::string("a process");
  if (!o.host.empty()) who += " on " + printable(o.host, 64);
  DiagFinding& f =
      b.add(shape.id, fmt::format("{} {}: {}", who, shape.what, printable(note.evidence.text, 200)),
            true, note);
  attach(f, ranks, hosts, {});
}

// What an exit says of itself. 125-127 are the exits of a command that never ran:
// env, nice, timeout, chroot and the container runtimes exit 125 when they fail
// themselves, a shell 126 (not executable) and 127 (not found).
std::string exit_meaning(long sig, long exit) {
  if (sig == 9) return ": the kernel's OOM killer, or a kill from outside";
  if (sig == 7)
    return ": SIGBUS is a page of shared memory the kernel could not give, most often a full "
           "/dev/shm (a container's is 64 MiB unless the pod or docker run gives more)";
  if (sig > 0) return "";
  switch (exit) {
    case 125:
      return ": 125 is the exit of a wrapper (env, nice, timeout, a container runtime) that "
             "could not start the command";
    case 126:
      return ": 126 is a shell's exit for a command it found but could not execute";
    case 127:
      return ": 127 is a shell's exit for a command it did not find";
    default:
      return "";
  }
}

// 2. Processes that ended without an error of their own, grouped by the record
// that says so: one finding each.
void add_silent_deaths(Builder& b,
                       const std::map<uint64_t, std::vector<const Proc*>>& silent_deaths) {
  for (const auto& [seq, list] : silent_deaths) {
    const Proc& p = *list.front();
    std::set<long> ranks;
    std::set<std::string> hosts;
    for (const Proc* q : list) {
      if (q->rank >= 0) ranks.insert(q->rank);
      if (!q->host.empty()) hosts.insert(q->host);
    }
    std::string who = list.size() == 1 || ranks.size() != list.size() ? name_of(p)
                      : hosts.size() == 1
                          ? ranks_text(ranks) + " on " + printable(*hosts.begin(), 64)
                          : ranks_text(ranks);
    std::string how = p.signal > 0
                          ? fmt::format("{} killed by {}", list.size() == 1 ? "was" : "were",
                                        signal_text(p.signal))
                      : p.exit > 0 ? fmt::format("exited with code {}", p.exit)
                                   : std::string("ended");
    // Killed by SIGBUS: shared memory it could not have (a full /dev/shm), not a crash.
    DiagFinding& f =
        b.add(p.signal == 7 ? FindingId::kSharedMemoryExhausted : FindingId::kProcessDied,
              fmt::format("{} {} without an error of its own in the logs{}", who, how,
                          exit_meaning(p.signal, p.exit)),
              true, *p.died);
    attach(f, ranks, hosts, {});
  }
}

// 2. Deaths. One that left no message of its own initiates only when nothing
// else explains it, and only the first such record (srun prints exits as they
// come: the first is the best candidate; later ones are mostly peers it took down).
// The rest are consequences, returned for one finding after the missing ranks.
Consequences add_deaths(Builder& b, const Knowledge& k, bool ended_outside) {
  bool explained_elsewhere =
      !k.setup.empty() || ended_outside || (k.rankcheck && !verdict_is_consequence(k));
  for (const auto& [key, p] : k.procs) {
    bool setup_error = p.own && catalogue()[p.own->row].cls == MessageClass::kSetup;
    if (p.own && !setup_error && !p.killed_by_launcher) explained_elsewhere = true;
  }
  // The first to end: by the times the launchers' records give where both have one
  // (torchrun's table; its "failed (exitcode: 1)" line carries none), else by earlier().
  std::optional<Note> first_silent;
  long first_silent_exit = 0;
  int64_t first_silent_at = -1;
  for (const auto& [key, p] : k.procs) {
    bool silent =
        p.died && !p.own && !p.downstream && !p.waiting && !p.timeout && !p.killed_by_launcher;
    if (!silent) continue;
    bool first =
        !first_silent || (p.died_at >= 0 && first_silent_at >= 0 ? p.died_at < first_silent_at
                                                                 : earlier(*p.died, *first_silent));
    if (first) {
      first_silent = *p.died;
      first_silent_exit = p.signal == 0 ? p.exit : 0;
      first_silent_at = p.died_at;
    }
  }
  Consequences down;
  std::map<uint64_t, std::vector<const Proc*>> silent_deaths;  // by the record that says so
  // A process that could not reach the store while others waited in it is the cause
  // (add_unreachable_store), not a consequence.
  bool store_unreachable = k.absent_first && k.pointers.count(FindingId::kMasterUnreachable);
  for (const auto& [key, p] : k.procs) {
    bool setup_error = p.own && catalogue()[p.own->row].cls == MessageClass::kSetup;
    if (setup_error) continue;
    if (store_unreachable && p.downstream &&
        catalogue()[p.downstream->row].finding == FindingId::kMasterUnreachable)
      continue;
    if (p.own && !p.killed_by_launcher) {
      std::string how = p.exit > 0     ? fmt::format(" and exited with code {}", p.exit)
                        : p.signal > 0 ? fmt::format(" and ended by {}", signal_text(p.signal))
                                       : std::string();
      // A process's error of no cause of its own, in a launcher's, a network
      // transport's or a Ray daemon's words, is that failure (a Python wrapper's
      // "FailedJobError: sbatch: error: ...").
      FindingId id = own_finding(catalogue()[p.own->row]);
      if (id == FindingId::kProcessDied) {
        FindingId by_shape = shape_of(p.own->evidence.text).id;
        if (by_shape != FindingId::kProcessDied && by_shape != FindingId::kUnexplainedError)
          id = by_shape;
      }
      DiagFinding& f =
          b.add(id, fmt::format("{} failed: {}{}", name_of(p), p.own->detail, how), true, *p.own);
      if (p.died) attach(f, {}, {}, {p.died->evidence});
      if (p.rank >= 0) f.finding.ranks = {p.rank};
      if (!p.host.empty()) f.finding.hosts = {p.host};
      continue;
    }
    if (!p.died) continue;
    const Slot& cause = p.downstream ? p.downstream : p.waiting ? p.waiting : p.timeout;
    // The first record's processes, and those that ended alike without a cause (the
    // same exit code): torchrun and srun print them apart, but they ended of their own,
    // before any deadline that could have ended them (125: they could not start).
    bool alike = first_silent && p.died->seq != first_silent->seq && p.exit > 0 && p.signal == 0 &&
                 p.exit == first_silent_exit;
    bool initiating = !p.killed_by_launcher && !cause && !explained_elsewhere && first_silent &&
                      (p.died->seq == first_silent->seq || alike);
    if (initiating) {
      silent_deaths[first_silent->seq].push_back(&p);
      continue;
    }
    if (p.rank >= 0) down.ranks.insert(p.rank);
    if (!p.host.empty()) down.hosts.insert(p.host);
    const Note& n = cause ? *cause : *p.died;
    if (!down.first || earlier(n, *down.first)) down.first = n;
    if (down.evidence.size() < 3) down.evidence.push_back(n.evidence);
    std::string why = p.killed_by_launcher ? "stopped by its launcher after another failure"
                      : p.waiting && &cause == &p.waiting
                          ? fmt::format("waited for peers that never came ({})", cause->detail)
                      : cause            ? cause->detail
                      : ended_outside    ? "ended with the job"
                      : !k.setup.empty() ? "exited after the setup error above"
                                         : "exited after the failure above";
    if (down.why.size() < 3 && std::find(down.why.begin(), down.why.end(), why) == down.why.end())
      down.why.push_back(why);
  }
  add_silent_deaths(b, silent_deaths);
  return down;
}

// 3. Peers that never came: the ranks that show no error of their own and no
// wait, or that never printed at all.
void add_missing_ranks(Builder& b, const Knowledge& k) {
  if (!k.absent_first) return;
  if (k.world > 0 && k.most_joined > k.world) {
    // More came than the world holds: not a rank that is missing, but processes that
    // were never part of this job's count (a second launch, a wrong --nnodes).
    b.add(FindingId::kWorldSizeMismatch,
          fmt::format("{} processes joined a world of {}: more than the world size ({}); a "
                      "second launch of the job, or ranks that count another world size",
                      k.most_joined, k.world, k.absent_first->detail),
          !b.any_initiating(), *k.absent_first);
    return;
  }
  std::set<long> silent;
  std::set<long> waiting;
  bool explained = b.any_initiating();
  for (const auto& [key, p] : k.procs) {
    if (p.waiting && p.rank >= 0) waiting.insert(p.rank);
    bool quiet = !p.own && !p.downstream && !p.waiting && !p.timeout;
    if (quiet && p.rank >= 0 && !p.unattributed) silent.insert(p.rank);
  }
  if (k.world > 0 && k.world <= (1 << 16)) {
    for (long r = 0; r < k.world; ++r)
      if (!k.procs.count(fmt::format("r{}", r))) silent.insert(r);
  }
  for (long r : waiting)
    silent.erase(r);
  const Note& first = *k.absent_first;
  std::string waiters = waiting.empty() ? std::string("a rank") : ranks_text(waiting);
  std::string counts =
      k.world > 0 && k.joined >= 0 ? fmt::format(" ({} of {} joined)", k.joined, k.world) : "";
  if (!silent.empty()) {
    DiagFinding& f = b.add(
        FindingId::kMissingRank,
        fmt::format("{} never joined: {} waited for its peers{} ({}); {} {} no error of its own",
                    ranks_text(silent), waiters, counts, first.detail, ranks_text(silent),
                    silent.size() == 1 ? "shows" : "show"),
        !explained, first);
    f.finding.ranks.assign(silent.begin(), silent.end());
  } else if (k.world > 0 && k.joined >= 0 && k.joined < k.world) {
    b.add(FindingId::kMissingRank,
          fmt::format("{} of {} ranks never joined: {} waited ({})", k.world - k.joined, k.world,
                      waiters, first.detail),
          !explained, first);
  } else {
    DiagFinding& f =
        b.add(FindingId::kMissingRank,
              fmt::format("{} waited for peers that never came ({})", waiters, first.detail),
              !explained, first);
    f.finding.ranks.assign(waiting.begin(), waiting.end());
  }
}

// 2. The processes that ended as a consequence of a failure: one finding.
void add_consequences(Builder& b, const Consequences& down) {
  if (down.ranks.empty() && !down.first) return;
  DiagFinding& f = b.add(FindingId::kProcessDied,
                         fmt::format("{} exited as a consequence: {}",
                                     down.ranks.empty() ? "processes" : ranks_text(down.ranks),
                                     format_list(down.why, 3)),
                         false, *down.first);
  attach(f, down.ranks, down.hosts, down.evidence);
}

// Initiating first, each part in the order it was first seen (by time across
// files: earlier()); the setup errors and rankcheck's verdict lead their part.
void sort_findings(std::vector<DiagFinding>& findings, const std::map<FindingId, Group>& setup) {
  auto rank_of = [](const DiagFinding& f) { return f.initiating ? (f.order == 0 ? 0 : 1) : 2; };
  // NCCL's generic result ("ncclInvalidUsage: This usually reflects invalid usage", an
  // internal check) and a failure no row explains say less than a cause in words of
  // its own: PyTorch prints NCCL's result before NCCL's "Last error:" that says why.
  auto generic = [](const DiagFinding& f) {
    return f.finding.id == FindingId::kNcclInitFailed ||
           f.finding.id == FindingId::kUnexplainedError;
  };
  std::stable_sort(findings.begin(), findings.end(),
                   [&](const DiagFinding& x, const DiagFinding& y) {
                     bool sx = x.initiating && setup.count(x.finding.id);
                     bool sy = y.initiating && setup.count(y.finding.id);
                     if (rank_of(x) != rank_of(y)) return rank_of(x) < rank_of(y);
                     if (x.initiating && generic(x) != generic(y)) return !generic(x);
                     if (sx != sy) return sx;
                     return x.stamp != y.stamp ? x.stamp < y.stamp : x.order < y.order;
                   });
}

// The launcher whose prefixes the lines carry, the most telling first.
std::string launcher_name(uint8_t launchers) {
  return launchers & Prefix::kTorchrun ? "torchrun"
         : launchers & Prefix::kMpirun ? "mpirun"
         : launchers & Prefix::kSrun   ? "slurm"
         : launchers & Prefix::kPdsh   ? "pdsh"
                                       : "";
}

// The findings in report order, with what was seen and how to check the fix.
Diagnosis diagnosis_of(std::vector<DiagFinding> findings, const Knowledge& k) {
  Diagnosis d;
  d.findings = std::move(findings);
  d.ranks_seen.assign(k.ranks_seen.begin(), k.ranks_seen.end());
  d.hosts_seen.assign(k.hosts_seen.begin(), k.hosts_seen.end());
  d.launcher = launcher_name(k.launchers);
  Verify verify = verify_command(k, d.findings, d.launcher);
  d.verify_with = std::move(verify.command);
  d.verify_note = std::move(verify.note);
  for (const auto& [host, h] : k.host_logs) {
    if (!h.network.empty()) d.networks[host] = h.network;
  }
  return d;
}

}  // namespace

Diagnosis Knowledge::conclude() {
  merge_processes();  // one process, one entry
  Builder b;
  add_verdict(b, *this);                                    // 1. rankcheck's own verdict,
  group_world_sizes(*this);                                 //    world sizes that differ,
  group_rank_claims(*this);                                 //    a rank started twice,
  attribute_setup_errors(*this);                            //    their processes,
  add_setup_errors(b, setup);                               //    the setup errors,
  add_host_differences(b, *this);                           //    hosts unlike the others
  bool ended_outside = add_job_ends(b, *this);              // 6. the scheduler's end of the job
  Consequences down = add_deaths(b, *this, ended_outside);  // 2. deaths
  bool unreachable = !add_late_join(b, *this) &&
                     add_unreachable_store(b, *this);  // 3. the peer that could not connect,
  add_missing_ranks(b, *this);                         //    peers that never came
  add_consequences(b, down);                           // 2. the deaths that followed
  add_timeouts(b, *this);                              // 4. collective timeouts
  add_pointers(b, pointers, unreachable);              // 5. pointers to peers
  add_unexplained(b, *this);                           //    and, alone, the unexplained
  add_hung_rendezvous(b, *this);                       //    or a rendezvous never done
  add_partial_world(b, *this);                         //    or a world half started
  sort_findings(b.out, setup);                         // initiating first
  return diagnosis_of(std::move(b.out), *this);
}

}  // namespace rankcheck::diagnose
