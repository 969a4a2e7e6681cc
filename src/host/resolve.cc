#include "host/resolve.h"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/interrupt.h"

namespace rankcheck {

namespace {

std::string numeric(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  } else if (sa->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

// Shared between the waiting caller and the lookup thread, which may outlive it.
struct Lookup {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  int rc = 0;
  std::vector<std::string> v4, v6;
};

}  // namespace

Result<std::vector<std::string>> resolve_host(const std::string& name, Deadline deadline) {
  // A numeric address (MASTER_ADDR=10.0.0.1, as most launchers give it) needs no
  // lookup, and no thread to put a deadline on one: written back in its canonical form,
  // as getaddrinfo would give it.
  for (int family : {AF_INET, AF_INET6}) {
    in6_addr bin{};
    char buf[INET6_ADDRSTRLEN] = {};
    if (::inet_pton(family, name.c_str(), &bin) == 1 &&
        ::inet_ntop(family, &bin, buf, sizeof buf) != nullptr) {
      return std::vector<std::string>{buf};
    }
  }
  auto state = std::make_shared<Lookup>();
  std::thread([state, name] {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &res);
    std::vector<std::string> v4, v6;
    for (addrinfo* p = res; p != nullptr; p = p->ai_next) {
      std::string a = numeric(p->ai_addr);
      auto& list = p->ai_family == AF_INET ? v4 : v6;
      if (!a.empty() && std::find(list.begin(), list.end(), a) == list.end()) list.push_back(a);
    }
    if (res != nullptr) ::freeaddrinfo(res);
    std::lock_guard lock(state->mu);
    state->rc = rc;
    state->v4 = std::move(v4);
    state->v6 = std::move(v6);
    state->done = true;
    state->cv.notify_all();
  }).detach();

  std::unique_lock lock(state->mu);
  while (!state->done) {
    if (interrupted()) return Error{"interrupted", Fault::kInterrupted};
    auto until = std::min(deadline.when(), Clock::now() + Millis(100));
    state->cv.wait_until(lock, until);
    if (!state->done && deadline.expired()) {
      return Error{fmt::format("resolve {}: no answer in time", name), Fault::kTimeout};
    }
  }
  if (state->rc != 0) {
    return Error{fmt::format("resolve {}: {}", name, ::gai_strerror(state->rc)), Fault::kSystem};
  }
  std::vector<std::string> all = std::move(state->v4);
  all.insert(all.end(), state->v6.begin(), state->v6.end());
  if (all.empty()) return Error{fmt::format("resolve {}: no address", name), Fault::kSystem};
  return all;
}

}  // namespace rankcheck
