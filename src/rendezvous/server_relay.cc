// The master's side of host relays (relay.h): a relay's connection carries one
// channel per member, and each channel goes through the same steps as a
// member's own connection (challenge, hello, admission, verdict, stage result).

#include <fmt/format.h>

#include "base/text.h"
#include "rendezvous/server_impl.h"

namespace rankcheck {
namespace {

// A host carries few members; a relay may not hold more channels open than the
// job has ranks (and some room for duplicates, which the report names).
size_t max_channels(long world_size) {
  return static_cast<size_t>(std::clamp(2 * world_size + 64, 256L, 1L << 20));
}

}  // namespace

size_t Server::Impl::relays_backlog() {
  size_t sum = 0;
  std::erase_if(relay_conns, [&sum](const std::weak_ptr<Conn>& w) {
    auto c = w.lock();
    if (!c || c->closed()) return true;
    sum += c->outbox.queued_bytes();
    return false;
  });
  return sum;
}

void Server::Impl::on_relay_hello(const ConnPtr& c, const std::string& peer,
                                  std::span<const uint8_t> payload) {
  auto hello = decode_relay_hello(payload);
  if (!hello) {
    refuse(c, peer, RefusalKind::kMalformed, hello.error().message, std::nullopt,
           RejectCode::kMalformed);
    return;
  }
  if (cfg.token && !verify_relay_hello(payload, *cfg.token, c->server_nonce)) {
    refuse(c, peer, RefusalKind::kRelayAuth,
           fmt::format("the relay of {} does not carry this job's token (a wrong or missing "
                       "--token-file)",
                       printable(hello->host)),
           std::nullopt, RejectCode::kAuth);
    return;
  }
  const std::string& job = cfg.master.job_id;
  if (!job.empty() && !hello->job_id.empty() && hello->job_id != job) {
    // Its members come directly next, and each is refused with its own record.
    refuse(c, peer, RefusalKind::kForeignJob,
           fmt::format("this master serves job '{}', not job '{}' (the relay of {})",
                       printable(job), printable(hello->job_id), printable(hello->host)),
           std::nullopt, RejectCode::kForeignJob);
    return;
  }
  if (state.decided()) {
    // Not a refusal worth a report line: its members come directly and are told.
    leave_handshake(c, Conn::State::kRefused);
    send(c, encode(Reject{RejectCode::kLate, "the master has decided"}));
    c->close_after_write = true;
    pump(c);
    return;
  }
  // A relay costs the master a few MiB at worst: their number is bounded, by address
  // and in all. One refused sends its members to the master directly.
  Source& from = sources[c->source];
  size_t cap = size_t(std::max(0L, cfg.master.world_size)) + kSpareRelays;
  // (Past kMaxSources addresses the rest share source 0: not one address.)
  if ((c->source != 0 && from.relays >= kMaxRelaysPerSource) || open_links >= cap) {
    refuse(c, peer, RefusalKind::kMalformed,
           fmt::format("a relay too many (the relay of {}): {} from {}, {} in all, for a job of "
                       "{}",
                       printable(hello->host), from.relays, printable(from.addr, 60), open_links,
                       plural(size_t(std::max(0L, cfg.master.world_size)), "rank", "ranks")),
           std::nullopt, RejectCode::kBusy);
    return;
  }
  ++from.relays;
  relay_conns.push_back(c);
  leave_handshake(c, Conn::State::kAdmitted);  // a relay, not a member: not an open member
  c->link = std::make_unique<Conn::Link>();
  c->link->host = hello->host;
  c->link->pid = hello->pid;
  c->link->peer = peer;
  ++relays;
  ++open_links;
  send(c, encode(Admit{static_cast<uint32_t>(state.joined_ranks()),
                       static_cast<uint32_t>(cfg.master.world_size)}));
  std::error_code nbec;
  c->sock.non_blocking(true, nbec);  // read_relay reads what is there, without waiting
  if (nbec) {
    relay_closed(c);
    return;
  }
  read_relay(c);
}

void Server::Impl::read_relay(const ConnPtr& c) {
  // Its frames come in bursts (a host's members together): each burst is read at
  // once into the server's scratch buffer and split into frames there, rather than
  // two reads a frame. A frame cut by the end of a read waits in the link's `rx`.
  // A plain handler a burst, not a coroutine frame a relay (12,500 of them).
  c->sock.async_wait(tcp::socket::wait_read,
                     [this, c](std::error_code ec) { relay_readable(c, ec); });
}

void Server::Impl::relay_readable(const ConnPtr& c, std::error_code ec) {
  std::string why;
  bool open = !ec;
  while (open && !c->closed()) {
    std::error_code rec;
    size_t got = c->sock.read_some(asio::buffer(scratch), rec);
    if (rec == asio::error::would_block || rec == asio::error::try_again) break;
    if (rec) {
      open = false;  // closed by the relay (eof), or broken
      break;
    }
    open = take_channel_frames(c, got, why);
    if (got < scratch.size()) break;  // a short read: nothing more there now
  }
  if (open && !c->closed()) {
    read_relay(c);
    return;
  }
  if (c->link) std::vector<uint8_t>().swap(c->link->rx);
  if (!why.empty()) {
    log(fmt::format("the relay of {} ({}) {}: closing it", printable(c->link->host),
                    printable(c->link->peer), printable(why, 200)));
  }
  relay_closed(c);
}

bool Server::Impl::take_channel_frames(const ConnPtr& c, size_t got, std::string& why) {
  // Split where the bytes are: in the scratch buffer, or after a cut frame's start.
  auto& rx = c->link->rx;
  bool kept = !rx.empty();
  if (kept)
    rx.insert(rx.end(), scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(got));
  std::span<const uint8_t> data =
      kept ? std::span<const uint8_t>(rx) : std::span<const uint8_t>(scratch).first(got);
  // A frame that starts a channel's handshake or belongs to one: what the master
  // answers goes in the relay's outbox before any member behind it is admitted.
  auto in_handshake = [&channels = c->link->channels](const ChannelFrame& f) {
    if (f.op == ChannelOp::kOpen) return true;
    if (f.op != ChannelOp::kData) return false;
    auto it = channels.find(f.channel);
    return it != channels.end() && it->second->state == Conn::State::kHandshake;
  };
  // What all relays leave unread, summed once a burst at most (a sum over every
  // relay for each frame would cost a 12,500-relay job more than the frames do).
  std::optional<size_t> all_unread;
  auto relays_unread = [this, &all_unread] {
    if (!all_unread) all_unread = relays_backlog();
    return *all_unread;
  };
  size_t at = 0;
  while (!c->closed() && data.size() - at >= kHeaderSize) {
    auto header = decode_header(data.subspan(at, kHeaderSize));
    if (!header || header->type != uint16_t(MsgType::kChannel)) {
      why = fmt::format(
          "sent what no relay sends ({})",
          header ? fmt::format("a {} frame", type_name(header->type)) : header.error().message);
      return false;
    }
    if (data.size() - at - kHeaderSize < header->length) break;  // the rest comes later
    auto frame = decode_channel(data.subspan(at + kHeaderSize, header->length));
    at += kHeaderSize + header->length;
    if (!frame) {
      why = fmt::format("sent what no relay sends ({})", frame.error().message);
      return false;
    }
    if (c->outbox.queued_bytes() > kRelayBacklogFloor && in_handshake(*frame) &&
        (c->outbox.queued_bytes() > kMaxRelayBacklog || relays_unread() > kMaxRelaysBacklog)) {
      why = fmt::format(
          "reads none of what it is sent ({} waiting for it, {} for all relays) "
          "and opens more",
          bytes_text(c->outbox.queued_bytes()), bytes_text(relays_unread()));
      return false;
    }
    on_channel(c, std::move(*frame));
  }
  // Only a cut frame's start stays, in a vector no larger than it (12,500 relays).
  std::vector<uint8_t> rest(data.begin() + static_cast<std::ptrdiff_t>(at), data.end());
  rx.swap(rest);
  return true;
}

void Server::Impl::on_channel(const ConnPtr& link, ChannelFrame f) {
  auto& channels = link->link->channels;
  auto it = channels.find(f.channel);
  switch (f.op) {
    case ChannelOp::kOpen: {
      if (it != channels.end() || f.channel == 0) return;  // a relay's mistake: ignored
      if (channels.size() >= max_channels(cfg.master.world_size)) {
        send(link, encode_channel(f.channel, ChannelOp::kClose));
        return;
      }
      auto c = std::make_shared<Conn>(io);
      c->via = link;
      c->channel = f.channel;
      c->source = link->source;
      c->accepted = Clock::now();
      if (auto nonce = fresh_nonce(c->server_nonce); !nonce) {
        send(link, encode_channel(f.channel, ChannelOp::kClose));
        return;
      }
      channels.emplace(f.channel, c);
      send(c, challenge_for(*c));
      if (!link->link->sweep_armed) arm_channel_sweep(link, c->accepted + cfg.handshake_timeout);
      return;
    }
    case ChannelOp::kData:
      if (it != channels.end()) {
        // A copy: what the frame does may erase the channel, and with it the map's pointer.
        ConnPtr c = it->second;
        on_channel_frame(c, f.frame);
      }
      return;
    case ChannelOp::kClose:
      if (it != channels.end()) {
        ConnPtr c = it->second;
        channels.erase(it);
        on_channel_closed(c);
      }
      return;
    case ChannelOp::kAll:
      return;  // the master's to send, not a relay's
    case ChannelOp::kRefused: {
      if (it == channels.end()) return;
      ConnPtr c = it->second;
      channels.erase(it);
      if (c->joined()) return on_channel_closed(c);
      // The relay sent the member its reject: the master counts the refusal.
      Reject reject{RejectCode::kMalformed, "refused by its host's relay"};
      if (f.frame.size() >= kHeaderSize) {
        if (auto r = decode_reject(std::span(f.frame).subspan(kHeaderSize))) reject = *r;
      }
      std::optional<Record> record;
      if (auto h = decode_hello(f.hello)) record = std::move(h->record);
      RefusalKind kind = reject.code == RejectCode::kAuth         ? RefusalKind::kAuth
                         : reject.code == RejectCode::kForeignJob ? RefusalKind::kForeignJob
                         : reject.code == RejectCode::kVersion    ? RefusalKind::kVersion
                         : reject.code == RejectCode::kLate       ? RefusalKind::kLate
                                                                  : RefusalKind::kMalformed;
      refuse(c, link->link->peer, kind,
             fmt::format("{} (refused by the relay of {})", reject.reason,
                         printable(link->link->host)),
             std::move(record));
      return;
    }
  }
}

void Server::Impl::arm_channel_sweep(const ConnPtr& link, Clock::time_point at) {
  Conn::Link& l = *link->link;
  if (!l.sweep) l.sweep = std::make_unique<asio::steady_timer>(io);
  l.sweep_armed = true;
  l.sweep->expires_at(at);
  l.sweep->async_wait([this, weak = std::weak_ptr<Conn>(link)](std::error_code ec) {
    ConnPtr held = weak.lock();
    if (ec || held == nullptr || held->closed() || held->link == nullptr) return;
    held->link->sweep_armed = false;
    sweep_channels(held);
  });
}

void Server::Impl::sweep_channels(const ConnPtr& link) {
  const Clock::time_point now = Clock::now();
  std::vector<ConnPtr> late;
  std::optional<Clock::time_point> next;
  for (const auto& [id, c] : link->link->channels) {
    if (c->state != Conn::State::kHandshake) continue;
    Clock::time_point due = c->accepted + cfg.handshake_timeout;
    if (due <= now) {
      late.push_back(c);
    } else if (!next || due < *next) {
      next = due;
    }
  }
  for (const ConnPtr& c : late) {
    if (c->state != Conn::State::kHandshake) continue;
    refuse(c, link->link->peer, RefusalKind::kMalformed,
           fmt::format(
               "no hello within the handshake deadline of {} (a channel of the relay of {})",
               format_seconds(double(cfg.handshake_timeout.count())), printable(link->link->host)));
  }
  if (next && !link->closed() && !link->link->sweep_armed) arm_channel_sweep(link, *next);
}

void Server::Impl::on_channel_frame(const ConnPtr& c, std::span<const uint8_t> frame) {
  ConnPtr link = c->via.lock();
  SharedString peer = link ? link->link->peer : SharedString("?");
  auto header = decode_header(frame.first(std::min(frame.size(), kHeaderSize)));
  if (!header || frame.size() != kHeaderSize + header->length) {
    std::string why =
        header ? std::string("a frame cut short") : fmt::format("{}", header.error().message);
    if (!c->joined()) return refuse(c, peer, RefusalKind::kMalformed, why);
    depart(c);
    return close(c);
  }
  auto payload = frame.subspan(kHeaderSize);
  if (!c->joined()) {
    if (header->type != uint16_t(MsgType::kHello)) {
      return refuse(c, peer, RefusalKind::kMalformed,
                    fmt::format("sent a {} frame before its hello", type_name(header->type)));
    }
    return on_hello(c, std::move(peer), payload);
  }
  if (state.stage_running() && c->state < Conn::State::kReported) {
    mark_reported(c);
    return stage_result_in(c, header->type, payload, {});
  }
  if (rehearsal.running && c->path_host >= 0) {
    auto host = size_t(c->path_host);
    c->path_host = -1;
    return path_report_in(c, host, take_path_report(c, header->type, payload));
  }
  depart(c);  // bytes it had no business sending yet
  close(c);
}

void Server::Impl::on_channel_closed(const ConnPtr& c) {
  if (c->closed()) return;
  if (!c->joined()) {
    leave_handshake(c, Conn::State::kClosed);  // gone before its hello: nothing to count
    return;
  }
  if (state.stage_running() && c->state < Conn::State::kReported) {
    mark_reported(c);
    if (c->slot >= 0) {
      log(fmt::format("{} disconnected during the GPU stage",
                      member_label(state.members()[size_t(c->slot)].record)));
    }
    close(c);
    if (c->slot >= 0) deliver(size_t(c->slot), {});
    return;
  }
  if (rehearsal.running && c->path_host >= 0) {
    auto host = size_t(c->path_host);
    c->path_host = -1;
    return path_report_in(c, host, std::nullopt);
  }
  if (state.decided() && !state.stage_running()) return release(c);
  depart(c);
  close(c);
}

void Server::Impl::relay_closed(const ConnPtr& link) {
  Conn::Link& l = *link->link;
  --open_links;  // its end is closed (or broken): the server's done no longer waits for it
  if (Source& from = sources[link->source]; from.relays > 0) --from.relays;
  // The members it carried besides its own process (which, gone, is reported as such),
  // those already back directly included.
  size_t open = l.came_back;
  for (const auto& [id, c] : l.channels) {
    open += c->slot < 0 || state.members()[size_t(c->slot)].record.pid != l.pid ||
            state.members()[size_t(c->slot)].record.host != l.host;
  }
  if (!state.decided()) ++relays_lost;
  if (!state.decided() && open > 0) {
    // Its members find out as their connections to it close, and come directly.
    log(fmt::format(
        "the relay of {} (pid {}, {}) closed its connection with {} open: its "
        "members are to join directly",
        printable(l.host), l.pid, printable(l.peer), plural(open, "member", "members")));
    state.relay_lost(l.host, l.pid, open);
  }
  if (l.sweep) l.sweep->cancel();
  auto channels = std::move(l.channels);
  l.channels.clear();
  for (auto& [id, c] : channels)
    on_channel_closed(c);
  if (state.decided() && !state.stage_running()) {
    // The relay closed first, its members done: its connection stays open until
    // the report is out, as theirs would (and the TIME_WAIT is the relay's).
    link->advance(Conn::State::kReleased);
    return check_done();
  }
  close(link);
}

void Server::Impl::forget_relayed(const Record& rec) {
  auto it = relayed.find(relayed_key(rec));
  if (it == relayed.end()) return;
  ConnPtr old = it->second.lock();
  relayed.erase(it);
  if (old == nullptr || old->closed() || old->slot < 0 || state.decided()) return;
  const Record& was = state.members()[size_t(old->slot)].record;
  if (was.host != rec.host || was.pid != rec.pid || was.rank != rec.rank) return;
  // Its relay died, and the member was quicker to come back than the news: counted
  // with the relay's open members when its connection's end is read (relay_closed).
  log(fmt::format("{} joined directly: its relay's channel is closed",
                  member_label(state.members()[size_t(old->slot)].record)));
  if (ConnPtr link = old->via.lock(); link != nullptr && link->link != nullptr) {
    ++link->link->came_back;
  }
  depart(old);
  close(old);
}

}  // namespace rankcheck
