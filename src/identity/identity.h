#pragma once
// Who this process thinks it is: a pure function of an environment map and flags.

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/hostlist.h"
#include "base/result.h"

namespace rankcheck {

inline constexpr int kDefaultMasterPort = 29500;
/// Largest world size rankcheck accepts; a larger one is a usage error.
inline constexpr long kMaxWorldSize = 1 << 20;
/// Most ranks one member stands for in node mode (GPUs in one node).
inline constexpr long kMaxRanksPerMember = 64;

enum class Field {
  kRank,
  kWorldSize,
  kLocalRank,
  kLocalWorldSize,
  kNodeRank,
  kNnodes,
  kNprocPerNode,
  kMasterAddr,
  kMasterPort,
  kJobId,
};
inline constexpr int kFieldCount = 10;
std::string_view field_name(Field f);

/// One value one source gave for one field: SLURM_PROCID=3 from slurm.
struct Observation {
  Field field;
  std::string launcher;  ///< table row name: "torch", "slurm", "flags", ...
  std::string variable;  ///< "SLURM_PROCID", or "--rank" for flags
  std::string value;     ///< as given, unparsed
  /// A value injected whether or not it fits (a JobSet's completion index restarts
  /// in every job): used only when nothing else gives the field, never a conflict.
  bool weak = false;
};

/// Explicit flags; each beats the environment.
struct Flags {
  std::optional<std::string> rank, world_size, local_rank, local_world_size;
  std::optional<std::string> node_rank, nnodes, nproc_per_node;
  std::optional<std::string> master_addr, master_port, job_id;
  std::optional<std::string> rendezvous_port;  ///< rankcheck's own port, if not MASTER_PORT
};

/// Two or more sources that disagree about one field.
struct Conflict {
  Field field;
  std::vector<Observation> values;  ///< one per distinct source, in precedence order
};

struct Identity {
  // Resolved values; -1 where no source gave one.
  long rank = -1;   ///< first global rank this member stands for
  long nranks = 1;  ///< ranks this member stands for (node mode: nproc per node)
  long world_size = -1;
  long local_rank = -1;
  long local_world_size = -1;
  long node_rank = -1;
  long nnodes = -1;
  std::string master_addr;
  long master_port = kDefaultMasterPort;
  /// Where rankcheck itself meets: MASTER_PORT, unless torchrun's agent already
  /// listens there (TORCHELASTIC_USE_AGENT_STORE=True) or --rendezvous-port says.
  long rendezvous_port = kDefaultMasterPort;
  std::string job_id;
  /// How many members the launcher itself started (rank mode: processes, e.g.
  /// SLURM_NTASKS; node mode: nodes), by its own count; -1 where no launcher that
  /// starts processes says. `launcher_members_from` names it: "SLURM_NTASKS=4".
  long launcher_members = -1;
  std::string launcher_members_from;

  std::string launcher;                   ///< the row that gave the rank
  std::vector<std::string> launchers;     ///< every row whose variables were seen
  std::vector<Observation> observations;  ///< every value every source gave
  /// For each field, the index in `observations` of the value used; -1 where none was
  /// (no source, or a value derived from others, like a node-mode rank).
  std::array<int, kFieldCount> source_index = [] {
    std::array<int, kFieldCount> none;
    none.fill(-1);
    return none;
  }();
  std::vector<Conflict> conflicts;    ///< fields whose sources disagree
  std::vector<std::string> problems;  ///< missing/unparsable values: a usage error
  std::vector<std::string> notes;     ///< defaults taken and interpretations made

  /// Where the launcher says each node's ranks run (Slurm): compressed node list,
  /// tasks per node and distribution, kept raw so a record stays small.
  std::string node_list;
  std::string tasks_per_node;
  Distribution distribution = Distribution::kBlock;

  /// The observation that gave `f` its value, or nullptr (see source_index).
  const Observation* source(Field f) const {
    int i = source_index[static_cast<size_t>(f)];
    return i < 0 ? nullptr : &observations[static_cast<size_t>(i)];
  }
  bool node_mode() const { return nranks > 1; }
  /// The identity is complete enough to take part in a rendezvous.
  bool usable() const { return problems.empty(); }
  /// Rank within [0, world_size) for every rank this member stands for.
  bool rank_in_range() const { return rank >= 0 && rank + nranks <= world_size; }
};

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
};

/// The launcher table, highest precedence first.
std::span<const Launcher> launchers();

/// Builds the identity from the environment and flags. Never reads the process
/// environment itself; never fails: problems are listed in the result.
Identity detect_identity(const EnvMap& env, const Flags& flags);

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
