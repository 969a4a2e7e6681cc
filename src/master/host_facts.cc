#include "master/host_facts.h"

#include <cstdint>

#include "protocol/record_codec.h"

namespace rankcheck {
namespace {

// Facts hashed by their encoding on the wire (FNV-1a): equal facts encode, and so
// hash, alike.
template <class T, void (*kEncode)(Writer&, const T&)>
size_t encoded_hash(const T& v) {
  Writer w;
  kEncode(w, v);
  uint64_t h = 14695981039346656037ull;
  for (uint8_t b : w.data())
    h = (h ^ b) * 1099511628211ull;
  return static_cast<size_t>(h);
}

}  // namespace

HostFactPools::HostFactPools()
    : nccl_ifs_(encoded_hash<NcclIfFacts, encode_nccl_if>),
      nccl_nets_(encoded_hash<NcclNetFacts, encode_nccl_net>),
      shms_(encoded_hash<ShmFacts, encode_shm>) {}

void HostFactPools::intern(Record& rec) {
  nccl_ifs_.intern(rec.nccl_if);
  nccl_nets_.intern(rec.nccl_net);
  shms_.intern(rec.shm);
}

}  // namespace rankcheck
