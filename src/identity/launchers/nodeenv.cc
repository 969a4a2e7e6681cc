#include "identity/launchers/launchers.h"

namespace rankcheck::launcher {

// Node-level variables a launch script exports for `torchrun --node-rank $NODE_RANK
// --nnodes $NNODES --nproc-per-node $NPROC_PER_NODE`: one probe per node (node mode).
// A torchrun worker inherits them too, but is one rank: they are not read there.
const Launcher kNodeEnv{"node", "node env", [](LauncherScan& s) {
                          if (env_get(s.env(), "TORCHELASTIC_RUN_ID") != nullptr) return;
                          s.take(Field::kNodeRank, "NODE_RANK");
                          s.take(Field::kNnodes, "NNODES");
                          s.take(Field::kNprocPerNode, "NPROC_PER_NODE");
                        }};

}  // namespace rankcheck::launcher
