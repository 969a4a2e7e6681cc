// torchrun's agent before its workers start: a file whose last lines are the agent's
// start and rendezvous ended there, in a rendezvous that never completed. Read line
// by line beside the catalogue (a tail, not a message: no single line says it).

#include <array>

#include <fmt/format.h>

#include "base/text.h"
#include "diagnose/builder.h"

namespace rankcheck::diagnose {
namespace {

// The agent's own lines before its workers start (torch 1.13 and later, run.py,
// launcher/api.py, agent/server/api.py, static_tcp_rendezvous.py and
// dynamic_rendezvous.py): each says the agent is still on its way to a rendezvous.
constexpr std::array<std::string_view, 10> kAgentWaiting = {
    "Setting OMP_NUM_THREADS environment variable for each process",
    "Starting elastic_operator with launch configs",
    "log directory set to: ",
    "starting workers for entrypoint: ",
    "Rendezvous'ing worker group",
    "Creating TCPStore as the c10d::Store implementation",
    "attempts to join the next round of the rendezvous",
    "added itself to the participants of round",
    "added itself to the wait list of round",
    "updated its keep-alive heartbeat time for the rendezvous",
};

// The keys of launcher/api.py's "launch configs" block, one per line.
constexpr std::array<std::string_view, 12> kConfigKeys = {
    "entrypoint",    "min_nodes",    "max_nodes",    "nproc_per_node",   "run_id",  "rdzv_backend",
    "rdzv_endpoint", "rdzv_configs", "max_restarts", "monitor_interval", "log_dir", "metrics_cfg"};

// "  min_nodes        : 2" -> {"min_nodes", "2"}; empty key when the line is not one.
std::pair<std::string_view, std::string_view> config_line(std::string_view body) {
  std::string_view t = trim_blanks(body);
  size_t colon = t.find(" : ");
  if (colon == std::string_view::npos) return {};
  std::string_view key = trim_blanks(t.substr(0, colon));
  for (std::string_view k : kConfigKeys) {
    if (key == k) return {key, trim_blanks(t.substr(colon + 3))};
  }
  return {};
}

// Lines that frame the agent's own ("WARNING:torch.distributed.run:" and the row of
// stars around its OMP_NUM_THREADS notice, blank lines): they change nothing.
bool frame_line(std::string_view body) {
  std::string_view t = trim_blanks(body);
  if (t.empty() || t == "WARNING:torch.distributed.run:") return true;
  return t.find_first_not_of('*') == std::string_view::npos;
}

}  // namespace

void AgentTail::line(std::string_view body, const Prefix& prefix, const At& at, Knowledge& k) {
  auto note = [&] {
    Note n;
    n.evidence = {k.sources[at.source], at.line, printable(at.text, kEvidenceShort)};
    n.seq = at.seq;
    n.stamp = at.stamp;
    n.time = std::string(prefix.time);
    n.detail = printable(trim_blanks(body), 200);
    return n;
  };
  bool worker = prefix.rank >= 0 || prefix.local_rank >= 0;
  if (!worker) {
    if (auto [key, value] = config_line(body); !key.empty()) {
      TorchrunLaunch& t = k.torchrun;
      if (key == "min_nodes") t.min_nodes = number(std::string(value));
      if (key == "max_nodes") t.max_nodes = number(std::string(value));
      if (key == "nproc_per_node") t.nproc = number(std::string(value));
      if (key == "rdzv_endpoint" && t.endpoint.empty()) t.endpoint = printable(value, 128);
      if (key == "rdzv_backend" && t.backend.empty()) t.backend = printable(value, 32);
      return;
    }
    if (frame_line(body)) return;
    for (std::string_view w : kAgentWaiting) {
      if (body.find(w) == std::string_view::npos) continue;
      k.launchers |= Prefix::kTorchrun;
      if (!waiting_) first_ = note();
      last_ = note();
      waiting_ = true;
      return;
    }
  }
  waiting_ = false;  // anything else: a worker printed, or the agent went on
}

void AgentTail::end(Knowledge& k) {
  if (waiting_ && k.hung_agents.size() < kMaxHungAgents) k.hung_agents.push_back({first_, last_});
  waiting_ = false;
}

namespace {

// "2 nodes at cn1:29881 (static rendezvous)", or "" when the log does not say.
std::string awaited(const TorchrunLaunch& t) {
  if (t.min_nodes <= 0) return "";
  std::string nodes = t.max_nodes > t.min_nodes
                          ? fmt::format("{} to {} nodes", t.min_nodes, t.max_nodes)
                          : fmt::format("{} node{}", t.min_nodes, t.min_nodes == 1 ? "" : "s");
  if (!t.endpoint.empty()) nodes += " at " + t.endpoint;
  if (!t.backend.empty()) nodes += fmt::format(" ({} rendezvous)", t.backend);
  return nodes;
}

}  // namespace

// Last, when nothing else says anything: logs that end in torchrun's agent on its way
// to the rendezvous. No worker started, so no worker could say why: the agents waited
// for nodes that never joined (not started, started with another --nnodes, endpoint
// or port, or a second node at the same --node_rank).
void add_hung_rendezvous(Builder& b, const Knowledge& k) {
  if (k.hung_agents.empty()) return;
  for (const DiagFinding& f : b.out) {
    if (f.finding.is_error()) return;
  }
  size_t n = k.hung_agents.size();
  std::string what = awaited(k.torchrun);
  std::string who = n == 1 ? std::string("its agent") : fmt::format("{} agents", n);
  std::string message = fmt::format(
      "torchrun's rendezvous never completed: {} waited for {}, and {} log ends there with no "
      "worker started ({}): {}",
      who, what.empty() ? std::string("the other nodes") : what, n == 1 ? "its" : "each",
      printable(k.hung_agents.front().last.detail, 100),
      what.empty() ? "the log names neither the number of nodes nor the endpoint (torchrun "
                     "prints them with LOGLEVEL=INFO); the nodes it waited for never joined"
                   : "the nodes it waited for never joined");
  DiagFinding& f =
      b.add(FindingId::kMissingRank, message, true, k.hung_agents.front().first,
            "start torchrun on every node with the same --nnodes and the same --master_addr and "
            "--master_port (or --rdzv_endpoint), each node with its own --node_rank (0 on the "
            "master's node); an agent that joins another endpoint, or a second node rank 0, "
            "leaves both waiting");
  std::vector<Evidence> evidence;
  for (const HungAgent& a : k.hung_agents) {
    evidence.push_back(a.last.evidence);
  }
  attach(f, {}, {}, evidence);
}

// Last, alone: fewer ranks said they started than the world they named, and nothing
// in the log failed: the job hangs waiting for the others (Lightning's "GLOBAL_RANK: 3,
// MEMBER: 4/8" from 4 of 8 ranks: an sbatch script that ran its program without srun
// started one node's processes). The logs of some nodes only read the same way: said.
void add_partial_world(Builder& b, const Knowledge& k) {
  // Claims past the cap were not kept (k.dropped): the absent would be guessed.
  if (k.claims.empty() || k.world <= 1 || k.world > (1 << 16) || k.dropped > 0) return;
  for (const DiagFinding& f : b.out) {
    if (f.finding.is_error()) return;
  }
  std::set<long> claimed;
  const Note* first = nullptr;
  for (const auto& [key, c] : k.claims) {
    if (key.second < 0 || key.second >= k.world || c.empty()) continue;
    claimed.insert(key.second);
    if (!first || earlier(c.front().note, *first)) first = &c.front().note;
  }
  if (!first || static_cast<long>(claimed.size()) >= k.world) return;
  std::set<long> absent;
  for (long r = 0; r < k.world; ++r) {
    if (!claimed.count(r)) absent.insert(r);
  }
  std::string message = fmt::format(
      "{} of {} ranks said they started ({}) and the log ends with no failure: {} never "
      "did, and the job waits for {} (or these are the logs of some nodes only: read the "
      "others' too)",
      claimed.size(), k.world, ranks_text(claimed), ranks_text(absent),
      absent.size() == 1 ? "it" : "them");
  DiagFinding& f =
      b.add(FindingId::kMissingRank, message, true, *first,
            "start every rank: under Slurm, run the program with srun inside the batch script (run "
            "by the script itself, it starts one node's processes); check that the nodes and tasks "
            "asked for make the world size every rank was given");
  attach(f, absent, {}, {first->evidence});
}

}  // namespace rankcheck::diagnose
