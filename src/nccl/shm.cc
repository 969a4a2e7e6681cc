// NCCL's SHM transport's /dev/shm (see shm.h), read in NVIDIA/nccl at v2.28.9-1.

#include "nccl/shm.h"

#include "nccl/param.h"

namespace rankcheck::nccl {
namespace {

int64_t buff_size(const EnvMap& env, std::string_view name, int64_t dflt) {
  int64_t v = param(env, name, -2);
  return v == -2 || v < 0 ? dflt : v;
}

}  // namespace

int64_t shm_segment_bytes(const EnvMap& env) {
  return kShmHeader + buff_size(env, "NCCL_LL_BUFFSIZE", kLlBuffSize) +
         buff_size(env, "NCCL_LL128_BUFFSIZE", kLl128BuffSize) +
         buff_size(env, "NCCL_BUFFSIZE", kSimpleBuffSize);
}

int64_t shm_need_bytes(int64_t segment, int64_t local_ranks) {
  return local_ranks < 2 ? 0 : kShmMinChannels * local_ranks * segment;
}

}  // namespace rankcheck::nccl
