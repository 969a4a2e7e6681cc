#pragma once
// Transports other than TCP for the rendezvous. rankcheck-mpi registers one that
// gathers every record over MPI at MPI rank 0, which decides with MasterState
// (the same checks as the TCP master), and hands each member its verdict.

#include <functional>
#include <string>

#include <rankcheck/gpu.h>
#include <rankcheck/identity.h>
#include <rankcheck/record.h>
#include <rankcheck/report.h>

namespace rankcheck {

/// What a run hands a bootstrap: this member, its GPU stage, how to print.
struct BootstrapContext {
  const Identity& id;
  Record& self;
  GpuStage& stage;
  const GpuPlan& plan;
  Clock::time_point start;
  Deadline end;
  bool gpu_stage = true;  ///< not --no-gpu
  double min_busbw_gbps = 0;
  std::function<void(const std::string&)> log;           ///< progress, stderr
  std::function<void(int)> set_watchdog_code;            ///< what a stuck process exits with
  std::function<int(const Report&)> print_report;        ///< the master's report; its code
  std::function<int(const MemberReport&)> print_member;  ///< a member's line; its code
};

using BootstrapFn = int (*)(BootstrapContext&);

/// Set by rankcheck-mpi's main; without it `--bootstrap mpi` is a usage error.
void set_mpi_bootstrap(BootstrapFn fn);
BootstrapFn mpi_bootstrap();

}  // namespace rankcheck
