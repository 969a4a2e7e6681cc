#pragma once
// Slurm's compressed host lists and task counts, and where each rank is expected.

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace rankcheck {

/// Expansion limits: a node list or task list beyond them is refused, not allocated.
inline constexpr size_t kMaxHosts = 65536;
inline constexpr unsigned long kMaxTasks = 1ul << 20;  // the largest world size
/// Bytes of host names one list may expand to: 65536 names of 64 characters. A
/// long prefix times a wide range is refused, not allocated.
inline constexpr size_t kMaxHostListBytes = size_t(1) << 22;

/// `gpu-[01-04,07],cpu3` -> gpu-01 gpu-02 gpu-03 gpu-04 gpu-07 cpu3. Several
/// bracket groups in one name multiply (`r[1-2]n[1-2]` -> r1n1 r1n2 r2n1 r2n2).
Result<std::vector<std::string>> expand_hostlist(std::string_view list);

/// The reverse, as Slurm writes it: gpu-017 gpu-203 gpu-204 node1 -> `gpu-[017,203-204],node1`.
/// Names are grouped by what precedes their trailing digits, sorted, and kept
/// exactly (zero padding included), so that expand_hostlist gives them back. A name
/// that cannot stand in a host list (empty, or with characters other than letters,
/// digits, '.', '-' and '_') is left out: a peer's host name is not trusted to
/// name only itself.
std::string compress_hostlist(const std::vector<std::string>& hosts);

/// `2(x3),1` -> 2 2 2 1 (SLURM_TASKS_PER_NODE / SLURM_STEP_TASKS_PER_NODE). Every
/// node of a step runs at least one task: a count of 0 is refused.
Result<std::vector<int>> expand_tasks_per_node(std::string_view spec);

/// How a launcher deals ranks to nodes. kUnknown: one that rankcheck does not model
/// (Slurm's plane and arbitrary), so no rank's node may be guessed from counts.
enum class Distribution { kBlock, kCyclic, kUnknown };

/// The node index each rank lands on, for `tasks[i]` tasks on node i; empty for
/// kUnknown. Block fills node 0 first; cyclic deals ranks round-robin over nodes with
/// room left. Work is proportional to the tasks, however they are spread.
std::vector<int> node_of_each_rank(const std::vector<int>& tasks, Distribution dist);

}  // namespace rankcheck
