#pragma once
// The rehearsal of NCCL's connections: which host connects to which (a pure
// function of the hosts). The prober and the answering side are in
// rehearsal/probe.cc; the server runs the rehearsal (rendezvous/server_rehearsal.cc);
// what the connections found means is rules/paths.h's.

#include <cstdint>
#include <string>
#include <vector>

#include "model/path.h"

namespace rankcheck {

/// Up to this many hosts every ordered pair is tried.
inline constexpr size_t kAllPairsHosts = 64;

/// The connections NCCL's init makes between `hosts` hosts in rank order (host 0
/// holds rank 0), sorted and unique:
/// - host 0 to every host and every host to host 0 (NCCL's root connects back to
///   each rank on an ephemeral port, and each rank connects to the root);
/// - each host to the next and the previous one (the bootstrap ring);
/// - up to kAllPairsHosts hosts every pair; beyond, the double binary tree NCCL
///   builds over nodes (src/graph/trees.cc), both ways, and for each host
///   ceil(log2 hosts) others drawn with `seed`: O(log hosts) connections per host.
std::vector<PathEdge> rehearsal_plan(size_t hosts, uint64_t seed);

}  // namespace rankcheck
