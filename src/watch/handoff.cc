#include "watch/handoff.h"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "protocol/wire.h"

namespace rankcheck {
namespace {

// What a handoff may hold: a job's members and its report, at 100k ranks.
constexpr uint32_t kMaxHandoff = 512u << 20;
constexpr size_t kMaxListeners = 16;
constexpr size_t kText = 4096;

std::vector<uint8_t> encode_handoff(const Handoff& h) {
  Writer w;
  w.i32(h.code);
  w.u64(static_cast<uint64_t>(h.rank));
  w.u64(static_cast<uint64_t>(h.nranks));
  w.str(h.host);
  w.str(h.job_id);
  w.u16(h.rendezvous_port);
  w.u16(h.watch_port);
  w.u32(static_cast<uint32_t>(h.addresses.size()));
  for (const std::string& a : h.addresses)
    w.str(a);
  w.u8(h.master);
  w.u32(static_cast<uint32_t>(h.members.size()));
  for (const MemberWatch& m : h.members) {
    w.u64(static_cast<uint64_t>(m.rank));
    w.u64(static_cast<uint64_t>(m.nranks));
    w.str(m.host);
  }
  w.str(h.json_path);
  w.str(h.metrics_path);
  w.str(h.exclude_path);
  w.str(h.check_json);
  w.str(h.check_metrics);
  return w.take();
}

Result<Handoff> decode_handoff(std::span<const uint8_t> p) {
  Reader r(p);
  Handoff h;
  h.code = r.i32();
  h.rank = static_cast<long>(r.u64());
  h.nranks = static_cast<long>(r.u64());
  h.host = r.str(kText, "host");
  h.job_id = r.str(kText, "job id");
  h.rendezvous_port = r.u16();
  h.watch_port = r.u16();
  h.addresses.resize(r.count(64, "address"));
  for (std::string& a : h.addresses)
    a = r.str(128, "address");
  h.master = r.u8() != 0;
  h.members.resize(r.count(1u << 24, "member"));
  for (MemberWatch& m : h.members) {
    m.rank = static_cast<long>(r.u64());
    m.nranks = static_cast<long>(r.u64());
    m.host = r.str(kText, "member host");
  }
  h.json_path = r.str(kText, "json path");
  h.metrics_path = r.str(kText, "metrics path");
  h.exclude_path = r.str(kText, "exclude path");
  h.check_json = r.str(kMaxHandoff, "report");
  h.check_metrics = r.str(kMaxHandoff, "metrics");
  r.expect_end();
  if (!r.ok()) return Error{"the check's handoff: " + r.error()};
  return h;
}

Status wait_for(int fd, short events, Deadline by) {
  pollfd p{fd, events, 0};
  for (;;) {
    int n = ::poll(&p, 1, by.poll_ms(Millis(1000)));
    if (n > 0) return ok_status();
    if (n < 0 && errno != EINTR) return Error{fmt::format("poll: {}", std::strerror(errno))};
    if (by.expired()) return Error{"the check's handoff: timed out", Fault::kTimeout};
  }
}

}  // namespace

Status send_handoff(int sock, const Handoff& h, Deadline by) {
  std::vector<uint8_t> body = encode_handoff(h);
  uint32_t len = static_cast<uint32_t>(body.size());
  std::vector<uint8_t> all(4);
  std::memcpy(all.data(), &len, 4);
  all.insert(all.end(), body.begin(), body.end());
  // The listening sockets ride with the first byte.
  size_t nfd = std::min(h.listeners.size(), kMaxListeners);
  size_t sent = 0;
  while (sent < all.size()) {
    iovec iov{all.data() + sent, all.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxListeners)] = {};
    if (sent == 0 && nfd > 0) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfd);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * nfd);
      std::memcpy(CMSG_DATA(c), h.listeners.data(), sizeof(int) * nfd);
    }
    ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (auto ok = wait_for(sock, POLLOUT, by); !ok) return ok;
      continue;
    }
    return Error{fmt::format("the check's handoff: {}", std::strerror(errno))};
  }
  return ok_status();
}

Result<std::optional<Handoff>> read_handoff(int sock, Deadline by) {
  std::vector<uint8_t> buf;
  std::vector<int> fds;
  size_t want = 4;
  while (buf.size() < want) {
    if (auto ok = wait_for(sock, POLLIN, by); !ok) return ok.error();
    std::vector<uint8_t> chunk(std::min<size_t>(want - buf.size(), 1u << 20));
    iovec iov{chunk.data(), chunk.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxListeners)] = {};
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) return Error{fmt::format("the check's handoff: {}", std::strerror(errno))};
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds.push_back(fd);
      }
    }
    if (n == 0) {
      for (int fd : fds)
        ::close(fd);
      if (buf.empty()) return std::optional<Handoff>();
      return Error{"the check's handoff: cut short"};
    }
    buf.insert(buf.end(), chunk.begin(), chunk.begin() + n);
    if (want == 4 && buf.size() == 4) {
      uint32_t len = 0;
      std::memcpy(&len, buf.data(), 4);
      if (len > kMaxHandoff) return Error{fmt::format("the check's handoff: {} bytes", len)};
      want = 4 + len;
    }
  }
  auto h = decode_handoff(std::span(buf).subspan(4));
  if (!h) {
    for (int fd : fds)
      ::close(fd);
    return h.error();
  }
  h->listeners = std::move(fds);
  return std::optional<Handoff>(std::move(*h));
}

}  // namespace rankcheck
