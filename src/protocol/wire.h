#pragma once
// Frames announce themselves: magic, version, type and a length checked against
// the type's cap before anything is allocated. Little-endian, field by field.

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace rankcheck {

inline constexpr std::array<uint8_t, 4> kMagic = {'R', 'K', 'C', 'K'};
// 2: a stage result carries NCCL's words. 3: a record carries NCCL's data network
// (NcclNetFacts: transport, IB ports, GIDs, plugin, memlock) after its variable sources;
// path plans and reports carry a MAC over the connection's nonces, each plan target a
// master-issued ticket for the listener, and a relay proves the job token to each
// member (kRelayProof). 4: a verdict carries the port of rank 0's watch server, and the
// watch's own messages (kWatchHello, kWatchEvent, kWatchOrder) exist. 5: a record's GPU
// state may be kStuck (6): an older master would call it malformed. 6: a record ends
// with its host's /dev/shm (ShmFacts). 7: and then with its host's machine (uname's
// "x86_64"), for the NCCL releases whose faults depend on it; its data network carries
// the ncclNetPlugin_vN versions its plugin exports; a stage result's words carry the IB
// error counters that moved. 8: a record's GPU facts end with the GPUs the launcher or
// container gave the process (gpu_grant) and why NVML was not read, each GPU its fabric state
// and active NVLinks, and the record ends with its host's PCIe facts.
inline constexpr uint16_t kProtocolVersion = 8;
inline constexpr size_t kHeaderSize = 12;  // magic, u16 version, u16 type, u32 length

enum class MsgType : uint16_t {
  kChallenge = 1,    ///< master -> member, first: nonce, master version, job id
  kHello = 2,        ///< member -> master: its record
  kAdmit = 3,        ///< master -> member: counted
  kReject = 4,       ///< master -> member: refused, with a reason; layout fixed across versions
  kVerdict = 5,      ///< master -> member: the job-wide verdict (and the NCCL id on go)
  kStageResult = 6,  ///< member -> master: GPU stage results
  kProbe = 7,        ///< rank 0 that cannot listen -> master: "only looking", then it closes
  kPathPlan = 8,     ///< master -> one member per host: the connections to rehearse
  kPathReport = 9,   ///< that member -> master: what each connection found
  kRelayHello = 10,  ///< a host's relay -> master, instead of a hello: it carries channels
  kChannel = 11,     ///< relay <-> master: one member's frame, or its channel opening or closing
  kRelayWait = 12,   ///< relay -> member, until the master answers: why it has not yet
  kNcclRoots = 13,   ///< master -> member, before a go verdict: the roots of a scalable NCCL init
  kRelayAsk =
      14,  ///< member -> its host's relay, first: a nonce the relay must prove the token over
  kRelayProof = 15,  ///< relay -> member, the answer: a MAC over that nonce (zeros without a token)
  kWatchHello = 16,  ///< a wrapper -> rank 0's watch server, after its challenge: who it is
  kWatchEvent = 17,  ///< a wrapper -> the watch server: what its command did
  kWatchOrder = 18,  ///< the watch server -> a wrapper: start the command, or end it
};

/// The largest payload a type may carry; 0 for a type this version does not know.
uint32_t payload_cap(uint16_t type);
std::string_view type_name(uint16_t type);

struct FrameHeader {
  uint16_t version = kProtocolVersion;
  uint16_t type = 0;
  uint32_t length = 0;
};

/// Validates magic, version, type and cap. On failure Error::fault says which
/// (kBadMagic, kOtherVersion, kUnknownType, kTooLarge); for kOtherVersion the message names
/// both versions and `peer_version` is set.
Result<FrameHeader> decode_header(std::span<const uint8_t> bytes, uint16_t* peer_version = nullptr);

/// Appends little-endian fields to a payload.
class Writer {
 public:
  /// Room for `n` more bytes, where the caller knows what it writes.
  void reserve(size_t n) { buf_.reserve(buf_.size() + n); }
  void u8(uint8_t v) { buf_.push_back(v); }
  void u16(uint16_t v);
  void u32(uint32_t v);
  void u64(uint64_t v);
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  void f64(double v);
  void str(std::string_view s);  ///< u32 length, then bytes
  void bytes(std::span<const uint8_t> b) { buf_.insert(buf_.end(), b.begin(), b.end()); }
  const std::vector<uint8_t>& data() const { return buf_; }
  std::vector<uint8_t> take() { return std::move(buf_); }

 private:
  std::vector<uint8_t> buf_;
};

/// Reads little-endian fields; any read past the end, or a length above the cap
/// given, fails the reader (sticky) instead of allocating.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> data) : data_(data) {}
  uint8_t u8();
  uint16_t u16();
  uint32_t u32();
  uint64_t u64();
  int32_t i32() { return static_cast<int32_t>(u32()); }
  double f64();
  std::string str(size_t max_len, std::string_view what);
  void bytes(std::span<uint8_t> out);
  /// A count of items that follow, refused above `max`.
  uint32_t count(uint32_t max, std::string_view what);

  bool ok() const { return error_.empty(); }
  /// Fails unless every byte was consumed.
  void expect_end();
  const std::string& error() const { return error_; }
  void fail(std::string why);

 private:
  bool need(size_t n);
  std::span<const uint8_t> data_;
  size_t pos_ = 0;
  std::string error_;
};

/// Header plus payload, ready to send.
std::vector<uint8_t> encode_frame(MsgType type, std::span<const uint8_t> payload,
                                  uint16_t version = kProtocolVersion);
/// A frame's header for a payload of `length` bytes that the caller writes next, in
/// room made for both: a frame built in place, in one allocation of its size.
void begin_frame(Writer& w, MsgType type, uint32_t length, uint16_t version = kProtocolVersion);

struct Frame {
  FrameHeader header;
  std::vector<uint8_t> payload;
};

/// Incremental decoder for a byte stream: feed what arrives, take whole frames.
class FrameBuffer {
 public:
  void feed(std::span<const uint8_t> bytes) { buf_.insert(buf_.end(), bytes.begin(), bytes.end()); }
  /// A whole frame, nothing yet (nullopt), or an error after which the stream is useless.
  Result<std::optional<Frame>> next(uint16_t* peer_version = nullptr);
  size_t buffered() const { return buf_.size(); }

 private:
  std::vector<uint8_t> buf_;
};

}  // namespace rankcheck
