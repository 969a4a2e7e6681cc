#pragma once
// Where a run's words go: progress and errors on stderr, the report on stdout or in
// --json's file, the metrics and the suspect hosts in theirs.

#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

#include "base/result.h"
#include "identity/identity.h"
#include "report/report.h"

namespace rankcheck {

/// stderr: progress (dropped with --quiet) and errors (always printed).
class Log {
 public:
  explicit Log(bool quiet) : quiet_(quiet) {}
  void progress(const std::string& line) const {
    if (!quiet_) error(line);
  }
  static void error(const std::string& line);

 private:
  bool quiet_;
};

/// Writes the report where --json asked, and the text to stdout otherwise; the
/// metrics and the suspect hosts where --metrics and --exclude-file ask.
struct Output {
  std::string json_path;
  bool color;
  std::string metrics_path;
  std::string exclude_path;

  /// --json PATH (and --metrics, --exclude-file) with {rank} and {host} filled in:
  /// one command line serves every process of a job (srun, torchrun, mpirun).
  void set_self(long rank, const std::string& host);
  /// Prints the text, writes the JSON (`json` hands it to its sink in pieces);
  /// whether the JSON could be written.
  Status emit(const std::function<std::string()>& text,
              const std::function<void(const JsonSink&)>& json) const;
};

/// Where the report goes: the process's stdout, or, once keep_stdout_for_report() ran,
/// a copy of it taken then, while fd 1 points at stderr. NCCL writes to stdout on its
/// own (through 2.21 rank 0 prints "NCCL version ..." at NCCL_DEBUG=VERSION and above;
/// any version where its debug file cannot be opened), and that must not land inside
/// the report (`--json -`), nor in a script that reads it.
FILE* report_stream();
int report_fd();
/// Takes that copy and points fd 1 at stderr, for the commands that load NCCL (run,
/// local), after their flags are read and before anything is loaded; once per
/// process. Does nothing when fd 1 is closed.
void keep_stdout_for_report();

/// Writes a report file whole or not at all (see output.cc), with the OS error;
/// `what` names it in that error ("the JSON report").
Status write_report_file(const std::string& path, std::string_view data,
                         std::string_view what = "the JSON report");
/// The same, for a file written in pieces: `produce` hands them to its sink.
Status write_report_file(const std::string& path,
                         const std::function<void(const JsonSink&)>& produce,
                         std::string_view what = "the JSON report");

/// Holds one file descriptor back from the start of a run, so that a master out of
/// them (its members hold them all) still writes its report.
void reserve_spare_fd();

/// A report that could not be written fails the run: the job's own failure still
/// gives the exit code; a pass becomes a usage error (the write's error logged).
int with_written(const Status& written, int code);

/// Fails early, before any rendezvous, when an output path (--json, --metrics,
/// --exclude-file) names a directory, a FIFO or a socket, or a file in a folder this
/// process cannot write in.
Status check_output_paths(const Output& out);

/// Prints a member's report; its exit code.
int print_member(const MemberReport& m, const Output& out);
/// Prints the master's report; the job's exit code (128+N after signal N).
int print_report(const Report& r, const Output& out);
/// Prints why the identity is unusable; exit 2.
int usage_problems(const Identity& id);

}  // namespace rankcheck
