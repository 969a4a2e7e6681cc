// The catalogue of findings: every id once, with its severity, exit code and fix.
// docs/findings.md describes each row; a unit test keeps the two in step.

#include "model/finding.h"

#include <algorithm>
#include <iterator>
#include <set>

namespace rankcheck {
namespace {

using enum FindingId;
constexpr Severity kE = Severity::kError;
constexpr Severity kW = Severity::kWarning;
// Rows without a class are kJob: their hosts are not to blame.
constexpr FindingClass kHostCfg = FindingClass::kHostConfig;
constexpr FindingClass kProc = FindingClass::kProcess;
constexpr FindingClass kHw = FindingClass::kHardware;
constexpr FindingClass kNet = FindingClass::kNetwork;
namespace ec = exit_code;

constexpr FindingKind kCatalog[] = {
    {kMasterAddrLoopback, "master-addr-loopback", kE, ec::kMismatch,
     "set MASTER_ADDR to the master's cluster network address, or fix the name's entry in "
     "/etc/hosts, which maps it to loopback",
     kHostCfg},
    {kForeignJob, "foreign-job", kE, ec::kRejected,
     "give each job its own MASTER_PORT, and check that every process of this job has the "
     "same SLURM_JOB_ID / TORCHELASTIC_RUN_ID / --job-id"},
    {kAuthFailed, "auth-failed", kE, ec::kRejected,
     "give every process of the job the same --token-file (or RANKCHECK_TOKEN_FILE)"},
    {kWorldSizeMismatch, "world-size-mismatch", kE, ec::kMismatch,
     "every process must get the same WORLD_SIZE: fix the launcher arguments or the exported "
     "WORLD_SIZE"},
    {kDuplicateRank, "duplicate-rank", kE, ec::kMismatch,
     "each process needs its own RANK (a RANK exported once in the job script is copied into "
     "every task)"},
    {kRankOutOfRange, "rank-out-of-range", kE, ec::kMismatch, "RANK must be below WORLD_SIZE"},
    {kLauncherEnvConflict, "launcher-env-conflict", kE, ec::kMismatch,
     "two launchers, or a launcher and a hand-set variable, disagree: remove the stale value so "
     "that one launcher sets it"},
    {kLocalRankCollision, "local-rank-collision", kE, ec::kMismatch,
     "LOCAL_RANK picks the GPU: check LOCAL_RANK / SLURM_LOCALID on that host", kHostCfg},
    {kLocalWorldSizeMismatch, "local-world-size-mismatch", kE, ec::kMismatch,
     "every process on a host must get the same LOCAL_WORLD_SIZE: check --nproc-per-node / "
     "--ntasks-per-node for that host",
     kHostCfg},
    {kNcclIfnameMissing, "nccl-ifname-missing", kE, ec::kMismatch,
     "set NCCL_SOCKET_IFNAME to an interface the host has (a prefix, '=name' for one exact "
     "name, '^' to exclude)",
     kHostCfg},
    {kNcclNoInterface, "nccl-no-interface", kE, ec::kMismatch,
     "give NCCL an interface it can use on that host: set NCCL_SOCKET_IFNAME to the interface "
     "that routes between the hosts, and check NCCL_SOCKET_FAMILY and NCCL_COMM_ID",
     kNet},
    {kNcclInterfaceLoopback, "nccl-interface-loopback", kE, ec::kMismatch,
     "set NCCL_SOCKET_IFNAME to the interface that routes between the hosts (e.g. =eth0): "
     "loopback reaches no other host",
     kHostCfg},
    {kNcclInterfaceLinkLocal, "nccl-interface-link-local", kE, ec::kMismatch,
     "set NCCL_SOCKET_IFNAME to an interface with a routable address: a link-local address "
     "(169.254/16, fe80::) reaches other hosts only on one link, if at all",
     kHostCfg},
    {kNcclInterfaceSharedAddress, "nccl-interface-shared-address", kE, ec::kMismatch,
     "set NCCL_SOCKET_IFNAME to the interface that routes between the hosts (e.g. ^docker,br-,"
     "veth,virbr to exclude bridges): NCCL would connect each host to itself",
     kNet},
    {kNcclCommIdMismatch, "nccl-comm-id-mismatch", kE, ec::kMismatch,
     "give every rank the same NCCL_COMM_ID, an address:port of rank 0's host, or unset it "
     "(PyTorch and most launchers do not need it)"},
    {kNcclPathBlocked, "nccl-path-blocked", kE, ec::kMismatch,
     "open the ephemeral port range between the hosts (or narrow it with "
     "net.ipv4.ip_local_port_range and open that), or set NCCL_SOCKET_IFNAME to the interface "
     "that routes between the hosts",
     kNet},
    {kNcclNetMismatch, "nccl-net-mismatch", kE, ec::kMismatch,
     "give every host the same data network: map /dev/infiniband into the container (and "
     "install libibverbs), bring the ports up, or fix NCCL_IB_HCA / NCCL_IB_DISABLE / "
     "NCCL_NET where one host differs",
     kNet},
    {kNcclNetUnavailable, "nccl-net-unavailable", kE, ec::kMismatch,
     "NCCL_NET names the one network NCCL may use: install that plugin (or its IB devices) on "
     "the host, or unset NCCL_NET",
     kHostCfg},
    {kNcclNetPluginMismatch, "nccl-net-plugin-mismatch", kE, ec::kMismatch,
     "install the same network plugin (libnccl-net*.so) on every host and on the loader's path "
     "(LD_LIBRARY_PATH), or set NCCL_NET_PLUGIN the same way everywhere",
     kHostCfg},
    {kNcclNetPluginUnsupported, "nccl-net-plugin-unsupported", kW, ec::kMismatch,
     "install the plugin's build for the NCCL release the job loads (aws-ofi-nccl, "
     "nccl-rdma-sharp-plugins and the like name the NCCL they are built against), or unset "
     "NCCL_NET_PLUGIN where NCCL's own transports are meant",
     kHostCfg},
    {kNcclIbHcaNone, "nccl-ib-hca-none", kW, ec::kMismatch,
     "set NCCL_IB_HCA to devices the host has (a prefix, '=' for exact names, '^' to exclude, "
     "':port' for one port), or unset it; `rankcheck env` lists the host's ports",
     kHostCfg},
    {kNcclIbPortNotActive, "nccl-ib-port-not-active", kW, ec::kMismatch,
     "bring the port up (cable, switch port, subnet manager for InfiniBand: `ibstat`), or leave "
     "it out of NCCL_IB_HCA",
     kNet},
    {kNcclIbLinkLayerMismatch, "nccl-ib-link-layer-mismatch", kE, ec::kMismatch,
     "use the same link layer on every host (the NICs' mode: mlxconfig LINK_TYPE_P1), or limit "
     "NCCL_IB_HCA to ports of one link layer",
     kNet},
    {kNcclIbPortCountMismatch, "nccl-ib-port-count-mismatch", kW, ec::kMismatch,
     "give every host the same usable ports: bring the missing ones up, or set NCCL_IB_HCA to "
     "the same set everywhere",
     kNet},
    {kNcclRoceGidLinkLocal, "nccl-roce-gid-link-local", kE, ec::kMismatch,
     "give the RoCE netdev a routable IP address (NCCL then picks its RoCE v2 GID), or set "
     "NCCL_IB_GID_INDEX to the index of one (`show_gids`)",
     kNet},
    {kNcclRoceGidFamilyMismatch, "nccl-roce-gid-family-mismatch", kE, ec::kMismatch,
     "set NCCL_IB_ADDR_FAMILY (or NCCL_IB_GID_INDEX) the same way on every host, and give "
     "every RoCE netdev an address of that family",
     kNet},
    {kIbMemlockLow, "ib-memlock-low", kE, ec::kMismatch,
     "raise the locked-memory limit: `ulimit -l unlimited` (limits.conf memlock, "
     "docker --ulimit memlock=-1, Slurm PropagateResourceLimits)",
     kHostCfg},
    {kIbUverbsMissing, "ib-uverbs-missing", kW, ec::kMismatch,
     "map the RDMA devices into the container (--device=/dev/infiniband, the RDMA device "
     "plugin's rdma/ resource), or NCCL falls back to sockets",
     kHostCfg},
    {kShmTooSmall, "shm-too-small", kW, ec::kMismatch,
     "give the container more /dev/shm: docker run --shm-size=1g (or --ipc=host), in "
     "Kubernetes an emptyDir of medium Memory mounted at /dev/shm; remove stale "
     "/dev/shm/nccl-* files of killed jobs",
     kHostCfg},
    {kPcieLinkDegraded, "pcie-link-degraded", kW, ec::kGpu,
     "reseat the card or its riser and check the slot (lspci -vv: LnkSta against LnkCap; the "
     "BIOS's lane bifurcation); keep the host out of bandwidth-bound jobs until the link trains "
     "at its maximum",
     kHw},
    {kPcieAcsRedirect, "pcie-acs-redirect", kW, ec::kMismatch,
     "disable ACS on those bridges: in the BIOS, or as root setpci -s BRIDGE ECAP_ACS+6.w=0000 "
     "(until the next boot); in a VM with ATS, set Direct Translated P2P instead",
     kHostCfg},
    {kIommuTranslated, "iommu-translated", kW, ec::kMismatch,
     "boot the host with iommu=pt (passthrough: the IOMMU stays on, DMA is not translated), or "
     "disable the IOMMU (VT-d, AMD-Vi) in the BIOS; NCCL_NET_GDR_LEVEL=LOC keeps GPUDirect RDMA "
     "off, slower",
     kHostCfg},
    {kNcclNicFar, "nccl-nic-far", kW, ec::kMismatch,
     "let NCCL_IB_HCA name each GPU's nearest HCA (rankcheck env lists each GPU's), or bring "
     "that HCA's port up",
     kHostCfg},
    {kNcclRailMismatch, "nccl-rail-mismatch", kW, ec::kMismatch,
     "look at the hosts named: the HCA near that GPU is down, missing or left out there "
     "(rankcheck env on the host lists each GPU's HCA); keep them out of jobs that need every "
     "rail",
     kHw},
    {kNcclTopoFileInvalid, "nccl-topo-file-invalid", kE, ec::kMismatch,
     "point NCCL_TOPO_FILE at a file NCCL reads (the one the cloud's image ships, e.g. in "
     "/opt/microsoft or /etc/nccl), or unset it",
     kHostCfg},
    {kNcclPathFlooded, "nccl-path-flooded", kE, ec::kMismatch,
     "find what opens connections to that host's ephemeral ports (ss -tn on it) and stop or "
     "firewall it, then run the job again: the path itself was reached",
     kHostCfg},
    {kNcclPathUnproven, "nccl-path-unproven", kE, ec::kMismatch,
     "read that host's own report (its stderr) for why: a report or plan rewritten on the way "
     "(something on the path between it and the master), or a prober that died",
     kHostCfg},
    {kDuplicateGpu, "duplicate-gpu", kE, ec::kMismatch,
     "NCCL refuses two ranks on one GPU at init, after every other rank has waited: give each "
     "process its own device (LOCAL_RANK must differ, and CUDA_VISIBLE_DEVICES must not pin "
     "them to one GPU)",
     kHostCfg},
    {kNcclVersionMismatch, "nccl-version-mismatch", kE, ec::kMismatch,
     "every rank must load the same NCCL: install one version everywhere, or point --nccl-lib "
     "(RANKCHECK_NCCL_LIB) at the library the training job loads, e.g. the one inside its "
     "PyTorch",
     kHostCfg},
    {kUnevenRanksPerHost, "uneven-ranks-per-host", kW, ec::kMismatch,
     "start the same number of ranks on every host (srun --ntasks-per-node, torchrun "
     "--nproc-per-node, the pods' GPU requests); where the job means its hosts to differ, "
     "load an NCCL release without the fault named"},
    {kNcclKnownFault, "nccl-known-fault", kW, ec::kMismatch,
     "load another NCCL release (the training job's own: --nccl-lib), or set the variable the "
     "finding names where one avoids the fault",
     kHostCfg},
    {kCudaDriverMissing, "cuda-driver-missing", kE, ec::kGpu,
     "install or load the NVIDIA driver on that host (and in the container: the NVIDIA "
     "container runtime mounts libcuda.so.1)",
     kHw},
    {kGpuMissing, "gpu-missing", kE, ec::kGpu,
     "give every rank a GPU: check the job's GPU request (--gpus-per-task, nvidia.com/gpu) and "
     "CUDA_VISIBLE_DEVICES on that host",
     kHostCfg},
    {kGpuCountMismatch, "gpu-count-mismatch", kE, ec::kGpu,
     "give the node as many GPUs as --nproc-per-node (the pod's nvidia.com/gpu limit, Slurm's "
     "--gpus-per-node), or lower --nproc-per-node",
     kHw},
    {kGpuLost, "gpu-lost", kW, ec::kGpu,
     "look at the host's GPUs (nvidia-smi -L; dmesg for Xid 79, 'fallen off the bus') and keep "
     "it out of the job until all are back; where the list names a GPU the host never had (a "
     "UUID of another host's), correct the list",
     kHw},
    {kNvlinkFabricDown, "nvlink-fabric-down", kW, ec::kGpu,
     "start or restart the Fabric Manager on that host (systemctl status nvidia-fabricmanager; "
     "on GB200 NVL racks, IMEX and the NVLink switch trays as well), then nvidia-smi -q shows "
     "each GPU's Fabric State as Completed",
     kHw},
    {kNvlinkDown, "nvlink-down", kW, ec::kGpu,
     "look at the GPU's links (nvidia-smi nvlink -s, nvidia-smi nvlink -e for errors; dmesg for "
     "Xid 74); a reset or a reboot brings a link back, a link that stays down is hardware: keep "
     "the host out of NVLink-bound jobs",
     kHw},
    {kNcclMissing, "nccl-missing", kE, ec::kGpu,
     "install NCCL on that host, or point --nccl-lib (RANKCHECK_NCCL_LIB) at the libnccl.so.2 "
     "the training job loads",
     kHostCfg},
    {kMasterAddrMismatch, "master-addr-mismatch", kW, ec::kMismatch,
     "give every process the same MASTER_ADDR and MASTER_PORT", kHostCfg},
    {kProtocolMismatch, "protocol-mismatch", kW, ec::kRejected,
     "run the same rankcheck build on every host", kHostCfg},
    {kMemberDisconnected, "member-disconnected", kE, ec::kIncomplete,
     "the process died or was killed after joining: check its log (an OOM kill, a crash, a "
     "network reset)",
     kProc},
    {kMissingRank, "missing-rank", kE, ec::kIncomplete,
     "check that the process for that rank was started, and that its host resolves and reaches "
     "MASTER_ADDR:MASTER_PORT",
     kProc},
    {kEnvMismatch, "env-mismatch", kW, ec::kMismatch,
     "set the variable the same way for every process (the job script, the container image, or "
     "the launcher's environment)",
     kHostCfg},
    {kCudaDriverMismatch, "cuda-driver-mismatch", kW, ec::kMismatch,
     "usually harmless for NCCL, but a mixed fleet hides bugs: upgrade the stragglers", kHostCfg},
    {kLocalRankWrapped, "local-rank-wrapped", kW, ec::kMismatch,
     "pick the device among those the process sees (torch.cuda.set_device(LOCAL_RANK % "
     "torch.cuda.device_count()), or device 0 when each process sees one GPU), or let every "
     "process see its node's GPUs (Slurm: --gpus-per-node rather than --gpus-per-task)"},
    {kGpuUnavailable, "gpu-unavailable", kW, ec::kGpu,
     "expected on a machine without GPUs (pass --no-gpu to say so); on a GPU node, check the "
     "driver and the container runtime",
     kHw},
    {kNcclInitFailed, "nccl-init-failed", kE, ec::kGpu,
     "NCCL_DEBUG=INFO on those ranks shows why; a network or topology error on one host "
     "usually names the interface or device",
     kHw},
    {kNcclInitTimeout, "nccl-init-timeout", kE, ec::kGpu,
     "ranks stuck in init wait for a peer they cannot reach: check the network between the "
     "hosts (NCCL_SOCKET_IFNAME, firewalls, InfiniBand ports); NCCL_DEBUG=INFO shows the "
     "bootstrap",
     kNet},
    {kAllreduceWrongResult, "allreduce-wrong-result", kE, ec::kGpu,
     "a wrong sum from NCCL means broken hardware or a broken NCCL/driver pairing on those "
     "hosts: run nccl-tests there, check the GPU's ECC and NVLink errors",
     kHw},
    {kAllreduceFailed, "allreduce-failed", kE, ec::kGpu,
     "NCCL_DEBUG=INFO on those ranks says why; an error right after a successful init usually "
     "points at the network transport (NCCL_NET, NCCL_IB_HCA)",
     kNet},
    {kAllreduceTimeout, "allreduce-timeout", kE, ec::kGpu,
     "init succeeded but data does not flow: check the inter-host links (IB/RoCE, NCCL_IB_HCA, "
     "NCCL_NET) and NCCL_DEBUG=INFO",
     kNet},
    {kBandwidthLow, "bandwidth-low", kE, ec::kGpu,
     "compare with nccl-tests on the same hosts; a slow link or a fallback to TCP "
     "(NCCL_DEBUG=INFO says NET/Socket) is the usual cause",
     kNet},
    {kIbPortErrors, "ib-port-errors", kW, ec::kGpu,
     "look at the port's link: its counters (perfquery, or the files named under "
     "/sys/class/infiniband/DEV/ports/N/counters), its cable and transceiver (mlxlink -d DEV "
     "-p N, ibdiagnet); keep the host out of jobs while the counters keep moving",
     kNet},
    {kStrayConnection, "stray-connection", kW, ec::kRejected,
     "something else on the network talks to MASTER_PORT: a port scanner, a health check, or a "
     "process of another run; harmless to this check unless it repeats"},
    {kMasterInterrupted, "master-interrupted", kE, ec::kIncomplete,
     "the scheduler or someone stopped rank 0 (pre-emption, scancel, Ctrl-C): see why, and run "
     "the check again"},
    {kMasterUnreachable, "master-unreachable", kE, ec::kIncomplete,
     "check that rank 0 is running and that this host resolves MASTER_ADDR and reaches "
     "MASTER_PORT; compare MASTER_ADDR/MASTER_PORT with rank 0's",
     kProc},
    {kMasterLost, "master-lost", kE, ec::kIncomplete,
     "read rank 0's log and report: it was killed, crashed, or the network between the hosts "
     "failed",
     kProc},
    {kLateJoin, "late-join", kE, ec::kIncomplete,
     "raise --timeout, or find why this host started late", kProc},
    {kMasterPortInUse, "master-port-in-use", kE, ec::kCannotListen,
     "pick another MASTER_PORT, or stop the process that holds it (ss -ltnp names it)"},
    {kMasterAddrNotLocal, "master-addr-not-local", kE, ec::kCannotListen,
     "set MASTER_ADDR to a name or address of the host rank 0 runs on"},
    {kMasterListenFailed, "master-listen-failed", kE, ec::kCannotListen,
     "the training job would fail to listen the same way: check MASTER_ADDR and MASTER_PORT "
     "against this host's addresses and policies"},
    {kConnectionFlood, "connection-flood", kE, ec::kIncomplete,
     "find what opens connections to MASTER_PORT from that address (ss -tnp on it) and stop or "
     "firewall it; a job token keeps strangers from joining, a port only the job knows keeps "
     "them from finding it"},
    {kMasterOutOfFds, "master-out-of-fds", kE, ec::kIncomplete,
     "raise rank 0's open-files limit to the world size and more (ulimit -n in the job script "
     "where the hard limit allows; LimitNOFILE= for a systemd service, the container's "
     "--ulimit nofile=, or the limits Slurm propagates with PropagateResourceLimits)",
     kHostCfg},
    {kLateStart, "late-start", kW, ec::kIncomplete,
     "each process's --timeout counts from its own start: find why those processes started "
     "late (a slow node, a container image pull), or give every process the job's start in "
     "RANKCHECK_START_TIME so that they share one deadline",
     kProc},
    {kRelayLost, "relay-lost", kW, ec::kIncomplete,
     "a host's relay runs in the first rankcheck process of the host: find why that process "
     "died (dmesg, the OOM killer, the scheduler's log); its members joined directly. "
     "--no-relay makes every process connect to rank 0 directly",
     kProc},
    {kClockSkew, "clock-skew", kW, ec::kIncomplete,
     "synchronise that host's clock (chronyc tracking, timedatectl): rankcheck compares start "
     "times across hosts, and so do the training job's logs and timeouts",
     kHostCfg},
    {kNoJobToken, "no-job-token", kW, ec::kRejected,
     "give every process the same --token-file (RANKCHECK_TOKEN_FILE; the Slurm and Kubernetes "
     "recipes make one): without one, anyone who reaches MASTER_PORT can claim a rank, pass or "
     "fail the job, and is handed the NCCL id (docs/security.md)"},
    {kInitBlocked, "init-blocked", kE, ec::kIncomplete,
     "the ranks named never began their distributed init while the others wait in theirs: "
     "read what they printed last (a crash before init_process_group, a data loader, an image "
     "still pulling, a different code path); the waiting ranks are a consequence",
     kProc},
    {kJobRankFailed, "job-rank-failed", kE, ec::kJobFailed,
     "read the named rank's own error (shown): it failed first; the other ranks' timeouts, "
     "resets and exits that followed are a consequence of it",
     kProc},
    {kJobStalled, "job-stalled", kE, ec::kJobFailed,
     "the named ranks printed nothing and passed no marker for --stall-after while the others "
     "went on: look at them first (py-spy dump, gdb, the GPU's state with nvidia-smi)",
     kProc},
    {kLaunchFailed, "launch-failed", kE, ec::kIncomplete,
     "the job's processes never started: read the launcher's, scheduler's or container "
     "runtime's line shown (an ssh that cannot log in, a daemon or binary not on the node's "
     "PATH, no node with the resources asked for, an image that cannot be pulled, a prolog "
     "that failed) and fix that first; nothing the ranks printed explains it",
     kProc},
    {kNodeLost, "node-lost", kE, ec::kIncomplete,
     "a node of the job went away while it ran (the scheduler or the launcher lost its "
     "daemon, its heartbeats stopped): check that node's health (power, network, the kernel "
     "log, the scheduler's node state) and leave it out of the next try; the other ranks' "
     "errors are a consequence",
     kHw},
    {kProcessDied, "process-died", kE, ec::kIncomplete,
     "read the error the process died of (shown as evidence); a process killed without one "
     "(signal 9) was most likely taken by the kernel's OOM killer or the scheduler: check dmesg "
     "and the job's memory limit on that host",
     kProc},
    {kPeerFailed, "peer-failed", kE, ec::kIncomplete,
     "no peer shows an error of its own: look for a process that died silently (dmesg, the "
     "scheduler's log) and check the network between the hosts named",
     kProc},
    {kCollectiveDesync, "collective-desync", kE, ec::kGpu,
     "the ranks named did not issue the same collective as the others: look for a branch that "
     "only some ranks take (a condition on the rank, uneven data, an early exit)"},
    {kCollectiveTimeout, "collective-timeout", kE, ec::kGpu,
     "every rank entered the collective and none finished: check the network between the hosts "
     "(NCCL_DEBUG=INFO, NCCL_SOCKET_IFNAME, NCCL_IB_HCA) and the GPUs (dmesg for Xid errors)",
     kNet},
    {kJobCancelled, "job-cancelled", kE, ec::kIncomplete,
     "the scheduler ended the job (time limit, pre-emption, node failure, scancel): what the "
     "ranks printed afterwards is a consequence; raise the time limit or find what hung before it"},
    {kGpuOutOfMemory, "gpu-out-of-memory", kE, ec::kGpu,
     "the GPU ran out of memory on the rank named: a smaller batch or model shard, activation "
     "checkpointing, or another process on that GPU (nvidia-smi) to stop; inside NCCL, lower "
     "NCCL_BUFFSIZE or NCCL_NCHANNELS_PER_NET_PEER"},
    {kHostOutOfMemory, "host-out-of-memory", kE, ec::kIncomplete,
     "the host ran out of memory (the kernel's OOM killer, or the container's or the job's "
     "memory limit): raise the limit (--mem, resources.limits.memory) or use less host memory "
     "(data loader workers, pinned buffers)",
     kProc},
    {kCudaError, "cuda-error", kE, ec::kGpu,
     "a CUDA call failed on the rank named: read the error shown; for an illegal address or a "
     "device-side assert rerun with CUDA_LAUNCH_BLOCKING=1, for ECC or Xid errors check dmesg and "
     "nvidia-smi -q on that host and drain it",
     kHw},
    {kNcclNetworkError, "nccl-network-error", kE, ec::kGpu,
     "NCCL's network failed on the host named: check its links (ibstat, ibv_devinfo, ip link), "
     "NCCL_IB_HCA, NCCL_SOCKET_IFNAME and the firewall between the hosts; a peer that died first "
     "shows its own error",
     kNet},
    {kSharedMemoryExhausted, "shared-memory-exhausted", kE, ec::kGpu,
     "/dev/shm is too small for NCCL (a container's default is 64 MB): run the container with "
     "--ipc=host or --shm-size, or mount an emptyDir of medium Memory at /dev/shm",
     kHostCfg},
    {kIdentityInvalid, "identity-invalid", kE, ec::kMismatch,
     "give every process its rank, the world size and rank 0's address (RANK, WORLD_SIZE, "
     "MASTER_ADDR, MASTER_PORT, or the launcher's own variables): the line shown names what was "
     "missing or wrong; `rankcheck env` in the job's environment shows every source it reads"},
    {kUnexplainedError, "unexplained-error", kE, ec::kIncomplete,
     "no message rankcheck knows explains this failure: read the lines shown, from the first; "
     "the rank and host named printed the first of them",
     kProc},
};

// FindingId indexes the table: a row out of place is a build error.
constexpr bool in_order() {
  for (size_t i = 0; i < std::size(kCatalog); ++i) {
    if (static_cast<size_t>(kCatalog[i].id) != i) return false;
  }
  return true;
}
static_assert(in_order(), "kCatalog rows must follow FindingId's order");
static_assert(std::size(kCatalog) == static_cast<size_t>(kUnexplainedError) + 1,
              "every FindingId has a row");

}  // namespace

std::span<const FindingKind> finding_catalog() {
  return kCatalog;
}

const FindingKind& finding_kind(FindingId id) {
  return kCatalog[static_cast<size_t>(id)];
}

const FindingKind* find_finding_kind(std::string_view name) {
  auto it = std::find_if(std::begin(kCatalog), std::end(kCatalog),
                         [name](const FindingKind& k) { return k.name == name; });
  return it == std::end(kCatalog) ? nullptr : it;
}

Finding make_finding(FindingId id, std::string message, std::string fix,
                     std::optional<Severity> severity) {
  const FindingKind& k = finding_kind(id);
  Finding f;
  f.id = id;
  f.severity = severity.value_or(k.severity);
  f.exit_code = k.exit_code;
  f.message = std::move(message);
  f.fix = fix.empty() ? std::string(k.fix) : std::move(fix);
  return f;
}

std::string_view Finding::name() const {
  return finding_kind(id).name;
}

bool name_no_host_when_every_host(std::vector<Finding>& findings, size_t job_hosts) {
  if (job_hosts < 2) return false;
  bool cleared = false;
  for (const Finding& f : findings) {
    FindingClass c = finding_kind(f.id).cls;
    // A path's findings name its two ends, not a host each: a blocked path in a job of
    // two hosts names both, and still says which path.
    bool path = f.id == FindingId::kNcclPathBlocked || f.id == FindingId::kNcclPathFlooded ||
                f.id == FindingId::kNcclPathUnproven;
    if (!f.is_error() || f.hosts.empty() || path || c == FindingClass::kJob ||
        c == FindingClass::kProcess)
      continue;
    std::set<std::string> named;
    for (const Finding& g : findings) {
      if (g.id == f.id && g.is_error()) named.insert(g.hosts.begin(), g.hosts.end());
    }
    if (named.size() < job_hosts) continue;
    for (Finding& g : findings) {
      if (g.id == f.id && g.is_error()) g.hosts.clear();
    }
    cleared = true;
  }
  return cleared;
}

std::string_view class_name(FindingClass c) {
  switch (c) {
    case FindingClass::kJob:
      return "job";
    case FindingClass::kHostConfig:
      return "host-config";
    case FindingClass::kProcess:
      return "process";
    case FindingClass::kHardware:
      return "hardware";
    case FindingClass::kNetwork:
      return "network";
  }
  return "job";
}

FindingClass finding_class(std::string_view name) {
  const FindingKind* k = find_finding_kind(name);
  return k == nullptr ? FindingClass::kJob : k->cls;
}

int exit_code_for(const std::vector<Finding>& findings) {
  for (const Finding& f : findings) {
    if (f.is_error()) return f.exit_code;
  }
  return exit_code::kPass;
}

}  // namespace rankcheck
