// The master's door: accepting connections, each one's handshake (challenge,
// hello, admit or refuse), and fairness between the addresses they come from.

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "base/text.h"
#include "rendezvous/server_impl.h"

namespace rankcheck {

void Server::Impl::leave_handshake(const ConnPtr& c, Conn::State to) {
  if (c->state == Conn::State::kHandshake && !c->relayed()) {
    --pending;
    --sources[c->source].pending;
  }
  c->advance(to);
}

uint32_t Server::Impl::source_of(const std::string& addr) {
  auto it = source_ids.find(addr);
  if (it != source_ids.end()) return it->second;
  if (sources.size() >= kMaxSources) return 0;
  auto id = static_cast<uint32_t>(sources.size());
  sources.push_back(Source{addr, 0, 0, {}, {}, 0});
  source_ids.emplace(addr, id);
  return id;
}

namespace {

// The address with the most handshakes under way (end() when none).
template <typename Sources>
auto busiest(Sources& sources) {
  return std::max_element(sources.begin(), sources.end(),
                          [](const auto& a, const auto& b) { return a.pending < b.pending; });
}

}  // namespace

bool Server::Impl::make_room(bool out_of_files) {
  auto largest = busiest(sources);
  // Out of descriptors, any address that holds a few handshakes gives up its oldest.
  size_t above = out_of_files ? kMinEvictable : cfg.max_pending / 4;
  if (largest == sources.end() || largest->pending <= above) return false;
  // Members keep getting in from it: a host of many ranks, a NAT, not a flood.
  // (With a job token, only holders of the token are admitted.)
  if (Clock::now() - largest->last_admit < kEvictAfter) return false;
  // Each entry is looked at once at most: those kept go to the back.
  for (size_t n = largest->queue.size(); n > 0 && !largest->queue.empty(); --n) {
    ConnPtr c = largest->queue.front().lock();
    bool in_handshake = c != nullptr && c->state == Conn::State::kHandshake;
    if (in_handshake && !c->evicted && Clock::now() - c->accepted < kEvictAfter) {
      return false;  // its oldest is still young: wait for the handshakes to finish
    }
    largest->queue.pop_front();
    if (!in_handshake || c->evicted) continue;
    // Its hello is waiting to be read: a member the master is slow to serve,
    // not a silent connection. It keeps its slot (at the back of the queue).
    std::error_code aec;
    if (c->sock.available(aec) > 0 && !aec) {
      largest->queue.push_back(c);
      continue;
    }
    c->evicted = true;
    ++largest->evicted;
    close(c);
    return true;
  }
  return false;
}

void Server::Impl::refuse(const ConnPtr& c, const std::string& peer, RefusalKind kind,
                          std::string reason, std::optional<Record> record,
                          std::optional<RejectCode> reply) {
  if (c->evicted) return;  // counted with its address, reported once at the decision
  if (c->state == Conn::State::kHandshake) leave_handshake(c, Conn::State::kRefused);
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

std::vector<uint8_t> Server::Impl::challenge_for(const Conn& c) const {
  // With a job token the challenge names neither the job nor the version:
  // whoever connects learns only that a master wants a token.
  return encode(cfg.token ? Challenge{c.server_nonce, std::string(),
                                      job_tag(*cfg.token, c.server_nonce, cfg.master.job_id), true}
                          : Challenge{c.server_nonce, std::string(kRankcheckVersion),
                                      cfg.master.job_id, false});
}

awaitable<void> Server::Impl::accept_loop(tcp::acceptor& acceptor) {
  asio::steady_timer backoff(io);
  for (;;) {
    // Past the cap on connections still in their handshake, leave the rest in
    // the kernel's backlog: slow or silent clients cannot crowd out members.
    while (pending >= cfg.max_pending && acceptor.is_open() && !make_room()) {
      backoff.expires_after(Millis(5));
      co_await backoff.async_wait(kAwait);
    }
    tcp::endpoint ep;  // the peer's, from accept itself: no getpeername
    auto [ec, sock] = co_await acceptor.async_accept(io, ep, kAwait);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      // Out of file descriptors (or buffers): keep serving those already here,
      // and say so at the decision: the members left in the backlog are missing
      // for that reason, not for their own.
      if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
          ec == asio::error::no_memory || ec.value() == ENFILE) {
        auto top = busiest(sources);
        state.accept_failed(ec.message(), open_members + pending,
                            top == sources.end() ? std::string() : top->addr,
                            top == sources.end() ? 0 : top->pending);
        // One address's silent handshakes took the descriptors: its oldest make
        // room, as they would at the handshake cap.
        for (size_t k = 0; k < kEvictOnEmfile && make_room(true); ++k) {
        }
      }
      if (++accept_errors <= 3) {
        log(fmt::format("accept on {}: {}; still serving, retrying in 100 ms",
                        acceptor.local_endpoint().port(), ec.message()));
      }
      backoff.expires_after(Millis(100));
      co_await backoff.async_wait(kAwait);
      continue;
    }
    set_cloexec(sock.native_handle());
    // Every frame the master sends is small and awaited: without this the
    // verdict waits on Nagle's algorithm for the member's delayed ACK (40 ms).
    std::error_code nec;
    sock.set_option(tcp::no_delay(true), nec);
    std::string addr = ep.address().to_string();
    std::string peer = fmt::format("{}:{}", addr, ep.port());
    auto c = std::make_shared<Conn>(std::move(sock));
    sockets_peak = std::max(sockets_peak, ++sockets);
    c->source = source_of(addr);
    asio::co_spawn(io, serve(std::move(c), std::move(peer)), asio::detached);
  }
}

awaitable<void> Server::Impl::serve(ConnPtr c, std::string peer) {
  ++pending;  // its handshake slot, until it leaves the handshake (leave_handshake)
  Source& from = sources[c->source];
  ++from.pending;
  c->accepted = Clock::now();
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
    if (ec || c->state >= Conn::State::kAdmitted) return;
    c->handshake_expired = true;
    std::error_code ignored;
    c->sock.close(ignored);
  });
  if (auto nonce = fresh_nonce(c->server_nonce); !nonce) {
    refuse(c, peer, RefusalKind::kMalformed,
           "no nonce for its challenge: " + nonce.error().message);
    co_return;
  }
  send(c, challenge_for(*c));

  // The header first: a frame that is not a hello is refused before its payload.
  ReadError why;
  uint16_t peer_version = 0;
  auto header = co_await read_header(c->sock, &why, &peer_version);
  if (c->handshake_expired || (!header && why.io())) {
    refuse(c, peer, RefusalKind::kMalformed,
           c->handshake_expired ? fmt::format("no hello within the handshake deadline of {}",
                                              format_seconds(double(cfg.handshake_timeout.count())))
           : why.got == 0       ? std::string("closed without a hello")
                                : fmt::format("closed after {} bytes, mid-header", why.got));
    co_return;
  }
  if (!header) {
    if (why.error.fault == Fault::kOtherVersion) {
      refuse(c, peer, RefusalKind::kVersion,
             fmt::format("peer speaks rankcheck protocol version {}, this master speaks {}",
                         peer_version, kProtocolVersion),
             std::nullopt, RejectCode::kVersion);
    } else {
      refuse(c, peer, RefusalKind::kMalformed, why.error.message);
    }
    co_return;
  }
  if (header->type == uint16_t(MsgType::kProbe)) {
    // A rank 0 that could not listen, looking for this master: not a stray.
    // It joins as a member next (and is reported as what it is), or stops.
    close(c);
    co_return;
  }
  bool relay = header->type == uint16_t(MsgType::kRelayHello);
  if (header->type != uint16_t(MsgType::kHello) && !relay) {
    refuse(c, peer, RefusalKind::kMalformed,
           fmt::format("sent a {} frame before its hello", type_name(header->type)));
    co_return;
  }
  auto payload = co_await read_payload(c->sock, *header, &why);
  if (!payload || c->handshake_expired) {
    refuse(c, peer, RefusalKind::kMalformed,
           c->handshake_expired
               ? std::string("hello not complete within the handshake deadline")
               : fmt::format("closed mid-hello ({} of {} bytes)", why.got, header->length));
    co_return;
  }
  if (relay) {
    timer.cancel();  // the relay's own handshake is over; its channels have none of their own
    on_relay_hello(c, peer, *payload);
    co_return;
  }
  // Nothing from here on waits: the handshake is still in time.
  on_hello(c, std::move(peer), *payload);
  if (c->state >= Conn::State::kAdmitted) timer.cancel();
}

void Server::Impl::on_hello(const ConnPtr& c, SharedString peer, std::span<const uint8_t> payload) {
  auto hello = decode_hello(payload);
  if (!hello) {
    refuse(c, peer, RefusalKind::kMalformed, hello.error().message, std::nullopt,
           RejectCode::kMalformed);
    return;
  }
  // With a job token the hello must prove it, over this connection's fresh nonce:
  // a process without the token, or a hello replayed from another run, is refused.
  if (cfg.token && !verify_hello(payload, *cfg.token, c->server_nonce)) {
    refuse(c, peer, RefusalKind::kAuth,
           "its hello does not carry this job's token (a wrong or missing --token-file, or "
           "a replayed hello)",
           std::move(hello->record), RejectCode::kAuth);
    return;
  }
  c->client_nonce = hello->client_nonce;
  Record& rec = hello->record;
  const std::string& job = cfg.master.job_id;
  if (!job.empty() && !rec.job_id.empty() && rec.job_id != job) {
    std::string why = fmt::format("this master serves job '{}', not job '{}'", printable(job),
                                  printable(rec.job_id));
    refuse(c, peer, RefusalKind::kForeignJob, why, std::move(rec), RejectCode::kForeignJob);
    return;
  }
  if (state.decided()) {
    const Report& r = state.report();
    refuse(c, peer, RefusalKind::kLate,
           fmt::format("the master decided at +{} without this member: {}",
                       format_seconds(r.rendezvous_ms),
                       r.exit_code() == 0 ? std::string(kJobWasComplete) : headline(r.findings)),
           std::nullopt, RejectCode::kLate);
    return;
  }
  assert(!c->handshake_expired);
  leave_handshake(c, Conn::State::kAdmitted);
  sources[c->source].last_admit = Clock::now();
  ++open_members;
  if (c->relayed()) {
    relayed[relayed_key(rec)] = c;
  } else if (!relayed.empty()) {
    forget_relayed(rec);
  }
  if (hello->nccl_root) state.set_root(rec, *hello->nccl_root);
  c->slot = static_cast<int>(state.admit(std::move(rec), std::move(peer)));
  conns.push_back(c);
  send(c, encode(Admit{static_cast<uint32_t>(state.joined_ranks()),
                       static_cast<uint32_t>(cfg.master.world_size)}));
  watch(c);
  maybe_decide();
}

}  // namespace rankcheck
