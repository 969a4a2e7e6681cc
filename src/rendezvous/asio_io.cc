#include "rendezvous/asio_io.h"

#include <cerrno>

#include <fmt/format.h>
#include <unistd.h>

#include "base/text.h"

namespace rankcheck {

ReadError read_error(std::error_code ec, bool mid, size_t got) {
  if (ec == asio::error::eof) {
    return {{mid ? "connection closed mid-frame" : "connection closed", Fault::kClosed}, got};
  }
  return {{fmt::format("recv: {}", ec.message()), Fault::kSystem}, got};
}

void Outbox::push(std::vector<uint8_t> frame) {
  push(std::make_shared<const std::vector<uint8_t>>(std::move(frame)));
}

void Outbox::clear() {
  for (size_t i = head_ + in_write_; i < queue_.size(); ++i)
    bytes_ -= queue_[i]->size();
  queue_.erase(queue_.begin() + head_ + in_write_, queue_.end());
  // An idle connection keeps no allocation: the master holds 100k of them waiting.
  if (empty()) {
    std::vector<Bytes>().swap(queue_);
    head_ = 0;
  }
}

void Outbox::written(std::error_code ec) {
  // Every frame of the write goes, written or not (an error ends the connection).
  size_t end = ec ? queue_.size() : head_ + in_write_;
  for (size_t i = head_; i < end; ++i)
    bytes_ -= queue_[i]->size();
  head_ = static_cast<uint32_t>(end);
  in_write_ = 0;
  if (empty()) return clear();
  // The frames written go once they are as many as those left: each frame is
  // moved once on average, whether one frame is written at a time or 256.
  if (head_ >= queue_.size() - head_) {
    queue_.erase(queue_.begin(), queue_.begin() + head_);
    head_ = 0;
  }
}

Result<uint16_t> adopt_listener(asio::io_context& io, int fd, const std::string& address,
                                Listeners& out) {
  using asio::ip::tcp;
  std::error_code ec;
  auto addr = asio::ip::make_address(address, ec);
  auto acc = std::make_unique<tcp::acceptor>(io);
  if (!ec) acc->assign(addr.is_v6() ? tcp::v6() : tcp::v4(), fd, ec);
  tcp::endpoint ep;
  if (!ec) ep = acc->local_endpoint(ec);
  if (ec) {
    if (!acc->is_open()) ::close(fd);
    return Error{fmt::format("cannot listen on {}: {}", address, ec.message()), Fault::kListen};
  }
  out.bound.push_back(address);
  out.acceptors.push_back(std::move(acc));
  return ep.port();
}

Result<uint16_t> listen_on(asio::io_context& io, const std::vector<std::string>& addresses,
                           uint16_t port, Listeners& out,
                           const std::function<void(const std::string&)>& log) {
  using asio::ip::tcp;
  std::vector<Error> failed;
  for (const std::string& a : addresses) {
    std::error_code ec;
    auto addr = asio::ip::make_address(a, ec);
    if (ec) {
      failed.push_back(Error{fmt::format("{} is not a numeric address", a), Fault::kListen});
      continue;
    }
    tcp::endpoint ep(addr, port);
    auto acc = std::make_unique<tcp::acceptor>(io);
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
      Error e{fmt::format("cannot listen on {}: {}", endpoint(a, port), ec.message()), fault};
      if (fault == Fault::kInUse) return e;
      failed.push_back(std::move(e));
      continue;
    }
    port = acc->local_endpoint().port();
    out.bound.push_back(a);
    out.acceptors.push_back(std::move(acc));
  }
  if (out.acceptors.empty()) {
    if (failed.empty()) return Error{"no address to listen on", Fault::kListen};
    // An address this host does not own says the most; else the first failure.
    auto lead = std::find_if(failed.begin(), failed.end(),
                             [](const Error& e) { return e.fault == Fault::kNotLocal; });
    if (lead == failed.end()) lead = failed.begin();
    Error err = *lead;
    for (auto it = failed.begin(); it != failed.end(); ++it) {
      if (it != lead) err.message += "; " + it->message;
    }
    return err;
  }
  for (const Error& e : failed)
    log(fmt::format("{}; listening on {} only", e.message, format_list(out.bound, 4)));
  return port;
}

}  // namespace rankcheck
