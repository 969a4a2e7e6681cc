// Simulates many members from one process, for the rendezvous benchmark:
// each connects, takes the challenge, sends a hello, and waits for admit and verdict.
//
//   rankcheck_loadgen PORT FIRST_RANK COUNT WORLD_SIZE [RANKS_PER_HOST [gpu]]
//                     [--token FILE] [--relay] [--no-pace]
//
// With `gpu`, every hello carries the GPU inventory an 8-GPU node's member sends
// (its GPU's UUID, bus id and name, the driver, the NCCL library), so that the
// master's memory is measured as a real job's would be. The master runs --no-gpu
// all the same: it keeps the inventories, and no NCCL stage follows.
//
// --token: hellos are signed and verdicts checked with the job token, as real
// members do. --relay: each simulated host is one relay connection carrying its
// RANKS_PER_HOST members on channels (relay.h), every member's frames its own.
// Members (or relays) pace their first attempts as real ones do when there are more
// of them than the listen backlog holds (first_connect_delay); --no-pace: all at once.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <string_view>
#include <tuple>

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <fmt/format.h>
#include <netinet/in.h>

#include "base/deadline.h"
#include "host/procfs.h"
#include "protocol/messages.h"
#include "rendezvous/member.h"
#include "rendezvous/relay.h"

using namespace rankcheck;
using asio::ip::tcp;
namespace {

constexpr auto kAwait = asio::experimental::as_tuple(asio::use_awaitable);

struct Stats {
  int admitted = 0;
  int verdicts = 0;
  int failed = 0;
  int broken = 0;  // relays whose connection ended before every verdict
  std::map<int, int> exit_codes;
  Clock::time_point first_connect = Clock::time_point::max();
  Clock::time_point last_admit{};
  Clock::time_point last_verdict{};
};

asio::awaitable<std::optional<Frame>> read_frame(tcp::socket& s) {
  std::array<uint8_t, kHeaderSize> hdr{};
  auto [ec, n] = co_await asio::async_read(s, asio::buffer(hdr), kAwait);
  if (ec) co_return std::nullopt;
  auto h = decode_header(hdr);
  if (!h) co_return std::nullopt;
  Frame f{*h, std::vector<uint8_t>(h->length)};
  auto [ec2, n2] = co_await asio::async_read(s, asio::buffer(f.payload), kAwait);
  if (ec2) co_return std::nullopt;
  co_return f;
}

// A relay's frames, read a burst at a time: wait until the socket is readable,
// take what is there into one buffer shared by every simulated relay (there is one
// thread), and split it into frames; only a cut frame's start stays with the relay.
// (Two reads a frame would make the simulator, not the master, the bottleneck.)
struct Burst {
  std::vector<uint8_t> rest;
  std::deque<Frame> ready;
  bool non_blocking = false;
};

asio::awaitable<std::optional<Frame>> next_frame(tcp::socket& s, Burst& b) {
  static std::array<uint8_t, 64 * 1024> scratch;
  bool open = true;
  while (b.ready.empty() && open) {
    auto [ec] = co_await s.async_wait(tcp::socket::wait_read, kAwait);
    if (ec) co_return std::nullopt;
    if (!b.non_blocking) s.non_blocking(true, ec);
    b.non_blocking = true;
    while (true) {
      std::error_code rec;
      size_t got = s.read_some(asio::buffer(scratch), rec);
      if (rec == asio::error::would_block || rec == asio::error::try_again) break;
      if (rec) {
        open = false;
        break;
      }
      b.rest.insert(b.rest.end(), scratch.begin(), scratch.begin() + std::ptrdiff_t(got));
      size_t at = 0;
      while (b.rest.size() - at >= kHeaderSize) {
        auto h = decode_header(std::span(b.rest).subspan(at, kHeaderSize));
        if (!h) co_return std::nullopt;
        if (b.rest.size() - at - kHeaderSize < h->length) break;
        auto body = b.rest.begin() + std::ptrdiff_t(at + kHeaderSize);
        b.ready.push_back(Frame{*h, std::vector<uint8_t>(body, body + h->length)});
        at += kHeaderSize + h->length;
      }
      b.rest.erase(b.rest.begin(), b.rest.begin() + std::ptrdiff_t(at));
      if (got < scratch.size()) break;
    }
  }
  if (b.ready.empty()) co_return std::nullopt;
  Frame f = std::move(b.ready.front());
  b.ready.pop_front();
  co_return f;
}

// What a member of a healthy 8-GPU node finds (the values are typical; the UUID
// is unique per rank).
GpuFacts node_gpu(int rank, int per_host) {
  GpuFacts g;
  g.state = GpuState::kUsable;
  g.cuda_version = 13000;
  g.driver = std::string("580.95.05");
  g.device_count = per_host;
  g.choice = fmt::format("LOCAL_RANK {} of {} visible", rank % per_host, per_host);
  GpuDevice d;
  d.rank = rank;
  d.ordinal = rank % per_host;
  d.uuid = fmt::format("GPU-{:08x}-5e1c-4f5e-9a2b-{:012x}", 0x8f3c0000u + unsigned(rank / per_host),
                       unsigned(rank));
  d.pci_bus_id = fmt::format("00000000:{:02X}:00.0", 0x18 + 0x10 * (rank % per_host));
  d.name = std::string("NVIDIA H200");
  d.memory_bytes = 150754820096ull;
  g.devices.push_back(std::move(d));
  g.nccl_path = std::string("/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2");
  g.nccl_version = 22809;
  return g;
}

struct Options {
  uint16_t port = 0;
  int world = 0;
  int per_host = 8;
  bool gpu = false;
  std::optional<JobToken> token;
  bool relay = false;
  long backlog = 4096;  // this host's net.core.somaxconn: what members pace by
  bool pace = true;     // --no-pace: every first attempt at once
};

Record member_record(const Options& o, int rank) {
  Record r;
  r.version = "0.1.0";
  r.rank = rank;
  r.world_size = o.world;
  r.local_rank = rank % o.per_host;
  r.local_world_size = o.per_host;
  r.host = fmt::format("sim-{:05}", rank / o.per_host);
  r.pid = static_cast<uint32_t>(100000 + rank);
  r.launcher = "torch";
  r.master_addr = "127.0.0.1";
  r.master_port = o.port;
  r.master_resolved = {"127.0.0.1"};
  r.interfaces = {"eth0", "lo"};
  r.env_digest = env_digest(r.env.get());  // none: the benchmark's master runs without NCCL_* too
  if (o.gpu) r.gpu = node_gpu(rank, o.per_host);
  return r;
}

// The hello a member sends on a challenge, and the nonces its verdict's MAC covers.
std::vector<uint8_t> hello_for(const Options& o, int rank, const Challenge& c, Nonce& client) {
  Hello h{member_record(o, rank), {}, {}, {}};
  (void)fill_random(h.client_nonce);
  client = h.client_nonce;
  return o.token ? encode_signed(h, *o.token, c.nonce) : encode(h);
}

void count_verdict(const Options& o, Stats& st, const Frame& f, const Nonce& server,
                   const Nonce& client) {
  auto v = decode_verdict(f.payload);
  bool ok = v && (!o.token || verify_verdict(f.payload, *o.token, server, client, v->final));
  ++st.verdicts;
  st.last_verdict = std::max(st.last_verdict, Clock::now());
  st.exit_codes[ok ? v->exit_code : -1]++;
}

// Connects to the master on loopback, retrying every 20 ms until the deadline.
// Each simulated host connects from an address of its own in 127.0.0.0/8
// (127.2.0.1 on), as hosts do: the master tells sources apart by address, and one
// source address with 16,000 connections would have the kernel search its
// ephemeral ports linearly on every connect (half the simulator's time).
asio::awaitable<bool> connect(tcp::socket& s, uint16_t port, int host, Stats& st,
                              Clock::time_point deadline) {
  asio::steady_timer wait(s.get_executor());
  tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), port);
  tcp::endpoint from(asio::ip::address_v4(0x7f020001u + uint32_t(host)), 0);
  while (true) {
    st.first_connect = std::min(st.first_connect, Clock::now());
    std::error_code ec;
    s.open(tcp::v4(), ec);
    int one = 1;  // the port is chosen at connect, by the whole 4-tuple
    if (!ec) ::setsockopt(s.native_handle(), IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    if (!ec) s.bind(from, ec);
    if (!ec) std::tie(ec) = co_await s.async_connect(ep, kAwait);
    if (!ec) co_return true;
    s.close();
    if (Clock::now() > deadline) co_return false;
    wait.expires_after(Millis(20));
    co_await wait.async_wait(kAwait);
  }
}

// What a member or a relay waits before its first attempt, as a real one would.
asio::awaitable<void> pace(const Options& o, long index, long count) {
  Millis delay = o.pace ? first_connect_delay(index, count, o.backlog) : Millis(0);
  if (delay > Millis(0)) {
    asio::steady_timer t(co_await asio::this_coro::executor, delay);
    co_await t.async_wait(kAwait);
  }
}

asio::awaitable<void> member(const Options& o, int rank, Stats& st, Clock::time_point deadline) {
  tcp::socket s(co_await asio::this_coro::executor);
  co_await pace(o, rank, o.world);
  if (!co_await connect(s, o.port, rank / o.per_host, st, deadline)) {
    ++st.failed;
    co_return;
  }
  auto challenge = co_await read_frame(s);
  std::optional<Challenge> c;
  if (challenge) {
    if (auto d = decode_challenge(challenge->payload)) c = *d;
  }
  if (!c) {
    ++st.failed;
    co_return;
  }
  Nonce client{};
  auto hello = hello_for(o, rank, *c, client);
  auto [ec, n] = co_await asio::async_write(s, asio::buffer(hello), kAwait);
  if (ec) {
    ++st.failed;
    co_return;
  }
  // (No co_await inside a conditional expression: GCC 12 miscompiles it.)
  auto admit = co_await read_frame(s);
  if (!admit || admit->header.type != uint16_t(MsgType::kAdmit)) {
    ++st.failed;
    co_return;
  }
  ++st.admitted;
  st.last_admit = std::max(st.last_admit, Clock::now());
  auto verdict = co_await read_frame(s);
  if (!verdict) {
    ++st.failed;
    co_return;
  }
  count_verdict(o, st, *verdict, c->nonce, client);
}

// One simulated host: a relay's connection carrying its members on channels.
asio::awaitable<void> relay(const Options& o, int first_rank, int count, Stats& st,
                            Clock::time_point deadline) {
  tcp::socket s(co_await asio::this_coro::executor);
  Burst burst;
  auto fail = [&st, count] { st.failed += count; };
  co_await pace(o, first_rank / o.per_host, o.world / o.per_host);
  if (!co_await connect(s, o.port, first_rank / o.per_host, st, deadline)) co_return fail();
  auto challenge = co_await next_frame(s, burst);
  std::optional<Challenge> c;
  if (challenge) {
    if (auto d = decode_challenge(challenge->payload)) c = *d;
  }
  if (!c) co_return fail();
  RelayHello rh{
      fmt::format("sim-{:05}", first_rank / o.per_host), uint32_t(100000 + first_rank), {}, {}, {}};
  (void)fill_random(rh.client_nonce);
  auto hello = o.token ? encode_signed(rh, *o.token, c->nonce) : encode(rh);
  auto [ec, n] = co_await asio::async_write(s, asio::buffer(hello), kAwait);
  if (ec) co_return fail();
  auto admit = co_await next_frame(s, burst);
  if (!admit || admit->header.type != uint16_t(MsgType::kAdmit)) co_return fail();
  // Every member's channel at once, as a host's members arrive together.
  std::vector<uint8_t> opens;
  for (int k = 1; k <= count; ++k) {
    auto f = encode_channel(uint32_t(k), ChannelOp::kOpen);
    opens.insert(opens.end(), f.begin(), f.end());
  }
  auto [ec2, n2] = co_await asio::async_write(s, asio::buffer(opens), kAwait);
  if (ec2) co_return fail();
  struct Channel {
    Nonce server{};
    Nonce client{};
    bool admitted = false;
    bool done = false;
  };
  std::vector<Channel> ch(size_t(count) + 1);
  std::vector<uint8_t> hellos;  // answers to the challenges read so far, not yet sent
  int done = 0;
  while (done < count) {
    // The hellos answering one burst of challenges go out together, before waiting
    // for more: a relay's members arrive together.
    if (!hellos.empty() && burst.ready.empty()) {
      auto [wec, wn] = co_await asio::async_write(s, asio::buffer(hellos), kAwait);
      if (wec) break;
      hellos.clear();
    }
    auto f = co_await next_frame(s, burst);
    if (!f || f->header.type != uint16_t(MsgType::kChannel)) {
      if (++st.broken <= 3) {
        std::fprintf(stderr,
                     "loadgen: the relay of sim-%05d: its connection ended after %d of %d "
                     "verdicts\n",
                     first_rank / o.per_host, done, count);
      }
      break;
    }
    auto cf = decode_channel(f->payload);
    if (!cf || cf->channel == 0 || cf->channel > uint32_t(count) || cf->op != ChannelOp::kData ||
        cf->frame.size() < kHeaderSize) {
      if (++st.broken <= 3) {
        std::fprintf(stderr, "loadgen: the relay of sim-%05d: an unexpected channel frame (%s)\n",
                     first_rank / o.per_host,
                     cf ? fmt::format("channel {}, op {}", cf->channel, int(cf->op)).c_str()
                        : cf.error().message.c_str());
      }
      break;
    }
    Channel& m = ch[cf->channel];
    auto h = decode_header(std::span(cf->frame).first(kHeaderSize));
    if (!h) break;
    auto payload = std::span(cf->frame).subspan(kHeaderSize);
    int rank = first_rank + int(cf->channel) - 1;
    if (h->type == uint16_t(MsgType::kChallenge)) {
      auto cc = decode_challenge(payload);
      if (!cc) break;
      m.server = cc->nonce;
      auto mine = encode_channel(cf->channel, ChannelOp::kData, hello_for(o, rank, *cc, m.client));
      hellos.insert(hellos.end(), mine.begin(), mine.end());
    } else if (h->type == uint16_t(MsgType::kAdmit)) {
      m.admitted = true;
      ++st.admitted;
      st.last_admit = std::max(st.last_admit, Clock::now());
    } else if (h->type == uint16_t(MsgType::kVerdict) && !m.done) {
      m.done = true;
      ++done;
      count_verdict(o, st, Frame{*h, std::vector<uint8_t>(payload.begin(), payload.end())},
                    m.server, m.client);
    }
  }
  st.failed += count - done;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> pos;
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--relay") {
      o.relay = true;
    } else if (a == "--no-pace") {
      o.pace = false;
    } else if (a == "--token" && i + 1 < argc) {
      auto t = JobToken::load(argv[++i]);
      if (!t) {
        std::fprintf(stderr, "loadgen: %s\n", t.error().message.c_str());
        return 2;
      }
      o.token = std::move(*t);
    } else {
      pos.emplace_back(a);
    }
  }
  if (pos.size() < 4) {
    std::fprintf(stderr,
                 "usage: %s PORT FIRST_RANK COUNT WORLD_SIZE [RANKS_PER_HOST [gpu]] [--token FILE] "
                 "[--relay] [--no-pace]\n",
                 argv[0]);
    return 2;
  }
  o.port = static_cast<uint16_t>(std::atoi(pos[0].c_str()));
  int first = std::atoi(pos[1].c_str());
  int count = std::atoi(pos[2].c_str());
  o.world = std::atoi(pos[3].c_str());
  o.per_host = std::max(1, pos.size() > 4 ? std::atoi(pos[4].c_str()) : 8);
  o.gpu = pos.size() > 5 && pos[5] == "gpu";
  o.backlog = ProcFs{}.somaxconn().value_or(4096);
  asio::io_context io(1);
  Stats st;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  // Members start in batches, the event loop serving those already connected in
  // between: real members are processes of their own, and none waits for the
  // others to have called connect() before it reads its challenge.
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        if (o.relay) {
          // Whole hosts: the first simulated host may be short (rank 0's is the master's).
          int i = 0;
          for (int hosts = 0; i < count; ++hosts) {
            int rank = first + i;
            int n = std::min(count - i, o.per_host - rank % o.per_host);
            asio::co_spawn(ex, relay(o, rank, n, st, deadline), asio::detached);
            i += n;
            if (hosts % 64 == 63) co_await asio::post(ex, asio::use_awaitable);
          }
          co_return;
        }
        for (int i = 0; i < count; ++i) {
          asio::co_spawn(ex, member(o, first + i, st, deadline), asio::detached);
          if (i % 256 == 255) co_await asio::post(ex, asio::use_awaitable);
        }
      },
      asio::detached);
  io.run_for(std::chrono::seconds(90));
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  std::string codes;
  for (auto [code, n] : st.exit_codes)
    codes += fmt::format(" {}x exit {}", n, code);
  std::printf("loadgen: %d members: %d admitted in %.1f ms, %d verdicts by %.1f ms,%s, %d failed\n",
              count, st.admitted, ms(st.first_connect, st.last_admit), st.verdicts,
              ms(st.first_connect, st.last_verdict), codes.c_str(), st.failed);
  return st.failed == 0 && st.verdicts == count ? 0 : 1;
}
