#include <charconv>

#include <fmt/format.h>

#include "launchers/launchers.h"

namespace rankcheck::launcher {
namespace {

void scan(LauncherScan& s) {
  const EnvMap& env = s.env();
  Identity& id = s.identity();
  s.take(Field::kJobId, "SLURM_JOB_ID");

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

  // The step's node list: the default MASTER_ADDR, and where each rank runs.
  const std::string* list = env_get(env, "SLURM_STEP_NODELIST");
  if (list == nullptr) list = env_get(env, "SLURM_JOB_NODELIST");
  if (list == nullptr) list = env_get(env, "SLURM_NODELIST");
  if (list != nullptr) id.node_list = *list;

  // Node mode (one probe per node standing for its GPUs): the step runs one task per
  // node, and SLURM_PROCID/NTASKS/LOCALID count those tasks, not the job's ranks.
  if (env_get(env, "--nproc-per-node") != nullptr || env_get(env, "NPROC_PER_NODE") != nullptr ||
      env_get(env, "PET_NPROC_PER_NODE") != nullptr) {
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
  // distributions; plane and arbitrary ones are not guessed at.
  const std::string* dist = env_get(env, "SLURM_DISTRIBUTION");
  bool cyclic = dist != nullptr && dist->rfind("cyclic", 0) == 0;
  bool known = dist == nullptr || cyclic || dist->rfind("block", 0) == 0;
  if (list != nullptr && tasks != nullptr && known) {
    id.tasks_per_node = *tasks;
    if (cyclic) id.distribution = Distribution::kCyclic;
  }
}

}  // namespace

const Launcher kSlurm{"slurm", "Slurm srun", scan};

}  // namespace rankcheck::launcher
