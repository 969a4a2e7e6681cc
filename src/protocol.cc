#include <fmt/format.h>

#include <rankcheck/protocol.h>

namespace rankcheck {
namespace {

template <class T>
Result<T> finish(Reader& r, T value, std::string_view what) {
  r.expect_end();
  if (!r.ok()) return Error{fmt::format("malformed {}: {}", what, r.error())};
  return value;
}

}  // namespace

std::vector<uint8_t> encode(const Challenge& m) {
  Writer w;
  w.bytes(m.nonce);
  w.str(m.master_version);
  w.str(m.job_id);
  w.u8(m.auth);
  return encode_frame(MsgType::kChallenge, w.data());
}

std::vector<uint8_t> encode(const Hello& m) {
  Writer w;
  encode_record(w, m.record);
  w.bytes(m.client_nonce);
  w.bytes(m.mac);
  return encode_frame(MsgType::kHello, w.data());
}

namespace {

// The payload of a frame this file made, and the part of it a trailing MAC covers.
std::span<uint8_t> payload_of(std::vector<uint8_t>& frame) {
  return std::span(frame).subspan(kHeaderSize);
}
std::span<const uint8_t> signed_part(std::span<const uint8_t> payload) {
  return payload.first(payload.size() >= kMacSize ? payload.size() - kMacSize : 0);
}
Mac trailing_mac(std::span<const uint8_t> payload) {
  Mac m{};
  if (payload.size() >= kMacSize) std::copy(payload.end() - kMacSize, payload.end(), m.begin());
  return m;
}

}  // namespace

std::vector<uint8_t> encode_signed(const Hello& m, const JobToken& token, const Nonce& server) {
  std::vector<uint8_t> frame = encode(m);
  auto p = payload_of(frame);
  Mac mac = token.mac(kHelloLabel, server, m.client_nonce, signed_part(p));
  std::copy(mac.begin(), mac.end(), p.end() - kMacSize);
  return frame;
}

std::vector<uint8_t> encode_signed(const Verdict& m, const JobToken& token, const Nonce& server,
                                   const Nonce& client) {
  std::vector<uint8_t> frame = encode(m);
  auto p = payload_of(frame);
  Mac mac = token.mac(kVerdictLabel, server, client, signed_part(p));
  std::copy(mac.begin(), mac.end(), p.end() - kMacSize);
  return frame;
}

bool verify_hello(std::span<const uint8_t> payload, const JobToken& token, const Nonce& server) {
  if (payload.size() < kMacSize + kNonceSize) return false;
  auto body = signed_part(payload);
  Nonce client{};
  std::copy(body.end() - kNonceSize, body.end(), client.begin());
  return token.verify(trailing_mac(payload), kHelloLabel, server, client, body);
}

bool verify_verdict(std::span<const uint8_t> payload, const JobToken& token, const Nonce& server,
                    const Nonce& client) {
  return token.verify(trailing_mac(payload), kVerdictLabel, server, client, signed_part(payload));
}

std::vector<uint8_t> encode(const Admit& m) {
  Writer w;
  w.u32(m.joined_ranks);
  w.u32(m.world_size);
  return encode_frame(MsgType::kAdmit, w.data());
}

std::vector<uint8_t> encode(const Reject& m) {
  Writer w;
  w.u16(static_cast<uint16_t>(m.code));
  w.str(m.reason.substr(0, 2048));
  return encode_frame(MsgType::kReject, w.data());
}

std::vector<uint8_t> encode(const Verdict& m) {
  Writer w;
  w.u8(m.exit_code);
  w.u8(m.final);
  w.u8(m.run_gpu);
  w.str(m.headline.substr(0, 512));
  w.u32(m.errors);
  w.u32(m.warnings);
  w.u32(m.joined_ranks);
  size_t n = std::min<size_t>(m.notes.size(), kMaxVerdictNotes);
  w.u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) {
    const Finding& f = m.notes[i];
    w.str(f.id.substr(0, 64));
    w.u8(f.is_error() ? 0 : 1);
    w.str(f.message.substr(0, 1024));
    w.str(f.hint.substr(0, 512));
    size_t nr = std::min<size_t>(f.ranks.size(), kMaxNoteRanks);
    w.u32(static_cast<uint32_t>(nr));
    for (size_t k = 0; k < nr; ++k)
      w.i32(static_cast<int32_t>(f.ranks[k]));
    size_t nh = std::min<size_t>(f.hosts.size(), kMaxNoteHosts);
    w.u32(static_cast<uint32_t>(nh));
    for (size_t k = 0; k < nh; ++k)
      w.str(f.hosts[k].substr(0, kMaxHostName));
  }
  w.u32(m.stage_ms);
  w.u8(m.nccl_id.has_value());
  if (m.nccl_id) w.bytes(*m.nccl_id);
  w.bytes(m.mac);
  return encode_frame(MsgType::kVerdict, w.data());
}

std::vector<uint8_t> encode(const StageReport& m) {
  Writer w;
  w.u32(static_cast<uint32_t>(m.ranks.size()));
  for (const RankResult& r : m.ranks) {
    w.i32(r.rank);
    w.u8(static_cast<uint8_t>(r.init_ok | r.init_timed_out << 1 | r.allreduce_ok << 2 |
                              r.allreduce_done << 3 | r.allreduce_timed_out << 4));
    w.str(r.init_error.substr(0, 256));
    w.f64(r.init_ms);
    w.str(r.allreduce_error.substr(0, 256));
    w.u64(static_cast<uint64_t>(r.expected));
    w.u64(static_cast<uint64_t>(r.got));
    w.f64(r.allreduce_us);
    w.u64(r.bandwidth_bytes);
    w.f64(r.algbw_gbps);
    w.f64(r.busbw_gbps);
  }
  return encode_frame(MsgType::kStageResult, w.data());
}

Result<StageReport> decode_stage_report(std::span<const uint8_t> payload) {
  Reader r(payload);
  StageReport m;
  m.ranks.resize(r.count(kMaxRanksPerMember, "rank result"));
  for (RankResult& x : m.ranks) {
    x.rank = r.i32();
    uint8_t flags = r.u8();
    x.init_ok = flags & 1;
    x.init_timed_out = flags & 2;
    x.allreduce_ok = flags & 4;
    x.allreduce_done = flags & 8;
    x.allreduce_timed_out = flags & 16;
    x.init_error = r.str(256, "init error");
    x.init_ms = r.f64();
    x.allreduce_error = r.str(256, "all-reduce error");
    x.expected = static_cast<int64_t>(r.u64());
    x.got = static_cast<int64_t>(r.u64());
    x.allreduce_us = r.f64();
    x.bandwidth_bytes = r.u64();
    x.algbw_gbps = r.f64();
    x.busbw_gbps = r.f64();
  }
  return finish(r, std::move(m), "stage result");
}

Result<Challenge> decode_challenge(std::span<const uint8_t> payload) {
  Reader r(payload);
  Challenge m;
  r.bytes(m.nonce);
  m.master_version = r.str(64, "master version");
  m.job_id = r.str(kMaxShortString, "job id");
  m.auth = r.u8() != 0;
  return finish(r, std::move(m), "challenge");
}

Result<Hello> decode_hello(std::span<const uint8_t> payload) {
  Reader r(payload);
  Hello m{decode_record(r), {}, {}};
  r.bytes(m.client_nonce);
  r.bytes(m.mac);
  return finish(r, std::move(m), "hello");
}

Result<Admit> decode_admit(std::span<const uint8_t> payload) {
  Reader r(payload);
  Admit m;
  m.joined_ranks = r.u32();
  m.world_size = r.u32();
  return finish(r, m, "admit");
}

Result<Reject> decode_reject(std::span<const uint8_t> payload) {
  Reader r(payload);
  Reject m;
  m.code = static_cast<RejectCode>(r.u16());
  m.reason = r.str(2048, "reason");
  return finish(r, std::move(m), "reject");
}

Result<Verdict> decode_verdict(std::span<const uint8_t> payload) {
  Reader r(payload);
  Verdict m;
  m.exit_code = r.u8();
  m.final = r.u8() != 0;
  m.run_gpu = r.u8() != 0;
  m.headline = r.str(512, "headline");
  m.errors = r.u32();
  m.warnings = r.u32();
  m.joined_ranks = r.u32();
  m.notes.resize(r.count(kMaxVerdictNotes, "note"));
  for (Finding& f : m.notes) {
    f.id = r.str(64, "finding id");
    f.severity = r.u8() == 0 ? Severity::kError : Severity::kWarning;
    f.message = r.str(1024, "finding message");
    f.hint = r.str(512, "finding hint");
    f.ranks.resize(r.count(kMaxNoteRanks, "finding rank"));
    for (long& k : f.ranks)
      k = r.i32();
    f.hosts.resize(r.count(kMaxNoteHosts, "finding host"));
    for (std::string& h : f.hosts)
      h = r.str(kMaxHostName, "finding host");
  }
  m.stage_ms = r.u32();
  if (r.u8() != 0) {
    std::array<uint8_t, kNcclIdSize> id{};
    r.bytes(id);
    m.nccl_id = id;
  }
  r.bytes(m.mac);
  return finish(r, std::move(m), "verdict");
}

}  // namespace rankcheck
