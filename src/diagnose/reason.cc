// What each matched line says, noted in the Knowledge as it is read: add, by the
// kind of message. Once the input has ended, conclude.cc turns it into findings,
// after merge.cc has made one entry per process, by these rules in the order
// they decide:
// 1. An error about a rank's own setup (a shared GPU, no socket interface, a port
//    in use) is initiating wherever and whenever it appears: no peer can cause it.
// 2. A process that died of an error of its own is initiating; one that died after
//    an error pointing elsewhere (a peer gone, a wait for peers) or that its
//    launcher stopped (torchrun's SIGTERM list) is downstream.
// 3. Ranks waited for peers that never came: the peers are the ranks that show no
//    error of their own and no wait, or that never printed at all.
// 4. Collective timeouts whose SeqNum or OpType differ between ranks, or one rank
//    alone timing out, are a desync; all alike, with nothing else, a hang.
// 5. A message pointing at a peer is downstream of any initiating finding; alone,
//    it is a peer that failed without a trace (or the network).
// 6. The scheduler ending the job is initiating; what follows it is downstream.

#include <algorithm>

#include <fmt/format.h>

#include "base/hostlist.h"
#include "base/text.h"
#include "diagnose/internal.h"

namespace rankcheck::diagnose {
namespace {

constexpr size_t kMaxProcs = 1 << 20;
constexpr size_t kMaxEvidence = 3;
constexpr size_t kMaxPids = 1 << 16;
// Hosts a group names, at most: a log that names a million peers is reported by the
// first of them, in memory proportional to the report, not to the log.
constexpr size_t kMaxGroupHosts = 1024;
constexpr std::string_view kInternalPlugin = "internal";  // as nccl_plugin_internal reads it

// Names `host` in `g`, unless kMaxGroupHosts others are named already: false then.
bool add_host(Group& g, const std::string& host) {
  if (g.hosts.size() >= kMaxGroupHosts && g.hosts.count(host) == 0) return false;
  g.hosts.insert(host);
  return true;
}

std::string key_of(const Origin& o, uint32_t source) {
  if (o.rank >= 0) return fmt::format("r{}", o.rank);
  // Without a host, a local rank is one per node: two agents' "failed (exitcode: 1)
  // local_rank: 0 (pid: 9444)" are two processes, told apart by their pids.
  if (o.host.empty() && o.pid >= 0) return fmt::format("p|{}", o.pid);
  if (o.local_rank >= 0) return fmt::format("l{}|{}", o.host, o.local_rank);
  if (o.pid >= 0) return fmt::format("p{}|{}", o.host, o.pid);
  return fmt::format("?{}", source);
}

// Ranks from Slurm's "0-3,5".
std::vector<long> expand_tasks(const std::string& tasks) {
  std::vector<long> out;
  size_t p = 0;
  while (p < tasks.size() && out.size() < 4096) {
    size_t comma = tasks.find(',', p);
    std::string part = tasks.substr(p, comma == std::string::npos ? std::string::npos : comma - p);
    size_t dash = part.find('-');
    long a = number(part.substr(0, dash));
    long b = dash == std::string::npos ? a : number(part.substr(dash + 1));
    for (long r = a; r >= 0 && r <= b && out.size() < 4096; ++r)
      out.push_back(r);
    if (comma == std::string::npos) break;
    p = comma + 1;
  }
  return out;
}

template <typename S>  // std::optional<Note> or Slot
void keep_first(S& slot, const Note& n) {
  if (!slot || earlier(n, *slot)) slot = n;
}

// The first interface in NCCL's list ("[0]lo:127.0.0.1<0> [1]eth0:10.0.0.2<0>", or one
// "eth0:10.0.0.2<0>") that other hosts cannot reach: loopback (true) or link-local.
std::optional<std::pair<std::string, bool>> unreachable_interface(std::string_view ifs) {
  while (!ifs.empty()) {
    size_t end = ifs.find(' ');
    std::string_view entry = ifs.substr(0, end);
    ifs = end == std::string_view::npos ? std::string_view() : ifs.substr(end + 1);
    if (entry.starts_with('[')) entry.remove_prefix(std::min(entry.size(), entry.find(']') + 1));
    size_t colon = entry.find(':'), lt = entry.find('<');
    if (colon == std::string_view::npos || lt == std::string_view::npos || lt < colon) continue;
    std::string_view name = entry.substr(0, colon), addr = entry.substr(colon + 1, lt - colon - 1);
    bool loopback = name == "lo" || addr.starts_with("127.") || addr == "::1";
    bool link_local =
        addr.starts_with("169.254.") || addr.starts_with("fe80") || addr.starts_with("FE80");
    if (loopback || link_local)
      return std::pair{std::string(name) + ":" + std::string(addr), loopback};
  }
  return std::nullopt;
}

// The first (by time across files) names the group; the evidence is the first
// few lines read, and the first one always among them.
void add_evidence(Group& g, const Note& n, const std::string& detail) {
  if (g.count++ == 0 || earlier(n, g.first)) {
    g.first = n;
    g.detail = detail;
    bool shown = false;
    for (const Evidence& e : g.evidence)
      shown |= e.file == n.evidence.file && e.line == n.evidence.line;
    if (!shown && g.evidence.size() >= kMaxEvidence) g.evidence.pop_back();
    if (!shown) g.evidence.insert(g.evidence.begin(), n.evidence);
    return;
  }
  if (g.evidence.size() < kMaxEvidence) g.evidence.push_back(n.evidence);
}

// libstdc++'s "terminate called after throwing an instance of '...'": an exception
// nothing caught, whose what() (the next line) may say more.
bool uncaught_exception(const Pattern& row) {
  return row.finding == FindingId::kProcessDied &&
         row.literal.starts_with("terminate called after throwing an instance of");
}

// Who printed the line: its prefixes, then what the message itself names. A
// launcher's record of a death names the dead process, not the launcher.
Origin origin_of(const Match& m, const Pattern& row) {
  Origin o = m.origin;
  bool about_the_dead = row.cls == MessageClass::kProcessDied;
  auto take = [&](LineField f, long& slot) {
    long v = number(m.get(f));
    if (v >= 0 && (about_the_dead || slot < 0)) slot = v;
  };
  take(LineField::kRank, o.rank);
  take(LineField::kLocalRank, o.local_rank);
  take(LineField::kPid, o.pid);
  if (!m.get(LineField::kHost).empty() && (about_the_dead || o.host.empty()) &&
      row.cls != MessageClass::kPeerPointer)
    o.host = m.get(LineField::kHost);
  if (o.host.empty()) o.host = o.shell_host;  // the last resort: the shell's prompt
  if (about_the_dead) {                       // a launcher's line is not the dead process's own
    if (number(m.get(LineField::kRank)) < 0 && number(m.get(LineField::kLocalRank)) >= 0)
      o.rank = -1;
  }
  return o;
}

// What the message says, in a few words for the report.
std::string detail_of(const Match& m, const Pattern& row) {
  std::string detail = m.get(LineField::kDetail);
  if (row.name == "python_exception") detail = m.get(LineField::kId) + ": " + detail;
  if (row.name == "gloo_address_size")
    detail = fmt::format(
        "gloo's address exchange got a peer's list of {} bytes where {} were "
        "expected, so the ranks count different peers",
        m.get(LineField::kId), detail);
  // The address a process could not reach, in its own words: its MASTER_ADDR and
  // MASTER_PORT, which the store's may not be.
  if (row.finding == FindingId::kMasterUnreachable && !m.get(LineField::kHost).empty() &&
      !m.get(LineField::kPort).empty()) {
    bool timed_out = row.name == "store_connect_timeout" && !detail.empty();
    detail = fmt::format("could not connect to the store at {}:{}{}", m.get(LineField::kHost),
                         m.get(LineField::kPort),
                         timed_out ? fmt::format(" (timed out after {})", detail) : "");
  }
  if (detail.empty()) detail = std::string(row.literal);
  return printable(detail, 200);
}

}  // namespace

long number(const std::string& s) {
  if (s.empty()) return -1;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size() || s.size() > 18) return -1;
  long v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return s[0] == '-' ? -v : v;
}

void Knowledge::see_host(const std::string& host) {
  constexpr size_t kMaxHostsSeen = 4096;
  if (host.find('[') == std::string::npos) {
    if (hosts_seen.size() < kMaxHostsSeen) hosts_seen.insert(host);
    return;
  }
  // srun names the nodes of several tasks as one list ("cn[1-2]: tasks 0-3"): the
  // hosts it holds, each once, not the list as a host of its own.
  if (auto names = expand_hostlist(host)) {
    for (const std::string& name : *names) {
      if (hosts_seen.size() >= kMaxHostsSeen) break;
      hosts_seen.insert(name);
    }
  } else if (hosts_seen.size() < kMaxHostsSeen) {
    hosts_seen.insert(host);
  }
}

void Knowledge::seen(const Origin& o) {
  if (o.rank >= 0 && ranks_seen.size() < kMaxProcs) ranks_seen.insert(o.rank);
  std::string key = key_of(o, 0);
  if (procs.size() >= kMaxProcs && !procs.count(key)) return;
  Proc& p = procs[key];
  p.rank = o.rank;
  p.local_rank = o.local_rank;
  if (p.host.empty()) p.host = o.host;
}

// The entry of the process a line is about, its rank, local rank, pid and host
// noted on first sight.
Proc* Knowledge::proc_at(const Origin& at, uint32_t source) {
  std::string key = key_of(at, source);
  if (procs.size() >= kMaxProcs && !procs.count(key)) {
    ++dropped;
    return nullptr;
  }
  Proc& p = procs[key];
  if (at.rank >= 0) p.rank = at.rank;
  if (at.local_rank >= 0) p.local_rank = at.local_rank;
  if (at.pid >= 0) p.pid = at.pid;
  if (p.host.empty()) p.host = at.host;
  p.unattributed = key[0] == '?';
  if (at.rank >= 0) ranks_seen.insert(at.rank);
  return &p;
}

// The line as the report keeps it: where, when, what it said. Long lines are kept
// whole until kLongTextBudget is spent, then cut.
Note Knowledge::note_of(const Match& m, const Origin& o) {
  Note note;
  note.row = m.row;
  note.evidence = {sources[m.source], m.line, m.text};
  if (m.text.size() > kEvidenceShort) {
    if (long_text >= kLongTextBudget) {
      note.evidence.text = printable(m.text, kEvidenceShort);  // printable already: a cut only
    } else {
      long_text += m.text.size();
    }
  }
  note.seq = m.seq;
  note.stamp = m.stamp;
  note.time = o.time;
  note.detail = detail_of(m, catalogue()[m.row]);
  return note;
}

void Knowledge::add(const Match& m) {
  const Pattern& row = catalogue()[m.row];
  Origin o = origin_of(m, row);
  Note note = note_of(m, o);
  if (row.component == "torchrun") launchers |= Prefix::kTorchrun;
  if (row.component == "Slurm") launchers |= Prefix::kSrun;
  if (row.component == "Open MPI") launchers |= Prefix::kMpirun;
  if (!o.host.empty() && row.cls != MessageClass::kPeerPointer) see_host(o.host);

  using enum MessageClass;
  switch (row.cls) {
    case kRankcheck:
      on_verdict(m, std::move(note));
      break;
    case kSetup:
      on_setup_error(m, row, o, note);
      break;
    case kExternalEnd:
      on_job_end(m, row, std::move(note));
      break;
    case kProcessDied:
      on_death(m, row, o, note);
      break;
    case kOwnError:
      if (Proc* p = proc_at(o, m.source)) {
        if (p->waiting && uncaught_exception(row)) break;  // the wait's own end
        // NCCL's generic result (an internal check) gives way to a cause in words of
        // its own that the same process prints next ("Last error: ...").
        // So does PyTorch's gloss of NCCL's result ("ncclSystemError: System call (e.g.
        // socket, malloc) ... failed"), which the WARN it quotes after it explains, and a
        // Python exception no row reads ("FailedJobError: ... with trace:"), which the
        // error in a program's words that its chained trace prints next explains.
        const Pattern* before = p->own ? &catalogue()[p->own->row] : nullptr;
        bool generic = before && row.finding != before->finding &&
                       row.finding != FindingId::kProcessDied &&
                       (before->finding == FindingId::kNcclInitFailed ||
                        before->literal.starts_with("ncclSystemError: ") ||
                        before->name == "python_exception");
        if (generic) {
          p->own = note;
        } else {
          keep_first(p->own, note);
        }
      }
      break;
    case kPeersAbsent:
      on_wait(m, o, note);
      break;
    case kPeerPointer:
      on_pointer(m, row, o, note);
      break;
    case kCollectiveTimeout:
      on_timeout(m, o, note);
      break;
    case kKilledByLauncher:
      if (o.pid >= 0 && killed_pids.size() < kMaxPids) killed_pids.insert(o.pid);
      break;
    case kErrorLine:
      if (!error_line || earlier(note, error_line->first)) error_line = {note, o};
      break;
    case kContext:
      if (row.name.starts_with("rank_claim")) {
        on_rank_claim(m, o, note);
      } else {
        on_host_fact(m, row, o, note);
      }
      break;
  }
  if (row.cls != kContext && row.cls != kRankcheck &&
      (!first_failure || earlier(note, *first_failure)))
    first_failure = note;
}

// What a host says of itself (its NCCL version, the network NCCL chose, an NCCL_*
// value): the first of each, for conclude.cc to compare across hosts.
void Knowledge::on_host_fact(const Match& m, const Pattern& row, const Origin& o,
                             const Note& note) {
  if (o.host.empty() || (host_logs.size() >= kMaxHostLogs && !host_logs.count(o.host))) return;
  bool version = row.name == "nccl_version_banner", network = row.name == "nccl_using_network";
  bool ib = row.name == "nccl_ib_using", plugin = row.name.starts_with("nccl_plugin_");
  bool sockets = row.name == "nccl_socket_using";
  if (!version && !network && !ib && !plugin && !sockets && row.name != "nccl_env_set") return;
  HostLog& h = host_logs[o.host];
  // A host that found no net plugin uses NCCL's internal one.
  const std::string value = row.name.starts_with("nccl_plugin_none") ? std::string(kInternalPlugin)
                                                                     : m.get(LineField::kId);
  // The interfaces NCCL's sockets use ("[0]lo:127.0.0.1<0> [1]eth0:10.0.0.2<0>"), and the
  // IB transport's out-of-band one ("; OOB eth0:10.0.0.2<0>").
  std::string_view ifs = sockets ? std::string_view(value) : std::string_view();
  if (ib) {
    size_t oob = note.evidence.text.find("; OOB ");
    if (oob != std::string::npos) ifs = std::string_view(note.evidence.text).substr(oob + 6);
  }
  if (h.unreachable_if.empty()) {
    if (auto bad = unreachable_interface(ifs)) {
      h.unreachable_if = bad->first;
      h.loopback = bad->second;
      h.if_note = note;
    }
  }
  if (sockets) return;
  if (ib || plugin) {  // NCCL's data network: the first line of each
    std::string& slot = ib ? h.ib_ports : h.plugin;
    if (slot.empty()) {
      slot = value.substr(0, 512);
      (ib ? h.ib_note : h.plugin_note) = note;
    }
    return;
  }
  if (version && h.nccl_version.empty()) {
    h.nccl_version = value;
    h.version_note = note;
  } else if (network && h.network.empty()) {
    h.network = value;
    h.network_note = note;
  } else if (!version && !network && h.env.size() < 64) {
    h.env.emplace(value, m.get(LineField::kDetail));
    if (!h.env_note) h.env_note = note;
  }
}

// rankcheck's own verdict: the first one that names a known finding; and the
// suspect hosts its report ended with.
void Knowledge::on_verdict(const Match& m, Note note) {
  rankcheck_seen = true;
  if (catalogue()[m.row].name == "rankcheck_suspect_hosts") {
    if (suspects.size() < kMaxHostLogs) suspects.emplace(m.source, m.get(LineField::kHost));
    return;
  }
  std::string name = m.get(LineField::kId);
  const FindingKind* kind = find_finding_kind(name.empty() ? "missing-rank" : name);
  if (kind == nullptr || rankcheck) return;
  // Whole: the scanner joined a report's wrapped lines (kVerdictBytes at most).
  note.detail = m.get(LineField::kDetail);
  rankcheck = Verdict{kind->id, std::move(note), m.get(LineField::kFix), m.source};
}

// A rank's own setup is wrong: grouped by finding, with every rank it names.
void Knowledge::on_setup_error(const Match& m, const Pattern& row, const Origin& o,
                               const Note& note) {
  Group& g = setup[row.finding];
  g.id = row.finding;
  if (o.rank >= 0) g.ranks.insert(o.rank);
  for (LineField f : {LineField::kRank, LineField::kRank2}) {
    if (row.finding == FindingId::kDuplicateGpu && number(m.get(f)) >= 0)
      g.ranks.insert(number(m.get(f)));
  }
  if (!o.host.empty() && !add_host(g, o.host)) ++dropped;
  add_evidence(g, note, note.detail);
  if (row.name == "torch_address_in_use" && !m.get(LineField::kPort).empty() && g.count == 1)
    g.detail = m.get(LineField::kPort);
  if (Proc* p = proc_at(o, m.source)) keep_first(p->own, note);
}

// The scheduler (or torchrun's agent, on a signal) ended the job.
void Knowledge::on_job_end(const Match& m, const Pattern& row, Note note) {
  if (row.name == "slurm_cancelled") {
    std::string reason = m.get(LineField::kOp), host = m.get(LineField::kHost);
    // "DUE TO TIME LIMIT on n447": the node after the reason, where no "ON" named it.
    if (size_t on = reason.rfind(" on "); on != std::string::npos && host.empty()) {
      host = reason.substr(on + 4);
      reason.resize(on);
    }
    // Without a reason, srun may have cancelled it (conclude decides): no "scheduler".
    note.detail = fmt::format("{} {}{} at {}{}",
                              reason.empty() ? "Slurm cancelled" : "the scheduler cancelled",
                              m.get(LineField::kId), host.empty() ? "" : " on " + host,
                              m.get(LineField::kDetail), reason.empty() ? "" : " " + reason);
    note.detail = printable(note.detail, 200);
    if (note.time.empty()) note.time = m.get(LineField::kDetail);
    if (reason.rfind("DUE ", 0) == 0) reason = reason.substr(std::min(reason.size(), size_t{7}));
    if (external.size() < 16) external.push_back({note, reason, printable(host, 128)});
  } else if (row.name == "torchrun_death_signal") {
    note.detail = fmt::format("torchrun's agent received signal {} and stopped its workers",
                              m.get(LineField::kSignal));
    if (external.size() < 16) external.push_back({note, "signal", ""});
  } else if (external.size() < 16) {
    // A row read from the scheduler's or orchestrator's own words. Like a cancel
    // without a reason, one that follows a task's end is that end's consequence
    // (srun's "Force Terminated" after a task failed): conclude.cc decides.
    note.detail = fmt::format("{}: {}", row.component, note.detail);
    external.push_back({note, "", printable(m.get(LineField::kHost), 128)});
  }
}

// A launcher's record of a process's end (or of several: Slurm's "0-3,5"), with its
// exit code or signal; torchrun's failure table also maps pids and local ranks to ranks.
void Knowledge::on_death(const Match& m, const Pattern& row, const Origin& o, const Note& note) {
  std::vector<long> ranks = expand_tasks(m.get(LineField::kTasks));
  if (ranks.empty()) ranks.push_back(o.rank);
  long exit = number(m.get(LineField::kExit));
  long sig = number(m.get(LineField::kSignal));
  if (exit < -1) {  // torchrun: -N is signal N
    sig = -exit;
    exit = -1;
  }
  std::string what = m.get(LineField::kDetail);
  if (row.name == "srun_task_exit" && what.rfind("Exited", 0) != 0) {
    if (what.find("Killed") != std::string::npos) sig = 9;
    if (what.find("Segmentation") != std::string::npos) sig = 11;
    if (what.find("Aborted") != std::string::npos) sig = 6;
    if (what.find("Terminated") != std::string::npos) sig = 15;  // srun stopping the rest
  }
  // mpirun names a rank with its pid, as torchrun's table does: the kernel's OOM
  // killer names only the pid.
  if (row.name.starts_with("mpirun_") && o.rank >= 0 && o.pid >= 0 && rank_of_pid.size() < kMaxPids)
    rank_of_pid.emplace(o.pid, o.rank);
  if (row.name == "torchrun_failure_entry" && o.rank >= 0) {
    if (o.pid >= 0 && rank_of_pid.size() < kMaxPids) rank_of_pid[o.pid] = o.rank;
    if (o.local_rank >= 0 && rank_of_local.size() < kMaxPids) {
      rank_of_local[fmt::format("{}|{}", o.host, o.local_rank)] = o.rank;
      // A local rank without its host names a rank only while one host's table has
      // it: with two nodes' tables, local rank 0 is rank 0 on one and rank 2 on the
      // other (-1: ambiguous).
      auto [it, fresh] = rank_of_local.emplace(fmt::format("|{}", o.local_rank), o.rank);
      if (!fresh && it->second != o.rank) it->second = -1;
    }
  }
  for (long r : ranks) {
    Origin at = o;
    at.rank = r;
    Proc* p = proc_at(at, m.source);
    if (!p) continue;
    keep_first(p->died, note);
    if (!o.time.empty()) p->died_at = std::max(p->died_at, time_key(o.time));
    if (exit > 0 && p->exit <= 0) p->exit = exit;
    if (sig > 0 && p->signal <= 0) p->signal = sig;
  }
}

// A rank waited for peers: the world size it expected, and how many had joined.
void Knowledge::on_wait(const Match& m, const Origin& o, const Note& note) {
  long world_n = number(m.get(LineField::kWorld));
  long joined_n = number(m.get(LineField::kJoined));
  if (world_n > 0) world = std::max(world, world_n);
  if (joined_n >= 0 && (joined < 0 || joined_n < joined)) joined = joined_n;
  most_joined = std::max(most_joined, joined_n);
  if (world_n > 0 && o.rank >= 0 && world_by_rank.size() < kMaxPids)
    world_by_rank[o.rank] = world_n;
  keep_first(absent_first, note);
  if (Proc* p = proc_at(o, m.source)) {
    keep_first(p->waiting, note);
    // An exception nothing caught ("terminate called after throwing an instance of
    // 'gloo::IoException'") whose what() is this wait: the process died of the wait.
    if (p->own && uncaught_exception(catalogue()[p->own->row]) && earlier(*p->own, note))
      p->own = Slot();
  }
}

// A process saying which rank it is as it starts: counted by rank (and barrier key),
// with the pids that said it where the prefix gave one.
void Knowledge::on_rank_claim(const Match& m, const Origin& o, const Note& note) {
  long rank = number(m.get(LineField::kRank));
  if (rank < 0) rank = o.rank;
  if (rank < 0) return;
  std::pair<long, long> key{number(m.get(LineField::kSeq)), rank};
  if (!claims.count(key) && claims.size() >= kMaxPids) {
    ++dropped;
    return;
  }
  std::vector<Claim>& c = claims[key];
  if (c.size() < 8) c.push_back({note, o.pid});
  long world_n = number(m.get(LineField::kWorld));
  if (world_n > 0) world = std::max(world, world_n);
}

// A rank reports a peer gone: grouped by finding, with the peers' hosts it names.
void Knowledge::on_pointer(const Match& m, const Pattern& row, const Origin& o, const Note& note) {
  // NCCL's remote error says itself that it is a peer's exit or the network: with no
  // peer's own error anywhere (conclude.cc), the network is what is left to name.
  FindingId id = row.finding == FindingId::kPeerFailed &&
                         (row.literal.find("network error") != std::string_view::npos ||
                          row.name == "nccl_remote_error")
                     ? FindingId::kNcclNetworkError
                     : row.finding;
  Group& g = pointers[id];
  g.id = id;
  if (o.rank >= 0) g.ranks.insert(o.rank);
  if (!o.host.empty() && g.from_hosts.size() < 8) g.from_hosts.insert(o.host);
  if (!m.get(LineField::kHost).empty() && !add_host(g, m.get(LineField::kHost))) ++dropped;
  add_evidence(g, note, note.detail);
  if (Proc* p = proc_at(o, m.source)) keep_first(p->downstream, note);
}

// A watchdog's timeout of one collective: which one (SeqNum, OpType), on which rank.
void Knowledge::on_timeout(const Match& m, const Origin& o, const Note& note) {
  Proc* p = proc_at(o, m.source);
  if (!p) return;
  keep_first(p->timeout, note);
  if (number(m.get(LineField::kSeq)) >= 0) p->seq_no = number(m.get(LineField::kSeq));
  if (!m.get(LineField::kOp).empty()) p->op = m.get(LineField::kOp);
  if (number(m.get(LineField::kEnqueued)) >= 0) p->enqueued = number(m.get(LineField::kEnqueued));
}

}  // namespace rankcheck::diagnose
