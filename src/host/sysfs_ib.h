#pragma once
// What this host offers NCCL's IB transport, read from sysfs and /dev without
// libibverbs: the RDMA devices and their ports (/sys/class/infiniband), the uverbs
// character devices a process opens (/dev/infiniband), whether GPUDirect RDMA's
// peer-memory module is loaded (/sys/module, /sys/kernel/mm/memory_peers), and
// where the loader would find libibverbs and a network plugin.
//
// A seam like ProcFs's: `root` stands for "/" (RANKCHECK_SYSFS_ROOT), so that tests
// and a user replaying a copy of another host's sysfs read a folder instead.

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/env.h"
#include "nccl/ib.h"

namespace rankcheck {

struct SysFs {
  std::string root;  ///< stands for "/": "" reads the host itself

  /// `abs` ("/sys/class/infiniband") under the root.
  std::string path(std::string_view abs) const;
  /// The devices, their ports and GID tables, /dev/infiniband, the modules and the
  /// container markers. The memlock limit and CAP_IPC_LOCK are this process's own
  /// (under a root too).
  IbHostView read_ib() const;
  /// The error counters of every port (model/nccl_net.h's kIbErrorCounters).
  IbCounters read_ib_counters() const;
  /// Where the dynamic loader would find `name` (a file name, or a path when it has
  /// a '/'): LD_LIBRARY_PATH's folders as given, then /etc/ld.so.conf's folders and
  /// the default ones under the root. nullopt when it finds none.
  std::optional<std::string> find_library(const std::string& name,
                                          const std::string& ld_library_path) const;
  /// The folders /etc/ld.so.conf names (its includes followed), under the root: read
  /// once per process and root, the machine's file (rankcheck local reads it before it
  /// forks, for every member; a member asks for it for each library it looks for).
  const std::vector<std::string>& loader_dirs() const;
};

/// The root RANKCHECK_SYSFS_ROOT names, or the host's own.
SysFs sysfs_from_env(const EnvMap& env);

/// This host's data network for the record: `sys`'s view (the loader's libibverbs.so[.1]
/// and plugin lookup included, LD_LIBRARY_PATH from `env`) through NCCL's rules
/// (choose_nccl_net). `sources`: name -> file, for the variables NCCL's configuration
/// files set.
NcclNetFacts collect_nccl_net(const SysFs& sys, const EnvMap& env, int32_t nccl_version,
                              const std::map<std::string, std::string, std::less<>>& sources);

}  // namespace rankcheck
