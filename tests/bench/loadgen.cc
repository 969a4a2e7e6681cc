// Simulates many members from one process, for the rendezvous benchmark:
// each connects, takes the challenge, sends a hello, and waits for admit and verdict.
//
//   rankcheck_loadgen PORT FIRST_RANK COUNT WORLD_SIZE [RANKS_PER_HOST [gpu]]
//
// With `gpu`, every hello carries the GPU inventory an 8-GPU node's member sends
// (its GPU's UUID, bus id and name, the driver, the NCCL library), so that the
// master's memory is measured as a real job's would be. The master runs --no-gpu
// all the same: it keeps the inventories, and no NCCL stage follows.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string_view>

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <fmt/format.h>

#include <rankcheck/deadline.h>
#include <rankcheck/protocol.h>

using namespace rankcheck;
using asio::ip::tcp;
namespace {

constexpr auto kAwait = asio::experimental::as_tuple(asio::use_awaitable);

struct Stats {
  int admitted = 0;
  int verdicts = 0;
  int failed = 0;
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

asio::awaitable<void> member(uint16_t port, int rank, int world, int per_host, bool gpu, Stats& st,
                             Clock::time_point deadline) {
  auto ex = co_await asio::this_coro::executor;
  tcp::socket s(ex);
  asio::steady_timer wait(ex);
  tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), port);
  while (true) {
    st.first_connect = std::min(st.first_connect, Clock::now());
    auto [ec] = co_await s.async_connect(ep, kAwait);
    if (!ec) break;
    s.close();
    if (Clock::now() > deadline) {
      ++st.failed;
      co_return;
    }
    wait.expires_after(Millis(20));
    co_await wait.async_wait(kAwait);
  }
  auto challenge = co_await read_frame(s);
  if (!challenge) {
    ++st.failed;
    co_return;
  }
  Record r;
  r.version = "0.1.0";
  r.rank = rank;
  r.world_size = world;
  r.local_rank = rank % per_host;
  r.local_world_size = per_host;
  r.host = fmt::format("sim-{:05}", rank / per_host);
  r.pid = static_cast<uint32_t>(100000 + rank);
  r.launcher = "torch";
  r.master_addr = "127.0.0.1";
  r.master_port = port;
  r.master_resolved = {"127.0.0.1"};
  r.interfaces = {"eth0", "lo"};
  r.env_digest = env_digest(r.env.get());  // none: the benchmark's master runs without NCCL_* too
  if (gpu) r.gpu = node_gpu(rank, per_host);
  auto hello = encode(Hello{r, {}, {}});
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
  auto v = decode_verdict(verdict->payload);
  ++st.verdicts;
  st.last_verdict = std::max(st.last_verdict, Clock::now());
  st.exit_codes[v ? v->exit_code : -1]++;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s PORT FIRST_RANK COUNT WORLD_SIZE [RANKS_PER_HOST [gpu]]\n",
                 argv[0]);
    return 2;
  }
  auto port = static_cast<uint16_t>(std::atoi(argv[1]));
  int first = std::atoi(argv[2]);
  int count = std::atoi(argv[3]);
  int world = std::atoi(argv[4]);
  int per_host = std::max(1, argc > 5 ? std::atoi(argv[5]) : 8);
  bool gpu = argc > 6 && std::string_view(argv[6]) == "gpu";
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
        for (int i = 0; i < count; ++i) {
          asio::co_spawn(ex, member(port, first + i, world, per_host, gpu, st, deadline),
                         asio::detached);
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
