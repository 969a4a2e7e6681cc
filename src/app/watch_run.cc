// `rankcheck run -- CMD`: the check forked, its handoff taken, then the command under
// watch in this process (watch/wrapper.h), and on rank 0 the watch server beside it.

#include "app/watch_run.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include <fmt/format.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/output.h"
#include "base/interrupt.h"
#include "base/text.h"
#include "rendezvous/watch_link.h"
#include "rendezvous/watch_server.h"
#include "report/metrics.h"
#include "watch/child.h"
#include "watch/handoff.h"
#include "watch/wrapper.h"

namespace rankcheck {
namespace {

// The check's process ends by its watchdog, at --timeout and its grace at most;
// beyond that the wrapper stops waiting for it.
constexpr Millis kCheckGrace{5000};
// A wrapper's link: to connect and say hello, then to be told to start. Rank 0 tells
// every link to start as soon as its own check process has ended.
constexpr Millis kLinkOpen{10000};
constexpr Millis kStartWait{15000};
// With --fail-fast, how long a wrapper whose command failed waits for rank 0's order.
constexpr Millis kOrderWait{3000};

std::string command_text(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    out += printable(a, 200);
  }
  return printable(out, 1000);
}

// Waits for the check's handoff; a signal to this process meanwhile is the check's.
Result<std::optional<Handoff>> await_handoff(int sock, pid_t check, Deadline by) {
  bool forwarded = false;
  for (;;) {
    pollfd fds[2] = {{sock, POLLIN, 0}, {interrupt_fd(), POLLIN, 0}};
    int n = ::poll(fds, interrupt_fd() >= 0 ? 2 : 1, by.poll_ms(Millis(1000)));
    if (interrupted() && !forwarded) {
      forwarded = true;
      ::kill(check, interrupted());
    }
    if (n > 0 && fds[0].revents != 0) return read_handoff(sock, by);
    if (by.expired()) return Error{"the check gave no word by its deadline", Fault::kTimeout};
  }
}

// The check's exit code; one still running past `by` is killed.
int reap_check(pid_t pid, Deadline by) {
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (by.expired()) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    pollfd none{-1, 0, 0};
    ::poll(&none, 0, 5);
  }
  return shell_exit_code(status);
}

// Rank 0's report, rewritten while the job runs: the check's, with the job's section.
class JobFiles {
 public:
  JobFiles(const Handoff& h, const RunOptions& o) : h_(h), o_(o) {}

  void write(const JobReport& job) {
    std::lock_guard lock(mu_);
    if (!h_.json_path.empty() && h_.json_path != "-" && !h_.check_json.empty()) {
      if (auto ok = write_report_file(h_.json_path, with_job_json(h_.check_json, job)); !ok) {
        say_once(ok.error().message);
      }
    }
    if (!h_.metrics_path.empty()) {
      std::string text = h_.check_metrics + render_job_metrics(job, h_.job_id);
      if (auto ok = write_report_file(h_.metrics_path, text, "the metrics file"); !ok) {
        say_once(ok.error().message);
      }
    }
    // The hosts to leave out of the next try, as the check writes them: once the job
    // has an error (a retry script reads them after the job).
    if (!h_.exclude_path.empty() && !job.fingerprint().empty()) {
      std::string line = suspect_hosts(job.findings) + "\n";
      if (auto ok = write_report_file(h_.exclude_path, line, "the suspect hosts"); !ok) {
        say_once(ok.error().message);
      }
    }
  }

  // The last report: the files, and the job's section where the check's report went.
  void final(const JobReport& job) {
    write(job);
    FILE* out = report_stream();
    if (h_.json_path == "-") {
      std::string all = with_job_json(h_.check_json, job);
      std::fwrite(all.data(), 1, all.size(), out);
    } else {
      std::string text = render_job_text(job, RenderStyle{o_.color});
      if (ascii_output()) text = to_ascii(text);
      std::fwrite(text.data(), 1, text.size(), out);
    }
    std::fflush(out);
  }

 private:
  void say_once(const std::string& why) {
    if (said_) return;
    said_ = true;
    Log::error(why);
  }
  const Handoff& h_;
  const RunOptions& o_;
  std::mutex mu_;
  bool said_ = false;
};

// Rank 0's watch server, on the sockets the check opened.
std::unique_ptr<WatchServer> serve_watch(const Handoff& h, const RunOptions& o,
                                         const std::optional<JobToken>& token, JobFiles& files,
                                         const Log& log) {
  WatchServerConfig cfg;
  cfg.watch.init_timeout_ms =
      (o.watch.init_timeout_s > 0 ? o.watch.init_timeout_s : o.timeout_s) * 1000;
  cfg.watch.stall_after_ms = o.watch.stall_after_s * 1000;
  cfg.watch.fail_fast = o.watch.fail_fast;
  cfg.watch.command = command_text(o.watch.command);
  cfg.token = token;
  cfg.job_id = h.job_id;
  cfg.handshake = seconds(o.handshake_timeout_s);
  cfg.on_report = [&files](const JobReport& r) { files.write(r); };
  cfg.log = [](const std::string& line) { Log::error(line); };
  // One descriptor a link: as the check's master does, the soft limit goes up to what
  // the job needs where the hard one allows (the command gets the limit it had).
  rlimit rl{};
  auto need = static_cast<rlim_t>(h.members.size() + 256);
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need) {
    rl.rlim_cur = std::min(need, rl.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  auto server = std::make_unique<WatchServer>(std::move(cfg));
  if (auto ok = server->adopt(h.listeners); !ok) {
    log.error("warning: the job is not watched: " + ok.error().message);
    return nullptr;
  }
  server->start(h.members);
  server->start_job();
  return server;
}

// This process's link to rank 0's watch server, told to start; down (with why said)
// when it cannot be: the command then runs unwatched, as it would without rankcheck.
WatchLink open_link(const Handoff& h, const std::optional<JobToken>& token, const Log& log) {
  if (h.watch_port == 0) return {};
  WatchLinkOptions lo;
  lo.addresses = h.addresses;
  lo.port = h.watch_port;
  lo.rank = h.rank;
  lo.nranks = h.nranks;
  lo.host = h.host;
  lo.job_id = h.job_id;
  lo.token = token ? &*token : nullptr;
  auto link = WatchLink::open(lo, Deadline::after(kLinkOpen));
  if (!link) {
    log.error("warning: the job runs unwatched: rank 0's watch server: " + link.error().message);
    return {};
  }
  if (auto ok = link->await_start(Deadline::after(kStartWait)); !ok) {
    log.error("warning: the job runs unwatched: " + ok.error().message);
    link->close();
  }
  return std::move(*link);
}

}  // namespace

int run_watched(const RunOptions& o, const EnvMap& env, const HostView* host) {
  Log log(o.quiet);
  if (o.bootstrap == "mpi") {
    Log::error(
        "--bootstrap mpi: a command under watch needs the TCP rendezvous; under mpirun, give "
        "MASTER_ADDR and MASTER_PORT (-x) and leave --bootstrap out");
    return exit_code::kUsage;
  }
  install_interrupt_handlers();
  // The token is read once, here: a pipe (`local`'s) gives it only once, and the
  // check inherits it.
  auto token = load_token(o, env, log);
  if (!token) {
    Log::error(token.error().message);
    return exit_code::kUsage;
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    Log::error(fmt::format("cannot start the check: socketpair: {}", std::strerror(errno)));
    return exit_code::kInternal;
  }
  std::fflush(nullptr);
  Deadline check_by = Deadline::after(seconds(o.timeout_s) + kCheckGrace);
  pid_t pid = ::fork();
  if (pid < 0) {
    Log::error(fmt::format("cannot start the check: fork: {}", std::strerror(errno)));
    return exit_code::kInternal;
  }
  if (pid == 0) {
    ::close(sv[0]);
    RunOptions co = o;
    co.watch.handoff_fd = sv[1];
    if (*token) co.watch.token = std::make_shared<const JobToken>(**token);
    co.token_fd.reset();  // read already, above
    int code = run_process(co, env, host);
    std::fflush(nullptr);
    ::_exit(code);
  }
  ::close(sv[1]);
  auto got = await_handoff(sv[0], pid, check_by);
  ::close(sv[0]);
  int code = reap_check(pid, check_by);
  if (!got) {
    log.error("the check's handoff: " + got.error().message);
    return code == 0 ? exit_code::kInternal : code;
  }
  // Only a pass starts the command: the hang that would have followed is the point.
  if (!*got || code != exit_code::kPass || interrupted()) return code;
  Handoff& h = **got;

  JobFiles files(h, o);
  rlimit nofile{};
  bool have_nofile = ::getrlimit(RLIMIT_NOFILE, &nofile) == 0;
  std::unique_ptr<WatchServer> server;
  if (h.master && h.watch_port != 0) server = serve_watch(h, o, *token, files, log);
  WatchLink link = open_link(h, *token, log);
  // A signal before the command started: it never starts.
  if (interrupted()) return exit_code::kSignalBase + interrupted();

  WrapOptions w;
  w.command = o.watch.command;
  w.env = env;  // as the job was given it: nothing of rankcheck's own
  w.take_terminal = o.watch.take_terminal;
  w.rendezvous_port = h.rendezvous_port;
  w.kill_grace = seconds(o.watch.kill_grace_s);
  w.order_wait = o.watch.fail_fast && link.up() ? kOrderWait : Millis(0);
  w.stdout_fd = o.watch.command_stdout;
  if (have_nofile) w.nofile = nofile;
  w.log = [](const std::string& line) { Log::error(line); };
  WrapOutcome out = wrap_command(w, link.up() ? &link : nullptr);
  if (server) {
    JobReport job = server->finish(Deadline::after(seconds(o.watch.linger_s)),
                                   seconds(o.watch.linger_s), wrapper_told_to_stop);
    files.final(job);
  }
  if (out.ended_by_order) {
    log.error(fmt::format("the job was ended by --fail-fast ({}): exit {}", out.order_finding,
                          out.exit_code));
  }
  return out.exit_code;
}

uint16_t listen_for_watch(Session& s, const std::vector<std::string>& addresses) {
  if (s.o.watch.handoff_fd < 0) return 0;
  s.watch_listen = std::make_unique<WatchServer>(WatchServerConfig{});
  auto port = s.watch_listen->listen(addresses, s.o.watch.port);
  if (!port) {
    s.log.error("warning: the job will run unwatched: its watch server " + port.error().message);
    s.watch_listen.reset();
    return 0;
  }
  s.watch_port = *port;
  return *port;
}

namespace {

void send(Session& s, const Handoff& h) {
  if (auto ok = send_handoff(s.o.watch.handoff_fd, h, Deadline::after(kCheckGrace)); !ok) {
    s.log.error(ok.error().message);
  }
}

Handoff common(const Record& self, int code) {
  Handoff h;
  h.code = code;
  h.rank = self.rank;
  h.nranks = self.nranks;
  h.host = self.host;
  h.job_id = self.job_id.str();
  h.rendezvous_port = static_cast<uint16_t>(self.master_port);
  return h;
}

}  // namespace

void hand_off_master(Session& s, const Report& report, int code) {
  if (s.o.watch.handoff_fd < 0) return;
  auto own = std::find_if(report.members.begin(), report.members.end(),
                          [](const Member& m) { return m.record.rank == 0; });
  if (own == report.members.end()) return;
  Handoff h = common(own->record, code);
  h.master = true;
  if (s.watch_listen && code == exit_code::kPass) {
    h.listeners = s.watch_listen->release_listeners();
    h.watch_port = s.watch_port;
    for (const std::string& a : report.master_bound)
      h.addresses.push_back(a == "0.0.0.0" ? "127.0.0.1" : a == "::" ? "::1" : a);
  }
  for (const Member& m : report.members) {
    MemberWatch w;
    w.rank = m.record.rank;
    w.nranks = m.record.nranks;
    w.host = m.record.host;
    h.members.push_back(std::move(w));
  }
  h.json_path = s.out.json_path;
  h.metrics_path = s.out.metrics_path;
  h.exclude_path = s.out.exclude_path;
  if (!h.json_path.empty()) h.check_json = render_json(report);
  if (!h.metrics_path.empty()) {
    double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    h.check_metrics = render_metrics(report, now);
  }
  send(s, h);
  for (int fd : h.listeners)
    ::close(fd);
}

void hand_off_member(Session& s, const Record& self, const Verdict* verdict, int code) {
  if (s.o.watch.handoff_fd < 0) return;
  Handoff h = common(self, code);
  if (verdict != nullptr && code == exit_code::kPass) {
    h.watch_port = verdict->watch_port;
    h.addresses = self.master_resolved.get();
  }
  send(s, h);
}

}  // namespace rankcheck
