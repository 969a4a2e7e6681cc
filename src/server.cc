#include <algorithm>
#include <cassert>
#include <deque>
#include <map>
#include <thread>
#include <unordered_map>

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <fcntl.h>
#include <fmt/format.h>

#include <rankcheck/server.h>
#include <rankcheck/text.h>
#include <rankcheck/version.h>

namespace rankcheck {
namespace {

using asio::awaitable;
using asio::ip::tcp;
constexpr auto kAwait = asio::experimental::as_tuple(asio::use_awaitable);
// Refusals logged to stderr one by one before they are only counted.
constexpr size_t kMaxRefusalsLogged = 8;
// How long past the stage deadline the master waits for results before its final
// verdict: the members' results are on their way (each ends its stage sooner).
constexpr Millis kStageGrace{300};
// How long the master waits for a member whose connection closed to come back
// when every other rank is in, before it decides without it.
constexpr Millis kRejoinGrace{1000};

// Sockets of the master are not inherited by the processes `rankcheck local`
// starts: a child holding MASTER_PORT's listener would keep the port taken after
// this process exits. (Asio opens and accepts without SOCK_CLOEXEC.)
void set_cloexec(int fd) {
  int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

}  // namespace

struct Server::Impl {
  // One verdict frame is shared by every member it is the same for.
  using Bytes = std::shared_ptr<const std::vector<uint8_t>>;

  // Bound to the io_context's own executor rather than the type-erased default:
  // 40 bytes instead of 88 per member, and as much again in its pending wait.
  using Socket = tcp::socket::rebind_executor<asio::io_context::executor_type>::other;

  struct Conn {
    // Kept small: one lives as long as its member. The handshake timer and the
    // peer's address live in the handshake coroutine, which ends at admission.
    explicit Conn(Socket s) : sock(std::move(s)) {}
    Socket sock;
    int slot = -1;        // the member's index in the master state
    uint32_t source = 0;  // index into sources: the address it came from
    bool admitted = false;
    bool handshake_expired = false;
    std::vector<Bytes> outbox;  // frames not yet written, oldest first
    bool writing = false;
    bool close_after_write = false;
    bool pending = false;   // counted among connections not yet admitted
    bool reported = false;  // its GPU stage result is in (or will never be)
    bool closed = false;
    bool released = false;  // finished with, but kept open (see release)
    bool evicted = false;   // dropped to make room for other sources (see make_room)
    Nonce server_nonce{};   // what the verdict's MAC covers, with a job token
    Nonce client_nonce{};
  };
  using ConnPtr = std::shared_ptr<Conn>;

  explicit Impl(ServerConfig c)
      : cfg(std::move(c)),
        state(cfg.master),
        decide_timer(io),
        progress_timer(io),
        stage_timer(io) {
    conns.reserve(static_cast<size_t>(std::clamp(cfg.master.world_size, 1L, 1L << 16)));
  }

  ServerConfig cfg;
  MasterState state;
  asio::io_context io{1};
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  std::vector<std::string> bound;
  asio::steady_timer decide_timer;
  asio::steady_timer progress_timer;
  asio::steady_timer stage_timer;
  std::thread thread;

  // Everything below is touched only on the server thread (or after it stopped).
  std::vector<ConnPtr> conns;  // conns[i] carries member i; nullptr for the master's own
  size_t pending = 0;
  size_t writes_in_flight = 0;
  size_t open_members = 0;  // admitted connections the member has not closed yet
  size_t refusals = 0;
  size_t accept_errors = 0;
  // Connections in their handshake, by the address they came from: one address
  // holding most of the slots (a flood of silent connections) gives up its
  // oldest to newcomers. Bounded: past kMaxSources addresses, the rest share one.
  struct Source {
    std::string addr;
    size_t pending = 0;
    size_t evicted = 0;
    std::deque<std::weak_ptr<Conn>> queue;  // oldest first; some no longer pending
  };
  static constexpr size_t kMaxSources = 4096;
  std::vector<Source> sources{Source{"other addresses", 0, 0, {}}};
  std::unordered_map<std::string, uint32_t> source_ids;
  std::optional<std::promise<Verdict>> local_verdict;
  std::optional<std::promise<Verdict>> local_final;
  std::promise<void> done;
  bool done_set = false;
  bool rejoin_grace = false;  // the decide timer waits for a lost member, not the deadline

  void log(const std::string& line) const { cfg.master.log(line); }

  // ----- sending -------------------------------------------------------------

  void send(const ConnPtr& c, std::vector<uint8_t> frame) {
    send(c, std::make_shared<const std::vector<uint8_t>>(std::move(frame)));
  }
  void send(const ConnPtr& c, Bytes frame) {
    c->outbox.push_back(std::move(frame));
    pump(c);
  }

  void pump(const ConnPtr& c) {
    if (c->writing) return;
    if (c->outbox.empty()) {
      if (c->close_after_write) close(c);
      check_done();
      return;
    }
    c->writing = true;
    ++writes_in_flight;
    asio::async_write(c->sock, asio::buffer(*c->outbox.front()),
                      [this, c](std::error_code ec, size_t) {
                        --writes_in_flight;
                        c->writing = false;
                        c->outbox.erase(c->outbox.begin());
                        if (ec) c->outbox.clear();
                        if (c->outbox.empty()) std::vector<Bytes>().swap(c->outbox);
                        pump(c);
                      });
  }

  void close(const ConnPtr& c) {
    if (c->closed) return;
    c->closed = true;
    if (c->admitted && !c->released) --open_members;
    std::error_code ignored;
    c->sock.shutdown(tcp::socket::shutdown_both, ignored);
    c->sock.close(ignored);
    check_done();
  }

  // A member that is finished with: counted as closed, its socket left open.
  void release(const ConnPtr& c) {
    if (c->closed || c->released) return;
    c->released = true;
    if (c->admitted) --open_members;
    check_done();
  }

  // Done once every verdict is written and every member has closed its end: the
  // member closes first, so that the TIME_WAIT lands on its ephemeral port and not
  // on MASTER_PORT, which the training job binds next.
  void check_done() {
    if (!state.decided() || state.stage_running() || done_set || writes_in_flight > 0 ||
        open_members > 0) {
      return;
    }
    done_set = true;
    done.set_value();
  }

  // ----- refusing ------------------------------------------------------------

  void unpend(const ConnPtr& c) {
    if (c->pending) {
      --pending;
      --sources[c->source].pending;
    }
    c->pending = false;
  }

  uint32_t source_of(const std::string& addr) {
    auto it = source_ids.find(addr);
    if (it != source_ids.end()) return it->second;
    if (sources.size() >= kMaxSources) return 0;
    auto id = static_cast<uint32_t>(sources.size());
    sources.push_back(Source{addr, 0, 0, {}});
    source_ids.emplace(addr, id);
    return id;
  }

  // At the cap on handshakes: the address holding the most, if it holds more than
  // a quarter of them, loses its oldest one. A flood from one address then cannot
  // keep the job's members waiting in the kernel's backlog until the deadline.
  bool make_room() {
    auto largest =
        std::max_element(sources.begin(), sources.end(),
                         [](const auto& a, const auto& b) { return a.pending < b.pending; });
    if (largest == sources.end() || largest->pending <= cfg.max_pending / 4) return false;
    while (!largest->queue.empty()) {
      ConnPtr c = largest->queue.front().lock();
      largest->queue.pop_front();
      if (c == nullptr || !c->pending || c->evicted) continue;
      c->evicted = true;
      ++largest->evicted;
      unpend(c);
      close(c);
      return true;
    }
    return false;
  }

  void refuse(const ConnPtr& c, const std::string& peer, RefusalKind kind, std::string reason,
              std::optional<Record> record = std::nullopt,
              std::optional<RejectCode> reply = std::nullopt) {
    unpend(c);
    if (c->evicted) return;  // counted with its address, reported once at the decision
    if (++refusals <= kMaxRefusalsLogged) {
      log(fmt::format("refused {}: {}", printable(peer), printable(reason, 200)));
    } else if (refusals == kMaxRefusalsLogged + 1) {
      log("more connections refused; counting them without logging each");
    }
    state.refuse(kind, peer, reason, std::move(record));
    if (reply) {
      send(c, encode(Reject{*reply, std::move(reason)}));
      c->close_after_write = true;
      pump(c);
    } else {
      close(c);
    }
  }

  // ----- serving -------------------------------------------------------------

  awaitable<void> accept_loop(tcp::acceptor& acceptor) {
    asio::steady_timer backoff(io);
    for (;;) {
      // Past the cap on connections still in their handshake, leave the rest in
      // the kernel's backlog: slow or silent clients cannot crowd out members.
      while (pending >= cfg.max_pending && acceptor.is_open() && !make_room()) {
        backoff.expires_after(Millis(5));
        co_await backoff.async_wait(kAwait);
      }
      auto [ec, sock] = co_await acceptor.async_accept(io, kAwait);
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      if (ec) {
        // Out of file descriptors (or buffers): keep serving those already here.
        if (++accept_errors <= 3) {
          log(fmt::format("accept on {}: {}; still serving, retrying in 100 ms",
                          acceptor.local_endpoint().port(), ec.message()));
        }
        backoff.expires_after(Millis(100));
        co_await backoff.async_wait(kAwait);
        continue;
      }
      set_cloexec(sock.native_handle());
      std::error_code pec;
      auto ep = sock.remote_endpoint(pec);
      std::string addr = pec ? "?" : ep.address().to_string();
      std::string peer = pec ? "?" : fmt::format("{}:{}", addr, ep.port());
      auto c = std::make_shared<Conn>(std::move(sock));
      c->source = source_of(addr);
      asio::co_spawn(io, serve(std::move(c), std::move(peer)), asio::detached);
    }
  }

  awaitable<void> serve(ConnPtr c, std::string peer) {
    ++pending;
    c->pending = true;
    Source& from = sources[c->source];
    ++from.pending;
    from.queue.push_back(c);
    // Entries of connections long gone are dropped as the queue grows.
    while (from.queue.size() > 2 * from.pending + 16 && from.queue.front().expired()) {
      from.queue.pop_front();
    }
    // A connection that has not completed its hello in time is dropped. The timer
    // may fire after a read completed but before this coroutine resumed: every
    // step below checks the flag, so an expired handshake is never admitted.
    asio::steady_timer timer(io);
    timer.expires_after(cfg.handshake_timeout);
    timer.async_wait([c](std::error_code ec) {
      if (ec || c->admitted) return;
      c->handshake_expired = true;
      std::error_code ignored;
      c->sock.close(ignored);
    });
    if (auto nonce = fill_random(c->server_nonce); !nonce) {
      refuse(c, peer, RefusalKind::kMalformed,
             "no nonce for its challenge: " + nonce.error().message);
      co_return;
    }
    send(c, encode(Challenge{c->server_nonce, std::string(kVersion), cfg.master.job_id,
                             cfg.token.has_value()}));

    std::array<uint8_t, kHeaderSize> hdr{};
    auto [ec, n] = co_await asio::async_read(c->sock, asio::buffer(hdr), kAwait);
    if (ec || c->handshake_expired) {
      refuse(c, peer, RefusalKind::kMalformed,
             c->handshake_expired
                 ? fmt::format("no hello within the handshake deadline of {}",
                               format_seconds(double(cfg.handshake_timeout.count())))
             : n == 0 ? std::string("closed without a hello")
                      : fmt::format("closed after {} bytes, mid-header", n));
      co_return;
    }
    uint16_t peer_version = 0;
    auto header = decode_header(hdr, &peer_version);
    if (!header) {
      if (header.error().fault == Fault::kOtherVersion) {
        refuse(c, peer, RefusalKind::kVersion,
               fmt::format("peer speaks rankcheck protocol version {}, this master speaks {}",
                           peer_version, kProtocolVersion),
               std::nullopt, RejectCode::kVersion);
      } else {
        refuse(c, peer, RefusalKind::kMalformed, header.error().message);
      }
      co_return;
    }
    if (header->type == uint16_t(MsgType::kProbe)) {
      // A rank 0 that could not listen, looking for this master: not a stray.
      // It joins as a member next (and is reported as what it is), or stops.
      unpend(c);
      close(c);
      co_return;
    }
    if (header->type != uint16_t(MsgType::kHello)) {
      refuse(c, peer, RefusalKind::kMalformed,
             fmt::format("sent a {} frame before its hello", type_name(header->type)));
      co_return;
    }
    auto payload = std::make_unique<std::vector<uint8_t>>(header->length);  // within its cap
    auto [ec2, n2] = co_await asio::async_read(c->sock, asio::buffer(*payload), kAwait);
    if (ec2 || c->handshake_expired) {
      refuse(c, peer, RefusalKind::kMalformed,
             c->handshake_expired
                 ? std::string("hello not complete within the handshake deadline")
                 : fmt::format("closed mid-hello ({} of {} bytes)", n2, payload->size()));
      co_return;
    }
    auto hello = decode_hello(*payload);
    if (!hello) {
      refuse(c, peer, RefusalKind::kMalformed, hello.error().message, std::nullopt,
             RejectCode::kMalformed);
      co_return;
    }
    // With a job token the hello must prove it, over this connection's fresh nonce:
    // a process without the token, or a hello replayed from another run, is refused.
    if (cfg.token && !verify_hello(*payload, *cfg.token, c->server_nonce)) {
      refuse(c, peer, RefusalKind::kAuth,
             "its hello does not carry this job's token (a wrong or missing --token-file, or "
             "a replayed hello)",
             std::move(hello->record), RejectCode::kAuth);
      co_return;
    }
    payload.reset();
    c->client_nonce = hello->client_nonce;
    unpend(c);
    Record& rec = hello->record;
    const std::string& job = cfg.master.job_id;
    if (!job.empty() && !rec.job_id.empty() && rec.job_id != job) {
      std::string why = fmt::format("this master serves job '{}', not job '{}'", printable(job),
                                    printable(rec.job_id));
      refuse(c, peer, RefusalKind::kForeignJob, why, std::move(rec), RejectCode::kForeignJob);
      co_return;
    }
    if (state.decided()) {
      const Report& r = state.report();
      refuse(c, peer, RefusalKind::kLate,
             fmt::format("the master decided at +{} without this member: {}",
                         format_seconds(r.rendezvous_ms),
                         r.exit_code() == 0 ? std::string(kJobWasComplete) : headline(r.findings)),
             std::nullopt, RejectCode::kLate);
      co_return;
    }
    // Nothing above waited since the last read: the handshake is still in time.
    assert(!c->handshake_expired);
    c->admitted = true;
    ++open_members;
    timer.cancel();
    c->slot = static_cast<int>(state.admit(std::move(rec), std::move(peer)));
    conns.push_back(c);
    send(c, encode(Admit{static_cast<uint32_t>(state.joined_ranks()),
                         static_cast<uint32_t>(cfg.master.world_size)}));
    watch(c);
    maybe_decide();
  }

  // An admitted member sends nothing more until the verdict: a read that ends
  // means it is gone. A plain handler, not a coroutine frame, per member.
  void watch(const ConnPtr& c) {
    c->sock.async_wait(tcp::socket::wait_read, [this, c](std::error_code ec) {
      if (ec == asio::error::operation_aborted) return;
      if (state.stage_running() && !c->reported) {
        asio::co_spawn(io, read_stage_result(c), asio::detached);
        return;
      }
      if (state.decided() && !state.stage_running()) {
        // The member has its final verdict and closed its end. Ours stays open
        // until the report is printed (the Server's end): a member whose job
        // failed waits for that before it exits non-zero, since mpirun and
        // srun --kill-on-bad-exit stop the whole job at the first such exit.
        release(c);
        return;
      }
      depart(c);  // EOF, a reset, or bytes it had no business sending yet
      close(c);
    });
  }

  // A member's GPU stage results; anything else (or nothing) counts as none.
  awaitable<void> read_stage_result(ConnPtr c) {
    c->reported = true;
    std::array<uint8_t, kHeaderSize> hdr{};
    std::optional<StageReport> got;
    std::string why;  // why there is no result, when the member sent something
    auto [ec, n] = co_await asio::async_read(c->sock, asio::buffer(hdr), kAwait);
    auto header = ec ? Result<FrameHeader>(Error{ec.message()}) : decode_header(hdr);
    if (!header) {
      if (!ec) why = header.error().message;
    } else if (header->type != uint16_t(MsgType::kStageResult)) {
      why = fmt::format("a {} frame instead", type_name(header->type));
    } else {
      std::vector<uint8_t> payload(header->length);
      auto [ec2, n2] = co_await asio::async_read(c->sock, asio::buffer(payload), kAwait);
      if (ec2) {
        why = fmt::format("closed mid-frame ({} of {} bytes)", n2, payload.size());
      } else if (auto r = decode_stage_report(payload)) {
        got = std::move(*r);
      } else {
        why = r.error().message;
      }
    }
    if (!why.empty() && c->slot >= 0) {
      log(fmt::format("{}: its GPU stage result is unreadable: {}",
                      member_label(state.members()[size_t(c->slot)].record), printable(why, 200)));
    }
    if (got) {
      watch(c);  // for the member's close after the final verdict
    } else {
      close(c);
    }
    deliver(size_t(c->slot), got ? std::move(got->ranks) : std::vector<RankResult>{});
  }

  void deliver(size_t i, std::vector<RankResult> results) {
    if (state.accept_results(i, std::move(results))) finalize();
  }

  void depart(const ConnPtr& c) {
    if (c->slot < 0) return;
    if (state.stage_running() && !c->reported) {
      c->reported = true;  // gone mid-stage: its ranks report nothing
      log(fmt::format("{} disconnected during the GPU stage",
                      member_label(state.members()[size_t(c->slot)].record)));
      deliver(size_t(c->slot), {});
      return;
    }
    if (state.decided()) return;
    auto i = static_cast<size_t>(c->slot);
    c->slot = -1;
    state.depart(i);
    conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
    for (size_t k = i; k < conns.size(); ++k) {
      if (conns[k] != nullptr) conns[k]->slot = static_cast<int>(k);
    }
    maybe_decide();
  }

  // ----- deciding ------------------------------------------------------------

  void maybe_decide() {
    if (state.ready()) {
      decide(false);
    } else if (!rejoin_grace && state.only_departed_missing()) {
      // Only a member that died after joining is missing: decide after a grace
      // for it to come back, not at the deadline (the timer is the deadline's).
      rejoin_grace = true;
      decide_timer.expires_at(std::min(Clock::now() + kRejoinGrace, cfg.decide_by.when()));
      decide_timer.async_wait([this](std::error_code ec) {
        if (ec) return;
        if (state.only_departed_missing()) return decide(false);
        rejoin_grace = false;
        decide_timer.expires_at(cfg.decide_by.when());
        decide_timer.async_wait([this](std::error_code e) {
          if (!e) decide(true);
        });
      });
    }
  }

  void decide(bool timed_out) {
    if (state.decided()) return;
    decide_timer.cancel();
    progress_timer.cancel();
    uint16_t port = acceptors.empty() ? 0 : acceptors.front()->local_endpoint().port();
    for (const Source& src : sources) {
      if (src.evicted == 0) continue;
      state.refuse(RefusalKind::kFlood, src.addr,
                   fmt::format("{} held handshakes open without a hello: {} of its connections "
                               "were dropped to make room for others",
                               src.addr, src.evicted));
    }
    const Verdict& v = state.decide(timed_out, port, bound);
    if (v.run_gpu) {
      stage_timer.expires_at(cfg.master.stage_by.extended(kStageGrace).when());
      stage_timer.async_wait([this](std::error_code ec) {
        if (!ec) finalize();
      });
    }
    auto t0 = Clock::now();
    broadcast(v, local_verdict);
    state.report().broadcast_ms = ms_between(t0, Clock::now());
    check_done();
  }

  // The GPU stage is over (every result in, or its deadline): the final verdict.
  void finalize() {
    if (!state.stage_running()) return;
    stage_timer.cancel();
    broadcast(state.finalize(), local_final);
    check_done();
  }

  // Sends `base` to every member, each with the findings that name its ranks;
  // the master's own member gets it through `local`.
  void broadcast(const Verdict& base, std::optional<std::promise<Verdict>>& local) {
    const Bytes shared = std::make_shared<const std::vector<uint8_t>>(encode(base));
    for (size_t i = 0; i < conns.size(); ++i) {
      std::vector<Finding> notes = state.notes_for(i);
      const ConnPtr& c = conns[i];
      if (c != nullptr && notes.empty() && !cfg.token) {
        send(c, shared);
        continue;
      }
      Verdict own = base;
      own.notes = std::move(notes);
      if (c != nullptr) {
        send(c, cfg.token ? encode_signed(own, *cfg.token, c->server_nonce, c->client_nonce)
                          : encode(own));
      } else if (local) {
        local->set_value(std::move(own));
        local.reset();
      }
    }
  }

  void schedule_progress() {
    progress_timer.expires_after(cfg.progress_interval);
    progress_timer.async_wait([this](std::error_code ec) {
      if (ec || state.decided()) return;
      auto missing = state.missing_ranks();
      log(fmt::format("joined {}/{}; missing: {} ({} s left)", state.joined_ranks(),
                      cfg.master.world_size,
                      missing.empty() ? std::string("none") : format_ranks(missing, 12),
                      cfg.decide_by.seconds_left()));
      schedule_progress();
    });
  }
};

Server::Server(ServerConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}

Server::~Server() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

// A host name may resolve to addresses this host cannot bind, each for its own
// reason (localhost's ::1 where IPv6 is off): listening on one is enough, and the
// others are logged. A port in use on any of them fails, as it would fail the
// training job.
Result<uint16_t> Server::listen(const std::vector<std::string>& addresses, uint16_t port) {
  std::vector<Error> failed;
  for (const std::string& a : addresses) {
    std::error_code ec;
    auto addr = asio::ip::make_address(a, ec);
    if (ec) {
      failed.push_back(Error{fmt::format("{} is not a numeric address", a), Fault::kListen});
      continue;
    }
    tcp::endpoint ep(addr, port);
    auto acc = std::make_unique<tcp::acceptor>(impl_->io);
    acc->open(ep.protocol(), ec);
    if (!ec) set_cloexec(acc->native_handle());
    if (!ec) acc->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec && addr.is_v6()) acc->set_option(asio::ip::v6_only(true), ec);
    if (!ec) acc->bind(ep, ec);
    if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      Fault fault = ec == asio::error::address_in_use             ? Fault::kInUse
                    : ec.value() == EADDRNOTAVAIL                 ? Fault::kNotLocal
                    : ec.value() == EACCES || ec.value() == EPERM ? Fault::kDenied
                                                                  : Fault::kListen;
      std::string where =
          addr.is_v6() ? fmt::format("[{}]:{}", a, port) : fmt::format("{}:{}", a, port);
      Error e{fmt::format("cannot listen on {}: {}", where, ec.message()), fault};
      if (fault == Fault::kInUse) return e;
      failed.push_back(std::move(e));
      continue;
    }
    port = acc->local_endpoint().port();
    impl_->bound.push_back(a);
    impl_->acceptors.push_back(std::move(acc));
  }
  if (impl_->acceptors.empty()) {
    if (failed.empty()) return Error{"no address to listen on", Fault::kListen};
    // An address this host does not own says the most; else the first failure.
    auto lead = std::find_if(failed.begin(), failed.end(),
                             [](const Error& e) { return e.fault == Fault::kNotLocal; });
    if (lead == failed.end()) lead = failed.begin();
    Error out = *lead;
    for (auto it = failed.begin(); it != failed.end(); ++it) {
      if (it != lead) out.message += "; " + it->message;
    }
    return out;
  }
  for (const Error& e : failed)
    impl_->log(fmt::format("{}; listening on {} only", e.message, format_list(impl_->bound, 4)));
  return port;
}

void Server::start() {
  Impl& s = *impl_;
  for (auto& acc : s.acceptors)
    asio::co_spawn(s.io, s.accept_loop(*acc), asio::detached);
  s.decide_timer.expires_at(s.cfg.decide_by.when());
  s.decide_timer.async_wait([&s](std::error_code ec) {
    if (!ec) s.decide(true);
  });
  s.schedule_progress();
  s.thread = std::thread([&s] { s.io.run(); });
}

std::future<Verdict> Server::join_local(Record self) {
  auto p = std::make_shared<std::promise<Verdict>>();
  auto f = p->get_future();
  asio::post(impl_->io, [this, p, self = std::move(self)]() mutable {
    Impl& s = *impl_;
    if (s.state.decided()) {  // too late to count: the verdict stands as sent
      p->set_value(s.state.verdict());
      return;
    }
    s.local_verdict.emplace(std::move(*p));
    s.state.admit(std::move(self), "in-process", /*own=*/true);
    s.conns.push_back(nullptr);
    s.maybe_decide();
  });
  return f;
}

std::future<Verdict> Server::submit_local(StageReport results) {
  auto p = std::make_shared<std::promise<Verdict>>();
  auto f = p->get_future();
  asio::post(impl_->io, [this, p, results = std::move(results)]() mutable {
    Impl& s = *impl_;
    s.local_final.emplace(std::move(*p));
    for (size_t i = 0; i < s.conns.size(); ++i) {
      if (s.conns[i] == nullptr) s.deliver(i, std::move(results.ranks));
    }
    if (s.local_final) {  // the stage had already ended: the verdict stands as sent
      s.local_final->set_value(s.state.verdict());
      s.local_final.reset();
    }
  });
  return f;
}

void Server::interrupt(int signal) {
  asio::post(impl_->io, [this, signal] {
    impl_->state.interrupt(signal);
    if (!impl_->state.decided()) {
      impl_->decide(true);
    } else {
      impl_->finalize();
    }
  });
}

Report Server::finish(Deadline deadline) {
  Impl& s = *impl_;
  auto done = s.done.get_future();
  done.wait_until(deadline.when());
  s.io.stop();
  if (s.thread.joinable()) s.thread.join();
  // The server thread has stopped: its state is this thread's now.
  if (!s.state.decided()) s.decide(true);
  if (s.state.stage_running()) s.finalize();
  Report report = s.state.report();
  report.total_ms = ms_between(s.cfg.master.start, Clock::now());
  return report;
}

}  // namespace rankcheck
