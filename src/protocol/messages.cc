#include "protocol/messages.h"

#include <algorithm>
#include <cassert>

#include <fmt/format.h>
#include <openssl/sha.h>

#include "protocol/codec.h"
#include "protocol/record_codec.h"

namespace rankcheck {
namespace {

// Cuts `s` in place; whether it changed.
bool cut_in_place(std::string& s, size_t n) {
  if (s.size() <= n) return false;
  s.resize(cut(s, n).size());
  return true;
}
bool cut_in_place(SharedString& s, size_t n) {
  if (s.size() <= n) return false;
  s = SharedString(cut(s, n));
  return true;
}

}  // namespace

std::vector<uint8_t> encode(const Challenge& m) {
  Writer w;
  w.bytes(m.nonce);
  w.str(cut(m.master_version, 64));
  w.str(cut(m.job_id, kMaxShortString));
  w.u8(m.auth);
  return encode_frame(MsgType::kChallenge, w.data());
}

namespace {

std::vector<uint8_t> hello_payload(const Record& r, const Nonce& client_nonce, const Mac& mac,
                                   const std::optional<NcclIdBytes>& root = std::nullopt) {
  Writer w;
  encode_record(w, r);
  w.u8(root.has_value());
  if (root) w.bytes(*root);
  w.bytes(client_nonce);
  w.bytes(mac);
  return w.take();
}

// What the tracked environment, the identity conflicts and the PCIe facts may take
// of a hello that would pass its cap. Everything else in a record is bounded field by
// field (at most about 34 KiB): the four together stay under the hello's 64 KiB.
constexpr size_t kEnvBudget = 20 * 1024 - 256;  // (and a block leader's NCCL id)
constexpr size_t kConflictBudget = 6 * 1024;
constexpr size_t kPcieBudget = 4 * 1024;  // a board of 8 GPUs and 8 HCAs takes about 2 KiB

size_t env_cost(const std::vector<EnvVar>& env) {
  size_t n = 0;
  for (const EnvVar& v : env)
    n += 8 + v.name.size() + v.value.size();
  return n;
}

size_t conflict_cost(const std::vector<Conflict>& cs) {
  size_t n = 0;
  for (const Conflict& c : cs) {
    n += 5;
    for (const Observation& o : c.values)
      n += 12 + o.launcher.size() + o.variable.size() + o.value.size();
  }
  return n;
}

// Every field within the cap its decoder enforces.
bool fit_fields(Record& r) {
  bool changed = false;
  changed |= cut_in_place(r.version, 64);
  changed |= cut_in_place(r.launcher, 64);
  changed |= cut_in_place(r.master_addr, kMaxShortString);
  changed |= cut_in_place(r.resolve_error, kMaxShortString);
  changed |= cut_in_place(r.job_id, kMaxShortString);
  changed |= cut_in_place(r.host, kMaxHostName);
  changed |= cut_in_place(r.node_list, kMaxEnvValue);
  changed |= cut_in_place(r.tasks_per_node, kMaxShortString);
  auto fit_strings = [&changed](SharedList<std::string>& list, size_t max_items, size_t max_len) {
    bool over = list.size() > max_items;
    for (const std::string& a : list)
      over = over || a.size() > max_len;
    if (!over) return;
    std::vector<std::string> v = list.get();
    if (v.size() > max_items) v.resize(max_items);
    for (std::string& a : v)
      cut_in_place(a, max_len);
    list = std::move(v);
    changed = true;
  };
  fit_strings(r.master_resolved, kMaxAddresses, 64);
  fit_strings(r.interfaces, kMaxInterfaces, 64);
  if (r.conflicts.size() > kMaxConflicts) {
    r.conflicts.resize(kMaxConflicts);
    changed = true;
  }
  for (Conflict& c : r.conflicts) {
    if (c.values.size() > kMaxConflictValues) {
      c.values.resize(kMaxConflictValues);
      changed = true;
    }
    for (Observation& o : c.values) {
      changed |= cut_in_place(o.launcher, 64);
      changed |= cut_in_place(o.variable, kMaxShortString);
      changed |= cut_in_place(o.value, kMaxShortString);
    }
  }
  bool env_over = r.env.size() > kMaxEnvVars;
  for (const EnvVar& v : r.env)
    env_over = env_over || v.name.size() > kMaxShortString || v.value.size() > kMaxEnvValue;
  if (env_over) {
    std::vector<EnvVar> env;
    for (const EnvVar& v : r.env) {
      if (env.size() == kMaxEnvVars) break;
      if (v.name.size() > kMaxShortString) continue;  // a name cut short would be another one
      env.push_back({v.name, std::string(cut(v.value, kMaxEnvValue))});
    }
    r.env_digest = env_digest(env);
    r.env = std::move(env);
    changed = true;
  }
  if (r.gpu.devices.size() > size_t(kMaxRanksPerMember)) {
    r.gpu.devices.resize(size_t(kMaxRanksPerMember));
    changed = true;
  }
  return changed;
}

// The environment within its budget: values cut evenly (the longest first), and
// when the names alone are too much, the last variables dropped.
void fit_env(Record& r) {
  if (env_cost(r.env.get()) <= kEnvBudget) return;
  std::vector<EnvVar> env = r.env.get();
  size_t names = 0;
  size_t keep = 0;
  for (; keep < env.size() && names + 8 + env[keep].name.size() <= kEnvBudget; ++keep)
    names += 8 + env[keep].name.size();
  env.resize(keep);
  std::vector<size_t> lens;
  for (const EnvVar& v : env)
    lens.push_back(v.value.size());
  size_t level = water_level(lens, kEnvBudget - names);
  for (EnvVar& v : env)
    cut_in_place(v.value, level);
  r.env_digest = env_digest(env);
  r.env = std::move(env);
}

// The identity conflicts within their budget: values cut evenly, then the last
// sources dropped.
void fit_conflicts(Record& r) {
  if (conflict_cost(r.conflicts) <= kConflictBudget) return;
  size_t fixed = 0;
  std::vector<size_t> lens;
  for (const Conflict& c : r.conflicts) {
    fixed += 5;
    for (const Observation& o : c.values) {
      fixed += 12 + o.launcher.size() + o.variable.size();
      lens.push_back(o.value.size());
    }
  }
  size_t level = fixed < kConflictBudget ? water_level(lens, kConflictBudget - fixed) : 0;
  for (Conflict& c : r.conflicts) {
    for (Observation& o : c.values)
      cut_in_place(o.value, level);
  }
  while (!r.conflicts.empty() && conflict_cost(r.conflicts) > kConflictBudget) {
    auto& values = r.conflicts.back().values;
    if (values.size() > 2) {
      values.pop_back();
    } else {
      r.conflicts.pop_back();  // fewer than two sources is no conflict
    }
  }
}

// The PCIe facts within their budget: ACS bridges past the first 8 dropped from the
// end, then devices (the HCAs come after the member's GPUs).
void fit_pcie(Record& r) {
  auto cost = [&r] {
    Writer w;
    encode_pcie(w, r.pcie);
    return w.take().size();
  };
  while (cost() > kPcieBudget) {
    if (r.pcie.acs.size() > 8) {
      r.pcie.acs.pop_back();
    } else if (!r.pcie.devices.empty()) {
      r.pcie.devices.pop_back();
    } else if (!r.pcie.acs.empty()) {
      r.pcie.acs.pop_back();
    } else {
      break;  // what is left is bounded field by field
    }
  }
}

}  // namespace

bool fit_hello(Record& r) {
  bool changed = fit_fields(r);
  if (hello_payload(r, {}, {}).size() <= payload_cap(uint16_t(MsgType::kHello))) return changed;
  fit_env(r);
  fit_conflicts(r);
  fit_pcie(r);
  assert(hello_payload(r, {}, {}).size() <= payload_cap(uint16_t(MsgType::kHello)));
  return true;
}

std::vector<uint8_t> encode(const Hello& m) {
  Record fitted = m.record;
  fit_hello(fitted);
  return encode_frame(MsgType::kHello, hello_payload(fitted, m.client_nonce, m.mac, m.nccl_root));
}

std::vector<uint8_t> encode_signed(const Hello& m, const JobToken& token, const Nonce& server) {
  std::vector<uint8_t> frame = encode(m);
  auto p = payload_of(frame);
  // Without a MAC (the HMAC failed) the zeros stay: the master refuses them.
  if (auto mac = token.mac(kHelloLabel, server, m.client_nonce, signed_part(p))) {
    std::copy(mac->begin(), mac->end(), p.end() - kMacSize);
  }
  return frame;
}

std::string_view verdict_label(bool final) {
  return final ? kVerdictLabel : kGoVerdictLabel;
}

std::vector<uint8_t> encode_signed(const Verdict& m, const JobToken& token, const Nonce& server,
                                   const Nonce& client) {
  std::vector<uint8_t> frame = encode(m);
  auto p = payload_of(frame);
  // Without a MAC (the HMAC failed) the zeros stay: no member accepts them.
  if (auto mac = token.mac(verdict_label(m.final), server, client, signed_part(p))) {
    std::copy(mac->begin(), mac->end(), p.end() - kMacSize);
  }
  return frame;
}

std::vector<uint8_t> encode_signed(const StageReport& m, const JobToken& token, const Nonce& server,
                                   const Nonce& client) {
  std::vector<uint8_t> frame = encode(m);
  auto p = payload_of(frame);
  // Without a MAC (the HMAC failed) the zeros stay: the master refuses them.
  if (auto mac = token.mac(kStageLabel, server, client, signed_part(p))) {
    std::copy(mac->begin(), mac->end(), p.end() - kMacSize);
  }
  return frame;
}

bool verify_stage_report(std::span<const uint8_t> payload, const JobToken& token,
                         const Nonce& server, const Nonce& client) {
  return token.verify(trailing_mac(payload), kStageLabel, server, client, signed_part(payload));
}

std::string job_tag(const JobToken& token, const Nonce& nonce, std::string_view job_id) {
  auto id = std::span(reinterpret_cast<const uint8_t*>(job_id.data()), job_id.size());
  auto mac = token.mac(kJobTagLabel, nonce, {}, id);
  if (!mac) return {};
  // Made for every challenge: a format call a byte was 8% of rank 0's CPU at 100k ranks.
  constexpr std::string_view kHex = "0123456789abcdef";
  std::string out = "tag:";
  out.reserve(4 + 2 * mac->size());
  for (uint8_t b : *mac) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

bool verify_hello(std::span<const uint8_t> payload, const JobToken& token, const Nonce& server) {
  if (payload.size() < kMacSize + kNonceSize) return false;
  auto body = signed_part(payload);
  Nonce client{};
  std::copy(body.end() - kNonceSize, body.end(), client.begin());
  return token.verify(trailing_mac(payload), kHelloLabel, server, client, body);
}

bool verify_verdict(std::span<const uint8_t> payload, const JobToken& token, const Nonce& server,
                    const Nonce& client, bool final) {
  return token.verify(trailing_mac(payload), verdict_label(final), server, client,
                      signed_part(payload));
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
  w.str(cut(m.reason, 2048));
  return encode_frame(MsgType::kReject, w.data());
}

namespace {

// Caps a verdict's decoder enforces on each note.
constexpr size_t kNoteIdMax = 64;
constexpr size_t kNoteMessageMax = 1024;
constexpr size_t kNoteFixMax = 512;

size_t note_size(const Finding& f) {
  size_t n = 4 + f.name().size() + 1 + 4 + f.message.size() + 4 + f.fix.size() + 4 +
             4 * f.ranks.size() + 4;
  for (const std::string& h : f.hosts)
    n += 4 + h.size();
  return n;
}

// Cuts a note to at most `allowance` bytes: fewer ranks and hosts (its message
// names them in words), then its message and fix share what is left. `keep`
// is a tail of the message that must survive.
void compact_note(Finding& f, size_t allowance, std::string_view keep) {
  if (f.ranks.size() > 64) f.ranks.resize(64);
  if (f.hosts.size() > 4) f.hosts.resize(4);
  for (std::string& h : f.hosts)
    cut_in_place(h, 64);
  std::string body = f.message.substr(0, f.message.size() - keep.size());
  size_t fixed = note_size(f) - f.message.size() - f.fix.size();
  size_t texts = allowance > fixed ? allowance - fixed : 0;
  size_t level = water_level({f.message.size(), f.fix.size()}, texts);
  cut_in_place(f.fix, level);
  size_t room = level > keep.size() ? level - keep.size() : 0;
  if (f.message.size() > level) f.message = std::string(cut(body, room)) + std::string(keep);
}

// The notes a verdict of `budget` bytes can carry: at most kMaxVerdictNotes (the
// last saying how many more there are), each within its decoder's caps, and
// together within the budget (each cut to an equal share when they are not).
std::vector<Finding> fit_notes(const std::vector<Finding>& all, size_t budget) {
  size_t n = std::min<size_t>(all.size(), kMaxVerdictNotes);
  std::vector<Finding> notes(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
  for (Finding& f : notes) {
    cut_in_place(f.message, kNoteMessageMax);
    cut_in_place(f.fix, kNoteFixMax);
    if (f.ranks.size() > kMaxNoteRanks) f.ranks.resize(kMaxNoteRanks);
    if (f.hosts.size() > kMaxNoteHosts) f.hosts.resize(kMaxNoteHosts);
    for (std::string& h : f.hosts)
      cut_in_place(h, kMaxHostName);
  }
  std::string more;
  if (all.size() > n) {
    more = fmt::format(" (and {} more {} about this member: see rank 0's report)", all.size() - n,
                       all.size() - n == 1 ? "finding" : "findings");
    Finding& last = notes.back();
    last.message = std::string(cut(last.message, kNoteMessageMax - more.size())) + more;
  }
  size_t total = 0;
  for (const Finding& f : notes)
    total += note_size(f);
  if (total <= budget) return notes;
  size_t share = budget / n;
  for (size_t i = 0; i < n; ++i) {
    if (note_size(notes[i]) > share) {
      compact_note(notes[i], share, i + 1 == n ? std::string_view(more) : std::string_view());
    }
  }
  return notes;
}

}  // namespace

std::vector<uint8_t> encode(const Verdict& m) {
  // The notes take what the rest leaves of the verdict's cap.
  Writer head;
  head.u8(m.exit_code);
  head.u8(m.final);
  head.u8(m.run_gpu);
  head.str(cut(m.headline, 512));
  head.str(cut(m.headline_id, kNoteIdMax));
  head.u32(m.errors);
  head.u32(m.warnings);
  head.u32(m.joined_ranks);
  Writer tail;
  tail.u32(m.stage_ms);
  tail.u8(m.nccl_id.has_value());
  if (m.nccl_id) tail.bytes(*m.nccl_id);
  tail.u32(m.nccl_roots);
  tail.bytes(m.roots_digest);
  tail.u16(m.watch_port);
  tail.bytes(m.mac);
  size_t cap = payload_cap(uint16_t(MsgType::kVerdict));
  std::vector<Finding> notes =
      fit_notes(m.notes, cap - head.data().size() - 4 - tail.data().size());

  Writer w = std::move(head);
  w.u32(static_cast<uint32_t>(notes.size()));
  for (const Finding& f : notes) {
    w.str(f.name());
    w.u8(f.is_error() ? 0 : 1);
    w.str(f.message);
    w.str(f.fix);
    w.u32(static_cast<uint32_t>(f.ranks.size()));
    for (long k : f.ranks)
      w.i32(static_cast<int32_t>(k));
    w.u32(static_cast<uint32_t>(f.hosts.size()));
    for (const std::string& h : f.hosts)
      w.str(h);
  }
  w.bytes(tail.data());
  assert(w.data().size() <= cap);
  return encode_frame(MsgType::kVerdict, w.data());
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
  Hello m{decode_record(r), {}, {}, {}};
  if (r.u8() != 0) {
    NcclIdBytes id{};
    r.bytes(id);
    m.nccl_root = id;
  }
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
  m.headline_id = r.str(kNoteIdMax, "headline id");
  m.errors = r.u32();
  m.warnings = r.u32();
  m.joined_ranks = r.u32();
  m.notes.resize(r.count(kMaxVerdictNotes, "note"));
  std::vector<bool> unknown(m.notes.size(), false);
  for (size_t i = 0; i < m.notes.size(); ++i) {
    Finding& f = m.notes[i];
    // A note of a finding this build does not know (a newer master's) is read and
    // left out: what it says stays in the master's report.
    const FindingKind* kind = find_finding_kind(r.str(kNoteIdMax, "finding id"));
    unknown[i] = kind == nullptr;
    if (kind != nullptr) f.id = kind->id;
    // The exit code a finding gives is its kind's: the wire carries the kind.
    if (kind != nullptr) f.exit_code = kind->exit_code;
    f.severity = r.u8() == 0 ? Severity::kError : Severity::kWarning;
    f.message = r.str(kNoteMessageMax, "finding message");
    f.fix = r.str(kNoteFixMax, "finding fix");
    f.ranks.resize(r.count(kMaxNoteRanks, "finding rank"));
    for (long& k : f.ranks)
      k = r.i32();
    f.hosts.resize(r.count(kMaxNoteHosts, "finding host"));
    for (std::string& h : f.hosts)
      h = r.str(kMaxHostName, "finding host");
  }
  for (size_t i = m.notes.size(); i-- > 0;) {
    if (unknown[i]) m.notes.erase(m.notes.begin() + static_cast<std::ptrdiff_t>(i));
  }
  m.stage_ms = r.u32();
  if (r.u8() != 0) {
    std::array<uint8_t, kNcclIdSize> id{};
    r.bytes(id);
    m.nccl_id = id;
  }
  m.nccl_roots = r.u32();
  if (m.nccl_roots > kMaxNcclRoots) r.fail(fmt::format("{} NCCL roots", m.nccl_roots));
  r.bytes(m.roots_digest);
  m.watch_port = r.u16();
  r.bytes(m.mac);
  return finish(r, std::move(m), "verdict");
}

std::vector<uint8_t> encode(const NcclRoots& m) {
  Writer w;
  auto n = std::min<uint32_t>(static_cast<uint32_t>(m.ids.size()), kMaxNcclRoots);
  w.u32(n);
  for (uint32_t i = 0; i < n; ++i)
    w.bytes(m.ids[i]);
  return encode_frame(MsgType::kNcclRoots, w.data());
}

Result<NcclRoots> decode_nccl_roots(std::span<const uint8_t> payload) {
  Reader r(payload);
  NcclRoots m;
  m.ids.resize(r.count(kMaxNcclRoots, "NCCL root"));
  for (NcclIdBytes& id : m.ids)
    r.bytes(id);
  return finish(r, std::move(m), "NCCL roots");
}

Digest roots_digest(const std::vector<NcclIdBytes>& ids) {
  Digest d{};
  std::vector<uint8_t> all;
  all.reserve(ids.size() * kNcclIdSize);
  for (const NcclIdBytes& id : ids)
    all.insert(all.end(), id.begin(), id.end());
  // SHA256(), not EVP_Digest: no OpenSSL initialisation (openssl.cnf) on its account.
  ::SHA256(all.data(), all.size(), d.data());
  return d;
}

}  // namespace rankcheck
