// The messages `rankcheck diagnose` knows, as data: one row per message, most
// specific first (a line takes the first row that matches it). Each row names the
// text the program prints, where it comes from, what it says about the job and
// which finding it leads to. The wording was read in the projects' sources (NCCL
// src/init.cc, src/bootstrap.cc, src/misc/socket.cc; PyTorch's ProcessGroupNCCL.cpp,
// TCPStore.cpp, socket.cpp, distributed_c10d.py, torch.distributed.elastic; Slurm's
// src/srun/launch.c and slurmstepd/req.c; Open MPI 4.1's help-orterun.txt) or, for
// the CUDA runtime's closed strings, in users' logs; several versions' wordings are
// separate rows. docs/findings.md explains the findings they lead to.

#include <array>
#include <iterator>
#include <stdexcept>
#include <tuple>

#include "diagnose/diagnose.h"
#include "diagnose/internal.h"

namespace rankcheck::diagnose {
namespace {

using enum MessageClass;
using enum Role;
using F = FindingId;

// Regexes are ECMAScript (std::regex), run only on lines that hold the row's
// literal, and only on a window of the line around it. std::regex backtracks: no
// two pieces of a pattern may match the same run of text (` *[:=]? *`), and no
// open-ended piece may run past the next occurrence of its own literal (`[^)]*`
// after "(", `.*?` before " (v"): tests/integration/test_diagnose.py feeds each
// row long runs of blanks, of its punctuation and of its literal.
constexpr Pattern kCatalogue[] = {
    // -- rankcheck's own verdicts: already decided --------------------------------
    {"rankcheck_member_verdict", "rankcheck", kRankcheck, kInitiating, F::kMissingRank,
     "rankcheck: FAIL",
     R"(rankcheck: FAIL(?: \(job [^)]*\))?: (.*); this is ranks? ([0-9]+)(?:-[0-9]+)? on (\S+)(?: \[([a-z0-9-]+)\])?)",
     "detail,rank,host,id", "src/report/report.cc render_member_text"},
    {"rankcheck_report_finding", "rankcheck", kRankcheck, kInitiating, F::kMissingRank,
     "\xE2\x9C\x97 ", R"(^\s*\xE2\x9C\x97 ([a-z0-9-]+)(?::\s|\s{2,})(.*)$)", "id,detail",
     "src/report/report.cc render_finding"},
    {"rankcheck_suspect_hosts", "rankcheck", kRankcheck, kInitiating, F::kMissingRank,
     "suspect hosts: ", R"(^\s*suspect hosts: (\S+)\s*$)", "host",
     "src/report/report.cc render_text, render_member_text"},
    {"rankcheck_cannot_run", "rankcheck", kSetup, kInitiating, F::kIdentityInvalid,
     "rankcheck: cannot run: ", R"(rankcheck: cannot run: (.*)$)", "detail",
     "src/app/output.cc usage_problems"},

    // -- a rank's own setup: initiating wherever it appears ---------------------
    {"nccl_duplicate_gpu", "NCCL", kSetup, kInitiating, F::kDuplicateGpu, "Duplicate GPU detected",
     R"(Duplicate GPU detected : rank (\d+) and rank (\d+) both on CUDA device ([0-9a-fA-F]+))",
     "rank,rank2,detail", "nccl src/init.cc initTransportsRank (2.7-2.29)"},
    {"nccl_multi_rank_gpu", "NCCL", kSetup, kInitiating, F::kDuplicateGpu,
     "Multiple Ranks are using the same GPU", "", "",
     "nccl src/init.cc initTransportsRank (2.30 and later)"},
    {"nccl_version_mismatch", "NCCL", kSetup, kInitiating, F::kNcclVersionMismatch,
     "Mismatched NCCL version detected", R"(rank (\d+) version (\d+) rank (\d+) version (\d+))",
     "rank,detail,rank2,id", "nccl src/init.cc initTransportsRank"},
    {"nccl_rank_checked_in", "NCCL", kSetup, kInitiating, F::kDuplicateRank,
     "has already checked in", R"(rank (\d+) of (\d+) has already checked in)", "rank,world",
     "nccl src/bootstrap.cc bootstrapRoot"},
    {"nccl_no_socket_interface", "NCCL", kSetup, kInitiating, F::kNcclIfnameMissing,
     "Bootstrap : no socket interface found", "", "", "nccl src/bootstrap.cc bootstrapNetInit"},
    {"nccl_no_listening_interface", "NCCL", kSetup, kInitiating, F::kNcclIfnameMissing,
     "No usable listening interface found", "", "", "nccl src/bootstrap.cc bootstrapNetInit"},
    {"nccl_no_subnet_interface", "NCCL", kSetup, kInitiating, F::kNcclIfnameMissing,
     "No interface found in the same subnet as remote address",
     R"(same subnet as remote address (\S+))", "detail",
     "nccl src/misc/socket.cc ncclFindInterfaceMatchSubnet"},
    // Debian's and Ubuntu's /etc/hosts give the machine's own name 127.0.1.1: a peer
    // whose address came from its host name (Gloo's and c10d's, a MASTER_ADDR by name)
    // sends the others to themselves. A connection to it that failed is that.
    {"connect_debian_hostname", "any", kSetup, kInitiating, F::kNcclInterfaceLoopback, "127.0.1.1",
     R"(((?:[Cc]onnect|[Cc]onnection)\b.{0,80}?\b127\.0\.1\.1\b.*))", "detail",
     "Debian's netcfg and Ubuntu's installer: /etc/hosts \"127.0.1.1 <hostname>\""},
    {"nccl_socket_family", "NCCL", kSetup, kInitiating, F::kNcclNoInterface,
     "Socket creation failed : Address family not supported", "", "",
     "nccl src/include/socket.h (2.3-2.8), src/misc/socket.cc (2.9-2.23): socket() for the "
     "chosen interface's family, EAFNOSUPPORT: no interface of that family here"},
    // -- the fabric under MPI and UCX: what NCCL's own rows say for NCCL -----------
    {"ucx_create_cq_memlock", "UCX", kSetup, kInitiating, F::kIbMemlockLow, "ibv_create_cq(",
     R"(ibv_create_cq\([^()]*\) failed: Cannot allocate memory)", "",
     "ucx src/uct/ib/base/ib_iface.c: ENOMEM from the verbs driver, whose queues are locked "
     "memory (RLIMIT_MEMLOCK)"},
    {"nccl_ibv_reg_mr_memlock", "NCCL", kSetup, kInitiating, F::kIbMemlockLow,
     "Cannot allocate memory",
     R"(Call to (ibv_reg_mr|ibv_reg_mr_iova2|ibv_create_cq|ibv_create_qp) failed with error Cannot allocate memory)",
     "detail",
     "nccl src/misc/ibvwrap.cc IBV_PTR_CHECK_ERRNO: ENOMEM from registering memory or making a "
     "queue, which the verbs driver locks (RLIMIT_MEMLOCK): the memlock limit, not the host's "
     "memory (ibv_reg_dmabuf_mr is GPU memory, not locked: an NCCL_BUFFSIZE too large)"},
    {"ucx_posix_iface", "UCX", kSetup, kInitiating, F::kSharedMemoryExhausted,
     "uct_iface_open(posix", R"(uct_iface_open\(posix/[^)]*\) failed)", "",
     "ucx src/ucp/core/ucp_worker.c: the posix shared-memory transport (/dev/shm) cannot open"},
    {"psm3_open_nic", "PSM3", kSetup, kInitiating, F::kNcclNetUnavailable, "can't open nic unit",
     R"(PSM3? can't open nic unit)", "",
     "libfabric prov/psm3: the provider finds no usable NIC (a container's eth0 taken for one)"},
    {"torch_address_in_use", "PyTorch", kSetup, kInitiating, F::kMasterPortInUse,
     "Address already in use", R"((?:bind to |on )\[?([0-9A-Za-z:.\-]*?)\]?:(\d+) \(errno: 98)",
     "host,port", "torch/csrc/distributed/c10d/socket.cpp SocketListenOp"},
    {"gloo_address_size", "gloo", kSetup, kInitiating, F::kWorldSizeMismatch,
     "sizeof(impl_) == bytes.size()", R"(bytes\.size\(\)\. (\d+) vs (\d+))", "detail,id",
     "gloo/transport/tcp/address.cc: peers' address blobs differ in size"},
    {"cuda_invalid_ordinal", "CUDA", kSetup, kInitiating, F::kGpuCountMismatch,
     "invalid device ordinal", "", "", "cudaErrorInvalidDevice, through PyTorch"},
    {"cuda_no_device", "CUDA", kSetup, kInitiating, F::kGpuMissing,
     "no CUDA-capable device is detected", "", "", "cudaErrorNoDevice, through PyTorch"},
    {"cuda_device_busy", "CUDA", kSetup, kInitiating, F::kDuplicateGpu, "busy or unavailable",
     R"(CUDA-capable device\(s\) is/are busy or unavailable)", "",
     "cudaErrorDevicesUnavailable, through PyTorch"},

    // -- the scheduler ended the job --------------------------------------------
    {"slurm_cancelled", "Slurm", kExternalEnd, kInitiating, F::kJobCancelled, "CANCELLED AT",
     // Slurm 2.6-14.03 printed no "ON node"; some sites' builds name it after the reason.
     R"(\*\*\* (?:STEP|JOB) (\S+)(?: ON (\S+))? CANCELLED AT (\S+)(?: (DUE (?:TO|to) [^*]*?))? ?\*\*\*)",
     "id,host,detail,op", "slurm src/slurmd/slurmstepd/req.c _handle_signal_container"},
    {"torchrun_death_signal", "torchrun", kExternalEnd, kInitiating, F::kJobCancelled,
     "death signal, shutting down workers", R"(Received (\d+) death signal)", "signal",
     "torch/distributed/elastic/agent/server/api.py"},

    // -- launchers' records of a process that ended ------------------------------
    {"srun_task_exit", "Slurm", kProcessDied, kEither, F::kProcessDied, "srun: error: ",
     R"(srun: error: (\S+): tasks? ([0-9,\-]+): (Exited with exit code (\d+)|[A-Z][^:]*)$)",
     "host,tasks,detail,exit", "slurm src/srun/launch.c _task_finish"},
    {"slurmstepd_oom", "Slurm", kOwnError, kInitiating, F::kHostOutOfMemory, "oom_kill event",
     R"(Detected (\d+) oom_kill event)", "detail",
     "slurm src/plugins/task/cgroup/task_cgroup_memory.c"},
    {"mpirun_signal", "Open MPI", kProcessDied, kEither, F::kProcessDied,
     "noticed that process rank",
     R"(noticed that process rank (\d+) with PID (\d+) on node (\S+) exited on signal (\d+)(?: \(([^)]*)\))?)",
     "rank,pid,host,signal,detail", "ompi orte/tools/orterun/help-orterun.txt proc-aborted"},
    {"mpirun_exited_improperly", "Open MPI", kProcessDied, kEither, F::kProcessDied,
     "has exited due to process rank", R"(process rank (\d+) with PID (\d+))", "rank,pid",
     "ompi help-orterun.txt proc-exit-no-sync"},
    {"mpirun_first_nonzero", "Open MPI", kProcessDied, kEither, F::kProcessDied, "Process name: [[",
     R"(Process name: \[\[\d+,\d+\],(\d+)\])", "rank", "ompi help-orterun.txt non-zero-exit"},
    {"torchrun_worker_failed", "torchrun", kProcessDied, kEither, F::kProcessDied,
     "failed (exitcode: ", R"(failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\))",
     "exit,local_rank,pid", "torch/distributed/elastic/multiprocessing/api.py _poll"},
    {"torchrun_closing_signal", "torchrun", kKilledByLauncher, kDownstream, F::kProcessDied,
     "Sending process ", R"(Sending process (\d+) closing signal (\w+))", "pid,detail",
     "torch/distributed/elastic/multiprocessing/api.py _close"},
    {"torch_signal_received", "torchrun", kProcessDied, kEither, F::kProcessDied,
     ") received by PID ", R"(Signal (\d+) \((\w+)\) received by PID (\d+))", "signal,detail,pid",
     "torch/distributed/elastic/multiprocessing/api.py"},

    // -- errors a process raised of its own ---------------------------------------
    {"cuda_oom", "PyTorch", kOwnError, kInitiating, F::kGpuOutOfMemory, "CUDA out of memory",
     R"((CUDA out of memory\.?(?: Tried to allocate [0-9.]+ [KMG]iB)?))", "detail",
     "c10/cuda/CUDACachingAllocator.cpp"},
    {"cuda_error_oom", "CUDA", kOwnError, kInitiating, F::kGpuOutOfMemory,
     "CUDA error: out of memory", "", "", "cudaErrorMemoryAllocation, through PyTorch"},
    {"cuda_illegal_address", "CUDA", kOwnError, kInitiating, F::kCudaError,
     "an illegal memory access was encountered", "", "", "cudaErrorIllegalAddress"},
    {"cuda_ecc", "CUDA", kOwnError, kInitiating, F::kCudaError, "uncorrectable ECC error", "", "",
     "cudaErrorECCUncorrectable"},
    {"kernel_oom_killer", "Linux", kOwnError, kInitiating, F::kHostOutOfMemory, "Killed process ",
     R"((?:Out of memory: )?Killed process (\d+) \(([^)]*)\))", "pid,detail",
     "the kernel's OOM killer (mm/oom_kill.c: \"Out of memory: Killed process\" from 5.x, "
     "\"Killed process N (comm), UID\" after \"Out of memory: Kill process\" before)"},
    {"segfault", "Linux", kOwnError, kInitiating, F::kProcessDied, "Segmentation fault", "", "",
     "SIGSEGV"},

    // -- ranks waiting for peers that never came ---------------------------------
    {"tcpstore_clients_joined", "PyTorch", kPeersAbsent, kEither, F::kMissingRank, "clients joined",
     R"(waiting for clients\. (\d+)/(\d+) clients joined)", "joined,world",
     "torch/csrc/distributed/c10d/TCPStore.cpp waitForWorkers (2.2 and later)"},
    {"tcpstore_workers_joined", "PyTorch", kPeersAbsent, kEither, F::kMissingRank, "workers joined",
     R"(waiting for workers\. (\d+)/(\d+) workers joined)", "joined,world",
     "torch/csrc/distributed/c10d/TCPStore.cpp waitForWorkers (2.1)"},
    {"store_barrier_timeout", "PyTorch", kPeersAbsent, kEither, F::kMissingRank,
     "store based barrier on rank",
     R"(store based barrier on rank:? ?(\d+), for key: (\S+) \(world_size=(\d+), (?:num_workers_joined|worker_count)=(\d+))",
     "rank,detail,world,joined", "torch/distributed/distributed_c10d.py _store_based_barrier"},
    {"store_barrier_waiting", "PyTorch", kPeersAbsent, kEither, F::kMissingRank,
     "Waiting in store based barrier",
     R"(for rank:? ?(\d+), key: (\S+) \(world_size=(\d+), (?:num_workers_joined|worker_count)=(\d+))",
     "rank,detail,world,joined", "torch/distributed/distributed_c10d.py _store_based_barrier"},
    {"rendezvous_timeout", "torchrun", kPeersAbsent, kEither, F::kMissingRank,
     "RendezvousTimeoutError", "", "",
     "torch/distributed/elastic/rendezvous/dynamic_rendezvous.py"},
    {"store_socket_timeout", "PyTorch", kPeersAbsent, kEither, F::kMissingRank, "Socket Timeout",
     "", "", "torch/csrc/distributed/c10d TCPStore client: a key no peer set"},
    {"nccl_unique_id_wait", "PyTorch", kPeerPointer, kDownstream, F::kPeerFailed,
     "ncclUniqueId from [0]", "", "",
     "ProcessGroupNCCL::broadcastUniqueNCCLID: rank 0 never published the NCCL id"},
    {"store_connect_timeout", "PyTorch", kPeerPointer, kEither, F::kMasterUnreachable,
     "The client socket has timed out after",
     R"(timed out after (\S+) while trying to connect to \(([^,]+), (\d+)\))", "detail,host,port",
     "torch/csrc/distributed/c10d/socket.cpp SocketConnectOp"},
    {"store_connect_failed", "PyTorch", kPeerPointer, kEither, F::kMasterUnreachable,
     "The client socket has failed to connect to",
     R"(failed to connect to (?:any network address of )?\(?\[?([^\]\s,)]+)\]?(?:, |:)(\d+)\)?)",
     "host,port", "torch/csrc/distributed/c10d/socket.cpp SocketConnectOp"},

    // -- pointers to a peer ---------------------------------------------------------
    {"nccl_remote_exited", "NCCL", kPeerPointer, kDownstream, F::kPeerFailed,
     "remote process exited or there was a network error", "", "",
     "nccl transport (ncclRemoteError)"},
    {"nccl_remote_error", "PyTorch", kPeerPointer, kDownstream, F::kPeerFailed, "ncclRemoteError",
     "", "", "torch/csrc/distributed/c10d/NCCLUtils.cpp getNcclErrorDetailStr"},
    {"nccl_connection_closed", "NCCL", kPeerPointer, kDownstream, F::kPeerFailed,
     "Connection closed by remote peer",
     R"(Connection closed by remote peer (\S+?)(?:<(\d+)>)?\s*$)", "host,port",
     "nccl src/misc/socket.cc socketProgressOpt"},
    {"gloo_connection_closed", "gloo", kPeerPointer, kDownstream, F::kPeerFailed,
     "Connection closed by peer", R"(Connection closed by peer \[?([^\]\s]+?)\]?:(\d+))",
     "host,port", "gloo/transport/tcp/pair.cc"},
    {"connection_reset", "gloo", kPeerPointer, kDownstream, F::kPeerFailed,
     "Connection reset by peer", "", "", "ECONNRESET"},
    {"store_server_gone", "PyTorch", kPeerPointer, kDownstream, F::kPeerFailed,
     "Did the remote server shutdown or crash?", R"(remote=\[?([^\],\s)]+)\]?:(\d+))", "host,port",
     "torch/csrc/distributed/c10d/Utils.hpp recvBytes"},
    {"nccl_comm_aborted", "PyTorch", kPeerPointer, kDownstream, F::kPeerFailed,
     "NCCL communicator was aborted on rank", R"(aborted on rank (\d+)\.)", "rank",
     "torch/csrc/distributed/c10d/NCCLUtils.cpp NCCLComm::getNcclComm"},

    // -- collective timeouts --------------------------------------------------------
    {"watchdog_timeout", "PyTorch", kCollectiveTimeout, kEither, F::kCollectiveTimeout,
     "Watchdog caught collective operation timeout",
     // PyTorch 1.x printed no SeqNum.
     R"((?:Rank (\d+)\]\s*)?Watchdog caught collective operation timeout: WorkNCCL\((?:SeqNum=(\d+), )?OpType=(\w+))",
     "rank,seq,op", "ProcessGroupNCCL.cpp WorkNCCL::checkTimeout"},
    {"watchdog_progress", "PyTorch", kCollectiveTimeout, kEither, F::kCollectiveTimeout,
     "detected by watchdog at work",
     R"(Rank (\d+)\]\s+(?:failure|Exception \(either an error or timeout\)) detected by watchdog at work(?: sequence id)?: (\d+),? (?:PG status: )?last enqueued (?:NCCL )?work: (\d+))",
     "rank,seq,enqueued", "ProcessGroupNCCL.cpp watchdog (2.3 and later)"},

    // -- recognised, and nothing on their own ----------------------------------------
    {"torchrun_child_failed", "torchrun", kContext, kDownstream, F::kProcessDied,
     "ChildFailedError", "", "", "torch/distributed/elastic/multiprocessing/errors/__init__.py"},
    {"torchrun_failure_entry", "torchrun", kProcessDied, kEither, F::kProcessDied, "", "",
     "rank,local_rank,host,exit,pid",
     "ChildFailedError.format_msg: one entry of the Failures / Root Cause table"},

    // -- torchrun's error.json (@record): the worker's exception, one JSON line ----
    {"torchrun_error_json", "torchrun", kOwnError, kInitiating, F::kProcessDied,
     "{\"message\": {\"message\": \"", R"(\{"message": \{"message": "((?:[^"\\]|\\.){1,400}))",
     "detail",
     "torch/distributed/elastic/multiprocessing/errors/error_handler.py record_exception"},

    // -- what each host says of itself: compared across hosts (conclude.cc) ---------
    {"nccl_version_banner", "NCCL", kContext, kEither, F::kNcclVersionMismatch, "NCCL version ",
     R"(NCCL version (\d+\.\d+\.\d+))", "id", "NCCL src/init.cc showVersion"},
    {"nccl_using_network", "NCCL", kContext, kEither, F::kEnvMismatch, "Using network ",
     R"(Using network (\S.*?)\s*$)", "id", "NCCL src/init.cc: the network transport chosen"},
    {"nccl_socket_using", "NCCL", kContext, kEither, F::kNcclInterfaceLoopback, " : Using ",
     R"((?:NET/Socket|Bootstrap) : Using (\S.{0,400}?)\s*$)", "id",
     "NCCL src/transport/net_socket.cc, src/bootstrap.cc: the interfaces its sockets use"},
    {"nccl_ib_using", "NCCL", kContext, kEither, F::kNcclIbLinkLayerMismatch, "NET/IB : Using",
     R"(NET/IB : Using (.*?) ?(?:\[RO\])? ?; OOB)", "id",
     "NCCL src/transport/net_ib.cc ncclIbInit: the ports its IB transport opened"},
    {"nccl_plugin_internal", "NCCL", kContext, kEither, F::kNcclNetPluginMismatch,
     "NET/Plugin: Using internal network plugin", R"(NET/Plugin: Using (internal) network plugin)",
     "id", "NCCL src/net.cc (2.21) ncclNetPluginInit"},
    // No net plugin found, the internal one used (the value "internal", reason.cc):
    // "NET/Plugin : dlerror=... No plugin found (libnccl-net.so), using internal
    // implementation" (2.19-2.20), "NET/Plugin: No plugin found (libnccl-net.so)" (2.21-2.22),
    // "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin." (2.23-2.25;
    // "net plugin." 2.26-2.27; nothing after the names 2.28).
    {"nccl_plugin_none_found", "NCCL", kContext, kEither, F::kNcclNetPluginMismatch,
     "No plugin found (", R"(NET/Plugin ?: (?:dlerror=.{0,400}? )?No plugin found \()", "",
     "NCCL src/net.cc ncclNetPluginInit (2.19-2.22)"},
    {"nccl_plugin_none_not_found", "NCCL", kContext, kEither, F::kNcclNetPluginMismatch,
     "NET/Plugin: Could not find:", "", "",
     "NCCL src/net.cc (2.23-2.25), src/plugin/plugin_open.cc (2.26-2.28) openPluginLib"},
    // The Mellanox/HPC-X plugin names its file as it starts: the plugin loaded.
    {"nccl_plugin_path", "HPC-X SHARP plugin", kContext, kEither, F::kNcclNetPluginMismatch,
     "Plugin Path : ", R"(\bPlugin Path : (\S{1,300}))", "id",
     "Mellanox/nccl-rdma-sharp-plugins src/ib_plugin.c pluginInit"},
    {"nccl_plugin_loaded", "NCCL", kContext, kEither, F::kNcclNetPluginMismatch,
     "NET/Plugin: Loaded net plugin ",
     R"(NET/Plugin: Loaded net plugin (\S[^()]{0,200}?) \(v\d+\))", "id",
     "NCCL src/net.cc, src/plugin/net/net_v*.cc: the plugin's own name"},
    {"nccl_env_set", "NCCL", kContext, kEither, F::kEnvMismatch, " set by environment to ",
     R"((NCCL_[A-Z0-9_]+) set by environment to (\S*))", "id,detail",
     "NCCL src/misc/param.cc: a parameter from the environment"},

    // A Ray node's own daemons dying: the raylet's or the GCS's fatal log line (Ray's
    // "[time C pid tid]" level, a failed check) or their native stack frames. The node
    // is lost with every worker on it (the GCS's: the cluster).
    {"ray_raylet_fatal", "Ray", kSetup, kInitiating, F::kNodeLost, "raylet",
     R"(\((?:pid=)?raylet[^)]{0,40}\) .*?(?:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ C \d+ \d+\]|Check failed:?)\s*(.{0,200})|/raylet/raylet\(\+0x[0-9a-f]+\))",
     "detail", "ray src/ray/util/logging.h RAY_LOG(FATAL) / RAY_CHECK in the raylet"},
    {"ray_gcs_fatal", "Ray", kSetup, kInitiating, F::kNodeLost, "gcs_server",
     R"(\((?:pid=)?gcs_server[^)]{0,40}\) .*?(?:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ C \d+ \d+\]|Check failed:?)\s*(.{0,200})|/gcs_server\(\+0x[0-9a-f]+\))",
     "detail", "ray src/ray/util/logging.h RAY_LOG(FATAL) / RAY_CHECK in the GCS server"},

    // A process saying which rank it is, once, as it starts: two such lines for one
    // rank are two processes given it (Knowledge::on_rank_claim, conclude.cc).
    {"rank_claim_lightning", "Lightning", kContext, kEither, F::kDuplicateRank, "GLOBAL_RANK: ",
     R"([Ii]nitializing (?:ddp|distributed): GLOBAL_RANK: (\d+), MEMBER: \d+/(\d+))", "rank,world",
     "pytorch_lightning ddp (<=1.5: \"initializing ddp\"), lightning.fabric.utilities."
     "distributed _init_dist_connection (1.6+: \"Initializing distributed\")"},
    {"rank_claim_store_barrier", "PyTorch", kContext, kEither, F::kDuplicateRank,
     "store_based_barrier_key:",
     R"(Added key: store_based_barrier_key:(\d+) to store for rank: (\d+))", "seq,rank",
     "torch/distributed/distributed_c10d.py _store_based_barrier (logger.info, 1.9-2.0)"},

    // NCCLCHECK's trace of a failed call on its way up ("misc/socket.cc:567 -> 2"): NCCL
    // prints it at INFO level, but only when a call returned an error (ncclResult_t > 0):
    // a failure line of its own (scan.cc keeps it on an INFO line), met where no row
    // explains more.
    {"nccl_return_trace", "NCCL", kErrorLine, kEither, F::kUnexplainedError,
     ".cc:", R"(NCCL INFO ([\w/.]+\.cc):\d+ -> [1-9]\d?\b)", "detail",
     "NCCL src/include/checks.h NCCLCHECK: an error's way up, at INFO level"},

    // 128 + 9: a process SIGKILLed (the OOM killer, a pod's or a job's memory limit, a
    // scheduler), as shells, containers and launchers print its exit status.
    {"exit_status_137", "any", kProcessDied, kEither, F::kProcessDied, "137",
     R"((?:\b[Ee]xit(?:ed)?(?: with)?(?: code| status)?|\b[Ee]rror code|exit_code|exitcode)[:=]? *(137)\b)",
     "exit", "128 + SIGKILL as shells and launchers print it"},

    // -- the last resort: a Python exception with its message --------------------
    {"python_exception", "Python", kOwnError, kInitiating, F::kProcessDied, "Error: ",
     R"(^\s*(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*Error): (?!Traceback \(most recent call last\))(.+)$)",
     "id,detail",
     "a Python traceback's last line (not a worker's traceback re-raised: its last line is)"},

    // -- failures no row explains: kept so that a failed job's log is never "nothing
    // found"; each is a finding only when nothing else is -------------------------
    // Open MPI's and PRRTE's show_help: a help text between two lines of 74 dashes, which
    // mpirun prints when it refuses or fails; scan.cc gives it its first line, when no
    // row reads any line of it.
    {"launcher_help_text", "Open MPI", kErrorLine, kEither, F::kUnexplainedError, "", "", "",
     "opal/util/show_help.c, prrte's show_help: a help text framed by lines of dashes"},
    {"error_traceback", "Python", kErrorLine, kEither, F::kUnexplainedError,
     "Traceback (most recent call last)", "", "", "Python's traceback header"},
    {"error_word", "any", kErrorLine, kEither, F::kUnexplainedError, "ERROR", R"(\bERROR\b)", "",
     "an error-level log line"},
    {"error_colon", "any", kErrorLine, kEither, F::kUnexplainedError, "rror:", "", "",
     "an \"error:\" or \"Error:\" line"},
    {"error_fatal", "any", kErrorLine, kEither, F::kUnexplainedError, "atal",
     R"(\b[Ff]atal\b|\bFATAL\b)", "", "a fatal line"},
    {"error_failed", "any", kErrorLine, kEither, F::kUnexplainedError, "FAILED", R"(\bFAILED\b)",
     "", "a FAILED line"},
    {"error_exception", "any", kErrorLine, kEither, F::kUnexplainedError, "Exception", "", "",
     "an exception"},
    {"error_segfault", "any", kErrorLine, kEither, F::kUnexplainedError, "Segmentation fault", "",
     "", "a segmentation fault"},
    {"error_core", "any", kErrorLine, kEither, F::kUnexplainedError, "core dumped", "", "",
     "a core dump"},
    {"error_exit_code", "any", kErrorLine, kEither, F::kUnexplainedError, "xit code",
     R"([Ee]xit code:? *-?[1-9])", "", "a non-zero exit code"},
    {"error_exitcode", "any", kErrorLine, kEither, F::kUnexplainedError, "exitcode",
     R"(exitcode *(?:[:=] *)?-?[1-9])", "", "a non-zero exit code"},
    {"error_killed", "any", kErrorLine, kEither, F::kUnexplainedError, "Killed", R"(\bKilled\b)",
     "", "a process killed"},
    {"error_signal", "any", kErrorLine, kEither, F::kUnexplainedError, "ignal",
     R"(\b[Ss]ignal \d+\b)", "", "a signal"},
    {"error_signal_name", "any", kErrorLine, kEither, F::kUnexplainedError, "SIG",
     R"(\bSIG(?:KILL|SEGV|ABRT|BUS|TERM|FPE|ILL)\b)", "",
     "a signal by name (absl's \"*** SIGSEGV received at time=\")"},
    {"error_native_frame", "any", kErrorLine, kEither, F::kUnexplainedError, "(+0x",
     R"(\(\+0x[0-9a-f]+\) \[0x[0-9a-f]+\])", "",
     "a native stack frame as glibc's backtrace_symbols prints it (a crash handler's trace)"},
    {"error_stack_trace", "any", kErrorLine, kEither, F::kUnexplainedError,
     "*** StackTrace Information ***", "", "", "Ray's fatal log (RAY_LOG(FATAL), a failed check)"},
    // The words any program uses for a failure, for the logs no row reads yet: never
    // on an INFO or DEBUG line (scan.cc), where NCCL and the launchers narrate.
    {"error_failed_word", "any", kErrorLine, kEither, F::kUnexplainedError, "ailed",
     R"(\b[Ff]ailed\b)", "", "a \"failed\" line"},
    {"error_failure", "any", kErrorLine, kEither, F::kUnexplainedError, "ailure",
     R"(\b[Ff]ailure\b)", "", "a \"failure\" line"},
    {"error_abort", "any", kErrorLine, kEither, F::kUnexplainedError, "bort",
     R"(\b[Aa]bort(?:ed|ing)?\b)", "", "an abort"},
    {"error_killed_word", "any", kErrorLine, kEither, F::kUnexplainedError, "killed",
     R"(\bkilled\b)", "", "a process killed"},
    {"error_terminated", "any", kErrorLine, kEither, F::kUnexplainedError, "erminated",
     R"(\b[Tt]erminated\b)", "", "a process terminated"},
    {"error_exceeded", "any", kErrorLine, kEither, F::kUnexplainedError, "xceed",
     R"(\b[Ee]xceed(?:ed|s)\b)", "", "a limit exceeded"},
    {"error_cannot", "any", kErrorLine, kEither, F::kUnexplainedError, "annot ", R"(\b[Cc]annot )",
     "", "a \"cannot\" line"},
    {"error_unable", "any", kErrorLine, kEither, F::kUnexplainedError, "nable to ",
     R"(\b[Uu]nable to )", "", "an \"unable to\" line"},
    {"error_denied", "any", kErrorLine, kEither, F::kUnexplainedError, "denied", R"(\bdenied\b)",
     "", "a permission or request denied"},
    {"error_timed_out", "any", kErrorLine, kEither, F::kUnexplainedError, "imed out",
     R"(\b[Tt]imed out\b)", "", "a time-out"},
    {"error_lowercase", "any", kErrorLine, kEither, F::kUnexplainedError, "error", R"(\berror\b)",
     "", "an \"error\" line"},
};

}  // namespace

// The prefilter has one bit per hand-written row (Prefilter::Mask).
static_assert(std::size(kCatalogue) <= std::tuple_size_v<Prefilter::Mask> * 64,
              "more hand-written rows than Prefilter::Mask has bits: widen it");

std::span<const Pattern> hand_rows() {
  return kCatalogue;
}

std::span<const Pattern> catalogue() {
  // The hand-written rows first, then the rows read from the programs' sources, then
  // NCCL's subsystems: the order the scanner tries them in.
  static const std::vector<Pattern> all = [] {
    std::vector<Pattern> v(std::begin(kCatalogue), std::end(kCatalogue));
    for (const SourceRow& r : source_rows())
      v.push_back(r.pattern);
    for (const Pattern& p : nccl_subsystem_rows())
      v.push_back(p);
    return v;
  }();
  return all;
}

std::vector<LineField> parse_extracts(std::string_view extracts) {
  static constexpr std::pair<std::string_view, LineField> kNames[] = {
      {"rank", LineField::kRank},
      {"rank2", LineField::kRank2},
      {"world", LineField::kWorld},
      {"joined", LineField::kJoined},
      {"host", LineField::kHost},
      {"pid", LineField::kPid},
      {"exit", LineField::kExit},
      {"signal", LineField::kSignal},
      {"seq", LineField::kSeq},
      {"op", LineField::kOp},
      {"port", LineField::kPort},
      {"tasks", LineField::kTasks},
      {"local_rank", LineField::kLocalRank},
      {"enqueued", LineField::kEnqueued},
      {"detail", LineField::kDetail},
      {"id", LineField::kId},
      {"fix", LineField::kFix},
      {"-", LineField::kCount},  // a data row's conversion that holds nothing to keep
  };
  std::vector<LineField> out;
  while (!extracts.empty()) {
    size_t comma = extracts.find(',');
    std::string_view name = extracts.substr(0, comma);
    extracts = comma == std::string_view::npos ? std::string_view() : extracts.substr(comma + 1);
    bool found = false;
    for (const auto& [n, f] : kNames) {
      if (n == name) {
        out.push_back(f);
        found = true;
      }
    }
    if (!found) throw std::invalid_argument("catalogue: unknown field '" + std::string(name) + "'");
  }
  return out;
}

}  // namespace rankcheck::diagnose
