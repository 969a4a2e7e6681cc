#include "master/master_state.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "base/interrupt.h"
#include "base/text.h"
#include "nccl/version.h"

namespace rankcheck {
namespace {

// Refusals kept for the report; the rest are only counted.
constexpr size_t kMaxRefusalsKept = 64;
// Departures kept for the report (one per member, the latest), logged one by one
// before they are only counted: a client that joins and leaves in a loop costs
// the master neither memory nor log lines without bound.
constexpr size_t kMaxDeparturesKept = 64;
constexpr size_t kMaxDeparturesLogged = 8;
// Members named in the log line of those with no GPU stage result at its end.
constexpr size_t kSilentLogged = 4;

}  // namespace

MasterState::MasterState(MasterConfig config)
    : cfg_(std::move(config)), tracker_(cfg_.world_size, cfg_.master_resolved, cfg_.gpu_stage) {
  claims_.assign(static_cast<size_t>(std::max(cfg_.world_size, 1L)), 0);
  // A member per rank at most, reserved whole: grown by doubling, the vector held
  // its old array and the new one at once (44 and 88 MB at 100k members). Pages
  // never touched cost address space, not memory (node mode's members, a world
  // that never comes); a world the allocator refuses is grown as it joins.
  try {
    members_.reserve(static_cast<size_t>(std::clamp(cfg_.world_size, 1L, kMaxWorldSize)));
  } catch (const std::bad_alloc&) {
    members_.reserve(size_t{1} << 12);
  }
}

void MasterState::count(const Record& rec, int by, bool master) {
  for (long k = std::max(0, rec.rank); k <= rec.last_rank() && k < cfg_.world_size; ++k) {
    uint32_t& n = claims_[size_t(k)];
    if (by > 0 && n++ == 0) ++distinct_claimed_;
    if (by < 0 && --n == 0) --distinct_claimed_;
  }
  joined_ranks_ += by * rec.nranks;
  if (!master && (world_votes_[rec.world_size] += by) == 0) world_votes_.erase(rec.world_size);
  // The world sizes a member's other sources give (WORLD_SIZE=8 but SLURM_NTASKS=4),
  // one vote per member for each: two sources saying 4 are still one member.
  std::set<long> alt;
  for (const Conflict& c : rec.conflicts) {
    if (c.field != Field::kWorldSize) continue;
    for (const Observation& o : c.values) {
      long w = std::strtol(o.value.c_str(), nullptr, 10);
      if (w != rec.world_size) alt.insert(w);
    }
  }
  for (long w : alt) {
    if ((alt_votes_[w] += by) == 0) alt_votes_.erase(w);
  }
}

bool MasterState::complete_up_to(long world) const {
  if (world < 1 || world >= cfg_.world_size || distinct_claimed_ < world) return false;
  for (long k = 0; k < world; ++k) {
    if (claims_[size_t(k)] == 0) return false;
  }
  return true;
}

size_t MasterState::admit(Record rec, SharedString peer, bool own) {
  last_join_ms_ = now_ms();
  count(rec, +1, own);
  tracker_.add(rec, peer);
  string_lists_.intern(rec.interfaces);
  string_lists_.intern(rec.master_resolved);
  envs_.intern(rec.env);
  for (SharedString* s :
       {&rec.version, &rec.launcher, &rec.master_addr, &rec.resolve_error, &rec.job_id, &rec.host,
        &rec.node_list, &rec.tasks_per_node, &rec.gpu.error, &rec.gpu.driver,
        &rec.gpu.visible_devices, &rec.gpu.choice, &rec.gpu.nccl_path, &rec.gpu.nccl_error}) {
    strings_.intern(*s);
  }
  for (GpuDevice& d : rec.gpu.devices) {
    strings_.intern(d.pci_bus_id);
    strings_.intern(d.name);
  }
  host_facts_.intern(rec);
  envs_.intern(rec.env_sources);
  members_.push_back(Member{std::move(rec), last_join_ms_, std::move(peer)});
  return members_.size() - 1;
}

void MasterState::depart(size_t i) {
  if (decided_ || i >= members_.size()) return;
  Member gone = std::move(members_[i]);
  members_.erase(members_.begin() + static_cast<std::ptrdiff_t>(i));
  count(gone.record, -1, false);
  tracker_.taint();
  if (++departed_total_ <= kMaxDeparturesLogged) {
    cfg_.log(fmt::format("{} disconnected before the verdict; joined {}/{}",
                         member_label(gone.record), distinct_claimed_, cfg_.world_size));
  } else if (departed_total_ == kMaxDeparturesLogged + 1) {
    cfg_.log("more members disconnected before the verdict; counting them without logging each");
  }
  Departure d{std::move(gone.record), gone.joined_ms, now_ms()};
  // The same member leaving again (a client in a loop) replaces its departure.
  auto same = std::find_if(departed_.begin(), departed_.end(), [&d](const Departure& e) {
    return e.record.rank == d.record.rank && e.record.nranks == d.record.nranks &&
           e.record.host == d.record.host;
  });
  if (same != departed_.end()) {
    *same = std::move(d);
  } else if (departed_.size() < kMaxDeparturesKept) {
    departed_.push_back(std::move(d));
  }
}

// The first member that left and did not come back (a relay's members whose relay
// died rejoin directly): for a signal's finding (report_signal). Says, at the
// decision, how many left beyond those the report names.
std::optional<Departure> MasterState::first_gone() const {
  if (departed_total_ > departed_.size()) {
    cfg_.log(fmt::format("{} disconnections before the verdict; the report names {} of them",
                         departed_total_, departed_.size()));
  }
  const Departure* first = nullptr;
  for (const Departure& d : departed_) {
    bool back = std::any_of(members_.begin(), members_.end(), [&d](const Member& m) {
      return m.record.rank == d.record.rank && m.record.host == d.record.host;
    });
    if (!back && (first == nullptr || d.left_ms < first->left_ms)) first = &d;
  }
  return first ? std::optional<Departure>(*first) : std::nullopt;
}

void MasterState::accept_failed(const std::string& why, size_t open, const std::string& held_by,
                                size_t held) {
  tracker_.taint();
  if (accept_failures_.count++ == 0) {
    accept_failures_.error = why;
    accept_failures_.first_ms = now_ms();
    accept_failures_.open = open;
  }
  if (held > accept_failures_.held) {
    accept_failures_.held_by = held_by;
    accept_failures_.held = held;
  }
}

void MasterState::set_root(const Record& leader, const NcclIdBytes& id) {
  if (roots_.size() < kMaxNcclRoots) roots_[leader.rank] = Root{leader.pid, id};
}

std::vector<NcclIdBytes> MasterState::scalable_roots(const NcclIdBytes& first,
                                                     const std::vector<Member>& members) const {
  long every = cfg_.nccl_roots_every;
  if (every < 0 || (every > 0 && cfg_.world_size <= every)) return {};
  for (const Member& m : members) {
    if (!nccl::has(m.record.gpu.nccl_version, nccl::kScalableInit)) {
      cfg_.log(fmt::format("NCCL {} on {}: ncclCommInitRankScalable needs 2.23; one root instead",
                           m.record.gpu.nccl_version, member_label(m.record)));
      return {};
    }
  }
  // NCCL_COMM_ID: ncclGetUniqueId then names that address and starts no root
  // (bootstrapGetUniqueId), so every block's id would be the same, and
  // ncclCommInitRankDev keeps one id on rank 0 only: every rank would wait in init.
  for (const Member& m : members) {
    for (const EnvVar& e : m.record.env) {
      if (e.name == "NCCL_COMM_ID" && !e.value.empty()) {
        cfg_.log(
            fmt::format("NCCL_COMM_ID={} on {}: NCCL makes no root of its own then; one "
                        "root instead",
                        printable(e.value, 64), member_label(m.record)));
        return {};
      }
    }
  }
  std::vector<NcclIdBytes> roots{first};
  long blocks = every == 0 ? 1 : (cfg_.world_size + every - 1) / every;
  if (blocks > long(kMaxNcclRoots)) {
    cfg_.log(fmt::format("{} NCCL roots of {} ranks each are more than {}: one root instead",
                         blocks, every, kMaxNcclRoots));
    return {};
  }
  for (long k = 1; k < blocks; ++k) {
    long leader = k * every;
    auto it = roots_.find(leader);
    bool here =
        it != roots_.end() && std::any_of(members.begin(), members.end(), [&](const Member& m) {
          return m.record.rank == leader && m.record.pid == it->second.pid;
        });
    if (!here) {
      cfg_.log(
          fmt::format("rank {}, the first of NCCL root {}'s block, sent no unique id (is "
                      "--nccl-roots-every the same on every rank?): one root instead",
                      leader, k));
      return {};
    }
    roots.push_back(it->second.id);
  }
  return roots;
}

void MasterState::relay_lost(const std::string& host, uint32_t pid, size_t members) {
  tracker_.taint();  // relay-lost is raised on it
  if (lost_relays_.size() < 64) lost_relays_.push_back(LostRelay{host, pid, members, now_ms()});
}

void MasterState::refuse(RefusalKind kind, std::string peer, std::string reason,
                         std::optional<Record> record) {
  tracker_.taint();
  ++refused_total_;
  // A flood is summed up once per address, at the decision: always kept.
  if ((refused_.size() < kMaxRefusalsKept && kind != RefusalKind::kLate) ||
      kind == RefusalKind::kFlood) {
    refused_.push_back(
        Refusal{kind, std::move(peer), std::move(reason), std::move(record), now_ms()});
  }
}

std::vector<long> MasterState::missing_ranks() const {
  std::vector<long> out;
  for (size_t k = 0; k < claims_.size(); ++k) {
    if (claims_[k] == 0) out.push_back(long(k));
  }
  return out;
}

// Every member but the master claims one smaller world, and all of it is here:
// the master's WORLD_SIZE is the odd one, and waiting longer cannot help.
// Or every member's launcher says a smaller world (WORLD_SIZE exported too big,
// SLURM_NTASKS right), and all of that is here.
bool MasterState::smaller_world_complete() const {
  if (world_votes_.size() == 1 && complete_up_to(world_votes_.begin()->first)) return true;
  for (auto [world, members] : alt_votes_) {
    if (members == static_cast<long>(members_.size()) && complete_up_to(world)) return true;
  }
  return false;
}

bool MasterState::only_departed_missing() const {
  if (decided_ || departed_.empty() || departed_total_ > departed_.size()) return false;
  long departed_ranks = 0;  // cheap first: called on every join once someone left
  for (const Departure& d : departed_)
    departed_ranks += d.record.nranks;
  if (cfg_.launcher_members <= 0 && distinct_claimed_ + departed_ranks < cfg_.world_size) {
    return false;
  }
  std::vector<char> gone(claims_.size(), 0);
  long gone_members = 0;
  for (const Departure& d : departed_) {
    bool counted = false;
    for (long k = std::max(0, d.record.rank); k <= d.record.last_rank() && k < cfg_.world_size;
         ++k) {
      if (claims_[size_t(k)] > 0) continue;  // it, or another process, came back for it
      gone[size_t(k)] = 1;
      counted = true;
    }
    gone_members += counted ? 1 : 0;
  }
  if (gone_members == 0) return false;
  if (cfg_.launcher_members > 0) {
    return static_cast<long>(members_.size()) + gone_members >= cfg_.launcher_members;
  }
  for (size_t k = 0; k < claims_.size(); ++k) {
    if (claims_[k] == 0 && gone[k] == 0) return false;
  }
  return true;
}

bool MasterState::ready() const {
  if (decided_) return false;
  // The launcher started more processes than the world holds: deciding before the
  // last of them is here would turn the others away as late, a verdict that
  // depends on who was fastest. Every one of them is reported instead.
  if (cfg_.launcher_members > 0) return static_cast<long>(members_.size()) >= cfg_.launcher_members;
  return joined_ranks_ >= cfg_.world_size || smaller_world_complete();
}

// The rehearsal of NCCL's connections needs the TCP rendezvous (a listener per host,
// the plan sent as each host's members join): over MPI it does not run, and on
// several hosts the report says so rather than show an empty list of paths.
void MasterState::say_not_rehearsed(const std::vector<Member>& members) {
  std::set<std::string_view> hosts;
  for (const Member& m : members)
    hosts.insert(m.record.host.str());
  if (hosts.size() < 2) return;  // one host: NCCL connects nowhere else
  report_.rehearsal_not_run =
      "--bootstrap mpi does not rehearse them; run rankcheck over TCP under mpirun "
      "(mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT=<a free port> rankcheck run) to "
      "try them before NCCL";
  cfg_.log("NCCL's connections not rehearsed: " + report_.rehearsal_not_run);
}

void MasterState::interrupt(int signal) {
  signal_ = signal;
}

// What every member learns when rank 0 is stopped: why their job failed.
void MasterState::report_signal() {
  if (signal_ == 0 || signal_reported_) return;
  signal_reported_ = true;
  report_.interrupted_by = signal_;
  // First in the catalogue's precedence: raised last, it still leads every report, the
  // GPU stage's too.
  report_.findings.push_back(master_interrupted(cfg_.master_host, signal_, now_ms(),
                                                first_left_ ? &*first_left_ : nullptr));
  order_findings(report_.findings);
}

Verdict MasterState::verdict_base() const {
  Verdict v;
  v.exit_code = static_cast<uint8_t>(report_.exit_code());
  v.headline = headline(report_.findings);
  if (!report_.findings.empty()) v.headline_id = report_.findings.front().name();
  v.joined_ranks = static_cast<uint32_t>(distinct_claimed_);
  for (const Finding& f : report_.findings)
    (f.is_error() ? v.errors : v.warnings)++;
  // Where the job is watched, once it may start: only a pass starts a command.
  if (v.exit_code == exit_code::kPass) v.watch_port = cfg_.watch_port;
  return v;
}

JobView MasterState::config_view() const {
  JobView view;
  view.world_size = cfg_.world_size;
  view.job_id = cfg_.job_id;
  view.master_addr = cfg_.master_addr;
  view.master_host = cfg_.master_host;
  view.master_resolved = cfg_.master_resolved;
  view.gpu_stage = cfg_.gpu_stage;
  view.transport = cfg_.transport;
  view.authenticated = cfg_.authenticated;
  view.master_started_unix_ms = cfg_.start_unix_ms;
  view.timeout_ms = cfg_.timeout_ms;
  return view;
}

bool MasterState::would_pass() const {
  if (tracker_.clean()) return true;
  JobView view = config_view();
  view.departed = departed_;
  view.refused = refused_;
  view.refused_total = refused_total_;
  view.members = members_;
  return exit_code_for(run_checks(view)) == exit_code::kPass;
}

void MasterState::set_paths(std::vector<Finding> findings, std::vector<PathTried> paths,
                            double ms) {
  // Name the ranks on the hosts each finding names.
  for (Finding& f : findings) {
    for (const Member& m : members_) {
      if (std::binary_search(f.hosts.begin(), f.hosts.end(), m.record.host.str())) {
        for (long k = m.record.rank; k <= m.record.last_rank(); ++k)
          f.ranks.push_back(k);
      }
    }
    std::sort(f.ranks.begin(), f.ranks.end());
    f.ranks.erase(std::unique(f.ranks.begin(), f.ranks.end()), f.ranks.end());
  }
  path_findings_ = std::move(findings);
  report_.paths = std::move(paths);
  report_.rehearsal_ms = ms;
  report_.rehearsal_ran = true;
}

const Verdict& MasterState::decide(DecisionFacts facts) {
  if (decided_) return verdict_;
  const bool timed_out = facts.timed_out;
  const ProcessFacts& process = facts.process;
  // Not at the deadline, yet not complete: the server's grace after a lost member.
  report_.member_lost = !timed_out && signal_ == 0 && !ready() && departed_total_ > 0;
  decided_ = true;
  auto t0 = Clock::now();
  JobView view = config_view();
  view.master_port = facts.master_port;
  view.master_bound = facts.bound;
  view.accept_failures = accept_failures_;
  view.lost_relays = lost_relays_;
  if (accept_failures_.count > 0) {
    view.accept_failures.files_soft = process.files_soft;
    view.accept_failures.files_hard = process.files_hard;
  }
  view.timed_out = timed_out;
  first_left_ = first_gone();
  view.departed = std::move(departed_);
  view.refused = std::move(refused_);
  view.refused_total = refused_total_;
  view.members = std::move(members_);
  // A clean job (the tracker kept to every rule as members joined) runs only what
  // runs on every decision; the rehearsal's findings join the rules' (a blocked path
  // leads: NCCL would hang on it).
  report_.findings = tracker_.clean() ? run_always(view) : run_checks(view);
  report_.findings.insert(report_.findings.end(), path_findings_.begin(), path_findings_.end());
  order_findings(report_.findings);
  report_signal();
  if (cfg_.transport == Transport::kMpi) say_not_rehearsed(view.members);
  report_.job_id = cfg_.job_id;
  report_.world_size = cfg_.world_size;
  report_.transport = cfg_.transport;
  report_.master_addr = cfg_.master_addr;
  report_.master_port = facts.master_port;
  report_.master_host = cfg_.master_host;
  report_.master_bound = std::move(facts.bound);
  report_.connections_peak = facts.connections_peak;
  report_.relays = facts.relays;
  report_.relayed_members = facts.relayed_members;
  report_.timed_out = timed_out;
  report_.authenticated = cfg_.authenticated;
  // The rehearsal runs between the last join and the decision, and has a timing of
  // its own: the rendezvous and the decision leave it out.
  report_.rendezvous_ms = std::max(0.0, ms_between(cfg_.start, t0) - report_.rehearsal_ms);

  // Go for the GPU stage only when nothing is wrong: NCCL is never started on a
  // job that would hang.
  std::optional<NcclId> nccl_id;
  if (!cfg_.gpu_stage) {
    report_.gpu_stage = "not run (--no-gpu)";
  } else if (report_.exit_code() != 0) {
    report_.gpu_stage = "not run (the rendezvous failed)";
  } else if (auto blocker = gpu_stage_blocker(view.members)) {
    report_.gpu_stage = fmt::format("not run ({})", *blocker);
  } else if (auto id = cfg_.make_nccl_id ? cfg_.make_nccl_id()
                                         : Result<NcclId>(Error{"no NCCL on the master"})) {
    nccl_id = *id;
  } else {
    report_.findings.push_back(unique_id_failed(cfg_.master_host, id.error().message));
    order_findings(report_.findings);
    report_.gpu_stage = "failed (no NCCL unique id)";
  }
  std::vector<NcclIdBytes> roots;
  if (nccl_id) roots = scalable_roots(*nccl_id, view.members);
  report_.members = std::move(view.members);
  verdict_ = verdict_base();
  if (nccl_id) {
    verdict_.final = false;
    verdict_.run_gpu = true;
    verdict_.nccl_id = nccl_id;
    if (!roots.empty()) {
      verdict_.nccl_roots = static_cast<uint32_t>(roots.size());
      verdict_.roots_digest = roots_digest(roots);
      verdict_.roots = std::move(roots);
      report_.nccl_roots = verdict_.nccl_roots;
    }
    stage_ms_ = double(cfg_.stage_by.remaining().count());
    verdict_.stage_ms = static_cast<uint32_t>(stage_ms_);
    stage_running_ = true;
    results_expected_ = static_cast<long>(report_.members.size());
    reported_.assign(report_.members.size(), false);
  }
  // From the last join (or the deadline) to the verdict.
  auto t1 = Clock::now();
  report_.decision_ms =
      timed_out ? ms_between(t0, t1)
                : std::max(0.0, ms_between(cfg_.start, t1) - last_join_ms_ - report_.rehearsal_ms);
  // What holding the members cost, before anything is sent.
  report_.peak_rss_kib = process.peak_kib;
  report_.rss_kib = process.rss_kib;
  // Why it decided, and with what, as its report will say.
  std::string why = signal_ != 0 ? fmt::format("stopped by {}", signal_name(signal_))
                    : timed_out  ? std::string("deadline reached")
                    : report_.member_lost
                        ? std::string("a member's connection closed; every other rank joined")
                    : joined_ranks_ >= cfg_.world_size
                        ? std::string("all joined")
                        : std::string(
                              "every rank of the smaller world size the members give "
                              "joined");
  std::string outcome = verdict_.exit_code == 0 ? std::string("PASS")
                        : signal_ != 0
                            ? fmt::format("FAIL (members exit {}, rank 0 exits {})",
                                          verdict_.exit_code, exit_code::kSignalBase + signal_)
                            : fmt::format("FAIL (exit {})", verdict_.exit_code);
  cfg_.log(fmt::format("decided at +{} ({}): {}, {} of {} ranks joined{}",
                       format_seconds(report_.rendezvous_ms), why, outcome, distinct_claimed_,
                       cfg_.world_size,
                       joined_ranks_ != distinct_claimed_
                           ? fmt::format(" (the members stand for {}: a rank claimed twice, "
                                         "or outside the world)",
                                         joined_ranks_)
                           : std::string()));
  return verdict_;
}

std::vector<Finding> MasterState::notes_for(size_t i) const {
  std::vector<Finding> notes;
  const std::vector<Member>& ms = members();
  if (i >= ms.size()) return notes;
  const Record& rec = ms[i].record;
  // Findings about refused processes (another job's, one without the token) name
  // the ranks those claim: a member of this job holding the same number is not
  // their subject, and the master's report names them once.
  for (const Finding& f : report_.findings) {
    if (f.id == FindingId::kForeignJob || f.id == FindingId::kAuthFailed) continue;
    auto lo = std::lower_bound(f.ranks.begin(), f.ranks.end(), long(rec.rank));
    if (lo != f.ranks.end() && *lo <= rec.last_rank()) notes.push_back(f);
  }
  return notes;
}

bool MasterState::accept_results(size_t i, std::vector<RankResult> results) {
  if (!stage_running_ || i >= reported_.size() || reported_[i]) return results_expected_ <= 0;
  reported_[i] = true;
  const Record& rec = report_.members[i].record;
  if (results.empty()) {
    cfg_.log(fmt::format("{} sent no GPU stage result", member_label(rec)));
  }
  for (RankResult& r : results) {  // its own ranks, and no others
    if (r.rank >= rec.rank && r.rank <= rec.last_rank()) stage_results_.push_back(std::move(r));
  }
  return --results_expected_ <= 0;
}

const Verdict& MasterState::finalize() {
  if (!stage_running_) return verdict_;
  stage_running_ = false;
  std::sort(stage_results_.begin(), stage_results_.end(),
            [](const RankResult& a, const RankResult& b) { return a.rank < b.rank; });
  StageView sv;
  sv.world_size = cfg_.world_size;
  sv.members = &report_.members;
  sv.results = stage_results_;
  // Members that never reported are still connected (a lost one reports nothing).
  std::vector<std::string> silent;
  for (size_t i = 0; i < reported_.size(); ++i) {
    if (reported_[i]) continue;
    const Record& rec = report_.members[i].record;
    if (silent.size() < kSilentLogged) silent.push_back(member_label(rec));
    for (long k = rec.rank; k <= rec.last_rank(); ++k)
      sv.pending.push_back(k);
  }
  if (results_expected_ > 0) {
    cfg_.log(fmt::format("{} sent no GPU stage result by the stage's end, still connected{}: {}",
                         plural(size_t(results_expected_), "member", "members"),
                         size_t(results_expected_) > silent.size() ? ", among them" : "",
                         format_list(silent, kSilentLogged)));
  }
  std::sort(sv.pending.begin(), sv.pending.end());
  sv.stage_ms = stage_ms_;
  sv.min_busbw_gbps = cfg_.min_busbw_gbps;
  auto found = stage_checks(sv);
  // The stage's findings follow the rendezvous's (its warnings after theirs); its
  // errors lead, since the stage ran only when the rendezvous found none.
  report_.findings.insert(report_.findings.end(), found.begin(), found.end());
  std::stable_partition(report_.findings.begin(), report_.findings.end(),
                        [](const Finding& f) { return f.is_error(); });
  report_signal();
  report_.stage_results = std::move(stage_results_);
  double init_max = 0;
  double ar_max = 0;
  double busbw = 0;
  double algbw = 0;
  for (const RankResult& r : report_.stage_results) {
    init_max = std::max(init_max, r.init_ms);
    ar_max = std::max(ar_max, r.allreduce_us);
    if (r.bandwidth_bytes > 0) busbw = r.busbw_gbps;
    if (r.bandwidth_bytes > 0) algbw = r.algbw_gbps;
  }
  std::string bandwidth =
      busbw > 0   ? fmt::format(", bus bandwidth {:.1f} GB/s", busbw)
      : algbw > 0 ? fmt::format(", algbw {:.1f} GB/s (one rank: bus bandwidth is undefined{})",
                                algbw, cfg_.min_busbw_gbps > 0 ? ", --min-busbw not applied" : "")
                  : std::string();
  // Hosts that chose different networks are a finding of the stage, not its failure.
  bool failed = std::any_of(found.begin(), found.end(),
                            [](const Finding& f) { return f.id != FindingId::kNcclNetMismatch; });
  report_.gpu_stage =
      // Every algorithm's connections: the stage's init runs with NCCL_RUNTIME_CONNECT=0
      // (gpu/dl_stage.cc kZeroed).
      !failed ? fmt::format(
                    "passed: NCCL init {} (slowest rank, every algorithm connected), "
                    "all-reduce {:.0f} µs{}",
                    format_seconds(init_max), ar_max, bandwidth)
              : "failed";
  verdict_ = verdict_base();
  cfg_.log(fmt::format(
      "GPU stage over at +{}: {}", format_seconds(now_ms()),
      verdict_.exit_code == 0 ? "PASS" : fmt::format("FAIL (exit {})", verdict_.exit_code)));
  return verdict_;
}

}  // namespace rankcheck
