#pragma once
// The record this member sends: its identity, this host's facts and its GPUs.

#include <optional>
#include <string>

#include "base/deadline.h"
#include "base/env.h"
#include "host/interfaces.h"
#include "model/gpu.h"
#include "model/record.h"

namespace rankcheck {

/// This member's record: its identity, host facts, MASTER_ADDR resolved (by
/// `resolve_by`), the interface NCCL's rules pick, its GPUs. `view`: the host's
/// interfaces and network namespace when already read (null: read here).
Record self_record(const Identity& id, const std::optional<std::string>& host_name,
                   const EnvMap& env, Deadline resolve_by, GpuFacts gpu = {},
                   const HostView* view = nullptr);

}  // namespace rankcheck
