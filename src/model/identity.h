#pragma once
// Who this process thinks it is, as data: the identity a launcher's variables and
// the flags give (identity/identity.h detects it), every value every source gave,
// and where they disagree. What travels to the master is the record's copy
// (model/record.h): the same fields, compact (int32, interned strings), since the
// master holds one per member.

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/hostlist.h"

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
};

}  // namespace rankcheck
