#include "rules/self.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include "base/text.h"
#include "rules/rules.h"

namespace rankcheck {

namespace {

// A finding of the catalogue's severity about this process's rank and host.
Finding about_self(const Record& self, FindingId id, std::string message, std::string fix = {}) {
  Finding f = make_finding(id, std::move(message), std::move(fix));
  f.ranks = {self.rank};
  f.hosts = {self.host};
  return f;
}

// What else holds MASTER_PORT, when it is a rankcheck master.
std::string port_holder(const Record& self, const ListenFailure& why) {
  if (!why.other_master) return "";
  if (why.other_auth) {
    return " (by a rankcheck master that wants a job token: another job's, or this job's with "
           "another token or job id)";
  }
  if (self.job_id.empty()) {
    return fmt::format(
        " (by a rankcheck master of job '{}'; this process has no job id to tell whether it "
        "is this job's: give every process the same --job-id)",
        printable(why.other_job_id));
  }
  return fmt::format(" (by a rankcheck master of job '{}')", printable(why.other_job_id));
}

}  // namespace

Finding self_failure(const Record& self, FindingId id, std::string message, std::string fix) {
  Finding f = make_finding(id, std::move(message), std::move(fix), Severity::kError);
  f.ranks = {self.rank};
  f.hosts = {self.host};
  return f;
}

Finding started_past_deadline(const Record& self, double late_ms, double timeout_s, bool tried) {
  return about_self(
      self, FindingId::kLateJoin,
      fmt::format("{} started {} after the job's start (RANKCHECK_START_TIME) by its host's "
                  "clock, past the job's deadline (--timeout {} s){}: the others have given "
                  "up on it, or this host's clock is ahead",
                  member_label(self), format_seconds(late_ms), timeout_s,
                  tried ? ", and no master answered" : ""),
      fmt::format("find why it started late on {} (a slow node, a container image pull), or "
                  "raise --timeout; if it did not, {}'s clock is ahead: synchronise it "
                  "(chronyc tracking, timedatectl)",
                  printable(self.host), printable(self.host)));
}

Finding master_addr_unresolved(const Record& self, std::string_view master_addr) {
  return about_self(self, FindingId::kMasterAddrNotLocal,
                    fmt::format("MASTER_ADDR {} does not resolve on {}, where rank 0 runs: {}",
                                printable(master_addr), printable(self.host), self.resolve_error));
}

Finding master_addr_unresolved_yet(const Record& self, std::string_view master_addr) {
  // A Kubernetes headless service resolves only once rank 0's pod is ready.
  Finding f = make_finding(
      FindingId::kMasterUnreachable,
      fmt::format("MASTER_ADDR {} does not resolve on {} now: {}; `rankcheck run` would retry "
                  "it until --timeout",
                  printable(master_addr), printable(self.host), self.resolve_error),
      "check the name in MASTER_ADDR (a typo, a short name this host's resolver cannot "
      "complete), or give rank 0's address; a name that appears later (a Kubernetes headless "
      "service) is fine",
      Severity::kWarning);
  f.ranks = {self.rank};
  f.hosts = {self.host};
  return f;
}

Finding cannot_listen(const Record& self, const ListenFailure& why) {
  Fault fault = why.error.fault;
  if (fault == Fault::kNotLocal) {
    // Not "set it to <this host's name>": that name may resolve to loopback here.
    // Rank 0 on the wrong host, or a second process at rank 0 (an unset node rank)
    // whose master never came up: either fix may be the one.
    return about_self(
        self, FindingId::kMasterAddrNotLocal,
        fmt::format("MASTER_ADDR {} ({}) is not an address of {}, where rank 0 runs; {}{}",
                    printable(why.master_addr), format_list(self.master_resolved.get(), 4),
                    printable(self.host), why.error.message,
                    why.waited_elsewhere ? "; and no rank 0 of this job answered there by the "
                                           "deadline"
                                         : ""),
        fmt::format("if rank 0 belongs on {}: start it there, and check this process's {} (a "
                    "second process at rank 0 {}); if it belongs on {}: set MASTER_ADDR to an "
                    "address of {} that the other hosts reach (`hostname -I` lists them)",
                    printable(why.master_addr), self.nranks > 1 ? "node rank" : "RANK",
                    self.nranks > 1 ? "is usually an unset NODE_RANK or --node-rank"
                                    : "is usually a RANK exported once for every task",
                    printable(self.host), printable(self.host)));
  }
  if (why.unproven_same_job) {
    // Not joined: a master that only shows an id could hand this rank 0 a pass of
    // its own making while the job's other ranks never started.
    bool nodes = self.nranks > 1;
    return about_self(
        self, FindingId::kDuplicateRank,
        fmt::format("MASTER_PORT {} on {} is held by a rankcheck master that shows this job's "
                    "id ('{}'): another process was started at rank 0 too, most likely; without "
                    "a job token nothing proves it is this job's master, so this one does not "
                    "join it",
                    why.port, printable(self.host), printable(why.other_job_id)),
        fmt::format("{}; a job token (--token-file) lets a second rank 0 join the first, which "
                    "then names both",
                    nodes ? "each node needs its own node rank: check how NODE_RANK (or "
                            "--node-rank) is set"
                          : "each process needs its own RANK: check how RANK is set (a RANK "
                            "exported once in the job script is copied into every task)"));
  }
  if (fault == Fault::kInUse || why.other_master) {
    return about_self(
        self, FindingId::kMasterPortInUse,
        fmt::format("MASTER_PORT {} is taken on {}: {}{}", why.port, printable(self.host),
                    why.error.message, port_holder(self, why)),
        fmt::format("pick another MASTER_PORT, or stop the holder (ss -ltnp 'sport = :{}' "
                    "names it)",
                    why.port));
  }
  // Not a port someone holds: say what the system said, and what usually causes it.
  return about_self(
      self, FindingId::kMasterListenFailed,
      fmt::format("rank 0 cannot listen on MASTER_PORT {} on {}: {}", why.port,
                  printable(self.host), why.error.message),
      fault == Fault::kDenied
          ? std::string("ports below 1024 need root or CAP_NET_BIND_SERVICE (and a security "
                        "policy may deny others): pick a MASTER_PORT of 1024 or above")
          : std::string());
}

Finding verdict_not_received(const Record& self, std::string_view master, const Error& error) {
  if (error.fault == Fault::kAuthFailed) {
    return about_self(self, FindingId::kAuthFailed,
                      fmt::format("the master at {} answered, but {}", master, error.message),
                      "something other than rank 0 answered on MASTER_PORT, or rank 0 has "
                      "another token: give every process the same --token-file");
  }
  // It joined, so MASTER_ADDR was right: rank 0's host (or the network to it) failed,
  // not this one.
  Finding f = about_self(self, FindingId::kMasterLost,
                         fmt::format("{} lost the master at {} after joining it: {}",
                                     member_label(self), master, error.message));
  f.hosts.clear();
  if (auto h = master_host_name(self.master_addr)) f.hosts = {*h};
  return f;
}

std::optional<std::string> master_host_name(std::string_view master_addr) {
  // An address names no node a scheduler knows (sbatch --exclude, scontrol): only a name.
  std::string a(master_addr);
  in6_addr bin{};
  if (a.empty() || ::inet_pton(AF_INET, a.c_str(), &bin) == 1 ||
      ::inet_pton(AF_INET6, a.c_str(), &bin) == 1) {
    return std::nullopt;
  }
  return a;
}

Finding mpi_step_lost(const Record& self, std::string_view step) {
  return about_self(self, FindingId::kMasterLost,
                    fmt::format("the MPI {} did not complete by the deadline", step),
                    "a process of the job did not reach the same step: check mpirun's output");
}

}  // namespace rankcheck
