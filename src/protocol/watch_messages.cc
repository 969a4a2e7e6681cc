// The job under watch on the wire: a wrapper's hello, its events, the watch server's
// orders (messages.h draws the exchange), each signed under the job token when
// there is one.

#include <fmt/format.h>

#include "protocol/codec.h"
#include "protocol/messages.h"

namespace rankcheck {
namespace {

constexpr size_t kHostMax = 256;
constexpr size_t kFindingMax = 64;
constexpr size_t kHeadlineMax = 1024;

void put_event(Writer& w, const WatchEvent& e) {
  w.u8(static_cast<uint8_t>(e.kind));
  w.u64(e.at_ms);
  w.u32(e.pid);
  w.u8(static_cast<uint8_t>(e.phase));
  w.str(cut(e.marker, kWatchMarkerMax));
  w.u8(static_cast<uint8_t>(e.role));
  w.str(cut(e.finding, kFindingMax));
  w.i32(e.exit_code);
  w.i32(e.signal);
  w.u32(e.quiet_ms);
  w.str(cut(e.text, kWatchTextMax));
}

WatchEvent get_event(Reader& r) {
  WatchEvent e;
  uint8_t kind = r.u8();
  if (kind < uint8_t(WatchEventKind::kStarted) || kind > uint8_t(WatchEventKind::kHeartbeat)) {
    r.fail(fmt::format("event kind {}", kind));
  }
  e.kind = static_cast<WatchEventKind>(kind);
  e.at_ms = r.u64();
  e.pid = r.u32();
  uint8_t phase = r.u8();
  if (phase > uint8_t(JobPhase::kExited)) r.fail(fmt::format("phase {}", phase));
  e.phase = static_cast<JobPhase>(phase);
  e.marker = r.str(kWatchMarkerMax, "marker");
  uint8_t role = r.u8();
  if (role > uint8_t(LineRole::kDownstream)) r.fail(fmt::format("role {}", role));
  e.role = static_cast<LineRole>(role);
  e.finding = r.str(kFindingMax, "finding");
  e.exit_code = r.i32();
  e.signal = r.i32();
  e.quiet_ms = r.u32();
  e.text = r.str(kWatchTextMax, "text");
  return e;
}

std::vector<uint8_t> sign(std::vector<uint8_t> frame, std::string_view label, const JobToken& token,
                          const Nonce& server, const Nonce& client) {
  auto p = payload_of(frame);
  // Without a MAC (the HMAC failed) the zeros stay: the other side refuses them.
  if (auto mac = token.mac(label, server, client, signed_part(p))) {
    std::copy(mac->begin(), mac->end(), p.end() - kMacSize);
  }
  return frame;
}

}  // namespace

std::vector<uint8_t> encode(const WatchHello& m) {
  Writer w;
  w.u32(m.rank);
  w.u32(m.nranks);
  w.str(cut(m.host, kHostMax));
  w.bytes(m.client_nonce);
  w.bytes(m.mac);
  return encode_frame(MsgType::kWatchHello, w.data());
}

std::vector<uint8_t> encode(const WatchEventFrame& m) {
  Writer w;
  w.u32(m.seq);
  put_event(w, m.event);
  w.bytes(m.mac);
  return encode_frame(MsgType::kWatchEvent, w.data());
}

std::vector<uint8_t> encode(const WatchOrder& m) {
  Writer w;
  w.u32(m.seq);
  w.u8(static_cast<uint8_t>(m.kind));
  w.u8(m.exit_code);
  w.str(cut(m.finding, kFindingMax));
  w.str(cut(m.headline, kHeadlineMax));
  w.bytes(m.mac);
  return encode_frame(MsgType::kWatchOrder, w.data());
}

std::vector<uint8_t> encode_signed(const WatchHello& m, const JobToken& token,
                                   const Nonce& server) {
  return sign(encode(m), kWatchHelloLabel, token, server, m.client_nonce);
}

std::vector<uint8_t> encode_signed(const WatchEventFrame& m, const JobToken& token,
                                   const Nonce& server, const Nonce& client) {
  return sign(encode(m), kWatchEventLabel, token, server, client);
}

std::vector<uint8_t> encode_signed(const WatchOrder& m, const JobToken& token, const Nonce& server,
                                   const Nonce& client) {
  return sign(encode(m), kWatchOrderLabel, token, server, client);
}

bool verify_watch_hello(std::span<const uint8_t> payload, const JobToken& token,
                        const Nonce& server) {
  if (payload.size() < kMacSize + kNonceSize) return false;
  auto body = signed_part(payload);
  Nonce client{};
  std::copy(body.end() - kNonceSize, body.end(), client.begin());
  return token.verify(trailing_mac(payload), kWatchHelloLabel, server, client, body);
}

bool verify_watch_event(std::span<const uint8_t> payload, const JobToken& token,
                        const Nonce& server, const Nonce& client) {
  return token.verify(trailing_mac(payload), kWatchEventLabel, server, client,
                      signed_part(payload));
}

bool verify_watch_order(std::span<const uint8_t> payload, const JobToken& token,
                        const Nonce& server, const Nonce& client) {
  return token.verify(trailing_mac(payload), kWatchOrderLabel, server, client,
                      signed_part(payload));
}

Result<WatchHello> decode_watch_hello(std::span<const uint8_t> payload) {
  Reader r(payload);
  WatchHello m;
  m.rank = r.u32();
  m.nranks = r.u32();
  if (r.ok() && (m.nranks == 0 || m.nranks > (1u << 20))) r.fail(fmt::format("{} ranks", m.nranks));
  m.host = r.str(kHostMax, "host");
  r.bytes(m.client_nonce);
  r.bytes(m.mac);
  return finish(r, std::move(m), "watch hello");
}

Result<WatchEventFrame> decode_watch_event(std::span<const uint8_t> payload) {
  Reader r(payload);
  WatchEventFrame m;
  m.seq = r.u32();
  m.event = get_event(r);
  r.bytes(m.mac);
  return finish(r, std::move(m), "watch event");
}

Result<WatchOrder> decode_watch_order(std::span<const uint8_t> payload) {
  Reader r(payload);
  WatchOrder m;
  m.seq = r.u32();
  uint8_t kind = r.u8();
  if (kind != uint8_t(WatchOrderKind::kStart) && kind != uint8_t(WatchOrderKind::kEnd)) {
    r.fail(fmt::format("order kind {}", kind));
  }
  m.kind = static_cast<WatchOrderKind>(kind);
  m.exit_code = r.u8();
  m.finding = r.str(kFindingMax, "finding");
  m.headline = r.str(kHeadlineMax, "headline");
  r.bytes(m.mac);
  return finish(r, std::move(m), "watch order");
}

}  // namespace rankcheck
