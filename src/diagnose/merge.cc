// Before conclude reasons: one entry per process. The lines name a process by its
// rank, its local rank on a host or its pid, and a file's unattributed lines by the
// file; torchrun's failure table says which local ranks and pids are which ranks.

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "diagnose/internal.h"

namespace rankcheck::diagnose {
namespace {

// A wait or a pointer to a peer that no prefix attributes (torchrun's workers'
// stderr, which --tee does not prefix) is what the processes that failed in the same
// file without one waited for: an agent's file holds its own node's workers. An error
// of their own stays where it is: it is one process's, not every one's.
void place_by_file(std::map<std::string, Proc>& procs, Proc& from) {
  const Slot& wait = from.waiting ? from.waiting : from.downstream;
  if (!wait) return;
  const std::string& file = wait->evidence.file;
  bool placed = false;
  for (auto& [key, p] : procs) {
    if (!p.died_silent() || p.died->evidence.file != file) continue;
    (from.waiting ? p.waiting : p.downstream) = *wait;
    placed = true;
  }
  if (placed) (from.waiting ? from.waiting : from.downstream).reset();
}

// Unattributed errors (a traceback on a shared stderr) belong to the one process
// that failed without an error of its own, when there is exactly one.
void place_unattributed(std::map<std::string, Proc>& procs) {
  std::set<std::string> details;
  for (const auto& [key, p] : procs) {
    if (p.unattributed) continue;
    for (const auto* n : {&p.own, &p.downstream, &p.waiting})
      if (*n) details.insert((*n)->detail);
  }
  Proc* lone = nullptr;
  int failed = 0;
  for (auto& [key, p] : procs) {
    if (p.died_silent()) {
      lone = &p;
      ++failed;
    }
  }
  for (auto it = procs.begin(); it != procs.end();) {
    Proc& p = it->second;
    if (!p.unattributed) {
      ++it;
      continue;
    }
    for (auto* n : {&p.own, &p.downstream, &p.waiting})
      if (*n && details.count((*n)->detail)) n->reset();
    if (failed > 1) place_by_file(procs, p);
    if (failed == 1) {
      if (p.own && !lone->own) lone->own = p.own;
      if (p.downstream && !lone->downstream) lone->downstream = p.downstream;
      if (p.waiting && !lone->waiting) lone->waiting = p.waiting;
      p.own.reset();
      p.downstream.reset();
      p.waiting.reset();
    }
    if (!p.own && !p.downstream && !p.waiting && !p.died && !p.timeout) {
      it = procs.erase(it);
    } else {
      ++it;
    }
  }
}

void merge_into(Proc& to, const Proc& from) {
  for (auto [a, b] : {std::pair{&to.own, &from.own},
                      {&to.downstream, &from.downstream},
                      {&to.waiting, &from.waiting},
                      {&to.died, &from.died},
                      {&to.timeout, &from.timeout}}) {
    if (*b && (!*a || earlier(**b, **a))) *a = *b;
  }
  to.died_at = std::max(to.died_at, from.died_at);
  if (to.exit <= 0) to.exit = from.exit;
  if (to.signal <= 0) to.signal = from.signal;
  if (to.pid < 0) to.pid = from.pid;
  if (to.local_rank < 0) to.local_rank = from.local_rank;
  if (to.host.empty()) to.host = from.host;
  if (to.seq_no < 0) {
    to.seq_no = from.seq_no;
    to.op = from.op;
    to.enqueued = from.enqueued;
  }
}

}  // namespace

// Local ranks and pids mapped to global ranks, each process's notes merged into one
// entry; a process its launcher named, or one ended by SIGTERM, was stopped by it;
// then the unattributed errors placed.
void Knowledge::merge_processes() {
  bool identity = !rank_of_local.empty() && hosts_seen.size() <= 1 &&
                  std::all_of(rank_of_local.begin(), rank_of_local.end(), [](const auto& kv) {
                    return kv.first.substr(kv.first.find('|') + 1) == std::to_string(kv.second);
                  });
  std::map<std::string, Proc> merged;
  for (auto& [key, p] : procs) {
    long rank = p.rank;
    // Its pid first: torchrun's "failed (exitcode: 1) local_rank: 0 (pid: 9444)" names
    // no host, and its table names the pid with the rank.
    if (rank < 0 && p.pid >= 0 && rank_of_pid.count(p.pid)) rank = rank_of_pid[p.pid];
    if (rank < 0 && p.local_rank >= 0) {
      auto it = rank_of_local.find(fmt::format("{}|{}", p.host, p.local_rank));
      if (it == rank_of_local.end()) it = rank_of_local.find(fmt::format("|{}", p.local_rank));
      if (it != rank_of_local.end())
        rank = it->second;
      else if (identity)
        rank = p.local_rank;
    }
    std::string k = rank >= 0 ? fmt::format("r{}", rank) : key;
    Proc& to = merged[k];
    if (rank >= 0) {
      to.rank = rank;
      ranks_seen.insert(rank);
    }
    to.unattributed = p.unattributed;
    merge_into(to, p);
    if (to.rank < 0) to.rank = p.rank;
  }
  procs.swap(merged);
  for (auto& [key, p] : procs) {
    if ((p.pid >= 0 && killed_pids.count(p.pid)) || p.signal == 15) p.killed_by_launcher = true;
  }
  place_unattributed(procs);
}

}  // namespace rankcheck::diagnose
