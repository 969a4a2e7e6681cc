// The plumbing every run shares: deadline, watchdog, signals, log, output, token,
// this member's record and its GPU plan.

#include "app/session.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <tuple>

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/interrupt.h"
#include "report/metrics.h"
#include "host/nccl_socket_if.h"
#include "host/resolve.h"
#include "protocol/messages.h"
#include "base/text.h"
#include "host/interfaces.h"

namespace rankcheck {

namespace {

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

Millis reserve_for(double timeout_s) {
  return std::clamp(seconds(timeout_s / 10), Millis(500), Millis(5000));
}

namespace {

// The watchdog's state for its signal handler: the exit code to end with, and the
// message, made beforehand (a handler may only write and _exit).
std::atomic<int>* watchdog_code = nullptr;
char watchdog_text[128];
size_t watchdog_len = 0;

extern "C" void on_watchdog(int /*signal*/) {
  int code = watchdog_code != nullptr ? watchdog_code->load() : exit_code::kInternal;
  char line[sizeof watchdog_text + 16];
  size_t n = watchdog_len;
  std::memcpy(line, watchdog_text, n);
  char digits[12];
  size_t d = 0;
  unsigned v = static_cast<unsigned>(code);
  do {
    digits[d++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && d < sizeof digits);
  while (d > 0)
    line[n++] = digits[--d];
  line[n++] = '\n';
  [[maybe_unused]] ssize_t w = ::write(2, line, n);
  ::_exit(code);
}

}  // namespace

// A timer and a signal rather than a thread: a thread per process is most of what
// a member of `rankcheck local` costs beyond its work. SIGALRM reaches whichever
// thread does not block it (none of ours does), however the others are stuck.
Watchdog::Watchdog(Clock::time_point at, std::atomic<int>& exit_code) {
  auto text =
      fmt::format("rankcheck: watchdog: still running {} ms past the deadline; exiting with ",
                  kWatchdogGrace.count());
  watchdog_len = std::min(text.size(), sizeof watchdog_text);
  std::memcpy(watchdog_text, text.data(), watchdog_len);
  watchdog_code = &exit_code;
  struct sigaction sa {};
  sa.sa_handler = on_watchdog;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGALRM, &sa, nullptr);
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(at - Clock::now()).count();
  us = std::max<long long>(us, 1);
  itimerval when{};
  when.it_value.tv_sec = static_cast<time_t>(us / 1000000);
  when.it_value.tv_usec = static_cast<suseconds_t>(us % 1000000);
  ::setitimer(ITIMER_REAL, &when, nullptr);
}

Watchdog::~Watchdog() {
  itimerval off{};
  ::setitimer(ITIMER_REAL, &off, nullptr);
  watchdog_code = nullptr;
}

void Log::error(const std::string& line) {
  std::string s = "rankcheck: " + line + "\n";
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
  json_path = fill(json_path);
  metrics_path = fill(metrics_path);
  exclude_path = fill(exclude_path);
}

namespace {

// One descriptor held back from the start: a master out of file descriptors (its
// members hold them all) still writes its report.
int spare_fd = -1;

void reserve_spare_fd() {
  if (spare_fd < 0) spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

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
    // A device or a pipe (/dev/stdout, a FIFO a collector reads): written in place.
    int fd =
        open_with_spare([&path] { return ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY); });
    if (fd < 0) return fail("open", errno);
    bool ok = write_pieces(fd, produce);
    int err = errno;
    ::close(fd);
    return ok ? ok_status() : fail("write", err);
  }
  // A regular file (or none yet) is replaced whole: written beside it under a name
  // of its own, then renamed over it. Two processes that claim the same {rank}
  // each leave a whole report, the later one; a reader never sees half of one.
  // A symbolic link at PATH is replaced, never followed.
  std::string tmp = path + ".XXXXXX";
  std::string pattern = tmp;
  int fd = open_with_spare([&tmp, &pattern] {
    tmp = pattern;  // mkstemp fills in the X's, failed or not
    return ::mkstemp(tmp.data());
  });
  if (fd < 0) return fail("create a file beside it", errno);
  ::fchmod(fd, 0644);
  bool ok = write_pieces(fd, produce) && ::fsync(fd) == 0;
  int err = errno;
  if (::close(fd) != 0 && ok) ok = false, err = errno;
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) ok = false, err = errno;
  if (!ok) {
    ::unlink(tmp.c_str());
    return fail("write", err);
  }
  return ok_status();
}

Status Output::emit(const std::function<std::string()>& text,
                    const std::function<void(const JsonSink&)>& json) const {
  if (json_path != "-") std::fputs(text().c_str(), stdout);
  if (json_path.empty()) return ok_status();
  if (json_path == "-") {
    json([](std::string_view piece) { std::fwrite(piece.data(), 1, piece.size(), stdout); });
    return ok_status();
  }
  return write_report_file(json_path, json);
}

Status check_json_path(const std::string& path) {
  if (path.empty() || path == "-") return ok_status();
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return Error{fmt::format("--json {}: that is a directory: give a file name in it", path)};
  }
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::access(dir.c_str(), W_OK) != 0) {
    return Error{fmt::format("--json {}: cannot write in {}: {}", path, dir, std::strerror(errno))};
  }
  return ok_status();
}

Session::Session(const RunOptions& options)
    : o(options),
      start(Clock::now()),
      wall_start(std::chrono::system_clock::now()),
      end(start + seconds(options.timeout_s)),
      watchdog(end.extended(kWatchdogGrace).when(), watchdog_code),
      log(options.quiet),
      out{options.json_path, options.color, options.metrics_path, options.exclude_path} {
  install_interrupt_handlers();
  reserve_spare_fd();
}

Result<std::optional<JobToken>> load_token(const RunOptions& o, const EnvMap& env, const Log& log) {
  // Given but empty is a mistake, never "no token": `export RANKCHECK_TOKEN_FILE=$TOK`
  // with TOK unset must not turn authentication off.
  std::string path;
  if (o.token_fd) {
    auto token = JobToken::load_fd(*o.token_fd);
    if (!token) return token.error();
    return std::optional<JobToken>(std::move(*token));
  }
  if (o.token_file) {
    if (o.token_file->empty()) {
      return Error{"--token-file is empty: give the path of the job token file"};
    }
    path = *o.token_file;
  } else if (const std::string* p = env_get(env, "RANKCHECK_TOKEN_FILE")) {
    if (p->empty()) {
      return Error{
          "RANKCHECK_TOKEN_FILE is set but empty: give it the path of the job token file, or "
          "unset it to run without a token (is the variable it was set from unset?)"};
    }
    path = *p;
  } else {
    return std::optional<JobToken>();
  }
  std::string warning;
  auto token = JobToken::load(path, &warning);
  if (!token) return token.error();
  if (!warning.empty()) log.error("warning: " + warning);
  return std::optional<JobToken>(std::move(*token));
}

namespace {

// A configuration file NCCL would read; nullopt when there is none to read.
std::optional<std::string> read_small_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return std::nullopt;
  std::string text;
  char buf[4096];
  size_t n = 0;
  // NCCL reads the whole file; 1 MiB is more than any configuration holds.
  while (text.size() < (1u << 20) && (n = std::fread(buf, 1, sizeof buf, f)) > 0)
    text.append(buf, n);
  std::fclose(f);
  return text;
}

// What NCCL's rules pick here, with NCCL_COMM_ID's host resolved as NCCL would.
NcclIfFacts collect_nccl_if(const std::vector<IfAddr>& ifs, const EnvMap& env, int32_t nccl_version,
                            Deadline resolve_by) {
  NcclIfInput in;
  in.env = &env;
  in.nccl_version = nccl_version;
  if (const std::string* id = env_get(env, "NCCL_COMM_ID")) {
    if (auto parsed = parse_comm_id(*id)) {
      auto addrs = resolve_host(parsed->host, resolve_by);
      if (addrs && !addrs->empty()) in.comm_id_address = addrs->front();
    }
  }
  return nccl_if_facts(ifs, in);
}

}  // namespace

Record build_self(const Identity& id, const std::optional<std::string>& host_name,
                  const EnvMap& env, Deadline resolve_by, GpuFacts gpu, const HostView* view) {
  HostFacts facts;
  facts.host = host_name ? *host_name : local_host_name();
  facts.pid = static_cast<uint32_t>(::getpid());
  // One netlink dump serves both the interface names and NCCL's interface rules.
  HostView mine;
  if (view == nullptr) {
    mine = read_host_view();
    view = &mine;
  }
  const std::vector<IfAddr>& ifs = view->interfaces;
  facts.interfaces = interfaces_with_address(ifs);
  if (!id.master_addr.empty()) {
    auto resolved = resolve_host(id.master_addr, resolve_by);
    if (resolved) {
      facts.master_resolved = *resolved;
    } else {
      facts.resolve_error = resolved.error().message;
    }
  }
  // NCCL sees the environment plus its configuration files: so do the record's
  // variables and the interface its rules pick.
  NcclConf conf = apply_nccl_conf(env, read_small_file);
  for (const auto& [name, file] : conf.from)
    facts.env_sources.push_back({name, file});
  facts.nccl_if = collect_nccl_if(ifs, conf.env, gpu.nccl_version, resolve_by);
  facts.nccl_if.netns = view->netns;
  Record self = make_record(id, facts, conf.env, std::move(gpu));
  // What the master compares is what a hello carries, for its own record too.
  if (fit_hello(self)) {
    Log::error(
        "warning: this record is more than a hello carries (a very long tracked environment?): "
        "cut to fit");
  }
  return self;
}

StageOptions stage_options(const RunOptions& o, const EnvMap& env) {
  StageOptions so;
  if (const std::string* lib = env_get(env, "RANKCHECK_CUDA_LIB")) so.cuda_lib = *lib;
  if (const std::string* lib = env_get(env, "RANKCHECK_NCCL_LIB")) so.nccl_lib = *lib;
  if (!o.nccl_lib.empty()) so.nccl_lib = o.nccl_lib;
  so.bandwidth_bytes = o.bandwidth_bytes;
  return so;
}

GpuPlan gpu_plan(const Identity& id, const RunOptions& o, const EnvMap& env) {
  GpuPlan plan;
  plan.first_rank = id.rank;
  plan.nranks = id.nranks;
  plan.local_rank = id.local_rank;
  plan.device = o.device;
  if (const std::string* cvd = env_get(env, "CUDA_VISIBLE_DEVICES")) plan.visible_devices = *cvd;
  return plan;
}

GpuFacts probe_gpus(Session& s) {
  if (s.o.no_gpu) return GpuFacts{};  // kSkipped
  auto t0 = Clock::now();
  GpuFacts gpu = s.stage->inventory(s.plan);
  s.log.progress(fmt::format(
      "GPU inventory in {}: {}", format_seconds(ms_between(t0, Clock::now())),
      gpu.usable()
          ? fmt::format("{} ({}), NCCL {}", gpu.devices.empty() ? "-" : gpu.devices[0].uuid,
                        gpu.choice, nccl_version_text(gpu.nccl_version))
          : gpu.error.str()));
  return gpu;
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
    // One line a script reads with $(cat): the host list, or nothing on a pass.
    Status written =
        write_report_file(out.exclude_path, suspects->empty() ? std::string() : *suspects + "\n",
                          "the suspect hosts");
    if (ok) ok = std::move(written);
  }
  return ok;
}

}  // namespace

int print_member(const MemberReport& m, const Output& out) {
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

int print_report(const Report& r, const Session& s) {
  Status written = s.out.emit([&] { return render_text(r, {s.out.color}); },
                              [&](const JsonSink& sink) { write_json(r, sink); });
  Status extras = write_extras(
      s.out, [&] { return render_metrics(r, unix_now()); }, suspect_hosts(r.findings));
  return with_written(written ? extras : written,
                      interrupted() ? exit_code::kSignalBase + interrupted() : r.exit_code());
}

int usage_problems(const Identity& id) {
  for (const auto& p : id.problems)
    Log::error("cannot run: " + p);
  Log::error("`rankcheck env` shows every source rankcheck looked at");
  return exit_code::kUsage;
}

std::unique_ptr<PathListener> open_path_listener(Record& self, const Session& s) {
  NcclIfFacts& f = self.nccl_if;
  if (f.state != NcclIfFacts::kFound || self.local_rank > 0) return nullptr;
  auto l = PathListener::open(f.address, f.name, path_identity(self.host, f.netns),
                              s.token ? &*s.token : nullptr);
  if (!l) {
    s.log.error("warning: " + l.error().message + ": this host's paths are not rehearsed");
    return nullptr;
  }
  f.listen_port = (*l)->port();
  std::tie(f.port_lo, f.port_hi) = local_port_range();
  return std::move(*l);
}

PathReport rehearse(const PathPlan& plan, const Session& s, const Log& log) {
  auto t0 = Clock::now();
  Deadline by = Deadline::after(Millis(plan.total_ms)).sooner(s.end);
  PathReport r{probe_paths(plan.self_host, plan.self_identity, plan.targets,
                           Millis(plan.per_conn_ms), plan.in_flight, by,
                           s.token ? &*s.token : nullptr)};
  size_t ok = 0;
  for (const PathResult& x : r.results)
    ok += x.outcome == PathOutcome::kOk;
  log.progress(fmt::format("rehearsed NCCL's connections from this host: {} of {} in {}", ok,
                           r.results.size(), format_seconds(ms_between(t0, Clock::now()))));
  return r;
}

}  // namespace rankcheck
