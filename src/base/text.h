#pragma once
// Small text helpers shared by rules and renderers.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rankcheck {

/// "0-7,9,12-15" from any ranks (sorted and deduplicated here). Very long lists
/// end in "... (+N more)".
std::string format_ranks(std::vector<long> ranks, size_t max_runs = 24);
/// "rank 3" or "ranks 0-6,9": every place that names ranks in words says it so.
std::string ranks_label(const std::vector<long>& ranks, size_t max_runs = 24);
/// A member's ranks, `count` of them from `first`: "rank 5" or "ranks 8-11".
std::string span_label(long first, long count);

/// Scanning text a piece at a time, as the log readers do:
/// whether `c` is an ASCII digit;
inline bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
/// whether `c` is an ASCII letter (std::isalpha is a call into the C library's locale
/// tables, made for every byte of every prefix of a gigabyte of logs);
inline bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
/// whether `c` is an ASCII letter or digit;
inline bool is_alnum(char c) {
  return is_alpha(c) || is_digit(c);
}
/// how many digits stand at `p` (at most `max`), their number in `value` (left as it
/// was when there are none);
size_t read_digits(std::string_view s, size_t p, size_t max, long& value);
/// whether `what` stands at `p`;
inline bool starts_at(std::string_view s, size_t p, std::string_view what) {
  return s.size() >= p + what.size() && s.compare(p, what.size(), what) == 0;
}
/// `s` without the blanks and tabs around it (and a line's '\r').
std::string_view trim_blanks(std::string_view s);

/// "gpu-01, gpu-02 and 6 more".
std::string format_list(const std::vector<std::string>& items, size_t max_items = 6);

/// A string from a peer made safe for a terminal: control bytes, escape
/// sequences and invalid UTF-8 become \xNN; longer than `max_len` is cut with "...".
std::string printable(std::string_view s, size_t max_len = 96);

/// A captured terminal line as it reads on the screen: ANSI escape sequences (colour,
/// cursor moves, window titles) dropped, and of a line a carriage return overwrote
/// (a progress bar), only what was written last. `out` is reused; `s` is returned
/// untouched, with no copy, when it holds neither an escape nor an inner '\r'.
std::string_view as_displayed(std::string_view s, std::string& out);

/// Columns a UTF-8 string takes on a terminal (one per code point).
size_t display_width(std::string_view s);

/// "1 rank" / "3 ranks".
std::string plural(size_t n, std::string_view one, std::string_view many);

/// "64 KiB", "256 MiB", "1.5 GiB", "100 bytes".
std::string bytes_text(uint64_t bytes);

/// Seconds with sensible precision: "0.021 s", "1.33 s", "41 s".
std::string format_seconds(double ms);

}  // namespace rankcheck

namespace rankcheck {

/// What this process writes for people (the text report, stderr's lines) in ASCII
/// only: set once at start when the locale asks for another character set (LC_ALL,
/// LC_CTYPE or LANG set, and not UTF-8: LANG=C, POSIX, ISO-8859-1). Unset, UTF-8.
void set_ascii_output(bool ascii);
bool ascii_output();
/// Whether that environment's locale asks for a character set other than UTF-8.
bool locale_wants_ascii(const char* lc_all, const char* lc_ctype, const char* lang);
/// `text` with the report's symbols in ASCII ("✗" "x", "·" "-", "—" "-", "…"
/// "...") and any other non-ASCII character as '?'.
std::string to_ascii(std::string_view text);

}  // namespace rankcheck
