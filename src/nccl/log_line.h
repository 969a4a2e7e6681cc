#pragma once
// NCCL's log lines (src/debug.cc ncclDebugLog): the prefix it puts before each,
// "HOST:PID:TID [CUDADEV] " (2.26+ may put a timestamp before that), and a WARN's
// "FILE:LINE NCCL WARN " marker. diagnose reads every log through these; the GPU
// stage's own NCCL file is read the same way.

#include <cstddef>
#include <string_view>

namespace rankcheck::nccl {

/// "gpu-01:4242:4250 [3] " at the start of `s`.
struct LogPrefix {
  std::string_view host;  ///< the host name as NCCL took it (up to its first '.')
  long pid = -1;
  long tid = -1;
  long dev = -1;      ///< the logging thread's CUDA device: a local index, not a rank
  size_t length = 0;  ///< the prefix's length, its trailing space included
};
/// The prefix at the start of `s`; length 0 when there is none.
LogPrefix read_log_prefix(std::string_view s);

/// Where a WARN's marker starts in `seg`: " NCCL WARN " (or "NCCL WARN " at its
/// start, blanks before it allowed), or an old NCCL's bare "file.h:LINE WARN ";
/// npos when there is none.
size_t warn_marker_at(std::string_view seg);

/// The NCCL source file of a WARN, from what precedes its marker: "misc/socket.cc"
/// of "... misc/socket.cc:484", or of 2.30's "misc/socket.cc:484 (ncclSocketConnect)";
/// the part after "src/" of a build that logs its full path; "" when there is none.
std::string_view warn_source_file(std::string_view before);

}  // namespace rankcheck::nccl
