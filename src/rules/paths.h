#pragma once
// What the rehearsal of NCCL's connections found (rehearsal/plan.h made its plan),
// as findings: the nccl-path-* ones, grouped by host and direction.

#include <string>
#include <vector>

#include "model/finding.h"
#include "model/path.h"

namespace rankcheck {

/// The findings of a rehearsal, initiating failures first: the hosts whose paths
/// nobody proved (`unproven`: a prober whose report the master could not take, or
/// that refused its plan or left), hosts nobody reaches (inbound blocked), hosts that
/// reach nobody (outbound blocked), hosts cut off both ways, then the remaining
/// failures as splits between groups of hosts.
std::vector<Finding> attribute_paths(const std::vector<PathHost>& hosts,
                                     const std::vector<PathResult>& results,
                                     std::vector<std::string> unproven = {});

}  // namespace rankcheck
