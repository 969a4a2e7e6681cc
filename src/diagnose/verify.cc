// The "verify with" command of a diagnosis: rankcheck under the job's own launcher,
// written so that it runs as given.

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/text.h"
#include "diagnose/internal.h"

namespace rankcheck::diagnose {
namespace {

// What the command is written from.
struct JobShape {
  std::string launcher;
  long n = -1;             ///< processes (-1: not known)
  std::string rank0_host;  ///< where rank 0 ran, if the logs say
  std::vector<std::string> hosts;
};

// How many processes the job had, as far as the logs tell: the world size a line
// gave, else one more than the highest rank any line or finding names (a rank that
// never printed is still named by the others' findings).
long process_count(const Knowledge& k, const std::vector<DiagFinding>& findings) {
  long n = std::max(k.world, k.most_joined);
  for (auto [rank, w] : k.world_by_rank)
    n = std::max(n, w);
  if (!k.ranks_seen.empty()) n = std::max(n, *k.ranks_seen.rbegin() + 1);
  for (const DiagFinding& f : findings) {
    for (long r : f.finding.ranks)
      n = std::max(n, r + 1);
  }
  return n > 0 ? n : -1;
}

// Where the check's rank 0 listens: this host when the job had one, else rank 0's.
std::string master_of(const JobShape& j) {
  if (j.hosts.size() <= 1) return "127.0.0.1";
  return j.rank0_host.empty() ? std::string("<rank 0's host>") : printable(j.rank0_host, 64);
}

// The processes on each host, when they share them evenly (0: they do not, or unknown).
long per_host(const JobShape& j) {
  long h = static_cast<long>(j.hosts.size());
  return j.n > 0 && h > 0 && j.n % h == 0 ? j.n / h : 0;
}

// mpirun's --host for the job's hosts, each with its share of the processes.
std::string mpirun_hosts(const JobShape& j) {
  if (j.hosts.size() <= 1) return "";
  if (per_host(j) == 0 || j.hosts.size() > 16) return "--host <the job's hosts> ";
  std::string list;
  for (const std::string& h : j.hosts)
    list += fmt::format("{}{}:{}", list.empty() ? "" : ",", printable(h, 64), per_host(j));
  return fmt::format("--host {} ", list);
}

// mpirun passes no MASTER_ADDR or MASTER_PORT (-x gives them); torch 1.13's
// torchrun starts only with --redirects 1 --tee 1 and the underscored options.
std::string command_for(const JobShape& j) {
  std::string run = "rankcheck run --timeout 120";
  std::string master = master_of(j);
  if (j.launcher == "torchrun") {
    std::string shape =
        j.hosts.size() <= 1 && j.n > 0 ? fmt::format("--nnodes 1 --nproc_per_node {}", j.n)
        : per_host(j) > 0 ? fmt::format("--nnodes {} --nproc_per_node {} --node_rank <this node's>",
                                        j.hosts.size(), per_host(j))
                          : std::string("<the job's --nnodes, --nproc_per_node, --node_rank>");
    return fmt::format(
        "torchrun --redirects 1 --tee 1 {} --master_addr {} --master_port 29500 --no_python {}",
        shape, master, run);
  }
  if (j.launcher == "slurm") {
    std::string nodes = j.hosts.empty() ? "" : fmt::format("--nodes {} ", j.hosts.size());
    return fmt::format("srun {} {}",
                       j.n > 0 ? fmt::format("{}--ntasks {}", nodes, j.n)
                               : std::string("<the training step's options>"),
                       run);
  }
  if (j.launcher == "mpirun") {
    return fmt::format("mpirun {} {}-x MASTER_ADDR={} -x MASTER_PORT=29500 {}",
                       j.n > 0 ? fmt::format("-np {}", j.n) : std::string("-np <N>"),
                       mpirun_hosts(j), master, run);
  }
  return run + " (in every process of the job, with the training job's environment)";
}

}  // namespace

std::string verify_command(const Knowledge& k, const std::vector<DiagFinding>& findings,
                           const std::string& launcher) {
  JobShape j;
  j.launcher = launcher;
  j.n = process_count(k, findings);
  j.hosts.assign(k.hosts_seen.begin(), k.hosts_seen.end());
  for (const auto& [key, p] : k.procs) {
    if (p.rank == 0 && !p.host.empty()) j.rank0_host = p.host;
  }
  return command_for(j);
}

}  // namespace rankcheck::diagnose
