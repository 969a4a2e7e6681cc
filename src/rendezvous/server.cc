// The master's rendezvous server: sending, deciding, the GPU stage, and the
// public face (listen, start, finish). The door is in server_accept.cc.

#include <algorithm>
#include <cassert>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "base/text.h"
#include "host/procfs.h"
#include "rendezvous/server_impl.h"

namespace rankcheck {

void Server::Impl::send(const ConnPtr& c, std::vector<uint8_t> frame) {
  send(c, std::make_shared<const std::vector<uint8_t>>(std::move(frame)));
}

void Server::Impl::send(const ConnPtr& c, Bytes frame) {
  if (c->relayed()) {
    // On the relay's connection, in a channel frame of the member's.
    ConnPtr link = c->via.lock();
    if (link == nullptr || link->closed()) return;
    return send(link, encode_channel(c->channel, ChannelOp::kData, *frame));
  }
  c->outbox.push(std::move(frame));
  if (c->link != nullptr && !c->outbox.writing()) {
    // A relay's: written once this handler is done, with whatever else it queues
    // for the same host (the burst of challenges, admits, verdicts), in one writev.
    // Counted as a write in flight meanwhile: the run is not done with it queued.
    if (!c->pump_posted) {
      c->pump_posted = true;
      ++writes_in_flight;
      asio::post(io, [this, c] {
        c->pump_posted = false;
        --writes_in_flight;
        pump(c);
      });
    }
    return;
  }
  pump(c);
}

void Server::Impl::pump(const ConnPtr& c) {
  if (c->outbox.writing()) return;
  if (c->outbox.empty()) {
    if (c->close_after_write) close(c);
    check_done();
    return;
  }
  ++writes_in_flight;
  // What is queued goes in one write (writev): a relay's connection carries its
  // members' frames together, and a send each would be a system call each.
  c->outbox.write_next(c->sock, kMaxGather, [this, c](std::error_code) {
    --writes_in_flight;
    pump(c);
  });
}

void Server::Impl::close(const ConnPtr& conn) {
  // A copy: `conn` may be the pointer in a relay's channel map, which the erase below frees.
  const ConnPtr c = conn;
  if (c->closed()) return;
  if (c->open_member()) --open_members;
  leave_handshake(c, Conn::State::kClosed);
  if (c->relayed()) {
    ConnPtr link = c->via.lock();
    if (link != nullptr && !link->closed() && link->link->channels.erase(c->channel) > 0) {
      send(link, encode_channel(c->channel, ChannelOp::kClose));
    }
    return check_done();
  }
  --sockets;
  std::error_code ignored;
  c->sock.shutdown(tcp::socket::shutdown_both, ignored);
  c->sock.close(ignored);
  check_done();
}

void Server::Impl::release(const ConnPtr& c) {
  if (c->state >= Conn::State::kReleased) return;
  if (c->open_member()) --open_members;
  c->advance(Conn::State::kReleased);
  check_done();
}

void Server::Impl::check_done() {
  // On a pass the training job binds MASTER_PORT next: the relays close their ends
  // first. On a fail the relays' members wait for the report, which waits for this.
  bool links_open = open_links > 0 && state.verdict().exit_code == exit_code::kPass;
  if (!state.decided() || state.stage_running() || done_set || writes_in_flight > 0 ||
      open_members > 0 || links_open || !broadcasts.empty()) {
    return;
  }
  done_set = true;
  done.set_value();
}

void Server::Impl::watch(const ConnPtr& c) {
  if (c->relayed()) return;  // its frames come on its relay's connection (on_channel_frame)
  c->sock.async_wait(tcp::socket::wait_read, [this, c](std::error_code ec) {
    if (ec == asio::error::operation_aborted) return;
    if (state.stage_running() && c->state < Conn::State::kReported) {
      asio::co_spawn(io, read_stage_result(c), asio::detached);
      return;
    }
    if (rehearsal.running && c->path_host >= 0) {
      asio::co_spawn(io, read_path_report(c), asio::detached);
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

awaitable<void> Server::Impl::read_stage_result(ConnPtr c) {
  mark_reported(c);
  // A closed connection is no result, without a word; another frame's payload is not read.
  ReadError why;
  auto header = co_await read_header(c->sock, &why);
  if (!header) co_return stage_result_in(c, 0, {}, why.io() ? std::string() : why.error.message);
  std::vector<uint8_t> payload;
  if (header->type == uint16_t(MsgType::kStageResult)) {
    auto got = co_await read_payload(c->sock, *header, &why);
    if (!got) {
      co_return stage_result_in(
          c, 0, {}, fmt::format("closed mid-frame ({} of {} bytes)", why.got, header->length));
    }
    payload = std::move(*got);
  }
  stage_result_in(c, header->type, payload, {});
}

void Server::Impl::stage_result_in(const ConnPtr& c, uint16_t type,
                                   std::span<const uint8_t> payload, std::string why) {
  std::optional<StageReport> got;
  if (type != 0 && type != uint16_t(MsgType::kStageResult)) {
    why = fmt::format("a {} frame instead", type_name(type));
  } else if (type != 0) {
    if (auto r = decode_stage_report(payload); !r) {
      why = r.error().message;
    } else if (cfg.token &&
               !verify_stage_report(payload, *cfg.token, c->server_nonce, c->client_nonce)) {
      why = "its MAC does not verify with the job token";
    } else {
      got = std::move(*r);
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
  if (c->slot >= 0)
    deliver(size_t(c->slot), got ? std::move(got->ranks) : std::vector<RankResult>{});
}

void Server::Impl::deliver(size_t i, std::vector<RankResult> results) {
  if (state.accept_results(i, std::move(results))) finalize();
}

void Server::Impl::depart(const ConnPtr& c) {
  if (c->slot < 0) return;
  if (state.stage_running() && c->state < Conn::State::kReported) {
    mark_reported(c);  // gone mid-stage: its ranks report nothing
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

void Server::Impl::maybe_decide() {
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

void Server::Impl::decide(bool timed_out) {
  if (state.decided()) return;
  // NCCL's connections are rehearsed before the verdict; the deadline (or a
  // signal) ends a rehearsal still running, with what came in.
  if (rehearsal.running) return end_rehearsal();
  if (!rehearsal.done && start_rehearsal(timed_out)) return;
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
  // What carried the members at the decision: one that came back directly after
  // its relay died is not counted as relayed, nor is the dead relay.
  const Verdict& v = state.decide(
      {.timed_out = timed_out,
       .master_port = port,
       .bound = bound,
       .process = process_facts(),
       .connections_peak = sockets_peak,
       .relays = relays - std::min(relays, relays_lost),
       .relayed_members = static_cast<size_t>(std::count_if(
           conns.begin(), conns.end(), [](const ConnPtr& c) { return c && c->relayed(); }))});
  if (v.run_gpu) {
    stage_timer.expires_at(cfg.master.stage_by.extended(timing::kStageGrace).when());
    stage_timer.async_wait([this](std::error_code ec) {
      if (!ec) finalize();
    });
  }
  if (v.nccl_roots > 0) send_roots(v.roots);
  broadcast(v, local_verdict, /*timed=*/true);
}

void Server::Impl::send_roots(const std::vector<NcclIdBytes>& roots) {
  // One frame for everyone, ahead of each go verdict: each member checks it
  // against the digest its own verdict carries. A relay gets it once, for all.
  const Bytes frame = std::make_shared<const std::vector<uint8_t>>(encode(NcclRoots{roots}));
  const Bytes to_all =
      std::make_shared<const std::vector<uint8_t>>(encode_channel(0, ChannelOp::kAll, *frame));
  std::unordered_set<const Conn*> links;
  for (const ConnPtr& c : conns) {
    if (c == nullptr) continue;
    if (!c->relayed()) {
      send(c, frame);
    } else if (ConnPtr link = c->via.lock(); link != nullptr && links.insert(link.get()).second) {
      if (!link->closed()) send(link, to_all);
    }
  }
}

void Server::Impl::finalize() {
  if (!state.stage_running()) return;
  stage_timer.cancel();
  broadcast(state.finalize(), local_final, /*timed=*/false);
}

void Server::Impl::broadcast(const Verdict& base, std::optional<std::promise<Verdict>>& local,
                             bool timed) {
  broadcasts.push_back(Broadcast{base, std::make_shared<const std::vector<uint8_t>>(encode(base)),
                                 &local, 0, Clock::now(), timed});
  if (broadcasts.size() == 1) broadcast_some();
}

void Server::Impl::broadcast_some() {
  Broadcast& b = broadcasts.front();
  size_t end = std::min(conns.size(), b.next + kBroadcastChunk);
  for (size_t i = b.next; i < end; ++i) {
    std::vector<Finding> notes = state.notes_for(i);
    const ConnPtr& c = conns[i];
    if (c != nullptr && notes.empty() && !cfg.token) {
      send(c, b.shared);
      continue;
    }
    Verdict own = b.base;
    own.notes = std::move(notes);
    if (c != nullptr) {
      send(c, cfg.token ? encode_signed(own, *cfg.token, c->server_nonce, c->client_nonce)
                        : encode(own));
    } else if (*b.local) {
      (*b.local)->set_value(std::move(own));
      b.local->reset();
    }
  }
  b.next = end;
  if (end < conns.size()) {
    // The frames queued so far go out first (their writes were posted before this).
    asio::post(io, [this] { broadcast_some(); });
    return;
  }
  if (b.timed) state.verdicts_sent(ms_between(b.t0, Clock::now()));
  broadcasts.pop_front();
  if (!broadcasts.empty()) return asio::post(io, [this] { broadcast_some(); });
  check_done();
}

void Server::Impl::schedule_progress() {
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
  Listeners l{impl_->acceptors, impl_->bound};
  return listen_on(impl_->io, addresses, port, l,
                   [this](const std::string& line) { impl_->log(line); });
}

Result<uint16_t> Server::adopt(int fd, const std::string& address) {
  Listeners l{impl_->acceptors, impl_->bound};
  return adopt_listener(impl_->io, fd, address, l);
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
    // The stage had already ended: the verdict stands as sent. While it runs, the
    // final verdict comes with finalize(): handing rank 0 the go verdict back here
    // would end its wait, and the server with it, before the others' results are in.
    if (s.local_final && !s.state.stage_running()) {
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
  if (s.local_probe.joinable()) s.local_probe.join();  // bounded by the rehearsal's deadline
  // The server thread has stopped: its state is this thread's now.
  if (!s.state.decided()) s.decide(true);
  if (s.state.stage_running()) s.finalize();
  // Moved, not copied: at 100k members a copy of the records is another 100 MB.
  Report report = s.state.take_report();
  report.total_ms = ms_between(s.cfg.master.start, Clock::now());
  return report;
}

}  // namespace rankcheck
