// The GPU stage's rules, over its results: NCCL init, the all-reduce, the
// bandwidth floor, each with NCCL's own words where its processes said any; and
// the networks NCCL chose.

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/odd_ones_out.h"
#include "base/text.h"
#include "rules/context.h"

namespace rankcheck {

namespace {

// A stage finding's fix where NCCL's own words are quoted in it: the catalogue's,
// less its advice to rerun with NCCL_DEBUG=INFO (what that would show is there).
std::string_view quoted_fix(FindingId id) {
  switch (id) {
    case FindingId::kNcclInitFailed:
      return "NCCL's own words above name the cause; a network or topology error on one host "
             "usually names the interface or device";
    case FindingId::kNcclInitTimeout:
      return "ranks stuck in init wait for a peer they cannot reach: check the network between "
             "the hosts (NCCL_SOCKET_IFNAME, firewalls, InfiniBand ports), starting from what "
             "NCCL said";
    case FindingId::kAllreduceFailed:
      return "NCCL's own words above name the cause; an error right after a successful init "
             "usually points at the network transport (NCCL_NET, NCCL_IB_HCA)";
    case FindingId::kAllreduceTimeout:
      return "init succeeded but data does not flow: check the inter-host links (IB/RoCE, "
             "NCCL_IB_HCA, NCCL_NET), starting from what NCCL said";
    default:
      return "";
  }
}

// What a finding NCCL's words read as says, where it is more specific than the
// stage's own ("" where it is not).
std::string specific_reading(std::string_view id) {
  static constexpr std::pair<std::string_view, std::string_view> kPhrases[] = {
      {"nccl-network-error", "a network error"},
      {"gpu-out-of-memory", "the GPU out of memory"},
      {"shared-memory-exhausted", "shared memory (/dev/shm) exhausted"},
      {"cuda-error", "a CUDA error"},
      {"peer-failed", "a peer's failure, not this rank's"},
      {"nccl-no-interface", "no network interface NCCL can use"},
  };
  static constexpr std::string_view kGeneric[] = {"",
                                                  "nccl-init-failed",
                                                  "nccl-init-timeout",
                                                  "allreduce-failed",
                                                  "allreduce-timeout",
                                                  "unexplained-error"};
  if (std::find(std::begin(kGeneric), std::end(kGeneric), id) != std::end(kGeneric)) return "";
  for (const auto& [name, phrase] : kPhrases) {
    if (name == id) return fmt::format("{} ({})", phrase, name);
  }
  return std::string(id);
}

// Where each rank ran and what it reported, for the hosts of a finding and the
// words NCCL said there.
class RankOwners {
 public:
  RankOwners(const std::vector<Member>* members, const std::vector<RankResult>& results) {
    for (const RankResult& r : results)
      result_[r.rank] = &r;
    if (members == nullptr) return;
    for (const Member& m : *members) {
      for (long k = m.record.rank; k <= m.record.last_rank(); ++k)
        owner_[k] = &m.record;
    }
  }
  /// A finding of kind `id` about these ranks and the hosts they ran on, its
  /// message left to the caller.
  Finding finding(FindingId id, const std::vector<long>& ranks) const {
    Records rs;
    for (long k : ranks) {
      if (auto it = owner_.find(k); it != owner_.end()) rs.push_back(it->second);
    }
    Finding f = make_finding(id, "");
    f.ranks = ranks;
    f.hosts = hosts_of(rs);
    return f;
  }
  std::string host_of(long k) const {
    auto it = owner_.find(k);
    return it != owner_.end() ? printable(it->second->host, 64) : fmt::format("rank {}", k);
  }

  /// NCCL's own words put in a finding of the stage (`id`) about `ranks`, after its
  /// message: the first of them (by rank) whose process said something that reads
  /// as a cause of its own (else as a peer's) is quoted, unless the message already carries it
  /// (NCCL's last error is often that warning). Where the catalogue reads the words as a more
  /// specific finding (a network error, the GPU out of memory), the message says so
  /// and the fix is that one's; the id stays the stage's, and so does the exit code.
  /// Where NCCL said nothing, the catalogue's fix stands.
  /// Returns whether NCCL said anything on those ranks.
  bool quote_nccl(Finding& f, FindingId id, std::vector<long> ranks) const {
    std::sort(ranks.begin(), ranks.end());
    std::vector<const RankResult*> said;
    for (long k : ranks) {
      auto it = result_.find(k);
      if (it != result_.end() && !it->second->nccl_warn.empty()) said.push_back(it->second);
    }
    if (said.empty()) return false;
    // A rank's own cause before a pointer at a peer ("Connection closed by remote peer").
    auto own = std::find_if(said.begin(), said.end(),
                            [](const RankResult* r) { return r->nccl_finding != "peer-failed"; });
    const RankResult* first = own != said.end() ? *own : said.front();
    std::vector<std::string> others;  // hosts where NCCL said something else
    for (const RankResult* r : said) {
      std::string host = host_of(r->rank);
      if (r->nccl_warn != first->nccl_warn &&
          std::find(others.begin(), others.end(), host) == others.end()) {
        others.push_back(host);
      }
    }
    std::string reading = specific_reading(first->nccl_finding);
    std::string fix;
    driver_too_old(*first, reading, fix);
    if (f.message.find(first->nccl_warn) == std::string::npos) {
      f.message += fmt::format("; NCCL says on {}: {}", host_of(first->rank),
                               printable(first->nccl_warn, 320));
      if (!reading.empty()) f.message += ", which reads as " + reading;
    } else if (!reading.empty()) {
      f.message += "; NCCL's warning reads as " + reading;
    }
    if (!others.empty()) {
      f.message += fmt::format(" (NCCL said other things on {}: see stage_results in the JSON)",
                               format_list(others, 3));
    }
    const FindingKind* kind = reading.empty() ? nullptr : find_finding_kind(first->nccl_finding);
    f.fix = !fix.empty() ? fix : std::string(kind != nullptr ? kind->fix : quoted_fix(id));
    return true;
  }

  /// cudaErrorInsufficientDriver (35) in NCCL's words: the CUDA runtime that libnccl
  /// links statically is of a newer major version than the host's driver supports
  /// (minor versions are compatible). Not a CUDA error to debug: the library and the
  /// driver do not go together. The reading and the fix name the driver's CUDA.
  void driver_too_old(const RankResult& r, std::string& reading, std::string& fix) const {
    if (r.nccl_warn.find("driver version is insufficient for CUDA runtime version") ==
        std::string::npos) {
      return;
    }
    auto it = owner_.find(r.rank);
    const GpuFacts* gpu = it != owner_.end() ? &it->second->gpu : nullptr;
    int32_t cuda = gpu != nullptr ? gpu->cuda_version : 0;
    std::string where = host_of(r.rank);
    if (cuda > 0) where = fmt::format("CUDA {} on {}", cuda_version_text(cuda), where);
    reading = fmt::format("an NCCL built for a newer CUDA than the driver supports ({})", where);
    std::string lib = gpu != nullptr && !gpu->nccl_path.empty()
                          ? fmt::format(" ({})", printable(gpu->nccl_path, 160))
                          : std::string();
    std::string pick =
        cuda > 0 ? fmt::format("CUDA {0} (pip's nvidia-nccl-cu{0}, or --nccl-lib)", cuda / 1000)
                 : std::string("the driver's CUDA (rankcheck env shows it)");
    fix = fmt::format(
        "the NCCL loaded{} was built for a newer CUDA than the driver supports{}: load an NCCL "
        "built for {}, or update the driver to one that supports the NCCL's CUDA",
        lib, cuda > 0 ? fmt::format(" (CUDA {})", cuda_version_text(cuda)) : std::string(), pick);
  }

 private:
  std::map<long, const Record*> owner_;
  std::map<long, const RankResult*> result_;
};

// How each rank's NCCL init ended.
struct InitOutcomes {
  std::map<std::string, std::vector<long>> failed;  // by the error NCCL gave
  std::vector<long> timed_out;
  std::vector<long> done;
  std::vector<long> silent;   // no result: the process died or lost its connection
  std::vector<long> pending;  // no result, the process still connected at the stage's end
};

InitOutcomes init_outcomes(const StageView& sv) {
  std::map<long, const RankResult*> by_rank;
  for (const RankResult& r : sv.results)
    by_rank[r.rank] = &r;
  InitOutcomes o;
  for (long k = 0; k < sv.world_size; ++k) {
    auto it = by_rank.find(k);
    if (it == by_rank.end()) {
      bool connected = std::binary_search(sv.pending.begin(), sv.pending.end(), k);
      (connected ? o.pending : o.silent).push_back(k);
      continue;
    }
    const RankResult& r = *it->second;
    if (r.init_ok) {
      o.done.push_back(k);
    } else if (r.init_timed_out) {
      o.timed_out.push_back(k);
    } else {
      o.failed[r.init_error.empty() ? std::string("no error given") : r.init_error].push_back(k);
    }
  }
  return o;
}

// Init that failed, grouped by the error NCCL gave; then the ranks that did not
// finish it in time or sent nothing.
void init_findings(const StageView& sv, const InitOutcomes& init, const RankOwners& owners,
                   std::vector<Finding>& out) {
  for (const auto& [error, ranks] : init.failed) {
    Finding f = owners.finding(FindingId::kNcclInitFailed, ranks);
    f.message = fmt::format("NCCL init failed for {} on {}: {}", ranks_word(ranks),
                            format_list(f.hosts, 4), printable(error, 300));
    owners.quote_nccl(f, FindingId::kNcclInitFailed, ranks);
    out.push_back(std::move(f));
  }
  std::vector<long> stuck = init.timed_out;
  stuck.insert(stuck.end(), init.silent.begin(), init.silent.end());
  std::sort(stuck.begin(), stuck.end());
  std::vector<std::string> parts;
  if (!stuck.empty()) {
    parts.push_back(fmt::format(
        "NCCL init did not finish within {} for {} on {}{}", format_seconds(sv.stage_ms),
        ranks_word(stuck), format_list(owners.finding(FindingId::kNcclInitTimeout, stuck).hosts, 4),
        init.silent.empty() ? std::string()
                            : fmt::format(" ({} sent no result: the process died "
                                          "or lost its connection)",
                                          ranks_word(init.silent))));
  }
  // Still connected: the master cannot tell init from the all-reduce, and says so.
  if (!init.pending.empty()) {
    parts.push_back(fmt::format(
        "{} on {} sent no result within {}, though still connected: stuck in NCCL (init, "
        "the all-reduce or its abort)",
        ranks_word(init.pending),
        format_list(owners.finding(FindingId::kNcclInitTimeout, init.pending).hosts, 4),
        format_seconds(sv.stage_ms)));
    stuck.insert(stuck.end(), init.pending.begin(), init.pending.end());
    std::sort(stuck.begin(), stuck.end());
  }
  if (stuck.empty()) return;
  Finding f = owners.finding(FindingId::kNcclInitTimeout, stuck);
  std::string done = init.done.empty() ? std::string("no rank finished init")
                                       : fmt::format("{} finished", ranks_word(init.done));
  f.message = fmt::format("{}; {}", join(parts, "; ", parts.size()), done);
  bool said = owners.quote_nccl(f, FindingId::kNcclInitTimeout, stuck);
  // NCCL's init waits for every rank: when none finished, none failed and NCCL said
  // nothing, one slow or broken rank holds them all, and which it is cannot be told.
  // No host is suspected (the message still says where each was).
  if (init.done.empty() && init.failed.empty() && !said) f.hosts.clear();
  out.push_back(std::move(f));
}

// How the all-reduce went on the ranks whose init succeeded, in the order their
// results came: each outcome's ranks, and a phrase for each of them.
struct AllreduceOutcomes {
  std::vector<long> timed_out;
  uint64_t timed_bytes = 0;  // the timed all-reduce (--bandwidth) is the one that timed out
  bool all_timed = true;
  std::vector<long> failed;
  std::vector<std::string> failed_text;
  std::vector<long> wrong;
  std::vector<std::string> wrong_text;
  std::vector<long> low;  // below --min-busbw
  std::vector<std::string> low_text;
};

AllreduceOutcomes allreduce_outcomes(const StageView& sv) {
  AllreduceOutcomes o;
  for (const RankResult& r : sv.results) {
    if (!r.init_ok) continue;
    if (r.allreduce_timed_out) {
      o.timed_out.push_back(r.rank);
      if (r.bandwidth_bytes > 0) o.timed_bytes = std::max(o.timed_bytes, r.bandwidth_bytes);
      o.all_timed = o.all_timed && r.bandwidth_bytes > 0;
    } else if (!r.allreduce_done) {
      o.failed.push_back(r.rank);
      o.failed_text.push_back(
          fmt::format("rank {}: {}", r.rank, printable(r.allreduce_error, 200)));
    } else if (!r.allreduce_ok) {
      o.wrong.push_back(r.rank);
      o.wrong_text.push_back(
          r.got == kAllreduceSentinel
              ? fmt::format("rank {} expected {}, got nothing (buffer never written)", r.rank,
                            r.expected)
              : fmt::format("rank {} expected {}, got {}", r.rank, r.expected, r.got));
    } else if (sv.min_busbw_gbps > 0 && sv.world_size > 1 && r.bandwidth_bytes > 0 &&
               r.busbw_gbps < sv.min_busbw_gbps) {
      // Bus bandwidth is undefined for one rank (2(n-1)/n = 0): no floor there.
      o.low.push_back(r.rank);
      o.low_text.push_back(fmt::format("rank {} {:.1f} GB/s", r.rank, r.busbw_gbps));
    }
  }
  return o;
}

// A wrong total, a failure, a timeout, then a bus bandwidth below the floor.
void allreduce_findings(const StageView& sv, const AllreduceOutcomes& ar, const RankOwners& owners,
                        std::vector<Finding>& out) {
  if (!ar.wrong.empty()) {
    Finding f = owners.finding(FindingId::kAllreduceWrongResult, ar.wrong);
    f.message = fmt::format("the all-reduce of one value per rank gave a wrong total: {}",
                            format_list(ar.wrong_text, 4));
    out.push_back(std::move(f));
  }
  if (!ar.failed.empty()) {
    Finding f = owners.finding(FindingId::kAllreduceFailed, ar.failed);
    f.message = fmt::format("the all-reduce failed: {}", join(ar.failed_text, "; ", 4));
    owners.quote_nccl(f, FindingId::kAllreduceFailed, ar.failed);
    out.push_back(std::move(f));
  }
  if (!ar.timed_out.empty()) {
    Finding f = owners.finding(FindingId::kAllreduceTimeout, ar.timed_out);
    f.message = fmt::format("{} did not complete within the deadline for {} on {}",
                            ar.all_timed ? fmt::format("the timed all-reduce of {} (--bandwidth)",
                                                       bytes_text(ar.timed_bytes))
                                         : std::string("the all-reduce"),
                            ranks_word(ar.timed_out), format_list(f.hosts, 4));
    owners.quote_nccl(f, FindingId::kAllreduceTimeout, ar.timed_out);
    out.push_back(std::move(f));
  }
  if (!ar.low.empty()) {
    Finding f = owners.finding(FindingId::kBandwidthLow, ar.low);
    f.message = fmt::format("all-reduce bus bandwidth below --min-busbw {:.1f} GB/s: {}",
                            sv.min_busbw_gbps, format_list(ar.low_text, 6));
    out.push_back(std::move(f));
  }
}

// The network NCCL chose, where its processes said ("Using network IB", at INFO):
// ranks on different networks cannot connect (NCCL falls back to Socket on a host
// whose InfiniBand it cannot use, and its IB peers never meet it).
void network_findings(const StageView& sv, const RankOwners& owners, std::vector<Finding>& out) {
  // The most ranks first (the job's usual choice); between equals, the lowest rank.
  std::vector<const RankResult*> results;
  for (const RankResult& r : sv.results)
    results.push_back(&r);
  auto by_net = odd_ones_out<std::string>(
      results,
      [](const RankResult* r) -> std::optional<std::string> {
        if (r->nccl_net.empty()) return std::nullopt;
        return r->nccl_net;
      },
      [](const auto& a, const auto& b) { return a.items.front()->rank < b.items.front()->rank; });
  if (by_net.size() < 2) return;
  std::vector<std::pair<std::string, std::vector<long>>> groups;
  std::set<std::string> nets;
  for (const auto& [net, rs] : by_net) {
    std::vector<long> ranks;
    for (const RankResult* r : rs)
      ranks.push_back(r->rank);
    std::sort(ranks.begin(), ranks.end());
    groups.emplace_back(net, std::move(ranks));
    nets.insert(net);
  }
  std::string parts;
  std::vector<long> odd;
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& [net, ranks] = groups[i];
    if (i > 0) parts += i + 1 == groups.size() ? " but " : ", ";
    parts += fmt::format("{} for {} on {}", printable(net, 64), ranks_word(ranks),
                         format_list(owners.finding(FindingId::kNcclNetMismatch, ranks).hosts, 4));
    if (i > 0) odd.insert(odd.end(), ranks.begin(), ranks.end());
  }
  std::sort(odd.begin(), odd.end());
  Finding f = owners.finding(FindingId::kNcclNetMismatch, odd);
  f.message = fmt::format("NCCL chose different networks: {}", parts);
  f.fix =
      "NCCL uses IB where it finds a usable InfiniBand or RoCE device and falls back to Socket "
      "where it does not: on the odd hosts check the HCAs (ibstat, NCCL_IB_HCA, "
      "/dev/infiniband in the container) and the net plugin, or set NCCL_NET the same for "
      "every rank";
  // An IB rank and a Socket rank never connect: the training job would hang or fail.
  // Other mixtures (a plugin beside Socket) work, slowly: a warning.
  bool apart = nets.count("IB") != 0 && nets.count("Socket") != 0;
  f.severity = apart ? Severity::kError : Severity::kWarning;
  out.push_back(std::move(f));
}

// IB ports whose error counters moved while the check ran (from the process's start
// to the end of its stage, NCCL's init and all-reduce on them): a flapping or noisy
// link, which NCCL meets later as timeouts or "Got completion ... with error".
void ib_counter_findings(const StageView& sv, const RankOwners& owners, std::vector<Finding>& out) {
  std::map<std::string, std::vector<long>> by_text;  // what moved -> its ranks
  for (const RankResult& r : sv.results) {
    if (!r.ib_moved.empty()) by_text[r.ib_moved].push_back(r.rank);
  }
  if (by_text.empty()) return;
  std::vector<std::string> parts;
  std::vector<long> all;
  for (auto& [text, ranks] : by_text) {
    std::sort(ranks.begin(), ranks.end());
    parts.push_back(
        fmt::format("{} on {}", printable(text, 200),
                    format_list(owners.finding(FindingId::kIbPortErrors, ranks).hosts, 3)));
    all.insert(all.end(), ranks.begin(), ranks.end());
  }
  std::sort(all.begin(), all.end());
  Finding f = owners.finding(FindingId::kIbPortErrors, all);
  f.message = fmt::format(
      "IB error counters moved during the check (its start to the end of NCCL's init and "
      "all-reduce): {}: a link that goes down, retrains or corrupts packets",
      join(parts, "; ", 4));
  out.push_back(std::move(f));
}

}  // namespace

std::vector<Finding> stage_checks(const StageView& sv) {
  std::vector<Finding> out;
  RankOwners owners(sv.members, sv.results);
  init_findings(sv, init_outcomes(sv), owners, out);
  allreduce_findings(sv, allreduce_outcomes(sv), owners, out);
  network_findings(sv, owners, out);
  ib_counter_findings(sv, owners, out);
  if (sv.members != nullptr) name_no_host_when_every_host(out, job_hosts(*sv.members));
  return out;
}

}  // namespace rankcheck
