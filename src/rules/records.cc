// Rules over the members' records: identity, launchers, addresses, environment.
// Each takes the decision's context and appends findings; none prints or exits.

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "base/text.h"
#include "rules/context.h"

namespace rankcheck {

// The processes of one other job are one finding, whatever their number: a port
// shared by two jobs sends the master every member of the other.
void check_foreign_job(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  // (their job id, whether their ranks are missing here) -> (record, peer), in order.
  std::map<std::pair<std::string, bool>, std::vector<std::pair<const Record*, std::string_view>>>
      groups;
  for (const Refusal& r : v.refused) {
    if (r.kind != RefusalKind::kForeignJob || !r.record) continue;
    const Record& rec = *r.record;
    bool explains_missing = false;
    for (long k = rec.rank; k <= rec.last_rank(); ++k) {
      if (k >= 0 && k < ctx.expected_world && !ctx.present(k)) explains_missing = true;
    }
    groups[{std::string(rec.job_id), explains_missing}].emplace_back(&rec, r.peer);
  }
  for (const auto& [key, items] : groups) {
    const auto& [job, explains_missing] = key;
    Records rs;
    std::vector<std::string> peers;
    for (const auto& [rec, peer] : items) {
      rs.push_back(rec);
      peers.push_back(printable(peer));
    }
    bool one = items.size() == 1;
    std::string who = one ? fmt::format("{} from {}", member_label(*rs.front()), peers.front())
                          : fmt::format("{} processes ({}, from {})", items.size(), where(rs),
                                        format_list(peers, 3));
    // Never an error: what a refused process claims is not evidence about this job.
    // Its rank is missing-rank's, which names this refusal as a possible cause.
    if (explains_missing) {
      out.push_back(
          make(FindingId::kForeignJob,
               fmt::format("{} {} refused: {} job '{}', this master serves job '{}'; {} the rank "
                           "missing here, this is why (a wrong job id), else another job shares "
                           "MASTER_PORT",
                           who, one ? "was" : "were", one ? "it says" : "they say", printable(job),
                           printable(v.job_id), one ? "if it is" : "if they are"),
               {}, rs, Severity::kWarning));
    } else {
      out.push_back(make(
          FindingId::kForeignJob,
          one ? fmt::format("a process of job '{}' ({}) reached this master (job '{}') and was "
                            "refused",
                            printable(job), who, printable(v.job_id))
              : fmt::format("{} processes of job '{}' ({}, from {}) reached this master (job '{}') "
                            "and were refused",
                            items.size(), printable(job), where(rs), format_list(peers, 3),
                            printable(v.job_id)),
          {}, rs, Severity::kWarning));
    }
  }
}

// A hello without this job's token: what it claims is unverified, but worth saying.
void check_auth_failed(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  for (const Refusal& r : v.refused) {
    if (r.kind == RefusalKind::kRelayAuth) {
      // A relay speaks for its host's members, who are refused one by one too (or
      // join directly): a token problem, not a stranger on the port.
      out.push_back(make_finding(
          FindingId::kAuthFailed,
          fmt::format("a host relay from {} was refused: {}", printable(r.peer),
                      printable(r.reason, 200)),
          "give every process of the job the same --token-file: the first rankcheck process "
          "of a host runs its relay with its own token",
          Severity::kWarning));
      continue;
    }
    if (r.kind != RefusalKind::kAuth || !r.record) continue;
    const Record& rec = *r.record;
    bool explains_missing = false;
    for (long k = rec.rank; k <= rec.last_rank(); ++k) {
      if (k >= 0 && k < ctx.expected_world && !ctx.present(k)) explains_missing = true;
    }
    std::string who =
        fmt::format("a process claiming {} from {}", member_label(rec), printable(r.peer));
    std::string hint =
        "give every process of the job the same --token-file; a stranger on the network "
        "without it is kept out, which is what the token is for";
    // A warning, naming no host: an unauthenticated claim is never evidence about a
    // host (a stranger picks the name it claims), and the rank it claims stays
    // missing-rank's, found from the members that proved the token.
    Finding f = make(FindingId::kAuthFailed,
                     fmt::format("{} was refused: {}{}", who, printable(r.reason, 200),
                                 explains_missing ? "; the rank it claims is missing here, and "
                                                    "this may be its process with another token"
                                                  : ""),
                     hint, {&rec}, Severity::kWarning);
    f.hosts.clear();
    out.push_back(std::move(f));
  }
}

void check_world_size(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  bool agree = true;
  for (const Member& m : v.members)
    agree = agree && m.record.world_size == v.world_size;
  if (agree) return;
  std::map<long, Records> by_size;
  for (const Member& m : v.members)
    by_size[m.record.world_size].push_back(&m.record);
  if (by_size.size() < 2) return;
  long expected = ctx.expected_world;
  std::vector<std::pair<long, Records>> groups(by_size.begin(), by_size.end());
  std::stable_sort(groups.begin(), groups.end(), [&](const auto& a, const auto& b) {
    return (a.first == expected) > (b.first == expected);
  });
  std::string says;
  Records odd;
  // "Most say" only when most do: on a tie the master's size is counted against.
  std::map<long, long> votes;
  for (const auto& [size, rs] : groups)
    votes[size] = long(ranks_of(rs).size());
  long mine = votes.count(expected) ? votes[expected] : 0;
  bool tie = std::any_of(votes.begin(), votes.end(),
                         [&](const auto& e) { return e.first != expected && e.second >= mine; });
  for (const auto& [size, rs] : groups) {
    if (!says.empty()) says += "; ";
    says += fmt::format("{} {} {}", where(rs), ranks_of(rs).size() == 1 ? "says" : "say", size);
    if (size != expected) odd.insert(odd.end(), rs.begin(), rs.end());
  }
  out.push_back(make(FindingId::kWorldSizeMismatch,
                     fmt::format("members disagree on the world size: {}", says),
                     fmt::format("every process must get the same WORLD_SIZE; {} (the "
                                 "master says {}): fix the launcher arguments or the exported "
                                 "WORLD_SIZE on {}",
                                 tie ? fmt::format("as many say {} as say another size", expected)
                                     : fmt::format("most say {}", expected),
                                 v.world_size, format_list(hosts_of(odd))),
                     odd));
}

void check_duplicate_rank(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!ctx.duplicates) return;
  std::map<long, std::vector<size_t>> claims;
  for (size_t i = 0; i < v.members.size(); ++i) {
    const Record& r = v.members[i].record;
    for (long k = r.rank; k <= r.last_rank(); ++k) {
      if (!ctx.present(k) || ctx.claims[size_t(k)] > 1) claims[k].push_back(i);
    }
  }
  // Ranks claimed by the same set of members form one finding.
  std::map<std::vector<size_t>, std::vector<long>> groups;
  for (auto& [rank, who] : claims) {
    if (who.size() > 1) groups[who].push_back(rank);
  }
  for (const auto& [who, ranks] : groups) {
    Records rs;
    std::vector<std::string> names;
    for (size_t i : who) {
      const Record& r = v.members[i].record;
      rs.push_back(&r);
      names.push_back(fmt::format("{} (pid {})", printable(r.host), r.pid));
    }
    bool nodes = std::any_of(rs.begin(), rs.end(), [](const Record* r) { return r->nranks > 1; });
    Finding f =
        make(FindingId::kDuplicateRank,
             fmt::format("{} {} claimed by {} members: {}", ranks_word(ranks),
                         ranks.size() == 1 ? "is" : "are", who.size(), format_list(names)),
             nodes ? fmt::format("each node needs its own node rank: check how NODE_RANK (or "
                                 "--node-rank) is set on {} (a launch script's default of 0 for an "
                                 "unset one gives every node rank 0)",
                                 format_list(hosts_of(rs)))
                   : fmt::format("each process needs its own RANK: check how RANK is set on {} "
                                 "(a RANK exported once in the job script is copied into every "
                                 "task)",
                                 format_list(hosts_of(rs))),
             rs);
    f.ranks = ranks;
    out.push_back(std::move(f));
  }
}

// Members out of range are grouped by the world size they claim and where their
// rank came from: 256 nodes given one wrong WORLD_SIZE are one finding, not 256.
void check_rank_range(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  std::map<std::tuple<long, std::string, bool>, Records> groups;
  for (const Member& m : v.members) {
    const Record& r = m.record;
    if (!r.in_range()) groups[{r.world_size, r.launcher, r.nranks > 1}].push_back(&r);
  }
  for (const auto& [key, rs] : groups) {
    const auto& [world, launcher, node_mode] = key;
    const Record& first = *rs.front();
    std::string message =
        rs.size() == 1
            ? fmt::format("{} is outside 0..{} for its own world size {}", member_label(first),
                          world - 1, world)
            : fmt::format("{} members claim ranks outside 0..{} for their own world size {}: {}",
                          rs.size(), world - 1, world, where(rs));
    std::string which = rs.size() == 1 ? "this process" : "these processes";
    std::string hint;
    if (launcher == "flags") {
      hint = node_mode ? "--node-rank must be below --nnodes (each node stands for "
                         "--nproc-per-node ranks)"
                       : "--rank must be below --world-size";
    } else if (node_mode) {
      hint = fmt::format(
          "NODE_RANK must be below NNODES (each node stands for NPROC_PER_NODE ranks): check "
          "the node rank {} got from {} on {}",
          which, printable(launcher, 32), format_list(hosts_of(rs)));
    } else {
      hint = fmt::format("RANK must be below WORLD_SIZE: check the {} {} got from {} on {}",
                         rs.size() == 1 ? "rank" : "ranks", which, printable(launcher, 32),
                         format_list(hosts_of(rs)));
    }
    out.push_back(make(FindingId::kRankOutOfRange, std::move(message), std::move(hint), rs));
  }
}

std::string conflict_text(const Conflict& c) {
  std::string s;
  for (size_t i = 0; i < c.values.size(); ++i) {
    if (i == 1) s += " but ";
    if (i > 1) s += ", ";
    s += fmt::format("{}={}", printable(c.values[i].variable), printable(c.values[i].value, 48));
  }
  return s;
}

void check_launcher_conflicts(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  // Members whose conflicts involve the same field and variables form one finding.
  std::map<std::pair<int, std::vector<std::string>>,
           std::vector<std::pair<const Record*, const Conflict*>>>
      groups;
  for (const Member& m : v.members) {
    for (const Conflict& c : m.record.conflicts) {
      if (c.values.empty()) continue;  // not from a decoded hello, which has two at least
      std::vector<std::string> vars;
      for (const Observation& o : c.values)
        vars.push_back(o.variable);
      groups[{static_cast<int>(c.field), vars}].emplace_back(&m.record, &c);
    }
  }
  for (const auto& [key, items] : groups) {
    Records rs;
    for (const auto& item : items)
      rs.push_back(item.first);
    const auto& [first_rec, first_conflict] = items.front();
    const std::string& used = first_conflict->values.front().variable;
    std::string message =
        items.size() == 1
            ? fmt::format("{}: {} (rankcheck used {})", member_label(*first_rec),
                          conflict_text(*first_conflict), printable(used))
            : fmt::format("{} members have conflicting {}: {}; e.g. {}: {} (rankcheck used {})",
                          items.size(), field_name(first_conflict->field), where(rs),
                          member_label(*first_rec), conflict_text(*first_conflict),
                          printable(used));
    out.push_back(make(FindingId::kLauncherEnvConflict, std::move(message),
                       fmt::format("two launchers, or a launcher and a hand-set variable, "
                                   "disagree about the {}: remove the stale value so that one "
                                   "launcher sets it",
                                   field_name(first_conflict->field)),
                       rs));
  }
}

void check_local_rank_collision(const CheckContext& ctx, std::vector<Finding>& out) {
  struct Claim {
    long local, global;
    const Record* rec;
  };
  std::vector<Claim> claims;
  for (const auto& [host, rs] : ctx.hosts) {
    claims.clear();
    for (const Record* r : rs) {
      if (r->local_rank < 0) continue;
      for (long k = 0; k < r->nranks; ++k)
        claims.push_back({r->local_rank + k, r->rank + k, r});
    }
    std::sort(claims.begin(), claims.end(), [](const Claim& a, const Claim& b) {
      return a.local != b.local ? a.local < b.local : a.global < b.global;
    });
    bool collision = false;
    for (size_t i = 1; i < claims.size() && !collision; ++i) {
      collision =
          claims[i].local == claims[i - 1].local && claims[i].global != claims[i - 1].global;
    }
    if (!collision) continue;
    std::vector<std::string> parts;
    Records involved;
    std::vector<long> ranks;
    for (size_t i = 0; i < claims.size();) {
      size_t j = i;
      std::vector<long> globals;
      Records recs;
      for (; j < claims.size() && claims[j].local == claims[i].local; ++j) {
        if (globals.empty() || globals.back() != claims[j].global) {
          globals.push_back(claims[j].global);
          recs.push_back(claims[j].rec);
        }
      }
      if (globals.size() > 1) {
        parts.push_back(
            fmt::format("local rank {} by ranks {}", claims[i].local, format_ranks(globals)));
        ranks.insert(ranks.end(), globals.begin(), globals.end());
        involved.insert(involved.end(), recs.begin(), recs.end());
      }
      i = j;
    }
    if (parts.empty()) continue;
    // A node-mode member collides on each of its local ranks: count it once.
    std::sort(involved.begin(), involved.end());
    involved.erase(std::unique(involved.begin(), involved.end()), involved.end());
    Finding f = make(FindingId::kLocalRankCollision,
                     fmt::format("on {}, {} members share a local rank: {}", printable(host),
                                 involved.size(), format_list(parts, 4)),
                     fmt::format("LOCAL_RANK picks the GPU: two processes on {} would use the "
                                 "same one. Check LOCAL_RANK / SLURM_LOCALID there",
                                 printable(host)),
                     involved);
    f.ranks = ranks;
    std::sort(f.ranks.begin(), f.ranks.end());
    out.push_back(std::move(f));
  }
}

void check_local_world_size(const CheckContext& ctx, std::vector<Finding>& out) {
  for (const auto& [host, rs] : ctx.hosts) {
    long ranks_here = 0;
    bool agree = true;
    for (const Record* r : rs) {
      ranks_here += r->nranks;
      agree = agree && r->local_world_size == rs.front()->local_world_size;
    }
    if (agree && (rs.front()->local_world_size < 1 || ranks_here <= rs.front()->local_world_size)) {
      continue;
    }
    std::map<long, Records> by_size;
    ranks_here = 0;
    for (const Record* r : rs) {
      ranks_here += r->nranks;
      if (r->local_world_size >= 1) by_size[r->local_world_size].push_back(r);
    }
    if (by_size.size() > 1) {
      std::string says;
      for (const auto& [size, group] : by_size) {
        if (!says.empty()) says += "; ";
        says += fmt::format("{} for {}", size, ranks_word(ranks_of(group)));
      }
      out.push_back(make(
          FindingId::kLocalWorldSizeMismatch,
          fmt::format("on {}, members disagree on LOCAL_WORLD_SIZE: {}", printable(host), says),
          "every process on a host must get the same LOCAL_WORLD_SIZE: check "
          "--nproc-per-node / --ntasks-per-node for that host",
          rs));
    } else if (by_size.size() == 1 && ranks_here > by_size.begin()->first) {
      out.push_back(make(FindingId::kLocalWorldSizeMismatch,
                         fmt::format("{} runs {} ranks but LOCAL_WORLD_SIZE is {}", printable(host),
                                     ranks_here, by_size.begin()->first),
                         "more processes were started on this host than the launcher was told: "
                         "check for a second launcher or a leftover job on it",
                         rs));
    }
  }
}

void check_ifname(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  std::map<std::pair<std::string, std::string>, Records> bad;  // (host, spec) -> members
  for (const Member& m : v.members) {
    for (const EnvVar& e : m.record.env) {
      if (ifname_selects_nothing(m.record, e)) {
        bad[{m.record.host, e.value}].push_back(&m.record);
      }
    }
  }
  for (const auto& [key, rs] : bad) {
    const auto& [host, spec] = key;
    out.push_back(make(
        FindingId::kNcclIfnameMissing,
        fmt::format("NCCL_SOCKET_IFNAME={} selects no interface with an address on {} ({}); it "
                    "has {}",
                    printable(spec, 48), printable(host), ranks_word(ranks_of(rs)),
                    rs.front()->interfaces.empty() ? std::string("none")
                                                   : format_list(rs.front()->interfaces.get(), 8)),
        fmt::format("NCCL fails at init when no interface matches: set NCCL_SOCKET_IFNAME to an "
                    "interface {} has (a prefix, '=name' for one exact name, '^' to exclude)",
                    printable(host)),
        rs));
  }
}

void check_protocol_mismatch(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  std::vector<std::string> peers;
  std::string reason;
  for (const Refusal& r : v.refused) {
    if (r.kind != RefusalKind::kVersion) continue;
    peers.push_back(r.peer);
    reason = r.reason;
  }
  if (peers.empty()) return;
  out.push_back(make_finding(
      FindingId::kProtocolMismatch,
      fmt::format("{} from {} refused: {}", plural(peers.size(), "connection", "connections"),
                  format_list(peers, 4), printable(reason, 160))));
}

void check_stray_connections(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  std::vector<std::string> peers;
  std::string reason;
  for (const Refusal& r : v.refused) {
    bool unverified_auth = r.kind == RefusalKind::kAuth && !r.record;
    if (r.kind != RefusalKind::kMalformed && !unverified_auth) continue;
    peers.push_back(r.peer);
    if (reason.empty()) reason = r.reason;
  }
  size_t unkept = v.refused_total > v.refused.size() ? v.refused_total - v.refused.size() : 0;
  if (peers.empty() && unkept == 0) return;
  out.push_back(make_finding(
      FindingId::kStrayConnection,
      fmt::format(
          "{} to the master port {} not a member of this job and {} closed{}: first "
          "from {}: {}",
          plural(peers.size() + unkept, "connection", "connections"),
          peers.size() + unkept == 1 ? "was" : "were", peers.size() + unkept == 1 ? "was" : "were",
          unkept > 0 ? fmt::format(" ({} not itemised)", unkept) : std::string(),
          peers.empty() ? std::string("?") : printable(peers.front()), printable(reason, 160))));
}

void check_departed(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  for (const Departure& d : v.departed) {
    if (ctx.present(d.record.rank)) continue;  // it came back
    out.push_back(make(
        FindingId::kMemberDisconnected,
        fmt::format("{} joined at +{} and its connection closed at +{}, before the verdict",
                    member_label(d.record), format_seconds(d.joined_ms), format_seconds(d.left_ms)),
        fmt::format("the process died or was killed after joining: check its log on {} (an OOM "
                    "kill, a crash, a network reset)",
                    printable(d.record.host)),
        {&d.record}));
  }
}

// Silent connections from one address that held the master's handshake slots:
// the cause when ranks are missing (they waited behind it), a warning otherwise.
void check_connection_flood(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  bool missing = false;
  for (long k = 0; k < ctx.expected_world && !missing; ++k)
    missing = !ctx.present(k);
  for (const Refusal& r : v.refused) {
    if (r.kind != RefusalKind::kFlood) continue;
    out.push_back(make_finding(
        FindingId::kConnectionFlood,
        fmt::format(
            "a flood of connections reached the master: {}{}", printable(r.reason, 200),
            missing ? "; ranks still missing at the deadline may have waited behind it" : ""),
        {}, missing ? Severity::kError : Severity::kWarning));
  }
}

}  // namespace rankcheck
