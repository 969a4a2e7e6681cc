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
  long n = -1;  ///< processes (-1: not known)
  std::vector<std::string> hosts;
  long nodes = -1;     ///< nodes, where the logs say more than the hosts they name
  long nproc = -1;     ///< processes per node, where torchrun said
  std::string master;  ///< rank 0's host, or the store's the logs name ("" if neither)
  /// The store's port the logs name; else torchrun's default, which the job then used.
  std::string port = "29500";
};

// How many processes the job had, as far as the logs tell: the world size a line
// gave; else one more than the highest rank any line or finding names (a rank that
// never printed is still named by the others' findings), unless that is fewer than the
// hosts, or does not spread over them evenly: then only some ranks printed (-1).
long process_count(const Knowledge& k, const std::vector<DiagFinding>& findings, size_t hosts) {
  long said = std::max(k.world, k.most_joined);
  for (auto [rank, w] : k.world_by_rank)
    said = std::max(said, w);
  if (said > 0) return said;
  long n = -1;
  if (!k.ranks_seen.empty()) n = *k.ranks_seen.rbegin() + 1;
  for (const DiagFinding& f : findings) {
    for (long r : f.finding.ranks)
      n = std::max(n, r + 1);
  }
  long h = static_cast<long>(hosts);
  if (n <= 0 || (h > 1 && (n < h || n % h != 0))) return -1;
  return n;
}

// The processes on each host, when they share them evenly (0: they do not, or unknown).
long per_host(const JobShape& j) {
  long h = static_cast<long>(j.hosts.size());
  return j.n > 0 && h > 0 && j.n % h == 0 ? j.n / h : 0;
}

// The nodes of the job: what torchrun said, else the hosts named (0: not known).
long node_count(const JobShape& j) {
  return j.nodes > 0 ? j.nodes : static_cast<long>(j.hosts.size());
}

// Every word of a command is a value the logs gave, so that it runs as pasted; what
// they do not tell is left out and said in the note beside it.
Verify torchrun_command(const JobShape& j, const std::string& run) {
  std::string cmd = "torchrun --redirects 1 --tee 1";
  std::vector<std::string> missing;
  long nodes = node_count(j);
  long nproc = j.nproc > 0 ? j.nproc : nodes > 0 && j.n > 0 && j.n % nodes == 0 ? j.n / nodes : -1;
  bool single = nodes == 1 || (nodes == 0 && j.n > 0 && j.master.empty());
  if (single) {
    cmd += " --nnodes 1";
    if (j.n > 0) nproc = j.n;
  } else if (nodes > 1) {
    cmd += fmt::format(" --nnodes {}", nodes);
  } else {
    missing.push_back("--nnodes");
  }
  if (nproc > 0) {
    cmd += fmt::format(" --nproc_per_node {}", nproc);
  } else {
    missing.push_back("--nproc_per_node");
  }
  std::string master = single ? std::string("127.0.0.1") : j.master;
  if (!master.empty()) {
    cmd += fmt::format(" --master_addr {}", printable(master, 64));
  } else {
    missing.push_back("--master_addr (rank 0's host)");
  }
  cmd += fmt::format(" --master_port {} --no_python {}", j.port, run);
  std::string note;
  if (!missing.empty()) note = fmt::format("add the job's {}", format_list(missing, 4));
  if (!single) {
    std::string others = nodes == 2  ? std::string("1 on the other")
                         : nodes > 2 ? fmt::format("1 to {} on the others", nodes - 1)
                                     : std::string("1 and up, one per node, on the others");
    std::string node_rank =
        fmt::format("run it on every node, with --node_rank 0 on {} and {}",
                    master.empty() ? std::string("rank 0's host") : printable(master, 64), others);
    note = note.empty() ? node_rank : note + "; " + node_rank;
  }
  return {cmd, note};
}

// mpirun passes no MASTER_ADDR or MASTER_PORT (-x gives them).
Verify mpirun_command(const JobShape& j, const std::string& run) {
  std::string cmd = "mpirun";
  std::vector<std::string> missing;
  if (j.n > 0) {
    cmd += fmt::format(" -np {}", j.n);
  } else {
    missing.push_back("-np");
  }
  if (j.hosts.size() > 1 && per_host(j) > 0 && j.hosts.size() <= 16) {
    std::string list;
    for (const std::string& h : j.hosts)
      list += fmt::format("{}{}:{}", list.empty() ? "" : ",", printable(h, 64), per_host(j));
    cmd += " --host " + list;
  } else if (j.hosts.size() > 1) {
    missing.push_back(fmt::format("--host or --hostfile ({})", format_list(j.hosts, 4)));
  }
  std::string master = j.hosts.size() <= 1 ? std::string("127.0.0.1") : j.master;
  if (!master.empty()) {
    cmd += fmt::format(" -x MASTER_ADDR={}", printable(master, 64));
  } else {
    missing.push_back("-x MASTER_ADDR= with rank 0's host");
  }
  cmd += fmt::format(" -x MASTER_PORT={} {}", j.port, run);
  return {cmd, missing.empty() ? "" : fmt::format("add the job's {}", format_list(missing, 4))};
}

Verify command_for(const JobShape& j) {
  std::string run = "rankcheck run --timeout 120";
  if (j.launcher == "torchrun") return torchrun_command(j, run);
  if (j.launcher == "mpirun") return mpirun_command(j, run);
  if (j.launcher == "slurm") {
    if (j.n <= 0) return {"srun " + run, "with the training step's srun options"};
    std::string nodes = j.hosts.empty() ? "" : fmt::format("--nodes {} ", j.hosts.size());
    return {fmt::format("srun {}--ntasks {} {}", nodes, j.n, run), ""};
  }
  return {run, "in every process of the job, with the training job's environment"};
}

// The host of "cn1:29500" (or of "[fe80::1]:29500").
std::string endpoint_host(const std::string& endpoint) {
  if (endpoint.starts_with("[")) return endpoint.substr(1, endpoint.find(']') - 1);
  return endpoint.substr(0, endpoint.rfind(':'));
}

// The port of "cn1:29501", "" when there is none or it is not a number.
std::string endpoint_port(const std::string& endpoint) {
  auto colon = endpoint.rfind(':');
  if (colon == std::string::npos || (endpoint.starts_with("[") && colon < endpoint.find(']')))
    return "";
  std::string port = endpoint.substr(colon + 1);
  bool digits = !port.empty() && port.size() <= 5 &&
                std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
  return digits ? port : "";
}

}  // namespace

Verify verify_command(const Knowledge& k, const std::vector<DiagFinding>& findings,
                      const std::string& launcher) {
  JobShape j;
  j.launcher = launcher;
  j.hosts.assign(k.hosts_seen.begin(), k.hosts_seen.end());
  j.n = process_count(k, findings, j.hosts.size());
  j.nodes = k.torchrun.min_nodes > 0 && k.torchrun.min_nodes == k.torchrun.max_nodes
                ? k.torchrun.min_nodes
                : -1;
  j.nproc = k.torchrun.nproc;
  if (j.n <= 0 && j.nodes > 0 && j.nproc > 0) j.n = j.nodes * j.nproc;
  for (const auto& [key, p] : k.procs) {
    if (p.rank == 0 && !p.host.empty()) j.master = p.host;
  }
  // Else the store's host, as the agents' endpoint or a process that tried it names it.
  if (j.master.empty() && !k.torchrun.endpoint.empty())
    j.master = endpoint_host(k.torchrun.endpoint);
  if (std::string port = endpoint_port(k.torchrun.endpoint); !port.empty()) j.port = port;
  auto store = k.pointers.find(FindingId::kMasterUnreachable);
  if (j.master.empty() && store != k.pointers.end() && store->second.hosts.size() == 1)
    j.master = *store->second.hosts.begin();
  return command_for(j);
}

}  // namespace rankcheck::diagnose
