#include "protocol/wire.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include <fmt/format.h>

namespace rankcheck {

uint32_t payload_cap(uint16_t type) {
  switch (static_cast<MsgType>(type)) {
    case MsgType::kChallenge:
      return 1024;
    case MsgType::kHello:
      return 64 * 1024;
    case MsgType::kAdmit:
      return 64;
    case MsgType::kReject:
      return 4096;
    case MsgType::kVerdict:
      return 16 * 1024;
    case MsgType::kStageResult:
      return 16 * 1024;
    case MsgType::kProbe:
      return 64;
    case MsgType::kPathPlan:
      return 256 * 1024;
    case MsgType::kPathReport:
      return 128 * 1024;
    case MsgType::kRelayHello:
      return 4096;
    case MsgType::kChannel:
      // The largest frame a member sends or is sent, its hello beside it, and the fields.
      return 2 * (kHeaderSize + 256 * 1024) + 64;
    case MsgType::kRelayWait:
      return 1024;
    case MsgType::kNcclRoots:
      return 4 + 1024 * 128;  // kMaxNcclRoots ids
    case MsgType::kRelayAsk:
      return 16;
    case MsgType::kRelayProof:
      return 32;
    case MsgType::kWatchHello:
      return 1024;
    case MsgType::kWatchEvent:
      return 2048;
    case MsgType::kWatchOrder:
      return 2048;
  }
  return 0;
}

std::string_view type_name(uint16_t type) {
  switch (static_cast<MsgType>(type)) {
    case MsgType::kChallenge:
      return "challenge";
    case MsgType::kHello:
      return "hello";
    case MsgType::kAdmit:
      return "admit";
    case MsgType::kReject:
      return "reject";
    case MsgType::kVerdict:
      return "verdict";
    case MsgType::kStageResult:
      return "stage result";
    case MsgType::kProbe:
      return "probe";
    case MsgType::kPathPlan:
      return "path plan";
    case MsgType::kPathReport:
      return "path report";
    case MsgType::kRelayHello:
      return "relay hello";
    case MsgType::kChannel:
      return "channel";
    case MsgType::kRelayWait:
      return "relay wait";
    case MsgType::kNcclRoots:
      return "NCCL roots";
    case MsgType::kRelayAsk:
      return "relay ask";
    case MsgType::kRelayProof:
      return "relay proof";
    case MsgType::kWatchHello:
      return "watch hello";
    case MsgType::kWatchEvent:
      return "watch event";
    case MsgType::kWatchOrder:
      return "watch order";
  }
  return "unknown";
}

namespace {
uint16_t load16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}
uint32_t load32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
}  // namespace

Result<FrameHeader> decode_header(std::span<const uint8_t> b, uint16_t* peer_version) {
  if (b.size() < kHeaderSize) {
    return Error{fmt::format("short frame header ({} of {} bytes)", b.size(), kHeaderSize),
                 Fault::kBadMagic};
  }
  if (!std::equal(kMagic.begin(), kMagic.end(), b.begin())) {
    return Error{fmt::format("bad magic {:02x} {:02x} {:02x} {:02x}: not a rankcheck peer", b[0],
                             b[1], b[2], b[3]),
                 Fault::kBadMagic};
  }
  FrameHeader h{load16(&b[4]), load16(&b[6]), load32(&b[8])};
  if (h.version != kProtocolVersion) {
    if (peer_version != nullptr) *peer_version = h.version;
    return Error{
        fmt::format("protocol version {} (this rankcheck speaks {})", h.version, kProtocolVersion),
        Fault::kOtherVersion};
  }
  uint32_t cap = payload_cap(h.type);
  if (cap == 0) {
    return Error{fmt::format("unknown message type {}", h.type), Fault::kUnknownType};
  }
  if (h.length > cap) {
    return Error{
        fmt::format("{} of {} bytes exceeds its cap of {}", type_name(h.type), h.length, cap),
        Fault::kTooLarge};
  }
  return h;
}

// Little-endian, appended at once (not a byte at a time: a record is hundreds of fields).
template <class U>
void append_le(std::vector<uint8_t>& buf, U v) {
  std::array<uint8_t, sizeof(U)> b;
  for (size_t i = 0; i < sizeof(U); ++i)
    b[i] = static_cast<uint8_t>(v >> (8 * i));
  buf.insert(buf.end(), b.begin(), b.end());
}

void Writer::u16(uint16_t v) {
  append_le(buf_, v);
}
void Writer::u32(uint32_t v) {
  append_le(buf_, v);
}
void Writer::u64(uint64_t v) {
  append_le(buf_, v);
}
void Writer::f64(double v) {
  u64(std::bit_cast<uint64_t>(v));
}
void Writer::str(std::string_view s) {
  u32(static_cast<uint32_t>(s.size()));
  buf_.insert(buf_.end(), s.begin(), s.end());
}

void Reader::fail(std::string why) {
  if (error_.empty()) error_ = std::move(why);
}

bool Reader::need(size_t n) {
  if (!ok()) return false;
  if (data_.size() - pos_ < n) {
    fail(fmt::format("truncated: needs {} more bytes at offset {}, has {}", n, pos_,
                     data_.size() - pos_));
    return false;
  }
  return true;
}

uint8_t Reader::u8() {
  return need(1) ? data_[pos_++] : 0;
}
uint16_t Reader::u16() {
  if (!need(2)) return 0;
  uint16_t v = load16(&data_[pos_]);
  pos_ += 2;
  return v;
}
uint32_t Reader::u32() {
  if (!need(4)) return 0;
  uint32_t v = load32(&data_[pos_]);
  pos_ += 4;
  return v;
}
uint64_t Reader::u64() {
  uint64_t lo = u32();
  uint64_t hi = u32();
  return lo | hi << 32;
}
double Reader::f64() {
  return std::bit_cast<double>(u64());
}

std::string Reader::str(size_t max_len, std::string_view what) {
  uint32_t n = u32();
  if (!ok()) return {};
  if (n > max_len) {
    fail(fmt::format("{} of {} bytes exceeds {}", what, n, max_len));
    return {};
  }
  if (!need(n)) return {};
  std::string s(reinterpret_cast<const char*>(&data_[pos_]), n);
  pos_ += n;
  return s;
}

void Reader::bytes(std::span<uint8_t> out) {
  if (out.empty()) return;  // (an empty vector's data() may be null: no memcpy)
  if (!need(out.size())) {
    std::fill(out.begin(), out.end(), uint8_t{0});
    return;
  }
  std::memcpy(out.data(), &data_[pos_], out.size());
  pos_ += out.size();
}

uint32_t Reader::count(uint32_t max, std::string_view what) {
  uint32_t n = u32();
  if (ok() && n > max) {
    fail(fmt::format("{} count {} exceeds {}", what, n, max));
    return 0;
  }
  return ok() ? n : 0;
}

void Reader::expect_end() {
  if (ok() && pos_ != data_.size()) {
    fail(fmt::format("{} unexpected trailing bytes", data_.size() - pos_));
  }
}

void begin_frame(Writer& w, MsgType type, uint32_t length, uint16_t version) {
  w.reserve(kHeaderSize + length);
  w.bytes(kMagic);
  w.u16(version);
  w.u16(static_cast<uint16_t>(type));
  w.u32(length);
}

std::vector<uint8_t> encode_frame(MsgType type, std::span<const uint8_t> payload,
                                  uint16_t version) {
  Writer w;
  begin_frame(w, type, static_cast<uint32_t>(payload.size()), version);
  w.bytes(payload);
  return w.take();
}

Result<std::optional<Frame>> FrameBuffer::next(uint16_t* peer_version) {
  if (buf_.size() < kHeaderSize) {
    // Refuse a wrong magic as soon as its bytes are here, not after 12 of them.
    size_t n = std::min(buf_.size(), kMagic.size());
    if (!std::equal(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(n), kMagic.begin())) {
      return Error{"bad magic: not a rankcheck peer", Fault::kBadMagic};
    }
    return std::optional<Frame>();
  }
  auto h = decode_header(std::span(buf_.data(), kHeaderSize), peer_version);
  if (!h) return h.error();
  if (buf_.size() < kHeaderSize + h->length) return std::optional<Frame>();
  Frame f{*h, std::vector<uint8_t>(
                  buf_.begin() + kHeaderSize,
                  buf_.begin() + static_cast<std::ptrdiff_t>(kHeaderSize + h->length))};
  buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(kHeaderSize + h->length));
  return std::optional<Frame>(std::move(f));
}

}  // namespace rankcheck
