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
    w.bytes(t.nonce);
    w.bytes(t.ticket);
  }
  w.bytes(m.mac);
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
  w.bytes(m.mac);
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
    r.bytes(t.nonce);
    r.bytes(t.ticket);
  }
  r.bytes(m.mac);
  return finish(r, std::move(m), "path plan");
}

Result<PathReport> decode_path_report(std::span<const uint8_t> payload) {
  Reader r(payload);
  PathReport m;
  m.results.resize(r.count(kMaxPathTargets, "path result"));
  for (PathResult& x : m.results) {
    x.edge.to = r.u32();
    uint8_t o = r.u8();
    if (o > static_cast<uint8_t>(PathOutcome::kFlooded)) r.fail("unknown path outcome");
    x.outcome = static_cast<PathOutcome>(o);
    x.connect_us = r.u32();
    x.detail = r.str(64, "detail");
  }
  r.bytes(m.mac);
  return finish(r, std::move(m), "path report");
}

namespace {

Mac trailing(std::span<const uint8_t> payload) {
  Mac m{};
  if (payload.size() >= kMacSize) std::copy(payload.end() - kMacSize, payload.end(), m.begin());
  return m;
}

// The frame with its trailing MAC (zeros when the HMAC failed: never accepted).
std::vector<uint8_t> sign(std::vector<uint8_t> frame, std::string_view label, const JobToken& token,
                          const Nonce& server, const Nonce& client) {
  auto p = std::span(frame).subspan(kHeaderSize);
  if (auto mac = token.mac(label, server, client, signed_part(p))) {
    std::copy(mac->begin(), mac->end(), p.end() - kMacSize);
  }
  return frame;
}

}  // namespace

std::vector<uint8_t> encode_signed(const PathPlan& m, const JobToken& token, const Nonce& server,
                                   const Nonce& client) {
  return sign(encode(m), kPathPlanLabel, token, server, client);
}

std::vector<uint8_t> encode_signed(const PathReport& m, const JobToken& token, const Nonce& server,
                                   const Nonce& client) {
  return sign(encode(m), kPathReportLabel, token, server, client);
}

bool verify_path_plan(std::span<const uint8_t> payload, const JobToken& token, const Nonce& server,
                      const Nonce& client) {
  return token.verify(trailing(payload), kPathPlanLabel, server, client, signed_part(payload));
}

bool verify_path_report(std::span<const uint8_t> payload, const JobToken& token,
                        const Nonce& server, const Nonce& client) {
  return token.verify(trailing(payload), kPathReportLabel, server, client, signed_part(payload));
}

std::array<uint8_t, kMacSize> path_ticket(const JobToken& token, std::span<const uint8_t> nonce,
                                          std::string_view identity) {
  auto id = std::span(reinterpret_cast<const uint8_t*>(identity.data()), identity.size());
  return token.mac(kPathTicketLabel, nonce, {}, id).value_or(Mac{});
}

Status check_path_plan(const PathPlan& p, uint32_t world_size) {
  // Every host has at least one rank, and a host connects to each other at most once.
  uint32_t most = std::min<uint32_t>(kMaxPathTargets, std::max<uint32_t>(world_size, 2) - 1);
  if (p.targets.size() > most) {
    return Error{
        fmt::format("a path plan of {} connections, more than a job of {} ranks has "
                    "hosts to connect to ({} at most)",
                    p.targets.size(), world_size, most)};
  }
  if (p.per_conn_ms == 0 || p.per_conn_ms > kMaxPathConnMs) {
    return Error{fmt::format("a path plan that gives each connection {} ms (1-{} ms)",
                             p.per_conn_ms, kMaxPathConnMs)};
  }
  if (p.in_flight == 0 || p.in_flight > kMaxPathInFlight) {
    return Error{
        fmt::format("a path plan of {} connections at once (1-{})", p.in_flight, kMaxPathInFlight)};
  }
  if (p.total_ms > kMaxPathTotalMs) {
    return Error{
        fmt::format("a path plan of {} ms in all ({} at most)", p.total_ms, kMaxPathTotalMs)};
  }
  std::vector<uint32_t> hosts;
  for (const PathTarget& t : p.targets) {
    if (t.port == 0) return Error{"a path plan with a target on port 0"};
    if (t.host == p.self_host) return Error{"a path plan that connects a host to itself"};
    hosts.push_back(t.host);
  }
  std::sort(hosts.begin(), hosts.end());
  if (std::adjacent_find(hosts.begin(), hosts.end()) != hosts.end()) {
    return Error{"a path plan that names one host twice"};
  }
  return ok_status();
}

}  // namespace rankcheck
