// The last word on "never hangs": a process still running past its deadline ends.

#include "app/watchdog.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include "model/finding.h"

namespace rankcheck {

namespace {

// The watchdog's state for its signal handler: the exit code to end with, and the
// message, made beforehand (a handler may only write and _exit).
std::atomic<int>* watchdog_code = nullptr;
char watchdog_text[128];
size_t watchdog_len = 0;
// The file to remove first, when watchdog_remove_set says the path is whole.
char watchdog_remove[4096];
std::atomic<bool> watchdog_remove_set{false};
// The verdict's exit code once one is reached (-1 before): a run stuck writing its
// report passed or failed all the same, and its exit code says which.
std::atomic<int> verdict_code{-1};

extern "C" void on_watchdog(int /*signal*/) {
  int code = verdict_code.load() >= 0   ? verdict_code.load()
             : watchdog_code != nullptr ? watchdog_code->load()
                                        : exit_code::kInternal;
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
  if (watchdog_remove_set.load()) ::unlink(watchdog_remove);
  ::_exit(code);
}

}  // namespace

// A timer and a signal rather than a thread: a thread per process is most of what
// a member of `rankcheck local` costs beyond its work. SIGALRM reaches whichever
// thread does not block it (none of ours does), however the others are stuck.
Watchdog::Watchdog(Clock::time_point at, std::atomic<int>& exit_code) {
  auto text =
      fmt::format("rankcheck: watchdog: still running {} ms past the deadline; exiting with ",
                  timing::kWatchdogGrace.count());
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

void watchdog_exit_with_verdict(int code) {
  verdict_code.store(code);
}

void remove_at_watchdog_exit(const std::string& path) {
  watchdog_remove_set.store(false);
  if (path.empty() || path.size() >= sizeof watchdog_remove) return;
  std::memcpy(watchdog_remove, path.c_str(), path.size() + 1);
  watchdog_remove_set.store(true);
}

// The timer stays set: the process ends right after its session, and an exit
// handler or a static destructor that hangs must still end by the deadline (with
// the verdict's code, which is set by then).
Watchdog::~Watchdog() {
  watchdog_code = nullptr;
}

}  // namespace rankcheck
