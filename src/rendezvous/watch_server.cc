#include "rendezvous/watch_server.h"

#include <cerrno>
#include <cstring>
#include <future>
#include <thread>

#include <asio.hpp>
#include <fmt/format.h>
#include <sys/socket.h>

#include "base/text.h"
#include "base/version.h"
#include "protocol/messages.h"
#include "rendezvous/asio_io.h"
#include "report/report.h"

namespace rankcheck {

using asio::awaitable;
using asio::ip::tcp;

namespace {
// Links beyond the members the check admitted, at most (a stray, a member's second try).
constexpr size_t kSpareLinks = 64;
// Frames written at once on one link, at most.
constexpr size_t kMaxGather = 16;
}  // namespace

struct WatchServer::Impl {
  struct Link {
    explicit Link(tcp::socket s) : sock(std::move(s)) {}
    tcp::socket sock;
    Nonce server{}, client{};
    std::optional<size_t> member;  // once its hello is taken
    uint32_t read_seq = 0, sent_seq = 0;
    bool start_sent = false;
    bool closed = false;
    Outbox out;
  };
  using LinkPtr = std::shared_ptr<Link>;

  explicit Impl(WatchServerConfig c) : cfg(std::move(c)), tick_timer(io) {}

  WatchServerConfig cfg;
  asio::io_context io;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  std::vector<std::string> bound;
  std::vector<LinkPtr> links;
  std::optional<WatchState> state;
  size_t members = 0;
  asio::steady_timer tick_timer;
  std::thread thread;
  Clock::time_point job_start{};
  bool job_started = false;
  bool dirty = false;  // an event since the last report
  std::promise<void> done;
  bool done_set = false;
  std::vector<std::string> said;  // the finding ids already logged

  double now_ms() const { return job_started ? ms_between(job_start, Clock::now()) : 0; }

  void close(const LinkPtr& l) {
    if (l->closed) return;
    l->closed = true;
    std::error_code ec;
    l->sock.close(ec);
    if (l->member && state) {
      state->disconnected(*l->member, now_ms());
      changed(true);
    }
  }

  void pump(const LinkPtr& l) {
    if (l->closed || l->out.writing() || l->out.empty()) return;
    l->out.write_next(l->sock, kMaxGather, [this, l](std::error_code ec) {
      if (ec) return close(l);
      pump(l);
    });
  }

  void order(const LinkPtr& l, WatchOrder o) {
    if (l->closed || !l->member) return;
    o.seq = ++l->sent_seq;
    l->out.push(cfg.token ? encode_signed(o, *cfg.token, l->server, l->client) : encode(o));
    pump(l);
  }

  void send_start(const LinkPtr& l) {
    if (l->start_sent || !job_started) return;
    l->start_sent = true;
    order(l, WatchOrder{0, WatchOrderKind::kStart, 0, "", "", {}});
  }

  // Asks the rules again (`event`: after something other than a heartbeat, which the
  // report shows at the next tick); when the findings changed, says the new ones and
  // hands the report on at once, and ends the job when --fail-fast says so.
  void changed(bool event) {
    if (!state) return;
    bool findings = state->evaluate(now_ms());
    dirty = dirty || event;
    if (findings) {
      JobReport r = state->report(now_ms(), true);
      for (const Finding& f : r.findings) {
        std::string id(f.name());
        if (!f.is_error() || std::find(said.begin(), said.end(), id) != said.end()) continue;
        said.push_back(id);
        cfg.log("job: " + render_finding_line(f));
      }
      report_now();
    }
    if (auto end = state->take_end_order()) {
      cfg.log(fmt::format("job: --fail-fast: ending the job on every rank ({}, exit {})",
                          end->name(), end->exit_code));
      for (const LinkPtr& l : links) {
        order(l, WatchOrder{0,
                            WatchOrderKind::kEnd,
                            static_cast<uint8_t>(end->exit_code),
                            std::string(end->name()),
                            end->message,
                            {}});
      }
      report_now();
    }
    if (state->done() && !done_set) {
      done_set = true;
      done.set_value();
    }
  }

  void report_now() {
    dirty = false;
    cfg.on_report(state->report(now_ms(), true));
  }

  void schedule_tick() {
    tick_timer.expires_after(cfg.tick);
    tick_timer.async_wait([this](std::error_code ec) {
      if (ec) return;
      if (job_started) {
        changed(false);  // a rank gone quiet, an init past its timeout
        if (dirty) report_now();
      }
      schedule_tick();
    });
  }

  // A link's handshake: the challenge, then its hello within the deadline.
  awaitable<bool> handshake(LinkPtr l) {
    if (!fill_random(l->server)) co_return false;
    Challenge ch;
    ch.nonce = l->server;
    ch.auth = cfg.token.has_value();
    ch.master_version = cfg.token ? "" : std::string(kRankcheckVersion);
    ch.job_id = cfg.token ? job_tag(*cfg.token, ch.nonce, cfg.job_id) : cfg.job_id;
    l->out.push(encode(ch));
    pump(l);
    asio::steady_timer deadline(io);
    deadline.expires_after(cfg.handshake);
    deadline.async_wait([this, l](std::error_code ec) {
      if (!ec && !l->member) close(l);
    });
    auto f = co_await read_frame(l->sock);
    deadline.cancel();
    if (!f || f->header.type != uint16_t(MsgType::kWatchHello)) co_return false;
    auto hello = decode_watch_hello(f->payload);
    if (!hello) co_return false;
    if (cfg.token && !verify_watch_hello(f->payload, *cfg.token, l->server)) {
      cfg.log(fmt::format("watch: a link for {} without the job token: closed",
                          span_label(hello->rank, hello->nranks)));
      co_return false;
    }
    std::string why;
    auto m = state->connect(hello->rank, hello->nranks, hello->host, now_ms(), &why);
    if (!m) {
      cfg.log("watch: a link refused: " + why);
      co_return false;
    }
    l->client = hello->client_nonce;
    l->member = *m;
    send_start(l);
    co_return true;
  }

  awaitable<void> serve(LinkPtr l) {
    if (!co_await handshake(l)) {
      close(l);
      co_return;
    }
    for (;;) {
      auto f = co_await read_frame(l->sock);
      if (!f) break;
      if (f->header.type != uint16_t(MsgType::kWatchEvent)) break;
      auto e = decode_watch_event(f->payload);
      // An event is the wrapper's when it comes next in its sequence and, with a
      // token, its MAC verifies over this link's nonces.
      if (!e || e->seq != l->read_seq + 1 ||
          (cfg.token && !verify_watch_event(f->payload, *cfg.token, l->server, l->client))) {
        break;
      }
      l->read_seq = e->seq;
      state->event(*l->member, e->event, now_ms());
      // A heartbeat changes only what the next tick asks the rules about (a rank gone
      // quiet): 16,000 members send 8,000 a second, which must not each cost a pass
      // over every member, or a report written again.
      if (e->event.kind != WatchEventKind::kHeartbeat) changed(true);
    }
    close(l);
  }

  awaitable<void> accept_loop(tcp::acceptor& acc) {
    size_t cap = members + kSpareLinks;
    for (;;) {
      auto [ec, sock] = co_await acc.async_accept(kAwait);
      if (ec == asio::error::operation_aborted) co_return;
      if (ec) continue;
      set_cloexec(sock.native_handle());
      // A link closed is forgotten; too many open at once are turned away.
      std::erase_if(links, [](const LinkPtr& l) { return l->closed && !l->out.writing(); });
      if (links.size() >= cap) {
        std::error_code ignore;
        sock.close(ignore);
        continue;
      }
      auto l = std::make_shared<Link>(std::move(sock));
      links.push_back(l);
      asio::co_spawn(io, serve(l), asio::detached);
    }
  }
};

WatchServer::WatchServer(WatchServerConfig config)
    : impl_(std::make_unique<Impl>(std::move(config))) {}

WatchServer::~WatchServer() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

Result<uint16_t> WatchServer::listen(const std::vector<std::string>& addresses, uint16_t port) {
  Listeners l{impl_->acceptors, impl_->bound};
  return listen_on(impl_->io, addresses, port, l, impl_->cfg.log);
}

std::vector<int> WatchServer::release_listeners() {
  std::vector<int> fds;
  for (auto& acc : impl_->acceptors) {
    std::error_code ec;
    int fd = acc->release(ec);
    if (!ec) fds.push_back(fd);
  }
  impl_->acceptors.clear();
  return fds;
}

Status WatchServer::adopt(const std::vector<int>& fds) {
  for (int fd : fds) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
      return Error{fmt::format("the watch server's socket: {}", std::strerror(errno))};
    }
    auto acc = std::make_unique<tcp::acceptor>(impl_->io);
    std::error_code ec;
    acc->assign(ss.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, ec);
    if (ec) return Error{fmt::format("the watch server's socket: {}", ec.message())};
    impl_->acceptors.push_back(std::move(acc));
  }
  return ok_status();
}

void WatchServer::start(std::vector<MemberWatch> members) {
  Impl& s = *impl_;
  WatchConfig wc = s.cfg.watch;
  s.members = members.size();
  wc.members = std::move(members);
  s.state.emplace(std::move(wc));
  for (auto& acc : s.acceptors)
    asio::co_spawn(s.io, s.accept_loop(*acc), asio::detached);
  s.schedule_tick();
  s.thread = std::thread([&s] { s.io.run(); });
}

void WatchServer::start_job() {
  asio::post(impl_->io, [&s = *impl_] {
    s.job_start = Clock::now();
    s.job_started = true;
    for (const auto& l : s.links)
      if (l->member) s.send_start(l);
    s.changed(true);
  });
}

JobReport WatchServer::finish(Deadline by, Millis linger, const std::function<bool()>& stop) {
  Impl& s = *impl_;
  auto done = s.done.get_future();
  // Every member's end, or `linger` once every member that ever connected is done.
  std::optional<Deadline> linger_by;
  while (done.wait_for(Millis(100)) != std::future_status::ready && !by.expired()) {
    if (stop && stop()) break;
    auto p = std::make_shared<std::promise<bool>>();
    auto all = p->get_future();
    asio::post(s.io, [&s, p] { p->set_value(s.state->all_connected_done()); });
    if (all.wait_for(Millis(1000)) != std::future_status::ready || !all.get()) continue;
    if (!linger_by) linger_by = Deadline::after(linger);
    if (linger_by->expired()) break;
  }
  s.io.stop();
  if (s.thread.joinable()) s.thread.join();
  // The server's thread has stopped: its state is this thread's now.
  s.state->evaluate(s.now_ms());
  return s.state->report(s.now_ms(), false);
}

}  // namespace rankcheck
