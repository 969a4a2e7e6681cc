// The GPU stage's rules, over its results: NCCL init, the all-reduce, the
// bandwidth floor.

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "base/text.h"
#include "rules/context.h"

namespace rankcheck {

namespace {

// Where each rank ran, for the hosts of a finding.
class RankOwners {
 public:
  explicit RankOwners(const std::vector<Member>* members) {
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

 private:
  std::map<long, const Record*> owner_;
};

// How each rank's NCCL init ended.
struct InitOutcomes {
  std::map<std::string, std::vector<long>> failed;  // by the error NCCL gave
  std::vector<long> timed_out;
  std::vector<long> done;
  std::vector<long> silent;  // no result at all
};

InitOutcomes init_outcomes(const StageView& sv) {
  std::map<long, const RankResult*> by_rank;
  for (const RankResult& r : sv.results)
    by_rank[r.rank] = &r;
  InitOutcomes o;
  for (long k = 0; k < sv.world_size; ++k) {
    auto it = by_rank.find(k);
    if (it == by_rank.end()) {
      o.silent.push_back(k);
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
    out.push_back(std::move(f));
  }
  std::vector<long> stuck = init.timed_out;
  stuck.insert(stuck.end(), init.silent.begin(), init.silent.end());
  std::sort(stuck.begin(), stuck.end());
  if (stuck.empty()) return;
  Finding f = owners.finding(FindingId::kNcclInitTimeout, stuck);
  std::string done = init.done.empty() ? std::string("no rank finished init")
                                       : fmt::format("{} finished", ranks_word(init.done));
  f.message = fmt::format("NCCL init did not finish within {} for {} on {}{}; {}",
                          format_seconds(sv.stage_ms), ranks_word(stuck), format_list(f.hosts, 4),
                          init.silent.empty() ? std::string()
                                              : fmt::format(" ({} sent no result: the process died "
                                                            "or lost its connection)",
                                                            ranks_word(init.silent)),
                          done);
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
    } else if (sv.min_busbw_gbps > 0 && r.bandwidth_bytes > 0 && r.busbw_gbps < sv.min_busbw_gbps) {
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
    out.push_back(std::move(f));
  }
  if (!ar.timed_out.empty()) {
    Finding f = owners.finding(FindingId::kAllreduceTimeout, ar.timed_out);
    f.message = fmt::format("{} did not complete within the deadline for {} on {}",
                            ar.all_timed ? fmt::format("the timed all-reduce of {} (--bandwidth)",
                                                       bytes_text(ar.timed_bytes))
                                         : std::string("the all-reduce"),
                            ranks_word(ar.timed_out), format_list(f.hosts, 4));
    out.push_back(std::move(f));
  }
  if (!ar.low.empty()) {
    Finding f = owners.finding(FindingId::kBandwidthLow, ar.low);
    f.message = fmt::format("all-reduce bus bandwidth below --min-busbw {:.1f} GB/s: {}",
                            sv.min_busbw_gbps, format_list(ar.low_text, 6));
    out.push_back(std::move(f));
  }
}

}  // namespace

std::vector<Finding> stage_checks(const StageView& sv) {
  std::vector<Finding> out;
  RankOwners owners(sv.members);
  init_findings(sv, init_outcomes(sv), owners, out);
  allreduce_findings(sv, allreduce_outcomes(sv), owners, out);
  return out;
}

}  // namespace rankcheck
