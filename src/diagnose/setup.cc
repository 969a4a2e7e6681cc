// The setup errors (a world size the ranks disagree on, a rank two processes were
// given, a launch that failed, ...): grouped over the lines that say them, given the
// process a launcher's record names when no prefix does, and reported first,
// initiating wherever they appear (Knowledge::conclude, conclude.cc).

#include <fmt/format.h>

#include "base/text.h"
#include "diagnose/builder.h"
#include "diagnose/internal.h"

namespace rankcheck::diagnose {
namespace {

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
      if (catalogue()[g.first.row].name.starts_with("rank_claim"))
        return fmt::format(
            "{}: the launcher started more processes than ranks, or gave them "
            "the same RANK",
            g.detail);
      return fmt::format("two processes claimed {} in NCCL's bootstrap: {}", who, g.detail);
    case FindingId::kNcclInterfaceLoopback:
      if (catalogue()[g.first.row].name == "connect_debian_hostname")
        return fmt::format(
            "{} connected to 127.0.1.1, the loopback address Debian's and Ubuntu's /etc/hosts "
            "give a machine's own name: a peer gave its host name as its address ({}); map "
            "the name to the address between the hosts in /etc/hosts, or name the interface "
            "(GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME)",
            who, g.detail);
      return fmt::format("{}: {}", who, g.detail);
    case FindingId::kWorldSizeMismatch:
      return fmt::format("the ranks disagree on the world size: {}", g.detail);
    case FindingId::kNodeLost:
      if (catalogue()[g.first.row].name.starts_with("ray_"))
        return fmt::format("Ray's {} on {} died{}; the node is lost with every worker on it",
                           catalogue()[g.first.row].literal, g.hosts.empty() ? "a node" : who,
                           g.detail.empty() ? std::string() : ": " + g.detail);
      return fmt::format("{}: {}", who, g.detail);
    case FindingId::kLaunchFailed:
      // slurmstepd's execve() of the task (its detail the program): the program is not
      // on that node, or not on its PATH, or not executable there.
      if (catalogue()[g.first.row].literal.find("execve(): ") != std::string_view::npos)
        return fmt::format(
            "{}: the launcher could not start '{}' there (execve failed): it is not on "
            "that node, not on its PATH, or not executable",
            who, g.detail);
      return fmt::format("{}: {}", who, g.detail);
    default:
      return fmt::format("{}: {}", who, g.detail);
  }
}

}  // namespace

// 1. Ranks that waited for different world sizes are a setup error of their own,
// unless a line said so already.
void group_world_sizes(Knowledge& k) {
  if (k.world_by_rank.size() <= 1) return;
  std::map<long, std::vector<long>> by_world;
  for (auto [rank, w] : k.world_by_rank)
    by_world[w].push_back(rank);
  if (by_world.size() <= 1 || k.setup.count(FindingId::kWorldSizeMismatch)) return;
  std::vector<std::string> parts;
  for (const auto& [w, ranks] : by_world)
    parts.push_back(fmt::format("{} waited for {}", ranks_label(ranks), w));
  Group& g = k.setup[FindingId::kWorldSizeMismatch];
  g.id = FindingId::kWorldSizeMismatch;
  g.detail = format_list(parts, 8);
  g.first = *k.absent_first;
  g.count = 1;
  for (auto [rank, w] : k.world_by_rank)
    g.ranks.insert(rank);
}

// 1. A rank two processes said they were, as they started, before anything failed:
// the launcher gave it twice (two jobs in one step, a --ntasks that does not match
// the devices, an MPI library not the launcher's). One process says it once; with
// pids, two pids. Claims after a failure are a restart's, not a duplicate.
void group_rank_claims(Knowledge& k) {
  if (k.setup.count(FindingId::kDuplicateRank)) return;
  std::set<long> twice;
  std::optional<Note> first;
  size_t most = 0;
  for (const auto& [key, c] : k.claims) {
    // Before the first failure only; one per pid where the lines gave pids.
    std::set<long> pids;
    size_t n = 0;
    const Note* earliest = nullptr;
    for (const auto& claim : c) {
      if (k.first_failure && !earlier(claim.note, *k.first_failure)) continue;
      if (claim.pid >= 0 && !pids.insert(claim.pid).second) continue;
      ++n;
      if (!earliest || earlier(claim.note, *earliest)) earliest = &claim.note;
    }
    if (n < 2) continue;
    twice.insert(key.second);
    most = std::max(most, n);
    if (!first || earlier(*earliest, *first)) first = *earliest;
  }
  if (twice.empty()) return;
  Group& g = k.setup[FindingId::kDuplicateRank];
  g.id = FindingId::kDuplicateRank;
  g.detail =
      twice.size() == 1
          ? fmt::format("{} was started by {} processes", ranks_text(twice), most)
          : fmt::format("{} were each started by up to {} processes", ranks_text(twice), most);
  g.first = *first;
  g.count = 1;
  g.ranks = twice;
  g.evidence.push_back(first->evidence);
}

// 1. A setup error no prefix attributes (a launch's "*** An error occurred in MPI_Init",
// a script's argparse refusal) is the one process that died in the same file without
// an error of its own, when there is exactly one: the launcher's record names its rank
// and host ("srun: error: hpl: task 0: Exited with exit code 1").
void attribute_setup_errors(Knowledge& k) {
  for (auto& [id, g] : k.setup) {
    if (!g.ranks.empty() || !g.hosts.empty()) continue;
    const Evidence& at = g.first.evidence;
    const Proc* lone = nullptr;
    int quiet = 0;
    for (const auto& [key, p] : k.procs) {
      // Its own error, if any, is this one (placed there from the file's unattributed
      // lines, merge.cc).
      if (!p.died_silent(&at) || p.died->evidence.file != at.file) continue;
      lone = &p;
      ++quiet;
    }
    if (quiet != 1) continue;
    if (lone->rank >= 0) g.ranks.insert(lone->rank);
    if (!lone->host.empty()) g.hosts.insert(lone->host);
  }
}

// 1. The setup errors: initiating wherever they appear.
void add_setup_errors(Builder& b, const std::map<FindingId, Group>& setup) {
  for (const auto& [id, g] : setup) {
    DiagFinding& f = b.add(id, setup_message(g), true, g.first);
    attach(f, g.ranks, g.hosts, g.evidence);
  }
}

}  // namespace rankcheck::diagnose
