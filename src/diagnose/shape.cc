// What a failure line that no row explains says by its shape alone: who printed it
// (a launcher, MPI's or NCCL's network transport, a Ray daemon) or what it is (a
// process's own crash). Collected logs say this much more often than they print a
// failure of no kind at all.

#include <algorithm>
#include <iterator>
#include <string_view>

#include "diagnose/internal.h"

namespace rankcheck::diagnose {
namespace {

// NCCL's network transports and plugins, Open MPI's TCP transport.
constexpr std::string_view kNetworkWords[] = {
    // NCCL
    "NCCL WARN NET/", "transport/net", "net_ib", "net_socket", "misc/socket.cc", "NET/OFI",
    "NET/IB",
    // Open MPI
    "btl: tcp", "btl_tcp"};
// The launchers, the job's container and its scheduler step: the job did not start.
constexpr std::string_view kLaunchWords[] = {
    // Slurm and its container plugins
    "sbatch: error", "salloc: error", "srun: error", "sbatch: fatal", "srun: fatal",
    "slurmstepd: error", "pyxis:", "[enroot",
    // the job's environment: Lmod's modules
    "Lmod has detected",
    // MPICH's Hydra (and any mpiexec: SGI MPT's mpiexec_mpt), Open MPI's ORTE and PRRTE, LSF
    "mpiexec", "[proxy:", "HYD_", "HYDU_", "mpirun: ", "mpirun was unable", "unable to run mpirun",
    "prterun", "PRTE ", "ORTE ", "orted:", " orted ", "lsb_",
    // Horovod, pdsh (DeepSpeed), DeepSpeed's runner, a Kubernetes client
    "Launcher failed", "horovodrun", "pdsh@", "runner.py:", "Failed to list *v1."};
// A process's own crash: a Python traceback or exception, a failed assertion, a signal,
// a native stack trace, an exit status.
constexpr std::string_view kCrashWords[] = {
    // Python, C++
    "Traceback (most recent call last)", "Exception", "Error: ", "Assertion", "assert",
    "terminate called", "Abort(", "Aborted",
    // signals, native traces, exit statuses
    "SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE", "SIGILL", "Segmentation fault", "core dumped", "(+0x",
    "frame #", "xit code", "exitcode", "Killed"};

// Ray's own daemons: the GCS (the head node's) and a node's raylet; a node without
// them is lost with every worker on it.
constexpr std::string_view kRayDaemonWords[] = {
    "(pid=gcs_server)", "(gcs_server)",   "(raylet)",   "(raylet,",
    "gcs_server.out",   "gcs_server.err", "raylet.out", "raylet.err"};

template <size_t N>
bool holds_any(std::string_view text, const std::string_view (&words)[N]) {
  return std::any_of(std::begin(words), std::end(words),
                     [&](std::string_view w) { return text.find(w) != std::string_view::npos; });
}

}  // namespace

Shape shape_of(std::string_view text) {
  if (holds_any(text, kRayDaemonWords))
    return {FindingId::kNodeLost,
            "(a Ray daemon: the node is lost with its workers) printed a failure that no message "
            "rankcheck knows"};
  if (holds_any(text, kNetworkWords))
    return {FindingId::kNcclNetworkError,
            "printed a network transport error that no message rankcheck knows"};
  if (holds_any(text, kLaunchWords))
    return {FindingId::kLaunchFailed,
            "could not launch the job, in words no message rankcheck knows"};
  if (holds_any(text, kCrashWords))
    return {FindingId::kProcessDied, "failed with an error that no message rankcheck knows"};
  return {FindingId::kUnexplainedError,
          "printed a failure that no message rankcheck knows explains"};
}

}  // namespace rankcheck::diagnose
