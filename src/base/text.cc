#include "base/text.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include <fmt/format.h>

namespace rankcheck {

std::string format_ranks(std::vector<long> ranks, size_t max_runs) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  size_t runs = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    if (runs == max_runs) {
      out += fmt::format(",... (+{} more)", ranks.size() - i);
      break;
    }
    if (!out.empty()) out += ',';
    out += i == j ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    ++runs;
    i = j + 1;
  }
  return out;
}

size_t read_digits(std::string_view s, size_t p, size_t max, long& value) {
  size_t n = 0;
  long v = 0;
  while (p + n < s.size() && n < max && is_digit(s[p + n])) {
    v = v * 10 + (s[p + n] - '0');
    ++n;
  }
  if (n > 0) value = v;
  return n;
}

std::string_view trim_blanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::string ranks_label(const std::vector<long>& ranks, size_t max_runs) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", format_ranks(ranks, max_runs));
}

std::string span_label(long first, long count) {
  return count == 1 ? fmt::format("rank {}", first)
                    : fmt::format("ranks {}-{}", first, first + count - 1);
}

std::string format_list(const std::vector<std::string>& items, size_t max_items) {
  std::string out;
  size_t shown = std::min(items.size(), max_items);
  // Keep "a, b and 1 more" from being longer than just naming the last one.
  if (items.size() == max_items + 1) shown = items.size();
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += (i + 1 == shown && shown == items.size()) ? " and " : ", ";
    out += printable(items[i], 64);
  }
  if (shown < items.size()) out += fmt::format(" and {} more", items.size() - shown);
  return out;
}

namespace {

// The code point of one well-formed UTF-8 sequence of 2 to 4 bytes.
uint32_t decode(std::string_view seq) {
  auto b = [&seq](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(seq[k])); };
  if (seq.size() == 2) return (b(0) & 0x1f) << 6 | (b(1) & 0x3f);
  if (seq.size() == 3) return (b(0) & 0x0f) << 12 | (b(1) & 0x3f) << 6 | (b(2) & 0x3f);
  return (b(0) & 0x07) << 18 | (b(1) & 0x3f) << 12 | (b(2) & 0x3f) << 6 | (b(3) & 0x3f);
}

// Characters that change how the text around them reads without showing
// themselves: bidi embeddings, overrides and isolates, zero-width spaces and
// joiners, the byte-order mark, soft hyphen and the Arabic letter mark.
bool invisible(uint32_t cp) {
  return cp == 0x00ad || cp == 0x061c || (cp >= 0x200b && cp <= 0x200f) ||
         (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2069) || cp == 0xfeff;
}

}  // namespace

std::string_view as_displayed(std::string_view s, std::string& out) {
  // A '\r' that ends the line is a CRLF line end, not an overwrite.
  std::string_view body = s;
  while (!body.empty() && body.back() == '\r')
    body.remove_suffix(1);
  // Both by memchr: every line of a log is asked, and rfind walks back a byte at a time.
  bool escape = body.find('\x1b') != std::string_view::npos;
  bool cr = body.find('\r') != std::string_view::npos;
  if (!escape && !cr) return s;
  out.clear();
  size_t i = 0;
  while (i < body.size()) {
    char c = body[i];
    if (c == '\r') {
      // What follows overwrites the line from its first column: keep the last write.
      out.clear();
      ++i;
      continue;
    }
    if (c != '\x1b') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 >= body.size()) break;
    char kind = body[i + 1];
    i += 2;
    if (kind == '[') {
      // CSI: parameter bytes 0x30-0x3F, intermediates 0x20-0x2F, one final 0x40-0x7E.
      while (i < body.size() && body[i] >= 0x20 && body[i] <= 0x3f)
        ++i;
      if (i < body.size() && body[i] >= 0x40 && body[i] <= 0x7e) ++i;
    } else if (kind == ']' || kind == 'P' || kind == '_' || kind == '^') {
      // OSC, DCS and the like: up to BEL or the string terminator ESC '\'.
      while (i < body.size() && body[i] != '\a' &&
             !(body[i] == '\x1b' && i + 1 < body.size() && body[i + 1] == '\\'))
        ++i;
      i += i < body.size() && body[i] == '\a' ? size_t{1} : size_t{2};
    } else {
      // Two- and three-byte sequences: ESC ( B, ESC =, ESC 7.
      while (i < body.size() && kind >= 0x20 && kind <= 0x2f) {
        kind = body[i];
        ++i;
      }
    }
  }
  return out;
}

std::string printable(std::string_view s, size_t max_len) {
  std::string out;
  size_t i = 0;
  auto hex = [&out](unsigned char c) { out += fmt::format("\\x{:02x}", c); };
  while (i < s.size()) {
    if (out.size() >= max_len) {
      out += "...";
      break;
    }
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      hex(c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // Multi-byte UTF-8: copy only a well-formed sequence, and no C1 controls.
    // Lead bytes: C2-DF start two bytes, E0-EF three, F0-F4 four; C0, C1 (overlong)
    // and F5-FF (beyond U+10FFFF) start nothing.
    size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4
                                          : 0;
    bool valid = len > 0 && i + len <= s.size();
    for (size_t k = 1; valid && k < len; ++k) {
      valid = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    }
    if (valid && len == 3) {
      auto c1 = static_cast<unsigned char>(s[i + 1]);
      valid = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);  // overlong, surrogate
    }
    if (valid && len == 4) {
      auto c1 = static_cast<unsigned char>(s[i + 1]);
      valid = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
    }
    if (valid && len == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) {
      valid = false;  // U+0080..U+009F: C1 controls, CSI among them
    }
    if (!valid) {
      hex(c);
      ++i;
      continue;
    }
    if (len >= 2 && invisible(decode(s.substr(i, len)))) {
      // Bidi controls and zero-width characters would let a host name read as
      // another one: shown as the code point they are.
      out += fmt::format("\\u{{{:04x}}}", decode(s.substr(i, len)));
      i += len;
      continue;
    }
    out.append(s.substr(i, len));
    i += len;
  }
  return out;
}

size_t display_width(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

std::string plural(size_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::string format_seconds(double ms) {
  double s = ms / 1000.0;
  if (s < 0.1) return fmt::format("{:.3f} s", s);
  if (s < 10) return fmt::format("{:.2f} s", s);
  return fmt::format("{:.0f} s", s);
}

std::string bytes_text(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  double v = double(bytes) / 1024;
  size_t unit = 0;
  while (v >= 1024 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  return v == double(uint64_t(v)) ? fmt::format("{} {}", uint64_t(v), kUnits[unit])
                                  : fmt::format("{:.1f} {}", v, kUnits[unit]);
}

}  // namespace rankcheck

namespace rankcheck {
namespace {
bool g_ascii_output = false;
}  // namespace

void set_ascii_output(bool ascii) {
  g_ascii_output = ascii;
}

bool ascii_output() {
  return g_ascii_output;
}

bool locale_wants_ascii(const char* lc_all, const char* lc_ctype, const char* lang) {
  const char* value = nullptr;
  for (const char* v : {lc_all, lc_ctype, lang}) {
    if (v != nullptr && *v != '\0') {
      value = v;
      break;
    }
  }
  if (value == nullptr) return false;
  std::string lower(value);
  for (char& c : lower)
    c = char(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("utf-8") == std::string::npos && lower.find("utf8") == std::string::npos;
}

std::string to_ascii(std::string_view text) {
  static constexpr std::pair<std::string_view, std::string_view> kSymbols[] = {
      {"\xE2\x9C\x97", "x"},  {"\xE2\x9C\x93", "ok"}, {"\xC2\xB7", "-"},
      {"\xE2\x80\x94", "-"},  {"\xE2\x80\x93", "-"},  {"\xE2\x80\xA6", "..."},
      {"\xC3\x97", "x"},      {"\xC2\xB5", "u"},      {"\xE2\x86\x92", "->"},
      {"\xE2\x89\xA5", ">="}, {"\xE2\x89\xA4", "<="}, {"\xE2\x80\x99", "'"},
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      out += char(c);
      ++i;
      continue;
    }
    bool known = false;
    for (const auto& [from, to] : kSymbols) {
      if (text.substr(i, from.size()) == from) {
        out += to;
        i += from.size();
        known = true;
        break;
      }
    }
    if (known) continue;
    // Any other character: one '?' for its whole sequence.
    size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    out += '?';
    i += std::min(n, text.size() - i);
  }
  return out;
}

}  // namespace rankcheck
