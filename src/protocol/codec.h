#pragma once
// What the encoders and decoders of protocol/ share.

#include <cstdint>
#include <span>
#include <string_view>

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

/// The part of a signed payload that its trailing MAC covers: all of it but the MAC.
inline std::span<const uint8_t> signed_part(std::span<const uint8_t> payload) {
  return payload.first(payload.size() >= kMacSize ? payload.size() - kMacSize : 0);
}

}  // namespace rankcheck
