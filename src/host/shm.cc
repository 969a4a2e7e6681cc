#include "host/shm.h"

#include <sys/statvfs.h>

#include "nccl/param.h"
#include "nccl/shm.h"

namespace rankcheck {

ShmFacts read_shm(const SysFs& sys, const EnvMap& env) {
  ShmFacts f;
  f.segment = nccl::shm_segment_bytes(env);
  if (nccl::param(env, "NCCL_SHM_DISABLE", 0) == 1) f.flags |= ShmFacts::kShmDisabled;
  if (nccl::param(env, "NCCL_P2P_DISABLE", 0) == 1) f.flags |= ShmFacts::kP2pDisabled;
  struct statvfs st {};
  // A tmpfs mounted with size=0 has no limit and says 0 blocks: no size to compare.
  if (::statvfs(sys.path("/dev/shm").c_str(), &st) != 0 || st.f_blocks == 0) return f;
  f.size = static_cast<int64_t>(st.f_blocks) * static_cast<int64_t>(st.f_frsize);
  f.avail = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
  return f;
}

}  // namespace rankcheck
