// The rehearsal's messages: the plan the master hands each host's prober, and
// what it found.

#include <algorithm>

#include "protocol/codec.h"
#include "protocol/messages.h"

namespace rankcheck {

std::vector<uint8_t> encode(const PathPlan& m) {
  Writer w;
  w.u32(m.self_host);
  w.str(cut(m.self_identity, 256));
  w.u32(m.per_conn_ms);
  w.u32(m.total_ms);
  w.u32(m.in_flight);
  uint32_t n = std::min<uint32_t>(static_cast<uint32_t>(m.targets.size()), kMaxPathTargets);
  w.u32(n);
  for (uint32_t i = 0; i < n; ++i) {
    const PathTarget& t = m.targets[i];
    w.u32(t.host);
    w.str(cut(t.address, 64));
    w.str(cut(t.ifname, 64));
    w.u16(t.port);
    w.str(cut(t.identity, 256));
  }
  return encode_frame(MsgType::kPathPlan, w.data());
}

std::vector<uint8_t> encode(const PathReport& m) {
  Writer w;
  uint32_t n = std::min<uint32_t>(static_cast<uint32_t>(m.results.size()), kMaxPathTargets);
  w.u32(n);
  for (uint32_t i = 0; i < n; ++i) {
    const PathResult& r = m.results[i];
    w.u32(r.edge.to);
    w.u8(static_cast<uint8_t>(r.outcome));
    w.u32(r.connect_us);
    w.str(cut(r.detail, 64));
  }
  return encode_frame(MsgType::kPathReport, w.data());
}

Result<PathPlan> decode_path_plan(std::span<const uint8_t> payload) {
  Reader r(payload);
  PathPlan m;
  m.self_host = r.u32();
  m.self_identity = r.str(256, "identity");
  m.per_conn_ms = r.u32();
  m.total_ms = r.u32();
  m.in_flight = r.u32();
  m.targets.resize(r.count(kMaxPathTargets, "path target"));
  for (PathTarget& t : m.targets) {
    t.host = r.u32();
    t.address = r.str(64, "address");
    t.ifname = r.str(64, "interface");
    t.port = r.u16();
    t.identity = r.str(256, "identity");
  }
  return finish(r, std::move(m), "path plan");
}

Result<PathReport> decode_path_report(std::span<const uint8_t> payload) {
  Reader r(payload);
  PathReport m;
  m.results.resize(r.count(kMaxPathTargets, "path result"));
  for (PathResult& x : m.results) {
    x.edge.to = r.u32();
    uint8_t o = r.u8();
    if (o > static_cast<uint8_t>(PathOutcome::kDenied)) r.fail("unknown path outcome");
    x.outcome = static_cast<PathOutcome>(o);
    x.connect_us = r.u32();
    x.detail = r.str(64, "detail");
  }
  return finish(r, std::move(m), "path report");
}

}  // namespace rankcheck
