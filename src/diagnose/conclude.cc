// Knowledge::conclude: the findings, initiating first (the rules are listed at the
// top of reason.cc), and the rankcheck command that checks the fix.

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "base/text.h"
#include "diagnose/internal.h"

namespace rankcheck::diagnose {
namespace {

std::string where(const Note& n) {
  std::string s = fmt::format("{}:{}", n.evidence.file, n.evidence.line);
  if (!n.time.empty()) s += fmt::format(" ({})", n.time);
  return s;
}

std::string name_of(const Proc& p) {
  std::string who = p.rank >= 0         ? fmt::format("rank {}", p.rank)
                    : p.local_rank >= 0 ? fmt::format("local rank {}", p.local_rank)
                    : p.pid >= 0        ? fmt::format("pid {}", p.pid)
                                        : std::string("a process");
  if (!p.host.empty()) who += fmt::format(" on {}", printable(p.host, 64));
  return who;
}

std::string ranks_text(const std::set<long>& ranks) {
  std::vector<long> v(ranks.begin(), ranks.end());
  return fmt::format("{} {}", v.size() == 1 ? "rank" : "ranks", format_ranks(v));
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

struct Builder {
  std::vector<DiagFinding> out;

  DiagFinding& add(FindingId id, std::string message, bool initiating, const Note& first,
                   std::string fix = {}) {
    DiagFinding f;
    f.finding = make_finding(id, std::move(message), std::move(fix));
    f.initiating = initiating;
    f.first_seen = where(first);
    f.order = first.seq;
    f.stamp = first.stamp;
    f.evidence.push_back(first.evidence);
    out.push_back(std::move(f));
    return out.back();
  }
  bool any_initiating() const {
    return std::any_of(out.begin(), out.end(), [](const DiagFinding& f) { return f.initiating; });
  }
};

void attach(DiagFinding& f, const std::set<long>& ranks, const std::set<std::string>& hosts,
            const std::vector<Evidence>& evidence) {
  f.finding.ranks.assign(ranks.begin(), ranks.end());
  f.finding.hosts.assign(hosts.begin(), hosts.end());
  for (const Evidence& e : evidence) {
    if (f.evidence.size() >= 3) break;
    bool dup = std::any_of(f.evidence.begin(), f.evidence.end(),
                           [&](const Evidence& x) { return x.file == e.file && x.line == e.line; });
    if (!dup) f.evidence.push_back(e);
  }
}

std::string setup_message(const Group& g) {
  std::string who = g.ranks.empty()
                        ? (g.hosts.empty() ? std::string("a process")
                                           : format_list({g.hosts.begin(), g.hosts.end()}))
                        : ranks_text(g.ranks);
  switch (g.id) {
    case FindingId::kDuplicateGpu:
      return fmt::format("{} share one GPU: {}", who, g.detail);
    case FindingId::kNcclIfnameMissing:
      return fmt::format(
          "NCCL found no usable socket interface for {}: NCCL_SOCKET_IFNAME "
          "matches nothing there ({})",
          who, g.detail);
    case FindingId::kMasterPortInUse:
      return fmt::format(
          "the store's port{} was already in use for {}: another job or a stale "
          "process holds MASTER_PORT",
          number(g.detail) > 0 ? " " + g.detail : std::string(), who);
    case FindingId::kGpuCountMismatch:
      return fmt::format(
          "{} asked for a GPU the host does not have (invalid device ordinal): "
          "more processes than GPUs, or CUDA_VISIBLE_DEVICES narrowed",
          who);
    case FindingId::kGpuMissing:
      return fmt::format("{} found no CUDA-capable device", who);
    case FindingId::kNcclVersionMismatch:
      return fmt::format("the ranks load different NCCL versions: {}", g.first.evidence.text);
    case FindingId::kDuplicateRank:
      return fmt::format("two processes claimed {} in NCCL's bootstrap: {}", who, g.detail);
    case FindingId::kWorldSizeMismatch:
      return fmt::format("the ranks disagree on the world size: {}", g.detail);
    default:
      return fmt::format("{}: {}", who, g.detail);
  }
}

// Unattributed errors (a traceback on a shared stderr) belong to the one process
// that failed without an error of its own, when there is exactly one.
void place_unattributed(std::map<std::string, Proc>& procs) {
  std::set<std::string> details;
  for (const auto& [key, p] : procs) {
    if (p.unattributed) continue;
    for (const auto* n : {&p.own, &p.downstream, &p.waiting})
      if (*n) details.insert((*n)->detail);
  }
  Proc* lone = nullptr;
  int failed = 0;
  for (auto& [key, p] : procs) {
    if (!p.unattributed && p.died && !p.killed_by_launcher && !p.own && !p.downstream &&
        !p.waiting) {
      lone = &p;
      ++failed;
    }
  }
  for (auto it = procs.begin(); it != procs.end();) {
    Proc& p = it->second;
    if (!p.unattributed) {
      ++it;
      continue;
    }
    for (auto* n : {&p.own, &p.downstream, &p.waiting})
      if (*n && details.count((*n)->detail)) n->reset();
    if (failed == 1) {
      if (p.own && !lone->own) lone->own = p.own;
      if (p.downstream && !lone->downstream) lone->downstream = p.downstream;
      if (p.waiting && !lone->waiting) lone->waiting = p.waiting;
      p.own.reset();
      p.downstream.reset();
      p.waiting.reset();
    }
    if (!p.own && !p.downstream && !p.waiting && !p.died && !p.timeout) {
      it = procs.erase(it);
    } else {
      ++it;
    }
  }
}

void merge_into(Proc& to, const Proc& from) {
  for (auto [a, b] : {std::pair{&to.own, &from.own},
                      {&to.downstream, &from.downstream},
                      {&to.waiting, &from.waiting},
                      {&to.died, &from.died},
                      {&to.timeout, &from.timeout}}) {
    if (*b && (!*a || earlier(**b, **a))) *a = *b;
  }
  if (to.exit <= 0) to.exit = from.exit;
  if (to.signal <= 0) to.signal = from.signal;
  if (to.pid < 0) to.pid = from.pid;
  if (to.local_rank < 0) to.local_rank = from.local_rank;
  if (to.host.empty()) to.host = from.host;
  if (to.seq_no < 0) {
    to.seq_no = from.seq_no;
    to.op = from.op;
    to.enqueued = from.enqueued;
  }
}

}  // namespace

Diagnosis Knowledge::conclude() {
  // -- one process, one entry: local ranks and pids mapped to global ranks -------
  bool identity = !rank_of_local.empty() && hosts_seen.size() <= 1 &&
                  std::all_of(rank_of_local.begin(), rank_of_local.end(), [](const auto& kv) {
                    return kv.first.substr(kv.first.find('|') + 1) == std::to_string(kv.second);
                  });
  std::map<std::string, Proc> merged;
  for (auto& [key, p] : procs) {
    long rank = p.rank;
    if (rank < 0 && p.local_rank >= 0) {
      auto it = rank_of_local.find(fmt::format("{}|{}", p.host, p.local_rank));
      if (it == rank_of_local.end()) it = rank_of_local.find(fmt::format("|{}", p.local_rank));
      if (it != rank_of_local.end())
        rank = it->second;
      else if (identity)
        rank = p.local_rank;
    }
    if (rank < 0 && p.pid >= 0 && rank_of_pid.count(p.pid)) rank = rank_of_pid[p.pid];
    std::string k = rank >= 0 ? fmt::format("r{}", rank) : key;
    Proc& to = merged[k];
    if (rank >= 0) {
      to.rank = rank;
      ranks_seen.insert(rank);
    }
    to.unattributed = p.unattributed;
    merge_into(to, p);
    if (to.rank < 0) to.rank = p.rank;
  }
  procs.swap(merged);
  for (auto& [key, p] : procs) {
    if ((p.pid >= 0 && killed_pids.count(p.pid)) || p.signal == 15) p.killed_by_launcher = true;
  }
  place_unattributed(procs);

  Builder b;
  // 1. rankcheck's own verdict, and the setup errors.
  if (rankcheck) {
    const FindingKind* kind = find_finding_kind(rankcheck->first);
    DiagFinding& f =
        b.add(kind->id, "rankcheck reported: " + rankcheck->second.detail, true, rankcheck->second);
    f.order = 0;
  }
  if (world_by_rank.size() > 1) {
    std::map<long, std::vector<long>> by_world;
    for (auto [rank, w] : world_by_rank)
      by_world[w].push_back(rank);
    if (by_world.size() > 1 && !setup.count(FindingId::kWorldSizeMismatch)) {
      std::vector<std::string> parts;
      for (const auto& [w, ranks] : by_world)
        parts.push_back(fmt::format("{} {} waited for {}", ranks.size() == 1 ? "rank" : "ranks",
                                    format_ranks(ranks), w));
      Group& g = setup[FindingId::kWorldSizeMismatch];
      g.id = FindingId::kWorldSizeMismatch;
      g.detail = format_list(parts, 8);
      g.first = *absent_first;
      g.count = 1;
      for (auto [rank, w] : world_by_rank)
        g.ranks.insert(rank);
    }
  }
  for (const auto& [id, g] : setup) {
    DiagFinding& f = b.add(id, setup_message(g), true, g.first);
    attach(f, g.ranks, g.hosts, g.evidence);
  }

  // 6. The scheduler's end of the job. One with Slurm's reason (time limit,
  // pre-emption, node failure) initiates. "DUE TO TASK FAILURE" is a consequence, and
  // so is a cancel without a reason after a task had ended: srun --kill-on-bad-exit
  // stopping the others (it prints that cancel right after the task's exit), or a
  // user's scancel when the job had already failed.
  std::optional<Note> first_end;
  for (const auto& [key, p] : procs) {
    if (p.died && !p.killed_by_launcher && (!first_end || earlier(*p.died, *first_end)))
      first_end = *p.died;
  }
  bool ended_outside = false;
  for (const External& e : external) {
    bool after_task = e.reason.empty() && first_end && earlier(*first_end, e.note);
    bool consequence = e.reason == "TASK FAILURE" || after_task;
    ended_outside |= !consequence;
    b.add(FindingId::kJobCancelled,
          after_task ? e.note.detail +
                           ", after a task had ended (srun --kill-on-bad-exit stops "
                           "the others when one fails)"
                     : e.note.detail,
          !consequence, e.note);
  }

  // 2. Deaths. One that left no message of its own initiates only when nothing
  // else explains it, and only the first such record (srun prints exits as they
  // come: the first is the best candidate; later ones are mostly peers it took down).
  bool explained_elsewhere = !setup.empty() || ended_outside || rankcheck;
  for (const auto& [key, p] : procs) {
    bool setup_error = p.own && catalogue()[p.own->row].cls == MessageClass::kSetup;
    if (p.own && !setup_error && !p.killed_by_launcher) explained_elsewhere = true;
  }
  std::optional<Note> first_silent;
  for (const auto& [key, p] : procs) {
    bool silent =
        p.died && !p.own && !p.downstream && !p.waiting && !p.timeout && !p.killed_by_launcher;
    if (silent && (!first_silent || earlier(*p.died, *first_silent))) first_silent = *p.died;
  }
  std::set<long> down_ranks;
  std::set<std::string> down_hosts;
  std::vector<Evidence> down_evidence;
  std::optional<Note> down_first;
  std::vector<std::string> down_why;
  std::map<uint64_t, std::vector<const Proc*>> silent_deaths;  // by the record that says so
  for (auto& [key, p] : procs) {
    bool setup_error = p.own && catalogue()[p.own->row].cls == MessageClass::kSetup;
    if (setup_error) continue;
    if (p.own && !p.killed_by_launcher) {
      std::string how = p.exit > 0     ? fmt::format(" and exited with code {}", p.exit)
                        : p.signal > 0 ? fmt::format(" and ended by {}", signal_text(p.signal))
                                       : std::string();
      DiagFinding& f =
          b.add(FindingId::kProcessDied,
                fmt::format("{} failed: {}{}", name_of(p), p.own->detail, how), true, *p.own);
      if (p.died) attach(f, {}, {}, {p.died->evidence});
      if (p.rank >= 0) f.finding.ranks = {p.rank};
      if (!p.host.empty()) f.finding.hosts = {p.host};
      continue;
    }
    if (!p.died) continue;
    const Slot& cause = p.downstream ? p.downstream : p.waiting ? p.waiting : p.timeout;
    bool initiating = !p.killed_by_launcher && !cause && !explained_elsewhere && first_silent &&
                      p.died->seq == first_silent->seq;
    if (initiating) {
      silent_deaths[p.died->seq].push_back(&p);
      continue;
    }
    if (p.rank >= 0) down_ranks.insert(p.rank);
    if (!p.host.empty()) down_hosts.insert(p.host);
    const Note& n = cause ? *cause : *p.died;
    if (!down_first || earlier(n, *down_first)) down_first = n;
    if (down_evidence.size() < 3) down_evidence.push_back(n.evidence);
    std::string why = p.killed_by_launcher ? "stopped by its launcher after another failure"
                      : cause              ? cause->detail
                      : ended_outside      ? "ended with the job"
                      : !setup.empty()     ? "exited after the setup error above"
                                           : "exited after the failure above";
    if (down_why.size() < 3 && std::find(down_why.begin(), down_why.end(), why) == down_why.end())
      down_why.push_back(why);
  }
  for (const auto& [seq, list] : silent_deaths) {
    const Proc& p = *list.front();
    std::set<long> ranks;
    std::set<std::string> hosts;
    for (const Proc* q : list) {
      if (q->rank >= 0) ranks.insert(q->rank);
      if (!q->host.empty()) hosts.insert(q->host);
    }
    std::string who =
        list.size() == 1 || ranks.size() != list.size() ? name_of(p) : ranks_text(ranks);
    std::string how = p.signal > 0
                          ? fmt::format("{} killed by {}", list.size() == 1 ? "was" : "were",
                                        signal_text(p.signal))
                      : p.exit > 0 ? fmt::format("exited with code {}", p.exit)
                                   : std::string("ended");
    DiagFinding& f =
        b.add(FindingId::kProcessDied,
              fmt::format("{} {} without an error of its own in the logs{}", who, how,
                          p.signal == 9 ? ": the kernel's OOM killer, or a kill from outside" : ""),
              true, *p.died);
    attach(f, ranks, hosts, {});
  }

  // 3. Peers that never came.
  if (absent_first) {
    std::set<long> silent;
    std::set<long> waiting;
    bool explained = b.any_initiating();
    for (const auto& [key, p] : procs) {
      if (p.waiting && p.rank >= 0) waiting.insert(p.rank);
      bool quiet = !p.own && !p.downstream && !p.waiting && !p.timeout;
      if (quiet && p.rank >= 0 && !p.unattributed) silent.insert(p.rank);
    }
    if (world > 0 && world <= (1 << 16)) {
      for (long r = 0; r < world; ++r)
        if (!procs.count(fmt::format("r{}", r))) silent.insert(r);
    }
    for (long r : waiting)
      silent.erase(r);
    std::string waiters = waiting.empty() ? std::string("a rank") : ranks_text(waiting);
    std::string counts =
        world > 0 && joined >= 0 ? fmt::format(" ({} of {} joined)", joined, world) : "";
    if (!silent.empty()) {
      DiagFinding& f = b.add(
          FindingId::kMissingRank,
          fmt::format("{} never joined: {} waited for its peers{} ({}); {} {} no error of its own",
                      ranks_text(silent), waiters, counts, absent_first->detail, ranks_text(silent),
                      silent.size() == 1 ? "shows" : "show"),
          !explained, *absent_first);
      f.finding.ranks.assign(silent.begin(), silent.end());
    } else if (world > 0 && joined >= 0 && joined < world) {
      b.add(FindingId::kMissingRank,
            fmt::format("{} of {} ranks never joined: {} waited ({})", world - joined, world,
                        waiters, absent_first->detail),
            !explained, *absent_first);
    } else {
      DiagFinding& f = b.add(
          FindingId::kMissingRank,
          fmt::format("{} waited for peers that never came ({})", waiters, absent_first->detail),
          !explained, *absent_first);
      f.finding.ranks.assign(waiting.begin(), waiting.end());
    }
  }
  if (!down_ranks.empty() || down_first) {
    DiagFinding& f = b.add(FindingId::kProcessDied,
                           fmt::format("{} exited as a consequence: {}",
                                       down_ranks.empty() ? "processes" : ranks_text(down_ranks),
                                       format_list(down_why, 3)),
                           false, *down_first);
    attach(f, down_ranks, down_hosts, down_evidence);
  }

  // 4. Collective timeouts.
  std::map<std::pair<long, std::string>, std::set<long>> by_op;
  std::optional<Note> timeout_first;
  std::vector<Evidence> timeout_evidence;
  std::map<long, std::string> op_of_seq;  // a progress line names no OpType: take its peers'
  for (const auto& [key, p] : procs) {
    if (p.timeout && !p.op.empty()) op_of_seq.emplace(p.seq_no, p.op);
  }
  for (const auto& [key, p] : procs) {
    if (!p.timeout) continue;
    std::string op = p.op.empty() && op_of_seq.count(p.seq_no) ? op_of_seq[p.seq_no] : p.op;
    by_op[{p.seq_no, op}].insert(p.rank);
    if (!timeout_first || earlier(*p.timeout, *timeout_first)) timeout_first = *p.timeout;
    if (timeout_evidence.size() < 3) timeout_evidence.push_back(p.timeout->evidence);
  }
  if (timeout_first) {
    std::set<long> all;
    for (const auto& [k, r] : by_op)
      all.insert(r.begin(), r.end());
    bool explained = b.any_initiating();
    auto op_text = [](const std::pair<long, std::string>& k) {
      return fmt::format("SeqNum {}{}", k.first, k.second.empty() ? "" : " (" + k.second + ")");
    };
    if (explained) {
      DiagFinding& f =
          b.add(FindingId::kCollectiveTimeout,
                fmt::format("{} timed out in a collective, waiting for the failure above",
                            ranks_text(all)),
                false, *timeout_first);
      attach(f, all, {}, timeout_evidence);
    } else if (by_op.size() > 1) {
      auto most = std::max_element(by_op.begin(), by_op.end(), [](const auto& a, const auto& c) {
        return a.second.size() < c.second.size();
      });
      // With no majority, every side is named.
      bool tie = std::count_if(by_op.begin(), by_op.end(), [&](const auto& kv) {
                   return kv.second.size() == most->second.size();
                 }) > 1;
      std::set<long> odd;
      std::vector<std::string> parts;
      for (const auto& [k, ranks] : by_op) {
        if (!tie && &k == &most->first) continue;
        odd.insert(ranks.begin(), ranks.end());
        parts.push_back(fmt::format("{} in {}", ranks_text(ranks), op_text(k)));
      }
      DiagFinding& f = b.add(
          FindingId::kCollectiveDesync,
          tie ? fmt::format("the ranks timed out in different collectives: {}",
                            format_list(parts, 4))
              : fmt::format(
                    "the ranks timed out in different collectives: {}, while {} timed out in {}",
                    format_list(parts, 4), ranks_text(most->second), op_text(most->first)),
          true, *timeout_first);
      attach(f, odd, {}, timeout_evidence);
    } else if (all.size() == 1 && (ranks_seen.size() > 1 || world > 1)) {
      DiagFinding& f = b.add(
          FindingId::kCollectiveDesync,
          fmt::format("only {} timed out, in {}: the other ranks did not enter that collective "
                      "(or left it)",
                      ranks_text(all), op_text(by_op.begin()->first)),
          true, *timeout_first);
      attach(f, all, {}, timeout_evidence);
    } else {
      DiagFinding& f = b.add(
          FindingId::kCollectiveTimeout,
          fmt::format("{} timed out in the same collective, {}, and no rank shows an error of its "
                      "own: a hang in the network or NCCL",
                      ranks_text(all), op_text(by_op.begin()->first)),
          true, *timeout_first);
      attach(f, all, {}, timeout_evidence);
    }
  }

  // 5. Pointers to peers.
  for (const auto& [id, g] : pointers) {
    bool explained = b.any_initiating();
    std::string who = g.ranks.empty() ? std::string("a rank") : ranks_text(g.ranks);
    std::string peer = g.hosts.empty()
                           ? ""
                           : fmt::format(" ({})", format_list({g.hosts.begin(), g.hosts.end()}, 3));
    std::string message =
        id == FindingId::kMasterUnreachable
            ? fmt::format("{} could not reach the store{}: {}", who, peer, g.detail)
        : explained ? fmt::format("{} lost a peer{}, a consequence of the failure above: {}", who,
                                  peer, g.detail)
                    : fmt::format("{} lost a peer{} and no peer shows an error of its own: {}", who,
                                  peer, g.detail);
    DiagFinding& f = b.add(id, message, !explained, g.first);
    attach(f, g.ranks, {}, g.evidence);
  }

  // Initiating first, each part in the order it was first seen (by time across
  // files: earlier()); the setup errors and rankcheck's verdict lead their part.
  auto rank_of = [](const DiagFinding& f) { return f.initiating ? (f.order == 0 ? 0 : 1) : 2; };
  std::stable_sort(b.out.begin(), b.out.end(), [&](const DiagFinding& x, const DiagFinding& y) {
    bool sx = x.initiating && setup.count(find_finding_kind(x.finding.id)->id);
    bool sy = y.initiating && setup.count(find_finding_kind(y.finding.id)->id);
    if (rank_of(x) != rank_of(y)) return rank_of(x) < rank_of(y);
    if (sx != sy) return sx;
    return x.stamp != y.stamp ? x.stamp < y.stamp : x.order < y.order;
  });

  Diagnosis d;
  d.findings = std::move(b.out);
  d.ranks_seen.assign(ranks_seen.begin(), ranks_seen.end());
  d.hosts_seen.assign(hosts_seen.begin(), hosts_seen.end());
  d.launcher = launchers & Prefix::kTorchrun ? "torchrun"
               : launchers & Prefix::kMpirun ? "mpirun"
               : launchers & Prefix::kSrun   ? "slurm"
               : launchers & Prefix::kPdsh   ? "pdsh"
                                             : "";
  long n = world > 0 ? world : ranks_seen.empty() ? -1 : *ranks_seen.rbegin() + 1;
  std::string run = "rankcheck run --timeout 120";
  if (d.launcher == "torchrun") {
    d.verify_with = fmt::format("torchrun {} --no_python {}",
                                hosts_seen.size() <= 1 && n > 0
                                    ? fmt::format("--nnodes 1 --nproc_per_node {}", n)
                                    : std::string("<the job's --nnodes, --nproc_per_node, "
                                                  "--node_rank, --master_addr, --master_port>"),
                                run);
  } else if (d.launcher == "slurm") {
    std::string nodes = hosts_seen.empty() ? "" : fmt::format("--nodes {} ", hosts_seen.size());
    d.verify_with = fmt::format("srun {} {}",
                                n > 0 ? fmt::format("{}--ntasks {}", nodes, n)
                                      : std::string("<the training step's options>"),
                                run);
  } else if (d.launcher == "mpirun") {
    d.verify_with = fmt::format("mpirun {} {}", n > 0 ? fmt::format("-np {}", n) : "-np <N>", run);
  } else {
    d.verify_with = run + " (in every process of the job, with the training job's environment)";
  }
  return d;
}

}  // namespace rankcheck::diagnose
