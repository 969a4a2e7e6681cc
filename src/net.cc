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

#include <rankcheck/interrupt.h>
#include <rankcheck/net.h>

namespace rankcheck {

std::string local_host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "unknown";
  return buf;
}

std::vector<std::string> interfaces_with_address(const std::vector<IfAddr>& addresses) {
  std::set<std::string> names;
  for (const IfAddr& a : addresses)
    names.insert(a.name);
  return {names.begin(), names.end()};
}

namespace {

int prefix_length(const sockaddr* mask) {
  if (mask == nullptr) return 0;
  const uint8_t* b = nullptr;
  size_t n = 0;
  if (mask->sa_family == AF_INET) {
    b = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(mask)->sin_addr);
    n = 4;
  } else if (mask->sa_family == AF_INET6) {
    b = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr);
    n = 16;
  }
  int bits = 0;
  for (size_t i = 0; i < n; ++i)
    bits += __builtin_popcount(b[i]);
  return bits;
}

}  // namespace

std::vector<IfAddr> host_interfaces() {
  std::vector<IfAddr> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* p = list; p != nullptr; p = p->ifa_next) {
    if (p->ifa_addr == nullptr || p->ifa_name == nullptr) continue;
    int family = p->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    IfAddr a;
    a.name = p->ifa_name;
    a.family = family == AF_INET ? 4 : 6;
    char buf[INET6_ADDRSTRLEN] = {};
    if (family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(p->ifa_addr)->sin_addr, buf,
                  sizeof buf);
    } else {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(p->ifa_addr);
      ::inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof buf);
      a.scope_id = sin6->sin6_scope_id;
    }
    a.address = buf;
    a.prefix_len = prefix_length(p->ifa_netmask);
    a.running = (p->ifa_flags & IFF_RUNNING) != 0;
    a.loopback = (p->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(std::move(a));
  }
  ::freeifaddrs(list);
  return out;
}

HostView read_host_view() {
  return {host_interfaces(), network_namespace_id()};
}

std::string network_namespace_id() {
  struct stat st = {};
  if (::stat("/proc/self/ns/net", &st) != 0) return "";
  std::string boot;
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "re")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, f) != nullptr) boot = buf;
    std::fclose(f);
  }
  while (!boot.empty() && (boot.back() == '\n' || boot.back() == ' '))
    boot.pop_back();
  return fmt::format("{}/{}", boot, static_cast<unsigned long long>(st.st_ino));
}

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

// Waits until `fd` is ready for `events`, the deadline passes, or a signal arrives.
Status wait_fd(int fd, short events, Deadline deadline, std::string_view what) {
  while (true) {
    if (interrupted()) {
      return Error{fmt::format("{}: interrupted by {}", what, signal_name(interrupted())),
                   Fault::kInterrupted};
    }
    pollfd fds[2] = {{fd, events, 0}, {interrupt_fd(), POLLIN, 0}};
    int n = ::poll(fds, interrupt_fd() >= 0 ? 2 : 1, deadline.poll_ms(Millis(1000)));
    if (n < 0 && errno != EINTR) {
      return Error{fmt::format("{}: poll: {}", what, std::strerror(errno)), Fault::kSystem};
    }
    if (n > 0 && fds[0].revents != 0) return ok_status();
    if (deadline.expired()) {
      return Error{fmt::format("{}: timed out", what), Fault::kTimeout};
    }
  }
}

}  // namespace

std::string endpoint(const std::string& addr, uint16_t port) {
  return addr.find(':') != std::string::npos ? fmt::format("[{}]:{}", addr, port)
                                             : fmt::format("{}:{}", addr, port);
}

void set_cloexec(int fd) {
  if (::ioctl(fd, FIOCLEX) == 0) return;  // one call where fcntl takes two
  int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

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

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    rx_ = std::move(o.rx_);
    o.fd_ = -1;
  }
  return *this;
}

Socket::~Socket() {
  close();
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<Socket> Socket::connect(const std::string& addr, uint16_t port, Deadline deadline) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, addr.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    len = sizeof *v4;
  } else if (::inet_pton(AF_INET6, addr.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    len = sizeof *v6;
  } else {
    return Error{fmt::format("{} is not a numeric address", addr), Fault::kSystem};
  }
  Socket s(::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid()) {
    return Error{fmt::format("socket: {}", std::strerror(errno)), Fault::kSystem};
  }
  int one = 1;
  ::setsockopt(s.fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(s.fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    if (errno != EINPROGRESS) {
      return Error{fmt::format("connect: {}", std::strerror(errno)), Fault::kSystem};
    }
    auto ready = wait_fd(s.fd_, POLLOUT, deadline, "connect");
    if (!ready) return ready.error();
    int err = 0;
    socklen_t elen = sizeof err;
    ::getsockopt(s.fd_, SOL_SOCKET, SO_ERROR, &err, &elen);
    if (err != 0) {
      return Error{fmt::format("connect: {}", std::strerror(err)), Fault::kSystem};
    }
  }
  return s;
}

Result<Socket> Socket::connect_abstract(const std::string& name) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof sa.sun_path) {
    return Error{fmt::format("unix socket name too long: {}", name.size()), Fault::kSystem};
  }
  std::memcpy(sa.sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: abstract
  auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid()) return Error{fmt::format("socket: {}", std::strerror(errno)), Fault::kSystem};
  if (::connect(s.fd_, reinterpret_cast<sockaddr*>(&sa), len) != 0) {
    return Error{fmt::format("connect: {}", std::strerror(errno)), Fault::kSystem};
  }
  return s;
}

long Socket::peer_uid() const {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
  return static_cast<long>(cred.uid);
}

Status Socket::write_all(std::span<const uint8_t> bytes, Deadline deadline) {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes = bytes.subspan(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      auto ready = wait_fd(fd_, POLLOUT, deadline, "send");
      if (!ready) return ready.error();
      continue;
    }
    return Error{fmt::format("send: {}", std::strerror(errno)),
                 errno == EPIPE || errno == ECONNRESET ? Fault::kClosed : Fault::kSystem};
  }
  return ok_status();
}

Result<Frame> Socket::read_frame(Deadline deadline, uint16_t* peer_version) {
  while (true) {
    auto f = rx_.next(peer_version);
    if (!f) return f.error();
    if (f->has_value()) return std::move(**f);
    uint8_t buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n > 0) {
      rx_.feed(std::span(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n == 0) {
      return Error{rx_.buffered() ? "connection closed mid-frame" : "connection closed",
                   Fault::kClosed};
    }
    if (errno == EAGAIN || errno == EINTR) {
      auto ready = wait_fd(fd_, POLLIN, deadline, "read");
      if (!ready) return ready.error();
      continue;
    }
    return Error{fmt::format("recv: {}", std::strerror(errno)),
                 errno == ECONNRESET ? Fault::kClosed : Fault::kSystem};
  }
}

}  // namespace rankcheck
