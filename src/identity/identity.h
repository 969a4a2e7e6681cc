#pragma once
// Who this process thinks it is, detected: a pure function of an environment map and
// flags (the launcher table, one row per launcher), giving model/identity.h's data.

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/hostlist.h"
#include "base/result.h"
#include "model/identity.h"

namespace rankcheck {

/// Collects what one launcher's variables say. Passed to each table row.
class LauncherScan {
 public:
  /// In catalogue mode `take` records every variable asked for, set or not, and
  /// reports it unset; `sources_for` lists the table that way.
  LauncherScan(const EnvMap& env, std::string_view launcher, Identity& id, bool catalogue = false)
      : env_(env), launcher_(launcher), id_(id), catalogue_(catalogue) {}

  const EnvMap& env() const { return env_; }
  Identity& identity() { return id_; }
  /// Records `variable` as a source for `field` when it is set; returns its value.
  const std::string* take(Field field, std::string_view variable);
  /// As take(), for a weak source (see Observation::weak).
  const std::string* take_weak(Field field, std::string_view variable);
  /// Records a derived value (e.g. a node's entry of SLURM_TASKS_PER_NODE).
  void add(Field field, std::string variable, std::string value, bool weak = false);
  bool seen() const { return seen_; }

 private:
  const EnvMap& env_;
  std::string_view launcher_;
  Identity& id_;
  bool catalogue_;
  bool seen_ = false;
};

/// One launcher: a table row. Order in the table is precedence (flags first).
struct Launcher {
  std::string_view name;         ///< "slurm"
  std::string_view description;  ///< "Slurm srun"
  void (*scan)(LauncherScan&);
  /// The row's world size (node count in node mode) counts the processes this
  /// launcher started itself (srun, mpirun, torchrun), not a value someone exported.
  bool starts_processes = false;
  /// What every variable of its own starts with, space-separated ("SLURM_"): those
  /// beyond the ones scan() reads are its too (without_launcher_env).
  std::string_view prefixes = {};
};

/// The launcher table, highest precedence first.
std::span<const Launcher> launchers();

/// Builds the identity from the environment and flags. Never reads the process
/// environment itself; never fails: problems are listed in the result.
Identity detect_identity(const EnvMap& env, const Flags& flags);

/// `env` without any launcher's variables (those the table reads, and every one with a
/// launcher's prefix): what `rankcheck local` gives its members, which it launches.
EnvMap without_launcher_env(const EnvMap& env);

/// Whether an MPI launcher started this process (it gives each rank a pty and writes
/// what it prints into its own log: a terminal there is not one a person reads).
bool under_mpi_launcher(const EnvMap& env);

/// For a transport that needs no MASTER_ADDR (MPI): drops that requirement.
void without_master_addr(Identity& id);

/// The job-wide start the launch script gives (RANKCHECK_START_TIME, seconds since
/// the epoch, as `date +%s.%N` prints them): every process's deadline then counts
/// from it, not from its own start, so that a task that starts late does not
/// stretch the step. nullopt when unset; an error when it is not such a time.
Result<std::optional<double>> job_start_time(const EnvMap& env);

/// Why MPI_Init cannot work in this environment, if it cannot: a Slurm task
/// started without an MPI plugin (srun --mpi=none, MpiDefault=none) has no PMI
/// to find the other tasks, and Open MPI's MPI_Init aborts the process (exit 1).
std::optional<std::string> mpi_launch_problem(const EnvMap& env);

/// Which variables (and launchers) would have given `field`, for error messages:
/// "RANK (torch env), SLURM_PROCID (Slurm srun), ...".
std::string sources_for(Field field);

}  // namespace rankcheck
