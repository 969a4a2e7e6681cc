#pragma once
// NCCL's own words in the GPU stage. Before NCCL is loaded, this process has NCCL
// write its messages to a file of its own (NCCL_DEBUG_FILE); after the stage the
// file is read back, and what NCCL said (diagnose::read_nccl_words) goes with the
// stage's results: a failure then quotes NCCL instead of asking for a rerun with
// NCCL_DEBUG=INFO. The user's own NCCL_DEBUG is kept, and their NCCL_DEBUG_FILE with
// it (then that file is read, and left where it is).

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/env.h"
#include "diagnose/diagnose.h"

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
};

/// `host`: this host's name as NCCL takes it (gethostname up to its first '.');
/// `pid`: this process's. A file of our own goes under TMPDIR (else /tmp).
NcclDebugPlan nccl_debug_plan(const EnvMap& env, std::string_view host, long pid);

/// An NCCL_DEBUG_FILE pattern as NCCL 2.28 expands it (src/debug.cc): %h the host,
/// %p the pid, %% one '%', any other % sequence as written.
std::string expand_nccl_debug_file(std::string_view pattern, std::string_view host, long pid);

/// Room for the lines of NCCL's file that are read back.
inline constexpr size_t kNcclDebugReadMax = 64 * 1024;
/// Of a longer file, this much of its start is kept (the network NCCL chose is said
/// early, during init) and the rest of the room goes to its end (the errors).
inline constexpr size_t kNcclDebugHead = 8 * 1024;

/// The lines of a file, at most `max_bytes` of them: of a longer file, its first
/// `head_bytes` and its last lines, each whole (the line a cut falls in is dropped).
/// Empty when the file cannot be read.
std::vector<std::string> read_bounded_lines(const std::string& path,
                                            size_t max_bytes = kNcclDebugReadMax,
                                            size_t head_bytes = kNcclDebugHead);

/// A plan applied to this process: the file made and the variables set (NCCL reads
/// them once, at its first message: they must be set before NCCL is loaded). A file
/// of our own has no name once made: NCCL writes it, and it is read, through
/// /proc/self/fd (where there is no /proc, it keeps its name and is removed when this
/// ends, or by the watchdog's exit).
class NcclDebugFile {
 public:
  /// Applies `plan`; where no file of our own can be made, sets nothing and says why
  /// in `*why`.
  NcclDebugFile(NcclDebugPlan plan, std::string* why);
  ~NcclDebugFile();
  NcclDebugFile(const NcclDebugFile&) = delete;
  NcclDebugFile& operator=(const NcclDebugFile&) = delete;

  /// Whether NCCL was told where to write (and there is a file to read).
  bool active() const { return active_; }
  const NcclDebugPlan& plan() const { return plan_; }
  /// What NCCL has said so far in this process; its lines are printed on stderr
  /// first where the user asked for NCCL_DEBUG without a file.
  diagnose::NcclWords read() const;

 private:
  NcclDebugPlan plan_;
  bool active_ = false;
  int fd_ = -1;         // our file, unlinked, while NCCL and the reading need it
  bool named_ = false;  // our file kept its name (no /proc): removed at the end
};

}  // namespace rankcheck
