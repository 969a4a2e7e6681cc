// The rehearsal of NCCL's connections at scale, on one machine: N simulated hosts,
// each a listener on its own loopback address (127.1.x.y), each probing its part
// of the plan as the members would, all at once.
//   rankcheck_bench_rehearsal HOSTS [--json]

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "model/path.h"
#include "rehearsal/plan.h"
#include "rehearsal/probe.h"

using namespace rankcheck;

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  size_t hosts = std::stoul(argv[1]);
  bool json = argc > 2 && std::strcmp(argv[2], "--json") == 0;
  std::vector<std::unique_ptr<PathListener>> listeners;
  std::vector<PathTarget> target(hosts);
  for (size_t h = 0; h < hosts; ++h) {
    std::string addr = fmt::format("127.1.{}.{}", h / 250, h % 250 + 1);
    std::string id = path_identity(fmt::format("h{}", h), "bench");
    auto l = PathListener::open(addr, "lo", id, nullptr);
    if (!l) {
      std::fprintf(stderr, "%s\n", l.error().message.c_str());
      return 1;
    }
    target[h] = {uint32_t(h), addr, "lo", (*l)->port(), id};
    listeners.push_back(std::move(*l));
  }
  auto t0 = Clock::now();
  std::vector<PathEdge> plan = rehearsal_plan(hosts, 42);
  std::vector<std::vector<PathTarget>> per(hosts);
  for (const PathEdge& e : plan)
    per[e.from].push_back(target[e.to]);
  double plan_ms = ms_between(t0, Clock::now());
  size_t most = 0;
  for (const auto& p : per)
    most = std::max(most, p.size());
  // Every host probes at once, as the members do (a thread each, 32 in flight each).
  std::atomic<size_t> ok{0};
  std::vector<double> took(hosts);
  std::vector<std::map<std::string, size_t>> failed(hosts);  // outcome and detail: how many
  auto t1 = Clock::now();
  std::vector<std::thread> threads;
  for (size_t h = 0; h < hosts; ++h) {
    threads.emplace_back([&, h] {
      auto s = Clock::now();
      auto rs = probe_paths(uint32_t(h), target[h].identity, per[h], Millis(2000), 32,
                            Deadline::after(Millis(20000)), nullptr);
      for (const PathResult& r : rs) {
        ok += r.outcome == PathOutcome::kOk;
        if (r.outcome != PathOutcome::kOk) {
          ++failed[h][fmt::format("{}{}{}", outcome_text(r.outcome), r.detail.empty() ? "" : ": ",
                                  r.detail)];
        }
      }
      took[h] = ms_between(s, Clock::now());
    });
  }
  for (auto& t : threads)
    t.join();
  double wall_ms = ms_between(t1, Clock::now());
  double slowest = *std::max_element(took.begin(), took.end());
  // A failed run says what its failed connections found (on stderr: the figures stay one line).
  std::map<std::string, size_t> why;
  for (const auto& f : failed)
    for (const auto& [what, n] : f)
      why[what] += n;
  for (const auto& [what, n] : why)
    std::fprintf(stderr, "  %zu connection(s): %s\n", n, what.c_str());
  if (json) {
    std::printf(
        "{\"scenario\": \"rehearsal\", \"ranks\": null, \"hosts\": %zu, \"verdict\": \"%s\", "
        "\"rendezvous_ms\": null, \"verdict_at_all_ms\": null, \"master_peak_kib\": null, "
        "\"master_connections\": null, \"connections\": %zu, \"connected\": %zu, "
        "\"max_per_host\": %zu, \"plan_ms\": %.3f, \"wall_ms\": %.1f, "
        "\"slowest_host_ms\": %.1f}\n",
        hosts, ok.load() == plan.size() ? "pass" : "fail", plan.size(), ok.load(), most, plan_ms,
        wall_ms, slowest);
  } else {
    std::printf(
        "%zu hosts: %zu connections (at most %zu from one host), %zu connected; plan "
        "%.2f ms, rehearsal %.1f ms (slowest host %.1f ms)\n",
        hosts, plan.size(), most, ok.load(), plan_ms, wall_ms, slowest);
  }
  return ok.load() == plan.size() ? 0 : 1;
}
