#include "identity/launchers/launchers.h"

namespace rankcheck::launcher {

namespace {

void scan(LauncherScan& s) {
  s.take(Field::kRank, "OMPI_COMM_WORLD_RANK");
  s.take(Field::kWorldSize, "OMPI_COMM_WORLD_SIZE");
  s.take(Field::kLocalRank, "OMPI_COMM_WORLD_LOCAL_RANK");
  s.take(Field::kLocalWorldSize, "OMPI_COMM_WORLD_LOCAL_SIZE");
  // The launch's own identity, the same in every process of one mpirun and
  // different in the next: Open MPI 4's job id, PMIx's namespace (Open MPI 5, PRRTE).
  if (env_get(s.env(), "OMPI_COMM_WORLD_SIZE") != nullptr) {
    if (!s.take(Field::kJobId, "OMPI_MCA_ess_base_jobid")) s.take(Field::kJobId, "PMIX_NAMESPACE");
  }
}

}  // namespace

const Launcher kOpenMpi{"openmpi", "Open MPI mpirun", scan, /*starts_processes=*/true, "OMPI_"};

}  // namespace rankcheck::launcher
