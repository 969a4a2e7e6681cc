// The rehearsal's sockets: a listener that proves which host it is, and a prober
// that connects as NCCL would (its source address left to the kernel), a bounded
// number at a time, each within its own deadline.

#include "rehearsal/probe.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "model/path.h"

namespace rankcheck {
namespace {

constexpr uint8_t kMagic[4] = {'R', 'K', 'N', 'P'};
// A listener too busy to take a question says so before it closes: the prober
// reports "flooded", not "blocked" (the connection itself went through).
constexpr uint8_t kBusy[4] = {'R', 'K', 'N', 'B'};
constexpr size_t kNonce = 16;
constexpr size_t kTicket = kMacSize;
constexpr size_t kRequest = 4 + kNonce + kTicket;
constexpr size_t kMaxPending = 256;       // questions not yet whole at a listener
constexpr size_t kMaxPerSource = 32;      // of those, from one address
constexpr size_t kAcceptBurst = 64;       // accepted before the pending ones are read again
constexpr size_t kMaxAnswered = 1 << 16;  // tickets remembered, so that none is used twice
constexpr Millis kAnswerWithin{1000};

struct Addr {
  sockaddr_storage ss{};
  socklen_t len = 0;
};

std::optional<Addr> to_addr(const std::string& address, const std::string& ifname, uint16_t port) {
  Addr a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.ss);
  if (::inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    a.len = sizeof(sockaddr_in);
    return a;
  }
  if (::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    if (IN6_IS_ADDR_LINKLOCAL(&v6->sin6_addr) && !ifname.empty()) {
      v6->sin6_scope_id = ::if_nametoindex(ifname.c_str());
    }
    a.len = sizeof(sockaddr_in6);
    return a;
  }
  return std::nullopt;
}

Mac answer_mac(const JobToken* token, std::span<const uint8_t> nonce,
               std::span<const uint8_t> ticket, std::string_view identity) {
  if (token == nullptr) return Mac{};
  auto body = std::span(reinterpret_cast<const uint8_t*>(identity.data()), identity.size());
  return token->mac(kPathLabel, nonce, ticket, body).value_or(Mac{});
}

// The address a connection came from, without its port: what the flood bound counts
// by. Empty for loopback: the kernel gives every connection to a 127/8 address the
// source 127.0.0.1, so hosts simulated on one machine (and a job's processes on one
// host) would all count as one source; they are this host's own, which the bound
// does not guard against, and the bound on all pending questions still holds.
std::string source_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<sockaddr_in*>(&ss)->sin_addr;
    if ((ntohl(a.s_addr) >> 24) == 127) return {};
    return std::string(reinterpret_cast<const char*>(&a), sizeof a);
  }
  if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return {};
    return std::string(reinterpret_cast<const char*>(&a), sizeof a);
  }
  return {};
}

PathOutcome classify(int err) {
  switch (err) {
    case ECONNREFUSED:
      return PathOutcome::kRefused;
    case EHOSTUNREACH:
    case ENETUNREACH:
      return PathOutcome::kUnreachable;
    case ETIMEDOUT:
      return PathOutcome::kTimeout;
    case EPERM:
    case EACCES:
      return PathOutcome::kDenied;
    default:
      return PathOutcome::kOther;
  }
}

}  // namespace

std::string path_identity(std::string_view host, std::string_view netns) {
  return fmt::format("{}\n{}", host.substr(0, 120), netns.substr(0, 120));
}

std::pair<uint16_t, uint16_t> local_port_range() {
  std::pair<uint16_t, uint16_t> r{0, 0};
  if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "re")) {
    unsigned lo = 0, hi = 0;
    if (std::fscanf(f, "%u %u", &lo, &hi) == 2 && lo <= 65535 && hi <= 65535) {
      r = {static_cast<uint16_t>(lo), static_cast<uint16_t>(hi)};
    }
    std::fclose(f);
  }
  return r;
}

Result<std::unique_ptr<PathListener>> PathListener::open(const std::string& address,
                                                         const std::string& ifname,
                                                         std::string identity,
                                                         const JobToken* token) {
  auto addr = to_addr(address, ifname, 0);
  if (!addr) return Error{fmt::format("rehearsal listener: '{}' is not an address", address)};
  std::unique_ptr<PathListener> l(new PathListener());
  l->fd_ = ::socket(addr->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (l->fd_ < 0) return Error{fmt::format("rehearsal listener: socket: {}", std::strerror(errno))};
  // Port 0: the kernel picks from ip_local_port_range, as for NCCL's listeners.
  if (::bind(l->fd_, reinterpret_cast<sockaddr*>(&addr->ss), addr->len) != 0 ||
      ::listen(l->fd_, 1024) != 0) {
    return Error{fmt::format("rehearsal listener on {}: {}", address, std::strerror(errno))};
  }
  Addr bound;
  bound.len = sizeof bound.ss;
  ::getsockname(l->fd_, reinterpret_cast<sockaddr*>(&bound.ss), &bound.len);
  l->port_ =
      ntohs(bound.ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound.ss)->sin_port
                                          : reinterpret_cast<sockaddr_in6*>(&bound.ss)->sin6_port);
  if (::pipe2(l->wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Error{fmt::format("rehearsal listener: pipe: {}", std::strerror(errno))};
  }
  l->identity_ = std::move(identity);
  if (token != nullptr) l->token_ = *token;
  l->thread_ = std::thread([p = l.get()] { p->serve(); });
  return l;
}

PathListener::~PathListener() {
  if (thread_.joinable()) {
    char c = 1;
    (void)!::write(wake_[1], &c, 1);
    thread_.join();
  }
  for (int fd : {fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

// What the listener does with a question once it is whole: with a job token, it
// answers only a ticket the master made for this listener's identity, once; the
// answer (its identity and a MAC over the ticket) goes to nobody else. Without a
// token, every question is answered (nothing tells a stranger from a prober).
void PathListener::answer(int fd, std::span<const uint8_t> rx) {
  if (!std::equal(kMagic, kMagic + 4, rx.begin())) return;
  auto nonce = rx.subspan(4, kNonce);
  auto ticket = rx.subspan(4 + kNonce, kTicket);
  const JobToken* token = token_ ? &*token_ : nullptr;
  if (token != nullptr) {
    auto id = std::span(reinterpret_cast<const uint8_t*>(identity_.data()), identity_.size());
    Mac t{};
    std::copy(ticket.begin(), ticket.end(), t.begin());
    if (!token->verify(t, kPathTicketLabel, nonce, {}, id)) return;  // not the master's question
    std::string key(nonce.begin(), nonce.end());
    if (answered_.size() >= kMaxAnswered || !answered_.insert(key).second) return;  // used once
  }
  Mac mac = answer_mac(token, nonce, ticket, identity_);
  std::vector<uint8_t> out(kMagic, kMagic + 4);
  out.push_back(static_cast<uint8_t>(identity_.size()));
  out.insert(out.end(), identity_.begin(), identity_.end());
  out.insert(out.end(), mac.begin(), mac.end());
  (void)!::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
}

// Reads what `p` sent; true once it is done with (answered, closed, or past its time).
bool PathListener::read_question(Pending& p, Clock::time_point now) {
  uint8_t buf[kRequest];
  ssize_t got = ::recv(p.fd, buf, kRequest - p.rx.size(), 0);
  if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    return true;
  }
  if (got > 0) p.rx.insert(p.rx.end(), buf, buf + got);
  if (p.rx.size() == kRequest) {
    answer(p.fd, p.rx);
    return true;
  }
  return now >= p.until;
}

// Takes the connections waiting in the backlog, each read at once (a prober's
// question is usually there already). One that is not whole yet waits, within
// bounds: at most kMaxPerSource from one address and kMaxPending in all. Past
// them the newest is told it is busy and closed, never an older one: a flood of
// unproven connections cannot push out a question already waiting.
void PathListener::accept_some(std::vector<Pending>& pending) {
  for (size_t k = 0; k < kAcceptBurst; ++k) {
    int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) return;
    Pending p{c, Clock::now() + kAnswerWithin, {}, source_of(c)};
    if (read_question(p, Clock::now() - kAnswerWithin)) {
      ::close(c);
      continue;
    }
    size_t same = 0;
    for (const Pending& q : pending)
      same += !p.source.empty() && q.source == p.source;
    if (same >= kMaxPerSource || pending.size() >= kMaxPending) {
      ++flooded_;
      (void)!::send(c, kBusy, sizeof kBusy, MSG_NOSIGNAL);
      ::close(c);
      continue;
    }
    pending.push_back(std::move(p));
  }
}

// Each connection gets one answer; a peer that sends nothing in time is dropped.
void PathListener::serve() {
  std::vector<Pending> pending;
  while (true) {
    std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {fd_, POLLIN, 0}};
    for (const Pending& p : pending)
      fds.push_back({p.fd, POLLIN, 0});
    int wait = pending.empty() ? -1 : 100;
    int n = ::poll(fds.data(), fds.size(), wait);
    if (n < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) break;
    // The questions already waiting first, then the newcomers.
    auto now = Clock::now();
    for (size_t i = 0; i < pending.size();) {
      if (read_question(pending[i], now)) {
        ::close(pending[i].fd);
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    if (fds[1].revents != 0) accept_some(pending);
  }
  for (const Pending& p : pending)
    ::close(p.fd);
}

namespace {

// One connection in flight: its target, its own deadline, the nonce it asks with
// and what has come back so far.
struct Probe {
  size_t target = 0;
  int fd = -1;  // -1 once finished
  Clock::time_point start, until;
  bool connected = false;
  std::vector<uint8_t> rx;
};

// One run of probe_paths: the targets, at most `in_flight` probes at a time, and
// what each found.
class Prober {
 public:
  Prober(uint32_t self_host, const std::string& self_identity,
         const std::vector<PathTarget>& targets, Millis per_conn, size_t in_flight, Deadline by,
         const JobToken* token);
  /// Probes until every target has its result or `by` passes; those still in
  /// flight then timed out.
  std::vector<PathResult> run();

 private:
  void start_probes();
  bool serve_probes();
  void ask(Probe& a);
  void read_answer(Probe& a);
  void judge(Probe& a, size_t id_len);
  void finish(Probe& a, PathOutcome o, std::string detail);

  uint32_t self_host_;
  const std::string& self_identity_;
  const std::vector<PathTarget>& targets_;
  Millis per_conn_;
  size_t in_flight_;
  Deadline by_;
  const JobToken* token_;
  std::vector<PathResult> results_;
  std::vector<Probe> active_;
  size_t next_ = 0;  // the first target not yet started
};

Prober::Prober(uint32_t self_host, const std::string& self_identity,
               const std::vector<PathTarget>& targets, Millis per_conn, size_t in_flight,
               Deadline by, const JobToken* token)
    : self_host_(self_host),
      self_identity_(self_identity),
      targets_(targets),
      per_conn_(per_conn),
      in_flight_(std::max<size_t>(in_flight, 1)),
      by_(by),
      token_(token),
      results_(targets.size()) {
  for (size_t i = 0; i < targets.size(); ++i)
    results_[i].edge = {self_host, targets[i].host};
}

std::vector<PathResult> Prober::run() {
  while (next_ < targets_.size() || !active_.empty()) {
    start_probes();
    if (active_.empty()) {
      if (by_.expired()) break;
      continue;
    }
    if (!serve_probes()) break;
    std::erase_if(active_, [](const Probe& a) { return a.fd < 0; });
  }
  for (Probe& a : active_) {
    if (a.fd >= 0) finish(a, PathOutcome::kTimeout, "");
  }
  return std::move(results_);
}

// Connects to the next targets, up to in_flight at once, each within its own
// deadline and the run's. A target that cannot be tried is answered at once.
void Prober::start_probes() {
  while (active_.size() < in_flight_ && next_ < targets_.size() && !by_.expired()) {
    const PathTarget& t = targets_[next_];
    Probe a;
    a.target = next_++;
    a.fd = -1;
    a.start = Clock::now();
    a.until = std::min(a.start + per_conn_, by_.when());
    auto addr = to_addr(t.address, t.ifname, t.port);
    if (!addr) {
      results_[a.target] = {{self_host_, t.host}, PathOutcome::kOther, 0, "not an address"};
      continue;
    }
    a.fd = ::socket(addr->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (a.fd < 0) {
      results_[a.target] = {{self_host_, t.host}, PathOutcome::kOther, 0, std::strerror(errno)};
      continue;
    }
    if (::connect(a.fd, reinterpret_cast<sockaddr*>(&addr->ss), addr->len) != 0 &&
        errno != EINPROGRESS) {
      int err = errno;
      finish(a, classify(err), std::strerror(err));
      continue;
    }
    active_.push_back(std::move(a));
  }
}

// Waits until a probe can move on (at most a second, or the soonest deadline) and
// moves each on: a connection asks, an answer is judged, a probe past its
// deadline timed out. False when poll itself failed.
bool Prober::serve_probes() {
  std::vector<pollfd> fds;
  auto soonest = active_.front().until;
  for (const Probe& a : active_) {
    fds.push_back({a.fd, static_cast<short>(a.connected ? POLLIN : POLLOUT), 0});
    soonest = std::min(soonest, a.until);
  }
  auto ms = std::chrono::duration_cast<Millis>(soonest - Clock::now()).count();
  int n = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long>(ms, 0, 1000)));
  if (n < 0 && errno != EINTR) return false;
  auto now = Clock::now();
  for (size_t i = 0; i < active_.size(); ++i) {
    Probe& a = active_[i];
    if (fds[i].revents != 0 && !a.connected) {
      ask(a);
    } else if (fds[i].revents != 0) {
      read_answer(a);
    }
    if (a.fd >= 0 && now >= a.until) finish(a, PathOutcome::kTimeout, "");
  }
  return true;
}

// The connection is made (or failed): send the question, "RKNP" and the nonce.
void Prober::ask(Probe& a) {
  int err = 0;
  socklen_t len = sizeof err;
  ::getsockopt(a.fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    finish(a, classify(err), std::strerror(err));
    return;
  }
  a.connected = true;
  const PathTarget& t = targets_[a.target];
  std::vector<uint8_t> req(kMagic, kMagic + 4);
  req.insert(req.end(), t.nonce.begin(), t.nonce.end());
  req.insert(req.end(), t.ticket.begin(), t.ticket.end());
  if (::send(a.fd, req.data(), req.size(), MSG_NOSIGNAL) != ssize_t(req.size())) {
    finish(a, PathOutcome::kOther, "the connection closed before the question");
  }
}

// Reads what the listener sent; once its answer is whole ("RKNP" u8 n, id(n),
// mac), judges it.
void Prober::read_answer(Probe& a) {
  uint8_t buf[512];
  ssize_t got = ::recv(a.fd, buf, sizeof buf, 0);
  if (got <= 0 && !(got < 0 && (errno == EAGAIN || errno == EINTR))) {
    finish(a, got == 0 ? PathOutcome::kOther : classify(errno),
           got == 0 ? "closed without an answer" : std::strerror(errno));
    return;
  }
  if (got > 0) a.rx.insert(a.rx.end(), buf, buf + got);
  if (a.rx.size() >= 4 && std::equal(kBusy, kBusy + 4, a.rx.begin())) {
    finish(a, PathOutcome::kFlooded, "the listener was busy with unproven connections");
    return;
  }
  if (a.rx.size() < 5) return;
  size_t id_len = a.rx[4];
  if (a.rx.size() < 5 + id_len + kMacSize) return;
  judge(a, id_len);
}

// An answer without this job's token proves nothing; with it, it names who
// answered: this host itself, another host than the target, or the target.
void Prober::judge(Probe& a, size_t id_len) {
  std::string id(a.rx.begin() + 5, a.rx.begin() + 5 + static_cast<long>(id_len));
  Mac mac{};
  std::copy(a.rx.begin() + 5 + static_cast<long>(id_len),
            a.rx.begin() + 5 + static_cast<long>(id_len + kMacSize), mac.begin());
  bool magic = std::equal(kMagic, kMagic + 4, a.rx.begin());
  const PathTarget& t = targets_[a.target];
  bool proven =
      magic && (token_ == nullptr ||
                token_->verify(mac, kPathLabel, t.nonce, t.ticket,
                               std::span(reinterpret_cast<const uint8_t*>(id.data()), id.size())));
  if (!proven) {
    finish(a, PathOutcome::kWrongHost, "an answer without this job's token");
  } else if (id == self_identity_) {
    finish(a, PathOutcome::kSelf, "");
  } else if (id != t.identity) {
    finish(a, PathOutcome::kWrongHost, fmt::format("answered by {}", id.substr(0, id.find('\n'))));
  } else {
    finish(a, PathOutcome::kOk, "");
  }
}

// What the probe found, and how long it took; its socket closed.
void Prober::finish(Probe& a, PathOutcome o, std::string detail) {
  PathResult& r = results_[a.target];
  r.outcome = o;
  r.detail = std::move(detail);
  r.connect_us = static_cast<uint32_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - a.start).count());
  ::close(a.fd);
  a.fd = -1;
}

}  // namespace

std::vector<PathResult> probe_paths(uint32_t self_host, const std::string& self_identity,
                                    const std::vector<PathTarget>& targets, Millis per_conn,
                                    size_t in_flight, Deadline by, const JobToken* token) {
  return Prober(self_host, self_identity, targets, per_conn, in_flight, by, token).run();
}

}  // namespace rankcheck
