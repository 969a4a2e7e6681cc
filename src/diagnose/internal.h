#pragma once
// What the parts of `rankcheck diagnose` share: the literal prefilter, one matched
// message, and what is known once the lines are read. Private to src/diagnose/.

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "diagnose/diagnose.h"

namespace rankcheck::diagnose {

/// What a failure line that no row reads says by its shape (shape.cc): the finding and
/// the words of its message ("{who} {what}: {line}"); unexplained-error when it has none.
struct Shape {
  FindingId id;
  const char* what;
};
Shape shape_of(std::string_view text);

/// What a line or its file says outside the catalogue (lines.cc): a torchrun log dir's
/// or a rank file's name; NCCL's "ADDR<port>" of a peer in a message; an INFO or DEBUG
/// line (whose failure words are narration); a peeled prefix that is a program's name
/// ("slurmstepd: "), not a rank, host or time.
Origin path_origin(std::string_view path);
std::string_view peer_address(std::string_view text);
bool info_level(std::string_view line, std::string_view seg);
bool named_prefix(std::string_view peeled);

/// The bit of a line's four-byte window in the prefilter's and the source index's
/// tables (2^16 bits each): one hash for both, so that one pass serves both.
inline uint32_t window_bit(uint32_t four) {
  return (four * 0x9E3779B1u) >> 16;
}
inline constexpr uint32_t kWindowBits = 1u << 16;
inline bool has_bit(const std::vector<uint64_t>& f, uint32_t bit) {
  return (f[bit / 64] >> (bit % 64) & 1) != 0;
}

/// Which catalogue rows' literals occur in a text: one pass of an Aho-Corasick
/// automaton over all literals, before any regex runs. Most lines hold none: a pass
/// over their bytes' four-byte windows against a bit per literal's first four (or
/// three) bytes says so first, at a fraction of the automaton's cost a byte.
class Prefilter {
 public:
  using Mask = decltype(LineAhead::hits);  ///< one bit per hand-written row (a static_assert)
  explicit Prefilter(std::span<const Pattern> rows);
  /// Sets the bits of the rows whose literal occurs in `text`; true when any does. The
  /// caller tests the windows first (WindowPass, one pass for these heads and the
  /// source index's keys).
  bool automaton(std::string_view text, Mask& hits) const;
  /// The windows a literal's four bytes set (window_bit), those of three-byte ones
  /// (the window's first three bytes), whether there are such, and whether some
  /// literal is too short for any window to rule it out.
  const std::vector<uint64_t>& heads4() const { return heads4_; }
  const std::vector<uint64_t>& heads3() const { return heads3_; }
  bool any3() const { return any3_; }
  /// Whether a three-byte literal begins with this byte.
  bool starts3(unsigned char c) const { return starts3_[c] != 0; }
  bool always() const { return always_; }

 private:
  static constexpr uint32_t kHeadBits = kWindowBits;
  static uint32_t head_bit(uint32_t head) { return window_bit(head); }
  std::vector<uint64_t> heads4_, heads3_;  ///< literals' first four bytes; three-byte ones'
  bool any3_ = false;                      ///< some literal has three bytes
  std::array<uint8_t, 256> starts3_{};     ///< the first bytes of the three-byte literals
  bool always_ = false;                    ///< some literal is shorter: no pass can rule it out
  std::vector<uint16_t> delta_;            ///< state * 256 + byte -> state
  std::vector<Mask> out_;                  ///< rows whose literal ends in each state
  std::vector<uint8_t> terminal_;          ///< out_ is not empty
};

/// A row read from a program's own source text (data/*.tsv): the text as the
/// program has it, its printf conversions matching any field.
struct SourceRow {
  Pattern pattern;  ///< its meaning; `literal` is the longest fixed piece, the index's key
  std::string_view program, versions, source, text;
  std::vector<std::string_view> pieces;  ///< the fixed text between the conversions
  size_t weight = 0;                     ///< the fixed text's length: the more, the more specific
  bool nccl_warn = false;                ///< an NCCL WARN, met through its file's lines
  /// What each conversion holds (the data's optional eighth column: "-,host,detail"),
  /// kCount for one to leave; empty: nothing is kept but the line.
  std::vector<LineField> fields;
};
/// Every row of the data, in its order.
std::span<const SourceRow> source_rows();
/// The rows an NCCL WARN falls back to when no template of its file matches: one per
/// subsystem, found by the file's path (nccl_subsystem_of), the last for any file.
std::span<const Pattern> nccl_subsystem_rows();
size_t nccl_subsystem_of(std::string_view file, std::string_view text);
/// The hand-written rows (catalogue.cc): the first rows of catalogue().
std::span<const Pattern> hand_rows();
/// The text of each conversion of the template in `text` (which holds it): what lies
/// between its fixed pieces, a conversion at either end running to the text's end.
std::vector<std::string_view> template_values(const SourceRow& r, std::string_view text);
/// Whether `text` holds the template: its fixed pieces in order.
bool template_match(const SourceRow& r, std::string_view text);

/// Finds the source rows a line holds: NCCL WARNs by their file, the rest through
/// their longest fixed piece (its first bytes hashed). Of several, the most specific.
class SourceIndex {
 public:
  explicit SourceIndex(std::span<const SourceRow> rows);
  /// The best row (index into `rows`) whose template `text` holds, if any.
  std::optional<size_t> match(std::string_view text) const;
  /// The same, where a key may start only at the offsets `at` (those whose window's
  /// bit heads() has: a pass over the windows made by the caller).
  std::optional<size_t> match_at(std::string_view text, std::span<const uint32_t> at) const;
  /// The bits of the keys' first four bytes (window_bit).
  const std::vector<uint64_t>& heads() const { return filter4_; }
  /// The best NCCL WARN row of `file` (as the WARN's prefix names it) for `text`.
  std::optional<size_t> match_warn(std::string_view file, std::string_view text) const;

 private:
  static constexpr size_t kMinKey = 4;
  /// A template with less fixed text than this is too vague to find in any line.
  static constexpr size_t kMinWeight = 8;
  /// An NCCL WARN that holds this much of a template's start, and most of it, is
  /// that template's (another version's fields).
  static constexpr size_t kMinPrefix = 24;
  /// An NCCL WARN with this much fixed text is also found without its WARN prefix:
  /// PyTorch quotes NCCL's last WARN after "Last error:", and a user pastes it bare.
  static constexpr size_t kQuotedWeight = 32;
  std::span<const SourceRow> rows_;
  /// Two filters, 8 KiB each, in the cache: a bit per hash of a key's first four
  /// bytes, which most bytes of a line stop at (a load, a multiply, a test); then, for
  /// those that pass (a line's common words: "The ", "fail"), two bits per hash of its
  /// first eight, before any lookup or compare. Keys shorter than eight bytes (few)
  /// are looked up after the first.
  static constexpr uint32_t kFilterBits = kWindowBits;
  static uint32_t head_bit(uint32_t head) { return window_bit(head); }
  static bool has(const std::vector<uint64_t>& f, uint32_t bit) { return has_bit(f, bit); }
  static void set(std::vector<uint64_t>& f, uint32_t bit) {
    f[bit / 64] |= uint64_t{1} << (bit % 64);
  }
  bool long_filtered(uint64_t head) const {
    uint64_t h = head * 0x9E3779B97F4A7C15ull;
    return has(filter8_, static_cast<uint32_t>(h >> 48)) &&
           has(filter8_, static_cast<uint32_t>(h >> 32) & 0xffff);
  }
  std::vector<uint64_t> filter4_, filter8_;
  std::unordered_map<uint64_t, std::vector<uint32_t>> by_head_;   ///< keys' first eight bytes
  std::unordered_map<uint32_t, std::vector<uint32_t>> by_short_;  ///< shorter keys' first four
  std::map<std::string_view, std::vector<uint32_t>, std::less<>> by_file_;
  std::vector<uint32_t> all_warns_;  ///< every NCCL WARN row, for a file no tag has
  std::optional<size_t> best_of(const std::vector<uint32_t>& candidates,
                                std::string_view text) const;
  /// The keys that start at `i` (its window passed the first filter).
  void match_here(std::string_view text, size_t i, std::optional<size_t>& best,
                  size_t& best_weight) const;
};

/// One pass over a line's four-byte windows for both the prefilter and the source
/// index (one hash a window, window_bit): whether a hand row's literal may occur in the
/// line, and the offsets where a source row's key may start (SourceIndex::match_at).
class WindowPass {
 public:
  WindowPass(const Prefilter& hand, const SourceIndex& keys);
  bool run(std::string_view s, std::vector<uint32_t>& key_at) const;

 private:
  const Prefilter& hand_;
  const SourceIndex& keys_;
  std::vector<uint64_t> any4_;  ///< the prefilter's four-byte windows and the keys'
};

/// torchrun's ChildFailedError table ("Root Cause (first observed failure):", then an
/// entry a "[1]:" with its time, host, rank, exit code), read a line at a time
/// (table.cc).
class FailureTable {
 public:
  struct Entry {
    bool open = false;
    long rank = -1, local_rank = -1, exit = 0, pid = -1;
    std::string host, time, detail;
    uint64_t line = 0;
    std::string text;
  };
  /// A line's body: true when it was one of the table's own lines; `done` gets the
  /// entry it ended, if any.
  bool line(std::string_view body, uint64_t line_no, std::optional<Entry>& done);
  /// The table ends (its file did): the entry it left open, if any.
  std::optional<Entry> close();
  /// The entry being read, whose process the lines inside it are.
  const Entry* open_entry() const { return entry_.open ? &entry_ : nullptr; }

 private:
  std::optional<Entry> close_entry();
  bool in_table_ = false;
  Entry entry_;
};

/// A line kept as evidence is cut to this many bytes (the JSON report shows all of
/// it; the text report cuts it to its width).
inline constexpr size_t kEvidenceBytes = 2048;
/// Lines longer than kEvidenceShort are kept whole only until this many bytes of
/// them have been noted; later ones are cut to kEvidenceShort. A log of a million
/// long error lines then holds at most this much text, plus the short cuts.
inline constexpr size_t kEvidenceShort = 300;
inline constexpr uint64_t kLongTextBudget = uint64_t{32} << 20;
/// A field pulled out of a line (a host, a message) is cut to this many bytes.
inline constexpr size_t kFieldBytes = 400;
/// rankcheck's own finding (its message, its fix), joined from its wrapped lines, is
/// cut to this many bytes: rankcheck prints a message of 4 KiB at most.
inline constexpr size_t kVerdictBytes = 4096;

/// One matched message: its row, what it pulled out, who printed it, where.
struct Match {
  size_t row = 0;
  std::array<std::string, kLineFieldCount> field;
  Origin origin;
  uint32_t source = 0;  ///< index into the sources' names
  uint64_t line = 0;
  uint64_t seq = 0;    ///< position in the whole input
  int64_t stamp = -1;  ///< time_key of the line's stamp, or of the last one before it in its file
  std::string text;    ///< the line, printable, cut

  const std::string& get(LineField f) const { return field[static_cast<size_t>(f)]; }
};

/// A number from a field, or -1.
long number(const std::string& s);

/// A message remembered for the report: where it was and what it said.
struct Note {
  size_t row = 0;
  std::string detail;
  Evidence evidence;
  uint64_t seq = 0;
  int64_t stamp = -1;
  std::string time;
};

/// Whether `a` was printed before `b`. In one file, the order of its lines; across
/// files, their time stamps (a line without one takes the last one before it in
/// its file), then the order the files were read in. Lines with no stamp before
/// them count as earliest. A strict weak order: (stamp, seq) compared whole.
inline bool earlier(const Note& a, const Note& b) {
  return a.stamp != b.stamp ? a.stamp < b.stamp : a.seq < b.seq;
}

/// A note that may be absent, on the heap when present. A process holds five and
/// most print none of them: inline (std::optional) they made every process ~1 KiB,
/// boxed ~170 bytes, which is what 100k ranks (or a log of a million labels) cost.
class Slot {
 public:
  Slot() = default;
  Slot(const Slot& o) : p_(o.p_ ? std::make_unique<Note>(*o.p_) : nullptr) {}
  Slot(Slot&&) noexcept = default;
  Slot& operator=(const Slot& o) {
    if (this != &o) p_ = o.p_ ? std::make_unique<Note>(*o.p_) : nullptr;
    return *this;
  }
  Slot& operator=(Slot&&) noexcept = default;
  Slot& operator=(const Note& n) {
    if (p_) {
      *p_ = n;
    } else {
      p_ = std::make_unique<Note>(n);
    }
    return *this;
  }
  explicit operator bool() const { return p_ != nullptr; }
  const Note& operator*() const { return *p_; }
  const Note* operator->() const { return p_.get(); }
  void reset() { p_.reset(); }

 private:
  std::unique_ptr<Note> p_;
};

/// What one process did, as far as the logs say.
struct Proc {
  long rank = -1, local_rank = -1, pid = -1;
  std::string host;
  Slot own;         ///< the first error of its own
  Slot downstream;  ///< the first error that points elsewhere
  Slot waiting;     ///< it waited for peers
  Slot died;        ///< a launcher's record of its end
  Slot timeout;     ///< a collective timed out on it
  long exit = 0, signal = 0;
  int64_t died_at = -1;  ///< the time a record of its end gives (torchrun's table), or -1
  long seq_no = -1, enqueued = -1;
  std::string op;
  bool killed_by_launcher = false;
  bool unattributed = false;  ///< a file's lines that no prefix attributes

  /// It died (a launcher's record says so), not at its launcher's hand, and printed
  /// nothing of its own, of a peer or of waiting: a death with no word of its own.
  /// `own_may_be`: an error of its own that is allowed, where it is this one.
  bool died_silent(const Evidence* own_may_be = nullptr) const {
    bool own_ok = !own || (own_may_be != nullptr && own->evidence.file == own_may_be->file &&
                           own->evidence.line == own_may_be->line);
    return !unattributed && died && !killed_by_launcher && own_ok && !downstream && !waiting;
  }
};

/// Errors of one finding id, grouped over the ranks and hosts that printed them.
struct Group {
  FindingId id{};
  std::set<long> ranks;
  std::set<std::string> hosts;
  std::set<std::string> from_hosts;  ///< a pointer's: the hosts that reported the peer lost
  std::vector<Evidence> evidence;
  Note first;
  std::string detail;  ///< what the first one said
  uint64_t count = 0;
};

/// Hosts whose own facts are compared, at most.
inline constexpr size_t kMaxHostLogs = 4096;

/// What one host's lines say of it, compared across hosts: the NCCL it loads, the
/// network NCCL chose, the NCCL_* values NCCL read from the environment.
struct HostLog {
  std::string nccl_version;
  std::string network;
  std::map<std::string, std::string> env;
  std::optional<Note> version_note, network_note, env_note;
  /// NCCL's IB transport's ports ("[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE", hosts.cc reads
  /// them) and the network plugin ("internal" or the plugin's name).
  std::string ib_ports, plugin;
  std::optional<Note> ib_note, plugin_note;
  /// The first interface NCCL's sockets or bootstrap use there that other hosts cannot
  /// reach ("lo:127.0.0.1", "pod-id-link0:169.254.170.23"), and whether it is loopback.
  std::string unreachable_if;
  bool loopback = false;
  std::optional<Note> if_note;
};

/// What torchrun's agent said of the job it launches (its "launch configs", printed
/// at LOGLEVEL=INFO): -1 and "" where it said nothing.
struct TorchrunLaunch {
  long min_nodes = -1, max_nodes = -1, nproc = -1;
  std::string endpoint, backend;
};

/// A file that ends in torchrun's agent on its way to a rendezvous: its first and
/// last lines of it.
struct HungAgent {
  Note first, last;
};
inline constexpr size_t kMaxHungAgents = 64;

/// Everything the lines said, bounded by the ranks, hosts and findings seen. (Still one
/// struct: its fields are the reasoning's shared facts; it is split by job as the
/// third round of the reasoning (issue 34) gives each of them an owner.)
struct Knowledge {
  std::vector<std::string> sources;
  std::map<std::string, Proc> procs;
  std::map<FindingId, Group> setup;
  std::map<FindingId, Group> pointers;
  /// The scheduler's ends of the job; `reason` is what Slurm gave ("DUE TO TIME
  /// LIMIT"), "" for a bare cancel, "TASK FAILURE" for srun's own.
  struct External {
    Note note;
    std::string reason;
    std::string host;  ///< the node the line names (Slurm's "ON node023"), "" if none
  };
  std::vector<External> external;
  /// rankcheck's own verdict: the first that names a known finding, with the fix
  /// its report printed and the suspect hosts of the same file.
  struct Verdict {
    FindingId id;
    Note note;
    std::string fix;
    uint32_t source = 0;
  };
  std::optional<Verdict> rankcheck;
  /// The first "suspect hosts: h[0-2]" line of each file, as printed.
  std::map<uint32_t, std::string> suspects;
  std::map<long, long> world_by_rank;  ///< the world size each rank waited for
  /// The lines in which a process says which rank it is, once, as it starts
  /// (Lightning's "GLOBAL_RANK: 1, MEMBER: 2/8", c10d's store barrier key): by
  /// (barrier key or -1, rank), the claims and the first of them. Two claims of one
  /// rank before any failure are two processes given that rank (conclude.cc).
  struct Claim {
    Note note;
    long pid = -1;
  };
  std::map<std::pair<long, long>, std::vector<Claim>> claims;  ///< at most 8 a rank
  std::optional<Note> first_failure;  ///< the first line of any failure, for the claims
  long world = -1, joined = -1;
  long most_joined = -1;                     ///< the most any wait said had joined
  std::optional<Note> absent_first;          ///< the first "waited for peers" message
  std::map<std::string, HostLog> host_logs;  ///< by host name, at most kMaxHostLogs
  /// The first failure no row explains (kErrorLine), and who printed it.
  std::optional<std::pair<Note, Origin>> error_line;
  std::set<long> killed_pids;
  std::map<long, long> rank_of_pid;
  std::map<std::string, long> rank_of_local;  ///< "host|local" and "|local"
  std::set<long> ranks_seen;
  std::set<std::string> hosts_seen;
  uint8_t launchers = 0;
  TorchrunLaunch torchrun;
  std::vector<HungAgent> hung_agents;  ///< the files that ended in a rendezvous (AgentTail)
  bool rankcheck_seen = false;
  uint64_t dropped = 0;    ///< messages not kept once the bounds were reached
  uint64_t long_text = 0;  ///< bytes of long lines noted whole (kLongTextBudget)

  /// A line attributed to a process: it was there.
  void seen(const Origin& o);
  /// A host named by a line; Slurm's host lists ("cn[1-2]") as the hosts they hold.
  void see_host(const std::string& host);
  void add(const Match& m);
  Diagnosis conclude();

 private:
  // What add does with each kind of message (reason.cc).
  /// The entry of the process at `at`, made on first sight; null past the bound on
  /// processes (counted in `dropped`).
  Proc* proc_at(const Origin& at, uint32_t source);
  Note note_of(const Match& m, const Origin& o);
  void on_verdict(const Match& m, Note note);
  void on_setup_error(const Match& m, const Pattern& row, const Origin& o, const Note& note);
  void on_job_end(const Match& m, const Pattern& row, Note note);
  void on_death(const Match& m, const Pattern& row, const Origin& o, const Note& note);
  void on_wait(const Match& m, const Origin& o, const Note& note);
  void on_pointer(const Match& m, const Pattern& row, const Origin& o, const Note& note);
  void on_timeout(const Match& m, const Origin& o, const Note& note);
  void on_host_fact(const Match& m, const Pattern& row, const Origin& o, const Note& note);
  void on_rank_claim(const Match& m, const Origin& o, const Note& note);
  /// conclude's first phase: one process, one entry (merge.cc).
  void merge_processes();
};

/// Whether a file ends in torchrun's agent waiting for its rendezvous: its start,
/// launch configuration and rendezvous lines with no worker's line or other text after
/// them (rendezvous.cc). One per source, fed every line.
class AgentTail {
 public:
  /// Where a line is: its source, line number, position in the input, time, text.
  struct At {
    uint32_t source = 0;
    uint64_t line = 0, seq = 0;
    int64_t stamp = -1;
    std::string_view text;
  };
  /// The next line, with its text after the prefixes.
  void line(std::string_view body, const Prefix& prefix, const At& at, Knowledge& k);
  /// The source ended: a file that ended waiting is noted in `k.hung_agents`.
  void end(Knowledge& k);

 private:
  bool waiting_ = false;
  Note first_, last_;
};

/// The rankcheck command that checks the fix, and what to add to it that the logs
/// do not tell (the note beside it: the command holds only values, so that it runs
/// as pasted).
struct Verify {
  std::string command, note;
};
/// The rankcheck command that checks the fix, under the job's own launcher, from what
/// the logs tell of the job's shape (verify.cc).
Verify verify_command(const Knowledge& k, const std::vector<DiagFinding>& findings,
                      const std::string& launcher);

}  // namespace rankcheck::diagnose
