// torchrun's ChildFailedError table, read an entry at a time:
//   [1]:
//     time      : 2026-11-30_15:36:14
//     host      : localhost
//     rank      : 1 (local_rank: 1)
//     exitcode  : 1 (pid: 9444)
//     traceback : ...
// Each entry becomes one match of the row `torchrun_failure_entry` (scan.cc).

#include "base/text.h"
#include "diagnose/internal.h"

namespace rankcheck::diagnose {
namespace {
constexpr auto digit = is_digit;
constexpr auto trim = trim_blanks;
}  // namespace

std::optional<FailureTable::Entry> FailureTable::close_entry() {
  std::optional<Entry> done;
  if (entry_.open) done = std::move(entry_);
  entry_ = Entry{};
  return done;
}

std::optional<FailureTable::Entry> FailureTable::close() {
  in_table_ = false;
  return close_entry();
}

bool FailureTable::line(std::string_view body, uint64_t line_no, std::optional<Entry>& done) {
  std::string_view t = trim(body);
  if (t.rfind("Root Cause (first observed failure)", 0) == 0 || t == "Failures:") {
    done = close_entry();
    in_table_ = true;
    return true;
  }
  if (!in_table_) return false;
  if (t.rfind("=====", 0) == 0) {
    done = close_entry();
    in_table_ = false;
    return true;
  }
  if (t.rfind("-----", 0) == 0) {
    done = close_entry();
    return true;
  }
  if (t.size() >= 4 && t.front() == '[' && t.substr(t.size() - 2) == "]:" && digit(t[1])) {
    done = close_entry();
    entry_.open = true;
    entry_.line = line_no;
    return true;
  }
  if (!entry_.open) return false;
  size_t colon = t.find(" : ");
  if (colon == std::string_view::npos) return false;
  std::string_view key = trim(t.substr(0, colon));
  std::string_view value = trim(t.substr(colon + 3));
  auto num = [](std::string_view v, size_t at) {
    long x = 0;
    bool neg = at < v.size() && v[at] == '-';
    size_t i = at + (neg ? 1 : 0);
    size_t n = 0;
    while (i + n < v.size() && digit(v[i + n]) && n < 12)
      x = x * 10 + (v[i + n++] - '0');
    return n == 0 ? -1L : (neg ? -x : x);
  };
  if (key == "rank") {
    entry_.rank = num(value, 0);
    size_t lr = value.find("local_rank: ");
    if (lr != std::string_view::npos) entry_.local_rank = num(value, lr + 12);
    entry_.text = printable(t, kEvidenceBytes);
  } else if (key == "host") {
    entry_.host = printable(value, 128);
  } else if (key == "time") {
    entry_.time = printable(value, 64);
  } else if (key == "exitcode") {
    entry_.exit = num(value, 0);
    size_t pid = value.find("pid: ");
    if (pid != std::string_view::npos) entry_.pid = num(value, pid + 5);
    // Bounded: a table of one entry with a million "exitcode" lines must not grow it.
    if (entry_.text.size() < kEvidenceBytes) {
      if (!entry_.text.empty()) entry_.text += "; ";
      entry_.text += printable(t, kEvidenceBytes);
    }
  } else if (key != "traceback" && key != "error_file") {
    return false;
  }
  return key != "traceback";  // a traceback's first line may hold the error itself
}

}  // namespace rankcheck::diagnose
