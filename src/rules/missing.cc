// Missing ranks, and where each was expected: the launcher's node list when it
// gives one, else the blocks of consecutive ranks the members of each host hold.

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "base/hostlist.h"
#include "base/text.h"
#include "rules/context.h"

namespace rankcheck {
namespace {

// Where a missing rank was expected to run.
class Layout {
 public:
  explicit Layout(const JobView& v, long world) {
    // The launcher's node list says it outright (Slurm).
    for (const Member& m : v.members) {
      const Record& r = m.record;
      if (r.node_list.empty() || r.tasks_per_node.empty()) continue;
      auto tasks = expand_tasks_per_node(r.tasks_per_node);
      if (!tasks) break;
      long total = 0;
      for (int t : *tasks)
        total += t;
      launcher_tasks_ = total;
      launcher_nodes_ = r.node_list;
      if (total != world) break;  // not this job's layout: expand nothing more
      auto hosts = expand_hostlist(r.node_list);
      if (!hosts || hosts->size() != tasks->size()) break;
      auto node_of = node_of_each_rank(*tasks, static_cast<Distribution>(r.distribution));
      if (static_cast<long>(node_of.size()) != world) break;
      node_of_rank_ = std::move(node_of);  // an index per rank, not a copy of its host
      nodes_ = std::move(*hosts);
      return;
    }
    // Otherwise the members of a host tell it: ranks base..base+lws-1 with
    // base = rank - local_rank (torchrun and srun --distribution=block). Not when a
    // launcher dealt ranks some other way (Slurm's plane, arbitrary): a node's ranks
    // are then not consecutive, and neither are whole nodes' worth of missing ranks.
    bool lws_agree = true;
    for (const Member& m : v.members) {
      const Record& r = m.record;
      if (r.distribution == static_cast<uint8_t>(Distribution::kUnknown)) {
        blocks_.clear();
        lws_ = 0;
        return;
      }
      if (r.local_rank < 0 || r.local_world_size < 1 || r.local_rank >= r.local_world_size) {
        continue;
      }
      blocks_.push_back({r.rank - r.local_rank, r.local_world_size, r.host});
      if (lws_ == 0) lws_ = r.local_world_size;
      lws_agree = lws_agree && r.local_world_size == lws_;
    }
    if (!lws_agree) lws_ = 0;
    std::sort(blocks_.begin(), blocks_.end(),
              [](const Block& a, const Block& b) { return a.base < b.base; });
    if (!blocks_consistent()) {
      // The members contradict consecutive blocks (mpirun --map-by node deals ranks
      // round-robin, and says so nowhere): no guess is better than a wrong host.
      blocks_.clear();
      lws_ = 0;
      return;
    }
    if (blocks_.empty()) infer_single_host(v);
  }

  /// The expected host, or "" when nothing tells it; `local` gets the local rank.
  std::string_view host_of(long rank, long* local) const {
    *local = -1;
    if (!single_host_.empty()) {
      *local = rank;
      return single_host_;
    }
    if (!node_of_rank_.empty()) {
      if (rank < 0 || rank >= long(node_of_rank_.size())) return {};
      return nodes_[size_t(node_of_rank_[size_t(rank)])];
    }
    auto it = std::upper_bound(blocks_.begin(), blocks_.end(), rank,
                               [](long k, const Block& b) { return k < b.base; });
    if (it == blocks_.begin()) return {};
    --it;
    if (rank >= it->base + it->size) return {};
    *local = rank - it->base;
    return it->host;
  }
  /// Ranks per node when the members agree on it (and ranks fill nodes in order), else 0.
  long ranks_per_node() const { return lws_; }
  /// The processes the launcher started (Slurm's tasks of the step), or 0 when it
  /// does not say; its node list.
  long launcher_tasks() const { return launcher_tasks_; }
  const std::string& launcher_nodes() const { return launcher_nodes_; }

 private:
  struct Block {
    long base;
    long size;
    std::string_view host;  // the member's record, which outlives the layout
  };
  std::vector<int> node_of_rank_;   // index into nodes_, per rank
  std::vector<std::string> nodes_;  // the launcher's node list, expanded
  std::vector<Block> blocks_;
  long lws_ = 0;
  std::string_view single_host_;  // a job on one host, told by LOCAL_RANK == RANK
  long launcher_tasks_ = 0;
  std::string launcher_nodes_;

  // Blocks, sorted by base, are one per host and never overlap: members of one block
  // share its base and host, and the next block starts past its end.
  bool blocks_consistent() const {
    for (size_t i = 1; i < blocks_.size(); ++i) {
      const Block& a = blocks_[i - 1];
      const Block& b = blocks_[i];
      bool same = a.base == b.base && a.size == b.size && a.host == b.host;
      if (!same && b.base < a.base + a.size) return false;
    }
    return true;
  }

  // Without LOCAL_WORLD_SIZE, members on one host whose LOCAL_RANK equals their
  // RANK say that the job runs on that host alone (torchrun --standalone, a shell
  // loop): a missing rank belongs there too. Rank 0 at local rank 0 alone says
  // nothing (it is so on every layout): a rank above 0 must show it.
  void infer_single_host(const JobView& v) {
    bool one_host = !v.members.empty();
    bool shown = false;
    for (const Member& m : v.members) {
      const Record& r = m.record;
      one_host = one_host && r.nranks == 1 && r.local_rank == r.rank &&
                 r.host == v.members.front().record.host;
      shown = shown || r.rank > 0;
    }
    if (one_host && shown) single_host_ = v.members.front().record.host;
  }
};

// The part of a host name before its first dot. Slurm names nodes by their short
// name while gethostname() may give the FQDN (or the other way round).
std::string_view short_name(std::string_view host) {
  return host.substr(0, host.find('.'));
}

// The ranks no member claims, in order, less those a departure explains: those
// are not reported twice. A refused process (another job's, one without the
// token) explains nothing: what it claims is unverified, and a stranger would
// otherwise choose which host is blamed (the refusal's finding names it as a
// possible cause instead).
std::vector<long> unexplained_missing(const CheckContext& ctx) {
  const JobView& v = ctx.view;
  long world = ctx.expected_world;
  std::vector<char> accounted(static_cast<size_t>(world), 0);
  for (long k = 0; k < world; ++k)
    accounted[size_t(k)] = ctx.claims[size_t(k)] > 0;
  auto mark = [&](const Record& r) {
    for (long k = std::max(0L, long(r.rank)); k <= r.last_rank() && k < world; ++k) {
      accounted[size_t(k)] = 1;
    }
  };
  for (const Departure& d : v.departed)
    mark(d.record);
  std::vector<long> missing;
  for (long k = 0; k < world; ++k) {
    if (!accounted[size_t(k)]) missing.push_back(k);
  }
  return missing;
}

// The hosts members joined from, under the names they joined with.
class JoinedHosts {
 public:
  explicit JoinedHosts(const CheckContext& ctx) {
    for (const auto& [host, rs] : ctx.hosts) {
      sent_[host] = &rs;
      auto [it, fresh] = by_short_.try_emplace(short_name(host), host);
      if (!fresh && it->second != host) it->second = {};
    }
  }
  /// The members that joined from `host`, or nullptr when none did.
  const Records* sent(std::string_view host) const {
    auto it = sent_.find(host);
    return it == sent_.end() ? nullptr : it->second;
  }
  /// The name members joined under for a host the layout names: the same name, or
  /// the one with the same short name ("gpu-02" in the node list,
  /// "gpu-02.example.com").
  std::string_view joined_as(std::string_view host) const {
    if (host.empty() || sent_.count(host)) return host;
    auto it = by_short_.find(short_name(host));
    return it == by_short_.end() || it->second.empty() ? host : it->second;
  }

 private:
  std::map<std::string_view, const Records*> sent_;        // host -> members that joined from it
  std::map<std::string_view, std::string_view> by_short_;  // short name -> host; "": several
};

// Where the missing ranks were expected: past the launcher's processes, or on a
// host ("" when nothing tells which).
struct Expected {
  std::vector<long> never_started;
  std::map<std::string_view, std::vector<std::pair<long, long>>> by_host;  // (rank, local)
};

Expected place_missing(const std::vector<long>& missing, const Layout& layout,
                       const JoinedHosts& joined, long world) {
  Expected e;
  // Ranks at or past the launcher's task count were never processes at all: no
  // node failed to start them (WORLD_SIZE=8 exported over a step of 4 tasks).
  for (long k : missing) {
    long local = -1;
    if (layout.launcher_tasks() > 0 && layout.launcher_tasks() < world &&
        k >= layout.launcher_tasks()) {
      e.never_started.push_back(k);
      continue;
    }
    e.by_host[joined.joined_as(layout.host_of(k, &local))].push_back({k, local});
  }
  return e;
}

// What every missing-rank finding of one decision says alike.
struct Wording {
  long world = 0;
  size_t mpi_processes = 0;  // the members, when the world was gathered over MPI
  bool over_mpi = false;
  const char* verb = "";
  std::string reach;      // the master's address
  std::string also;       // the members that may be the missing ones, or ""
  std::string elsewhere;  // the missing process may be waiting for another master
};

// Refused processes that claim a missing rank: another job's, or without the token.
std::string refused_claims(const CheckContext& ctx) {
  size_t foreign = 0, auth = 0;
  for (const Refusal& r : ctx.view.refused) {
    if (!r.record || (r.kind != RefusalKind::kForeignJob && r.kind != RefusalKind::kAuth)) continue;
    bool claims_missing = false;
    for (long k = std::max(0L, long(r.record->rank)); k <= r.record->last_rank(); ++k)
      claims_missing = claims_missing || (k < ctx.expected_world && !ctx.present(k));
    if (claims_missing) ++(r.kind == RefusalKind::kForeignJob ? foreign : auth);
  }
  if (foreign + auth == 0) return "";
  return fmt::format(
      "; {} claiming a missing rank {} refused ({}; see below): if {} this job's, give it the "
      "job's {}",
      plural(foreign + auth, "process", "processes"), foreign + auth == 1 ? "was" : "were",
      foreign > 0 && auth > 0 ? "another job id, or no job token"
      : foreign > 0           ? "another job id"
                              : "without this job's token",
      foreign + auth == 1 ? "it is" : "they are",
      foreign > 0 && auth > 0 ? "id and token"
      : foreign > 0           ? "id"
                              : "token");
}

Wording wording(const CheckContext& ctx) {
  const JobView& v = ctx.view;
  Wording w;
  w.world = ctx.expected_world;
  w.mpi_processes = v.members.size();
  w.over_mpi = v.transport == Transport::kMpi;
  w.verb = v.timed_out ? "never joined" : "did not join";
  w.reach = fmt::format("{}:{}", printable(v.master_addr), v.master_port);
  w.elsewhere = fmt::format(
      "; a process given another MASTER_ADDR or MASTER_PORT than {} waits for a master that is "
      "not there: compare them in its log",
      w.reach);
  // Members that claimed a rank twice or out of range may be the missing ones; one
  // that only says another world size, with its rank in this one, is not (the
  // world-size finding names it).
  long misplaced = 0;
  std::map<long, int> claims;
  for (const Member& m : v.members) {
    const Record& r = m.record;
    bool outside = r.rank < 0 || r.last_rank() >= w.world || !r.in_range();
    if (outside) misplaced += r.nranks;
    for (long k = r.rank; k <= r.last_rank(); ++k) {
      if (++claims[k] > 1 && !outside) ++misplaced;
    }
  }
  if (misplaced > 0) {
    w.also = fmt::format(
        "; {} claimed a rank twice or out of range (see the findings above): the "
        "missing ranks were probably given the wrong RANK",
        plural(size_t(misplaced), "member", "members"));
  }
  w.also += refused_claims(ctx);
  return w;
}

Finding never_started_finding(const std::vector<long>& ranks, const Layout& layout,
                              const Wording& w) {
  auto nodes = expand_hostlist(layout.launcher_nodes());
  size_t node_count = nodes ? nodes->size() : 0;
  Finding f = make_finding(
      FindingId::kMissingRank,
      fmt::format(
          "{} {}: the launcher started {} on {} ({}), for a world size of {}", ranks_word(ranks),
          w.verb, plural(size_t(layout.launcher_tasks()), "process", "processes"),
          plural(node_count, "node", "nodes"), printable(layout.launcher_nodes(), 80), w.world),
      fmt::format("nothing started {}: launch {} processes (srun --ntasks={}), or drop the "
                  "WORLD_SIZE exported to every process so that the launcher's count is used{}",
                  format_ranks(ranks), w.world, w.world, w.also));
  f.ranks = ranks;
  return f;
}

// Every process of the MPI world was gathered: the missing ranks were never
// processes at all, whatever the hosts.
Finding mpi_world_finding(const std::vector<long>& ranks, const Wording& w) {
  Finding f = make_finding(FindingId::kMissingRank, "");
  f.ranks = ranks;
  if (long(w.mpi_processes) >= w.world) {
    // As many processes as ranks: the count is right, and some claimed another's rank
    // (a RANK given to every process overrides Open MPI's own).
    f.message = fmt::format(
        "{} {}, though the MPI world has {} processes for a world size of {}: some of them "
        "claimed another rank",
        ranks_word(ranks), w.verb, w.mpi_processes, w.world);
    f.fix = fmt::format(
        "drop the RANK (or SLURM_PROCID, PMI_RANK) given to every process (mpirun -x RANK=...): "
        "each process then takes its rank from MPI{}",
        w.also);
    return f;
  }
  f.message = fmt::format("{} {}: the MPI world has {} processes, the job's world size is {}",
                          ranks_word(ranks), w.verb, w.mpi_processes, w.world);
  f.fix = fmt::format(
      "start as many processes as the world size (mpirun -np {}), or drop the WORLD_SIZE "
      "given to every process (-x WORLD_SIZE){}",
      w.world, w.also);
  return f;
}

// No member names the host of these ranks; whole nodes' worth of them says so.
Finding unnamed_host_finding(const std::vector<long>& ranks, long per_node, const Wording& w) {
  Finding f = make_finding(FindingId::kMissingRank, "");
  f.ranks = ranks;
  bool whole_nodes =
      per_node > 0 && ranks.size() % size_t(per_node) == 0 && ranks.front() % per_node == 0;
  for (size_t i = 1; whole_nodes && i < ranks.size(); ++i) {
    whole_nodes = ranks[i] == ranks[i - 1] + 1 || ranks[i] % per_node == 0;
  }
  f.message = fmt::format(
      "{} {}{}", ranks_word(ranks), w.verb,
      whole_nodes ? fmt::format(": {} of {}, as if {} never started",
                                ranks.size() == size_t(per_node) ? "a whole node" : "whole nodes",
                                plural(size_t(per_node), "rank", "ranks"),
                                ranks.size() == size_t(per_node)
                                    ? fmt::format("node {}", ranks.front() / per_node)
                                    : std::string("those nodes"))
                  : std::string());
  f.fix = fmt::format(
      "no member names their host: check that those processes were "
      "started, and that their hosts resolve and reach {}{}",
      w.reach, w.also);
  return f;
}

// A host that sent some of its ranks but not these.
Finding partial_host_finding(std::string_view host, const std::vector<std::pair<long, long>>& items,
                             const std::vector<long>& ranks, const Records& sent,
                             const Wording& w) {
  Finding f = make_finding(FindingId::kMissingRank, "");
  f.ranks = ranks;
  std::vector<long> got = ranks_of(sent);
  std::string locals;
  if (items.size() <= 4 && items.front().second >= 0) {
    for (const auto& item : items) {
      locals += fmt::format("{}{}", locals.empty() ? ", local rank " : ",", item.second);
    }
  }
  f.message =
      fmt::format("{} {} (expected on {}{}): {} sent {} but not {}", ranks_word(ranks), w.verb,
                  printable(host), locals, printable(host), ranks_word(got), format_ranks(ranks));
  f.fix = fmt::format(
      "the process for {} on {} was not started or died early: compare the "
      "launcher's task count on {} with --ntasks-per-node / "
      "--nproc-per-node, and check its log{}{}",
      ranks.size() == 1 ? "that rank" : "those ranks", printable(host), printable(host),
      w.elsewhere, w.also);
  f.hosts = {std::string(host)};
  return f;
}

using WholeHosts = std::vector<std::pair<std::string, std::vector<long>>>;

// The findings of the ranks expected on hosts, in host order; the hosts that sent
// nothing at all are left in `whole_hosts`, to be reported together.
void host_findings(const Expected& expected, const JoinedHosts& joined, const Layout& layout,
                   const Wording& w, std::vector<Finding>& out, WholeHosts& whole_hosts) {
  for (const auto& [host, items] : expected.by_host) {
    std::vector<long> ranks;
    for (const auto& item : items)
      ranks.push_back(item.first);
    if (w.over_mpi) {
      out.push_back(mpi_world_finding(ranks, w));
    } else if (host.empty()) {
      out.push_back(unnamed_host_finding(ranks, layout.ranks_per_node(), w));
    } else if (const Records* sent = joined.sent(host)) {
      out.push_back(partial_host_finding(host, items, ranks, *sent, w));
    } else {
      whole_hosts.emplace_back(host, ranks);
    }
  }
}

// A host that sent nothing is one finding; many such hosts share one.
void whole_host_findings(const WholeHosts& whole_hosts, const Wording& w,
                         std::vector<Finding>& out) {
  auto host_hint = [&](const std::string& hosts) {
    return fmt::format(
        "{} did not start the job, or cannot reach the master at {}: check that "
        "it is up, resolves MASTER_ADDR and reaches that port{}{}",
        hosts, w.reach, w.elsewhere, w.also);
  };
  if (whole_hosts.size() <= 4) {
    for (const auto& [host, ranks] : whole_hosts) {
      Finding f =
          make_finding(FindingId::kMissingRank,
                       fmt::format("{} {}: all {} of its ranks ({}) are missing", printable(host),
                                   w.verb, ranks.size(), format_ranks(ranks)),
                       host_hint(printable(host)));
      f.ranks = ranks;
      f.hosts = {std::string(host)};
      out.push_back(std::move(f));
    }
    return;
  }
  Finding f = make_finding(FindingId::kMissingRank, "");
  std::vector<std::string> parts;
  for (const auto& [host, ranks] : whole_hosts) {
    f.ranks.insert(f.ranks.end(), ranks.begin(), ranks.end());
    f.hosts.push_back(host);
    parts.push_back(fmt::format("{} ({})", host, format_ranks(ranks)));
  }
  std::sort(f.ranks.begin(), f.ranks.end());
  f.message = fmt::format("{} hosts {}, with all their ranks: {}", whole_hosts.size(), w.verb,
                          format_list(parts, 6));
  f.fix = host_hint("those hosts");
  out.push_back(std::move(f));
}

}  // namespace

void check_missing(const CheckContext& ctx, std::vector<Finding>& out) {
  std::vector<long> missing = unexplained_missing(ctx);
  if (missing.empty()) return;
  JoinedHosts joined(ctx);
  Layout layout(ctx.view, ctx.expected_world);
  Expected expected = place_missing(missing, layout, joined, ctx.expected_world);
  Wording w = wording(ctx);
  if (!expected.never_started.empty()) {
    out.push_back(never_started_finding(expected.never_started, layout, w));
  }
  WholeHosts whole_hosts;
  host_findings(expected, joined, layout, w, out, whole_hosts);
  whole_host_findings(whole_hosts, w, out);
}

}  // namespace rankcheck
