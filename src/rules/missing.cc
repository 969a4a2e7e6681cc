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

  // Without LOCAL_WORLD_SIZE, members on one host whose LOCAL_RANK equals their
  // RANK say that the job runs on that host alone (torchrun --standalone, a shell
  // loop): a missing rank belongs there too.
  void infer_single_host(const JobView& v) {
    bool one_host = !v.members.empty();
    for (const Member& m : v.members) {
      const Record& r = m.record;
      one_host = one_host && r.nranks == 1 && r.local_rank == r.rank &&
                 r.host == v.members.front().record.host;
    }
    if (one_host) single_host_ = v.members.front().record.host;
  }
};

// The part of a host name before its first dot. Slurm names nodes by their short
// name while gethostname() may give the FQDN (or the other way round).
std::string_view short_name(std::string_view host) {
  return host.substr(0, host.find('.'));
}

}  // namespace

void check_missing(const CheckContext& ctx, std::vector<Finding>& out) {
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
  // Ranks explained by another finding are not reported twice.
  for (const Departure& d : v.departed)
    mark(d.record);
  for (const Refusal& r : v.refused) {
    bool explained = r.kind == RefusalKind::kForeignJob || r.kind == RefusalKind::kAuth;
    if (explained && r.record) mark(*r.record);
  }
  std::vector<long> missing;
  for (long k = 0; k < world; ++k) {
    if (!accounted[size_t(k)]) missing.push_back(k);
  }
  if (missing.empty()) return;

  std::map<std::string_view, const Records*> sent;        // host -> members that joined from it
  std::map<std::string_view, std::string_view> by_short;  // short name -> host; "": several
  for (const auto& [host, rs] : ctx.hosts) {
    sent[host] = &rs;
    auto [it, fresh] = by_short.try_emplace(short_name(host), host);
    if (!fresh && it->second != host) it->second = {};
  }
  // The name members joined under for a host the layout names: the same name, or the
  // one with the same short name ("gpu-02" in the node list, "gpu-02.example.com").
  auto joined_as = [&](std::string_view host) -> std::string_view {
    if (host.empty() || sent.count(host)) return host;
    auto it = by_short.find(short_name(host));
    return it == by_short.end() || it->second.empty() ? host : it->second;
  };
  Layout layout(v, world);
  // Ranks at or past the launcher's task count were never processes at all: no
  // node failed to start them (WORLD_SIZE=8 exported over a step of 4 tasks).
  std::vector<long> never_started;
  std::map<std::string_view, std::vector<std::pair<long, long>>> by_host;  // (rank, local)
  for (long k : missing) {
    long local = -1;
    if (layout.launcher_tasks() > 0 && layout.launcher_tasks() < world &&
        k >= layout.launcher_tasks()) {
      never_started.push_back(k);
      continue;
    }
    by_host[joined_as(layout.host_of(k, &local))].push_back({k, local});
  }

  // Members that claimed a rank twice or out of range may be the missing ones.
  long misplaced = 0;
  std::map<long, int> claims;
  for (const Member& m : v.members) {
    if (!m.record.in_range() || m.record.world_size != world) misplaced += m.record.nranks;
    for (long k = m.record.rank; k <= m.record.last_rank(); ++k) {
      if (++claims[k] > 1) ++misplaced;
    }
  }
  std::string also =
      misplaced > 0 ? fmt::format(
                          "; {} claimed a rank twice or out of range (see the findings above): the "
                          "missing ranks were probably given the wrong RANK",
                          plural(size_t(misplaced), "member", "members"))
                    : std::string();
  std::string reach = fmt::format("{}:{}", printable(v.master_addr), v.master_port);
  const char* verb = v.timed_out ? "never joined" : "did not join";
  bool over_mpi = v.master_addr == kMpiMasterAddr;

  if (!never_started.empty()) {
    auto nodes = expand_hostlist(layout.launcher_nodes());
    size_t node_count = nodes ? nodes->size() : 0;
    Finding f = make_finding(
        FindingId::kMissingRank,
        fmt::format("{} {}: the launcher started {} on {} ({}), for a world size of {}",
                    ranks_word(never_started), verb,
                    plural(size_t(layout.launcher_tasks()), "process", "processes"),
                    plural(node_count, "node", "nodes"), printable(layout.launcher_nodes(), 80),
                    world),
        fmt::format("nothing started {}: launch {} processes (srun --ntasks={}), or drop the "
                    "WORLD_SIZE exported to every process so that the launcher's count is used{}",
                    format_ranks(never_started), world, world, also));
    f.ranks = never_started;
    out.push_back(std::move(f));
  }
  std::vector<std::pair<std::string, std::vector<long>>> whole_hosts;
  for (const auto& [host, items] : by_host) {
    std::vector<long> ranks;
    for (const auto& item : items)
      ranks.push_back(item.first);
    Finding f = make_finding(FindingId::kMissingRank, "");
    f.ranks = ranks;
    if (over_mpi) {
      // Every process of the MPI world was gathered: the missing ranks were never
      // processes at all, whatever the hosts.
      f.message = fmt::format("{} {}: the MPI world has {} processes, the job's world size is {}",
                              ranks_word(ranks), verb, v.members.size(), world);
      f.hint = fmt::format(
          "start as many processes as the world size (mpirun -np {}), or drop the WORLD_SIZE "
          "given to every process (-x WORLD_SIZE){}",
          world, also);
    } else if (host.empty()) {
      long per_node = layout.ranks_per_node();
      bool whole_nodes =
          per_node > 0 && ranks.size() % size_t(per_node) == 0 && ranks.front() % per_node == 0;
      for (size_t i = 1; whole_nodes && i < ranks.size(); ++i) {
        whole_nodes = ranks[i] == ranks[i - 1] + 1 || ranks[i] % per_node == 0;
      }
      f.message = fmt::format(
          "{} {}{}", ranks_word(ranks), verb,
          whole_nodes
              ? fmt::format(": {} of {} ranks, as if {} never started",
                            ranks.size() == size_t(per_node) ? "a whole node" : "whole nodes",
                            per_node,
                            ranks.size() == size_t(per_node)
                                ? fmt::format("node {}", ranks.front() / per_node)
                                : std::string("those nodes"))
              : std::string());
      f.hint = fmt::format(
          "no member names their host: check that those processes were "
          "started, and that their hosts resolve and reach {}{}",
          reach, also);
    } else if (sent.count(host)) {
      std::vector<long> got = ranks_of(*sent[host]);
      std::string locals;
      if (items.size() <= 4 && items.front().second >= 0) {
        for (const auto& item : items) {
          locals += fmt::format("{}{}", locals.empty() ? ", local rank " : ",", item.second);
        }
      }
      f.message = fmt::format("{} {} (expected on {}{}): {} sent {} but not {}", ranks_word(ranks),
                              verb, printable(host), locals, printable(host), ranks_word(got),
                              format_ranks(ranks));
      f.hint = fmt::format(
          "the process for {} on {} was not started or died early: compare the "
          "launcher's task count on {} with --ntasks-per-node / "
          "--nproc-per-node, and check its log{}",
          ranks.size() == 1 ? "that rank" : "those ranks", printable(host), printable(host), also);
      f.hosts = {std::string(host)};
    } else {
      whole_hosts.emplace_back(host, ranks);
      continue;
    }
    out.push_back(std::move(f));
  }
  // A host that sent nothing is one finding; many such hosts share one.
  auto host_hint = [&](const std::string& hosts) {
    return fmt::format(
        "{} did not start the job, or cannot reach the master at {}: check that "
        "it is up, resolves MASTER_ADDR and reaches that port{}",
        hosts, reach, also);
  };
  if (whole_hosts.size() <= 4) {
    for (const auto& [host, ranks] : whole_hosts) {
      Finding f =
          make_finding(FindingId::kMissingRank,
                       fmt::format("{} {}: all {} of its ranks ({}) are missing", printable(host),
                                   verb, ranks.size(), format_ranks(ranks)),
                       host_hint(printable(host)));
      f.ranks = ranks;
      f.hosts = {std::string(host)};
      out.push_back(std::move(f));
    }
  } else {
    Finding f = make_finding(FindingId::kMissingRank, "");
    std::vector<std::string> parts;
    for (const auto& [host, ranks] : whole_hosts) {
      f.ranks.insert(f.ranks.end(), ranks.begin(), ranks.end());
      f.hosts.push_back(host);
      parts.push_back(fmt::format("{} ({})", host, format_ranks(ranks)));
    }
    std::sort(f.ranks.begin(), f.ranks.end());
    f.message = fmt::format("{} hosts {}, with all their ranks: {}", whole_hosts.size(), verb,
                            format_list(parts, 6));
    f.hint = host_hint("those hosts");
    out.push_back(std::move(f));
  }
}

}  // namespace rankcheck
