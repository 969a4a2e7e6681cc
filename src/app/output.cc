// Where a run's words go: progress and errors on stderr, the report on stdout or
// in --json's file, the metrics and the suspect hosts in theirs; every file written
// whole or not at all.

#include "app/output.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/watchdog.h"
#include "base/interrupt.h"
#include "base/text.h"
#include "report/metrics.h"

namespace rankcheck {

namespace {

// "PATH.rankcheck-HOST-": the start of this host's temporaries beside PATH.
std::string temporary_prefix(const std::string& path) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string name(host);
  std::replace(name.begin(), name.end(), '/', '_');
  return fmt::format("{}.rankcheck-{}-", path, name);
}

// Removes this host's temporaries beside PATH whose process no longer runs (a run
// killed between writing and renaming). Another host's, or a live process's, stay.
void remove_stale_temporaries(const std::string& own) {
  auto slash = own.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : own.substr(0, slash);
  std::string start = slash == std::string::npos ? own : own.substr(slash + 1);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    std::string_view name(e->d_name);
    if (name.substr(0, start.size()) != start) continue;
    std::string_view rest = name.substr(start.size());  // PID.XXXXXX
    auto dot = rest.find('.');
    if (dot == std::string_view::npos || dot == 0 || rest.size() - dot != 7) continue;
    long pid = 0;
    bool digits = true;
    for (char c : rest.substr(0, dot)) {
      digits = digits && c >= '0' && c <= '9';
      pid = pid * 10 + (c - '0');
      if (pid > (1L << 30)) digits = false;
    }
    if (!digits || pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours
    std::string full = dir + "/" + std::string(name);
    struct stat st {};
    if (::lstat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid()) {
      ::unlink(full.c_str());
    }
  }
  ::closedir(d);
}

bool write_all_fd(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Writes what `produce` hands its sink, through a buffer of 256 KiB; false (errno
// set) at the first failed write, after which the rest is dropped.
bool write_pieces(int fd, const std::function<void(const JsonSink&)>& produce) {
  std::string buf;
  bool ok = true;
  int err = 0;
  auto flush = [&] {
    if (ok && !write_all_fd(fd, buf)) ok = false, err = errno;
    buf.clear();
  };
  produce([&](std::string_view piece) {
    if (!ok) return;
    buf += piece;
    if (buf.size() >= (256u << 10)) flush();
  });
  flush();
  errno = err;
  return ok;
}

}  // namespace

void Log::error(const std::string& line) {
  std::string s = "rankcheck: " + (ascii_output() ? to_ascii(line) : line) + "\n";
  std::fwrite(s.data(), 1, s.size(), stderr);
}

void Output::set_self(long rank, const std::string& host) {
  // One pass, left to right: a host name that itself contains "{host}" is put in
  // once, not again and again.
  auto fill = [&](const std::string& path) {
    std::string out;
    for (size_t at = 0; at < path.size();) {
      if (path.compare(at, 6, "{rank}") == 0) {
        out += std::to_string(rank);
        at += 6;
      } else if (path.compare(at, 6, "{host}") == 0) {
        out += host;
        at += 6;
      } else {
        out += path[at++];
      }
    }
    return out;
  };
  // A folder named after the rank or the host ("reports/{host}/r{rank}.json") is made
  // here: one command line serves every host, and none has made its folder yet.
  auto place = [&](std::string& path) {
    auto slash = path.rfind('/');
    bool named =
        slash != std::string::npos && (path.substr(0, slash).find("{rank}") != std::string::npos ||
                                       path.substr(0, slash).find("{host}") != std::string::npos);
    path = fill(path);
    if (named) {
      std::string dir = path.substr(0, path.rfind('/'));
      if (!dir.empty()) ::mkdir(dir.c_str(), 0777);  // the umask applies; EEXIST is fine
    }
  };
  place(json_path);
  place(metrics_path);
  place(exclude_path);
}

namespace {
// One descriptor held back from the start: a master out of file descriptors (its
// members hold them all) still writes its report.
int spare_fd = -1;
}  // namespace

void reserve_spare_fd() {
  if (spare_fd < 0) spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

namespace {

// Retries `open_it` once with the spare descriptor given back, when the process
// is out of them.
template <class F>
int open_with_spare(F&& open_it) {
  int fd = open_it();
  if (fd < 0 && (errno == EMFILE || errno == ENFILE) && spare_fd >= 0) {
    ::close(spare_fd);
    spare_fd = -1;
    fd = open_it();
  }
  return fd;
}

}  // namespace

Status write_report_file(const std::string& path, std::string_view data, std::string_view what) {
  return write_report_file(
      path, [data](const JsonSink& sink) { sink(data); }, what);
}

Status write_report_file(const std::string& path,
                         const std::function<void(const JsonSink&)>& produce,
                         std::string_view what) {
  auto fail = [&path, what](std::string_view step, int err) {
    return Error{
        fmt::format("cannot write {} to {}: {}: {}", what, path, step, std::strerror(err))};
  };
  struct stat st {};
  bool exists = ::lstat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) return fail("it is a directory", EISDIR);
  if (exists && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
    // A device (/dev/null, a terminal) is written in place. A FIFO or a socket is
    // refused: opening one blocks until a reader comes, and writing blocks while it
    // does not read, with the report still unwritten. Checked on the descriptor,
    // opened without blocking and without following a link, and it must be what
    // lstat saw: whoever can write the folder may swap a link to another device in
    // between (as root, this run would write to it).
    int fd = open_with_spare([&path] {
      return ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW);
    });
    auto not_a_file = [&] {
      return Error{
          fmt::format("cannot write {} to {}: not a regular file (a FIFO or a socket "
                      "would block the run): give the path of a file",
                      what, path)};
    };
    if (fd < 0 && (errno == ENXIO || errno == ENODEV)) return not_a_file();  // a FIFO, a socket
    if (fd < 0 && errno == ELOOP) return fail("it changed into a link while it was checked", ELOOP);
    if (fd < 0) return fail("open", errno);
    struct stat opened {};
    if (::fstat(fd, &opened) != 0 || !S_ISCHR(opened.st_mode) || opened.st_ino != st.st_ino ||
        opened.st_dev != st.st_dev) {
      ::close(fd);
      return not_a_file();
    }
    int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    bool ok = write_pieces(fd, produce);
    int err = errno;
    ::close(fd);
    return ok ? ok_status() : fail("write", err);
  }
  // A regular file (or none yet) is replaced whole: written beside it under a name
  // of its own, then renamed over it. Two processes that claim the same {rank}
  // each leave a whole report, the later one; a reader never sees half of one.
  // A symbolic link at PATH is replaced, never followed.
  // Its name says whose it is (host, pid): a run killed between the two steps leaves
  // it behind, and the next run on this host removes those whose process is gone.
  const std::string own = temporary_prefix(path);
  remove_stale_temporaries(own);
  std::string tmp = fmt::format("{}{}.XXXXXX", own, ::getpid());
  std::string pattern = tmp;
  int fd = open_with_spare([&tmp, &pattern] {
    tmp = pattern;  // mkstemp fills in the X's, failed or not
    return ::mkstemp(tmp.data());
  });
  if (fd < 0) return fail("create a file beside it", errno);
  ::fchmod(fd, 0644);
  // No fsync: on a busy disk it waits for seconds in a sleep no signal ends, not
  // even the watchdog's, and a run must end by its deadline. The rename still
  // gives a reader the whole report or none; only a crash of the host itself
  // could leave it empty.
  bool ok = write_pieces(fd, produce);
  int err = errno;
  if (::close(fd) != 0 && ok) ok = false, err = errno;
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) ok = false, err = errno;
  if (!ok) {
    ::unlink(tmp.c_str());
    return fail("write", err);
  }
  return ok_status();
}

namespace {
FILE* g_report = nullptr;  // set once, by keep_stdout_for_report
}  // namespace

FILE* report_stream() {
  return g_report != nullptr ? g_report : stdout;
}

int report_fd() {
  return g_report != nullptr ? ::fileno(g_report) : STDOUT_FILENO;
}

void keep_stdout_for_report() {
  if (g_report != nullptr) return;
  std::fflush(stdout);
  int fd = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (fd < 0) return;
  FILE* f = ::fdopen(fd, "w");
  if (f == nullptr) {
    ::close(fd);
    return;
  }
  if (::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    std::fclose(f);
    return;
  }
  g_report = f;
}

Status Output::emit(const std::function<std::string()>& text,
                    const std::function<void(const JsonSink&)>& json) const {
  // Out of stdio's buffer at once: on a pipe it would wait for the exit, and what
  // follows the report (rank 0 closing its members' connections, a failed member
  // leaving on that) can end the job first: mpirun and srun --kill-on-bad-exit kill
  // the rest at the first failed exit, and a report in a buffer dies with them.
  FILE* out = report_stream();
  if (json_path != "-") {
    std::fputs(ascii_output() ? to_ascii(text()).c_str() : text().c_str(), out);
    std::fflush(out);
  }
  if (json_path.empty()) return ok_status();
  if (json_path == "-") {
    json([out](std::string_view piece) { std::fwrite(piece.data(), 1, piece.size(), out); });
    std::fflush(out);
    return ok_status();
  }
  return write_report_file(json_path, json);
}

namespace {

// One output path, before the run: a directory, a FIFO or a socket there (which
// would block the run, or be refused only after it), or a folder this process
// cannot write in, is a usage error now rather than a lost report later.
Status check_output_path(std::string_view flag, const std::string& path) {
  if (path.empty() || path == "-") return ok_status();
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return Error{fmt::format("{} {}: that is a directory: give a file name in it", flag, path)};
    }
    if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) {
      return Error{
          fmt::format("{} {}: not a regular file (a FIFO or a socket would block the "
                      "run): give the path of a file",
                      flag, path)};
    }
  }
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::access(dir.c_str(), W_OK) != 0) {
    return Error{
        fmt::format("{} {}: cannot write in {}: {}", flag, path, dir, std::strerror(errno))};
  }
  return ok_status();
}

}  // namespace

Status check_output_paths(const Output& out) {
  for (auto [flag, path] :
       {std::pair<std::string_view, const std::string*>{"--json", &out.json_path},
        {"--metrics", &out.metrics_path},
        {"--exclude-file", &out.exclude_path}}) {
    if (auto ok = check_output_path(flag, *path); !ok) return ok;
  }
  return ok_status();
}

// A report that could not be written fails the run: a script relies on it. The
// job's own failure still gives the exit code; a pass becomes a usage error.
int with_written(const Status& written, int code) {
  if (written) return code;
  Log::error(written.error().message);
  return code != exit_code::kPass ? code : exit_code::kUsage;
}

namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// --metrics and --exclude-file, after the report: the first that fails is the error.
Status write_extras(const Output& out, const std::function<std::string()>& metrics,
                    const std::optional<std::string>& suspects) {
  Status ok = ok_status();
  if (!out.metrics_path.empty()) ok = write_report_file(out.metrics_path, metrics(), "the metrics");
  if (!out.exclude_path.empty() && suspects) {
    // One line a script reads with $(cat) or `read`: the host list, or an empty line
    // when there are none (`read` fails on a file without a line).
    Status written = write_report_file(out.exclude_path, *suspects + "\n", "the suspect hosts");
    if (ok) ok = std::move(written);
  }
  return ok;
}

}  // namespace

int print_member(const MemberReport& m, const Output& out) {
  watchdog_exit_with_verdict(m.exit_code);
  Status written = out.emit([&] { return render_member_text(m, {out.color}); },
                            [&](const JsonSink& sink) { sink(render_member_json(m)); });
  // Rank 0 names the job's suspects; a member writes them only when its own
  // failure leads (it never heard rank 0's verdict).
  std::optional<std::string> suspects;
  if (!m.verdict_received) suspects = suspect_hosts(m.findings);
  Status extras = write_extras(
      out, [&] { return render_member_metrics(m, unix_now()); }, suspects);
  return with_written(written ? extras : written, m.exit_code);
}

int print_report(const Report& r, const Output& out) {
  watchdog_exit_with_verdict(interrupted() ? exit_code::kSignalBase + interrupted()
                                           : r.exit_code());
  Status written = out.emit([&] { return render_text(r, {out.color}); },
                            [&](const JsonSink& sink) { write_json(r, sink); });
  Status extras = write_extras(
      out, [&] { return render_metrics(r, unix_now()); }, suspect_hosts(r.findings));
  return with_written(written ? extras : written,
                      interrupted() ? exit_code::kSignalBase + interrupted() : r.exit_code());
}

int usage_problems(const Identity& id) {
  for (const auto& p : id.problems)
    Log::error("cannot run: " + p);
  Log::error("`rankcheck env` shows every source rankcheck looked at");
  return exit_code::kUsage;
}

}  // namespace rankcheck
