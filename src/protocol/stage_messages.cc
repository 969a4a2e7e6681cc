// The GPU stage's results: what a member sends the master once its stage is over,
// one result per rank it stands for, with what NCCL said in its process. (Signing
// and verifying them is messages.cc's, with the other MACs.)

#include <algorithm>
#include <cassert>

#include "protocol/codec.h"
#include "protocol/messages.h"

namespace rankcheck {
namespace {

constexpr size_t kStageErrorMax = 256;
// NCCL's words (diagnose::read_nccl_words cuts the warning to 300 printable bytes).
constexpr size_t kNcclWarnMax = 320;
constexpr size_t kNcclNameMax = 64;  // the finding id, the network's name
constexpr size_t kIbMovedMax = 200;  // the IB counters that moved

// How a rank's NCCL words travel: none, its own, or the same as the rank before it
// (a member's ranks share one process and so one NCCL_DEBUG_FILE: said once).
enum class Words : uint8_t { kNone = 0, kOwn = 1, kSameAsPrevious = 2 };

bool has_words(const RankResult& r) {
  return !r.nccl_warn.empty() || !r.nccl_finding.empty() || !r.nccl_net.empty() ||
         !r.ib_moved.empty();
}

bool same_words(const RankResult& a, const RankResult& b) {
  return a.nccl_warn == b.nccl_warn && a.nccl_finding == b.nccl_finding &&
         a.nccl_net == b.nccl_net && a.ib_moved == b.ib_moved;
}

Words words_of(const StageReport& m, size_t i) {
  if (!has_words(m.ranks[i])) return Words::kNone;
  if (i > 0 && same_words(m.ranks[i], m.ranks[i - 1])) return Words::kSameAsPrevious;
  return Words::kOwn;
}

void put_result(Writer& w, const RankResult& r, Words words, size_t text_len) {
  w.i32(r.rank);
  w.u8(static_cast<uint8_t>(r.init_ok | r.init_timed_out << 1 | r.allreduce_ok << 2 |
                            r.allreduce_done << 3 | r.allreduce_timed_out << 4));
  size_t error_len = std::min(text_len, kStageErrorMax);
  w.str(cut(r.init_error, error_len));
  w.f64(r.init_ms);
  w.str(cut(r.allreduce_error, error_len));
  w.u64(static_cast<uint64_t>(r.expected));
  w.u64(static_cast<uint64_t>(r.got));
  w.f64(r.allreduce_us);
  w.u64(r.bandwidth_bytes);
  w.f64(r.algbw_gbps);
  w.f64(r.busbw_gbps);
  w.u8(static_cast<uint8_t>(words));
  if (words != Words::kOwn) return;
  w.str(cut(r.nccl_warn, std::min(text_len, kNcclWarnMax)));
  w.str(cut(r.nccl_finding, kNcclNameMax));
  w.str(cut(r.nccl_net, kNcclNameMax));
  w.str(cut(r.ib_moved, std::min(text_len, kIbMovedMax)));
}

}  // namespace

std::vector<uint8_t> encode(const StageReport& m) {
  // A member of 64 ranks with long NCCL errors would pass the cap: the error texts
  // and NCCL's warnings share what the fixed fields leave, evenly.
  size_t n = std::min<size_t>(m.ranks.size(), size_t(kMaxRanksPerMember));
  Writer fixed;
  fixed.u32(static_cast<uint32_t>(n));
  std::vector<size_t> lens;
  for (size_t i = 0; i < n; ++i) {
    const RankResult& r = m.ranks[i];
    Words words = words_of(m, i);
    put_result(fixed, r, words, 0);
    lens.push_back(std::min(r.init_error.size(), kStageErrorMax));
    lens.push_back(std::min(r.allreduce_error.size(), kStageErrorMax));
    if (words == Words::kOwn) {
      lens.push_back(std::min(r.nccl_warn.size(), kNcclWarnMax));
      lens.push_back(std::min(r.ib_moved.size(), kIbMovedMax));
    }
  }
  size_t cap = payload_cap(uint16_t(MsgType::kStageResult));
  size_t level = std::min(kNcclWarnMax, water_level(lens, cap - fixed.data().size() - kMacSize));
  Writer w;
  w.u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i)
    put_result(w, m.ranks[i], words_of(m, i), level);
  w.bytes(m.mac);
  assert(w.data().size() <= cap);
  return encode_frame(MsgType::kStageResult, w.data());
}

Result<StageReport> decode_stage_report(std::span<const uint8_t> payload) {
  Reader r(payload);
  StageReport m;
  m.ranks.resize(r.count(kMaxRanksPerMember, "rank result"));
  for (size_t i = 0; i < m.ranks.size() && r.ok(); ++i) {
    RankResult& x = m.ranks[i];
    x.rank = r.i32();
    uint8_t flags = r.u8();
    x.init_ok = flags & 1;
    x.init_timed_out = flags & 2;
    x.allreduce_ok = flags & 4;
    x.allreduce_done = flags & 8;
    x.allreduce_timed_out = flags & 16;
    x.init_error = r.str(kStageErrorMax, "init error");
    x.init_ms = r.f64();
    x.allreduce_error = r.str(kStageErrorMax, "all-reduce error");
    x.expected = static_cast<int64_t>(r.u64());
    x.got = static_cast<int64_t>(r.u64());
    x.allreduce_us = r.f64();
    x.bandwidth_bytes = r.u64();
    x.algbw_gbps = r.f64();
    x.busbw_gbps = r.f64();
    auto words = static_cast<Words>(r.u8());
    if (words == Words::kOwn) {
      x.nccl_warn = r.str(kNcclWarnMax, "NCCL warning");
      x.nccl_finding = r.str(kNcclNameMax, "NCCL warning's finding");
      x.nccl_net = r.str(kNcclNameMax, "NCCL network");
      x.ib_moved = r.str(kIbMovedMax, "IB counters moved");
    } else if (words == Words::kSameAsPrevious && i > 0) {
      x.nccl_warn = m.ranks[i - 1].nccl_warn;
      x.nccl_finding = m.ranks[i - 1].nccl_finding;
      x.nccl_net = m.ranks[i - 1].nccl_net;
      x.ib_moved = m.ranks[i - 1].ib_moved;
    } else if (words != Words::kNone) {
      r.fail("a rank result's NCCL words are neither its own nor the previous rank's");
    }
  }
  r.bytes(m.mac);
  return finish(r, std::move(m), "stage result");
}

}  // namespace rankcheck
