// The scanner: one pass over the lines. Every line has its prefixes peeled (by
// hand) and its text run through the literal prefilter; only the few lines that
// hold a catalogue row's literal meet a regex. What a match says goes straight
// into the bounded Knowledge; no line is kept but as evidence.

#include <algorithm>
#include <regex>

#include "base/text.h"
#include "diagnose/internal.h"

namespace rankcheck::diagnose {
namespace {

constexpr size_t kWindowBefore = 256;  // regexes see the literal with this much before it
constexpr size_t kWindow = 2048;       // and this much in all
constexpr size_t kMaxSeen = 1 << 20;   // ranks tracked one byte each

bool digit(char c) {
  return c >= '0' && c <= '9';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
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

// torchrun's ChildFailedError table, an entry at a time:
//   [1]:
//     time      : 2026-11-30_15:36:14
//     host      : localhost
//     rank      : 1 (local_rank: 1)
//     exitcode  : 1 (pid: 9444)
//     traceback : ...
struct TableEntry {
  bool open = false;
  long rank = -1, local_rank = -1, exit = 0, pid = -1;
  std::string host, time, detail;
  uint64_t line = 0;
  std::string text;
};

}  // namespace

struct Scanner::State {
  std::span<const Pattern> rows = catalogue();
  Prefilter prefilter{rows};
  std::vector<std::vector<LineField>> extracts;
  std::vector<std::optional<std::regex>> regex;  // compiled on first use
  Knowledge k;
  uint32_t source = 0;
  bool have_source = false;
  Origin from_path;
  uint64_t line_no = 0;
  uint64_t seq = 0;
  int64_t last_stamp = -1;  // the latest time stamp of this source so far
  std::string line_text;    // the current line as evidence, made on its first match
  uint64_t bytes = 0, matched = 0, skipped = 0;
  bool in_table = false;
  TableEntry entry;
  size_t entry_row = 0;
  long last_rank = -2, last_local = -2;
  std::vector<uint8_t> seen_ranks, seen_locals;  // per source

  State() {
    for (const Pattern& p : rows) {
      extracts.push_back(parse_extracts(p.extracts));
      regex.emplace_back();
      if (p.name == "torchrun_failure_entry") entry_row = extracts.size() - 1;
    }
  }

  const std::regex& compiled(size_t row) {
    if (!regex[row]) regex[row].emplace(std::string(rows[row].regex), std::regex::ECMAScript);
    return *regex[row];
  }

  Origin origin_of(const Prefix& p) const {
    Origin o = from_path;
    if (p.rank >= 0) o.rank = p.rank;
    if (p.local_rank >= 0) o.local_rank = p.local_rank;
    if (p.pid >= 0) o.pid = p.pid;
    if (!p.host.empty()) o.host = std::string(p.host);
    if (!p.time.empty()) o.time = printable(p.time, 64);
    if (entry.open && entry.rank >= 0 && o.rank < 0 && o.local_rank < 0) {
      o.rank = entry.rank;
      o.local_rank = entry.local_rank;
      o.host = entry.host;
      o.pid = entry.pid;
      o.time = entry.time;
    }
    return o;
  }

  void flush_entry() {
    if (entry.open && (entry.rank >= 0 || entry.pid >= 0)) {
      Match m;
      m.row = entry_row;
      m.field[static_cast<size_t>(LineField::kRank)] =
          entry.rank >= 0 ? std::to_string(entry.rank) : "";
      m.field[static_cast<size_t>(LineField::kLocalRank)] =
          entry.local_rank >= 0 ? std::to_string(entry.local_rank) : "";
      m.field[static_cast<size_t>(LineField::kHost)] = entry.host;
      m.field[static_cast<size_t>(LineField::kExit)] = std::to_string(entry.exit);
      m.field[static_cast<size_t>(LineField::kPid)] =
          entry.pid >= 0 ? std::to_string(entry.pid) : "";
      m.origin.rank = entry.rank;
      m.origin.local_rank = entry.local_rank;
      m.origin.host = entry.host;
      m.origin.pid = entry.pid;
      m.origin.time = entry.time;
      m.source = source;
      m.line = entry.line;
      m.seq = seq;
      m.stamp = last_stamp;
      m.text = entry.text;
      k.add(m);
      ++matched;
    }
    entry = TableEntry{};
  }

  // A line inside torchrun's table: true when it was one of the table's own.
  bool table_line(std::string_view body) {
    std::string_view t = trim(body);
    if (t.rfind("Root Cause (first observed failure)", 0) == 0 || t == "Failures:") {
      flush_entry();
      in_table = true;
      return true;
    }
    if (!in_table) return false;
    if (t.rfind("=====", 0) == 0) {
      flush_entry();
      in_table = false;
      return true;
    }
    if (t.rfind("-----", 0) == 0) {
      flush_entry();
      return true;
    }
    if (t.size() >= 4 && t.front() == '[' && t.substr(t.size() - 2) == "]:" && digit(t[1])) {
      flush_entry();
      entry.open = true;
      entry.line = line_no;
      return true;
    }
    if (!entry.open) return false;
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
      entry.rank = num(value, 0);
      size_t lr = value.find("local_rank: ");
      if (lr != std::string_view::npos) entry.local_rank = num(value, lr + 12);
      entry.text = printable(t, kEvidenceBytes);
    } else if (key == "host") {
      entry.host = printable(value, 128);
    } else if (key == "time") {
      entry.time = printable(value, 64);
    } else if (key == "exitcode") {
      entry.exit = num(value, 0);
      size_t pid = value.find("pid: ");
      if (pid != std::string_view::npos) entry.pid = num(value, pid + 5);
      // Bounded: a table of one entry with a million "exitcode" lines must not grow it.
      if (entry.text.size() < kEvidenceBytes) {
        if (!entry.text.empty()) entry.text += "; ";
        entry.text += printable(t, kEvidenceBytes);
      }
    } else if (key != "traceback" && key != "error_file") {
      return false;
    }
    return key != "traceback";  // a traceback's first line may hold the error itself
  }

  void segment(std::string_view line, std::string_view seg, const Prefix& prefix,
               const Prefilter::Mask& hits) {
    for (size_t row = 0; row < rows.size(); ++row) {
      if ((hits[row / 64] >> (row % 64) & 1) == 0) continue;
      const Pattern& p = rows[row];
      size_t at = seg.find(p.literal);
      if (at == std::string_view::npos) continue;
      std::smatch sm;
      std::string window;
      if (!p.regex.empty()) {
        size_t from = p.regex.front() == '^' || at < kWindowBefore ? 0 : at - kWindowBefore;
        window.assign(seg.substr(from, kWindow));
        if (!std::regex_search(window, sm, compiled(row))) continue;
      }
      Match m;
      m.row = row;
      const auto& names = extracts[row];
      for (size_t g = 0; g < names.size() && g + 1 < sm.size(); ++g) {
        // Log text is hostile: what a field holds is escaped once, here.
        if (sm[g + 1].matched)
          m.field[static_cast<size_t>(names[g])] = printable(sm[g + 1].str(), kFieldBytes);
      }
      m.origin = origin_of(prefix);
      m.source = source;
      m.line = line_no;
      m.seq = seq;
      m.stamp = last_stamp;
      // Once per line, however many processes' segments in it match.
      if (line_text.empty()) line_text = printable(trim(line), kEvidenceBytes);
      m.text = line_text;
      k.add(m);
      ++matched;
      return;  // the first row that matches a segment is its meaning
    }
  }

  void line(std::string_view text) {
    ++line_no;
    ++seq;
    bytes += text.size() + 1;
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    Prefix prefix = parse_prefix(text);
    k.launchers |= prefix.launchers;
    if (!prefix.time.empty()) last_stamp = std::max(last_stamp, time_key(prefix.time));
    if (prefix.rank != last_rank || prefix.local_rank != last_local) {
      last_rank = prefix.rank;
      last_local = prefix.local_rank;
      // Each process once: the map is not touched again for every line it prints.
      auto first_time = [](std::vector<uint8_t>& bits, long v) {
        if (v < 0) return false;
        if (static_cast<size_t>(v) >= kMaxSeen) return true;
        if (bits.size() <= static_cast<size_t>(v)) bits.resize(static_cast<size_t>(v) + 1);
        bool first = bits[static_cast<size_t>(v)] == 0;
        bits[static_cast<size_t>(v)] = 1;
        return first;
      };
      if (prefix.rank >= 0 ? first_time(seen_ranks, prefix.rank)
                           : first_time(seen_locals, prefix.local_rank))
        k.seen(origin_of(prefix));
    }
    if (!prefix.host.empty() && k.hosts_seen.size() < 4096) k.hosts_seen.emplace(prefix.host);
    std::string_view body = text.substr(prefix.body);
    if (table_line(body)) return;
    Prefilter::Mask hits{};
    if (!prefilter.scan(body, hits)) return;
    line_text.clear();
    // Several processes' text in one line: each part with its own prefix.
    size_t start = prefix.body;
    Prefix p = prefix;
    for (;;) {
      size_t next = next_process_prefix(text, start + 1);
      std::string_view seg =
          text.substr(start, next == std::string_view::npos ? next : next - start);
      segment(text, seg, p, hits);
      if (next == std::string_view::npos) break;
      p = parse_prefix(text.substr(next));
      start = next + p.body;
    }
  }
};

Scanner::Scanner() : s_(std::make_unique<State>()) {}
Scanner::~Scanner() = default;

void Scanner::begin_source(std::string name) {
  s_->flush_entry();
  s_->in_table = false;
  s_->from_path = path_origin(name);
  s_->k.sources.push_back(std::move(name));
  s_->source = static_cast<uint32_t>(s_->k.sources.size() - 1);
  s_->line_no = 0;
  s_->last_stamp = -1;
  s_->last_rank = s_->last_local = -2;
  s_->seen_ranks.clear();
  s_->seen_locals.clear();
  s_->have_source = true;
  if (s_->from_path.rank >= 0 || s_->from_path.local_rank >= 0) s_->k.seen(s_->from_path);
}

void Scanner::line(std::string_view text) {
  if (!s_->have_source) begin_source("-");
  s_->line(text);
}

void Scanner::skipped(std::string name) {
  (void)name;
  ++s_->skipped;
}

Diagnosis Scanner::finish() {
  s_->flush_entry();
  Diagnosis d = s_->k.conclude();
  d.files = s_->k.sources.size();
  d.lines = s_->seq;
  d.bytes = s_->bytes;
  d.matched = s_->matched;
  d.skipped_files = s_->skipped;
  return d;
}

}  // namespace rankcheck::diagnose
