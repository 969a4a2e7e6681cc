#pragma once
// NCCL's own words in the GPU stage. Before NCCL is loaded, this process has NCCL
// write its messages to a file of its own (NCCL_DEBUG_FILE, as nccl/debug.h plans);
// after the stage the file is read back, and what NCCL said (diagnose's reading of
// these lines) goes with the stage's results: a failure then quotes NCCL instead of
// asking for a rerun with NCCL_DEBUG=INFO. The user's own NCCL_DEBUG is kept, and
// their NCCL_DEBUG_FILE with it (then that file is read, and left where it is).

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nccl/debug.h"

namespace rankcheck {

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
  /// Told the name of a file that must go when the process is ended without its
  /// destructors (the watchdog's exit), and "" once it is gone.
  using KeepForExit = void (*)(const std::string& path);
  /// Applies `plan`; where no file of our own can be made, sets nothing and says why
  /// in `*why`.
  NcclDebugFile(NcclDebugPlan plan, std::string* why, KeepForExit keep = nullptr);
  ~NcclDebugFile();
  NcclDebugFile(const NcclDebugFile&) = delete;
  NcclDebugFile& operator=(const NcclDebugFile&) = delete;

  /// Whether NCCL was told where to write (and there is a file to read).
  bool active() const { return active_; }
  const NcclDebugPlan& plan() const { return plan_; }
  /// What NCCL has said so far in this process (read_bounded_lines); the lines are
  /// printed on stderr too where the user asked for NCCL_DEBUG without a file.
  std::vector<std::string> read() const;

 private:
  NcclDebugPlan plan_;
  bool active_ = false;
  int fd_ = -1;         // our file, unlinked, while NCCL and the reading need it
  bool named_ = false;  // our file kept its name (no /proc): removed at the end
  KeepForExit keep_ = nullptr;
};

}  // namespace rankcheck
