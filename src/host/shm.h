#pragma once
// /dev/shm in this process's mount namespace (under RANKCHECK_SYSFS_ROOT's root when
// set, as the rest of sysfs), with what NCCL's SHM transport would put there.

#include "base/env.h"
#include "host/sysfs_ib.h"
#include "model/shm.h"

namespace rankcheck {

/// statvfs of <root>/dev/shm; `env` is the effective NCCL_* environment (NCCL's
/// configuration files applied) for the segment's size and NCCL_SHM_DISABLE,
/// NCCL_P2P_DISABLE.
ShmFacts read_shm(const SysFs& sys, const EnvMap& env);

}  // namespace rankcheck
