// A fake CUDA driver and NCCL in one shared library, for tests on machines
// without GPUs. It exports the symbols rankcheck's GPU stage dlopen()s, with the
// same C signatures, and is loaded through the same path (RANKCHECK_CUDA_LIB,
// RANKCHECK_NCCL_LIB). What it fakes, driven by environment variables:
//
//   FAKE_GPUS=uuid,uuid,...   the host's GPUs (CUDA_VISIBLE_DEVICES filters them
//                             by index or UUID, as the real driver does)
//   FAKE_CUDA_VERSION=13000   what cuDriverGetVersion says
//   FAKE_CUDA_INIT=fail       cuInit fails
//   FAKE_NCCL_VERSION=22809   what ncclGetVersion says
//   FAKE_NCCL_INIT=fail|fail-now|hang   this process's communicators fail later,
//                             fail at once with no communicator, or never finish
//   FAKE_CUDA_COPY=fail       copies between host and GPU fail
//   FAKE_NCCL_ALLREDUCE=wrong|hang   a wrong total on this process, or none
//
// The collective itself is real across processes: ncclGetUniqueId makes a
// directory whose path travels in the id; ranks register and exchange their
// contributions as files there, so an all-reduce sums what every process sent,
// and init finishes only when every rank has registered.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st {
  int device;
};
struct CUstream_st;
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
constexpr CUresult kOk = 0, kInvalidValue = 1, kNotInitialized = 3, kNoDevice = 100,
                   kNotReady = 600;
constexpr ncclResult_t kNcclOk = 0, kNcclSystemError = 2, kNcclInvalidArgument = 4,
                       kNcclInProgress = 7;

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

bool g_init = false;
std::vector<std::string> g_visible;  // UUIDs of the visible devices

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

}  // namespace

struct ncclComm {
  std::string dir;
  int nranks = 0;
  int rank = 0;
  bool hang = false;
  bool failed = false;
  int seq = 0;  // collectives issued
  std::string last_error;
};

struct PendingReduce {
  ncclComm* comm;
  int seq;
  void* recv;
  size_t count;
  int type;  // 4: ncclInt64, 7: ncclFloat
  CUstream_st* stream;
};

namespace {
std::vector<PendingReduce> g_pending;
std::string g_last_error;
}  // namespace

extern "C" {

// ----- CUDA driver ----------------------------------------------------------

CUresult cuInit(unsigned) {
  if (env("FAKE_CUDA_INIT") == "fail") return kNoDevice;
  std::vector<std::string> all = split(env("FAKE_GPUS"));
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  g_visible.clear();
  if (cvd == nullptr) {
    g_visible = all;
  } else {
    for (const std::string& item : split(cvd)) {
      if (item.rfind("GPU-", 0) == 0) {
        for (const auto& u : all) {
          if (u == item) g_visible.push_back(u);
        }
      } else {
        size_t i = std::strtoul(item.c_str(), nullptr, 10);
        if (i < all.size()) g_visible.push_back(all[i]);
      }
    }
  }
  g_init = true;
  return kOk;
}
CUresult cuDriverGetVersion(int* v) {
  *v = std::atoi(env("FAKE_CUDA_VERSION", "13000").c_str());
  return kOk;
}
CUresult cuDeviceGetCount(int* n) {
  if (!g_init) return kNotInitialized;
  *n = static_cast<int>(g_visible.size());
  return kOk;
}
CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= static_cast<int>(g_visible.size())) return kInvalidValue;
  *d = ordinal;
  return kOk;
}
CUresult cuDeviceGetName(char* name, int len, CUdevice) {
  std::snprintf(name, static_cast<size_t>(len), "Fake GPU");
  return kOk;
}
CUresult cuDeviceGetUuid_v2(CUuuid* u, CUdevice d) {
  // "GPU-xxxxxxxx-xxxx-..." back into 16 bytes.
  std::string hex;
  for (char c : g_visible[static_cast<size_t>(d)].substr(4)) {
    if (c != '-') hex += c;
  }
  hex.resize(32, '0');
  for (int i = 0; i < 16; ++i) {
    u->bytes[i] =
        static_cast<char>(std::strtoul(hex.substr(size_t(i) * 2, 2).c_str(), nullptr, 16));
  }
  return kOk;
}
CUresult cuDeviceGetPCIBusId(char* bus, int len, CUdevice d) {
  std::snprintf(bus, static_cast<size_t>(len), "00000000:%02X:00.0", 0x10 + d);
  return kOk;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
  *bytes = size_t(80) << 30;
  return kOk;
}
CUresult cuDevicePrimaryCtxRetain(CUctx_st** ctx, CUdevice d) {
  static CUctx_st primary[64];  // one per device, like the real primary contexts
  if (d < 0 || d >= 64) return kInvalidValue;
  primary[d].device = d;
  *ctx = &primary[d];
  return kOk;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) {
  return kOk;
}
CUresult cuCtxSetCurrent(CUctx_st*) {
  return kOk;
}
CUresult cuStreamCreate(CUstream_st** s, unsigned) {
  *s = reinterpret_cast<CUstream_st*>(new char(0));
  return kOk;
}
CUresult cuStreamDestroy_v2(CUstream_st* s) {
  delete reinterpret_cast<char*>(s);
  return kOk;
}
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  *p = reinterpret_cast<CUdeviceptr>(std::calloc(1, bytes));
  return *p != 0 ? kOk : 2;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  std::free(reinterpret_cast<void*>(p));
  return kOk;
}
// Copies are immediate here; the real asynchronous one is ordered by its stream.
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream_st*) {
  if (env("FAKE_CUDA_COPY") == "fail") return kInvalidValue;
  std::memcpy(reinterpret_cast<void*>(dst), src, n);
  return kOk;
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  if (env("FAKE_CUDA_COPY") == "fail") return kInvalidValue;
  std::memcpy(dst, reinterpret_cast<void*>(src), n);
  return kOk;
}
CUresult cuGetErrorString(CUresult rc, const char** s) {
  *s = rc == kNoDevice ? "no CUDA-capable device is detected (fake)" : "fake CUDA error";
  return kOk;
}

// A stream is done when every pending all-reduce on it has every contribution.
CUresult cuStreamQuery(CUstream_st* s) {
  for (auto it = g_pending.begin(); it != g_pending.end();) {
    if (it->stream != s) {
      ++it;
      continue;
    }
    ncclComm* c = it->comm;
    std::string prefix = "ar" + std::to_string(it->seq) + "-";
    if (c->hang || count_prefix(c->dir, prefix) < c->nranks) return kNotReady;
    size_t width = it->type == 4 ? 8 : 4;
    std::vector<char> sum(it->count * width, 0);
    for (int r = 0; r < c->nranks; ++r) {
      std::ifstream in(c->dir + "/" + prefix + std::to_string(r), std::ios::binary);
      std::vector<char> part(sum.size());
      in.read(part.data(), static_cast<std::streamsize>(part.size()));
      for (size_t k = 0; k < it->count; ++k) {
        if (width == 8) {
          int64_t a, b;
          std::memcpy(&a, &sum[k * 8], 8);
          std::memcpy(&b, &part[k * 8], 8);
          a += b;
          std::memcpy(&sum[k * 8], &a, 8);
        } else {
          float a, b;
          std::memcpy(&a, &sum[k * 4], 4);
          std::memcpy(&b, &part[k * 4], 4);
          a += b;
          std::memcpy(&sum[k * 4], &a, 4);
        }
      }
    }
    if (env("FAKE_NCCL_ALLREDUCE") == "wrong" && width == 8) {
      int64_t a;
      std::memcpy(&a, sum.data(), 8);
      a += 1;
      std::memcpy(sum.data(), &a, 8);
    }
    std::memcpy(it->recv, sum.data(), sum.size());
    it = g_pending.erase(it);
  }
  return kOk;
}

// ----- NCCL -----------------------------------------------------------------

ncclResult_t ncclGetVersion(int* v) {
  *v = std::atoi(env("FAKE_NCCL_VERSION", "22809").c_str());
  return kNcclOk;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::string tmpl = env("TMPDIR", "/tmp") + "/rankcheck-fake-nccl-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr || buf.size() > sizeof id->internal) {
    g_last_error = "fake ncclGetUniqueId: cannot make its directory";
    return kNcclSystemError;
  }
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, buf.data(), buf.size());
  return kNcclOk;
}
ncclResult_t ncclCommInitRankConfig(ncclComm** comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfigHead* config) {
  if (config == nullptr || config->blocking != 0) {
    g_last_error = "fake NCCL expects a non-blocking config";
    return kNcclInvalidArgument;
  }
  std::string mode = env("FAKE_NCCL_INIT");
  if (mode == "fail-now") {  // as NCCL does for bad arguments: an error and no communicator
    *comm = nullptr;
    g_last_error = "fake: init refused at once as asked (FAKE_NCCL_INIT=fail-now)";
    return kNcclInvalidArgument;
  }
  auto* c = new ncclComm{dir_of(id), nranks, rank, false, false, 0, ""};
  *comm = c;
  if (mode == "fail") {
    c->failed = true;
    c->last_error = "fake: init failed as asked (FAKE_NCCL_INIT=fail)";
    return kNcclInProgress;
  }
  c->hang = mode == "hang";
  if (!c->hang) write_file(c->dir + "/init-" + std::to_string(rank), "1");
  return kNcclInProgress;
}
ncclResult_t ncclCommGetAsyncError(ncclComm* c, ncclResult_t* state) {
  if (c->failed) {
    *state = kNcclSystemError;
  } else if (c->hang || count_prefix(c->dir, "init-") < c->nranks) {
    *state = kNcclInProgress;
  } else {
    *state = kNcclOk;
  }
  return kNcclOk;
}
ncclResult_t ncclCommAbort(ncclComm* c) {
  delete c;
  return kNcclOk;
}
ncclResult_t ncclCommDestroy(ncclComm* c) {
  delete c;
  return kNcclOk;
}
ncclResult_t ncclGroupStart() {
  return kNcclOk;
}
ncclResult_t ncclGroupEnd() {
  return kNcclOk;
}
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, int type, int op,
                           ncclComm* c, CUstream_st* stream) {
  if (op != 0 || (type != 4 && type != 7)) return kNcclInvalidArgument;
  int seq = c->seq++;
  if (env("FAKE_NCCL_ALLREDUCE") == "hang") c->hang = true;
  if (!c->hang) {
    size_t width = type == 4 ? 8 : 4;
    write_file(c->dir + "/ar" + std::to_string(seq) + "-" + std::to_string(c->rank),
               std::string(static_cast<const char*>(send), count * width));
  }
  g_pending.push_back(PendingReduce{c, seq, recv, count, type, stream});
  return kNcclOk;
}
const char* ncclGetErrorString(ncclResult_t rc) {
  switch (rc) {
    case kNcclSystemError:
      return "unhandled system error (fake)";
    case kNcclInvalidArgument:
      return "invalid argument (fake)";
    default:
      return "fake NCCL error";
  }
}
const char* ncclGetLastError(ncclComm* c) {
  return c != nullptr ? c->last_error.c_str() : g_last_error.c_str();
}

}  // extern "C"
