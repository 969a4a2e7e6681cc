#pragma once
// A record on the wire: field by field, every length checked against its cap
// (model/record.h) while decoding, before anything is allocated.

#include "model/record.h"
#include "protocol/record_codec.h"
#include "protocol/wire.h"

namespace rankcheck {

void encode_record(Writer& w, const Record& r);
/// Decodes and validates a record; the reader fails on anything out of bounds.
Record decode_record(Reader& r);

void encode_gpu(Writer& w, const GpuFacts& g);
GpuFacts decode_gpu(Reader& r);

/// /dev/shm's facts (after the data network).
void encode_shm(Writer& w, const ShmFacts& f);

void encode_nccl_if(Writer& w, const NcclIfFacts& f);
NcclIfFacts decode_nccl_if(Reader& r);

/// NCCL's data network (protocol 3: after the variable sources; nccl_net_codec.cc).
void encode_nccl_net(Writer& w, const NcclNetFacts& f);
NcclNetFacts decode_nccl_net(Reader& r);

/// The host's PCIe facts (protocol 8: after the machine; pcie_codec.cc).
void encode_pcie(Writer& w, const PcieFacts& f);
PcieFacts decode_pcie(Reader& r);

}  // namespace rankcheck
