// The scanner: one pass over the lines. Every line has its prefixes peeled (by
// hand) and its text run through the literal prefilter; only the few lines that
// hold a catalogue row's literal meet a regex. What a match says goes straight
// into the bounded Knowledge; no line is kept but as evidence.

#include <algorithm>
#include <deque>
#include <regex>
#include <span>

#include "base/text.h"
#include "diagnose/internal.h"
#include "nccl/log_line.h"

namespace rankcheck::diagnose {
namespace {

constexpr size_t kWindowBefore = 256;  // regexes see the literal with this much before it
constexpr size_t kWindow = 2048;       // and this much in all
constexpr size_t kMaxSeen = 1 << 20;   // ranks tracked one byte each

constexpr auto trim = trim_blanks;

}  // namespace

struct Scanner::State {
  std::span<const Pattern> rows = catalogue();
  Prefilter prefilter{hand_rows()};
  SourceIndex sources{source_rows()};
  WindowPass window_pass{prefilter, sources};
  std::vector<uint32_t> key_at;             // where a source row's key may start in the line's body
  std::span<const uint32_t> key_span;       // key_at, or the offsets read ahead (line(LineAhead))
  std::string_view windowed;                // the body key_at is for
  size_t source_base = hand_rows().size();  // rows() index of source row 0
  size_t subsystem_base = source_base + source_rows().size();  // and of NCCL's subsystems
  std::vector<std::vector<LineField>> extracts;
  std::vector<std::optional<std::regex>> regex;  // compiled on first use
  Knowledge k;
  std::function<void(const LineMatch&)> observer;  // Scanner::observe's
  uint32_t source = 0;
  bool have_source = false;
  Origin from_path;
  std::string shell_host;  // the host of the file's last shell prompt
  // The hosts the last lines' prefixes named, seen already: a job's lines come from a
  // few hosts in turn, and a string made and a set searched for each line was a
  // twentieth of the scan.
  std::array<std::string, 16> recent_hosts;
  std::array<uint64_t, 16> recent_keys{};  // each one's hash, compared first
  size_t recent_next = 0;

  void see_host(std::string_view host) {
    uint64_t key = 14695981039346656037ull;  // FNV-1a
    for (char c : host)
      key = (key ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    for (size_t i = 0; i < recent_keys.size(); ++i) {
      if (recent_keys[i] == key && recent_hosts[i] == host) return;
    }
    size_t slot = recent_next++ % recent_hosts.size();
    recent_keys[slot] = key;
    recent_hosts[slot].assign(host);
    k.see_host(recent_hosts[slot]);
  }
  // An Open MPI or PRRTE help text (show_help), between two lines of dashes: its first
  // line, and whether any row read a line of it.
  struct Help {
    bool open = false, read = false;
    std::optional<Match> first;
  } help;
  size_t help_row = 0;
  size_t exit_137_row = SIZE_MAX;  // its regex needs "exit" or "code" in the line too
  uint64_t line_no = 0;
  uint64_t seq = 0;
  int64_t last_stamp = -1;  // the latest time stamp of this source so far
  std::string line_text;    // the current line as evidence, made on its first match
  std::string displayed;    // the current line without its terminal codes, when it had any
  uint64_t bytes = 0, matched = 0, skipped = 0;
  AgentTail tail;      // whether the current source ends in torchrun's rendezvous
  FailureTable table;  // torchrun's failure table, when the lines are in one
  size_t entry_row = 0;
  long last_rank = -2, last_local = -2;
  std::vector<uint8_t> seen_ranks, seen_locals;  // per source
  // A finding of rankcheck's own report, held while its wrapped lines follow: the
  // message goes on in lines indented past its mark, then "fix:" and the fix's.
  struct Wrapped {
    bool open = false, in_fix = false;
    Match m;
    size_t margin = 0;  // the column of its mark (✗ or !) after the line's prefix
    long rank = -1, local_rank = -1;
  } wrapped;

  State() {
    for (const Pattern& p : rows) {
      extracts.push_back(parse_extracts(p.extracts));
      regex.emplace_back();
      if (p.name == "torchrun_failure_entry") entry_row = extracts.size() - 1;
      if (p.name == "launcher_help_text") help_row = extracts.size() - 1;
      if (p.name == "exit_status_137") exit_137_row = extracts.size() - 1;
    }
  }

  const std::regex& compiled(size_t row) {
    if (!regex[row]) regex[row].emplace(std::string(rows[row].regex), std::regex::ECMAScript);
    return *regex[row];
  }

  Origin origin_of(const Prefix& p) const {
    Origin o = from_path;
    o.shell_host = shell_host;
    if (p.rank >= 0) o.rank = p.rank;
    if (p.local_rank >= 0) o.local_rank = p.local_rank;
    if (p.pid >= 0) o.pid = p.pid;
    if (!p.host.empty()) o.host = std::string(p.host);
    if (!p.time.empty()) o.time = printable(p.time, 64);
    if (const FailureTable::Entry* e = table.open_entry();
        e != nullptr && e->rank >= 0 && o.rank < 0 && o.local_rank < 0) {
      const FailureTable::Entry& entry = *e;
      o.rank = entry.rank;
      o.local_rank = entry.local_rank;
      o.host = entry.host;
      o.pid = entry.pid;
      o.time = entry.time;
    }
    return o;
  }

  // An entry of torchrun's failure table that ended: its row's match.
  void add_entry(const std::optional<FailureTable::Entry>& done) {
    if (done && (done->rank >= 0 || done->pid >= 0)) {
      const FailureTable::Entry& entry = *done;
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
  }

  // The windows pass of the body, its key offsets kept for match_source.
  bool windows(std::string_view s) {
    windowed = s;
    bool may = window_pass.run(s, key_at);
    key_span = key_at;
    return may;
  }

  // A line of 74 dashes (show_help's frame, opal/util/show_help.c's dash_line) opens
  // or closes a help text; a text no row read is a failure line of its own (its first
  // line). Other widths are tables and rules that healthy jobs print (a model summary).
  bool help_frame(std::string_view body, const Prefix& prefix) {
    std::string_view t = trim(body);
    bool dashes = t.size() == 74 && t.find_first_not_of('-') == std::string_view::npos;
    if (!dashes) {
      // A warning's help text ("WARNING: There was an error initializing an
      // OpenFabrics device") is a healthy job's too: not a failure by itself.
      if (help.open && !help.first && !t.empty() && !t.starts_with("WARNING") &&
          !t.starts_with("Warning")) {
        Match& m = help.first.emplace();
        m.row = help_row;
        m.field[static_cast<size_t>(LineField::kDetail)] = printable(t, kFieldBytes);
        m.origin = origin_of(prefix);
        m.source = source;
        m.line = line_no;
        m.seq = seq;
        m.stamp = last_stamp;
        m.text = printable(t, kEvidenceBytes);
      }
      return false;
    }
    if (help.open) {
      if (!help.read && help.first) k.add(*help.first);
      help = Help{};
    } else {
      help.open = true;
    }
    return true;
  }

  void flush_wrapped() {
    if (!wrapped.open) return;
    wrapped.open = false;
    k.add(wrapped.m);
  }

  // The column of a line's text after its launchers' prefixes: the blanks the
  // prefix parser passed over before the body, and those that begin it.
  static size_t indent_of(std::string_view line, size_t body) {
    size_t n = 0;
    for (size_t i = body; i > 0 && line[i - 1] == ' '; --i)
      ++n;
    for (size_t i = body; i < line.size() && line[i] == ' '; ++i)
      ++n;
    return n;
  }

  // A line that goes on with the held finding of a rankcheck report: true when it
  // was one (and is added to the finding's message or fix).
  bool wrapped_line(std::string_view line, const Prefix& prefix) {
    if (!wrapped.open) return false;
    std::string_view t = trim(line.substr(prefix.body));
    bool same = prefix.rank == wrapped.rank && prefix.local_rank == wrapped.local_rank;
    if (!same || t.empty() || indent_of(line, prefix.body) <= wrapped.margin ||
        t.starts_with("\xE2\x9C\x97 ") || t.starts_with("! ")) {
      flush_wrapped();
      return false;
    }
    LineField to = LineField::kDetail;
    if (t.starts_with("fix:")) {
      wrapped.in_fix = true;
      t = trim(t.substr(4));
    }
    if (wrapped.in_fix) to = LineField::kFix;
    std::string& field = wrapped.m.field[static_cast<size_t>(to)];
    if (field.size() < kVerdictBytes) {
      if (!field.empty()) field += ' ';
      field += printable(t, kVerdictBytes - field.size());
    }
    return true;
  }

  // The first hand-written row whose literal and regex a segment holds, its fields
  // in `m`; a context row (a banner, a value) yields to a later row of a program's
  // own error: an exception that quotes "NCCL version 2.14.3" is the exception.
  bool match_hand(std::string_view seg, const Prefilter::Mask& hits, Match& m) {
    std::optional<Match> context;
    for (size_t row = 0; row < hand_rows().size(); ++row) {
      if ((hits[row / 64] >> (row % 64) & 1) == 0) continue;
      const Pattern& p = rows[row];
      size_t at = seg.find(p.literal);
      if (at == std::string_view::npos) continue;
      if (row == exit_137_row && seg.find("xit") == std::string_view::npos &&
          seg.find("code") == std::string_view::npos)
        continue;  // "137" in a number, not an exit status: no regex for it
      std::smatch sm;
      std::string window;
      if (!p.regex.empty()) {
        size_t from = p.regex.front() == '^' || at < kWindowBefore ? 0 : at - kWindowBefore;
        window.assign(seg.substr(from, kWindow));
        if (!std::regex_search(window, sm, compiled(row))) continue;
      }
      Match found;
      found.row = row;
      const auto& names = extracts[row];
      for (size_t g = 0; g < names.size() && g + 1 < sm.size(); ++g) {
        // Log text is hostile: what a field holds is escaped once, here.
        if (sm[g + 1].matched)
          found.field[static_cast<size_t>(names[g])] = printable(
              sm[g + 1].str(), p.cls == MessageClass::kRankcheck ? kVerdictBytes : kFieldBytes);
      }
      // A generic error line (a word, "Error:") does not beat the context row.
      if (context && p.cls == MessageClass::kErrorLine) break;
      if (p.cls != MessageClass::kContext) {
        m = std::move(found);
        return true;
      }
      if (!context) context = std::move(found);
    }
    if (!context) return false;
    m = std::move(*context);
    return true;
  }

  // The row read from a program's source that a segment holds: an NCCL WARN by the
  // file its prefix names (or that file's subsystem), any other line by the index.
  // A Match is made only for a row found (most segments find none: a Match's strings
  // made and destroyed for each was a tenth of the scan).
  bool match_source(std::string_view seg, std::string_view whole, std::optional<Match>& out) {
    std::string_view text = trim(seg);
    std::string_view found_in = seg;  // what the template was found in
    size_t warn = nccl::warn_marker_at(seg);
    std::optional<size_t> row;
    if (warn != std::string_view::npos) {
      std::string_view file = nccl::warn_source_file(seg.substr(0, warn));
      text = trim(seg.substr(seg.find("WARN ", warn) + 5));
      found_in = text;
      if (auto r = sources.match_warn(file, text)) {
        row = source_base + *r;
      } else if (auto p = sources.match(text); p && source_rows()[*p].program != "C library") {
        // A net plugin's WARN (aws-ofi-nccl's "OFI fi_getinfo() call failed"): its own row.
        row = source_base + *p;
      } else {
        row = subsystem_base + nccl_subsystem_of(file, text);
      }
    } else if (auto r = seg.data() == windowed.data() && seg.size() == windowed.size()
                            ? sources.match_at(seg, key_span)
                            : sources.match(seg)) {
      row = source_base + *r;
    } else if (whole.size() > seg.size() &&
               named_prefix(whole.substr(0, whole.size() - seg.size()))) {
      // A program's text that begins with what looks like a prefix ("slurmstepd: ",
      // "srun: "): the line before its prefixes were peeled.
      if (auto w = sources.match(whole)) row = source_base + *w;
      found_in = whole;
    }
    if (!row) return false;
    Match& m = out.emplace();
    m.row = *row;
    m.field[static_cast<size_t>(LineField::kDetail)] = printable(text, kFieldBytes);
    // The conversions a data row names (a host, a rank): read between its fixed pieces.
    if (*row < subsystem_base) {
      const SourceRow& r = source_rows()[*row - source_base];
      if (!r.fields.empty()) {
        auto values = template_values(r, trim(found_in));
        for (size_t i = 0; i < r.fields.size() && i < values.size(); ++i) {
          if (r.fields[i] != LineField::kCount)
            m.field[static_cast<size_t>(r.fields[i])] = printable(trim(values[i]), kFieldBytes);
        }
      }
    }
    // A peer's address (NCCL's "10.0.0.5<43211>"), for a message that points at a peer.
    if (rows[*row].cls == MessageClass::kPeerPointer) {
      std::string_view peer = peer_address(text);
      if (!peer.empty()) m.field[static_cast<size_t>(LineField::kHost)] = printable(peer, 128);
    }
    return true;
  }

  void segment(std::string_view line, std::string_view seg, const Prefix& prefix,
               const Prefilter::Mask& hits, bool any_hit) {
    std::optional<Match> found_m;
    if (any_hit && !match_hand(seg, hits, found_m.emplace())) found_m.reset();
    bool hand = found_m.has_value();
    // A generic row (a Python exception's last line, an exit status, an error word)
    // yields to a program's own text, and so does a context row (the "NCCL version 2.14.3" an
    // "NCCL error in: ..." line quotes).
    if (!hand || rows[found_m->row].name == "python_exception" ||
        rows[found_m->row].name == "exit_status_137" ||
        rows[found_m->row].cls == MessageClass::kErrorLine ||
        rows[found_m->row].cls == MessageClass::kContext) {
      std::optional<Match> src;
      std::string_view whole =
          trim(line.substr(0, static_cast<size_t>(seg.data() + seg.size() - line.data())));
      bool found = match_source(seg, whole, src);
      if (found && hand) {
        // A context row (a banner) says less than the generic row it would replace; a
        // context row of the hand's gives way only to an error in a program's words.
        MessageClass got = rows[src->row].cls;
        found = got != MessageClass::kContext &&
                (rows[found_m->row].cls != MessageClass::kContext ||
                 got == MessageClass::kOwnError || got == MessageClass::kSetup);
      }
      if (found) {
        found_m = std::move(src);
        hand = true;
      }
    }
    if (!hand) return;
    Match& m = *found_m;
    // A failure word on an INFO or DEBUG line is narration (NCCL's "NCCL INFO ... failed,
    // retrying", a launcher's progress), not the failure.
    if (rows[m.row].cls == MessageClass::kErrorLine && rows[m.row].name != "nccl_return_trace" &&
        info_level(line, seg))
      return;
    m.origin = origin_of(prefix);
    m.source = source;
    m.line = line_no;
    m.seq = seq;
    m.stamp = last_stamp;
    // Once per line, however many processes' segments in it match.
    if (line_text.empty()) line_text = printable(trim(line), kEvidenceBytes);
    m.text = line_text;
    ++matched;
    if (observer) {
      const Pattern& p = rows[m.row];
      observer(LineMatch{p.cls, p.role, p.finding, m.text});
    }
    if (rows[m.row].name == "rankcheck_report_finding") {
      flush_wrapped();
      wrapped = {.open = true,
                 .m = std::move(m),
                 .margin = indent_of(line, static_cast<size_t>(seg.data() - line.data())),
                 .rank = prefix.rank,
                 .local_rank = prefix.local_rank};
      return;
    }
    k.add(m);
  }

  void line(std::string_view text) {
    ++line_no;
    ++seq;
    bytes += text.size() + 1;
    text = displayed_line(text, displayed);
    read_line(text, parse_prefix(text), nullptr, {});
  }

  // A line whose text alone was read ahead, on the reader's thread (ahead()).
  void line(const LineAhead& a, std::span<const uint32_t> keys) {
    ++line_no;
    ++seq;
    bytes += a.raw_bytes + 1;
    read_line(a.text, a.prefix, &a, keys);
  }

  // What a line's text alone says, with the tables only (never the state): the
  // reader's thread makes it while this one reads the lines before.
  void ahead(std::string_view raw, LineAhead& a, std::vector<uint32_t>& keys,
             std::deque<std::string>& owned, std::string& scratch) const {
    a.raw_bytes = raw.size();
    std::string_view text = displayed_line(raw, scratch);
    if (text.data() < raw.data() || text.data() >= raw.data() + raw.size())
      text = owned.emplace_back(text);  // made in `scratch`, which the next line reuses
    a.text = text;
    a.prefix = parse_prefix(text);
    std::string_view body = text.substr(a.prefix.body);
    thread_local std::vector<uint32_t> at;
    bool may = window_pass.run(body, at);
    a.keys_from = static_cast<uint32_t>(keys.size());
    a.keys_n = static_cast<uint32_t>(at.size());
    keys.insert(keys.end(), at.begin(), at.end());
    a.hits = {};
    a.any_hit = may && prefilter.automaton(body, a.hits);
  }

  // A line captured from a terminal (--color always, script, srun --pty, tmux): read
  // as it was shown, without its colour codes or the progress bar a carriage return
  // wrote over, and without a CRLF's CR.
  static std::string_view displayed_line(std::string_view text, std::string& scratch) {
    text = as_displayed(text, scratch);
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    return text;
  }

  void read_line(std::string_view text, const Prefix& prefix, const LineAhead* a,
                 std::span<const uint32_t> keys) {
    // The last line's windows are not this one's (and a read-ahead batch's offsets
    // are gone with it): set again below, for this line's body.
    windowed = {};
    key_span = {};
    k.launchers |= prefix.launchers;
    // A shell prompt names the host the output after it came from.
    if (prefix.body == 0 && text.substr(0, 100).find('@') != std::string_view::npos) {
      std::string_view host = shell_prompt_host(text);
      if (!host.empty()) shell_host = host;
    }
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
    if (!prefix.host.empty()) see_host(prefix.host);
    std::string_view body = text.substr(prefix.body);
    tail.line(body, prefix, {source, line_no, seq, last_stamp, text}, k);
    if (wrapped_line(text, prefix)) return;
    if (std::optional<FailureTable::Entry> done; table.line(body, line_no, done)) {
      add_entry(done);
      return;
    }
    if (help_frame(body, prefix)) return;
    size_t matched_before = matched;
    Prefilter::Mask hits{};
    bool any_hit = false;
    if (a != nullptr) {
      windowed = body;
      key_span = keys.subspan(a->keys_from, a->keys_n);
      hits = a->hits;
      any_hit = a->any_hit;
    } else {
      any_hit = windows(body) && prefilter.automaton(body, hits);
    }
    line_text.clear();
    // Several processes' text in one line: each part with its own prefix.
    size_t start = prefix.body;
    Prefix p = prefix;
    for (;;) {
      size_t next = next_process_prefix(text, start + 1);
      std::string_view seg =
          text.substr(start, next == std::string_view::npos ? next : next - start);
      segment(text, seg, p, hits, any_hit);
      if (next == std::string_view::npos) break;
      p = parse_prefix(text.substr(next));
      start = next + p.body;
    }
    if (help.open && matched != matched_before) help.read = true;
  }
};

Scanner::Scanner() : s_(std::make_unique<State>()) {}
Scanner::~Scanner() = default;

void Scanner::begin_source(std::string name) {
  s_->tail.end(s_->k);
  s_->add_entry(s_->table.close());
  s_->flush_wrapped();
  s_->from_path = path_origin(name);
  s_->shell_host.clear();
  s_->help = {};
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

void Scanner::ahead(std::string_view raw, LineAhead& out, std::vector<uint32_t>& keys,
                    std::deque<std::string>& owned, std::string& scratch) const {
  s_->ahead(raw, out, keys, owned, scratch);
}

void Scanner::line(const LineAhead& a, std::span<const uint32_t> keys) {
  if (!s_->have_source) begin_source("-");
  s_->line(a, keys);
}

void Scanner::observe(std::function<void(const LineMatch&)> f) {
  s_->observer = std::move(f);
}

void Scanner::skipped(std::string name) {
  (void)name;
  ++s_->skipped;
}

Diagnosis Scanner::finish() {
  s_->tail.end(s_->k);
  s_->add_entry(s_->table.close());
  s_->flush_wrapped();
  Diagnosis d = s_->k.conclude();
  d.files = s_->k.sources.size();
  d.lines = s_->seq;
  d.bytes = s_->bytes;
  d.matched = s_->matched;
  d.skipped_files = s_->skipped;
  return d;
}

NcclWords read_nccl_words(std::span<const std::string> lines) {
  Scanner scanner;
  scanner.begin_source("NCCL_DEBUG_FILE");
  for (const std::string& line : lines)
    scanner.line(line);
  Diagnosis d = scanner.finish();
  NcclWords w;
  for (const DiagFinding& f : d.findings) {
    if (f.evidence.empty() || f.evidence.front().text.find("NCCL WARN") == std::string::npos)
      continue;
    const std::string& text = f.evidence.front().text;
    size_t at = text.find("NCCL WARN ");
    w.warn = printable(text.substr(at + 10), 300);
    w.finding = f.finding.name();
    break;
  }
  if (!d.networks.empty()) w.network = d.networks.begin()->second;
  return w;
}

}  // namespace rankcheck::diagnose
