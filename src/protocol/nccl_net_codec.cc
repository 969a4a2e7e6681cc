// NCCL's data network in a record (model/nccl_net.h): every string and count capped
// on both sides, every enum checked while decoding.

#include "protocol/record_codec.h"

namespace rankcheck {

void encode_nccl_net(Writer& w, const NcclNetFacts& f) {
  w.u8(f.transport);
  w.u8(f.reason);
  w.u8(f.gdr);
  w.u8(f.flags);
  w.u8(f.ib_devices);
  w.u8(f.nics);
  w.u64(static_cast<uint64_t>(f.memlock));
  w.u64(static_cast<uint64_t>(f.memlock_need));
  w.str(f.rule.str().substr(0, kMaxShortString));
  w.str(f.plugin.str().substr(0, kMaxShortString));
  w.str(f.plugin_tried.str().substr(0, kMaxShortString));
  w.u16(f.plugin_abi);
  w.str(f.net_name.str().substr(0, 64));
  w.str(f.gid_rule.str().substr(0, kMaxShortString));
  w.str(f.root.str().substr(0, kMaxShortString));
  w.i32(f.rules_version);
  uint32_t n = std::min<uint32_t>(static_cast<uint32_t>(f.ports.size()), kMaxIbPorts);
  w.u32(n);
  for (uint32_t i = 0; i < n; ++i) {
    const IbPortFacts& p = f.ports[i];
    w.str(p.device.str().substr(0, 64));
    w.u8(p.port);
    w.u8(p.state);
    w.u8(p.link);
    w.u8(p.flags);
    w.u32(p.rate_gbps);
    w.u16(static_cast<uint16_t>(p.gid_index));
    w.u8(p.gid_roce);
    w.u8(p.gid_family);
    w.str(p.gid.str().substr(0, 64));
    w.str(p.netdev.str().substr(0, 64));
  }
}

NcclNetFacts decode_nccl_net(Reader& r) {
  NcclNetFacts f;
  f.transport = r.u8();
  if (f.transport > NcclNetFacts::kNoNet) r.fail("unknown NCCL network transport");
  f.reason = r.u8();
  if (f.reason > NcclNetFacts::kNetMissing) r.fail("unknown NCCL network reason");
  f.gdr = r.u8();
  if (f.gdr > NcclNetFacts::kGdrPeermem) r.fail("unknown GPUDirect RDMA state");
  f.flags = r.u8();
  f.ib_devices = r.u8();
  f.nics = r.u8();
  f.memlock = static_cast<int64_t>(r.u64());
  f.memlock_need = static_cast<int64_t>(r.u64());
  if (f.memlock < -2) r.fail("memlock limit out of bounds");
  f.rule = r.str(kMaxShortString, "NCCL network rule");
  f.plugin = r.str(kMaxShortString, "NCCL network plugin");
  f.plugin_tried = r.str(kMaxShortString, "NCCL network plugins tried");
  f.plugin_abi = r.u16();
  f.net_name = r.str(64, "NCCL_NET");
  f.gid_rule = r.str(kMaxShortString, "GID rule");
  f.root = r.str(kMaxShortString, "sysfs root");
  f.rules_version = r.i32();
  f.ports.resize(r.count(kMaxIbPorts, "IB port"));
  for (IbPortFacts& p : f.ports) {
    p.device = r.str(64, "IB device");
    p.port = r.u8();
    p.state = r.u8();
    if (p.state > IbPortFacts::kDefer) r.fail("unknown IB port state");
    p.link = r.u8();
    if (p.link > IbPortFacts::kEthernet) r.fail("unknown IB link layer");
    p.flags = r.u8();
    p.rate_gbps = r.u32();
    p.gid_index = static_cast<int16_t>(r.u16());
    p.gid_roce = r.u8();
    p.gid_family = r.u8();
    p.gid = r.str(64, "GID");
    p.netdev = r.str(64, "GID netdev");
  }
  return f;
}

}  // namespace rankcheck
