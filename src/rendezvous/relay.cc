// A host's relay (relay.h): a thread in the first member process of the host,
// holding one connection to the master and one channel on it per member.

#include "rendezvous/relay.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <thread>
#include <unordered_map>

#include <asio.hpp>
#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/text.h"
#include "host/interfaces.h"
#include "host/resolve.h"
#include "rendezvous/asio_io.h"
#include "rendezvous/socket.h"
#include "rules/rules.h"

namespace rankcheck {
namespace {

using asio::awaitable;
using asio::ip::tcp;
using Local = asio::local::stream_protocol;

// One end the relay writes to (a member's, or the master's): frames waiting for
// its socket, written one at a time in order.
template <class Sock>
struct Peer {
  explicit Peer(Sock s) : sock(std::move(s)) {}
  Sock sock;
  Outbox outbox;
  bool close_after = false;
  bool shutdown_after = false;  // once written, no more: half-close

  void send(std::vector<uint8_t> frame) { outbox.push(std::move(frame)); }
};

template <class Sock, class Self>
void pump(const std::shared_ptr<Self>& self) {
  Peer<Sock>& p = *self;
  if (p.outbox.writing()) return;
  if (p.outbox.empty()) {
    std::error_code ignored;
    if (p.close_after) p.sock.close(ignored);
    if (p.shutdown_after) p.sock.shutdown(Sock::shutdown_send, ignored);
    return;
  }
  p.outbox.write_next(p.sock, 1, [self](std::error_code) { pump<Sock>(self); });
}

std::vector<uint8_t> whole(const Frame& f) {
  std::vector<uint8_t> out = encode_frame(static_cast<MsgType>(f.header.type), f.payload);
  return out;
}

}  // namespace

struct Relay::Impl {
  struct Member : Peer<Local::socket> {
    using Peer::Peer;
    uint32_t channel = 0;
    bool opened = false;      // the master knows of it
    bool hello_seen = false;  // what follows the hello is forwarded as it comes
    bool has_nonce = false;
    Nonce nonce{};        // its challenge's: its hello's MAC is over it
    bool proved = false;  // with a job token: the member asked, and was given the proof
    bool read_closed = false;
  };
  using MemberPtr = std::shared_ptr<Member>;
  struct Upstream : Peer<tcp::socket> {
    using Peer::Peer;
  };

  explicit Impl(RelayOptions opts)
      : o(std::move(opts)),
        acceptor(io),
        up(std::make_shared<Upstream>(tcp::socket(io))),
        wait_timer(io),
        stop_timer(io) {}

  RelayOptions o;
  asio::io_context io{1};
  Local::acceptor acceptor;
  std::shared_ptr<Upstream> up;
  asio::steady_timer wait_timer;
  asio::steady_timer stop_timer;
  std::thread thread;
  std::promise<void> stopped;

  // Touched on the relay's thread only.
  bool ready = false;  // the master admitted the relay
  bool gone = false;   // the master closed, refused it, or could not be reached
  bool owner_done = false;
  bool half_closed = false;  // told the master it is done: it waits for the master's close
  std::string status = "connecting to the master";
  uint32_t attempts = 0;
  std::unordered_map<uint32_t, MemberPtr> members;
  uint32_t next_channel = 1;
  size_t refused = 0;

  void upsend(std::vector<uint8_t> frame) {
    if (gone || half_closed) return;
    up->send(std::move(frame));
    pump<tcp::socket>(up);
  }

  void open(const MemberPtr& m) {
    m->opened = true;
    upsend(encode_channel(m->channel, ChannelOp::kOpen));
  }

  void drop(const MemberPtr& m) {
    members.erase(m->channel);
    m->close_after = true;
    pump<Local::socket>(m);
    maybe_stop();
  }

  // The master is out of reach for good: every member goes to it directly.
  void stand_down(const std::string& why) {
    if (gone) return;
    o.log(fmt::format("host relay: {}; this host's members join the master directly", why));
    let_go();
  }

  // No more relaying: the members' connections close (those still waiting for
  // the master go to it directly), and new ones are closed as they come, until
  // this process is done: the endpoint stays taken, so that no other member
  // becomes a relay that fails the same way.
  void let_go() {
    gone = true;
    std::error_code ignored;
    up->sock.shutdown(tcp::socket::shutdown_both, ignored);
    up->sock.close(ignored);
    wait_timer.cancel();
    auto all = std::move(members);
    members.clear();
    for (auto& [id, m] : all) {
      m->outbox.clear();
      m->sock.close(ignored);
    }
    maybe_stop();
  }

  // The members hear that it was the master that closed, not their relay: their
  // own connections to it would have closed too, and joining again is no use.
  void master_closed() {
    if (gone) return;
    gone = true;
    std::error_code ignored;
    up->sock.close(ignored);
    wait_timer.cancel();
    auto all = std::move(members);
    members.clear();
    for (auto& [id, m] : all) {
      m->send(encode(RelayWait{"", attempts, true}));
      m->close_after = true;
      pump<Local::socket>(m);
    }
    maybe_stop();
  }

  void stop() {
    std::error_code ignored;
    acceptor.close(ignored);
    stop_timer.cancel();
    let_go();
  }

  void maybe_stop() {
    if (owner_done && (gone || members.empty()) && acceptor.is_open()) return stop();
    maybe_half_close();
  }

  // This process is done, and every member has closed its end: the relay closes
  // its own end first, as each member does, so that the TCP TIME_WAIT lands on
  // this host and not on MASTER_PORT, which the training job binds next. It goes
  // on reading: the master closes once its report is out, and the members that
  // wait for that (a failed job's) are told then.
  void maybe_half_close() {
    if (!owner_done || !ready || gone || half_closed) return;
    for (auto& [id, m] : members) {
      if (!m->read_closed) return;
    }
    half_closed = true;
    up->shutdown_after = true;
    pump<tcp::socket>(up);
  }

  // Members waiting for the master hear why every second, so that a relay that
  // stopped answering (a stopped process) is told from one that is trying.
  void tell_waiting() {
    if (ready || gone) return;
    say_status();
    wait_timer.expires_after(Millis(1000));
    wait_timer.async_wait([this](std::error_code ec) {
      if (!ec) tell_waiting();
    });
  }

  // A member the relay may carry: with a job token, once it was given the proof.
  bool carried(const Member& m) const { return o.token == nullptr || m.proved; }

  // The member's first frame, with a job token: its kRelayAsk. It gets the proof,
  // and then what a member gets on connecting without one. False: not an ask.
  bool prove(const MemberPtr& m, const Frame& f) {
    if (f.header.type != uint16_t(MsgType::kRelayAsk) || f.payload.size() != kNonceSize) {
      return false;
    }
    Nonce n{};
    std::copy(f.payload.begin(), f.payload.end(), n.begin());
    Mac mac = relay_proof(*o.token, n, o.job_id);
    m->send(encode_frame(MsgType::kRelayProof, mac));
    m->proved = true;
    welcome(m);
    return true;
  }

  // A member the relay carries from now on: its channel opens, or it hears why not yet.
  void welcome(const MemberPtr& m) {
    if (ready) {
      open(m);
    } else {
      m->send(encode(RelayWait{status, attempts, false}));
      pump<Local::socket>(m);
    }
  }

  void say_status() {
    for (auto& [id, m] : members) {
      if (!carried(*m)) continue;
      m->send(encode(RelayWait{status, attempts, false}));
      pump<Local::socket>(m);
    }
  }

  awaitable<bool> connect_once(asio::steady_timer& timer) {
    auto addrs = resolve_host(o.master_addr, o.give_up.sooner(Deadline::after(Millis(2000))));
    if (!addrs) {
      // Cut short by the deadline: what the earlier attempts met says more.
      if (addrs.error().fault == Fault::kTimeout && o.give_up.expired() && attempts > 0) {
        co_return false;
      }
      ++attempts;
      status = addrs.error().message;
      if (status.find("resolve") == 0) status += " (not resolvable yet?)";
      co_return false;
    }
    for (const std::string& a : *addrs) {
      std::error_code ec;
      auto addr = asio::ip::make_address(a, ec);
      if (ec) continue;
      up->sock = tcp::socket(io);
      ++attempts;
      // The status reads as a member's own attempt would: its members say it.
      std::string where = endpoint(a, o.master_port);
      std::string via = a == o.master_addr ? "" : fmt::format("via {}: ", a);
      // Each step bounded: the timer closes the socket, failing whatever waits on it.
      bool expired = false;
      timer.expires_at(o.give_up.sooner(Deadline::after(o.handshake)).when());
      timer.async_wait([this, &expired](std::error_code e) {
        if (e) return;
        expired = true;
        std::error_code ignored;
        up->sock.close(ignored);
      });
      auto [cec] = co_await up->sock.async_connect(tcp::endpoint(addr, o.master_port), kAwait);
      if (cec) {
        status = via + fmt::format("connect: {}", expired ? "timed out" : cec.message());
        timer.cancel();
        continue;
      }
      set_cloexec(up->sock.native_handle());
      up->sock.set_option(tcp::no_delay(true), ec);
      ReadError why;
      auto challenge = co_await read_frame(up->sock, &why);
      if (expired) why.error = Error{"recv: timed out", Fault::kTimeout};
      std::optional<Challenge> c;
      if (!challenge) {
        timer.cancel();
        if (why.error.fault == Fault::kOtherVersion) {
          stand_down(fmt::format("the master at {} speaks another protocol version", where));
          co_return false;
        }
        status = !is_io_fault(why.error.fault)
                     ? fmt::format("{} answered, but is not a rankcheck master ({})", where,
                                   why.error.message)
                     : fmt::format("{} accepted the connection but sent no challenge ({})", where,
                                   why.error.message);
        continue;
      }
      if (challenge->header.type != uint16_t(MsgType::kChallenge)) {
        timer.cancel();
        status = fmt::format("{} answered with a {} instead of a challenge", where,
                             type_name(challenge->header.type));
        continue;
      }
      if (auto d = decode_challenge(challenge->payload); !d) {
        timer.cancel();
        status = fmt::format("{} sent a challenge this member cannot read ({})", where,
                             d.error().message);
        continue;
      } else {
        c = *d;
      }
      if (c->auth != (o.token != nullptr)) {
        // The members meet the master themselves and say what is wrong; to the
        // master this connection was only looking (not a stray connection).
        auto probe = encode_frame(MsgType::kProbe, {});
        co_await asio::async_write(up->sock, asio::buffer(probe), kAwait);
        timer.cancel();
        stand_down(c->auth ? "the master requires a job token, and the relay has none"
                           : "the master does not use a job token, and the relay has one");
        co_return false;
      }
      RelayHello hello{o.host, o.pid, o.job_id, {}, {}};
      (void)fill_random(hello.client_nonce);
      auto frame = o.token ? encode_signed(hello, *o.token, c->nonce) : encode(hello);
      auto [wec, wn] = co_await asio::async_write(up->sock, asio::buffer(frame), kAwait);
      // (No co_await inside a conditional expression: GCC 12 miscompiles it.)
      std::optional<Frame> reply;
      if (!wec) reply = co_await read_frame(up->sock, &why);
      if (expired) why.error = Error{"recv: timed out", Fault::kTimeout};
      timer.cancel();
      if (reply && reply->header.type == uint16_t(MsgType::kAdmit)) co_return true;
      if (reply && reply->header.type == uint16_t(MsgType::kReject)) {
        auto r = decode_reject(reply->payload);
        stand_down(fmt::format("the master refused the relay: {}",
                               r ? printable(r->reason, 200) : std::string("(unreadable)")));
        co_return false;
      }
      // An older master that does not know relays closes on the relay's hello.
      stand_down(fmt::format("the master at {} did not take the relay ({})", where,
                             wec     ? wec.message()
                             : reply ? fmt::format("a {} frame", type_name(reply->header.type))
                                     : why.error.message));
      co_return false;
    }
    co_return false;
  }

  awaitable<void> upstream() {
    asio::steady_timer timer(io);
    Millis backoff(50);
    if (o.first_delay > Millis(0)) {
      timer.expires_at(o.give_up.sooner(Deadline::after(o.first_delay)).when());
      co_await timer.async_wait(kAwait);
    }
    while (!gone) {
      if (attempts > 0 && o.give_up.expired()) {
        stand_down(fmt::format("no master by the deadline ({})", status));
        co_return;
      }
      if (co_await connect_once(timer)) break;
      if (gone) co_return;
      say_status();  // as it changes: a member near its deadline says the latest
      timer.expires_at(o.give_up.sooner(Deadline::after(backoff)).when());
      co_await timer.async_wait(kAwait);
      backoff = std::min(backoff * 2, Millis(1000));
    }
    ready = true;
    wait_timer.cancel();
    for (auto& [id, m] : members) {
      if (carried(*m)) open(m);
    }
    while (true) {
      auto f = co_await read_frame(up->sock);
      if (!f || f->header.type != uint16_t(MsgType::kChannel)) break;
      auto ch = decode_channel(f->payload);
      if (!ch) break;
      if (ch->op == ChannelOp::kAll) {
        // (The NCCL roots: one frame the master sends a relay once, for all.)
        auto frame = std::make_shared<const std::vector<uint8_t>>(std::move(ch->frame));
        for (auto& [id, m] : members) {
          m->outbox.push(frame);
          pump<Local::socket>(m);
        }
        continue;
      }
      auto it = members.find(ch->channel);
      if (it == members.end()) continue;
      MemberPtr m = it->second;
      if (ch->op == ChannelOp::kClose) {
        drop(m);
        continue;
      }
      if (ch->op != ChannelOp::kData) continue;
      if (!m->has_nonce && ch->frame.size() >= kHeaderSize) {
        // The master's challenge: what the member's hello must be signed over.
        auto h = decode_header(std::span(ch->frame).first(kHeaderSize));
        if (h && h->type == uint16_t(MsgType::kChallenge)) {
          if (auto c = decode_challenge(std::span(ch->frame).subspan(kHeaderSize))) {
            m->nonce = c->nonce;
            m->has_nonce = true;
          }
        }
      }
      m->send(std::move(ch->frame));
      pump<Local::socket>(m);
    }
    // The master closed (it printed its report and exited, or died): so do we.
    master_closed();
  }

  // The relay refuses what the master would: a hello without the job's token
  // over its challenge, or of another job. The master is told, for its report.
  std::optional<Reject> check_hello(const Member& m, std::span<const uint8_t> payload) const {
    auto hello = decode_hello(payload);
    if (!hello) return Reject{RejectCode::kMalformed, hello.error().message};
    if (o.token && (!m.has_nonce || !verify_hello(payload, *o.token, m.nonce))) {
      return Reject{RejectCode::kAuth,
                    "its hello does not carry this job's token (a wrong or missing "
                    "--token-file, or a replayed hello)"};
    }
    if (!o.job_id.empty() && !hello->record.job_id.empty() && hello->record.job_id != o.job_id) {
      return Reject{RejectCode::kForeignJob,
                    fmt::format("this master serves job '{}', not job '{}'", printable(o.job_id),
                                printable(hello->record.job_id))};
    }
    return std::nullopt;
  }

  awaitable<void> serve(MemberPtr m) {
    while (!gone) {
      auto f = co_await read_frame(m->sock);
      if (!f) break;
      if (!carried(*m)) {
        if (!prove(m, *f)) break;  // not a member of this version: closed
        continue;
      }
      if (!m->hello_seen) {
        if (f->header.type != uint16_t(MsgType::kHello) || !ready) break;
        m->hello_seen = true;
        if (auto reject = check_hello(*m, f->payload)) {
          if (++refused <= 4) {
            auto hello = decode_hello(f->payload);
            o.log(fmt::format("host relay: refused {}: {}",
                              hello ? member_label(hello->record) : std::string("a local process"),
                              printable(reject->reason, 200)));
          }
          auto frame = encode(*reject);
          upsend(encode_channel(m->channel, ChannelOp::kRefused, frame, f->payload));
          m->send(std::move(frame));
          members.erase(m->channel);
          m->close_after = true;
          pump<Local::socket>(m);
          maybe_stop();
          co_return;
        }
      }
      upsend(encode_channel(m->channel, ChannelOp::kData, whole(*f)));
    }
    // The member closed its end (or sent what it should not). The master hears of
    // it; the member's socket stays open until the master is done with it, as its
    // own connection to the master would (a failed member waits for that).
    m->read_closed = true;
    if (gone) co_return;
    if (m->opened && ready) {
      upsend(encode_channel(m->channel, ChannelOp::kClose));
      maybe_half_close();
    } else {
      drop(m);
    }
  }

  awaitable<void> accept_loop() {
    while (acceptor.is_open()) {
      auto [ec, sock] = co_await acceptor.async_accept(kAwait);
      if (ec) {
        if (!acceptor.is_open() || ec == asio::error::operation_aborted) co_return;
        asio::steady_timer t(io);
        t.expires_after(Millis(100));
        co_await t.async_wait(kAwait);
        continue;
      }
      set_cloexec(sock.native_handle());
      if (gone || half_closed) continue;  // closed at once: the member goes directly
      ucred cred{};
      socklen_t len = sizeof cred;
      if (::getsockopt(sock.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
          cred.uid != ::geteuid()) {
        continue;  // another user's process: closed (it goes to the master directly)
      }
      if (members.size() >= o.max_members) continue;
      auto m = std::make_shared<Member>(std::move(sock));
      m->channel = next_channel++;
      members.emplace(m->channel, m);
      if (carried(*m)) welcome(m);  // with a token: once it asked for the proof
      asio::co_spawn(io, serve(m), asio::detached);
    }
  }
};

Relay::Relay(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Relay::~Relay() {
  finish(Deadline::after(Millis(0)));
}

std::unique_ptr<Relay> Relay::start(RelayOptions options, std::string* why) {
  // The election first, on a plain socket: the host's other members lose it and
  // never make the event loop, its descriptors or its thread.
  Local::endpoint ep(std::string(1, '\0') + options.endpoint);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int err = 0;
  if (fd < 0 || ::bind(fd, ep.data(), static_cast<socklen_t>(ep.size())) != 0 ||
      ::listen(fd, SOMAXCONN) != 0) {
    err = errno;
    if (fd >= 0) ::close(fd);
    if (why != nullptr) {
      *why = err == EADDRINUSE ? std::string()
                               : fmt::format("cannot bind the host relay's socket @{}: {}",
                                             options.endpoint, std::strerror(err));
    }
    return nullptr;
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  Impl& s = *impl;
  std::error_code ec;
  s.acceptor.assign(ep.protocol(), fd, ec);
  if (ec) {
    ::close(fd);
    if (why != nullptr)
      *why =
          fmt::format("cannot serve the host relay's socket @{}: {}", s.o.endpoint, ec.message());
    return nullptr;
  }
  asio::co_spawn(s.io, s.accept_loop(), asio::detached);
  asio::co_spawn(s.io, s.upstream(), asio::detached);
  s.tell_waiting();
  // Whatever happens, gone by stop_by.
  s.stop_timer.expires_at(s.o.stop_by.when());
  s.stop_timer.async_wait([&s](std::error_code e) {
    if (!e) s.stop();
  });
  s.thread = std::thread([&s] {
    s.io.run();
    s.stopped.set_value();
  });
  return std::unique_ptr<Relay>(new Relay(std::move(impl)));
}

void Relay::finish(Deadline deadline) {
  Impl& s = *impl_;
  if (!s.thread.joinable()) return;
  asio::post(s.io, [&s] {
    s.owner_done = true;
    s.maybe_stop();
  });
  auto done = s.stopped.get_future();
  if (done.wait_until(deadline.sooner(s.o.stop_by).when()) != std::future_status::ready) {
    s.io.stop();
  }
  s.thread.join();
}

}  // namespace rankcheck
