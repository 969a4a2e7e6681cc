#include "base/interrupt.h"

#include <atomic>
#include <csignal>

#include <fcntl.h>
#include <unistd.h>

namespace rankcheck {
namespace {

std::atomic<int> g_signal{0};
int g_pipe[2] = {-1, -1};

void on_signal(int sig) {
  int expected = 0;
  g_signal.compare_exchange_strong(expected, sig);
  if (g_pipe[1] >= 0) {
    char c = 1;
    [[maybe_unused]] ssize_t n = ::write(g_pipe[1], &c, 1);
  }
}

}  // namespace

void install_interrupt_handlers() {
  if (g_pipe[0] >= 0) return;
  if (::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) g_pipe[0] = g_pipe[1] = -1;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A peer that vanishes mid-write must be an error value, not a dead process.
  std::signal(SIGPIPE, SIG_IGN);
}

int interrupted() {
  return g_signal.load();
}
int interrupt_fd() {
  return g_pipe[0];
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "a signal";
  }
}

}  // namespace rankcheck
