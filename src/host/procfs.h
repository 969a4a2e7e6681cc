#pragma once
// What rankcheck reads from /proc, in one place: a seam like the environment's,
// so that a test can point it at a folder of its own.

#include <optional>
#include <string>

#include "base/result.h"
#include "model/job.h"

namespace rankcheck {

struct ProcFs {
  std::string root = "/proc";

  /// net.core.somaxconn: the listen backlog the kernel allows, if readable.
  std::optional<long> somaxconn() const;

  struct Memory {
    long rss_kib = -1;   ///< VmRSS
    long peak_kib = -1;  ///< VmHWM: unlike getrusage's ru_maxrss, this process's own peak
  };
  /// This process's memory; -1 where /proc does not say (a process out of file
  /// descriptors cannot open it): unknown, never 0 KiB.
  Memory self_memory() const;

  /// The first line of driver/nvidia/version (the open or proprietary kernel
  /// module's banner), or "" when there is none.
  std::string nvidia_version_banner() const;
};

/// The open-file limits and the memory of this process, for the master's decision:
/// VmHWM, not getrusage's ru_maxrss, which keeps the peak of whatever process exec'd
/// this one.
ProcessFacts process_facts(const ProcFs& proc = {});

}  // namespace rankcheck
