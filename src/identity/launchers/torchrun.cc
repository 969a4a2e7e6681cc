#include "identity/launchers/launchers.h"

namespace rankcheck::launcher {

namespace {

// torchrun's own view of a worker: the agent (node) it belongs to and its role.
void scan(LauncherScan& s) {
  s.take(Field::kRank, "ROLE_RANK");
  s.take(Field::kWorldSize, "ROLE_WORLD_SIZE");
  s.take(Field::kNodeRank, "GROUP_RANK");
  s.take(Field::kNnodes, "GROUP_WORLD_SIZE");
  // "none" is torchrun's run id when --rdzv-id is not given:
  // every job has it, so it tells no job from another.
  const std::string* run_id = env_get(s.env(), "TORCHELASTIC_RUN_ID");
  if (run_id == nullptr || *run_id != "none") {
    s.take(Field::kJobId, "TORCHELASTIC_RUN_ID");
  }
}

}  // namespace

const Launcher kTorchrun{"torchrun", "torchrun", scan, /*starts_processes=*/true, "TORCHELASTIC_"};

}  // namespace rankcheck::launcher
