#pragma once
// `rankcheck diagnose`: the logs of a job that already hung or failed, read in one
// pass. Lines are attributed to ranks and hosts from the launchers' prefixes,
// matched against a catalogue of real NCCL / PyTorch / torchrun / Slurm / Open MPI /
// CUDA messages kept as data, and reasoned over once the input ends: the report
// leads with the initiating failure, with the same finding ids as `run`.
//
// The scanner is pure: it is handed lines and never opens a file (the reader in
// src/diagnose/input.cc does). Its memory grows with the ranks and findings it
// sees, never with the size of the logs.

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/finding.h"

namespace rankcheck::diagnose {

/// What a message says about the job.
enum class MessageClass {
  kSetup,              ///< a rank's own setup is wrong: initiating wherever it appears
  kPeersAbsent,        ///< a rank waited for peers that never came
  kProcessDied,        ///< a process ended: a launcher's record, or the error it died of
  kOwnError,           ///< an error a process raised of its own (an exception, CUDA OOM)
  kPeerPointer,        ///< a rank reports a peer gone: look at the peer
  kCollectiveTimeout,  ///< a watchdog's timeout of one collective
  kKilledByLauncher,   ///< a launcher stopping the survivors of a failure
  kExternalEnd,        ///< the scheduler ended the job (time limit, pre-emption, scancel)
  kRankcheck,          ///< rankcheck's own verdict, already decided
  kContext,            ///< recognised, says nothing on its own
  kErrorLine,          ///< a failure no row explains (a traceback, "ERROR", a signal):
                       ///< a finding only when nothing else is
};

/// Whether a message is usually the cause, or a consequence seen elsewhere.
enum class Role { kInitiating, kDownstream, kEither };

/// The fields a catalogue row pulls out of its line, by capture group (the names
/// its `extracts` lists).
enum class LineField : uint8_t {
  kRank,
  kRank2,
  kWorld,
  kJoined,
  kHost,
  kPid,
  kExit,
  kSignal,
  kSeq,
  kOp,
  kPort,
  kTasks,
  kLocalRank,
  kEnqueued,
  kDetail,
  kId,
  kFix,  ///< the fix a rankcheck report printed under its finding
  kCount,
};
inline constexpr size_t kLineFieldCount = static_cast<size_t>(LineField::kCount);

/// One message of the catalogue.
struct Pattern {
  std::string_view name;       ///< the row's own key, e.g. "nccl_duplicate_gpu"
  std::string_view component;  ///< "NCCL", "PyTorch", "torchrun", "Slurm", ...
  MessageClass cls;
  Role role;
  FindingId finding;          ///< the finding it leads to when it is the cause
  std::string_view literal;   ///< must occur in the line (the prefilter); "" = never scanned for
  std::string_view regex;     ///< ECMAScript, searched around the literal; "" = the literal is all
  std::string_view extracts;  ///< the fields of the capture groups, in order: "rank,rank2,detail"
  std::string_view source;    ///< where the text comes from (file, function), for people
};

/// The catalogue, most specific rows first: a line takes the first row that matches.
std::span<const Pattern> catalogue();
/// The fields a row's `extracts` names; throws std::invalid_argument on an unknown name.
std::vector<LineField> parse_extracts(std::string_view extracts);

/// Who printed a line, as far as its prefixes (and its file's path) say.
struct Origin {
  long rank = -1;        ///< global rank
  long local_rank = -1;  ///< torchrun's [defaultN], a log dir's <local_rank>/
  long pid = -1;
  std::string host;
  std::string time;        ///< as printed
  std::string shell_host;  ///< the host of the file's last shell prompt, for a line that
                           ///< names none ("user@node1:~$ cmd" before the output it shows)
};

/// A line's prefixes peeled off: what they said, and where the text itself starts.
struct Prefix {
  long rank = -1;
  long local_rank = -1;
  long pid = -1;
  std::string_view host;
  std::string_view time;
  size_t body = 0;  ///< offset of the text after the prefixes
  /// The launchers whose line prefixes were peeled: how their output looks, which
  /// identity/'s launcher table (their variables) does not know.
  enum Launcher : uint8_t { kNone = 0, kSrun = 1, kTorchrun = 2, kMpirun = 4, kPdsh = 8 };
  uint8_t launchers = 0;  ///< the launchers whose prefixes were seen
};

/// Peels every prefix the launchers and libraries put before a line: srun -l's
/// "12: ", torchrun's "[default3]:" and "[rank3]:", Open MPI's "[1,3]<stderr>:",
/// Horovod's "[3]<stderr>:" and "[rank=3] ", MPICH Hydra's "[mpiexec@node1] ",
/// pdsh's "host: ", NCCL's "host:pid:tid [dev] ", glog's "[E1130 11:02:10.123 ...]",
/// NCCL 2.26's "[2025-03-01 12:00:00] " and the Python logger's stamps.
Prefix parse_prefix(std::string_view line);

/// A time stamp as printed (glog's "E1130 11:02:10.123456", "2025-03-01 12:00:00",
/// the Python logger's "2024-07-25 06:36:18,293", ISO "2026-11-30T16:43:52.5Z",
/// torchrun's "2026-11-30_15:36:14") as microseconds into its year, or -1. The year
/// and the zone are left out: glog prints neither, and one job's logs share both.
int64_t time_key(std::string_view stamp);

/// The host of a shell prompt that begins `line` ("user@node1:~/run$ cmd",
/// "(venv) root@node1:~# cmd", "[user@node1 run]$ cmd"), or "".
std::string_view shell_prompt_host(std::string_view line);

/// Where in `line` another process's text starts after `from` (a torchrun or Open
/// MPI prefix in mid-line: two processes' output in one line), or npos.
size_t next_process_prefix(std::string_view line, size_t from);

/// One line shown as evidence.
struct Evidence {
  std::string file;
  uint64_t line = 0;
  std::string text;
};

/// A finding of the diagnosis: a finding as `run` reports it, plus where it was seen.
struct DiagFinding {
  Finding finding;
  bool initiating = false;
  std::string first_seen;  ///< "file:line", with the time printed on that line if any
  std::vector<Evidence> evidence;
  uint64_t order = 0;  ///< the first line's position in the input, for sorting
  int64_t stamp = -1;  ///< its time (time_key), or the last one before it in its file
};

/// The whole diagnosis, in report order (initiating first).
struct Diagnosis {
  std::vector<DiagFinding> findings;
  std::string launcher;     ///< "torchrun", "slurm", "mpirun", "pdsh", or ""
  std::string verify_with;  ///< the rankcheck command that checks the fix, as it runs
  std::string verify_note;  ///< what to add to it that the logs do not tell, or "" (text only)
  std::vector<long> ranks_seen;
  std::vector<std::string> hosts_seen;
  uint64_t files = 0, lines = 0, bytes = 0, matched = 0;
  uint64_t skipped_files = 0;  ///< binary files left out
  /// The network NCCL chose on each host that said ("IB", "Socket", a plugin's name).
  std::map<std::string, std::string> networks;
  /// The initiating finding's exit code, or 0 when nothing was recognised.
  int exit_code() const;
};

/// What NCCL said in its own words in one process (the lines of its NCCL_DEBUG_FILE,
/// read by the GPU stage): the first warning the catalogue reads as a cause, and the
/// network NCCL chose there. Empty fields where NCCL said nothing of the kind.
struct NcclWords {
  std::string warn;     ///< "NET/IB : ibv_modify_qp failed with 110 ..." (printable, cut)
  std::string finding;  ///< the finding id the catalogue gives it ("nccl-network-error")
  std::string network;  ///< "IB", "Socket", "AWS Libfabric", ...
};
NcclWords read_nccl_words(std::span<const std::string> lines);

/// A line the catalogue recognised, as a live reader sees it (Scanner::observe).
struct LineMatch {
  MessageClass cls;
  Role role;
  FindingId finding;
  std::string_view text;  ///< the line, printable, cut
};

/// A line's reading that needs only its text, made ahead of the scanner's own pass
/// (Scanner::ahead, on the reader's thread): the text as displayed, its prefixes, and
/// where its body may hold a catalogue row's literal.
struct LineAhead {
  std::string_view text;  ///< without terminal codes and CR: in the input, or in `owned`
  size_t raw_bytes = 0;   ///< the line as read
  Prefix prefix;
  uint32_t keys_from = 0, keys_n = 0;  ///< its source keys' offsets in ahead()'s `keys`
  std::array<uint64_t, 2> hits{};      ///< the hand-written rows whose literal it holds
  bool any_hit = false;
};

class Scanner {
 public:
  Scanner();
  ~Scanner();
  Scanner(const Scanner&) = delete;
  Scanner& operator=(const Scanner&) = delete;

  /// The next input; its path also attributes (torchrun's attempt_N/<local_rank>/).
  void begin_source(std::string name);
  /// The next line of the current source, without its line break.
  void line(std::string_view text);
  /// What line(text) reads of a line's text alone (its prefixes, the windows and
  /// literals of its body), made ahead on another thread: it reads the scanner's
  /// tables, never its state. `keys` gets the body's source-key offsets; a line
  /// with terminal codes is kept in `owned`; `scratch` is the calling thread's.
  void ahead(std::string_view raw, LineAhead& out, std::vector<uint32_t>& keys,
             std::deque<std::string>& owned, std::string& scratch) const;
  /// The next line, read ahead: the same as line(raw) of the line `a` was made from.
  /// `keys` is the span ahead() filled, alive until this returns.
  void line(const LineAhead& a, std::span<const uint32_t> keys);
  /// Calls `f` for each line the catalogue recognises, as it is read (the live
  /// reader of `run -- CMD`); the reasoning at finish() is unchanged.
  void observe(std::function<void(const LineMatch&)> f);
  /// Counts a file left out (binary), for the report.
  void skipped(std::string name);
  /// Reasons over everything seen. The scanner is spent afterwards.
  Diagnosis finish();

  struct State;

 private:
  std::unique_ptr<State> s_;
};

/// The report, as text for people and as JSON (with `schema_version`) for machines.
std::string render_text(const Diagnosis& d, bool color);
std::string render_json(const Diagnosis& d);

/// What `rankcheck diagnose` reads: files, directories (recursively), "-" for stdin.
struct Input {
  std::vector<std::string> paths;
  /// CPU seconds the reading may take (--max-seconds); past it, reading stops and
  /// what was read is diagnosed. < 0: 30 s and one more for each 100 MB read; 0: no bound.
  double max_seconds = -1;
};

/// Reads every path into the scanner. Returns "" or the reason an input could not
/// be read ("logs/x.log: Permission denied").
std::string read_inputs(const Input& in, Scanner& scanner);

}  // namespace rankcheck::diagnose
