// What a line or its file says outside the catalogue: the file's name, a peer's
// address in a message, whether a line is an INFO one, and a program's name as a prefix.

#include <algorithm>
#include <string_view>

#include "base/text.h"
#include "diagnose/internal.h"

namespace rankcheck::diagnose {
namespace {

constexpr auto digit = is_digit;
constexpr auto trim = trim_blanks;

}  // namespace

// Whether what was peeled off a line is a program's name ("slurmstepd: ", "srun: "),
// which its own texts include, rather than a rank, host or time (which hold digits).
bool named_prefix(std::string_view peeled) {
  return !peeled.empty() && std::none_of(peeled.begin(), peeled.end(), digit);
}

// NCCL's "ADDR<port>" (an IPv4 or IPv6 address, or a host name) in a message.
std::string_view peer_address(std::string_view text) {
  size_t lt = text.find('<');
  while (lt != std::string_view::npos) {
    size_t gt = text.find('>', lt);
    bool port = gt != std::string_view::npos && gt > lt + 1;
    for (size_t i = lt + 1; port && i < gt; ++i)
      port = digit(text[i]);
    if (port) {
      size_t start = lt;
      while (start > 0 && text[start - 1] != ' ' && text[start - 1] != '(' &&
             text[start - 1] != '[')
        --start;
      if (start < lt) return text.substr(start, lt - start);
    }
    lt = text.find('<', lt + 1);
  }
  return {};
}

// What a file's path says: torchrun's log dir names the local rank
// (<run>/attempt_<N>/<local_rank>/stdout.log); "rank3.log", "rank-3.out" name a rank.
Origin path_origin(std::string_view path) {
  Origin o;
  size_t a = path.rfind("attempt_");
  if (a != std::string_view::npos) {
    size_t slash = path.find('/', a);
    if (slash != std::string_view::npos) {
      size_t p = slash + 1;
      long v = 0;
      size_t n = 0;
      while (p + n < path.size() && digit(path[p + n]) && n < 7)
        v = v * 10 + (path[p + n++] - '0');
      if (n > 0 && p + n < path.size() && path[p + n] == '/') o.local_rank = v;
    }
  }
  size_t base = path.rfind('/');
  std::string_view file = base == std::string_view::npos ? path : path.substr(base + 1);
  size_t r = file.find("rank");
  if (r != std::string_view::npos) {
    size_t p = r + 4;
    if (p < file.size() && (file[p] == '-' || file[p] == '_')) ++p;
    long v = 0;
    size_t n = 0;
    while (p + n < file.size() && digit(file[p + n]) && n < 7)
      v = v * 10 + (file[p + n++] - '0');
    if (n > 0) o.rank = v;
  }
  return o;
}

// An INFO or DEBUG line of NCCL, Python's logging, glog ("I1218 20:27:21.426 ...") or
// the many loggers that print the level as a word.
bool info_level(std::string_view line, std::string_view seg) {
  static constexpr std::string_view kMarks[] = {
      "NCCL INFO", " INFO ", "[INFO]", "INFO:", " DEBUG ", "[DEBUG]", "DEBUG:", "\tINFO "};
  for (std::string_view mark : kMarks) {
    if (line.find(mark) != std::string_view::npos) return true;
  }
  std::string_view t = trim(seg);
  if (t.size() > 6 && (t[0] == 'I' || t[0] == 'D') && t[5] == ' ') {
    bool digits = true;
    for (size_t i = 1; i < 5; ++i)
      digits = digits && t[i] >= '0' && t[i] <= '9';
    if (digits) return true;  // glog: I<month><day> <time>
  }
  return line.starts_with("INFO ") || line.starts_with("DEBUG ");
}

}  // namespace rankcheck::diagnose
