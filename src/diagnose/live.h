#pragma once
// A command's output read as it runs (`rankcheck run -- CMD`), a line at a time,
// with the catalogue and roles `diagnose` reads finished logs with: the markers of
// the job's phases, and the first line of each role (an error of the process's own,
// or one that points at a peer). Memory is bounded: one partial line, the last line.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "diagnose/diagnose.h"
#include "model/watch.h"

namespace rankcheck::diagnose {

/// A line that says where a process is in the job's start, with where its text
/// comes from (research/job-phases.md has the versions each was read at).
struct PhaseMarker {
  std::string_view id;       ///< "nccl-init-start": the marker's name in events and reports
  JobPhase phase;            ///< the phase it puts its process in
  std::string_view literal;  ///< the text that marks it
  std::string_view also;     ///< a second text the line must hold too ("" for none)
  std::string_view source;
};
std::span<const PhaseMarker> phase_markers();
/// The marker a line holds, if any (the latest phase of those it holds).
const PhaseMarker* marker_of(std::string_view line);

/// What the live reader tells its caller.
struct LiveNote {
  enum class Kind { kMarker, kLine } kind = Kind::kMarker;
  const PhaseMarker* marker = nullptr;    ///< kMarker
  LineRole role = LineRole::kInitiating;  ///< kLine
  FindingId finding = FindingId::kUnexplainedError;
  std::string text;  ///< the line, printable, cut to kWatchTextMax
};

class LiveReader {
 public:
  using Sink = std::function<void(const LiveNote&)>;
  explicit LiveReader(Sink sink);
  ~LiveReader();
  LiveReader(const LiveReader&) = delete;
  LiveReader& operator=(const LiveReader&) = delete;

  /// Bytes as they arrive, cut anywhere: whole lines are read, the rest kept.
  void feed(std::string_view bytes);
  /// The stream ended: its last line, if it had no line break.
  void end();
  /// The last line with text in it, printable, cut to kWatchTextMax ("" before any).
  std::string last_line() const;
  uint64_t lines() const { return lines_; }

  /// A line longer than this is read as its first this many bytes.
  static constexpr size_t kMaxLine = 64 * 1024;

 private:
  void line(std::string_view text);

  Sink sink_;
  std::unique_ptr<Scanner> scanner_;
  std::string partial_;
  bool partial_cut_ = false;  // partial_ reached kMaxLine: the rest of the line is dropped
  std::string last_;          // raw, cut to kWatchTextMax: made printable when asked for
  uint64_t lines_ = 0;
  JobPhase phase_ = JobPhase::kStarted;  // the latest phase a marker said
  bool said_initiating_ = false, said_downstream_ = false;
};

}  // namespace rankcheck::diagnose
