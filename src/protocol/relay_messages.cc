// The relays' messages: a relay's hello, the channel frames that carry its
// members' frames, and its word to a member still waiting for the master.

#include "protocol/relay_messages.h"

#include <algorithm>

#include "model/record.h"
#include "protocol/codec.h"

namespace rankcheck {
namespace {

std::vector<uint8_t> relay_hello_payload(const RelayHello& m) {
  Writer w;
  w.str(cut(m.host, kMaxHostName));
  w.u32(m.pid);
  w.str(cut(m.job_id, kMaxShortString));
  w.bytes(m.client_nonce);
  w.bytes(m.mac);
  return w.take();
}

}  // namespace

std::vector<uint8_t> encode(const RelayHello& m) {
  return encode_frame(MsgType::kRelayHello, relay_hello_payload(m));
}

std::vector<uint8_t> encode_signed(const RelayHello& m, const JobToken& token,
                                   const Nonce& server) {
  std::vector<uint8_t> p = relay_hello_payload(m);
  // Without a MAC (the HMAC failed) the zeros stay: the master refuses them.
  if (auto mac = token.mac(kRelayLabel, server, m.client_nonce, signed_part(p))) {
    std::copy(mac->begin(), mac->end(), p.end() - kMacSize);
  }
  return encode_frame(MsgType::kRelayHello, p);
}

bool verify_relay_hello(std::span<const uint8_t> payload, const JobToken& token,
                        const Nonce& server) {
  if (payload.size() < kMacSize + kNonceSize) return false;
  auto body = signed_part(payload);
  Nonce client{};
  std::copy(body.end() - kNonceSize, body.end(), client.begin());
  Mac mac{};
  std::copy(payload.end() - kMacSize, payload.end(), mac.begin());
  return token.verify(mac, kRelayLabel, server, client, body);
}

Result<RelayHello> decode_relay_hello(std::span<const uint8_t> payload) {
  Reader r(payload);
  RelayHello m;
  m.host = r.str(kMaxHostName, "host name");
  m.pid = r.u32();
  m.job_id = r.str(kMaxShortString, "job id");
  r.bytes(m.client_nonce);
  r.bytes(m.mac);
  return finish(r, std::move(m), "relay hello");
}

std::vector<uint8_t> encode_channel(uint32_t channel, ChannelOp op, std::span<const uint8_t> frame,
                                    std::span<const uint8_t> hello) {
  // Both parts fit the cap (a member's frames are within theirs): cut, never refused.
  uint32_t half = (payload_cap(uint16_t(MsgType::kChannel)) - 16) / 2;
  frame = frame.first(std::min<size_t>(frame.size(), half));
  hello = hello.first(std::min<size_t>(hello.size(), half));
  // Built in place: a verdict to each of 100k relayed members is one allocation each.
  Writer w;
  begin_frame(w, MsgType::kChannel, static_cast<uint32_t>(13 + frame.size() + hello.size()));
  w.u32(channel);
  w.u8(static_cast<uint8_t>(op));
  w.u32(static_cast<uint32_t>(frame.size()));
  w.bytes(frame);
  w.u32(static_cast<uint32_t>(hello.size()));
  w.bytes(hello);
  return w.take();
}

Result<ChannelFrame> decode_channel(std::span<const uint8_t> payload) {
  Reader r(payload);
  ChannelFrame m;
  m.channel = r.u32();
  uint8_t op = r.u8();
  if (op < uint8_t(ChannelOp::kOpen) || op > uint8_t(ChannelOp::kAll)) {
    r.fail(fmt::format("unknown channel operation {}", op));
  }
  m.op = static_cast<ChannelOp>(op);
  m.frame.resize(r.count(payload_cap(uint16_t(MsgType::kChannel)), "frame byte"));
  r.bytes(m.frame);
  m.hello.resize(r.count(payload_cap(uint16_t(MsgType::kChannel)), "hello byte"));
  r.bytes(m.hello);
  return finish(r, std::move(m), "channel frame");
}

std::vector<uint8_t> encode(const RelayWait& m) {
  Writer w;
  w.str(cut(m.status, 900));
  w.u32(m.attempts);
  w.u8(m.master_closed ? 1 : 0);
  return encode_frame(MsgType::kRelayWait, w.data());
}

Result<RelayWait> decode_relay_wait(std::span<const uint8_t> payload) {
  Reader r(payload);
  RelayWait m;
  m.status = r.str(900, "status");
  m.attempts = r.u32();
  m.master_closed = r.u8() != 0;
  return finish(r, std::move(m), "relay wait");
}

}  // namespace rankcheck
