#include "rendezvous/member_run.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "base/interrupt.h"
#include "base/text.h"
#include "rules/self.h"

namespace rankcheck {

HostRelay::~HostRelay() {
  // Interrupted: at once; its members join the master directly.
  if (relay_) relay_->finish(interrupted() ? Deadline::after(Millis(0)) : finish_by_);
}

HostRelay start_host_relay(const Record& self, JoinOptions& join, const Timeline& time,
                           long backlog) {
  RelayOptions ro;
  ro.endpoint = relay_endpoint(join.master_addr, join.master_port, self.job_id, join.token);
  ro.master_addr = join.master_addr;
  ro.master_port = join.master_port;
  ro.host = self.host;
  ro.pid = self.pid;
  ro.job_id = self.job_id;
  ro.token = join.token;
  ro.give_up = time.end();
  ro.stop_by = time.relay_until();
  ro.handshake = join.handshake;
  // One connection a host: paced by the host's place among the job's hosts.
  long per_host = std::max<long>(1, self.local_world_size);
  ro.first_delay = first_connect_delay(self.rank / per_host, self.world_size / per_host, backlog);
  ro.log = join.log;
  std::string why;
  std::unique_ptr<Relay> relay = Relay::start(ro, &why);
  if (relay) join.log(fmt::format("relaying this host's members to the master (@{})", ro.endpoint));
  if (why.empty()) join.relay = ro.endpoint;  // ours, or another member's
  if (!why.empty()) join.log(why + "; joining the master directly");
  return HostRelay(std::move(relay), time.relay_until());
}

namespace {

std::string master_name(const JoinOptions& join) {
  return fmt::format("{}:{}", printable(join.master_addr), join.master_port);
}

// Every progress interval while a member waits for its verdict, a line: how many
// had joined when it did, and the time left. The master's own progress line (in
// rank 0's log) names the ranks it still waits for; the members print their own
// time left instead of being sent it, which would be a frame to every member every
// interval (100k of them through the relays) and a change of the wire.
WaitProgress waiting(const Record& self, const MemberRun& run, const JoinResult& joined) {
  std::string label =
      fmt::format("{} ({})", span_label(self.rank, self.nranks), printable(self.host, 64));
  long world = joined.admit.world_size;
  std::string when = fmt::format("{}/{} ranks had joined when it did", joined.admit.joined_ranks,
                                 joined.admit.world_size);
  return {run.join.progress_interval,
          [label, when, world, end = run.time.end(), log = run.join.log] {
            log(
                fmt::format("{} waiting for the master's verdict ({}): it decides once all {} "
                            "have joined, or at the deadline; {} s left (rank 0's log names "
                            "the ranks missing)",
                            label, when, world, end.seconds_left()));
          }};
}

// Joins, and waits for the first verdict (rehearsing the master's plan on the way).
// A relay that dies before the verdict: the master takes this process back directly.
Result<Verdict> join_and_wait(Record& self, MemberRun& run, JoinResult& joined,
                              MemberOutcome& out) {
  Deadline verdict_by = run.time.verdict_by();
  for (int attempt = 0;; ++attempt) {
    joined = join_master(self, run.join);
    if (interrupted()) {
      out.interrupted = true;
      return Error{"interrupted", Fault::kInterrupted};
    }
    if (joined.failure) {
      out.failure = std::move(joined.failure);
      return Error{"not joined", Fault::kClosed};
    }
    if (attempt == 0) {
      run.join.log(fmt::format("joined {}:{} ({}/{} ranks so far)", run.join.master_addr,
                               run.join.master_port, joined.admit.joined_ranks,
                               joined.admit.world_size));
    }
    auto verdict = wait_verdict(joined.socket, verdict_by, joined, run.join.token,
                                VerdictWait::kFirst, run.rehearse, waiting(self, run, joined));
    bool relay_died = attempt == 0 && !verdict && joined.relayed &&
                      verdict.error().fault == Fault::kClosed && !interrupted();
    if (!relay_died) return verdict;
    run.join.log("this host's relay closed before the verdict; joining the master directly");
    run.join.relay.clear();
  }
}

}  // namespace

MemberOutcome member_protocol(Record& self, MemberRun& run) {
  MemberOutcome out;
  JoinResult joined;
  auto verdict = join_and_wait(self, run, joined, out);
  if (out.interrupted || out.failure) return out;
  out.admit = joined.admit;
  if (verdict && !verdict->final && verdict->run_gpu && verdict->nccl_id) {
    StageReport results = run.run_stage(*verdict);
    const JobToken* token = run.join.token;
    auto frame = token ? encode_signed(results, *token, joined.server_nonce, joined.client_nonce)
                       : encode(results);
    auto sent = joined.socket.write_all(frame, Deadline::after(timing::kResultsSendTime));
    if (!sent) run.join.log("sending the GPU stage results: " + sent.error().message);
    verdict =
        wait_verdict(joined.socket, run.time.verdict_by(), joined, token, VerdictWait::kFinal);
  }
  out.socket = std::move(joined.socket);
  if (interrupted()) {
    out.interrupted = true;
  } else if (verdict) {
    out.verdict = std::move(*verdict);
  } else {
    out.failure = verdict_not_received(self, master_name(run.join), verdict.error());
  }
  return out;
}

void await_report(MemberOutcome& outcome, const Timeline& time,
                  const std::function<void(const std::string&)>& log) {
  std::fflush(stdout);
  if (!await_master_close(outcome.socket,
                          Deadline::after(timing::kReportWait).sooner(time.verdict_by()))) {
    log("rank 0 had not printed its report by the deadline; exiting");
  }
}

}  // namespace rankcheck
