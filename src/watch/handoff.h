#pragma once
// `rankcheck run -- CMD` runs in two processes: the one the launcher started stays
// small and becomes the command's wrapper; the check (CUDA, NCCL and their threads,
// the GPU memory a CUDA context holds for as long as its process lives) runs in a
// child of it, which exits once its verdict is out. What the check hands the
// wrapper over a socket pair is this: the verdict, who this process is, where rank
// 0's watch server is (and on rank 0 that server's listening sockets themselves),
// and on rank 0 the check's report, which the wrapper rewrites with the job's.

#include <optional>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/result.h"
#include "model/watch.h"

namespace rankcheck {

struct Handoff {
  int code = 1;  ///< the check's exit code (the verdict)
  long rank = 0, nranks = 1;
  std::string host, job_id;
  uint16_t rendezvous_port = 0;        ///< MASTER_PORT: its sockets mark the start of init
  uint16_t watch_port = 0;             ///< rank 0's watch server; 0: the job is not watched
  std::vector<std::string> addresses;  ///< the watch server's, numeric, to try in order
  bool master = false;                 ///< rank 0: it serves the watch
  // Rank 0's only:
  std::vector<MemberWatch> members;     ///< the check's members: rank, nranks, host
  std::string json_path, metrics_path;  ///< as --json and --metrics name them ({rank} filled in)
  std::string exclude_path;             ///< as --exclude-file names it
  std::string check_json;               ///< the check's JSON report, as written ("" without --json)
  std::string check_metrics;            ///< the check's metrics, as written ("" without --metrics)
  std::vector<int> listeners;           ///< the watch server's listening sockets
};

/// Sends `h` (and its listening sockets) on a unix socket, by `by`.
Status send_handoff(int sock, const Handoff& h, Deadline by);
/// Reads what send_handoff sent, by `by`: nullopt when the other end closed first
/// (the check ended without a pass, or died).
Result<std::optional<Handoff>> read_handoff(int sock, Deadline by);

}  // namespace rankcheck
