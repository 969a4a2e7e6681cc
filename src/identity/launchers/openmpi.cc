#include "identity/launchers/launchers.h"

namespace rankcheck::launcher {

namespace {

void scan(LauncherScan& s) {
  s.take(Field::kRank, "OMPI_COMM_WORLD_RANK");
  s.take(Field::kWorldSize, "OMPI_COMM_WORLD_SIZE");
  s.take(Field::kLocalRank, "OMPI_COMM_WORLD_LOCAL_RANK");
  s.take(Field::kLocalWorldSize, "OMPI_COMM_WORLD_LOCAL_SIZE");
}

}  // namespace

const Launcher kOpenMpi{"openmpi", "Open MPI mpirun", scan, /*starts_processes=*/true};

}  // namespace rankcheck::launcher
