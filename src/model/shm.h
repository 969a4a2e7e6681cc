#pragma once
// /dev/shm as a member's host offers it to NCCL's SHM transport, as a record carries
// it (host/shm.h reads it, nccl/shm.h says what NCCL puts there).

#include <cstdint>

namespace rankcheck {

struct ShmFacts {
  enum Flags : uint8_t {
    kShmDisabled = 1,  ///< NCCL_SHM_DISABLE=1: NCCL's SHM transport is off
    kP2pDisabled = 2,  ///< NCCL_P2P_DISABLE=1: the host's GPUs talk through SHM
  };
  int64_t size = -1;    ///< the filesystem's size in bytes; -1: unreadable, or no limit
  int64_t avail = -1;   ///< what an unprivileged process may still write there
  int64_t segment = 0;  ///< the bytes of one SHM connection's buffers (nccl/shm.h)
  uint8_t flags = 0;

  bool known() const { return size >= 0; }
  bool operator==(const ShmFacts&) const = default;
};

}  // namespace rankcheck
