// A fake CUDA driver and NCCL in one shared library, for tests on machines
// without GPUs. It exports the symbols rankcheck's GPU stage dlopen()s, with the
// same C signatures, and is loaded through the same path (RANKCHECK_CUDA_LIB,
// RANKCHECK_NCCL_LIB). It behaves like the NCCL version it reports, the newest
// by default. What it fakes, driven by environment variables:
//
//   FAKE_GPUS=uuid,uuid,...   the host's GPUs. "GPU-a/MIG-b" is MIG slice b of GPU a:
//                             slices of one GPU share its PCI bus id, cuDeviceGetUuid
//                             names the GPU and cuDeviceGetUuid_v2 the slice.
//                             CUDA_VISIBLE_DEVICES filters them by index, GPU- or MIG-
//                             UUID, as the driver does: it stops at the first entry that
//                             names nothing, and cuInit fails with CUDA_ERROR_NO_DEVICE
//                             (100) when nothing is left.
//   libfakegpu_r460.so        the same library built as a driver before R470 is: no
//                             cuDeviceGetUuid_v2 (CUDA 11.4), only cuDeviceGetUuid
//   FAKE_CUDA_VERSION=13000   what cuDriverGetVersion says
//   FAKE_CUDA_INIT=fail       cuInit fails (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)
//   FAKE_CUDA_INIT=hang       cuInit never returns (a GPU fallen off the bus, a driver
//                             in recovery)
//   FAKE_CUDA_CTX_MS=300      a device's primary context takes this long to create (its
//                             first cuDevicePrimaryCtxRetain; 0.1-0.5 s on a real GPU),
//                             each device's on its own
//   FAKE_CUDA_COPY=fail       copies between host and GPU fail
//   FAKE_NCCL_VERSION=22809   what ncclGetVersion says, and which NCCL the fake is:
//       2.23 and later (NCCL's group.cc: every group on a non-blocking communicator
//             runs in a thread NCCL starts): a collective, or ncclGroupEnd with one,
//             returns ncclInProgress; the work is launched onto the stream only while
//             the caller polls ncclCommGetAsyncError, after the first collective's
//             connection setup has met every rank; any other call on a communicator
//             still in progress is refused (ncclInvalidArgument), ncclCommDestroy too.
//       2.22: collectives are launched in the call; the first one's connection setup
//             (NCCL_RUNTIME_CONNECT) blocks the caller until every rank has arrived.
//       2.18-2.21: collectives are launched in the call and return at once; the
//             kernel waits on the stream for the other ranks.
//   FAKE_NCCL_INIT=fail|fail-now|hang|fail-ib   communicators fail later, fail at once
//                             with no communicator, never finish init, or fail later the
//                             way an InfiniBand queue pair that cannot reach its peer
//                             does: NCCL 2.28's WARN of misc/ibvwrap.cc ("Call to
//                             ibv_modify_qp failed with 110 Connection timed out, ..."),
//                             which is also the last error
//   FAKE_NCCL_INIT=refused    this rank's bootstrap connection is refused (no root listens
//                             where the id says): init never finishes for anyone; NCCL
//                             retries as misc/socket.cc does (v2.28.9, socketConnectCheck):
//                             attempt k sleeps k x NCCL_SOCKET_RETRY_SLEEP_MSEC (100) with an
//                             INFO line, NCCL_SOCKET_RETRY_CNT (34) times, then a WARN and
//                             ncclRemoteError (after 59.5 s). The sleeps do not look at the
//                             abort flag: ncclCommAbort returns only when the sleep under
//                             way ends (up to 3.4 s)
//   (NCCL's version banner: printed to stdout by the communicator's rank 0 at init, as
//   the version it is would: see show_version)
//   FAKE_NCCL_CONNECT=fail-tree  the tree algorithm's connections fail: at init where
//                             init connects every algorithm (before 2.22, or
//                             NCCL_RUNTIME_CONNECT=0), never under 2.22's runtime
//                             connect, where the one-element all-reduce uses the ring
//   FAKE_NCCL_CUDA=12040      the CUDA runtime the fake's NCCL was built with (NCCL links
//                             cudart statically; its banner says "+cuda12.4"). Where the
//                             driver supports an older major version (FAKE_CUDA_VERSION),
//                             NCCL's first CUDA call fails with cudaErrorInsufficientDriver
//                             (35): ncclCommInitRankConfig warns "Cuda failure 'CUDA driver
//                             version is insufficient for CUDA runtime version'" (from
//                             misc/cudawrap.cc, then init.cc: CUDACHECK, v2.28.9) and returns
//                             ncclUnhandledCudaError with no communicator. Default: the
//                             driver's own version (minor versions are compatible)
//   FAKE_NCCL_NET=Socket      the network init picks and says ("Using network Socket";
//                             IB under fail-ib)
//   FAKE_NCCL_ALLREDUCE=MODE  the one-element (int64) all-reduce: wrong (a total one too
//                             high), hang (this rank never arrives), fail-now (the call
//                             fails), neterr (this rank connects but its data never arrives,
//                             and 100 ms after the launch ncclCommGetAsyncError reports a
//                             network error);
//                             bandwidth-hang, bandwidth-fail-now, bandwidth-neterr: the
//                             same for the float all-reduces of --bandwidth only
//   FAKE_NCCL_RANKS=1,5       FAKE_NCCL_INIT, FAKE_NCCL_ALLREDUCE and FAKE_NCCL_ABORT act on
//                             these global ranks only (default: all of this process's)
//   FAKE_NCCL_ABORT=hang      ncclCommAbort never returns (NVIDIA/nccl#863, #1777)
//   FAKE_NCCL_BUSBW=100       the bus bandwidth a collective's kernel runs at, in GB/s
//   FAKE_NCCL_DONE_LATE=2:never,3:2.5   the one-element all-reduce completes late on these
//                             global ranks: their contributions arrive (so every other
//                             rank's completes on time), but their own kernel completes
//                             SECONDS later than it would, or never (until an abort)
//
// What NCCL does that the stage must live with (each from NCCL's source, cited where
// it is modelled below):
//   NCCL_COMM_BLOCKING=0|1    overrides config.blocking, read once per process at the
//                             first init (envConfigOverride). A blocking communicator's
//                             init and collectives run in the caller's thread.
//   FAKE_NCCL_ABORT_MS=2000   ncclCommAbort takes this long (commReclaim, the proxy's
//                             stop); exit() while an abort is still inside NCCL on
//                             another thread kills the process with SIGABRT, as the driver
//                             reclaiming memory under NCCL's threads does (NVIDIA/nccl#1013).
//                             FAKE_NCCL_ABORT=hang does the same.
//   node mode                 the communicators of one id in one process are torn down
//                             together by the last of them destroyed or aborted (commReclaim,
//                             intraComm0): it alone pays FAKE_NCCL_ABORT_MS (an abort that
//                             hangs hangs wherever it is); an abort that is the last says on
//                             stderr "fake NCCL: the last of N communicators ..."
//   FAKE_NCCL_DESTROY=error   the communicator reports an asynchronous error when it is
//                             destroyed. From 2.24, ncclCommDestroy that finds it not ready
//                             returns with the caller's thread left inside a group: the next
//                             ncclCommAbort is only queued until a ncclGroupEnd.
//   2.18 (before 2.19.1)      the group job of a non-blocking init is the initiating
//                             thread's: ncclCommAbort from another thread while that init
//                             runs frees the communicator under it (SIGSEGV; NVIDIA/nccl#992).
//   one rank                  an in-place all-reduce does no GPU work; out of place, it is a
//                             copy at the bus bandwidth (ncclLaunchOneRank).
//   FAKE_NCCL_LAUNCH_US=0     what one launch (one plan) costs on the GPU: the collectives
//                             of one group on one communicator are one plan, so a group of
//                             20 pays it once and separate launches pay it each.
//   FAKE_NCCL_STALE_WARN=txt  a WARN at the first NCCL call, left in ncclGetLastError's
//                             buffer, which NCCL never clears.
//   FAKE_NCCL_INIT_WRITE=PATH=TEXT  init writes TEXT into the file PATH (on the ranks of
//                             FAKE_NCCL_RANKS): what the job's traffic does to a flapping
//                             port's error counters, in a copy of sysfs
//   FAKE_NCCL_ALLREDUCE=fail-silent  the call fails without a WARN (the last error stays
//                             what it was), as NCCL's many NCCLCHECK returns do.
//   FAKE_CUDA_COPY=fail-to-host  only copies from the GPU to the host fail
//   FAKE_CUDA_INIT=not-ready  cuInit fails with CUDA_ERROR_SYSTEM_NOT_READY (802): an
//                             NVSwitch system whose Fabric Manager is not running
//
// And NVML, for the fabric and NVLink (RANKCHECK_NVML_LIB), with NCCL 2.28's
// nvmlwrap.h layouts: nvmlInit_v2, nvmlShutdown, nvmlErrorString,
// nvmlDeviceGetHandleByPciBusId_v2 (the fake CUDA driver's bus ids),
// nvmlDeviceGetGpuFabricInfoV and nvmlDeviceGetNvLinkState:
//   FAKE_NVML_FABRIC=STATE    every GPU's fabric state: unsupported (the default),
//                             not-started, in-progress, completed, or completed:error
//                             (status NVML_ERROR_UNKNOWN, 999)
//   FAKE_NVML_NVLINKS=18,18,17  each physical GPU's active NVLinks of 18 (the last
//                             number for the GPUs past the list); unset: no NVLink
//                             (NVML_ERROR_NOT_SUPPORTED)
//
// NCCL's own words go where NCCL's go (src/debug.cc of 2.28): NCCL_DEBUG's level,
// NCCL_DEBUG_SUBSYS's subsystems, NCCL_DEBUG_FILE with %h and %p expanded (else
// stdout), each line in NCCL's format: "host:pid:tid [dev] NCCL INFO text", and a
// WARN after a blank line, with the time from 2.26: "[%F %T] host:pid:tid [dev]
// file.cc:LINE NCCL WARN text". Every WARN is the last error too, whatever the level.
//
// ncclCommInitRankScalable (NCCL 2.23 and newer; refused by a fake that is older)
// checks that every root's id is one ncclGetUniqueId made (its directory exists),
// says on stderr "fake NCCL: rank R: ncclCommInitRankScalable over N roots", and
// then meets in the first root's directory as ncclCommInitRankConfig does.
//
// The collective itself is real across processes: ncclGetUniqueId makes a
// directory whose path travels in the id; ranks register and exchange their
// contributions as files there, so an int64 all-reduce sums what every process
// sent (float all-reduces are timed, not summed), and init finishes only when
// every rank has registered. Streams keep their work in order on a clock shared by
// the processes (CLOCK_MONOTONIC): a kernel starts when the stream reaches it and
// the last rank has arrived, and runs for its size over the bus bandwidth; events
// take their time from that clock, and a result is written to the receive buffer
// only when its kernel completes, as on a GPU.
//
// ncclGetLastError, as in NCCL, is one buffer for the whole process. Misuse that
// real NCCL punishes later (a call on a communicator that is destroyed or still in
// progress, ncclGroupEnd outside a group, a communicator never destroyed or
// aborted, an abort queued in a group that is never ended) is printed on stderr as
// "fake NCCL: misuse: ...", which the tests look for.

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUuuid {
  char bytes[16];
};
using ncclResult_t = int;
struct ncclUniqueId {
  char internal[128];
};
struct ncclConfigHead {  // the leading fields of ncclConfig_t
  size_t size;
  unsigned magic;
  unsigned version;
  int blocking;
};
constexpr CUresult kOk = 0, kInvalidValue = 1, kOutOfMemory = 2, kNotInitialized = 3,
                   kNoDevice = 100, kInvalidHandle = 400, kNotReady = 600, kDriverMismatch = 803;
constexpr ncclResult_t kNcclOk = 0, kNcclUnhandledCudaError = 1, kNcclSystemError = 2,
                       kNcclInternalError = 3, kNcclInvalidArgument = 4, kNcclInvalidUsage = 5,
                       kNcclRemoteError = 6, kNcclInProgress = 7;
constexpr int kInt64 = 4, kFloat = 7;
// From ncclGroupEnd to the work on the stream, for the thread NCCL starts (2.23+).
constexpr double kLaunchSeconds = 100e-6;

std::string env(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

double now_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

void pause_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

void misuse(const std::string& what) {
  std::string line = "fake NCCL: misuse: " + what + "\n";
  [[maybe_unused]] ssize_t n = ::write(2, line.data(), line.size());
}

int nccl_version() {
  return std::atoi(env("FAKE_NCCL_VERSION", "22809").c_str());
}
// 2.23 and later: a non-blocking communicator's group runs in a thread NCCL starts.
bool async_groups() {
  return nccl_version() >= 22300;
}
// 2.22: runtime connection setup in the caller's thread, at the first collective.
bool connect_blocks_caller() {
  int v = nccl_version();
  return v >= 22200 && v < 22300;
}

// Whether an injection (FAKE_NCCL_INIT, ...) applies to global rank `rank`.
// Runtime connect (src/init.cc, 2.22 and newer; NCCL_RUNTIME_CONNECT, default 1):
// init connects only what every collective needs, each algorithm's peers at its
// first collective.
bool runtime_connect() {
  return nccl_version() >= 22200 && env("NCCL_RUNTIME_CONNECT", "1") != "0";
}

bool injected_for(int rank);

// FAKE_NCCL_CONNECT=fail-tree: a path that only the tree algorithm's connections take
// is broken. Where init connects every algorithm (before 2.22, or
// NCCL_RUNTIME_CONNECT=0) init fails; under runtime connect it makes none of them,
// and the one-element all-reduce (the ring's) never does: it passes.
bool tree_broken_at_init(int rank) {
  return env("FAKE_NCCL_CONNECT") == "fail-tree" && injected_for(rank) && !runtime_connect();
}

bool injected_for(int rank) {
  std::string ranks = env("FAKE_NCCL_RANKS");
  if (ranks.empty()) return true;
  for (const std::string& r : split(ranks)) {
    if (std::atoi(r.c_str()) == rank) return true;
  }
  return false;
}

// The all-reduce injection for this rank and data type ("" when none).
std::string allreduce_mode(int rank, int type) {
  std::string mode = env("FAKE_NCCL_ALLREDUCE");
  if (mode.empty() || !injected_for(rank)) return "";
  bool bandwidth = mode.rfind("bandwidth-", 0) == 0;
  if (bandwidth != (type == kFloat)) return "";
  return bandwidth ? mode.substr(10) : mode;
}

// FAKE_NCCL_DONE_LATE's delay for this rank's one-element all-reduce, in seconds
// (infinity: never; 0: none). Separate from FAKE_NCCL_ALLREDUCE: the rank arrives.
double done_late_s(int rank, int type) {
  if (type != kInt64) return 0;
  for (const std::string& item : split(env("FAKE_NCCL_DONE_LATE"))) {
    size_t colon = item.find(':');
    if (colon == std::string::npos || std::atoi(item.substr(0, colon).c_str()) != rank) continue;
    std::string delay = item.substr(colon + 1);
    return delay == "never" ? std::numeric_limits<double>::infinity() : std::atof(delay.c_str());
  }
  return 0;
}

struct FakeDevice {
  std::string gpu;  // GPU-...
  std::string mig;  // MIG-..., or "" for a whole GPU
  int bus = 0;      // the physical GPU's index: its PCI bus id
};

std::mutex g_mu;  // everything below; never held while a call waits
bool g_init = false;
std::vector<FakeDevice> g_visible;
std::string g_last_error;  // ncclGetLastError: one buffer per process, as in NCCL

// ----- NCCL's own words -------------------------------------------------------
// As NCCL 2.28 prints them (src/debug.cc, tag v2.28.9-1): NCCL_DEBUG (VERSION,
// WARN, INFO, ABORT, TRACE) and NCCL_DEBUG_SUBSYS (default INIT,BOOTSTRAP,ENV; "^"
// inverts) read once, at the first message; NCCL_DEBUG_FILE, with %h (the host up
// to its first '.'), %p (the pid) and %% expanded, opened with fopen(path, "w") only
// above VERSION, stdout otherwise. A WARN starts with a newline and, from 2.26, the
// time ("[%F %T] "); every WARN is also the process's last error (ncclGetLastError),
// whatever the level.
enum LogLevel {
  kLogNone = 0,
  kLogVersion = 1,
  kLogWarn = 2,
  kLogInfo = 3,
  kLogAbort = 4,
  kLogTrace = 5
};
constexpr unsigned kSubInit = 1, kSubBootstrap = 1u << 12, kSubEnv = 1u << 9, kSubNet = 1u << 4;

struct DebugOut {
  int level = kLogNone;
  unsigned mask = kSubInit | kSubBootstrap | kSubEnv;
  FILE* file = stdout;
  std::string host;
};
std::mutex g_log_mu;            // never held with g_mu taken after it
thread_local int t_device = 0;  // what cudaGetDevice would say: the current context's

unsigned subsys_mask(const std::string& spec) {
  bool invert = !spec.empty() && spec[0] == '^';
  unsigned mask = invert ? ~0u : 0u;
  for (const std::string& name : split(invert ? spec.substr(1) : spec)) {
    unsigned bit = name == "INIT"        ? kSubInit
                   : name == "NET"       ? kSubNet
                   : name == "BOOTSTRAP" ? kSubBootstrap
                   : name == "ENV"       ? kSubEnv
                   : name == "ALL"       ? ~0u
                                         : 0u;
    mask = invert ? mask & ~bit : mask | bit;
  }
  return mask;
}

DebugOut& debug_out() {
  static DebugOut* d = [] {
    auto* o = new DebugOut;
    std::string level = env("NCCL_DEBUG");
    const char* names[] = {"", "VERSION", "WARN", "INFO", "ABORT", "TRACE"};
    for (int l = 1; l <= kLogTrace; ++l) {
      if (::strcasecmp(level.c_str(), names[l]) == 0) o->level = l;
    }
    if (std::getenv("NCCL_DEBUG_SUBSYS") != nullptr)
      o->mask = subsys_mask(env("NCCL_DEBUG_SUBSYS"));
    char host[1024] = {};
    ::gethostname(host, sizeof host - 1);
    o->host = std::string(host).substr(0, std::string(host).find('.'));
    std::string pattern = env("NCCL_DEBUG_FILE");
    if (o->level > kLogVersion && !pattern.empty()) {
      std::string path;
      for (size_t i = 0; i < pattern.size(); ++i) {
        char c = pattern[i];
        if (c != '%' || i + 1 == pattern.size()) {
          path += c;
          continue;
        }
        char n = pattern[++i];
        path += n == '%'   ? std::string("%")
                : n == 'h' ? o->host
                : n == 'p' ? std::to_string(::getpid())
                           : std::string("%") + n;
      }
      if (FILE* f = std::fopen(path.c_str(), "w")) {
        ::setlinebuf(f);
        o->file = f;
      }
    }
    return o;
  }();
  return *d;
}

// NCCL's prefix of a line: "host:pid:tid [dev] file.cc:LINE NCCL WARN ", or
// "host:pid:tid [dev] NCCL INFO ".
std::string line_prefix(int level, const std::string& host, const std::string& where) {
  std::string p;
  if (level == kLogWarn) {
    p += "\n";
    if (nccl_version() >= 22600) {
      time_t now = ::time(nullptr);
      tm t{};
      ::localtime_r(&now, &t);
      char stamp[64];
      std::strftime(stamp, sizeof stamp, "[%F %T] ", &t);
      p += stamp;
    }
  }
  p += host + ":" + std::to_string(::getpid()) + ":" + std::to_string(::syscall(SYS_gettid)) +
       " [" + std::to_string(t_device) + "] ";
  p += level == kLogWarn ? where + " NCCL WARN " : std::string("NCCL INFO ");
  return p;
}

void log_line(int level, unsigned subsys, const std::string& where, const std::string& text) {
  std::lock_guard lock(g_log_mu);
  DebugOut& d = debug_out();
  if (d.level < level || (level == kLogInfo && (subsys & d.mask) == 0)) return;
  std::string line = line_prefix(level, d.host, where) + text + "\n";
  std::fwrite(line.data(), 1, line.size(), d.file);
  std::fflush(d.file);
}

// NCCL's WARN(...) at `file`:`line` of its sources. Called with g_mu held (it sets
// the last error, as NCCL does).
void nccl_warn(const char* file, int line, const std::string& text) {
  g_last_error = text;
  log_line(kLogWarn, 0, std::string(file) + ":" + std::to_string(line), text);
}
// FAKE_CUDA_VERSION: the CUDA version the driver supports.
int driver_cuda_version() {
  return std::atoi(env("FAKE_CUDA_VERSION", "13000").c_str());
}
// FAKE_NCCL_CUDA: the CUDA runtime inside the fake's NCCL (default: the driver's).
int nccl_cuda_version() {
  std::string v = env("FAKE_NCCL_CUDA");
  return v.empty() ? driver_cuda_version() : std::atoi(v.c_str());
}

// NCCL's INFO(subsys, ...).
void nccl_info(unsigned subsys, const std::string& text) {
  log_line(kLogInfo, subsys, "", text);
}

std::vector<FakeDevice> all_devices() {
  std::vector<FakeDevice> out;
  std::vector<std::string> parents;
  for (const std::string& item : split(env("FAKE_GPUS"))) {
    FakeDevice d;
    auto slash = item.find('/');
    d.gpu = item.substr(0, slash);
    if (slash != std::string::npos) d.mig = item.substr(slash + 1);
    auto it = std::find(parents.begin(), parents.end(), d.gpu);
    d.bus = int(it - parents.begin());
    if (it == parents.end()) parents.push_back(d.gpu);
    out.push_back(d);
  }
  return out;
}

std::string dir_of(const ncclUniqueId& id) {
  return std::string(id.internal);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

void write_file(const std::string& path, const std::string& data) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << data;
  }
  std::rename(tmp.c_str(), path.c_str());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int count_prefix(const std::string& dir, const std::string& prefix) {
  int n = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name.rfind(prefix, 0) == 0 && name.find(".tmp") == std::string::npos) ++n;
    }
    ::closedir(d);
  }
  return n;
}

// Device memory: host memory, remembered so that a kernel never writes to a
// buffer that was freed under it.
std::map<uintptr_t, size_t> g_allocations;
bool live(const void* p, size_t bytes) {
  auto a = reinterpret_cast<uintptr_t>(p);
  auto it = g_allocations.upper_bound(a);
  if (it == g_allocations.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}

}  // namespace

struct ncclComm;

namespace {

// One collective of one rank: registered by its rank, a kernel on its stream.
struct Coll {
  ncclComm* comm = nullptr;
  int seq = 0;
  void* recv = nullptr;
  size_t count = 0;
  int type = kInt64;
  double seconds = 0;    // the kernel's run time
  bool connects = true;  // takes part in the connection setup (at the first collective)
  bool arrives = true;   // sends its contribution
  bool wrong = false;
  bool no_work = false;  // one rank, in place: NCCL launches nothing
  bool applied = false;
  double late = 0;  // FAKE_NCCL_DONE_LATE: seconds its kernel completes late on this rank
  std::optional<double> last_arrival;  // once every rank has arrived
};

struct FakeEvent;

struct Op {
  std::shared_ptr<Coll> coll;  // a kernel, or
  FakeEvent* event = nullptr;  // an event
  double enqueued = 0;
  bool resolved = false;
  double done_at = 0;
};

}  // namespace

struct CUstream_st {
  std::deque<Op> ops;
  double tail = 0;  // when the last finished op finished
};
struct CUevent_st {};
struct CUctx_st {
  int device;
};

namespace {

struct FakeEvent : CUevent_st {
  bool recorded = false;
  bool complete = false;
  double time = 0;
  CUstream_st* stream = nullptr;
};

// A collective handed to a group, not yet launched.
struct Queued {
  std::shared_ptr<Coll> coll;
  CUstream_st* stream;
  const void* send;
  double handed = 0;  // when the caller handed it to NCCL (the call, or the group's end)
};

// ncclGroupStart/End nest per thread, as in NCCL.
struct ThreadGroup {
  int depth = 0;
  ncclResult_t error = kNcclOk;
  bool inits = false;
  std::vector<Queued> ops;
  std::vector<ncclComm*> reclaims;        // aborts and destroys called inside the group
  std::vector<ncclComm*> blocking_inits;  // blocking inits: ncclGroupEnd waits for them
};
thread_local ThreadGroup t_group;

}  // namespace

struct ncclComm {
  std::string dir;
  int nranks = 0;
  int rank = 0;
  bool init_hang = false;
  bool init_failed = false;
  bool init_ib_error = false;    // FAKE_NCCL_INIT=fail-ib: the failure is an IB QP's
  bool init_tree_error = false;  // FAKE_NCCL_CONNECT=fail-tree, connected at init
  bool initialized = false;
  int seq = 0;                    // collectives issued
  bool connected = false;         // the first collective met every rank
  std::vector<Queued> launching;  // 2.23+: waiting for the group's thread
  ncclResult_t error = kNcclOk;   // sticky asynchronous error
  double neterr_at = 0;           // when a network error shows, 0: never
  double refused_since = 0;       // FAKE_NCCL_INIT=refused: when the first connect was refused
  int retries_said = 0;           // its INFO lines so far
  bool aborting = false;          // the abort flag: waits and kernels give up
  bool abort_called = false;      // ncclCommAbort was entered
  bool queued_reclaim = false;    // ncclCommAbort/Destroy inside an open group
  bool dead = false;              // destroyed or aborted
  int in_calls = 0;               // threads inside a call on this communicator
  bool blocking = false;          // config.blocking after NCCL_COMM_BLOCKING
  std::thread::id owner;          // the thread whose init (2.18: whose group job) made it
  bool destroy_error = false;     // FAKE_NCCL_DESTROY=error was applied
  bool finalized = false;         // counted in its process's teardown (commReclaim)
};

namespace {

// ----- aborts that take time, and exit() under them -------------------------
// A real abort of an initialised communicator (src/init.cc commReclaim ->
// commDestroySync, ncclProxyStop, commFree; tag v2.28.9-1) takes long enough that a
// process can reach exit() during it: cudart (statically linked into libnccl) and the
// driver then tear down under NCCL's live threads, and the process dies
// (NVIDIA/nccl#1013). Here the thread inside the abort raises SIGABRT once exit()'s
// handlers run.
std::atomic<int> g_aborts_inside{0};
std::atomic<bool> g_exit_handlers{false};

void crash_if_exiting() {
  if (!g_exit_handlers.load()) return;
  const char line[] =
      "fake NCCL: exit() ran while ncclCommAbort was still inside NCCL on another thread: "
      "the driver reclaims memory under NCCL's threads (NVIDIA/nccl#1013)\n";
  [[maybe_unused]] ssize_t n = ::write(2, line, sizeof line - 1);
  ::raise(SIGABRT);
}

// Called from exit()'s handlers: while an abort is inside NCCL, the process dies.
void exit_during_abort() {
  if (g_aborts_inside.load() == 0) return;
  g_exit_handlers.store(true);
  for (int i = 0; i < 1000 && g_aborts_inside.load() > 0; ++i)
    pause_ms(1);  // the abort's thread raises
  if (g_aborts_inside.load() > 0) crash_if_exiting();
}

// The time an abort takes inside NCCL (FAKE_NCCL_ABORT_MS, or forever under
// FAKE_NCCL_ABORT=hang), with g_mu released.
// FAKE_NCCL_INIT=refused: bootstrap's connect retries (misc/socket.cc at v2.28.9-1,
// socketConnectCheck): attempt k (from 1) is refused, then sleeps k x the retry sleep,
// up to the retry count; the sleeps end, counted from the first refusal, at
// sleep x k(k+1)/2.
int retry_sleep_ms() {
  return std::atoi(env("NCCL_SOCKET_RETRY_SLEEP_MSEC", "100").c_str());
}
int retry_count() {
  return std::atoi(env("NCCL_SOCKET_RETRY_CNT", "34").c_str());
}
double retries_end(int k) {
  return retry_sleep_ms() / 1000.0 * k * (k + 1) / 2;
}

// Its INFO line for each retry begun by now, and past the last one its WARN.
void refused_progress(ncclComm* c) {
  double t = now_s() - c->refused_since;
  const char* where = "socketPollConnect: connect to 10.0.0.1<29500> returned Connection refused";
  while (c->retries_said < retry_count() && retries_end(c->retries_said) <= t) {
    ++c->retries_said;
    nccl_info(kSubInit | kSubNet, std::string(where) + ", retrying (" +
                                      std::to_string(c->retries_said) + "/" +
                                      std::to_string(retry_count()) + ") after sleep for " +
                                      std::to_string(c->retries_said * retry_sleep_ms()) + " msec");
  }
  if (t >= retries_end(retry_count())) {
    c->error = kNcclRemoteError;
    nccl_warn("misc/socket.cc", 582,
              std::string(where) + ", exceeded error retry count after " +
                  std::to_string(retry_count() + 1) + " attempts");
  }
}

// The abort flag is set, but the thread of init sleeps on: the abort, which joins it,
// returns when the sleep under way ends.
void abort_waits_for_the_retry_sleep(std::unique_lock<std::mutex>& lock, const ncclComm* c) {
  if (c->refused_since <= 0 || c->error != kNcclOk) return;
  double t = now_s() - c->refused_since;
  int k = 1;
  while (k < retry_count() && retries_end(k) <= t)
    ++k;
  double until = c->refused_since + retries_end(k);
  lock.unlock();
  ++g_aborts_inside;
  while (now_s() < until) {
    crash_if_exiting();
    pause_ms(1);
  }
  --g_aborts_inside;
  lock.lock();
}

void abort_takes_time(std::unique_lock<std::mutex>& lock, const ncclComm* c) {
  if (!injected_for(c->rank)) return;
  bool hang = env("FAKE_NCCL_ABORT") == "hang";
  int ms = std::atoi(env("FAKE_NCCL_ABORT_MS", "0").c_str());
  if (!hang && ms <= 0) return;
  lock.unlock();
  ++g_aborts_inside;
  for (int i = 0; hang || i < ms; ++i) {
    crash_if_exiting();
    pause_ms(1);
  }
  --g_aborts_inside;
  lock.lock();
}

// NCCL_COMM_BLOCKING as NCCL's envConfigOverride applies it (src/init.cc, tags
// v2.24.3-1 and v2.28.9-1: "if (blockingEnv == 0 || blockingEnv == 1)
// comm->config.blocking = blockingEnv"), over config.blocking (NCCL_CONFIG_UNDEF_INT
// means 1). NCCL reads a parameter once per process and caches it (src/misc/param.cc,
// ncclLoadParam): a setenv after the first init changes nothing.
bool effective_blocking(const ncclConfigHead* config) {
  static const int from_env = [] {
    std::string v = env("NCCL_COMM_BLOCKING");
    return v.empty() ? -1 : std::atoi(v.c_str());
  }();
  if (from_env == 0 || from_env == 1) return from_env == 1;
  return config->blocking == INT_MIN || config->blocking != 0;
}

// 2.18 (src/group.cc at tag v2.18.6-1: "__thread struct ncclGroupJob
// *ncclGroupJobMainPtr"; src/init.cc ncclCommEnsureReady -> ncclGroupJobAbort()): an
// abort joins the group job of the thread that calls it. From another thread than the
// one whose init is still running, it joins nothing, and commReclaim frees the
// communicator under the init's thread. Fixed in 2.19.1 (comm->groupJob;
// NVIDIA/nccl#992).
void abort_from_another_thread_on_2_18(const ncclComm* c) {
  if (nccl_version() >= 21901 || c->owner == std::this_thread::get_id()) return;
  if (c->initialized || c->error != kNcclOk) return;
  misuse("ncclCommAbort of rank " + std::to_string(c->rank) +
         " from another thread while its init runs: NCCL 2.18 frees it under the init's "
         "group job (NVIDIA/nccl#992)");
  ::raise(SIGSEGV);
}

// From 2.24, ncclCommDestroy starts a group and returns from a failed
// NCCLCHECK(ncclCommEnsureReady(comm)) without ending it (src/init.cc, tags v2.24.3-1,
// v2.26.6-1, v2.27.7-1, v2.28.9-1, v2.29.7-1): an error or a communicator still in
// progress leaves the caller's thread one group deep.
bool destroy_leaves_group_open() {
  return nccl_version() >= 22400;
}

// Every communicator made, never freed (a call on one destroyed is reported, not a
// crash): held from a pointer that outlives the static destructors, for LeakSanitizer.
std::vector<ncclComm*>& g_comms = *new std::vector<ncclComm*>;

// The leftovers NCCL would leak: checked when the process exits normally.
struct ExitCheck {
  ~ExitCheck() {
    exit_during_abort();
    std::unique_lock lock(g_mu, std::try_to_lock);
    if (!lock.owns_lock()) return;  // a thread is inside the fake: say nothing
    for (ncclComm* c : g_comms) {
      if (c->dead || c->abort_called) continue;
      if (c->queued_reclaim) {
        misuse("ncclCommAbort/ncclCommDestroy for rank " + std::to_string(c->rank) +
               " was called inside a group that was never ended: nothing was aborted");
      } else {
        misuse("the communicator of rank " + std::to_string(c->rank) +
               " was neither destroyed nor aborted");
      }
    }
  }
} g_exit_check;

// Counts a thread inside a call on `c`, so that an abort waits for it to leave.
struct InCall {
  explicit InCall(ncclComm* c) : c_(c) { ++c_->in_calls; }
  ~InCall() { --c_->in_calls; }
  ncclComm* c_;
};

// Announces this rank's arrival at its collectives `ops` (one call, or one group),
// with their contributions: one marker per communicator and run of collectives,
// "at<first>_<last>-<rank>@<stamp in ns>", so that a group costs one file.
void register_arrivals(const std::vector<const Coll*>& ops, const std::vector<const void*>& sends,
                       double stamp) {
  std::map<const ncclComm*, std::vector<int>> arrived;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Coll& k = *ops[i];
    const ncclComm* c = k.comm;
    std::string cn = c->dir + "/cn-" + std::to_string(c->rank);
    if (k.connects && !exists(cn)) write_file(cn, "1");
    if (!k.arrives) continue;
    if (k.type == kInt64) {
      write_file(c->dir + "/ar" + std::to_string(k.seq) + "-" + std::to_string(c->rank),
                 std::string(static_cast<const char*>(sends[i]), k.count * 8));
    }
    arrived[c].push_back(k.seq);
  }
  auto ns = static_cast<long long>(stamp * 1e9);
  for (auto& [c, seqs] : arrived) {
    std::sort(seqs.begin(), seqs.end());
    for (size_t i = 0; i < seqs.size();) {
      size_t j = i;
      while (j + 1 < seqs.size() && seqs[j + 1] == seqs[j] + 1)
        ++j;
      write_file(c->dir + "/at" + std::to_string(seqs[i]) + "_" + std::to_string(seqs[j]) + "-" +
                     std::to_string(c->rank) + "@" + std::to_string(ns),
                 "");
      i = j + 1;
    }
  }
}

// Whether every rank has reached its first collective: the connections are set up.
bool all_connected(const ncclComm* c) {
  return count_prefix(c->dir, "cn-") >= c->nranks;
}

// When the last rank arrived at collective `seq`; nothing while one is missing.
std::optional<double> last_arrival(const ncclComm* c, int seq) {
  std::vector<double> at(size_t(c->nranks), -1);
  if (DIR* d = ::opendir(c->dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      int first = 0, last = 0, rank = 0;
      long long ns = 0;
      if (std::sscanf(e->d_name, "at%d_%d-%d@%lld", &first, &last, &rank, &ns) == 4 &&
          std::strstr(e->d_name, ".tmp") == nullptr && first <= seq && seq <= last && rank >= 0 &&
          rank < c->nranks) {
        at[size_t(rank)] = double(ns) / 1e9;
      }
    }
    ::closedir(d);
  }
  double latest = 0;
  for (double t : at) {
    if (t < 0) return std::nullopt;
    latest = std::max(latest, t);
  }
  return latest;
}

// The sum every rank sent, into the receive buffer.
void apply(Coll& k) {
  if (k.applied) return;
  k.applied = true;
  if (k.type != kInt64 || !live(k.recv, k.count * 8)) return;
  std::vector<int64_t> sum(k.count, 0);
  for (int r = 0; r < k.comm->nranks; ++r) {
    std::string part =
        read_file(k.comm->dir + "/ar" + std::to_string(k.seq) + "-" + std::to_string(r));
    for (size_t i = 0; i < k.count && (i + 1) * 8 <= part.size(); ++i) {
      int64_t v;
      std::memcpy(&v, part.data() + i * 8, 8);
      sum[i] += v;
    }
  }
  if (k.wrong && !sum.empty()) sum[0] += 1;
  std::memcpy(k.recv, sum.data(), k.count * 8);
}

// Moves a stream forward to now: the kernels that completed write their results,
// the events that were reached take their times. True when the stream is empty.
bool advance(CUstream_st* s) {
  double now = now_s();
  double prev = s->tail;
  for (Op& op : s->ops) {
    if (!op.resolved) {
      if (op.coll != nullptr && !op.coll->comm->aborting) {
        Coll& k = *op.coll;
        if (!k.last_arrival) k.last_arrival = last_arrival(k.comm, k.seq);
        if (!k.last_arrival) break;  // a rank has not arrived: the kernel waits
        double done_at = std::max({prev, op.enqueued, *k.last_arrival}) + k.seconds + k.late;
        if (k.late > 0 && done_at > now) break;  // late here: still running (an abort ends it)
        op.done_at = done_at;
      } else {
        op.done_at = std::max(prev, op.enqueued);  // an event, or an aborted kernel
      }
      op.resolved = true;
    }
    prev = op.done_at;
  }
  while (!s->ops.empty() && s->ops.front().resolved && s->ops.front().done_at <= now) {
    Op& op = s->ops.front();
    if (op.coll != nullptr && !op.coll->comm->aborting) apply(*op.coll);
    if (op.event != nullptr) {
      op.event->complete = true;
      op.event->time = op.done_at;
    }
    s->tail = op.done_at;
    s->ops.pop_front();
  }
  return s->ops.empty();
}

// Puts a kernel on its stream, launched at `when`.
void enqueue(const Queued& q, double when) {
  Op op;
  op.coll = q.coll;
  op.enqueued = when;
  q.stream->ops.push_back(op);
}

// Whether `c` is still in progress (init, or a group not launched yet).
bool in_progress(const ncclComm* c) {
  return c->error == kNcclOk && (!c->initialized || !c->launching.empty());
}

// What ncclCommGetAsyncError sees: moves `c` forward first.
ncclResult_t progress(ncclComm* c) {
  if (!c->initialized && c->error == kNcclOk) {
    if (c->refused_since > 0) {
      refused_progress(c);
    } else if (c->init_failed && c->init_ib_error) {
      c->error = kNcclSystemError;
      // NCCL 2.28's words when a queue pair cannot reach its peer (src/misc/ibvwrap.cc:307
      // at tag v2.28.9-1, wrap_ibv_modify_qp; src/diagnose/data/nccl.tsv's "Call to
      // ibv_modify_qp failed with %d %s, %s", the last %s from ibvModifyQpLog).
      nccl_warn("misc/ibvwrap.cc", 307,
                "Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_0:1, "
                "curr state INIT, next state RTR, local GID index 3, local GID "
                "::ffff:10.0.0.1, remote GID ::ffff:10.0.0.2");
    } else if (c->init_failed && c->init_tree_error) {
      c->error = kNcclSystemError;
      g_last_error =
          "fake: the tree's connections failed at init (FAKE_NCCL_CONNECT=fail-tree) "
          "on rank " +
          std::to_string(c->rank) + ": Connection refused";
    } else if (c->init_failed) {
      c->error = kNcclSystemError;
      g_last_error =
          "fake: init failed as asked (FAKE_NCCL_INIT=fail) on rank " + std::to_string(c->rank);
    } else if (!c->init_hang && count_prefix(c->dir, "init-") >= c->nranks) {
      c->initialized = true;
    }
  }
  if (c->error == kNcclOk && c->initialized && !c->launching.empty()) {
    // The group's thread: connection setup at the first collective meets every rank.
    // Starting that thread and launching takes it kLaunchSeconds; it launched then,
    // whenever the caller polls.
    if (!c->connected && all_connected(c)) c->connected = true;
    double launched = c->launching.back().handed + kLaunchSeconds;
    if (c->connected && now_s() >= launched) {
      for (const Queued& q : c->launching)
        enqueue(q, launched);
      c->launching.clear();
    }
  }
  if (c->error == kNcclOk && c->neterr_at > 0 && now_s() >= c->neterr_at) {
    c->error = kNcclRemoteError;
    g_last_error =
        "NET/IB : Got completion from peer 10.0.0.12<47312> with status=12 opcode=0 "
        "len=0 vendor err 129 (Recv) on rank " +
        std::to_string(c->rank) + " (fake)";
  }
  if (c->error != kNcclOk) return c->error;
  return in_progress(c) ? kNcclInProgress : kNcclOk;
}

// NCCL's ncclCommEnsureReady: a communicator in progress is refused.
ncclResult_t ensure_ready(ncclComm* c, const char* call) {
  ncclResult_t state = progress(c);
  if (state == kNcclInProgress) {
    g_last_error = "Attempt to use communicator before the previous operation returned ncclSuccess";
    misuse(std::string(call) + " on the communicator of rank " + std::to_string(c->rank) +
           " while it is still in progress");
    return kNcclInvalidArgument;
  }
  return state;
}

// A blocking communicator's init runs in the caller (ncclAsyncLaunch at group depth 0
// runs the job in the call: src/group.cc, tag v2.28.9-1): the call returns once
// every rank has arrived, or with the error; an abort from another thread ends it.
ncclResult_t wait_blocking_init(std::unique_lock<std::mutex>& lock, ncclComm* c) {
  InCall in(c);
  while (true) {
    ncclResult_t state = progress(c);
    if (state != kNcclInProgress) return state;
    if (c->aborting) {
      g_last_error = "fake: init aborted";
      return kNcclInternalError;
    }
    lock.unlock();
    pause_ms(1);
    lock.lock();
  }
}

bool refuse_dead(const ncclComm* c, const char* call) {
  if (c == nullptr || !c->dead) return false;
  misuse(std::string(call) + " on a communicator already destroyed or aborted");
  return true;
}

// NCCL makes the collectives of one group on one communicator into one plan, one
// kernel launch (src/enqueue.cc, ncclPrepareTasks / ncclLaunchPrepare at tag
// v2.28.9-1): what a launch costs on the GPU (FAKE_NCCL_LAUNCH_US) is paid once per
// plan, by its first kernel.
void charge_one_launch_per_plan(std::vector<Queued>& ops) {
  double launch_s = std::atof(env("FAKE_NCCL_LAUNCH_US", "0").c_str()) / 1e6;
  if (launch_s <= 0) return;
  std::vector<const ncclComm*> charged;
  for (Queued& q : ops) {
    if (q.coll->no_work ||
        std::find(charged.begin(), charged.end(), q.coll->comm) != charged.end()) {
      continue;
    }
    charged.push_back(q.coll->comm);
    q.coll->seconds += launch_s;
  }
}

// Launches collectives (a call outside a group, or the end of one). The lock is
// released while a 2.22 connection setup waits for the other ranks.
ncclResult_t launch(std::unique_lock<std::mutex>& lock, std::vector<Queued> ops, double stamp) {
  std::vector<const Coll*> colls;
  std::vector<const void*> sends;
  for (Queued& q : ops) {
    q.handed = stamp;
    colls.push_back(q.coll.get());
    sends.push_back(q.send);
  }
  register_arrivals(colls, sends, stamp);
  charge_one_launch_per_plan(ops);
  // A blocking communicator's group runs in the caller's thread (src/group.cc,
  // ncclGroupEndInternal: the thread is started only when ncclGroupBlocking == 0).
  std::vector<Queued> in_caller;
  bool in_nccl_thread = false;
  for (const Queued& q : ops) {
    ncclComm* c = q.coll->comm;
    if (!async_groups() || c->blocking) {
      in_caller.push_back(q);
      continue;
    }
    c->launching.push_back(q);
    in_nccl_thread = true;
    if (allreduce_mode(c->rank, q.coll->type) == "neterr") c->neterr_at = now_s() + 0.1;
  }
  if (in_nccl_thread && in_caller.empty()) return kNcclInProgress;
  for (const Queued& q : in_caller) {
    ncclComm* c = q.coll->comm;
    InCall in(c);
    while ((connect_blocks_caller() || (async_groups() && c->blocking)) && !c->connected) {
      if (c->aborting) {
        g_last_error = "fake: aborted during connection setup";
        return kNcclInternalError;
      }
      if (all_connected(c)) {
        c->connected = true;
        break;
      }
      lock.unlock();
      pause_ms(1);
      lock.lock();
    }
    c->connected = true;
    enqueue(q, now_s());
    if (allreduce_mode(c->rank, q.coll->type) == "neterr") c->neterr_at = now_s() + 0.1;
  }
  return in_nccl_thread ? kNcclInProgress : kNcclOk;
}

}  // namespace

extern "C" {

// ----- CUDA driver ----------------------------------------------------------

CUresult cuInit(unsigned) {
  if (env("FAKE_CUDA_INIT") == "fail") return kDriverMismatch;
  if (env("FAKE_CUDA_INIT") == "not-ready") return CUresult(802);
  while (env("FAKE_CUDA_INIT") == "hang") {  // a driver that never answers: only a kill ends it
    ::pause();
  }
  std::lock_guard lock(g_mu);
  std::vector<FakeDevice> all = all_devices();
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  g_visible.clear();
  if (cvd == nullptr) {
    g_visible = all;
  } else {
    // As the driver does: the first entry that names no device ends the list.
    for (const std::string& item : split(cvd)) {
      size_t before = g_visible.size();
      if (item.rfind("GPU-", 0) == 0) {
        for (const auto& d : all) {
          if (d.gpu == item && d.mig.empty()) g_visible.push_back(d);
        }
      } else if (item.rfind("MIG-", 0) == 0) {
        for (const auto& d : all) {
          if (d.mig == item) g_visible.push_back(d);
        }
      } else {
        char* end = nullptr;
        unsigned long i = std::strtoul(item.c_str(), &end, 10);
        if (end != nullptr && *end == '\0' && i < all.size()) g_visible.push_back(all[i]);
      }
      if (g_visible.size() == before) break;
    }
  }
  if (g_visible.empty()) return kNoDevice;
  g_init = true;
  return kOk;
}
CUresult cuDriverGetVersion(int* v) {
  *v = driver_cuda_version();
  return kOk;
}
CUresult cuDeviceGetCount(int* n) {
  std::lock_guard lock(g_mu);
  if (!g_init) return kNotInitialized;
  *n = static_cast<int>(g_visible.size());
  return kOk;
}
CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  std::lock_guard lock(g_mu);
  if (ordinal < 0 || ordinal >= static_cast<int>(g_visible.size())) return kInvalidValue;
  *d = ordinal;
  return kOk;
}
CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  std::lock_guard lock(g_mu);
  bool mig = d >= 0 && size_t(d) < g_visible.size() && !g_visible[size_t(d)].mig.empty();
  std::snprintf(name, static_cast<size_t>(len), mig ? "Fake GPU MIG 1g.18gb" : "Fake GPU");
  return kOk;
}
}  // extern "C"

namespace {
void uuid_bytes(const std::string& text, CUuuid* u) {
  // "GPU-xxxxxxxx-xxxx-..." (or MIG-) back into 16 bytes.
  std::string hex;
  for (char c : text.substr(4)) {
    if (c != '-') hex += c;
  }
  hex.resize(32, '0');
  for (int i = 0; i < 16; ++i) {
    u->bytes[i] =
        static_cast<char>(std::strtoul(hex.substr(size_t(i) * 2, 2).c_str(), nullptr, 16));
  }
}
}  // namespace

extern "C" {

// The GPU's UUID, also for a MIG slice (the old entry point).
CUresult cuDeviceGetUuid(CUuuid* u, CUdevice d) {
  std::lock_guard lock(g_mu);
  if (d < 0 || size_t(d) >= g_visible.size()) return kInvalidValue;
  uuid_bytes(g_visible[size_t(d)].gpu, u);
  return kOk;
}
// The slice's own UUID in MIG mode, as CUDA 11.4+ documents it. Not in the R460
// variant (libfakegpu_r460.so): drivers before R470 lack the entry point.
#ifndef FAKE_DRIVER_R460
CUresult cuDeviceGetUuid_v2(CUuuid* u, CUdevice d) {
  std::lock_guard lock(g_mu);
  if (d < 0 || size_t(d) >= g_visible.size()) return kInvalidValue;
  const FakeDevice& dev = g_visible[size_t(d)];
  uuid_bytes(dev.mig.empty() ? dev.gpu : dev.mig, u);
  return kOk;
}
#endif
CUresult cuDeviceGetPCIBusId(char* bus, int len, CUdevice d) {
  std::lock_guard lock(g_mu);
  if (d < 0 || size_t(d) >= g_visible.size()) return kInvalidValue;
  std::snprintf(bus, static_cast<size_t>(len), "00000000:%02X:00.0",
                0x10 + g_visible[size_t(d)].bus);
  return kOk;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
  *bytes = size_t(80) << 30;
  return kOk;
}
CUresult cuDevicePrimaryCtxRetain(CUctx_st** ctx, CUdevice d) {
  static CUctx_st primary[64];  // one per device, like the real primary contexts
  static std::once_flag made[64];
  if (d < 0 || d >= 64) return kInvalidValue;
  // FAKE_CUDA_CTX_MS: the first retain of a device creates its context, which takes
  // the driver that long; devices' contexts are made independently of each other.
  std::call_once(made[d], [] { pause_ms(std::atoi(env("FAKE_CUDA_CTX_MS", "0").c_str())); });
  primary[d].device = d;
  *ctx = &primary[d];
  return kOk;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) {
  return kOk;
}
CUresult cuCtxSetCurrent(CUctx_st* ctx) {
  t_device = ctx != nullptr ? ctx->device : 0;
  return kOk;
}
CUresult cuStreamCreate(CUstream_st** s, unsigned) {
  *s = new CUstream_st;
  return kOk;
}
CUresult cuStreamDestroy_v2(CUstream_st* s) {
  std::lock_guard lock(g_mu);
  for (Op& op : s->ops) {  // the events on it stop waiting for it
    if (op.event != nullptr) {
      op.event->complete = true;
      op.event->stream = nullptr;
    }
  }
  delete s;
  return kOk;
}
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  std::lock_guard lock(g_mu);
  void* m = std::calloc(1, bytes);
  if (m == nullptr) return kOutOfMemory;
  g_allocations[reinterpret_cast<uintptr_t>(m)] = bytes;
  *p = reinterpret_cast<CUdeviceptr>(m);
  return kOk;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  std::lock_guard lock(g_mu);
  g_allocations.erase(uintptr_t(p));
  std::free(reinterpret_cast<void*>(p));
  return kOk;
}
// The copy to the GPU is done at once: it is the first work on its stream here.
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream_st*) {
  if (env("FAKE_CUDA_COPY") == "fail") return kInvalidValue;
  std::memcpy(reinterpret_cast<void*>(dst), src, n);
  return kOk;
}
// Synchronous, and (as with a CU_STREAM_NON_BLOCKING stream) not ordered after any
// stream's work: it reads what the buffer holds now.
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  if (env("FAKE_CUDA_COPY") == "fail" || env("FAKE_CUDA_COPY") == "fail-to-host") {
    return kInvalidValue;
  }
  std::lock_guard lock(g_mu);
  std::memcpy(dst, reinterpret_cast<void*>(src), n);
  return kOk;
}
CUresult cuGetErrorString(CUresult rc, const char** s) {
  switch (rc) {
    case kNoDevice:
      *s = "no CUDA-capable device is detected";
      return kOk;
    case kDriverMismatch:
      *s = "system has unsupported display driver / cuda driver combination";
      return kOk;
    case kNotReady:
      *s = "device not ready";
      return kOk;
    case kInvalidValue:
      *s = "invalid argument";
      return kOk;
    default:
      *s = "fake CUDA error";
      return kOk;
  }
}

// A stream is done when every kernel on it has every contribution and has run.
CUresult cuStreamQuery(CUstream_st* s) {
  std::lock_guard lock(g_mu);
  return advance(s) ? kOk : kNotReady;
}
CUresult cuStreamSynchronize(CUstream_st* s) {
  while (cuStreamQuery(s) == kNotReady)
    pause_ms(1);
  return kOk;
}

CUresult cuEventCreate(CUevent_st** e, unsigned) {
  *e = new FakeEvent;
  return kOk;
}
CUresult cuEventDestroy_v2(CUevent_st* e) {
  std::lock_guard lock(g_mu);
  auto* ev = static_cast<FakeEvent*>(e);
  if (ev->stream != nullptr) {
    for (Op& op : ev->stream->ops) {
      if (op.event == ev) op.event = nullptr;
    }
  }
  delete ev;
  return kOk;
}
CUresult cuEventRecord(CUevent_st* e, CUstream_st* s) {
  std::lock_guard lock(g_mu);
  auto* ev = static_cast<FakeEvent*>(e);
  ev->recorded = true;
  ev->complete = false;
  ev->stream = s;
  Op op;
  op.event = ev;
  op.enqueued = now_s();
  s->ops.push_back(op);
  return kOk;
}
CUresult cuEventQuery(CUevent_st* e) {
  std::lock_guard lock(g_mu);
  auto* ev = static_cast<FakeEvent*>(e);
  if (!ev->recorded) return kOk;
  if (!ev->complete && ev->stream != nullptr) advance(ev->stream);
  return ev->complete ? kOk : kNotReady;
}
CUresult cuEventElapsedTime_v2(float* ms, CUevent_st* a, CUevent_st* b) {
  std::lock_guard lock(g_mu);
  auto* ea = static_cast<FakeEvent*>(a);
  auto* eb = static_cast<FakeEvent*>(b);
  if (!ea->recorded || !eb->recorded) return kInvalidHandle;
  if (!ea->complete || !eb->complete) return kNotReady;
  *ms = static_cast<float>((eb->time - ea->time) * 1000.0);
  return kOk;
}

// ----- NCCL -----------------------------------------------------------------

ncclResult_t ncclGetVersion(int* v) {
  *v = nccl_version();
  // FAKE_NCCL_STALE_WARN: a WARN of the process's first NCCL call, left in the one
  // last-error buffer (src/debug.cc: ncclLastError is written by every WARN and never
  // cleared; tag v2.28.9-1).
  static std::once_flag stale;
  std::call_once(stale, [] {
    std::string text = env("FAKE_NCCL_STALE_WARN");
    if (text.empty()) return;
    std::lock_guard lock(g_mu);
    nccl_warn("init.cc", 1, text);
  });
  return kNcclOk;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::lock_guard lock(g_mu);
  std::string tmpl = env("TMPDIR", "/tmp") + "/rankcheck-fake-nccl-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  // NCCL_COMM_ID: the id names the environment's address and no root is started
  // (bootstrap.cc bootstrapGetUniqueId): every caller gets the same id.
  if (std::string at = env("NCCL_COMM_ID"); !at.empty()) {
    for (char& ch : at)
      if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    std::string dir = env("TMPDIR", "/tmp") + "/rankcheck-fake-nccl-commid-" + at;
    if ((::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) ||
        dir.size() + 1 > sizeof id->internal) {
      g_last_error = "fake ncclGetUniqueId: cannot make its directory";
      return kNcclSystemError;
    }
    std::memset(id->internal, 0, sizeof id->internal);
    std::memcpy(id->internal, dir.c_str(), dir.size() + 1);
    return kNcclOk;
  }
  if (::mkdtemp(buf.data()) == nullptr || buf.size() > sizeof id->internal) {
    g_last_error = "fake ncclGetUniqueId: cannot make its directory";
    return kNcclSystemError;
  }
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, buf.data(), buf.size());
  return kNcclOk;
}
// NCCL's version banner (src/init.cc showVersion, called for the communicator's rank
// 0): through 2.21 a printf to stdout at NCCL_DEBUG=VERSION and above, whatever the
// debug file; from 2.22 the bare line to stdout at VERSION and WARN only (at INFO an
// INFO line in the debug output instead, not modelled). Into the report, when the
// report is what stdout carries.
void show_version(int rank) {
  int level = debug_out().level;
  int v = nccl_version();
  if (rank != 0 || level < kLogVersion || (v > 22105 && level > kLogWarn)) return;
  int cuda = nccl_cuda_version();
  std::printf("NCCL version %d.%d.%d+cuda%d.%d\n", v / 10000, v / 100 % 100, v % 100, cuda / 1000,
              cuda % 1000 / 10);
  std::fflush(stdout);
}

ncclResult_t ncclCommInitRankConfig(ncclComm** comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfigHead* config) {
  std::unique_lock lock(g_mu);
  if (config == nullptr) {
    g_last_error = "fake NCCL expects a config";
    return kNcclInvalidArgument;
  }
  if (driver_cuda_version() / 1000 < nccl_cuda_version() / 1000) {
    // cudart's first call (cudaGetDevice) finds the driver too old: NCCL's CUDACHECK
    // warns in ncclCudaLibraryInit (misc/cudawrap.cc) and again in the init call itself
    // (init.cc), which returns before any communicator exists (v2.28.9).
    const std::string text =
        "Cuda failure 'CUDA driver version is insufficient for CUDA runtime version'";
    nccl_warn("misc/cudawrap.cc", 270, text);
    nccl_warn("init.cc", 2152, text);
    *comm = nullptr;
    if (t_group.depth > 0) t_group.error = kNcclUnhandledCudaError;
    return kNcclUnhandledCudaError;
  }
  if (std::string w = env("FAKE_NCCL_INIT_WRITE"); !w.empty() && injected_for(rank)) {
    size_t eq = w.find('=');
    if (std::FILE* f = std::fopen(w.substr(0, eq).c_str(), "w")) {
      std::fputs(eq == std::string::npos ? "" : w.c_str() + eq + 1, f);
      std::fclose(f);
    }
  }
  std::string mode = injected_for(rank) ? env("FAKE_NCCL_INIT") : "";
  if (mode == "fail-now") {  // as NCCL does for bad arguments: an error and no communicator
    *comm = nullptr;
    g_last_error = "fake: init refused at once as asked (FAKE_NCCL_INIT=fail-now)";
    if (t_group.depth > 0) t_group.error = kNcclInvalidArgument;
    return kNcclInvalidArgument;
  }
  show_version(rank);
  auto* c = new ncclComm;
  c->dir = dir_of(id);
  c->nranks = nranks;
  c->rank = rank;
  c->blocking = effective_blocking(config);
  c->owner = std::this_thread::get_id();
  g_comms.push_back(c);
  *comm = c;
  if (t_group.depth > 0) t_group.inits = true;
  if (t_group.depth > 0 && c->blocking) t_group.blocking_inits.push_back(c);
  // The network NCCL's init picks (src/init.cc: "Using network %s"; the transport's
  // own line first), IB where a QP is to fail.
  std::string net = mode == "fail-ib" ? "IB" : env("FAKE_NCCL_NET", "Socket");
  nccl_info(kSubInit | kSubNet, net == "IB"
                                    ? "NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.0.0.1<0>"
                                    : "NET/" + net + " : Using [0]eth0:10.0.0.1<0>");
  nccl_info(kSubInit, "Using network " + net);
  if (mode == "fail" || mode == "fail-ib") {
    c->init_failed = true;
    c->init_ib_error = mode == "fail-ib";
  } else if (tree_broken_at_init(rank)) {
    c->init_failed = true;
    c->init_tree_error = true;
  } else if (mode == "refused") {
    c->init_hang = true;  // no root to meet: no rank finishes
    c->refused_since = now_s();
  } else {
    c->init_hang = mode == "hang";
    if (!c->init_hang) write_file(c->dir + "/init-" + std::to_string(rank), "1");
  }
  if (c->blocking && t_group.depth == 0) return wait_blocking_init(lock, c);
  return kNcclInProgress;
}
ncclResult_t ncclCommInitRankScalable(ncclComm** comm, int nranks, int rank, int n_ids,
                                      ncclUniqueId* ids, ncclConfigHead* config) {
  if (nccl_version() < 22300) {
    std::lock_guard lock(g_mu);
    g_last_error = "fake: NCCL " + std::to_string(nccl_version()) +
                   " has no ncclCommInitRankScalable (2.23 and newer have)";
    return kNcclInvalidUsage;
  }
  if (n_ids < 1 || ids == nullptr) {
    std::lock_guard lock(g_mu);
    g_last_error = "fake ncclCommInitRankScalable: no ids";
    return kNcclInvalidArgument;
  }
  for (int k = 0; k < n_ids; ++k) {
    struct stat st {};
    if (::stat(dir_of(ids[k]).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      std::lock_guard lock(g_mu);
      g_last_error = "fake ncclCommInitRankScalable: root " + std::to_string(k) +
                     "'s id is not one ncclGetUniqueId made";
      return kNcclSystemError;
    }
  }
  std::fprintf(stderr, "fake NCCL: rank %d: ncclCommInitRankScalable over %d roots\n", rank, n_ids);
  ncclResult_t rc = ncclCommInitRankConfig(comm, nranks, ids[0], rank, config);
  // With NCCL_COMM_ID, ncclCommInitRankDev keeps one id on rank 0 only (nId = 1) while
  // the others look for every root: no two agree, and every rank waits in init.
  if (!env("NCCL_COMM_ID").empty() && n_ids > 1 && *comm != nullptr) {
    std::lock_guard lock(g_mu);
    (*comm)->init_hang = true;
  }
  return rc;
}
ncclResult_t ncclCommGetAsyncError(ncclComm* c, ncclResult_t* state) {
  std::lock_guard lock(g_mu);
  if (refuse_dead(c, "ncclCommGetAsyncError")) return kNcclInvalidArgument;
  InCall in(c);
  *state = progress(c);
  return kNcclOk;
}
// NCCL's commReclaim (init.cc at v2.28.9-1): the communicators of one id that live in
// one process (node mode: intraComm0 and its intraNext) are torn down together, by
// the last of them to be destroyed or aborted; each earlier call only counts itself.
// How many it tears down when `c` is that last one (it counts itself first), else 0.
int last_of_its_process(ncclComm* c) {
  c->finalized = true;
  int all = 0, left = 0;
  for (const ncclComm* o : g_comms) {
    if (o->dir != c->dir) continue;
    ++all;
    if (!o->finalized) ++left;
  }
  return left == 0 ? all : 0;
}

ncclResult_t ncclCommAbort(ncclComm* c) {
  if (c == nullptr) return kNcclOk;
  std::unique_lock lock(g_mu);
  if (refuse_dead(c, "ncclCommAbort")) return kNcclInvalidArgument;
  abort_from_another_thread_on_2_18(c);
  c->aborting = true;       // the abort flag: whatever waits on this communicator gives up
  if (t_group.depth > 0) {  // NCCL opens a group of its own: inside the caller's, it waits
    c->queued_reclaim = true;
    t_group.reclaims.push_back(c);
    return kNcclOk;
  }
  c->abort_called = true;
  abort_waits_for_the_retry_sleep(lock, c);
  // The teardown's time (FAKE_NCCL_ABORT_MS, the proxy's stop) is the last one's; an
  // abort that hangs (FAKE_NCCL_ABORT=hang: never returns) hangs wherever it is.
  int torn_down = last_of_its_process(c);
  if (torn_down > 1) {
    std::fprintf(stderr,
                 "fake NCCL: the last of %d communicators of this process aborted tears them "
                 "all down (commReclaim)\n",
                 torn_down);
  }
  if (torn_down > 0 || env("FAKE_NCCL_ABORT") == "hang") abort_takes_time(lock, c);
  for (int i = 0; i < 5000 && c->in_calls > 0; ++i) {  // joins what runs on it
    lock.unlock();
    pause_ms(1);
    lock.lock();
  }
  c->dead = true;
  return kNcclOk;
}
ncclResult_t ncclCommDestroy(ncclComm* c) {
  if (c == nullptr) return kNcclOk;
  std::lock_guard lock(g_mu);
  if (refuse_dead(c, "ncclCommDestroy")) return kNcclInvalidArgument;
  InCall in(c);
  if (env("FAKE_NCCL_DESTROY") == "error" && injected_for(c->rank) && c->error == kNcclOk) {
    c->destroy_error = true;  // an asynchronous error that shows only now
    c->error = kNcclRemoteError;
    g_last_error = "fake: a network error on rank " + std::to_string(c->rank) +
                   " shown at ncclCommDestroy (FAKE_NCCL_DESTROY=error)";
  }
  if (destroy_leaves_group_open()) ++t_group.depth;  // ncclGroupStartInternal
  ncclResult_t ready = ensure_ready(c, "ncclCommDestroy");
  if (ready != kNcclOk) {
    // From 2.24 the group stays open: the thread is one group deeper on return.
    if (ready != kNcclInvalidArgument && !c->destroy_error) {
      misuse("ncclCommDestroy on the communicator of rank " + std::to_string(c->rank) +
             " after an error (it must be aborted)");
    }
    return ready;
  }
  if (destroy_leaves_group_open()) --t_group.depth;  // ncclGroupEndInternal
  if (t_group.depth > 0) {
    c->queued_reclaim = true;
    t_group.reclaims.push_back(c);
    return kNcclOk;
  }
  last_of_its_process(c);
  c->dead = true;
  return kNcclOk;
}
ncclResult_t ncclGroupStart() {
  ++t_group.depth;
  return kNcclOk;
}
ncclResult_t ncclGroupEnd() {
  std::unique_lock lock(g_mu);
  if (t_group.depth == 0) {
    misuse("ncclGroupEnd: not in a group call");
    g_last_error = "ncclGroupEnd: not in a group call.";
    return kNcclInvalidUsage;
  }
  if (--t_group.depth > 0) return kNcclOk;
  ThreadGroup g = std::move(t_group);
  t_group = ThreadGroup{};
  for (ncclComm* c : g.reclaims) {
    last_of_its_process(c);
    c->queued_reclaim = false;
    c->abort_called = true;
    c->dead = true;
  }
  if (g.error != kNcclOk) return g.error;  // nothing of the group is launched
  for (ncclComm* c : g.blocking_inits) {
    ncclResult_t state = wait_blocking_init(lock, c);
    if (state != kNcclOk) return state;
  }
  ncclResult_t rc = launch(lock, std::move(g.ops), now_s());
  if (rc == kNcclOk && g.inits && g.blocking_inits.empty()) rc = kNcclInProgress;
  return rc;
}
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, int type, int op,
                           ncclComm* c, CUstream_st* stream) {
  double stamp = now_s();
  std::unique_lock lock(g_mu);
  if (refuse_dead(c, "ncclAllReduce")) return kNcclInvalidArgument;
  InCall in(c);
  auto fail = [](ncclResult_t rc) {
    if (t_group.depth > 0) t_group.error = rc;
    return rc;
  };
  ncclResult_t ready = ensure_ready(c, "ncclAllReduce");
  if (ready != kNcclOk) return fail(ready);
  if (op != 0 || (type != kInt64 && type != kFloat)) return fail(kNcclInvalidArgument);
  std::string mode = allreduce_mode(c->rank, type);
  if (mode == "fail-now") {
    g_last_error = "fake: ncclAllReduce refused as asked (FAKE_NCCL_ALLREDUCE) on rank " +
                   std::to_string(c->rank);
    return fail(kNcclSystemError);
  }
  if (mode == "fail-silent") return fail(kNcclSystemError);  // no WARN: the last error stays
  auto k = std::make_shared<Coll>();
  k->comm = c;
  k->seq = c->seq++;
  k->recv = recv;
  k->count = count;
  k->type = type;
  k->connects = mode != "hang";
  k->arrives = mode != "hang" && mode != "neterr";
  k->wrong = mode == "wrong";
  k->late = done_late_s(c->rank, type);
  double busbw = std::atof(env("FAKE_NCCL_BUSBW", "100").c_str()) * 1e9;
  double n = c->nranks;
  double algbw = n > 1 ? busbw * n / (2.0 * (n - 1)) : busbw;
  k->seconds = double(count) * (type == kInt64 ? 8 : 4) / algbw;
  if (c->nranks == 1) {
    // ncclLaunchOneRank (src/device/onerank.cu, tag v2.28.9-1): a sum on one rank is a
    // cudaMemcpyAsync from send to receive, and nothing at all in place.
    k->no_work = send == recv;
    if (k->no_work) k->seconds = 0;
  }
  Queued q{k, stream, send};
  if (t_group.depth > 0) {
    t_group.ops.push_back(q);
    return kNcclOk;
  }
  return launch(lock, {q}, stamp);
}
const char* ncclGetErrorString(ncclResult_t rc) {
  switch (rc) {
    case kNcclOk:
      return "no error";
    case kNcclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case kNcclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case kNcclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case kNcclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case kNcclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case kNcclRemoteError:
      return "remote process exited or there was a network error";
    case kNcclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}
// One buffer for the whole process, whatever communicator is named (as in NCCL).
const char* ncclGetLastError(ncclComm*) {
  std::lock_guard lock(g_mu);
  static thread_local std::string copy;
  copy = g_last_error;
  return copy.c_str();
}

// ----- NVML -----------------------------------------------------------------

struct nvmlDevice_st;
struct FakeFabricInfoV2 {  // nvmlGpuFabricInfo_v2_t
  unsigned int version;
  unsigned char cluster_uuid[16];
  int status;
  unsigned int clique_id;
  unsigned char state;
  unsigned int health_mask;
};

int nvmlInit_v2() {
  return 0;
}
int nvmlShutdown() {
  return 0;
}
const char* nvmlErrorString(int rc) {
  return rc == 0 ? "Success" : "Unknown Error";
}
int nvmlDeviceGetHandleByPciBusId_v2(const char* bus, nvmlDevice_st** dev) {
  // "00000000:1A:00.0": the physical GPU 0x1A - 0x10, as cuDeviceGetPCIBusId names it.
  std::string b = bus != nullptr ? bus : "";
  size_t colon = b.find(':');
  if (colon == std::string::npos) return 6;  // NVML_ERROR_NOT_FOUND
  int index = int(std::strtol(b.substr(colon + 1, 2).c_str(), nullptr, 16)) - 0x10;
  if (index < 0 || size_t(index) >= all_devices().size()) return 6;
  *dev = reinterpret_cast<nvmlDevice_st*>(uintptr_t(index) + 1);
  return 0;
}
int nvmlDeviceGetGpuFabricInfoV(nvmlDevice_st*, FakeFabricInfoV2* info) {
  if (info->version != (unsigned(sizeof(FakeFabricInfoV2)) | (2u << 24))) return 25;  // version
  std::string f = env("FAKE_NVML_FABRIC", "unsupported");
  info->state = f == "not-started"           ? 1
                : f == "in-progress"         ? 2
                : f.starts_with("completed") ? 3
                                             : 0;
  info->status = f == "completed:error" ? 999 : 0;
  return 0;
}
int nvmlDeviceGetNvLinkState(nvmlDevice_st* dev, unsigned link, int* active) {
  std::vector<std::string> counts = split(env("FAKE_NVML_NVLINKS"));
  if (counts.empty()) return 3;  // NVML_ERROR_NOT_SUPPORTED: no NVLink
  if (link >= 18) return 2;      // NVML_ERROR_INVALID_ARGUMENT
  size_t index = size_t(reinterpret_cast<uintptr_t>(dev) - 1);
  int n = std::atoi(counts[std::min(index, counts.size() - 1)].c_str());
  *active = int(link) < n ? 1 : 0;
  return 0;
}

}  // extern "C"
