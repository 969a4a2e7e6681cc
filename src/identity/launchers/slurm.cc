#include <algorithm>
#include <charconv>
#include <optional>

#include <fmt/format.h>

#include "identity/launchers/launchers.h"

namespace rankcheck::launcher {
namespace {

std::optional<long> number(const std::string* s) {
  long v = 0;
  if (s == nullptr || s->empty()) return std::nullopt;
  auto [p, ec] = std::from_chars(s->data(), s->data() + s->size(), v);
  if (ec != std::errc() || p != s->data() + s->size()) return std::nullopt;
  return v;
}

const std::string* step_tasks(const EnvMap& env) {
  const std::string* n = env_get(env, "SLURM_NTASKS");
  return n != nullptr ? n : env_get(env, "SLURM_NPROCS");
}

// MPICH's and Intel MPI's mpiexec (Hydra) start one proxy per node with srun; the
// ranks inherit the proxy's SLURM_PROCID (its node) and SLURM_NTASKS (the nodes).
// Under srun --mpi=pmi2 the PMI variables come from Slurm itself and agree with it.
bool hydra_under_slurm(const EnvMap& env) {
  if (env_get(env, "PMI_RANK") == nullptr) return false;
  auto pmi_size = number(env_get(env, "PMI_SIZE"));
  auto ntasks = number(step_tasks(env));
  return pmi_size && ntasks && *pmi_size != *ntasks;
}

// Whether the step runs more than one task on some node: then its tasks are ranks,
// whatever node-level variables they inherited from the job script.
bool several_tasks_per_node(const EnvMap& env) {
  const std::string* tasks = env_get(env, "SLURM_STEP_TASKS_PER_NODE");
  if (tasks == nullptr) tasks = env_get(env, "SLURM_TASKS_PER_NODE");
  if (tasks != nullptr) {
    if (auto counts = expand_tasks_per_node(*tasks)) {
      return std::any_of(counts->begin(), counts->end(), [](int c) { return c > 1; });
    }
  }
  const std::string* nodes = env_get(env, "SLURM_STEP_NUM_NODES");
  if (nodes == nullptr) nodes = env_get(env, "SLURM_NNODES");
  auto ntasks = number(step_tasks(env));
  auto nnodes = number(nodes);
  return ntasks && nnodes && *ntasks > *nnodes;
}

void scan(LauncherScan& s) {
  const EnvMap& env = s.env();
  Identity& id = s.identity();
  // The job id of an srun task carries its step: two steps of one allocation (a
  // check still running from the step before, and this one) are two jobs, and
  // refuse each other. A prolog or a batch script runs outside any step; under
  // mpirun or mpiexec, ranks on the first node inherit the batch script's
  // variables and the others a daemon step's: the job id alone.
  const std::string* job = env_get(env, "SLURM_JOB_ID");
  const std::string* step = env_get(env, "SLURM_STEP_ID");
  bool srun_task = env_get(env, "TORCHELASTIC_RUN_ID") == nullptr &&
                   env_get(env, "OMPI_COMM_WORLD_SIZE") == nullptr && !hydra_under_slurm(env);
  if (srun_task && job != nullptr && step != nullptr && !step->empty()) {
    s.add(Field::kJobId, "SLURM_JOB_ID.SLURM_STEP_ID", *job + "." + *step);
  } else {
    s.take(Field::kJobId, "SLURM_JOB_ID");
  }

  // Under torchrun or mpirun inside an allocation, the SLURM_* task variables
  // describe the step that started the launcher, not this process: they would
  // "disagree" with RANK on every worker. Only the job id is used then.
  if (env_get(env, "TORCHELASTIC_RUN_ID") != nullptr ||
      env_get(env, "OMPI_COMM_WORLD_SIZE") != nullptr) {
    if (env_get(env, "SLURM_PROCID") != nullptr) {
      id.notes.emplace_back(
          "SLURM_PROCID/SLURM_NTASKS describe the Slurm task that started torchrun or mpirun, "
          "not this process: not used");
    }
    return;
  }
  if (hydra_under_slurm(env)) {
    if (env_get(env, "SLURM_PROCID") != nullptr) {
      id.notes.push_back(fmt::format(
          "SLURM_PROCID/SLURM_NTASKS describe the Slurm task of mpiexec's per-node proxy "
          "(PMI_SIZE={} but SLURM_NTASKS={}), not this process: not used",
          *env_get(env, "PMI_SIZE"), *step_tasks(env)));
    }
    return;
  }

  // The step's node list: the default MASTER_ADDR, and where each rank runs.
  const std::string* list = env_get(env, "SLURM_STEP_NODELIST");
  if (list == nullptr) list = env_get(env, "SLURM_JOB_NODELIST");
  if (list == nullptr) list = env_get(env, "SLURM_NODELIST");
  if (list != nullptr) id.node_list = *list;

  // Node mode (one probe per node standing for its GPUs): the step runs one task per
  // node, and SLURM_PROCID/NTASKS/LOCALID count those tasks, not the job's ranks. An
  // NPROC_PER_NODE the job script exported for a later torchrun does not make a step
  // of several tasks per node one of nodes: those tasks are ranks.
  bool node_env =
      env_get(env, "NPROC_PER_NODE") != nullptr || env_get(env, "PET_NPROC_PER_NODE") != nullptr;
  if (env_get(env, "--nproc-per-node") != nullptr || (node_env && !several_tasks_per_node(env))) {
    if (env_get(env, "SLURM_PROCID") != nullptr) {
      id.notes.emplace_back(
          "node mode: SLURM_PROCID/NTASKS/LOCALID count the step's tasks (one per node), not "
          "ranks: only SLURM_NODEID and the node count are used");
    }
    s.take(Field::kNodeRank, "SLURM_NODEID");
    if (!s.take(Field::kNnodes, "SLURM_STEP_NUM_NODES")) s.take(Field::kNnodes, "SLURM_NNODES");
    return;
  }

  s.take(Field::kRank, "SLURM_PROCID");
  if (!s.take(Field::kWorldSize, "SLURM_NTASKS")) s.take(Field::kWorldSize, "SLURM_NPROCS");
  s.take(Field::kLocalRank, "SLURM_LOCALID");
  const std::string* node = s.take(Field::kNodeRank, "SLURM_NODEID");
  if (!s.take(Field::kNnodes, "SLURM_STEP_NUM_NODES")) s.take(Field::kNnodes, "SLURM_NNODES");

  const char* tasks_var = "SLURM_STEP_TASKS_PER_NODE";
  const std::string* tasks = env_get(env, tasks_var);
  if (tasks == nullptr) tasks = env_get(env, tasks_var = "SLURM_TASKS_PER_NODE");

  // This node's entry of the tasks-per-node list is its local world size.
  if (tasks != nullptr && node != nullptr) {
    int node_id = -1;
    std::from_chars(node->data(), node->data() + node->size(), node_id);
    auto counts = expand_tasks_per_node(*tasks);
    if (!counts) {
      id.notes.push_back(fmt::format("{}: {}", tasks_var, counts.error().message));
    } else if (node_id >= 0 && static_cast<size_t>(node_id) < counts->size()) {
      s.add(Field::kLocalWorldSize, fmt::format("{}[node {}]", tasks_var, node_id),
            std::to_string((*counts)[static_cast<size_t>(node_id)]));
    }
  }
  // Which rank runs where follows from the tasks per node for block and cyclic
  // distributions; plane and arbitrary ones are not guessed at, and say so: the
  // master must not take RANK - LOCAL_RANK for a node's first rank either.
  const std::string* dist = env_get(env, "SLURM_DISTRIBUTION");
  bool cyclic = dist != nullptr && dist->rfind("cyclic", 0) == 0;
  bool known = dist == nullptr || cyclic || dist->rfind("block", 0) == 0;
  if (!known) {
    id.distribution = Distribution::kUnknown;
  } else if (list != nullptr && tasks != nullptr) {
    id.tasks_per_node = *tasks;
    if (cyclic) id.distribution = Distribution::kCyclic;
  }
}

}  // namespace

const Launcher kSlurm{"slurm", "Slurm srun", scan, /*starts_processes=*/true, "SLURM_"};

}  // namespace rankcheck::launcher
