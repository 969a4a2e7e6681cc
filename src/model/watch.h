#pragma once
// The job under watch (`rankcheck run -- CMD`) as data: what a wrapper tells the
// master about its command (an event), and what the master holds of every member
// while the job runs (a member's watch). The rules read the second
// (rules/job.cc), the report shows it (report/job.cc).

#include <cstdint>
#include <string>
#include <vector>

#include "model/finding.h"

namespace rankcheck {

/// How far a member's command has come, in the order a job goes through them.
enum class JobPhase : uint8_t {
  kWaiting = 0,   ///< the check passed; the command is not running yet (or no word yet)
  kStarted = 1,   ///< the command runs; no sign yet that it began its distributed init
  kInit = 2,      ///< it began its init: it met the job's rendezvous, or printed so
  kInitDone = 3,  ///< its init completed (NCCL's Init COMPLETE, the store barrier)
  kExited = 4,    ///< the command ended
};
/// "waiting", "started", "in init", "init done", "exited".
std::string_view phase_name(JobPhase p);

/// A line's part in a failure, as the diagnose catalogue reads it.
enum class LineRole : uint8_t {
  kInitiating = 0,  ///< usually the cause (an exception of its own, a setup error)
  kDownstream = 1,  ///< usually a consequence (a peer gone, a timeout, a reset)
};

/// What a wrapper sends the master about its command. Few per job: a start, each
/// phase marker the first time, the first line of each role, the exit, a heartbeat.
enum class WatchEventKind : uint8_t {
  kStarted = 1,    ///< `pid`: the command was started
  kMarker = 2,     ///< `phase` reached, `marker` says how, `text` the line (if any)
  kLine = 3,       ///< the first line of its `role`: `finding`, `text`
  kExit = 4,       ///< `exit_code` or `signal`; `text` the last line it printed
  kHeartbeat = 5,  ///< alive: `quiet_ms` since its last output, `text` that output
};

/// Bounds of an event's text: one line, cut.
inline constexpr size_t kWatchTextMax = 512;
inline constexpr size_t kWatchMarkerMax = 64;

struct WatchEvent {
  WatchEventKind kind = WatchEventKind::kHeartbeat;
  uint64_t at_ms = 0;  ///< since the wrapper started its command (its own clock)
  uint32_t pid = 0;
  JobPhase phase = JobPhase::kStarted;
  std::string marker;  ///< "rendezvous" (a socket on MASTER_PORT), or diagnose/live.cc's
  LineRole role = LineRole::kInitiating;
  std::string finding;  ///< the catalogue's finding id for a line ("" when none)
  int32_t exit_code = -1;
  int32_t signal = 0;
  uint32_t quiet_ms = 0;
  std::string text;
};

/// A noted line of a member's output, when the master heard of it.
struct WatchLine {
  double at_ms = -1;  ///< on the master's clock, from the job's start; -1: none
  std::string finding;
  std::string text;
  bool seen() const { return at_ms >= 0; }
};

/// One member of the job as the master holds it while the job runs.
struct MemberWatch {
  long rank = 0;    ///< its first rank
  long nranks = 1;  ///< ranks it stands for (node mode: a node's)
  std::string host;
  uint32_t pid = 0;        ///< its command's pid, once started
  bool connected = false;  ///< its wrapper's link is up
  bool ever_connected = false;
  bool lost = false;  ///< the link closed before the exit was told
  JobPhase phase = JobPhase::kWaiting;
  double phase_ms[5] = {-1, -1, -1, -1, -1};  ///< when each phase was reached
  std::string marker;                         ///< what put it in its phase
  WatchLine initiating;                       ///< its first line of an initiating role
  WatchLine downstream;                       ///< its first line of a downstream role
  WatchLine last;                             ///< the last line it printed, as last heard
  double heard_ms = -1;                       ///< its last word of any kind
  double quiet_since_ms = -1;                 ///< its output's last line, by its last heartbeat
  int exit_code = -1;                         ///< its command's exit code, or -1
  int signal = 0;                             ///< the signal that ended it, or 0
  double lost_ms = -1;
  bool ended_by_rankcheck = false;  ///< its command was ended by --fail-fast

  bool exited() const { return phase == JobPhase::kExited; }
  bool failed() const { return (exited() && (exit_code != 0 || signal != 0)) || lost; }
  long last_rank() const { return rank + nranks - 1; }
};

/// The job as the master holds it while it runs, and the knobs the rules read.
struct JobWatch {
  std::vector<MemberWatch> members;  ///< by rank
  double now_ms = 0;                 ///< on the master's clock, from the job's start
  double init_timeout_ms = 0;        ///< --init-timeout
  double stall_after_ms = 0;         ///< --stall-after; 0: not watched
  bool ended = false;                ///< --fail-fast ended the job
};

}  // namespace rankcheck
