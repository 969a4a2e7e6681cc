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

  s.take(Field::kRank, "SLURM_PROCID");
  if (!s.take(Field::kWorldSize, "SLURM_NTASKS")) s.take(Field::kWorldSize, "SLURM_NPROCS");
  s.take(Field::kLocalRank, "SLURM_LOCALID");
  const std::string* node = s.take(Field::kNodeRank, "SLURM_NODEID");
  if (!s.take(Field::kNnodes, "SLURM_STEP_NUM_NODES")) s.take(Field::kNnodes, "SLURM_NNODES");

  const char* tasks_var = "SLURM_STEP_TASKS_PER_NODE";
  const std::string* tasks = env_get(env, tasks_var);
  if (tasks == nullptr) tasks = env_get(env, tasks_var = "SLURM_TASKS_PER_NODE");
  const char* list_var = "SLURM_STEP_NODELIST";
  const std::string* list = env_get(env, list_var);
  if (list == nullptr) list = env_get(env, list_var = "SLURM_JOB_NODELIST");
  if (list == nullptr) list = env_get(env, list_var = "SLURM_NODELIST");

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
  if (list != nullptr) {
    id.node_list = *list;
    if (tasks != nullptr) id.tasks_per_node = *tasks;
    const std::string* dist = env_get(env, "SLURM_DISTRIBUTION");
    if (dist != nullptr && dist->rfind("cyclic", 0) == 0) id.distribution = Distribution::kCyclic;
  }
}

}  // namespace

const Launcher kSlurm{"slurm", "Slurm srun", scan};

}  // namespace rankcheck::launcher
