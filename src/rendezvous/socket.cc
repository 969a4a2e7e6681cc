#include "rendezvous/socket.h"

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
