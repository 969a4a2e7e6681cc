#include "identity/identity.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "base/text.h"

namespace rankcheck {
namespace {

constexpr std::string_view kNoMaster = "cannot tell where the master is";

bool is_numeric_field(Field f) {
  return f != Field::kMasterAddr && f != Field::kJobId;
}

// Strict whole-number parse: optional '-', digits, nothing else.
std::optional<long> parse_long(std::string_view s) {
  long v = 0;
  if (s.empty() || s.size() > 18) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// What is wrong with a value that is not a whole number: empty, too large, or
// not a number at all.
std::string not_whole(const Observation& o, std::string_view launcher) {
  std::string_view v = o.value;
  std::string_view digits = !v.empty() && (v[0] == '-' || v[0] == '+') ? v.substr(1) : v;
  bool all_digits = !digits.empty() && std::all_of(digits.begin(), digits.end(),
                                                   [](char c) { return c >= '0' && c <= '9'; });
  if (v.empty()) return fmt::format("{} is set but empty (set by {})", o.variable, launcher);
  if (all_digits) {
    return fmt::format("{}='{}' is too large: at most {} digits (set by {})", o.variable,
                       printable(v, 40), 18, launcher);
  }
  return fmt::format("{}='{}' is not a whole number (set by {})", o.variable, printable(v, 40),
                     launcher);
}

std::string_view describe(std::string_view launcher) {
  for (const Launcher& l : launchers()) {
    if (l.name == launcher) return l.description;
  }
  return launcher;
}

long* numeric_slot(Identity& id, Field f) {
  switch (f) {
    case Field::kRank:
      return &id.rank;
    case Field::kWorldSize:
      return &id.world_size;
    case Field::kLocalRank:
      return &id.local_rank;
    case Field::kLocalWorldSize:
      return &id.local_world_size;
    case Field::kNodeRank:
      return &id.node_rank;
    case Field::kNnodes:
      return &id.nnodes;
    case Field::kNprocPerNode:
      return &id.nranks;
    case Field::kMasterPort:
      return &id.master_port;
    case Field::kMasterAddr:
    case Field::kJobId:
      return nullptr;
  }
  return nullptr;
}

// Flags enter the same table as the environment, under their own names: a flag
// name cannot collide with an environment variable a launcher sets.
EnvMap with_flags(const EnvMap& env, const Flags& flags) {
  EnvMap merged = env;
  auto put = [&](const char* name, const std::optional<std::string>& v) {
    if (v) merged.insert_or_assign(name, *v);
  };
  put("--rank", flags.rank);
  put("--world-size", flags.world_size);
  put("--local-rank", flags.local_rank);
  put("--local-world-size", flags.local_world_size);
  put("--node-rank", flags.node_rank);
  put("--nnodes", flags.nnodes);
  put("--nproc-per-node", flags.nproc_per_node);
  put("--master-addr", flags.master_addr);
  put("--master-port", flags.master_port);
  put("--job-id", flags.job_id);
  return merged;
}

bool plausible(long v) {
  return v >= -kMaxWorldSize && v <= kMaxWorldSize;
}

// One probe per node is asked for by --nproc-per-node, or by a variable such as
// NPROC_PER_NODE when nothing gives this process a rank of its own. A job script
// exports NPROC_PER_NODE for the torchrun it starts later; the tasks srun or mpirun
// start one per rank inherit it, and read in node mode, every task on a node would
// claim the same ranks. Returns whether the node-mode variables are left unused.
bool inherited_nproc(Identity& id) {
  const Observation* nproc = nullptr;
  const Observation* own_rank = nullptr;
  for (const Observation& o : id.observations) {
    if (o.field == Field::kNprocPerNode && o.launcher == "flags") return false;
    if (o.field == Field::kNprocPerNode && nproc == nullptr) nproc = &o;
    if (o.field == Field::kRank && !o.weak && own_rank == nullptr) own_rank = &o;
  }
  if (nproc == nullptr || own_rank == nullptr) return false;
  id.notes.push_back(fmt::format(
      "{}={} is not used: {} gives this process a rank of its own, so it checks one rank "
      "(for one probe per node standing for its GPUs, pass --nproc-per-node)",
      nproc->variable, nproc->value, own_rank->variable));
  return true;
}

// MASTER_ADDR names a host, nothing more: a port in it would be taken for part of
// a DNS name and retried until the deadline. An IPv6 literal may come in brackets.
void check_master_addr_form(Identity& id) {
  std::string_view a = id.master_addr;
  const Observation* o = id.source(Field::kMasterAddr);
  std::string var = o != nullptr ? o->variable : "MASTER_ADDR";
  auto port_problem = [&](std::string_view host, std::string_view port) {
    id.problems.push_back(
        fmt::format("{}='{}' contains a port; put it in MASTER_PORT: {}={} MASTER_PORT={}", var,
                    printable(a, 80), var, printable(host, 80), printable(port, 8)));
  };
  auto all_digits = [](std::string_view s) {
    return !s.empty() && s.size() <= 5 &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (a.find("://") != std::string_view::npos) {
    id.problems.push_back(
        fmt::format("{}='{}' is a URL; give rank 0's host alone (and the port "
                    "in MASTER_PORT)",
                    var, printable(a, 80)));
    return;
  }
  if (a.starts_with('[')) {
    size_t close = a.find(']');
    if (close == std::string_view::npos) {
      id.problems.push_back(
          fmt::format("{}='{}' opens a bracket it does not close", var, printable(a, 80)));
      return;
    }
    std::string_view inside = a.substr(1, close - 1);
    std::string_view rest = a.substr(close + 1);
    if (rest.empty()) {
      id.master_addr = std::string(inside);  // [::1] -> ::1
    } else if (rest.starts_with(':') && all_digits(rest.substr(1))) {
      port_problem(a.substr(0, close + 1), rest.substr(1));
    } else {
      id.problems.push_back(
          fmt::format("{}='{}' is not a host name or address", var, printable(a, 80)));
    }
    return;
  }
  size_t colon = a.find(':');
  if (colon != std::string_view::npos && a.find(':', colon + 1) == std::string_view::npos &&
      all_digits(a.substr(colon + 1))) {
    port_problem(a.substr(0, colon), a.substr(colon + 1));
  }
}

// What resolve has learnt so far of each field: whether it has a value, and
// whether a problem already names the value given (so that "none is set" is not
// said of it too).
struct Resolved {
  bool have[kFieldCount] = {};
  bool reported[kFieldCount] = {};
  bool world_from_implausible = false;  // world size from an implausible node count

  bool has(Field f) const { return have[int(f)]; }
  void give(Field f) { have[int(f)] = true; }
  bool named(Field f) const { return reported[int(f)]; }
};

// One field's observations, sorted into what can be done with them. Weak ones count
// only when no strong one gives the field.
struct Candidates {
  std::vector<const Observation*> valid;
  std::vector<const Observation*> unparsable;
  const Observation* empty = nullptr;  // a MASTER_ADDR or job id set to ""
};

Candidates candidates(const Identity& id, Field field) {
  Candidates c;
  bool strong = std::any_of(id.observations.begin(), id.observations.end(),
                            [field](const Observation& o) { return o.field == field && !o.weak; });
  for (const Observation& o : id.observations) {
    if (o.field != field || (strong && o.weak)) continue;
    if (is_numeric_field(field) && !parse_long(o.value)) {
      c.unparsable.push_back(&o);
      continue;
    }
    if (!is_numeric_field(field) && o.value.empty()) {
      if (c.empty == nullptr) c.empty = &o;
      continue;
    }
    c.valid.push_back(&o);
  }
  return c;
}

// An unparsable value stops the run unless another source gives the field.
// Returns whether a problem names it.
bool report_unparsable(Identity& id, Field field, const Candidates& c) {
  bool reported = false;
  for (const Observation* o : c.unparsable) {
    std::string what = not_whole(*o, describe(o->launcher));
    reported = reported || c.valid.empty();
    if (!c.valid.empty()) {
      id.notes.push_back(
          fmt::format("{}; using {}={}", what, c.valid.front()->variable, c.valid.front()->value));
    } else if (field == Field::kNprocPerNode) {
      id.problems.push_back(what +
                            ": torchrun's auto/gpu are not known before the GPUs are "
                            "probed; pass --nproc-per-node N");
    } else if (field == Field::kNnodes && o->value.find(':') != std::string::npos) {
      id.problems.push_back(what +
                            ": an elastic range; rankcheck checks a job of a fixed size, "
                            "pass --nnodes N");
    } else {
      id.problems.push_back(what);
    }
  }
  return reported;
}

// The first valid observation is the field's value.
void take_value(Identity& id, Field field, const Observation& chosen) {
  id.source_index[size_t(field)] = static_cast<int>(&chosen - id.observations.data());
  if (long* slot = numeric_slot(id, field)) {
    *slot = *parse_long(chosen.value);
  } else if (field == Field::kMasterAddr) {
    id.master_addr = chosen.value;
  } else {
    id.job_id = chosen.value;
  }
  if (field == Field::kRank) id.launcher = chosen.launcher;
}

// The sources that give the field another value than the chosen one, listed with it.
void note_conflict(Identity& id, Field field, const std::vector<const Observation*>& valid) {
  const Observation& chosen = *valid.front();
  Conflict c{field, {}};
  for (const Observation* o : valid) {
    bool same = is_numeric_field(field) ? parse_long(o->value) == parse_long(chosen.value)
                                        : o->value == chosen.value;
    if (!same) c.values.push_back(*o);
  }
  if (!c.values.empty()) {
    c.values.insert(c.values.begin(), chosen);
    id.conflicts.push_back(std::move(c));
  }
}

// Picks one field's value by precedence and lists the disagreements.
void resolve_field(Identity& id, Field field, Resolved& r) {
  Candidates c = candidates(id, field);
  r.reported[int(field)] = report_unparsable(id, field, c);
  if (c.valid.empty() && c.empty != nullptr && field == Field::kMasterAddr) {
    id.problems.push_back(fmt::format("{} is set but empty (set by {}): give it rank 0's host",
                                      c.empty->variable, describe(c.empty->launcher)));
    r.reported[int(field)] = true;
  }
  if (c.valid.empty()) return;
  r.give(field);
  take_value(id, field, *c.valid.front());
  // Job ids naturally differ between launchers (a Slurm job id, a torchrun run id).
  if (field == Field::kJobId) return;
  note_conflict(id, field, c.valid);
}

// Node mode: one member stands for nproc-per-node consecutive ranks.
void apply_node_mode(Identity& id, Resolved& r) {
  if (!r.has(Field::kNprocPerNode)) return;
  if (id.nranks < 1 || id.nranks > kMaxRanksPerMember) {
    id.problems.push_back(
        fmt::format("nproc per node {} is outside 1..{}", id.nranks, kMaxRanksPerMember));
    id.nranks = 1;
    return;
  }
  if (r.has(Field::kRank)) return;
  if (!r.has(Field::kNodeRank)) {
    id.problems.push_back(fmt::format("node mode needs the node rank: none of {} is set",
                                      sources_for(Field::kNodeRank)));
  } else if (!plausible(id.node_rank)) {
    // Not multiplied (it could overflow): reported with the other implausible values.
    r.give(Field::kRank);
  } else {
    id.rank = id.node_rank * id.nranks;
    r.give(Field::kRank);
    if (const Observation* o = id.source(Field::kNodeRank)) id.launcher = o->launcher;
    id.notes.push_back(fmt::format("node mode: node {} stands for ranks {}-{}", id.node_rank,
                                   id.rank, id.rank + id.nranks - 1));
  }
  if (!r.has(Field::kWorldSize) && r.has(Field::kNnodes)) {
    r.give(Field::kWorldSize);
    if (plausible(id.nnodes)) {
      id.world_size = id.nnodes * id.nranks;
    } else {
      r.world_from_implausible = true;  // not multiplied: reported below
    }
  }
  if (!r.has(Field::kLocalWorldSize)) id.local_world_size = id.nranks;
  id.local_rank = 0;
}

// The ranks and counts: plausible, and given at all.
void check_counts(Identity& id, const Resolved& r) {
  for (long v : {id.rank, id.local_rank, id.local_world_size, id.node_rank, id.nnodes}) {
    if (!plausible(v)) {
      id.problems.push_back(
          fmt::format("{} is not a plausible rank or count (limit {})", v, kMaxWorldSize));
    }
  }
  if (!r.has(Field::kRank) && !r.named(Field::kRank) && !r.named(Field::kNodeRank)) {
    id.problems.push_back(fmt::format("cannot tell this process's rank: none of {} is set",
                                      sources_for(Field::kRank)));
  }
  if (!r.has(Field::kWorldSize) && r.named(Field::kWorldSize)) {
    // Named above.
  } else if (!r.has(Field::kWorldSize)) {
    id.problems.push_back(fmt::format("cannot tell the world size: none of {} is set",
                                      sources_for(Field::kWorldSize)));
  } else if (r.world_from_implausible) {
    // Left unset: the node count it would come from is reported above.
  } else if (id.world_size < 1 || id.world_size > kMaxWorldSize) {
    id.problems.push_back(
        fmt::format("world size {} is outside 1..{}", id.world_size, kMaxWorldSize));
  }
  if (r.has(Field::kLocalWorldSize) && id.local_world_size < 1) {
    id.problems.push_back(fmt::format("local world size {} is below 1", id.local_world_size));
  }
}

// MASTER_PORT: the default when unset, a problem when it is not a port.
void check_master_port(Identity& id, const Resolved& r) {
  if (!r.has(Field::kMasterPort)) {
    id.notes.push_back(fmt::format("MASTER_PORT not set: using {}", kDefaultMasterPort));
  } else if (id.master_port < 1 || id.master_port > 65535) {
    id.problems.push_back(fmt::format("master port {} is outside 1..65535", id.master_port));
  }
}

// Without MASTER_ADDR: the first host of a Slurm node list, or loopback for a job
// of one rank; else a problem. With it: its form.
void choose_master_addr(Identity& id, const Resolved& r) {
  if (!id.master_addr.empty()) {
    check_master_addr_form(id);
    return;
  }
  if (!id.node_list.empty()) {
    auto hosts = expand_hostlist(id.node_list);
    if (hosts) {
      id.master_addr = hosts->front();
      id.notes.push_back(fmt::format(
          "MASTER_ADDR not set: using {}, the first host of the Slurm node list", id.master_addr));
    }
  } else if (id.world_size == 1) {
    id.master_addr = "127.0.0.1";
    id.notes.push_back("MASTER_ADDR not set: a job of one rank uses 127.0.0.1");
  }
  if (id.master_addr.empty() && !r.named(Field::kMasterAddr)) {
    bool under_mpirun = std::any_of(id.observations.begin(), id.observations.end(),
                                    [](const Observation& o) { return o.launcher == "openmpi"; });
    id.problems.push_back(fmt::format(
        "{}: none of {} is set{}", kNoMaster, sources_for(Field::kMasterAddr),
        under_mpirun ? ". Under mpirun, use rankcheck-mpi --bootstrap mpi (the records travel "
                       "over MPI), or pass the master with -x MASTER_ADDR=HOST -x MASTER_PORT"
                     : ""));
  }
}

// Picks each field's value by precedence and lists the disagreements, then
// derives what node mode implies and checks what came out.
void resolve(Identity& id) {
  Resolved r;
  bool skip_nproc = inherited_nproc(id);
  for (int fi = 0; fi < kFieldCount; ++fi) {
    auto field = static_cast<Field>(fi);
    if (field == Field::kNprocPerNode && skip_nproc) continue;
    resolve_field(id, field, r);
  }
  apply_node_mode(id, r);
  check_counts(id, r);
  check_master_port(id, r);
  choose_master_addr(id, r);
}

// How many members the launcher started, as it counts them itself (SLURM_NTASKS,
// OMPI_COMM_WORLD_SIZE, torchrun's ROLE_WORLD_SIZE; the node count in node mode).
// A WORLD_SIZE exported by hand may say fewer: rank 0 then waits for every process
// the launcher started, rather than decide as soon as the first few are in.
void count_launcher_members(Identity& id) {
  Field field = id.node_mode() ? Field::kNnodes : Field::kWorldSize;
  for (const Observation& o : id.observations) {
    if (o.field != field || o.weak) continue;
    auto row = std::find_if(launchers().begin(), launchers().end(),
                            [&o](const Launcher& l) { return l.name == o.launcher; });
    if (row == launchers().end() || !row->starts_processes) continue;
    auto n = parse_long(o.value);
    if (!n || *n < 1 || *n > kMaxWorldSize) continue;
    id.launcher_members = *n;
    id.launcher_members_from = fmt::format("{}={}", o.variable, o.value);
    return;
  }
}

// Under torchrun's static rendezvous the agent's TCPStore already listens on
// MASTER_PORT (on every interface) and its workers are told to use it as a store:
// rankcheck's master cannot bind it, and must not. It meets one port up instead,
// the same on every member, and says so.
void choose_rendezvous_port(Identity& id, const EnvMap& env, const Flags& flags) {
  id.rendezvous_port = id.master_port;
  if (flags.rendezvous_port) {
    auto p = parse_long(*flags.rendezvous_port);
    if (!p || *p < 1 || *p > 65535) {
      id.problems.push_back(
          fmt::format("--rendezvous-port '{}' is not a port (1..65535)", *flags.rendezvous_port));
    } else {
      id.rendezvous_port = *p;
    }
    return;
  }
  const std::string* agent = env_get(env, "TORCHELASTIC_USE_AGENT_STORE");
  if (agent != nullptr && (*agent == "True" || *agent == "true" || *agent == "1")) {
    id.rendezvous_port = id.master_port < 65535 ? id.master_port + 1 : id.master_port - 1;
    id.notes.push_back(fmt::format(
        "torchrun's agent store holds MASTER_PORT {} (TORCHELASTIC_USE_AGENT_STORE={}): "
        "rankcheck meets on port {} instead (--rendezvous-port to choose)",
        id.master_port, *agent, id.rendezvous_port));
  }
}

}  // namespace

const std::string* LauncherScan::take_weak(Field field, std::string_view variable) {
  if (catalogue_) return take(field, variable);
  const std::string* v = env_get(env_, variable);
  if (v != nullptr) add(field, std::string(variable), *v, /*weak=*/true);
  return v;
}

const std::string* LauncherScan::take(Field field, std::string_view variable) {
  if (catalogue_) {
    add(field, std::string(variable), "");
    return nullptr;
  }
  const std::string* v = env_get(env_, variable);
  if (v != nullptr) add(field, std::string(variable), *v);
  return v;
}

void LauncherScan::add(Field field, std::string variable, std::string value, bool weak) {
  seen_ = true;
  id_.observations.push_back(
      Observation{field, std::string(launcher_), std::move(variable), std::move(value), weak});
}

Identity detect_identity(const EnvMap& env, const Flags& flags) {
  Identity id;
  EnvMap merged = with_flags(env, flags);
  for (const Launcher& l : launchers()) {
    LauncherScan scan(merged, l.name, id);
    l.scan(scan);
    if (scan.seen()) id.launchers.emplace_back(l.name);
  }
  resolve(id);
  count_launcher_members(id);
  choose_rendezvous_port(id, env, flags);
  return id;
}

void without_master_addr(Identity& id) {
  std::erase_if(id.problems, [](const std::string& p) { return p.starts_with(kNoMaster); });
  // Nothing listens on them: notes about their defaults would only be noise.
  std::erase_if(id.notes, [](const std::string& n) {
    return n.starts_with("MASTER_PORT not set") || n.starts_with("MASTER_ADDR not set");
  });
}

Result<std::optional<double>> job_start_time(const EnvMap& env) {
  const std::string* v = env_get(env, "RANKCHECK_START_TIME");
  if (v == nullptr) return std::optional<double>();
  // Digits, one optional fraction: what `date +%s.%N` prints, nothing locale-bound.
  bool dot = false;
  bool ok = !v->empty() && v->size() <= 32 && v->front() != '.';
  for (char c : *v) {
    if (c == '.' && !dot) {
      dot = true;
    } else if (c < '0' || c > '9') {
      ok = false;
    }
  }
  double t = ok ? std::strtod(v->c_str(), nullptr) : 0;
  if (!ok || !(t > 0) || t > 1e11) {
    return Error{fmt::format(
        "RANKCHECK_START_TIME='{}' is not a time: give seconds since the epoch, as `date "
        "+%s.%N` prints them (or unset it to count the deadline from each process's start)",
        printable(*v, 40))};
  }
  return std::optional<double>(t);
}

std::optional<std::string> mpi_launch_problem(const EnvMap& env) {
  if (env_get(env, "SLURM_PROCID") == nullptr && env_get(env, "SLURM_STEP_ID") == nullptr) {
    return std::nullopt;
  }
  // PMIx (srun --mpi=pmix), PMI-2 and PMI-1 (--mpi=pmi2, Hydra), or mpirun's own.
  for (const char* v :
       {"PMIX_RANK", "PMIX_NAMESPACE", "PMI_FD", "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"}) {
    if (env_get(env, v) != nullptr) return std::nullopt;
  }
  const std::string* type = env_get(env, "SLURM_MPI_TYPE");
  return fmt::format(
      "--bootstrap mpi: this Slurm task was started without an MPI plugin ({}), so MPI_Init "
      "cannot find the other tasks and would abort: run it with srun --mpi=pmix (srun "
      "--mpi=list shows what the cluster has), start it with mpirun, or leave --bootstrap mpi "
      "out to meet over TCP",
      type != nullptr ? fmt::format("SLURM_MPI_TYPE={}", printable(*type, 32))
                      : std::string("srun --mpi=none, or MpiDefault=none in slurm.conf"));
}

std::string sources_for(Field field) {
  // Each row is scanned in catalogue mode, so this list follows the table and
  // cannot drift from it.
  std::string out;
  EnvMap empty;
  for (const Launcher& l : launchers()) {
    Identity sink;
    LauncherScan scan(empty, l.name, sink, /*catalogue=*/true);
    l.scan(scan);
    for (const Observation& o : sink.observations) {
      if (o.field != field) continue;
      if (!out.empty()) out += ", ";
      out += fmt::format("{} ({})", o.variable, l.description);
    }
  }
  return out;
}

EnvMap without_launcher_env(const EnvMap& env) {
  EnvMap out = env;
  for (const Launcher& l : launchers()) {
    Identity sink;
    EnvMap empty;
    LauncherScan scan(empty, l.name, sink, /*catalogue=*/true);
    l.scan(scan);
    for (const Observation& o : sink.observations)
      out.erase(o.variable);
    for (std::string_view rest = l.prefixes; !rest.empty();) {
      std::string_view prefix = rest.substr(0, rest.find(' '));
      rest = prefix.size() < rest.size() ? rest.substr(prefix.size() + 1) : std::string_view();
      for (auto it = out.begin(); it != out.end();)
        it = !prefix.empty() && it->first.starts_with(prefix) ? out.erase(it) : std::next(it);
    }
  }
  return out;
}

bool under_mpi_launcher(const EnvMap& env) {
  return env_get(env, "OMPI_COMM_WORLD_SIZE") != nullptr || env_get(env, "PMI_SIZE") != nullptr ||
         env_get(env, "PMIX_RANK") != nullptr;
}

}  // namespace rankcheck
