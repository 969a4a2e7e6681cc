#include "identity/launchers/launchers.h"

namespace rankcheck::launcher {

namespace {

// MPICH, Intel MPI and other Hydra-based launchers (and srun --mpi=pmi2).
void scan(LauncherScan& s) {
  s.take(Field::kRank, "PMI_RANK");
  s.take(Field::kWorldSize, "PMI_SIZE");
  s.take(Field::kLocalRank, "MPI_LOCALRANKID");
  s.take(Field::kLocalWorldSize, "MPI_LOCALNRANKS");
}

}  // namespace

const Launcher kPmi{"pmi", "MPICH/PMI", scan, /*starts_processes=*/true, "PMI_ PMIX_"};

}  // namespace rankcheck::launcher
