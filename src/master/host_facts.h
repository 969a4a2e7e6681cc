#pragma once
// The facts a host's members all send alike (NCCL's interface and data network,
// /dev/shm): the master keeps one copy a host, not one a member (100k of them).

#include "base/shared_value.h"
#include "model/record.h"

namespace rankcheck {

class HostFactPools {
 public:
  HostFactPools();
  /// Points `rec`'s host facts at the copy already held of each, or keeps its own
  /// as that copy. Used on one thread (the master's).
  void intern(Record& rec);

 private:
  ValuePool<NcclIfFacts> nccl_ifs_;
  ValuePool<NcclNetFacts> nccl_nets_;
  ValuePool<ShmFacts> shms_;
};

}  // namespace rankcheck
