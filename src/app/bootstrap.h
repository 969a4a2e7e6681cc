#pragma once
// Transports other than TCP for the rendezvous, chosen at link time like the GPU
// stage: rankcheck-mpi links src/bootstrap_mpi.cc, which gathers every record over
// MPI at MPI rank 0, decides with MasterState (the same checks as the TCP master)
// and hands each member its verdict; rankcheck links src/bootstrap_none.cc, so that
// it never needs libmpi to start.

#include "app/session.h"
#include "identity/identity.h"
#include "model/record.h"

namespace rankcheck {

/// Whether this binary carries the MPI bootstrap (`--bootstrap mpi`).
bool have_mpi_bootstrap();

/// The whole run over MPI, from the rendezvous to the printed report: the exit code.
int run_over_mpi(const Identity& id, Record& self, Session& s);

}  // namespace rankcheck
