#pragma once
// What the encoders and decoders of protocol/ share.

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "base/result.h"
#include "protocol/auth.h"
#include "protocol/wire.h"

namespace rankcheck {

template <class T>
inline Result<T> finish(Reader& r, T value, std::string_view what) {
  r.expect_end();
  if (!r.ok()) return Error{fmt::format("malformed {}: {}", what, r.error())};
  return value;
}

// `s` cut to at most `n` bytes, not inside a UTF-8 sequence (when it is UTF-8).
inline std::string_view cut(std::string_view s, size_t n) {
  if (s.size() <= n) return s;
  size_t k = n;
  for (int back = 0; back < 3 && k > 0 && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80; ++back)
    --k;
  if ((static_cast<uint8_t>(s[k]) & 0xC0) == 0x80) k = n;  // not UTF-8: cut where asked
  return s.substr(0, k);
}

// The largest length L such that the texts, each cut to L, take at most `budget`
// bytes in all: a shared budget, given first to the shortest.
inline size_t water_level(std::vector<size_t> lens, size_t budget) {
  std::sort(lens.begin(), lens.end());
  size_t used = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    size_t rest = lens.size() - i;
    if (used + lens[i] * rest > budget) return (budget - used) / rest;
    used += lens[i];
  }
  return lens.empty() ? 0 : lens.back();
}

/// The payload of a frame an encoder made (its header left out).
inline std::span<uint8_t> payload_of(std::vector<uint8_t>& frame) {
  return std::span(frame).subspan(kHeaderSize);
}
/// A signed payload's trailing MAC (zeros when the payload is shorter than one).
inline Mac trailing_mac(std::span<const uint8_t> payload) {
  Mac m{};
  if (payload.size() >= kMacSize) std::copy(payload.end() - kMacSize, payload.end(), m.begin());
  return m;
}

/// The part of a signed payload that its trailing MAC covers: all of it but the MAC.
inline std::span<const uint8_t> signed_part(std::span<const uint8_t> payload) {
  return payload.first(payload.size() >= kMacSize ? payload.size() - kMacSize : 0);
}

}  // namespace rankcheck
