#include "rendezvous/watch_link.h"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>

#include "base/text.h"

namespace rankcheck {

Result<WatchLink> WatchLink::open(const WatchLinkOptions& o, Deadline by) {
  WatchLink link;
  link.token_ = o.token;
  std::string errors;
  for (const std::string& addr : o.addresses) {
    auto s = Socket::connect(addr, o.port, by);
    if (s) {
      link.socket_ = std::move(*s);
      break;
    }
    errors += (errors.empty() ? "" : "; ") + endpoint(addr, o.port) + ": " + s.error().message;
  }
  if (!link.socket_.valid()) {
    return Error{errors.empty() ? std::string("rank 0's watch server has no address") : errors,
                 Fault::kSystem};
  }
  auto f = link.socket_.read_frame(by);
  if (!f) return Error{"its challenge: " + f.error().message, f.error().fault};
  if (f->header.type != uint16_t(MsgType::kChallenge)) {
    return Error{fmt::format("a {} where its challenge belongs", type_name(f->header.type)),
                 Fault::kNone};
  }
  auto ch = decode_challenge(f->payload);
  if (!ch) return ch.error();
  // The watch server is this job's: it shows the job's id, or with a token a tag of
  // it that only a holder of the token computes.
  std::string want = o.token != nullptr ? job_tag(*o.token, ch->nonce, o.job_id) : o.job_id;
  if (ch->auth != (o.token != nullptr) || ch->job_id != want) {
    return Error{"the server on that port is not this job's watch server", Fault::kAuthFailed};
  }
  link.server_ = ch->nonce;
  if (auto ok = fill_random(link.client_); !ok) return ok.error();
  WatchHello hello{
      static_cast<uint32_t>(o.rank), static_cast<uint32_t>(o.nranks), o.host, link.client_, {}};
  auto frame = o.token != nullptr ? encode_signed(hello, *o.token, link.server_) : encode(hello);
  if (auto ok = link.socket_.write_all(frame, by); !ok) return ok.error();
  link.rx_ = link.socket_.take_buffered();
  return link;
}

Status WatchLink::await_start(Deadline by) {
  while (!started_) {
    if (!read()) return Error{why_, Fault::kClosed};
    if (started_) break;
    for (const WatchOrder& o : orders_) {
      if (o.kind == WatchOrderKind::kEnd) return ok_status();  // ended before it began
    }
    pollfd p{socket_.fd(), POLLIN, 0};
    if (by.expired()) return Error{"no word to start in time", Fault::kTimeout};
    int n = ::poll(&p, 1, by.poll_ms(Millis(1000)));
    if (n < 0 && errno != EINTR)
      return Error{fmt::format("poll: {}", std::strerror(errno)), Fault::kSystem};
  }
  return ok_status();
}

void WatchLink::send(const WatchEvent& e) {
  if (!up()) return;
  if (out_bytes_ > kMaxOutbox && e.kind == WatchEventKind::kHeartbeat) return;
  WatchEventFrame f{++sent_seq_, e, {}};
  auto frame = token_ != nullptr ? encode_signed(f, *token_, server_, client_) : encode(f);
  out_bytes_ += frame.size();
  out_.push_back(std::move(frame));
}

bool WatchLink::flush() {
  while (up() && !out_.empty()) {
    const auto& front = out_.front();
    ssize_t n = ::send(socket_.fd(), front.data() + out_sent_, front.size() - out_sent_,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    if (n <= 0) {
      close(fmt::format("send: {}", std::strerror(errno)));
      return false;
    }
    out_sent_ += static_cast<size_t>(n);
    if (out_sent_ == front.size()) {
      out_bytes_ -= front.size();
      out_.pop_front();
      out_sent_ = 0;
    }
  }
  return up();
}

bool WatchLink::take(const Frame& f) {
  if (f.header.type != uint16_t(MsgType::kWatchOrder)) {
    close(fmt::format("a {} frame from the watch server", type_name(f.header.type)));
    return false;
  }
  auto o = decode_watch_order(f.payload);
  if (!o) {
    close(o.error().message);
    return false;
  }
  // With a token, an order is the watch server's only when its MAC verifies over this
  // connection's nonces and the next sequence number: an end order of anyone else's
  // making must not stop a job.
  if (o->seq != read_seq_ + 1 ||
      (token_ != nullptr && !verify_watch_order(f.payload, *token_, server_, client_))) {
    close("an order that is not the watch server's (its MAC or sequence does not verify)");
    return false;
  }
  read_seq_ = o->seq;
  if (o->kind == WatchOrderKind::kStart) started_ = true;
  orders_.push_back(std::move(*o));
  return true;
}

bool WatchLink::read() {
  while (up()) {
    auto f = rx_.next();
    if (!f) {
      close(f.error().message);
      return false;
    }
    if (f->has_value()) {
      if (!take(**f)) return false;
      continue;
    }
    uint8_t buf[4096];
    ssize_t n = ::recv(socket_.fd(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      rx_.feed(std::span(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    close(n == 0 ? std::string("rank 0's watch server closed the link")
                 : fmt::format("recv: {}", std::strerror(errno)));
    return false;
  }
  return false;
}

std::vector<WatchOrder> WatchLink::take_orders() {
  return std::exchange(orders_, {});
}

void WatchLink::close(std::string why) {
  if (!up()) return;
  socket_.close();
  why_ = std::move(why);
  out_.clear();
  out_bytes_ = 0;
  out_sent_ = 0;
}

}  // namespace rankcheck
