#pragma once
// What NCCL's SHM transport puts in /dev/shm (src/transport/shm.cc, src/init.cc
// computeBuffSizes, src/misc/shmutils.cc ncclShmOpen; read at v2.28.9-1).
//
// Each SHM connection between two ranks of a host maps one segment holding the
// buffers of the three protocols: sizeof(struct ncclRecvMem) (4 KiB) + NCCL_LL_BUFFSIZE
// (512 KiB: 8 lines x 512 threads x 8 steps x 16 bytes) + NCCL_LL128_BUFFSIZE
// (4,800 KiB: 120 x 640 x 8 x 8 bytes) + NCCL_BUFFSIZE (4 MiB): 9,637,888 bytes, the
// size NCCL's "Error while creating shared memory segment ... (size 9637888)" prints
// (NVIDIA/nccl#1518; the 4 KiB header is what that figure leaves after the buffers,
// not read from the struct). How many segments a host maps is rankcheck's reading, not
// a formula of NCCL's: a ring's edge into each local rank is one connection per
// channel, and NCCL runs 2 channels at least: 4 ranks need 73.5 MiB, more than a
// container's default 64 MB, where 2 ranks (36.8 MiB) fit, as #1518 reports.
// A lower bound: trees, more channels and the proxy's shared pools add to it; NCCL
// built for CUDA 12.2+ with cuMem host memory enabled allocates these buffers
// outside /dev/shm, and GPUs with peer access use the P2P transport instead.

#include <cstdint>

#include "base/env.h"

namespace rankcheck::nccl {

inline constexpr int64_t kShmHeader = 4096;          // sizeof(struct ncclRecvMem), by #1518
inline constexpr int64_t kLlBuffSize = 524288;       // DEFAULT_LL_BUFFSIZE
inline constexpr int64_t kLl128BuffSize = 4915200;   // DEFAULT_LL128_BUFFSIZE
inline constexpr int64_t kSimpleBuffSize = 4194304;  // DEFAULT_BUFFSIZE
inline constexpr int64_t kShmMinChannels = 2;

/// One SHM connection's segment under `env`'s NCCL_LL_BUFFSIZE, NCCL_LL128_BUFFSIZE and
/// NCCL_BUFFSIZE (each its default when unset or -2, as computeBuffSizes reads them).
int64_t shm_segment_bytes(const EnvMap& env);

/// The least /dev/shm a host's `local_ranks` need when NCCL's SHM transport joins them:
/// none for one rank, else kShmMinChannels x local_ranks x `segment`.
int64_t shm_need_bytes(int64_t segment, int64_t local_ranks);

}  // namespace rankcheck::nccl
