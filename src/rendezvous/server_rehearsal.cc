// The master's side of the rehearsal of NCCL's connections: once every rank is in
// and nothing is wrong, one member per host is sent the connections to try (the
// master's own host's are tried here, on a thread), the reports are read, and
// what they mean leads the decision.

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "base/text.h"
#include "rendezvous/server_impl.h"
#include "rules/paths.h"

namespace rankcheck {
namespace {

// NCCL waits up to its socket retries per connect; the rehearsal gives each
// cfg.rehearsal_per_connection (--rehearsal-timeout, 2 s).
constexpr size_t kInFlight = 32;
constexpr Millis kSlack{300};  // for the reports to travel back

uint64_t seed_of(std::string_view job) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : job)
    h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

}  // namespace

bool Server::Impl::start_rehearsal(bool timed_out) {
  rehearsal.done = true;  // once, whatever happens
  if (timed_out || !state.ready() || !state.would_pass()) return false;
  // One prober per host: the lowest rank there with a listener; hosts in rank order.
  const std::vector<Member>& ms = state.members();
  std::map<std::string_view, size_t> best;  // host -> member index
  for (size_t i = 0; i < ms.size(); ++i) {
    const Record& r = ms[i].record;
    if (r.nccl_if->state != NcclIfFacts::kFound || r.nccl_if->listen_port == 0) continue;
    auto [it, fresh] = best.try_emplace(r.host.str(), i);
    if (!fresh && r.rank < ms[it->second].record.rank) it->second = i;
  }
  if (best.size() < 2) return false;  // one host: NCCL connects nowhere else
  std::vector<size_t> prober;
  for (const auto& [host, i] : best)
    prober.push_back(i);
  std::sort(prober.begin(), prober.end(),
            [&ms](size_t a, size_t b) { return ms[a].record.rank < ms[b].record.rank; });
  const size_t n = prober.size();
  Rehearsal& R = rehearsal;
  R.hosts.clear();
  std::vector<PathTarget> target_of(n);
  std::vector<std::string> identity(n);
  for (size_t h = 0; h < n; ++h) {
    const Record& r = ms[prober[h]].record;
    const NcclIfFacts& f = r.nccl_if;
    R.hosts.push_back({r.host.str(), f.name.str(), f.address.str(), f.port_lo, f.port_hi});
    identity[h] = path_identity(r.host, f.netns);
    target_of[h] = {uint32_t(h), f.address.str(), f.name.str(), f.listen_port, identity[h]};
  }
  R.plans.assign(n, {});
  R.results.clear();
  for (const PathEdge& e : rehearsal_plan(n, seed_of(cfg.master.job_id))) {
    // A ticket per question: the listener answers only what this master asked of it.
    PathTarget t = target_of[e.to];
    if (!fill_random(t.nonce)) return false;
    if (cfg.token) t.ticket = path_ticket(*cfg.token, t.nonce, t.identity);
    R.plans[e.from].push_back(std::move(t));
    R.results.push_back({e, PathOutcome::kNotRun, 0, ""});
  }
  size_t most = 0;
  for (const auto& p : R.plans)
    most = std::max(most, p.size());
  // Every connection within its own deadline, a bounded number at once, all
  // before the decision's deadline (which also ends a rehearsal still running).
  const Millis per_connection = cfg.rehearsal_per_connection;
  Millis rounds = per_connection * long((most + kInFlight - 1) / kInFlight);
  Deadline by = Deadline::after(rounds + kSlack).sooner(cfg.decide_by);
  if (by.remaining() < kSlack) return false;
  Millis total = std::max(Millis(0), by.remaining() - kSlack);
  R.running = true;
  R.timed_out = timed_out;
  R.waiting = n;
  R.reported.assign(n, false);
  R.unproven.clear();
  R.started = Clock::now();
  log(fmt::format("rehearsing NCCL's connections: {} between {} hosts ({} at most)",
                  R.results.size(), n, format_seconds(double(total.count()))));
  for (size_t h = 0; h < n; ++h) {
    PathPlan plan;
    plan.self_host = uint32_t(h);
    plan.self_identity = identity[h];
    plan.per_conn_ms = uint32_t(per_connection.count());
    plan.total_ms = uint32_t(total.count());
    plan.in_flight = uint32_t(kInFlight);
    plan.targets = R.plans[h];
    const ConnPtr& c = conns[prober[h]];
    if (c == nullptr) {
      // The master's own host: probed here, on a thread, reported through the io.
      const JobToken* token = cfg.token ? &*cfg.token : nullptr;
      local_probe = std::thread([this, h, plan = std::move(plan), token, total] {
        auto results =
            probe_paths(plan.self_host, plan.self_identity, plan.targets, Millis(plan.per_conn_ms),
                        plan.in_flight, Deadline::after(total), token);
        asio::post(io, [this, h, results = std::move(results)]() mutable {
          path_report(h, std::move(results));
        });
      });
    } else {
      c->path_host = int(h);
      send(c, cfg.token ? encode_signed(plan, *cfg.token, c->server_nonce, c->client_nonce)
                        : encode(plan));
    }
  }
  rehearsal_timer.expires_at(by.when());
  rehearsal_timer.async_wait([this](std::error_code ec) {
    if (!ec && rehearsal.running) end_rehearsal();
  });
  return true;
}

awaitable<void> Server::Impl::read_path_report(ConnPtr c) {
  size_t host = size_t(c->path_host);
  c->path_host = -1;
  std::optional<PathReport> got;
  auto header = co_await read_header(c->sock);
  if (header && header->type == uint16_t(MsgType::kPathReport)) {
    auto payload = co_await read_payload(c->sock, *header);
    if (payload) got = take_path_report(c, header->type, *payload);
  }
  path_report_in(c, host, std::move(got));
}

std::optional<PathReport> Server::Impl::take_path_report(const ConnPtr& c, uint16_t type,
                                                         std::span<const uint8_t> payload) {
  if (type != uint16_t(MsgType::kPathReport)) return std::nullopt;
  auto r = decode_path_report(payload);
  if (!r) return std::nullopt;
  if (cfg.token && !verify_path_report(payload, *cfg.token, c->server_nonce, c->client_nonce)) {
    // Rewritten on the way, or not the admitted member's: it says nothing of the paths.
    if (c->slot >= 0) {
      log(
          fmt::format("{}: its report of its connections does not carry this job's token "
                      "(rewritten on the way?): not taken",
                      member_label(state.members()[size_t(c->slot)].record)));
    }
    return std::nullopt;
  }
  return std::move(*r);
}

void Server::Impl::path_report_in(const ConnPtr& c, size_t host, std::optional<PathReport> got) {
  if (!got && c->slot >= 0) {
    log(fmt::format("{}: no readable report of its connections",
                    member_label(state.members()[size_t(c->slot)].record)));
  }
  if (got) {
    watch(c);
  } else if (!rehearsal.running || state.decided()) {
    return;
  }
  if (!got && host < rehearsal.hosts.size() && !rehearsal.reported[host]) {
    rehearsal.unproven.push_back(rehearsal.hosts[host].name);
  }
  path_report(host, got ? std::move(got->results) : std::vector<PathResult>{});
  if (!got) {
    depart(c);
    close(c);
  }
}

void Server::Impl::path_report(size_t host, std::vector<PathResult> results) {
  Rehearsal& R = rehearsal;
  if (!R.running || host >= R.reported.size() || R.reported[host]) return;
  R.reported[host] = true;
  // Results for this host's plan, matched by target: a member cannot report on
  // connections it was not asked to make.
  for (PathResult& mine : R.results) {
    if (mine.edge.from != host) continue;
    for (const PathResult& got : results) {
      if (got.edge.to == mine.edge.to) {
        mine.outcome = got.outcome;
        mine.connect_us = got.connect_us;
        mine.detail = got.detail;
        break;
      }
    }
  }
  if (--R.waiting == 0) end_rehearsal();
}

void Server::Impl::end_rehearsal() {
  Rehearsal& R = rehearsal;
  if (!R.running) return;
  R.running = false;
  rehearsal_timer.cancel();
  for (const ConnPtr& c : conns) {
    if (c != nullptr) c->path_host = -1;
  }
  std::vector<Finding> findings = attribute_paths(R.hosts, R.results, R.unproven);
  std::vector<PathTried> paths;
  size_t ok = 0;
  for (const PathResult& r : R.results) {
    ok += r.outcome == PathOutcome::kOk;
    paths.push_back({R.hosts[r.edge.from].name, R.hosts[r.edge.to].name,
                     std::string(outcome_text(r.outcome)), double(r.connect_us) / 1000.0});
  }
  double ms = ms_between(R.started, Clock::now());
  log(fmt::format("rehearsed NCCL's connections in {}: {} of {} connected{}", format_seconds(ms),
                  ok, R.results.size(),
                  findings.empty()
                      ? std::string()
                      : fmt::format("; {}", printable(findings.front().message, 200))));
  state.set_paths(std::move(findings), std::move(paths), ms);
  decide(R.timed_out);
}

}  // namespace rankcheck
