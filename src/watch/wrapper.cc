#include "watch/wrapper.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/text.h"
#include "diagnose/live.h"
#include "host/sockets.h"
#include "watch/child.h"

namespace rankcheck {
namespace {

// The signals a wrapper passes on to its command (tini's and dumb-init's set, less
// the synchronous ones and the terminal's job control), and SIGCHLD, its own.
constexpr int kForwarded[] = {SIGTERM, SIGINT,  SIGHUP,   SIGQUIT,
                              SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT};
// After the command ended, how long its pipes are read for what it wrote last: a
// process it left behind may hold them open for ever.
constexpr Millis kDrainAfterExit{1000};
// How long the last events may take to be written before the wrapper leaves.
constexpr Millis kFlushAtEnd{1000};
// Bytes read from a pipe at once.
constexpr size_t kChunk = 64 * 1024;

int g_signal_pipe[2] = {-1, -1};

extern "C" void on_wrapper_signal(int sig) {
  int saved = errno;
  auto b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

// The handlers of the wrapper's life: each signal a byte in a pipe its loop polls.
bool install_handlers() {
  if (g_signal_pipe[0] < 0 && ::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  struct sigaction sa {};
  sa.sa_handler = on_wrapper_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : kForwarded)
    ::sigaction(sig, &sa, nullptr);
  ::sigaction(SIGCHLD, &sa, nullptr);
  return true;
}

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      pollfd pf{fd, POLLOUT, 0};
      ::poll(&pf, 1, 1000);
      continue;
    }
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

class Loop {
 public:
  Loop(const WrapOptions& o, WatchLink* link, Child child)
      : o_(o), link_(link), child_(std::move(child)), start_(Clock::now()) {
    auto sink = [this](const diagnose::LiveNote& n) { note(n); };
    readers_[0].emplace(sink);
    readers_[1].emplace(sink);
    last_output_ = start_;
  }

  WrapOutcome run() {
    WatchEvent started = event(WatchEventKind::kStarted);
    started.pid = static_cast<uint32_t>(child_.pid());
    send(started);
    next_beat_ = Clock::now() + o_.heartbeat;
    next_marker_ = Clock::now();
    while (!finished()) {
      poll_once();
      timers();
    }
    report_exit();
    if (!out_.ended_by_order && out_.exit_code != 0 && o_.order_wait.count() > 0) await_order();
    flush_at_end();
    return out_;
  }

 private:
  WatchEvent event(WatchEventKind k) const {
    WatchEvent e;
    e.kind = k;
    e.at_ms = static_cast<uint64_t>(ms_between(start_, Clock::now()));
    return e;
  }

  void send(const WatchEvent& e) {
    if (link_ == nullptr || !link_->up()) return;
    link_->send(e);
    if (!link_->flush()) link_gone();
  }

  void link_gone() {
    if (said_lost_) return;
    said_lost_ = true;
    o_.log(fmt::format("lost the link to rank 0's watch server ({}): the job goes on, unwatched",
                       link_->why_down()));
  }

  void note(const diagnose::LiveNote& n) {
    if (n.kind == diagnose::LiveNote::Kind::kMarker) {
      mark(n.marker->phase, std::string(n.marker->id), n.text);
      return;
    }
    WatchEvent e = event(WatchEventKind::kLine);
    e.role = n.role;
    e.finding = std::string(finding_kind(n.finding).name);
    e.text = n.text;
    send(e);
  }

  void mark(JobPhase p, std::string marker, std::string text) {
    if (p <= phase_) return;
    phase_ = p;
    WatchEvent e = event(WatchEventKind::kMarker);
    e.phase = p;
    e.marker = std::move(marker);
    e.text = std::move(text);
    send(e);
  }

  bool finished() const {
    if (!exited_) return false;
    bool pipes_open = child_.out_fd() >= 0 || child_.err_fd() >= 0;
    return !pipes_open || Clock::now() >= drain_by_;
  }

  void poll_once() {
    std::array<pollfd, 4> fds{};
    size_t n = 0;
    auto add = [&](int fd, short events) {
      if (fd >= 0) fds[n++] = {fd, events, 0};
    };
    add(child_.out_fd(), POLLIN);
    add(child_.err_fd(), POLLIN);
    add(g_signal_pipe[0], POLLIN);
    if (link_ != nullptr && link_->up())
      add(link_->fd(), static_cast<short>(POLLIN | (link_->wants_write() ? POLLOUT : 0)));
    int wait = static_cast<int>(std::max<long>(0, std::min<long>(1000, until_next_timer())));
    int got = ::poll(fds.data(), n, wait);
    if (got <= 0) return;
    for (size_t i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      int fd = fds[i].fd;
      if (fd == child_.out_fd()) {
        pipe_readable(0);
      } else if (fd == child_.err_fd()) {
        pipe_readable(1);
      } else if (fd == g_signal_pipe[0]) {
        signals();
      } else if (link_ != nullptr && link_->up() && fd == link_->fd()) {
        link_ready(fds[i].revents);
      }
    }
  }

  void pipe_readable(int which) {
    int fd = which == 0 ? child_.out_fd() : child_.err_fd();
    char buf[kChunk];
    ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (got <= 0) {
      readers_[which]->end();
      which == 0 ? child_.close_out() : child_.close_err();
      return;
    }
    int to = which == 0 ? o_.stdout_fd : o_.stderr_fd;
    // What the command wrote, unchanged. Where it can no longer go (a closed pipe),
    // the command learns it as it would without the wrapper: its end is closed too.
    if (!broken_[which] && !write_all(to, buf, static_cast<size_t>(got))) broken_[which] = true;
    last_output_ = Clock::now();
    last_reader_ = which;
    readers_[which]->feed(std::string_view(buf, static_cast<size_t>(got)));
    if (broken_[which]) which == 0 ? child_.close_out() : child_.close_err();
  }

  void signals() {
    unsigned char buf[64];
    ssize_t n;
    while ((n = ::read(g_signal_pipe[0], buf, sizeof buf)) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        int sig = buf[i];
        if (sig == SIGCHLD) {
          reap();
        } else if (!exited_) {
          child_.signal(sig);
        }
      }
    }
  }

  // The command's end. A wrapper that is process 1 of a container is given every
  // orphan of it: those are reaped too. (Any other wrapper leaves its other children,
  // `local`'s members, to whoever started them.)
  void reap() {
    int status = 0;
    if (!exited_ && ::waitpid(child_.pid(), &status, WNOHANG) == child_.pid()) {
      exited_ = true;
      out_.status = status;
      drain_by_ = Clock::now() + kDrainAfterExit;
    }
    if (::getpid() != 1) return;
    while (::waitpid(-1, &status, WNOHANG) > 0) {
    }
  }

  void link_ready(short revents) {
    if ((revents & POLLOUT) != 0 && !link_->flush()) return link_gone();
    if ((revents & (POLLIN | POLLHUP | POLLERR)) == 0) return;
    if (!link_->read()) link_gone();
    for (const WatchOrder& ord : link_->take_orders()) {
      if (ord.kind != WatchOrderKind::kEnd || out_.ended_by_order) continue;
      out_.ended_by_order = true;
      out_.exit_code = ord.exit_code;
      out_.order_finding = ord.finding;
      out_.order_headline = ord.headline;
      if (!exited_) {
        o_.log(fmt::format("--fail-fast: rank 0 ends the job ({}): stopping the command",
                           ord.finding));
        child_.signal(SIGTERM);
        kill_at_ = Clock::now() + o_.kill_grace;
      }
    }
  }

  long until_next_timer() const {
    auto now = Clock::now();
    auto next = next_beat_;
    if (watch_sockets()) next = std::min(next, next_marker_);
    if (kill_at_) next = std::min(next, *kill_at_);
    if (exited_) next = std::min(next, drain_by_);
    return std::chrono::duration_cast<Millis>(next - now).count() + 1;
  }

  bool watch_sockets() const {
    return o_.rendezvous_port != 0 && phase_ < JobPhase::kInit && !exited_;
  }

  void timers() {
    auto now = Clock::now();
    if (now >= next_beat_) {
      next_beat_ = now + o_.heartbeat;
      WatchEvent e = event(WatchEventKind::kHeartbeat);
      e.quiet_ms = static_cast<uint32_t>(std::min<double>(ms_between(last_output_, now), 4e9));
      std::string last = readers_[last_reader_]->last_line();
      if (last != last_sent_) e.text = last_sent_ = last;
      send(e);
    }
    if (watch_sockets() && now >= next_marker_) {
      next_marker_ = now + o_.marker_poll;
      if (tree_meets_endpoint(ProcFs{}, child_.pid(), {}, o_.rendezvous_port)) {
        mark(JobPhase::kInit, "rendezvous",
             fmt::format("a socket of the command met MASTER_PORT {}", o_.rendezvous_port));
      }
    }
    if (kill_at_ && now >= *kill_at_ && !exited_) {
      o_.log(
          fmt::format("the command did not end within {} of SIGTERM: SIGKILL to its process group",
                      format_seconds(static_cast<double>(o_.kill_grace.count()))));
      child_.signal_group(SIGKILL);
      kill_at_.reset();
    }
  }

  void report_exit() {
    out_.started = true;
    if (!out_.ended_by_order) out_.exit_code = shell_exit_code(out_.status);
    WatchEvent e = event(WatchEventKind::kExit);
    e.exit_code = WIFEXITED(out_.status) ? WEXITSTATUS(out_.status) : -1;
    e.signal = WIFSIGNALED(out_.status) ? WTERMSIG(out_.status) : 0;
    e.text = readers_[last_reader_]->last_line();
    send(e);
  }

  // --fail-fast: this rank's command failed; the watch server's order (which every
  // other rank gets too) says what the job exits with.
  void await_order() {
    Deadline by = Deadline::after(o_.order_wait);
    while (link_ != nullptr && link_->up() && !by.expired() && !out_.ended_by_order) {
      pollfd p{link_->fd(), static_cast<short>(POLLIN | (link_->wants_write() ? POLLOUT : 0)), 0};
      if (::poll(&p, 1, by.poll_ms(Millis(100))) > 0) link_ready(p.revents);
    }
  }

  void flush_at_end() {
    if (link_ == nullptr) return;
    Deadline by = Deadline::after(kFlushAtEnd);
    while (link_->up() && link_->wants_write() && !by.expired()) {
      pollfd p{link_->fd(), POLLOUT, 0};
      if (::poll(&p, 1, by.poll_ms(Millis(100))) > 0 && !link_->flush()) break;
    }
    link_->close("the command ended");
  }

  const WrapOptions& o_;
  WatchLink* link_;
  Child child_;
  Clock::time_point start_;
  std::optional<diagnose::LiveReader> readers_[2];
  int last_reader_ = 0;
  bool broken_[2] = {false, false};
  Clock::time_point last_output_;
  Clock::time_point next_beat_, next_marker_;
  std::optional<Clock::time_point> kill_at_;
  bool exited_ = false;
  Clock::time_point drain_by_{};
  JobPhase phase_ = JobPhase::kStarted;
  std::string last_sent_;
  bool said_lost_ = false;
  WrapOutcome out_;
};

}  // namespace

bool wrapper_told_to_stop() {
  bool stop = false;
  unsigned char buf[64];
  ssize_t n;
  while (g_signal_pipe[0] >= 0 && (n = ::read(g_signal_pipe[0], buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      int sig = buf[i];
      stop = stop || sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
    }
  }
  return stop;
}

WrapOutcome wrap_command(const WrapOptions& o, WatchLink* link) {
  WrapOutcome out;
  if (!install_handlers()) {
    o.log(fmt::format("cannot watch signals: pipe: {}", std::strerror(errno)));
  }
  auto child = Child::spawn(o.command, o.env, o.take_terminal, o.nofile ? &*o.nofile : nullptr);
  if (!child) {
    o.log(child.error().message);
    out.exit_code = child.error().fault == Fault::kDenied ? 126 : 127;
    if (link != nullptr && link->up()) {
      // Told as an exit like any other: the watch server names this rank.
      WatchEvent e;
      e.kind = WatchEventKind::kExit;
      e.exit_code = out.exit_code;
      e.text = printable(child.error().message, kWatchTextMax);
      link->send(e);
      link->flush();
    }
    return out;
  }
  return Loop(o, link, std::move(*child)).run();
}

}  // namespace rankcheck
