#include "launchers/launchers.h"

namespace rankcheck::launcher {

// The variables torch.distributed's env:// init reads: what the training job will use.
const Launcher kTorch{"torch", "torch env", [](LauncherScan& s) {
                        s.take(Field::kRank, "RANK");
                        s.take(Field::kWorldSize, "WORLD_SIZE");
                        s.take(Field::kLocalRank, "LOCAL_RANK");
                        s.take(Field::kLocalWorldSize, "LOCAL_WORLD_SIZE");
                        s.take(Field::kMasterAddr, "MASTER_ADDR");
                        s.take(Field::kMasterPort, "MASTER_PORT");
                      }};

}  // namespace rankcheck::launcher
