#include "rendezvous/member.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <random>

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/interrupt.h"
#include "base/text.h"
#include "host/interfaces.h"
#include "host/resolve.h"
#include "rendezvous/relay.h"
#include "rules/rules.h"
#include "rules/self.h"

namespace rankcheck {
namespace {

// Sleeps until the deadline, waking early on a signal.
void nap(Deadline until) {
  while (!until.expired() && !interrupted()) {
    pollfd p{interrupt_fd(), POLLIN, 0};
    ::poll(&p, interrupt_fd() >= 0 ? 1 : 0, until.poll_ms(Millis(200)));
  }
}

enum class Step { kRetry, kJoined, kFatal, kRelayGone };

// What a member's last attempt met, in words the fix recognises.
constexpr std::string_view kNotMaster = "but is not a rankcheck master";
constexpr std::string_view kNoChallenge = "sent no challenge";

// MASTER_ADDR resolved to loopback on a host that is not rank 0's.
bool loopback_master(const Record& self) {
  if (self.master_resolved.empty() || self.rank == 0) return false;
  for (const auto& a : self.master_resolved) {
    if (!is_loopback_address(a)) return false;
  }
  return spans_hosts(self);
}

// The handshake on a connection: challenge, hello, admit.
// What a master's reject means for this member: most end its run (another job's
// master, a late or extra copy, another build, a token that does not match); a busy
// master is tried again.
Step refused(const Reject& reject, const std::string& where, const Record& self, JoinResult& out,
             std::string& last_error) {
  std::string reason = printable(reject.reason, 300);
  switch (reject.code) {
    case RejectCode::kForeignJob:
      out.failure =
          self_failure(self, FindingId::kForeignJob,
                       fmt::format("the master at {} refused this member: {}", where, reason),
                       "give each job its own MASTER_PORT, and the same job id to every "
                       "process of a job");
      return Step::kFatal;
    case RejectCode::kLate:
      if (reject.reason.find(kJobWasComplete) != std::string::npos) {
        // Every rank had joined: this process is one too many, not a slow one.
        out.failure = self_failure(
            self, FindingId::kLateJoin,
            fmt::format("the master at {} had already decided: {}", where, reason),
            fmt::format("every rank of the job had joined without this process: it is an extra "
                        "copy of rank {} (a second launch of the job, a retry loop, a requeue): "
                        "check what started it on {}",
                        self.rank, printable(self.host)));
        return Step::kFatal;
      }
      out.failure =
          self_failure(self, FindingId::kLateJoin,
                       fmt::format("the master at {} had already decided: {}", where, reason),
                       "raise --timeout, or find why this host started late");
      return Step::kFatal;
    case RejectCode::kVersion:
      out.failure =
          self_failure(self, FindingId::kProtocolMismatch,
                       fmt::format("the master at {} refused this member: {}", where, reason),
                       "run the same rankcheck build on every host");
      return Step::kFatal;
    case RejectCode::kBusy:
      last_error = fmt::format("{} is busy: {}", where, reason);
      return Step::kRetry;
    case RejectCode::kAuth:
      out.failure =
          self_failure(self, FindingId::kAuthFailed,
                       fmt::format("the master at {} refused this member: {}", where, reason),
                       "give every process of the job the same --token-file (or "
                       "RANKCHECK_TOKEN_FILE)");
      return Step::kFatal;
    case RejectCode::kMalformed:
      break;
  }
  out.failure =
      self_failure(self, FindingId::kProtocolMismatch,
                   fmt::format("the master at {} refused this member's hello: {}", where, reason),
                   "run the same rankcheck build on every host");
  return Step::kFatal;
}

Step handshake(Socket sock, const std::string& where, Record& self, const JoinOptions& o,
               JoinResult& out, std::string& last_error, Result<Frame> frame);

// One attempt on one address: connect, then the handshake.
Step attempt(const std::string& addr, Record& self, const JoinOptions& o, JoinResult& out,
             std::string& last_error) {
  // Name the address only when MASTER_ADDR is a name that resolved to it.
  std::string where = endpoint(addr, o.master_port);
  std::string via = addr == o.master_addr ? "" : fmt::format("via {}: ", addr);
  auto sock = Socket::connect(addr, o.master_port, o.give_up.sooner(Deadline::after(Millis(2000))));
  if (!sock) {
    last_error = via + sock.error().message;
    return Step::kRetry;
  }
  // Once connected, the handshake may run a little past give_up: a master answers in
  // milliseconds, and a late member is better told so than left guessing.
  Deadline hs = Deadline::after(o.handshake).sooner(o.give_up.extended(Millis(250)));
  uint16_t peer_version = 0;
  auto frame = sock->read_frame(hs, &peer_version);
  if (!frame && frame.error().fault == Fault::kOtherVersion) {
    out.failure = self_failure(self, FindingId::kProtocolMismatch,
                               fmt::format("the master at {} speaks rankcheck protocol version {}, "
                                           "this rankcheck speaks {}",
                                           where, peer_version, kProtocolVersion),
                               "run the same rankcheck build on every host");
    return Step::kFatal;
  }
  return handshake(std::move(*sock), where, self, o, out, last_error, std::move(frame));
}

// One attempt through this host's relay: kRelayGone when there is none to use
// (it died, stood down, or is another user's), and the member goes directly.
Step attempt_relay(Record& self, const JoinOptions& o, JoinResult& out, std::string& last_error,
                   Clock::time_point& next_progress, const std::string& label) {
  auto sock = Socket::connect_abstract(o.relay);
  if (!sock) return Step::kRelayGone;
  if (sock->peer_uid() != long(::geteuid())) return Step::kRelayGone;
  std::string where =
      fmt::format("{} (through this host's relay)", endpoint(o.master_addr, o.master_port));
  // With a job token, the relay proves it first: a process that took the name
  // without the token carries nobody (the member goes to the master directly), and
  // one that gives no proof is said, so that a squatter's name is never taken in
  // silence: a wrong proof, or a hang-up before or after the ask.
  auto unproven = [&](std::string_view why) {
    o.log(
        fmt::format("this host's relay (@{}) did not prove this job's token{}: joining the "
                    "master directly",
                    printable(o.relay, 120), why.empty() ? "" : fmt::format(" ({})", why)));
    return Step::kRelayGone;
  };
  Nonce ask{};
  bool proven = o.token == nullptr;
  if (!proven) {
    if (!fill_random(ask)) return Step::kRelayGone;
    auto sent = sock->write_all(encode_frame(MsgType::kRelayAsk, ask),
                                Deadline::after(Millis(1000)).sooner(o.give_up));
    if (!sent) return unproven(sent.error().message);
  }
  // The relay says why it waits every second: silence means it stopped.
  while (true) {
    Deadline quiet = o.give_up.extended(Millis(250)).sooner(Deadline::after(Millis(3000)));
    auto frame = sock->read_frame(quiet);
    if (!frame) {
      if (frame.error().fault == Fault::kInterrupted) return Step::kFatal;
      if (frame.error().fault == Fault::kTimeout && o.give_up.expired()) return Step::kRetry;
      // A relay asked for its proof that hangs up instead gave none.
      return proven ? Step::kRelayGone : unproven(frame.error().message);
    }
    if (!proven) {
      if (frame->header.type != uint16_t(MsgType::kRelayProof) ||
          !verify_relay_proof(*o.token, frame->payload, ask, self.job_id)) {
        return unproven("");
      }
      proven = true;
      continue;
    }
    if (frame->header.type != uint16_t(MsgType::kRelayWait)) {
      return handshake(std::move(*sock), where, self, o, out, last_error, std::move(frame));
    }
    auto w = decode_relay_wait(frame->payload);
    if (!w || w->master_closed) return Step::kRelayGone;
    // In a member's words: what the relay's own attempts met (before its first,
    // what this member's own resolution met stands).
    if (w->attempts > 0) last_error = printable(w->status, 300);
    out.attempts = std::max(out.attempts, int(w->attempts));
    if (Clock::now() >= next_progress) {
      o.log(fmt::format("{} -> master {}: {}", label, endpoint(o.master_addr, o.master_port),
                        last_error));
      next_progress = Clock::now() + o.progress_interval;
    }
  }
}

Step handshake(Socket sock, const std::string& where, Record& self, const JoinOptions& o,
               JoinResult& out, std::string& last_error, Result<Frame> frame) {
  Deadline hs = Deadline::after(o.handshake).sooner(o.give_up.extended(Millis(250)));
  if (!frame) {
    const Error& e = frame.error();
    if (e.fault == Fault::kInterrupted) return Step::kFatal;
    last_error =
        !is_io_fault(e.fault)
            ? fmt::format("{} answered, {} ({})", where, kNotMaster, e.message)
            : fmt::format("{} accepted the connection but {} ({})", where, kNoChallenge, e.message);
    return Step::kRetry;
  }
  if (frame->header.type != uint16_t(MsgType::kChallenge)) {
    last_error = fmt::format("{} answered with a {} instead of a challenge", where,
                             type_name(frame->header.type));
    return Step::kRetry;
  }
  auto challenge = decode_challenge(frame->payload);
  if (!challenge) {
    last_error = fmt::format("{} sent a challenge this member cannot read ({})", where,
                             challenge.error().message);
    return Step::kRetry;
  }
  // Both sides hold the job's token, or neither: a member with a token does not
  // trust a master without one, whose verdict nobody could check.
  if (challenge->auth != (o.token != nullptr)) {
    if (challenge->auth) {
      // The master hears of it too: an unsigned hello (its record only, no NCCL id
      // for a master nothing proves), which it refuses as auth-failed naming this
      // member, not a connection closed without a word.
      Hello told{self, {}, {}, std::nullopt};
      if (fill_random(told.client_nonce) && sock.write_all(encode(told), hs)) {
        (void)sock.read_frame(hs);  // its reject
      }
    }
    out.failure = self_failure(
        self, FindingId::kAuthFailed,
        challenge->auth
            ? fmt::format("the master at {} requires a job token, and this member has none", where)
            : fmt::format("this member has a job token, and the master at {} does not use one: "
                          "it may not be this job's master",
                          where),
        "give every process of the job the same --token-file (or RANKCHECK_TOKEN_FILE)");
    return Step::kFatal;
  }
  Hello hello{self, {}, {}, o.nccl_root};
  if (auto nonce = fill_random(hello.client_nonce); !nonce) {
    last_error = fmt::format("{}: no nonce for the hello: {}", where, nonce.error().message);
    return Step::kRetry;
  }
  out.server_nonce = challenge->nonce;
  out.client_nonce = hello.client_nonce;
  auto sent = sock.write_all(
      o.token ? encode_signed(hello, *o.token, challenge->nonce) : encode(hello), hs);
  if (!sent) {
    last_error = fmt::format("{}: sending the hello: {}", where, sent.error().message);
    return Step::kRetry;
  }
  auto reply = sock.read_frame(hs);
  if (!reply) {
    last_error = fmt::format("{}: waiting to be admitted: {}", where, reply.error().message);
    return Step::kRetry;
  }
  if (reply->header.type == uint16_t(MsgType::kAdmit)) {
    auto admit = decode_admit(reply->payload);
    if (!admit) {
      last_error = fmt::format("{}: {}", where, admit.error().message);
      return Step::kRetry;
    }
    out.admit = *admit;
    out.socket = std::move(sock);
    return Step::kJoined;
  }
  if (reply->header.type != uint16_t(MsgType::kReject)) {
    last_error =
        fmt::format("{} answered the hello with a {}", where, type_name(reply->header.type));
    return Step::kRetry;
  }
  auto reject = decode_reject(reply->payload);
  if (!reject) {
    last_error = fmt::format("{}: {}", where, reject.error().message);
    return Step::kRetry;
  }
  return refused(*reject, where, self, out, last_error);
}

}  // namespace

Millis first_connect_delay(long index, long count, long backlog) {
  if (backlog <= 0 || count <= backlog || index <= 0) return Millis(0);
  return Millis(std::min(index, count) * kBacklogDrain.count() / backlog);
}

// Whether MASTER_ADDR names this very host (one of its own addresses, not loopback).
bool master_is_this_host(const Record& self) {
  if (self.master_resolved.empty()) return false;
  std::vector<IfAddr> own = host_interfaces();
  for (const std::string& a : self.master_resolved) {
    if (is_loopback_address(a)) continue;
    for (const IfAddr& i : own) {
      if (!i.loopback && i.address == a) return true;
    }
  }
  return false;
}

// The fix of a member that never reached its master: the most specific cause its
// attempts showed first, then what to check in any case.
std::string unreachable_fix(const Record& self, const JoinOptions& o, const std::string& last_error,
                            bool resolved_last) {
  std::string addr = printable(o.master_addr);
  std::string lead;
  if (!resolved_last && self.master_resolved.empty()) {
    lead = fmt::format(
        "MASTER_ADDR {} does not resolve on {}: fix the name (a typo, a short name without its "
        "domain, a DNS or /etc/hosts entry not there yet: getent hosts {}) or give rank 0's "
        "address; once it resolves, ",
        addr, printable(self.host), addr);
  } else if (self.rank != 0 && master_is_this_host(self)) {
    lead = fmt::format(
        "MASTER_ADDR {} is this host, {}, so rank 0 should be running here, and nothing of it "
        "answers on port {}: check that the launcher started rank 0 on {} (the first host of its "
        "list, torchrun's --node_rank 0), or set MASTER_ADDR to the host where rank 0 runs; else ",
        addr, printable(self.host), o.master_port, printable(self.host));
  } else if (last_error.find(kNoChallenge) != std::string::npos) {
    // A process that accepts and says nothing: rank 0 stopped or stuck (a frozen node, a
    // GPU probe that hangs) as often as another program on the port.
    lead = fmt::format(
        "the process that holds {} accepts connections but says nothing: rank 0 stopped or "
        "stuck there (a frozen node, a GPU driver call that hangs: read rank 0's log), or another "
        "service holds that port (ss -ltnp 'sport = :{}' on that host names it); else ",
        endpoint(o.master_addr, o.master_port), o.master_port);
  } else if (last_error.find(kNotMaster) != std::string::npos) {
    lead = fmt::format(
        "something other than rankcheck's master answers on {}: another service or another job's "
        "process holds that port (ss -ltnp 'sport = :{}' on that host names it); give this job "
        "another MASTER_PORT, or stop that process; else ",
        endpoint(o.master_addr, o.master_port), o.master_port);
  } else if (loopback_master(self)) {
    lead = fmt::format(
        "{} resolves to loopback here, so this process knocks on its own door unless rank 0 runs "
        "on this machine: set MASTER_ADDR to rank 0's cluster address, or fix /etc/hosts; else ",
        addr);
  }
  return fmt::format(
      "{}check that rank 0 is running and that this host resolves {} and reaches port {} "
      "(getent hosts {}; nc -z {} {}); compare MASTER_ADDR/MASTER_PORT with rank 0's. If rank 0 "
      "already finished (it decides once every rank joined, or at its deadline), this process "
      "started too late: compare its start with the others'",
      lead, addr, o.master_port, addr, addr, o.master_port);
}

JoinResult join_master(Record& self, const JoinOptions& o) {
  JoinResult out;
  std::string last_error = "no attempt made";
  Millis backoff(50);
  std::minstd_rand jitter(self.pid ^ static_cast<uint32_t>(self.rank));
  // A member usually starts before rank 0 listens: the first refusals are not news.
  // Said once the wait is long enough to matter, then every progress interval.
  auto next_progress = Clock::now() + std::min(o.progress_interval, Millis(1000));
  std::string label =
      fmt::format("{} ({})", span_label(self.rank, self.nranks), printable(self.host, 64));
  bool relay = !o.relay.empty();
  bool resolved_last = true;  // whether the last attempt resolved MASTER_ADDR
  if (!relay && o.first_delay > Millis(0)) nap(o.give_up.sooner(Deadline::after(o.first_delay)));
  while (true) {
    if (interrupted()) return out;
    if (out.attempts > 0 && o.give_up.expired()) break;
    ++out.attempts;
    // Resolved first, also through a relay: the record carries what it resolved to.
    auto addrs = resolve_host(o.master_addr, o.give_up.sooner(Deadline::after(Millis(5000))));
    resolved_last = static_cast<bool>(addrs);
    if (!addrs) {
      // Cut short by the deadline: what the earlier attempts met says more.
      bool cut_short = addrs.error().fault == Fault::kTimeout && o.give_up.expired();
      if (!cut_short || out.attempts == 1) {
        last_error = addrs.error().message;
        if (last_error.find("resolve") == 0) last_error += " (not resolvable yet?)";
      }
    } else {
      self.master_resolved = *addrs;
      self.resolve_error.clear();
    }
    if (relay) {
      Step step = attempt_relay(self, o, out, last_error, next_progress, label);
      if (step == Step::kRelayGone) {
        // Dead, standing down, or not this user's: the master, directly, now.
        relay = false;
        if (o.give_up.expired()) break;
        continue;
      }
      if (step != Step::kRetry) {
        out.relayed = step == Step::kJoined;
        return out;
      }
    } else if (addrs) {
      for (const std::string& a : *addrs) {
        if (attempt(a, self, o, out, last_error) != Step::kRetry) return out;
      }
    }
    if (Clock::now() >= next_progress) {
      o.log(fmt::format("{} -> master {}: {} (attempt {}, {} s left)", label,
                        endpoint(o.master_addr, o.master_port), last_error, out.attempts,
                        o.give_up.seconds_left()));
      next_progress = Clock::now() + o.progress_interval;
    }
    auto wait = Millis(backoff.count() / 2 + long(jitter() % uint32_t(backoff.count())));
    nap(o.give_up.sooner(Deadline::after(wait)));
    backoff = std::min(backoff * 2, Millis(1000));
  }
  out.failure =
      self_failure(self, FindingId::kMasterUnreachable,
                   fmt::format("cannot reach the master at {} by the deadline: {} (attempt {})",
                               endpoint(o.master_addr, o.master_port), last_error, out.attempts),
                   unreachable_fix(self, o, last_error, resolved_last));
  // This host is the suspect where the name fails here or names this host; rank 0's
  // where it took the connection and said nothing (stopped or stuck); else neither
  // can be told from here (a wrong MASTER_ADDR, rank 0's host down).
  bool own = (!resolved_last && self.master_resolved.empty()) ||
             (self.rank != 0 && master_is_this_host(self));
  if (!own) {
    out.failure->hosts.clear();
    if (last_error.find(kNoChallenge) != std::string::npos) {
      if (auto h = master_host_name(o.master_addr)) out.failure->hosts = {*h};
    }
  }
  return out;
}

bool await_master_close(Socket& socket, Deadline deadline) {
  if (!socket.valid()) return true;
  ::shutdown(socket.fd(), SHUT_WR);
  std::array<char, 256> sink{};
  while (true) {
    pollfd p{socket.fd(), POLLIN, 0};
    int n = ::poll(&p, 1, deadline.poll_ms(Millis(200)));
    if (n > 0) {
      ssize_t got = ::read(socket.fd(), sink.data(), sink.size());
      if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) return true;
      continue;
    }
    if (deadline.expired() || interrupted()) return false;
  }
}

Result<Verdict> wait_verdict(Socket& socket, Deadline deadline, const JoinResult& joined,
                             const JobToken* token, VerdictWait which, const PathPlanFn& on_plan,
                             const WaitProgress& progress) {
  std::optional<NcclRoots> roots;  // a scalable init's, sent ahead of the go verdict
  auto next_progress = Deadline::after(progress.every);
  bool planned = false;  // one path plan per connection, at most
  while (true) {
    auto frame = socket.read_frame(progress.say ? deadline.sooner(next_progress) : deadline);
    if (!frame && frame.error().fault == Fault::kTimeout && progress.say && !deadline.expired()) {
      // Quiet, not over: say so, so that a member's log does not look hung.
      progress.say();
      next_progress = Deadline::after(progress.every);
      continue;
    }
    if (!frame) {
      const Error& e = frame.error();
      if (e.fault == Fault::kClosed) {
        return Error{
            "the master closed the connection before its verdict (it exited or was "
            "killed)",
            e.fault};
      }
      if (e.fault == Fault::kTimeout) {
        return Error{"no verdict from the master by the deadline", e.fault};
      }
      return Error{fmt::format("waiting for the verdict: {}", e.message), e.fault};
    }
    if (frame->header.type == uint16_t(MsgType::kVerdict)) {
      auto v = decode_verdict(frame->payload);
      if (!v) return v.error();
      // After the GPU stage only a final verdict will do: its MAC is over another
      // label than the go verdict's, so a go verdict replayed here fails it.
      bool final = which == VerdictWait::kFinal || v->final;
      if (token != nullptr && !verify_verdict(frame->payload, *token, joined.server_nonce,
                                              joined.client_nonce, final)) {
        return Error{
            which == VerdictWait::kFinal && !v->final
                ? "it sent another go verdict where its final verdict belonged, without this "
                  "job's token on it: a replay, not this job's master"
                : "its verdict does not carry this job's token: it is not from this job's "
                  "master",
            Fault::kAuthFailed};
      }
      if (!v->final && which == VerdictWait::kFinal) {
        return Error{"it sent another go verdict where its final verdict belonged"};
      }
      if (v->nccl_roots > 0) {
        // The roots came in a frame of their own: the verdict's digest vouches for them.
        if (!roots || roots->ids.size() != v->nccl_roots ||
            roots_digest(roots->ids) != v->roots_digest) {
          return Error{
              fmt::format("its go verdict names {} NCCL roots, and the roots it sent "
                          "before it do not match them",
                          v->nccl_roots)};
        }
        v->roots = std::move(roots->ids);
      }
      return v;
    }
    if (frame->header.type == uint16_t(MsgType::kPathPlan) && on_plan &&
        which == VerdictWait::kFirst) {
      // The rehearsal of NCCL's connections: run it, report, wait on for the verdict.
      if (planned) return Error{"the master sent a second path plan on one connection"};
      planned = true;
      auto plan = decode_path_plan(frame->payload);
      if (!plan) return plan.error();
      // Instructions to connect elsewhere: only the master's, and only within bounds.
      if (token != nullptr &&
          !verify_path_plan(frame->payload, *token, joined.server_nonce, joined.client_nonce)) {
        return Error{
            "its path plan does not carry this job's token: it is not from this job's master "
            "(rewritten on the way?)",
            Fault::kAuthFailed};
      }
      if (auto bounded = check_path_plan(*plan, joined.admit.world_size); !bounded) {
        return Error{fmt::format("refused the master's path plan: {}", bounded.error().message)};
      }
      PathReport report = on_plan(*plan);
      auto out = token != nullptr
                     ? encode_signed(report, *token, joined.server_nonce, joined.client_nonce)
                     : encode(report);
      if (auto sent = socket.write_all(out, deadline); !sent) return sent.error();
      continue;
    }
    if (frame->header.type == uint16_t(MsgType::kNcclRoots) && which == VerdictWait::kFirst) {
      auto r = decode_nccl_roots(frame->payload);
      if (!r) return r.error();
      roots = std::move(*r);
      continue;
    }
    if (frame->header.type == uint16_t(MsgType::kRelayWait)) {
      // This host's relay saw the master close its connection: the master is gone
      // (Fault::kSystem: not the relay's own death, after which a member joins again).
      auto w = decode_relay_wait(frame->payload);
      if (w && w->master_closed) {
        return Error{
            "the master closed the connection before its verdict (it exited or was killed)",
            Fault::kSystem};
      }
      continue;
    }
    // Anything else before the verdict is ignored.
  }
}

MemberReport verdict_report(const Record& self, const Verdict& v, double total_ms) {
  MemberReport m;
  m.self = self;
  m.verdict_received = true;
  m.exit_code = v.exit_code;
  m.headline = v.headline;
  m.headline_id = v.headline_id;
  m.errors = v.errors;
  m.warnings = v.warnings;
  m.joined_ranks = v.joined_ranks;
  m.findings = v.notes;
  m.total_ms = total_ms;
  return m;
}

std::optional<Challenge> probe_master(const std::string& addr, uint16_t port, Deadline deadline) {
  auto sock = Socket::connect(addr, port, deadline);
  if (!sock) return std::nullopt;
  auto frame = sock->read_frame(deadline);
  if (!frame || frame->header.type != uint16_t(MsgType::kChallenge)) return std::nullopt;
  auto c = decode_challenge(frame->payload);
  if (!c) return std::nullopt;
  // Says it was only looking, so that the master does not take it for a stray
  // (a port scanner): it is a rank 0 of this job, or another job's, that comes
  // back as a member or reports the port taken.
  (void)sock->write_all(encode_frame(MsgType::kProbe, {}), Deadline::after(Millis(200)));
  return *c;
}

}  // namespace rankcheck
