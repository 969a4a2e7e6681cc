// The bootstrap of a binary built without MPI: `--bootstrap mpi` is a usage
// error there (app/run.cc says to use rankcheck-mpi).

#include "app/bootstrap.h"
#include "model/finding.h"

namespace rankcheck {

bool have_mpi_bootstrap() {
  return false;
}

int run_over_mpi(const Identity&, Record&, Session&) {
  return exit_code::kUsage;
}

}  // namespace rankcheck
