#include <fstream>
#include <map>
#include <thread>

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>

#include <rankcheck/server.h>
#include <rankcheck/text.h>
#include <rankcheck/version.h>

namespace rankcheck {
namespace {

using asio::awaitable;
using asio::ip::tcp;
constexpr auto kAwait = asio::experimental::as_tuple(asio::use_awaitable);
// Refusals kept for the report; the rest are only counted.
constexpr size_t kMaxRefusalsKept = 64;
// Refusals logged to stderr one by one before they are only counted.
constexpr size_t kMaxRefusalsLogged = 8;

std::array<uint8_t, kNonceSize> fresh_nonce() {
  std::array<uint8_t, kNonceSize> n{};
  size_t got = 0;
  while (got < n.size()) {
    ssize_t r = ::getrandom(n.data() + got, n.size() - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
  return n;
}

}  // namespace

struct Server::Impl {
  // One verdict frame is shared by every member it is the same for.
  using Bytes = std::shared_ptr<const std::vector<uint8_t>>;

  struct Conn {
    // Kept small: one lives as long as its member. The handshake timer and the
    // peer's address live in the handshake coroutine, which ends at admission.
    explicit Conn(tcp::socket s) : sock(std::move(s)) {}
    tcp::socket sock;
    int slot = -1;
    bool admitted = false;
    bool handshake_expired = false;
    std::vector<Bytes> outbox;  // frames not yet written, oldest first
    bool writing = false;
    bool close_after_write = false;
    bool pending = false;   // counted among connections not yet admitted
    bool reported = false;  // its GPU stage result is in (or will never be)
  };
  using ConnPtr = std::shared_ptr<Conn>;

  explicit Impl(ServerConfig c)
      : cfg(std::move(c)),
        decide_timer(io),
        progress_timer(io),
        stage_timer(io),
        tracker(cfg.world_size, cfg.master_resolved, cfg.gpu_stage) {
    claims.assign(static_cast<size_t>(std::max(cfg.world_size, 1L)), 0);
    // Memory is proportional to the world size; a bogus huge one is not reserved.
    size_t expect = static_cast<size_t>(std::clamp(cfg.world_size, 1L, 1L << 16));
    members.reserve(expect);
    conns.reserve(expect);
  }

  ServerConfig cfg;
  asio::io_context io{1};
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  std::vector<std::string> bound;
  asio::steady_timer decide_timer;
  asio::steady_timer progress_timer;
  asio::steady_timer stage_timer;
  std::thread thread;

  // Everything below is touched only on the server thread (or after it stopped).
  std::vector<Member> members;         // admitted and still connected, in arrival order
  std::vector<ConnPtr> conns;          // conns[i] is members[i]'s; nullptr for the master's own
  JoinTracker tracker;                 // lets a clean job skip the rules at the decision
  ListPool<std::string> string_lists;  // interfaces and resolved addresses, one copy each
  ListPool<EnvVar> envs;
  std::vector<uint32_t> claims;      // members claiming each rank in [0, world)
  long distinct_claimed = 0;         // ranks in [0, world) claimed at least once
  std::map<long, long> world_votes;  // world size -> members (not the master) claiming it
  long joined_ranks = 0;
  std::vector<Departure> departed;
  std::vector<Refusal> refused;
  size_t refused_total = 0;
  size_t pending = 0;
  size_t writes_in_flight = 0;
  double last_join_ms = 0;
  bool decided = false;
  Report report;
  std::optional<std::promise<Verdict>> local_verdict;
  std::optional<std::promise<Verdict>> local_final;
  // The GPU stage, between the go verdict and the final one.
  bool stage_running = false;
  bool finalized = false;
  long results_expected = 0;  // ranks whose results are still out
  std::vector<RankResult> stage_results;
  double stage_ms = 0;
  std::promise<void> done;
  bool done_set = false;
  size_t accept_errors = 0;

  double now_ms() const { return ms_between(cfg.start, Clock::now()); }

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
    std::error_code ignored;
    c->sock.shutdown(tcp::socket::shutdown_both, ignored);
    c->sock.close(ignored);
  }

  void check_done() {
    if (!decided || stage_running || done_set || writes_in_flight > 0) return;
    done_set = true;
    done.set_value();
  }

  // ----- refusing ------------------------------------------------------------

  void unpend(const ConnPtr& c) {
    if (c->pending) --pending;
    c->pending = false;
  }

  void refuse(const ConnPtr& c, const std::string& peer, RefusalKind kind, std::string reason,
              std::optional<Record> record = std::nullopt,
              std::optional<RejectCode> reply = std::nullopt) {
    unpend(c);
    tracker.taint();
    ++refused_total;
    if (refused_total <= kMaxRefusalsLogged) {
      cfg.log(fmt::format("refused {}: {}", printable(peer), printable(reason, 200)));
    } else if (refused_total == kMaxRefusalsLogged + 1) {
      cfg.log("more connections refused; counting them without logging each");
    }
    if (refused.size() < kMaxRefusalsKept && kind != RefusalKind::kLate) {
      refused.push_back(Refusal{kind, peer, reason, std::move(record), now_ms()});
    }
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
      while (pending >= cfg.max_pending && acceptor.is_open()) {
        backoff.expires_after(Millis(5));
        co_await backoff.async_wait(kAwait);
      }
      auto [ec, sock] = co_await acceptor.async_accept(kAwait);
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      if (ec) {
        // Out of file descriptors (or buffers): keep serving those already here.
        if (++accept_errors <= 3) {
          cfg.log(fmt::format("accept on {}: {}; still serving, retrying in 100 ms",
                              acceptor.local_endpoint().port(), ec.message()));
        }
        backoff.expires_after(Millis(100));
        co_await backoff.async_wait(kAwait);
        continue;
      }
      std::error_code pec;
      auto ep = sock.remote_endpoint(pec);
      std::string peer = pec ? "?" : fmt::format("{}:{}", ep.address().to_string(), ep.port());
      asio::co_spawn(io, serve(std::make_shared<Conn>(std::move(sock)), std::move(peer)),
                     asio::detached);
    }
  }

  awaitable<void> serve(ConnPtr c, std::string peer) {
    ++pending;
    c->pending = true;
    // A connection that has not completed its hello in time is dropped.
    asio::steady_timer timer(io);
    timer.expires_after(cfg.handshake_timeout);
    timer.async_wait([c](std::error_code ec) {
      if (ec || c->admitted) return;
      c->handshake_expired = true;
      std::error_code ignored;
      c->sock.close(ignored);
    });
    send(c, encode(Challenge{fresh_nonce(), std::string(kVersion), cfg.job_id}));

    std::array<uint8_t, kHeaderSize> hdr{};
    auto [ec, n] = co_await asio::async_read(c->sock, asio::buffer(hdr), kAwait);
    if (ec) {
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
      if (frame_fault(header.error()) == FrameFault::kVersion) {
        refuse(c, peer, RefusalKind::kVersion,
               fmt::format("peer speaks rankcheck protocol version {}, this master speaks {}",
                           peer_version, kProtocolVersion),
               std::nullopt, RejectCode::kVersion);
      } else {
        refuse(c, peer, RefusalKind::kMalformed, header.error().message);
      }
      co_return;
    }
    if (header->type != uint16_t(MsgType::kHello)) {
      refuse(c, peer, RefusalKind::kMalformed,
             fmt::format("sent a {} frame before its hello", type_name(header->type)));
      co_return;
    }
    auto payload = std::make_unique<std::vector<uint8_t>>(header->length);  // within its cap
    auto [ec2, n2] = co_await asio::async_read(c->sock, asio::buffer(*payload), kAwait);
    if (ec2) {
      refuse(c, peer, RefusalKind::kMalformed,
             c->handshake_expired
                 ? std::string("hello not complete within the handshake deadline")
                 : fmt::format("closed mid-hello ({} of {} bytes)", n2, payload->size()));
      co_return;
    }
    auto hello = decode_hello(*payload);
    payload.reset();
    if (!hello) {
      refuse(c, peer, RefusalKind::kMalformed, hello.error().message, std::nullopt,
             RejectCode::kMalformed);
      co_return;
    }
    unpend(c);
    Record& rec = hello->record;
    if (!cfg.job_id.empty() && !rec.job_id.empty() && rec.job_id != cfg.job_id) {
      std::string why = fmt::format("this master serves job '{}', not job '{}'",
                                    printable(cfg.job_id), printable(rec.job_id));
      refuse(c, peer, RefusalKind::kForeignJob, why, std::move(rec), RejectCode::kForeignJob);
      co_return;
    }
    if (decided) {
      refuse(c, peer, RefusalKind::kLate,
             fmt::format("the master decided at +{} without this member: {}",
                         format_seconds(report.rendezvous_ms),
                         report.exit_code() == 0 ? std::string("the job was already complete")
                                                 : headline(report.findings)),
             std::nullopt, RejectCode::kLate);
      co_return;
    }
    c->admitted = true;
    timer.cancel();
    c->slot = admit(std::move(rec), std::move(peer), c);
    send(c,
         encode(Admit{static_cast<uint32_t>(joined_ranks), static_cast<uint32_t>(cfg.world_size)}));
    watch(c);
    maybe_decide();
  }

  // An admitted member sends nothing more until the verdict: a read that ends
  // means it is gone. A plain handler, not a coroutine frame, per member.
  void watch(const ConnPtr& c) {
    c->sock.async_wait(tcp::socket::wait_read, [this, c](std::error_code ec) {
      if (ec == asio::error::operation_aborted) return;
      if (stage_running && !c->reported) {
        asio::co_spawn(io, read_stage_result(c), asio::detached);
        return;
      }
      depart(c);  // EOF, a reset, or bytes it had no business sending yet
      close(c);
    });
  }

  // A member's GPU stage results; anything else (or nothing) counts as none.
  awaitable<void> read_stage_result(ConnPtr c) {
    c->reported = true;
    const Member& m = report.members[size_t(c->slot)];
    std::array<uint8_t, kHeaderSize> hdr{};
    std::optional<StageReport> got;
    auto [ec, n] = co_await asio::async_read(c->sock, asio::buffer(hdr), kAwait);
    auto header = ec ? Result<FrameHeader>(Error{ec.message()}) : decode_header(hdr);
    if (header && header->type == uint16_t(MsgType::kStageResult)) {
      std::vector<uint8_t> payload(header->length);
      auto [ec2, n2] = co_await asio::async_read(c->sock, asio::buffer(payload), kAwait);
      if (!ec2) {
        if (auto r = decode_stage_report(payload)) got = std::move(*r);
      }
    }
    if (!got) {
      cfg.log(fmt::format("{} sent no GPU stage result", member_label(m.record)));
      close(c);
    }
    accept_results(m.record, got ? std::move(got->ranks) : std::vector<RankResult>{});
  }

  // Keeps the results for the ranks this member stands for, and no others.
  void accept_results(const Record& rec, std::vector<RankResult> results) {
    if (finalized) return;
    for (RankResult& r : results) {
      if (r.rank >= rec.rank && r.rank <= rec.last_rank()) stage_results.push_back(std::move(r));
    }
    results_expected -= rec.nranks;
    if (results_expected <= 0) finalize();
  }

  // Adds or removes a member's claims on ranks (`by` is +1 or -1).
  void count(const Record& rec, int by, bool master) {
    for (long k = std::max(0, rec.rank); k <= rec.last_rank() && k < cfg.world_size; ++k) {
      uint32_t& n = claims[size_t(k)];
      if (by > 0 && n++ == 0) ++distinct_claimed;
      if (by < 0 && --n == 0) --distinct_claimed;
    }
    joined_ranks += by * rec.nranks;
    if (!master && (world_votes[rec.world_size] += by) == 0) world_votes.erase(rec.world_size);
  }

  int admit(Record rec, std::string peer, ConnPtr conn) {
    double at = now_ms();
    last_join_ms = at;
    count(rec, +1, conn == nullptr);
    tracker.add(rec, peer);
    string_lists.intern(rec.interfaces);
    string_lists.intern(rec.master_resolved);
    envs.intern(rec.env);
    members.push_back(Member{std::move(rec), at, std::move(peer)});
    conns.push_back(std::move(conn));
    return static_cast<int>(members.size() - 1);
  }

  void depart(const ConnPtr& c) {
    if (stage_running && !c->reported && c->slot >= 0) {
      c->reported = true;  // gone mid-stage: its ranks report nothing
      const Member& m = report.members[size_t(c->slot)];
      cfg.log(fmt::format("{} disconnected during the GPU stage", member_label(m.record)));
      accept_results(m.record, {});
      return;
    }
    if (decided || c->slot < 0) return;
    auto i = static_cast<size_t>(c->slot);
    c->slot = -1;
    Member gone = std::move(members[i]);
    members.erase(members.begin() + static_cast<std::ptrdiff_t>(i));
    conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
    for (size_t k = i; k < conns.size(); ++k) {
      if (conns[k] != nullptr) conns[k]->slot = static_cast<int>(k);
    }
    count(gone.record, -1, false);
    tracker.taint();
    cfg.log(fmt::format("{} disconnected before the verdict; joined {}/{}",
                        member_label(gone.record), joined_ranks, cfg.world_size));
    departed.push_back(Departure{std::move(gone.record), gone.joined_ms, now_ms()});
  }

  // ----- deciding ------------------------------------------------------------

  std::vector<long> missing_ranks() const {
    std::vector<long> out;
    for (size_t k = 0; k < claims.size(); ++k) {
      if (claims[k] == 0) out.push_back(long(k));
    }
    return out;
  }

  // Every member but the master claims one smaller world, and all of it is here:
  // the master's WORLD_SIZE is the odd one, and waiting longer cannot help.
  bool smaller_world_complete() const {
    if (world_votes.size() != 1) return false;
    long claim = world_votes.begin()->first;
    if (claim < 1 || claim >= cfg.world_size || distinct_claimed < claim) return false;
    for (long k = 0; k < claim; ++k) {
      if (claims[size_t(k)] == 0) return false;
    }
    return true;
  }

  void maybe_decide() {
    if (decided) return;
    if (joined_ranks >= cfg.world_size || smaller_world_complete()) decide(false);
  }

  void decide(bool timed_out) {
    if (decided) return;
    decided = true;
    auto t0 = Clock::now();
    decide_timer.cancel();
    progress_timer.cancel();

    JobView view;
    view.world_size = cfg.world_size;
    view.job_id = cfg.job_id;
    view.master_addr = cfg.master_addr;
    view.master_host = cfg.master_host;
    view.master_resolved = cfg.master_resolved;
    view.timed_out = timed_out;
    view.gpu_stage = cfg.gpu_stage;
    view.departed = std::move(departed);
    view.refused = std::move(refused);
    view.refused_total = refused_total;
    view.members = std::move(members);
    if (!bound.empty() && acceptors.size() > 0) {
      view.master_port = acceptors.front()->local_endpoint().port();
    }
    if (!tracker.clean()) report.findings = run_checks(view);
    report.job_id = cfg.job_id;
    report.world_size = cfg.world_size;
    report.master_addr = cfg.master_addr;
    report.master_port = view.master_port;
    report.master_host = cfg.master_host;
    report.master_bound = bound;
    report.timed_out = timed_out;
    report.rendezvous_ms = ms_between(cfg.start, t0);

    // Go for the GPU stage only when nothing is wrong: NCCL is never started on a
    // job that would hang.
    std::optional<NcclId> nccl_id;
    if (!cfg.gpu_stage) {
      report.gpu_stage = "not run (--no-gpu)";
    } else if (report.exit_code() != 0) {
      report.gpu_stage = "not run (the rendezvous failed)";
    } else if (auto blocker = gpu_stage_blocker(view.members)) {
      report.gpu_stage = fmt::format("not run ({})", *blocker);
    } else if (auto id = cfg.make_nccl_id ? cfg.make_nccl_id()
                                          : Result<NcclId>(Error{"no NCCL on the master"})) {
      nccl_id = *id;
    } else {
      report.findings.insert(
          report.findings.begin(),
          Finding{"nccl-init-failed", Severity::kError, exit_code::kGpu,
                  fmt::format("ncclGetUniqueId failed on the master ({}): {}",
                              printable(cfg.master_host), id.error().message),
                  "NCCL_DEBUG=INFO on rank 0 shows why; NCCL_SOCKET_IFNAME must name an "
                  "interface rank 0 has",
                  {0},
                  {cfg.master_host}});
      report.gpu_stage = "failed (no NCCL unique id)";
    }
    Verdict base = verdict_base();
    if (nccl_id) {
      base.final = false;
      base.run_gpu = true;
      base.nccl_id = nccl_id;
      stage_ms = double(cfg.stage_by.remaining().count());
      base.stage_ms = static_cast<uint32_t>(stage_ms);
      stage_running = true;
      results_expected = joined_ranks;
      stage_timer.expires_at(cfg.stage_by.when() + Millis(300));
      stage_timer.async_wait([this](std::error_code ec) {
        if (!ec) finalize();
      });
    }

    // What holding the members cost, before the broadcast adds a write to each.
    rusage usage{};
    if (::getrusage(RUSAGE_SELF, &usage) == 0) report.peak_rss_kib = usage.ru_maxrss;
    std::ifstream statm("/proc/self/statm");
    long pages_total = 0;
    long pages_resident = 0;
    if (statm >> pages_total >> pages_resident) {
      report.rss_kib = pages_resident * (::getpagesize() / 1024);
    }
    auto t_decided = Clock::now();
    report.members = std::move(view.members);
    broadcast(base, local_verdict);
    auto t_queued = Clock::now();
    // From the last join (or the deadline) to the verdict; then to every frame queued.
    report.decision_ms =
        timed_out ? ms_between(t0, t_decided) : ms_between(cfg.start, t_decided) - last_join_ms;
    report.broadcast_ms = ms_between(t_decided, t_queued);
    cfg.log(fmt::format(
        "decided at +{} ({}): {}, {}/{} ranks joined", format_seconds(report.rendezvous_ms),
        timed_out ? "deadline reached" : "all joined",
        base.exit_code == 0 ? "PASS" : fmt::format("FAIL (exit {})", base.exit_code), joined_ranks,
        cfg.world_size));
    check_done();
  }

  Verdict verdict_base() const {
    Verdict v;
    v.exit_code = static_cast<uint8_t>(report.exit_code());
    v.headline = headline(report.findings);
    v.joined_ranks = static_cast<uint32_t>(joined_ranks);
    for (const Finding& f : report.findings) (f.is_error() ? v.errors : v.warnings)++;
    return v;
  }

  // Sends `base` to every member, each with the findings that name its ranks;
  // the master's own member gets it through `local`.
  void broadcast(const Verdict& base, std::optional<std::promise<Verdict>>& local) {
    const Bytes shared = std::make_shared<const std::vector<uint8_t>>(encode(base));
    for (size_t i = 0; i < report.members.size(); ++i) {
      const Record& rec = report.members[i].record;
      std::vector<Finding> notes;
      for (const Finding& f : report.findings) {
        auto lo = std::lower_bound(f.ranks.begin(), f.ranks.end(), long(rec.rank));
        if (lo != f.ranks.end() && *lo <= rec.last_rank()) notes.push_back(f);
        if (notes.size() == kMaxVerdictNotes) break;
      }
      const ConnPtr& c = conns[i];
      if (c != nullptr) c->close_after_write = base.final;
      if (c != nullptr && notes.empty()) {
        send(c, shared);
        continue;
      }
      Verdict own = base;
      own.notes = std::move(notes);
      if (c != nullptr) {
        send(c, encode(own));
      } else if (local) {
        local->set_value(std::move(own));
        local.reset();
      }
    }
  }

  // The GPU stage is over (every result in, or its deadline): judge it, send the final verdict.
  void finalize() {
    if (finalized || !stage_running) return;
    finalized = true;
    stage_timer.cancel();
    std::sort(stage_results.begin(), stage_results.end(),
              [](const RankResult& a, const RankResult& b) { return a.rank < b.rank; });
    StageView sv;
    sv.world_size = cfg.world_size;
    sv.members = &report.members;
    sv.results = stage_results;
    sv.stage_ms = stage_ms;
    sv.min_busbw_gbps = cfg.min_busbw_gbps;
    auto found = stage_checks(sv);
    report.findings.insert(report.findings.end(), found.begin(), found.end());
    order_findings(report.findings);
    report.stage_results = std::move(stage_results);
    double init_max = 0;
    double ar_max = 0;
    double busbw = 0;
    for (const RankResult& r : report.stage_results) {
      init_max = std::max(init_max, r.init_ms);
      ar_max = std::max(ar_max, r.allreduce_us);
      if (r.bandwidth_bytes > 0) busbw = r.busbw_gbps;
    }
    report.gpu_stage =
        found.empty() ? fmt::format("passed: NCCL init {} (slowest rank), all-reduce {:.0f} µs{}",
                                    format_seconds(init_max), ar_max,
                                    busbw > 0 ? fmt::format(", bus bandwidth {:.1f} GB/s", busbw)
                                              : std::string())
                      : "failed";
    Verdict base = verdict_base();
    cfg.log(fmt::format("GPU stage over at +{}: {}", format_seconds(now_ms()),
                        base.exit_code == 0 ? "PASS" : fmt::format("FAIL (exit {})", base.exit_code)));
    broadcast(base, local_final);
    stage_running = false;
    check_done();
  }

  void schedule_progress() {
    progress_timer.expires_after(cfg.progress_interval);
    progress_timer.async_wait([this](std::error_code ec) {
      if (ec || decided) return;
      auto missing = missing_ranks();
      cfg.log(fmt::format("joined {}/{}; missing: {} ({} s left)", joined_ranks, cfg.world_size,
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

Result<uint16_t> Server::listen(const std::vector<std::string>& addresses, uint16_t port) {
  for (const std::string& a : addresses) {
    std::error_code ec;
    auto addr = asio::ip::make_address(a, ec);
    if (ec) return Error{fmt::format("{} is not a numeric address", a), int(ListenFault::kOther)};
    tcp::endpoint ep(addr, port);
    auto acc = std::make_unique<tcp::acceptor>(impl_->io);
    acc->open(ep.protocol(), ec);
    if (!ec) acc->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec && addr.is_v6()) acc->set_option(asio::ip::v6_only(true), ec);
    if (!ec) acc->bind(ep, ec);
    if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      ListenFault fault = ec == asio::error::address_in_use ? ListenFault::kInUse
                          : ec.value() == EADDRNOTAVAIL     ? ListenFault::kNotLocal
                                                            : ListenFault::kOther;
      std::string where =
          addr.is_v6() ? fmt::format("[{}]:{}", a, port) : fmt::format("{}:{}", a, port);
      return Error{fmt::format("cannot listen on {}: {}", where, ec.message()), int(fault)};
    }
    port = acc->local_endpoint().port();
    impl_->bound.push_back(a);
    impl_->acceptors.push_back(std::move(acc));
  }
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
    if (s.decided) {
      Verdict v;
      v.exit_code = static_cast<uint8_t>(s.report.exit_code());
      v.headline = headline(s.report.findings);
      p->set_value(v);
      return;
    }
    s.local_verdict.emplace(std::move(*p));
    s.admit(std::move(self), "in-process", nullptr);
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
    const Member* self = nullptr;
    for (size_t i = 0; i < s.report.members.size(); ++i) {
      if (s.conns[i] == nullptr) self = &s.report.members[i];
    }
    if (self != nullptr) s.accept_results(self->record, std::move(results.ranks));
    if (s.finalized && s.local_final) {  // too late: the verdict stands as sent
      Verdict v = s.verdict_base();
      s.local_final->set_value(v);
      s.local_final.reset();
    }
  });
  return f;
}

void Server::decide_now() {
  asio::post(impl_->io, [this] { impl_->decide(true); });
}

Report Server::finish(Deadline deadline) {
  Impl& s = *impl_;
  auto done = s.done.get_future();
  done.wait_until(deadline.when());
  s.io.stop();
  if (s.thread.joinable()) s.thread.join();
  // The server thread has stopped: its state is this thread's now.
  if (!s.decided) s.decide(true);
  if (s.stage_running) s.finalize();
  s.report.total_ms = ms_between(s.cfg.start, Clock::now());
  return s.report;
}

}  // namespace rankcheck
