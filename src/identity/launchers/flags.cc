#include "identity/launchers/launchers.h"

namespace rankcheck::launcher {

// Command-line flags reach the table as entries named after the flag.
const Launcher kFlags{"flags", "command-line flag", [](LauncherScan& s) {
                        s.take(Field::kRank, "--rank");
                        s.take(Field::kWorldSize, "--world-size");
                        s.take(Field::kLocalRank, "--local-rank");
                        s.take(Field::kLocalWorldSize, "--local-world-size");
                        s.take(Field::kNodeRank, "--node-rank");
                        s.take(Field::kNnodes, "--nnodes");
                        s.take(Field::kNprocPerNode, "--nproc-per-node");
                        s.take(Field::kMasterAddr, "--master-addr");
                        s.take(Field::kMasterPort, "--master-port");
                        s.take(Field::kJobId, "--job-id");
                      }};

}  // namespace rankcheck::launcher
