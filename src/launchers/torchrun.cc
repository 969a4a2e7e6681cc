#include "launchers/launchers.h"

namespace rankcheck::launcher {

// torchrun's own view of a worker: the agent (node) it belongs to and its role.
const Launcher kTorchrun{"torchrun", "torchrun", [](LauncherScan& s) {
                           s.take(Field::kRank, "ROLE_RANK");
                           s.take(Field::kWorldSize, "ROLE_WORLD_SIZE");
                           s.take(Field::kNodeRank, "GROUP_RANK");
                           s.take(Field::kNnodes, "GROUP_WORLD_SIZE");
                           s.take(Field::kJobId, "TORCHELASTIC_RUN_ID");
                         }};

}  // namespace rankcheck::launcher
