// NCCL's log lines, read in NVIDIA/nccl src/debug.cc at v2.18.6-1, v2.26.6-1 and
// v2.28.9-1 (see log_line.h), and in 2.30's WARN, which names the function after
// FILE:LINE.

#include "nccl/log_line.h"

#include "base/text.h"

namespace rankcheck::nccl {
namespace {

constexpr auto digit = is_digit;
constexpr auto digits = read_digits;
constexpr auto starts = starts_at;
constexpr auto trim = trim_blanks;

bool host_char(char c) {
  return is_alnum(c) || c == '.' || c == '-' || c == '_';
}

}  // namespace

LogPrefix read_log_prefix(std::string_view s) {
  LogPrefix out;
  size_t q = 0;
  while (q < s.size() && q < 128 && host_char(s[q]))
    ++q;
  if (q == 0 || !starts(s, q, ":")) return out;
  long pid = -1, tid = -1, dev = -1;
  size_t n = digits(s, q + 1, 10, pid);
  if (n == 0 || !starts(s, q + 1 + n, ":")) return out;
  size_t m = digits(s, q + 2 + n, 12, tid);
  size_t r = q + 2 + n + m;
  if (m == 0 || !starts(s, r, " [")) return out;
  size_t k = digits(s, r + 2, 4, dev);
  if (k == 0 || !starts(s, r + 2 + k, "] ")) return out;
  out.host = s.substr(0, q);
  out.pid = pid;
  out.tid = tid;
  out.dev = dev;
  out.length = r + 4 + k;
  return out;
}

size_t warn_marker_at(std::string_view seg) {
  // Every line of a log is asked: most have no WARN at all, and a search that starts
  // at a rare letter says so in one memchr (one that starts at ' ' stops at every word).
  if (seg.find("WARN ") == std::string_view::npos) return std::string_view::npos;
  size_t at = seg.find(" NCCL WARN ");
  if (at != std::string_view::npos) return at;
  std::string_view t = trim(seg);
  if (t.rfind("NCCL WARN ", 0) == 0) return static_cast<size_t>(t.data() - seg.data());
  for (size_t w = seg.find(" WARN "); w != std::string_view::npos; w = seg.find(" WARN ", w + 1)) {
    size_t colon = w;
    while (colon > 0 && digit(seg[colon - 1]))
      --colon;
    if (colon == w || colon == 0 || seg[colon - 1] != ':') continue;
    std::string_view file = seg.substr(0, colon - 1);
    if (file.ends_with(".h") || file.ends_with(".cc") || file.ends_with(".c") ||
        file.ends_with(".cpp"))
      return w;
  }
  return std::string_view::npos;
}

std::string_view warn_source_file(std::string_view before) {
  before = trim(before);
  if (!before.empty() && before.back() == ')') {
    size_t open = before.rfind(" (");
    if (open != std::string_view::npos) before = trim(before.substr(0, open));
  }
  size_t n = 0;
  while (n < before.size() && digit(before[before.size() - 1 - n]))
    ++n;
  if (n == 0 || n == before.size() || before[before.size() - 1 - n] != ':') return {};
  before.remove_suffix(n + 1);
  size_t space = before.find_last_of(' ');
  std::string_view file = space == std::string_view::npos ? before : before.substr(space + 1);
  size_t src = file.rfind("src/");  // a build that logs its full path
  return src == std::string_view::npos ? file : file.substr(src + 4);
}

}  // namespace rankcheck::nccl
