#pragma once
// Where NCCL writes its words (src/debug.cc ncclDebugInit: NCCL_DEBUG, NCCL_DEBUG_SUBSYS,
// NCCL_DEBUG_FILE), and how rankcheck has the GPU stage's NCCL write them: to a file
// of this process's own unless the user named one, at the user's level or INFO. The
// file itself is gpu/nccl_debug_file.h's; what NCCL said is read by diagnose.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/env.h"

namespace rankcheck {

/// How NCCL is to write its words in this process, from the environment it will see.
struct NcclDebugPlan {
  std::vector<std::pair<std::string, std::string>> set;  ///< to setenv, in order
  /// The file NCCL writes (the user's with %h and %p expanded as NCCL does); for a
  /// file of our own, a mkstemps template ("...-XXXXXX.log") until it is made, then
  /// "/proc/self/fd/N".
  std::string path;
  bool users_file = false;  ///< the user's NCCL_DEBUG_FILE: read, never removed
  /// The user set NCCL_DEBUG but no file: NCCL would have printed its lines on
  /// stdout, so they are printed (on stderr) after the stage.
  bool echo = false;
  /// For the user's file: the prefix of this process's lines ("host:pid:"), the only
  /// ones read (processes that share one file write each other's lines into it).
  std::string own_lines;
  /// Why the user's file was not used, for a note on stderr; "" when it was, or when
  /// none was named.
  std::string note;
};

/// `host`: this host's name as NCCL takes it (gethostname up to its first '.');
/// `pid`: this process's. A file of our own goes under TMPDIR (else /tmp).
/// `holds_a_log`: whether a file exists and is not empty (NCCL opens the user's with
/// fopen "w", emptying a log a failed job left there); none: nothing exists.
NcclDebugPlan nccl_debug_plan(const EnvMap& env, std::string_view host, long pid,
                              bool (*holds_a_log)(const std::string& path) = nullptr);

/// An NCCL_DEBUG_FILE pattern as NCCL 2.28 expands it (src/debug.cc): %h the host,
/// %p the pid, %% one '%', any other % sequence as written.
std::string expand_nccl_debug_file(std::string_view pattern, std::string_view host, long pid);

/// A path as an NCCL_DEBUG_FILE value: NCCL expands '%', so a literal one is doubled.
std::string escape_nccl_debug_file(std::string_view path);

}  // namespace rankcheck
