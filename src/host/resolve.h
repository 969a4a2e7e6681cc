#pragma once
// Name resolution with a deadline: MASTER_ADDR as this host resolves it.

#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/result.h"

namespace rankcheck {

/// Numeric addresses `name` resolves to (IPv4 first), within the deadline. The
/// lookup runs on a helper thread so that a stuck resolver cannot outlive it.
Result<std::vector<std::string>> resolve_host(const std::string& name, Deadline deadline);

}  // namespace rankcheck
