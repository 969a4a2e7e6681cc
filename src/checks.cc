#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include <rankcheck/checks.h>
#include <rankcheck/text.h>

namespace rankcheck {
namespace {

using Records = std::vector<const Record*>;

std::vector<long> ranks_of(const Records& rs) {
  std::vector<long> out;
  for (const Record* r : rs) {
    for (long k = r->rank; k <= r->last_rank(); ++k)
      out.push_back(k);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::string> hosts_of(const Records& rs) {
  std::set<std::string> hosts;
  for (const Record* r : rs)
    hosts.insert(r->host);
  return {hosts.begin(), hosts.end()};
}

// Our own composed parts, already escaped: joined without cutting them.
std::string join(const std::vector<std::string>& parts, std::string_view sep, size_t max) {
  std::string out;
  for (size_t i = 0; i < parts.size() && i < max; ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  if (parts.size() > max) out += fmt::format("{}and {} more", sep, parts.size() - max);
  return out;
}

std::string ranks_word(const std::vector<long>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", format_ranks(ranks));
}

// "ranks 0-6 on gpu-01", "rank 7 on gpu-02", "ranks 0-63 on 8 hosts".
std::string where(const Records& rs) {
  auto hosts = hosts_of(rs);
  std::string on = hosts.size() <= 3 ? format_list(hosts) : plural(hosts.size(), "host", "hosts");
  return fmt::format("{} on {}", ranks_word(ranks_of(rs)), on);
}

Finding make(std::string_view id, Severity sev, int code, std::string message, std::string hint,
             const Records& about) {
  return Finding{std::string(id), sev, code, std::move(message), std::move(hint), ranks_of(about),
                 hosts_of(about)};
}

// The world size missing ranks are counted against: the master's, unless the
// members disagree, in which case the one most ranks claim (ties: the master's).
long expected_world(const JobView& v) {
  bool agree = true;
  for (const Member& m : v.members)
    agree = agree && m.record.world_size == v.world_size;
  if (agree) return std::clamp(v.world_size, 1L, kMaxWorldSize);
  std::map<long, long> votes;
  for (const Member& m : v.members)
    votes[m.record.world_size] += m.record.nranks;
  long best = v.world_size;
  long best_votes = votes.count(best) ? votes[best] : 0;
  for (auto [w, n] : votes) {
    if (n > best_votes) best = w, best_votes = n;
  }
  return std::clamp(best, 1L, kMaxWorldSize);
}

}  // namespace

// Built once per decision: at 16k members, rules that each rebuilt maps of ranks
// and hosts took longer than the target for the whole decision.
struct CheckContext {
  explicit CheckContext(const JobView& v) : view(v), expected_world(rankcheck::expected_world(v)) {
    claims.assign(static_cast<size_t>(expected_world), 0);
    std::unordered_map<std::string_view, size_t> host_index;
    for (const Member& m : v.members) {
      const Record& r = m.record;
      for (long k = r.rank; k <= r.last_rank(); ++k) {
        if (k >= 0 && k < expected_world) {
          if (++claims[size_t(k)] > 1) duplicates = true;
        } else {
          outside.push_back(k);
        }
      }
      auto [it, fresh] = host_index.try_emplace(r.host, hosts.size());
      if (fresh) hosts.emplace_back(r.host, Records{});
      hosts[it->second].second.push_back(&r);
      multi_host = multi_host || spans_hosts(r);
    }
    std::sort(outside.begin(), outside.end());
    duplicates = duplicates || std::adjacent_find(outside.begin(), outside.end()) != outside.end();
    std::sort(hosts.begin(), hosts.end());
    multi_host = multi_host || hosts.size() > 1;
  }

  bool present(long k) const { return k >= 0 && k < expected_world && claims[size_t(k)] > 0; }

  const JobView& view;
  long expected_world;
  std::vector<uint32_t> claims;  // members claiming each rank in [0, expected_world)
  std::vector<long> outside;     // claimed ranks outside it, sorted
  bool duplicates = false;       // some rank claimed twice
  std::vector<std::pair<std::string_view, Records>> hosts;  // members by host name, sorted
  bool multi_host = false;
};

namespace {

// ---------------------------------------------------------------------------

// The host part of a peer "10.0.0.12:4242" or "[::1]:4242".
std::string_view peer_host(std::string_view peer) {
  if (!peer.empty() && peer.front() == '[') return peer.substr(1, peer.find(']') - 1);
  return peer.substr(0, peer.rfind(':'));
}

void check_master_addr_loopback(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (v.master_resolved.empty()) return;
  for (const auto& a : v.master_resolved) {
    if (!is_loopback_address(a)) return;
  }
  // Members that came in over loopback share the master's machine: for them a
  // loopback master works. It fails a member that arrived from elsewhere (the
  // master then listens on every interface), and ranks a multi-host layout expects.
  bool remote_member = false;  // arrived from another machine
  bool local_other = false;    // another host name, but over loopback: one machine
  long ranks = 0;
  for (const Member& m : v.members) {
    ranks += m.record.nranks;
    if (m.peer.find(':') == std::string::npos) continue;  // the master's own
    bool loop = is_loopback_address(peer_host(m.peer));
    remote_member = remote_member || !loop;
    local_other = local_other || (loop && m.record.host != v.master_host);
  }
  bool missing = ranks < v.world_size;
  if (!remote_member && !(missing && !local_other && ctx.multi_host)) return;
  Records master;
  for (const Member& m : v.members) {
    if (m.record.rank == 0) master.push_back(&m.record);
  }
  Finding f = make(
      "master-addr-loopback", Severity::kError, exit_code::kMismatch,
      fmt::format("MASTER_ADDR {} resolves to {} (loopback) on the master's host {}, but the job "
                  "spans more than one host: ranks on other hosts cannot reach a master there",
                  printable(v.master_addr), format_list(v.master_resolved),
                  printable(v.master_host)),
      fmt::format("set MASTER_ADDR to an address of {} that the other hosts reach (its cluster "
                  "network IP), or fix /etc/hosts on {}, which maps the name to loopback",
                  printable(v.master_host), printable(v.master_host)),
      master);
  if (f.hosts.empty()) f.hosts.push_back(v.master_host);
  out.push_back(std::move(f));
}

void check_foreign_job(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  for (const Refusal& r : v.refused) {
    if (r.kind != RefusalKind::kForeignJob || !r.record) continue;
    const Record& rec = *r.record;
    bool explains_missing = false;
    for (long k = rec.rank; k <= rec.last_rank(); ++k) {
      if (k >= 0 && k < ctx.expected_world && !ctx.present(k)) explains_missing = true;
    }
    std::string who = fmt::format("{} from {}", member_label(rec), printable(r.peer));
    std::string hint =
        "give each job its own MASTER_PORT, and check that every process of this job has the "
        "same SLURM_JOB_ID / TORCHELASTIC_RUN_ID / --job-id";
    if (explains_missing) {
      out.push_back(make("foreign-job", Severity::kError, exit_code::kRejected,
                         fmt::format("{} was refused: it says job '{}', this master serves job "
                                     "'{}', so its rank is missing here",
                                     who, printable(rec.job_id), printable(v.job_id)),
                         hint, {&rec}));
    } else {
      out.push_back(make("foreign-job", Severity::kWarning, exit_code::kRejected,
                         fmt::format("a process of job '{}' ({}) reached this master (job '{}') "
                                     "and was refused",
                                     printable(rec.job_id), who, printable(v.job_id)),
                         hint, {&rec}));
    }
  }
}

// A hello without this job's token: what it claims is unverified, but worth saying.
void check_auth_failed(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  for (const Refusal& r : v.refused) {
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
    out.push_back(make("auth-failed", explains_missing ? Severity::kError : Severity::kWarning,
                       exit_code::kRejected,
                       fmt::format("{} was refused: {}{}", who, printable(r.reason, 200),
                                   explains_missing ? "; that rank is missing here" : ""),
                       hint, {&rec}));
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
  for (const auto& [size, rs] : groups) {
    if (!says.empty()) says += "; ";
    says += fmt::format("{} say {}", where(rs), size);
    if (size != expected) odd.insert(odd.end(), rs.begin(), rs.end());
  }
  out.push_back(make("world-size-mismatch", Severity::kError, exit_code::kMismatch,
                     fmt::format("members disagree on the world size: {}", says),
                     fmt::format("every process must get the same WORLD_SIZE; most say {} (the "
                                 "master says {}): fix the launcher arguments or the exported "
                                 "WORLD_SIZE on {}",
                                 expected, v.world_size, format_list(hosts_of(odd))),
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
    Finding f = make("duplicate-rank", Severity::kError, exit_code::kMismatch,
                     fmt::format("{} {} claimed by {} members: {}", ranks_word(ranks),
                                 ranks.size() == 1 ? "is" : "are", who.size(), format_list(names)),
                     fmt::format("each process needs its own RANK: check how RANK is set on {} "
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
    out.push_back(make("rank-out-of-range", Severity::kError, exit_code::kMismatch,
                       std::move(message), std::move(hint), rs));
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
    out.push_back(make("launcher-env-conflict", Severity::kError, exit_code::kMismatch,
                       std::move(message),
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
    Finding f = make("local-rank-collision", Severity::kError, exit_code::kMismatch,
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
          "local-world-size-mismatch", Severity::kError, exit_code::kMismatch,
          fmt::format("on {}, members disagree on LOCAL_WORLD_SIZE: {}", printable(host), says),
          "every process on a host must get the same LOCAL_WORLD_SIZE: check "
          "--nproc-per-node / --ntasks-per-node for that host",
          rs));
    } else if (by_size.size() == 1 && ranks_here > by_size.begin()->first) {
      out.push_back(make("local-world-size-mismatch", Severity::kError, exit_code::kMismatch,
                         fmt::format("{} runs {} ranks but LOCAL_WORLD_SIZE is {}", printable(host),
                                     ranks_here, by_size.begin()->first),
                         "more processes were started on this host than the launcher was told: "
                         "check for a second launcher or a leftover job on it",
                         rs));
    }
  }
}

// NCCL reads NCCL_SOCKET_IFNAME only when it is longer than one character
// (ncclFindInterfaces: strlen(env) > 1); a shorter value leaves NCCL to pick the
// interface itself, so it selects nothing that could be missing.
bool nccl_uses_ifname(std::string_view value) {
  return value.size() > 1;
}

// The NCCL_SOCKET_IFNAME a record sets that NCCL would use and that matches none
// of its host's interfaces.
bool ifname_selects_nothing(const Record& r, const EnvVar& e) {
  return e.name == "NCCL_SOCKET_IFNAME" && nccl_uses_ifname(e.value) &&
         !ifname_matches_any(e.value, r.interfaces.get());
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
        "nccl-ifname-missing", Severity::kError, exit_code::kMismatch,
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

void check_master_addr_mismatch(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (v.members.empty()) return;
  const Record& first = v.members.front().record;
  bool same = true;
  for (const Member& m : v.members) {
    same = same && m.record.master_addr == first.master_addr &&
           m.record.master_port == first.master_port &&
           m.record.master_resolved == first.master_resolved;
  }
  if (same) return;
  std::map<std::string, Records> by_addr;
  for (const Member& m : v.members) {
    by_addr[fmt::format("{}:{}", m.record.master_addr, m.record.master_port)].push_back(&m.record);
  }
  if (by_addr.size() > 1) {
    std::string parts;
    Records all;
    for (const auto& [addr, rs] : by_addr) {
      if (!parts.empty()) parts += "; ";
      parts += fmt::format("{} for {}", printable(addr), where(rs));
      all.insert(all.end(), rs.begin(), rs.end());
    }
    out.push_back(make("master-addr-mismatch", Severity::kWarning, exit_code::kMismatch,
                       fmt::format("members were given different master addresses: {}. All "
                                   "reached this master, but the training job may not",
                                   parts),
                       "give every process the same MASTER_ADDR and MASTER_PORT", all));
  }
  // The same name resolving differently on different hosts (loopback is its own rule).
  for (const auto& [addr, rs] : by_addr) {
    std::map<std::vector<std::string>, Records> by_result;
    for (const Record* r : rs) {
      std::vector<std::string> res;
      for (const auto& a : r->master_resolved) {
        if (!is_loopback_address(a)) res.push_back(a);
      }
      std::sort(res.begin(), res.end());
      if (!res.empty()) by_result[res].push_back(r);
    }
    if (by_result.size() < 2) continue;
    std::string parts;
    Records all;
    for (const auto& [res, group] : by_result) {
      if (!parts.empty()) parts += " but to ";
      parts += fmt::format("{} for {}", format_list(res, 4), where(group));
      all.insert(all.end(), group.begin(), group.end());
    }
    out.push_back(make(
        "master-addr-mismatch", Severity::kWarning, exit_code::kMismatch,
        fmt::format("MASTER_ADDR {} resolves to {}", printable(rs.front()->master_addr), parts),
        "make the name resolve the same everywhere (DNS, /etc/hosts), or use the "
        "master's IP address",
        all));
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
  out.push_back(Finding{
      "protocol-mismatch",
      Severity::kWarning,
      exit_code::kRejected,
      fmt::format("{} from {} refused: {}", plural(peers.size(), "connection", "connections"),
                  format_list(peers, 4), printable(reason, 160)),
      "run the same rankcheck build on every host",
      {},
      {}});
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
  out.push_back(Finding{
      "stray-connection",
      Severity::kWarning,
      exit_code::kRejected,
      fmt::format(
          "{} to the master port {} not a member of this job and {} closed{}: first "
          "from {}: {}",
          plural(peers.size() + unkept, "connection", "connections"),
          peers.size() + unkept == 1 ? "was" : "were", peers.size() + unkept == 1 ? "was" : "were",
          unkept > 0 ? fmt::format(" ({} not itemised)", unkept) : std::string(),
          peers.empty() ? std::string("?") : printable(peers.front()), printable(reason, 160)),
      "something else on the network talks to MASTER_PORT: a port scanner, a health check, or "
      "a process of another run; harmless to this check unless it repeats",
      {},
      {}});
}

void check_departed(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  for (const Departure& d : v.departed) {
    if (ctx.present(d.record.rank)) continue;  // it came back
    out.push_back(make(
        "member-disconnected", Severity::kError, exit_code::kIncomplete,
        fmt::format("{} joined at +{} and its connection closed at +{}, before the verdict",
                    member_label(d.record), format_seconds(d.joined_ms), format_seconds(d.left_ms)),
        fmt::format("the process died or was killed after joining: check its log on {} (an OOM "
                    "kill, a crash, a network reset)",
                    printable(d.record.host)),
        {&d.record}));
  }
}

// Where a missing rank was expected to run.
class Layout {
 public:
  explicit Layout(const JobView& v, long world) {
    // The launcher's node list says it outright (Slurm).
    for (const Member& m : v.members) {
      const Record& r = m.record;
      if (r.node_list.empty() || r.tasks_per_node.empty()) continue;
      auto tasks = expand_tasks_per_node(r.tasks_per_node);
      if (!tasks) break;
      long total = 0;
      for (int t : *tasks)
        total += t;
      if (total != world) break;  // not this job's layout: expand nothing more
      auto hosts = expand_hostlist(r.node_list);
      if (!hosts || hosts->size() != tasks->size()) break;
      auto node_of = node_of_each_rank(*tasks, static_cast<Distribution>(r.distribution));
      if (static_cast<long>(node_of.size()) != world) break;
      node_of_rank_ = std::move(node_of);  // an index per rank, not a copy of its host
      nodes_ = std::move(*hosts);
      return;
    }
    // Otherwise the members of a host tell it: ranks base..base+lws-1 with
    // base = rank - local_rank (torchrun and srun --distribution=block). Not when a
    // launcher dealt ranks some other way (Slurm's plane, arbitrary): a node's ranks
    // are then not consecutive, and neither are whole nodes' worth of missing ranks.
    bool lws_agree = true;
    for (const Member& m : v.members) {
      const Record& r = m.record;
      if (r.distribution == static_cast<uint8_t>(Distribution::kUnknown)) {
        blocks_.clear();
        lws_ = 0;
        return;
      }
      if (r.local_rank < 0 || r.local_world_size < 1 || r.local_rank >= r.local_world_size) {
        continue;
      }
      blocks_.push_back({r.rank - r.local_rank, r.local_world_size, r.host});
      if (lws_ == 0) lws_ = r.local_world_size;
      lws_agree = lws_agree && r.local_world_size == lws_;
    }
    if (!lws_agree) lws_ = 0;
    std::sort(blocks_.begin(), blocks_.end(),
              [](const Block& a, const Block& b) { return a.base < b.base; });
  }

  /// The expected host, or "" when nothing tells it; `local` gets the local rank.
  std::string_view host_of(long rank, long* local) const {
    *local = -1;
    if (!node_of_rank_.empty()) {
      if (rank < 0 || rank >= long(node_of_rank_.size())) return {};
      return nodes_[size_t(node_of_rank_[size_t(rank)])];
    }
    auto it = std::upper_bound(blocks_.begin(), blocks_.end(), rank,
                               [](long k, const Block& b) { return k < b.base; });
    if (it == blocks_.begin()) return {};
    --it;
    if (rank >= it->base + it->size) return {};
    *local = rank - it->base;
    return it->host;
  }
  /// Ranks per node when the members agree on it (and ranks fill nodes in order), else 0.
  long ranks_per_node() const { return lws_; }

 private:
  struct Block {
    long base;
    long size;
    std::string_view host;  // the member's record, which outlives the layout
  };
  std::vector<int> node_of_rank_;   // index into nodes_, per rank
  std::vector<std::string> nodes_;  // the launcher's node list, expanded
  std::vector<Block> blocks_;
  long lws_ = 0;
};

// The part of a host name before its first dot. Slurm names nodes by their short
// name while gethostname() may give the FQDN (or the other way round).
std::string_view short_name(std::string_view host) {
  return host.substr(0, host.find('.'));
}

void check_missing(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  long world = ctx.expected_world;
  std::vector<char> accounted(static_cast<size_t>(world), 0);
  for (long k = 0; k < world; ++k)
    accounted[size_t(k)] = ctx.claims[size_t(k)] > 0;
  auto mark = [&](const Record& r) {
    for (long k = std::max(0L, long(r.rank)); k <= r.last_rank() && k < world; ++k) {
      accounted[size_t(k)] = 1;
    }
  };
  // Ranks explained by another finding are not reported twice.
  for (const Departure& d : v.departed)
    mark(d.record);
  for (const Refusal& r : v.refused) {
    bool explained = r.kind == RefusalKind::kForeignJob || r.kind == RefusalKind::kAuth;
    if (explained && r.record) mark(*r.record);
  }
  std::vector<long> missing;
  for (long k = 0; k < world; ++k) {
    if (!accounted[size_t(k)]) missing.push_back(k);
  }
  if (missing.empty()) return;

  std::map<std::string_view, const Records*> sent;        // host -> members that joined from it
  std::map<std::string_view, std::string_view> by_short;  // short name -> host; "": several
  for (const auto& [host, rs] : ctx.hosts) {
    sent[host] = &rs;
    auto [it, fresh] = by_short.try_emplace(short_name(host), host);
    if (!fresh && it->second != host) it->second = {};
  }
  // The name members joined under for a host the layout names: the same name, or the
  // one with the same short name ("gpu-02" in the node list, "gpu-02.example.com").
  auto joined_as = [&](std::string_view host) -> std::string_view {
    if (host.empty() || sent.count(host)) return host;
    auto it = by_short.find(short_name(host));
    return it == by_short.end() || it->second.empty() ? host : it->second;
  };
  Layout layout(v, world);
  std::map<std::string_view, std::vector<std::pair<long, long>>> by_host;  // (rank, local)
  for (long k : missing) {
    long local = -1;
    by_host[joined_as(layout.host_of(k, &local))].push_back({k, local});
  }

  // Members that claimed a rank twice or out of range may be the missing ones.
  long misplaced = 0;
  std::map<long, int> claims;
  for (const Member& m : v.members) {
    if (!m.record.in_range() || m.record.world_size != world) misplaced += m.record.nranks;
    for (long k = m.record.rank; k <= m.record.last_rank(); ++k) {
      if (++claims[k] > 1) ++misplaced;
    }
  }
  std::string also =
      misplaced > 0 ? fmt::format(
                          "; {} claimed a rank twice or out of range (see the findings above): the "
                          "missing ranks were probably given the wrong RANK",
                          plural(size_t(misplaced), "member", "members"))
                    : std::string();
  std::string reach = fmt::format("{}:{}", printable(v.master_addr), v.master_port);
  const char* verb = v.timed_out ? "never joined" : "did not join";

  std::vector<std::pair<std::string, std::vector<long>>> whole_hosts;
  for (const auto& [host, items] : by_host) {
    std::vector<long> ranks;
    for (const auto& item : items)
      ranks.push_back(item.first);
    Finding f{"missing-rank", Severity::kError, exit_code::kIncomplete, "", "", ranks, {}};
    if (host.empty()) {
      long per_node = layout.ranks_per_node();
      bool whole_nodes =
          per_node > 0 && ranks.size() % size_t(per_node) == 0 && ranks.front() % per_node == 0;
      for (size_t i = 1; whole_nodes && i < ranks.size(); ++i) {
        whole_nodes = ranks[i] == ranks[i - 1] + 1 || ranks[i] % per_node == 0;
      }
      f.message = fmt::format(
          "{} {}{}", ranks_word(ranks), verb,
          whole_nodes
              ? fmt::format(": {} of {} ranks, as if {} never started",
                            ranks.size() == size_t(per_node) ? "a whole node" : "whole nodes",
                            per_node,
                            ranks.size() == size_t(per_node)
                                ? fmt::format("node {}", ranks.front() / per_node)
                                : std::string("those nodes"))
              : std::string());
      f.hint = fmt::format(
          "no member names their host: check that those processes were "
          "started, and that their hosts resolve and reach {}{}",
          reach, also);
    } else if (sent.count(host)) {
      std::vector<long> got = ranks_of(*sent[host]);
      std::string locals;
      if (items.size() <= 4 && items.front().second >= 0) {
        for (const auto& item : items) {
          locals += fmt::format("{}{}", locals.empty() ? ", local rank " : ",", item.second);
        }
      }
      f.message = fmt::format("{} {} (expected on {}{}): {} sent {} but not {}", ranks_word(ranks),
                              verb, printable(host), locals, printable(host), ranks_word(got),
                              format_ranks(ranks));
      f.hint = fmt::format(
          "the process for {} on {} was not started or died early: compare the "
          "launcher's task count on {} with --ntasks-per-node / "
          "--nproc-per-node, and check its log{}",
          ranks.size() == 1 ? "that rank" : "those ranks", printable(host), printable(host), also);
      f.hosts = {std::string(host)};
    } else {
      whole_hosts.emplace_back(host, ranks);
      continue;
    }
    out.push_back(std::move(f));
  }
  // A host that sent nothing is one finding; many such hosts share one.
  auto host_hint = [&](const std::string& hosts) {
    return fmt::format(
        "{} did not start the job, or cannot reach the master at {}: check that "
        "it is up, resolves MASTER_ADDR and reaches that port{}",
        hosts, reach, also);
  };
  if (whole_hosts.size() <= 4) {
    for (const auto& [host, ranks] : whole_hosts) {
      out.push_back(Finding{"missing-rank",
                            Severity::kError,
                            exit_code::kIncomplete,
                            fmt::format("{} {}: all {} of its ranks ({}) are missing",
                                        printable(host), verb, ranks.size(), format_ranks(ranks)),
                            host_hint(printable(host)),
                            ranks,
                            {host}});
    }
  } else {
    Finding f{"missing-rank", Severity::kError, exit_code::kIncomplete, "", "", {}, {}};
    std::vector<std::string> parts;
    for (const auto& [host, ranks] : whole_hosts) {
      f.ranks.insert(f.ranks.end(), ranks.begin(), ranks.end());
      f.hosts.push_back(host);
      parts.push_back(fmt::format("{} ({})", host, format_ranks(ranks)));
    }
    std::sort(f.ranks.begin(), f.ranks.end());
    f.message = fmt::format("{} hosts {}, with all their ranks: {}", whole_hosts.size(), verb,
                            format_list(parts, 6));
    f.hint = host_hint("those hosts");
    out.push_back(std::move(f));
  }
}

// ----- GPUs, decided before any NCCL call -----------------------------------

const char* state_text(GpuState s) {
  switch (s) {
    case GpuState::kUsable:
      return "usable";
    case GpuState::kSkipped:
      return "skipped (--no-gpu)";
    case GpuState::kNoDriver:
      return "no CUDA driver";
    case GpuState::kInitFailed:
      return "CUDA init failed";
    case GpuState::kNoDevice:
      return "no GPU";
    case GpuState::kUnavailable:
      return "GPU stage not built";
  }
  return "?";
}

// Members grouped by a key, the largest group first: "who says what".
template <class Key, class Fn>
std::vector<std::pair<Key, Records>> group_by(const JobView& v, Fn key_of) {
  std::map<Key, Records> groups;
  for (const Member& m : v.members) {
    if (auto k = key_of(m.record)) groups[*k].push_back(&m.record);
  }
  std::vector<std::pair<Key, Records>> out(groups.begin(), groups.end());
  // Largest first; between equals, the one with the lowest rank (the master's side).
  auto lowest = [](const Records& rs) {
    long low = kMaxWorldSize;
    for (const Record* r : rs)
      low = std::min(low, long(r->rank));
    return low;
  };
  std::stable_sort(out.begin(), out.end(), [&](const auto& a, const auto& b) {
    if (a.second.size() != b.second.size()) return a.second.size() > b.second.size();
    return lowest(a.second) < lowest(b.second);
  });
  return out;
}

bool any_usable(const JobView& v) {
  return std::any_of(v.members.begin(), v.members.end(),
                     [](const Member& m) { return m.record.gpu.usable(); });
}

void check_duplicate_gpu(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!v.gpu_stage) return;
  // Two ranks on one host with one GPU UUID.
  std::map<std::pair<std::string, std::string>,
           std::vector<std::pair<const Record*, const GpuDevice*>>>
      by_uuid;
  for (const Member& m : v.members) {
    for (const GpuDevice& d : m.record.gpu.devices) {
      if (!d.uuid.empty()) by_uuid[{m.record.host, d.uuid}].emplace_back(&m.record, &d);
    }
  }
  for (const auto& [key, users] : by_uuid) {
    const std::string& uuid = key.second;
    if (users.size() < 2) continue;
    Records rs;
    std::vector<std::string> how;
    std::vector<long> ranks;
    for (const auto& [rec, dev] : users) {
      rs.push_back(rec);
      ranks.push_back(dev->rank);
      std::string cvd =
          rec->gpu.visible_devices.empty()
              ? std::string("CUDA_VISIBLE_DEVICES unset")
              : fmt::format("CUDA_VISIBLE_DEVICES={}", printable(rec->gpu.visible_devices, 40));
      how.push_back(fmt::format("rank {} (LOCAL_RANK={}, {}, device {})", dev->rank,
                                rec->local_rank, cvd, dev->ordinal));
    }
    Finding f = make("duplicate-gpu", Severity::kError, exit_code::kMismatch,
                     fmt::format("{} on {} use the same GPU {}: {}", ranks_word(ranks),
                                 printable(key.first), printable(uuid, 64), join(how, "; ", 4)),
                     "NCCL refuses two ranks on one GPU at init, after every other rank has "
                     "waited: give each process its own device (LOCAL_RANK must differ, and "
                     "CUDA_VISIBLE_DEVICES must not pin them to one GPU)",
                     rs);
    f.ranks = ranks;
    std::sort(f.ranks.begin(), f.ranks.end());
    out.push_back(std::move(f));
  }
}

void check_nccl_version(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!v.gpu_stage) return;
  auto groups = group_by<int32_t>(v, [](const Record& r) -> std::optional<int32_t> {
    if (!r.gpu.usable() || !r.gpu.nccl_loaded()) return std::nullopt;
    return r.gpu.nccl_version;
  });
  if (groups.size() < 2) return;
  std::string parts;
  Records odd;
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& [version, rs] = groups[i];
    if (!parts.empty()) parts += i + 1 == groups.size() ? " but " : ", ";
    parts += fmt::format("{} loads NCCL {} ({})", where(rs), nccl_version_text(version),
                         printable(rs.front()->gpu.nccl_path, 80));
    if (i > 0) odd.insert(odd.end(), rs.begin(), rs.end());
  }
  out.push_back(make("nccl-version-mismatch", Severity::kError, exit_code::kMismatch,
                     fmt::format("hosts load different NCCL versions: {}", parts),
                     "every rank must load the same NCCL: install one version everywhere, or "
                     "point --nccl-lib (RANKCHECK_NCCL_LIB) at the library the training job "
                     "loads, e.g. the one inside its PyTorch",
                     odd));
}

void check_gpu_usable(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!v.gpu_stage || !any_usable(v)) return;
  // Hosts without a usable driver, and ranks without a device, while others have them.
  auto groups = group_by<std::pair<int, std::string>>(
      v, [](const Record& r) -> std::optional<std::pair<int, std::string>> {
        if (r.gpu.usable()) return std::nullopt;
        return std::pair{static_cast<int>(r.gpu.state), r.gpu.error};
      });
  for (const auto& [key, rs] : groups) {
    auto state = static_cast<GpuState>(key.first);
    bool node = rs.front()->nranks > 1 && state == GpuState::kNoDevice;
    std::string id = state == GpuState::kNoDriver || state == GpuState::kInitFailed ||
                             state == GpuState::kUnavailable
                         ? "cuda-driver-missing"
                     : node ? "gpu-count-mismatch"
                            : "gpu-missing";
    std::string hint =
        state == GpuState::kUnavailable
            ? "the rankcheck on that host was built without the CUDA and NCCL headers, so it "
              "cannot probe GPUs: run the same GPU-enabled build on every host (rebuild with "
              "cuda.h and nccl.h installed), or pass --no-gpu to every process"
        : state == GpuState::kSkipped
            ? "pass --no-gpu to every process or to none: the NCCL stage runs only when every "
              "rank probes its GPUs"
        : id == "cuda-driver-missing"
            ? "install or load the NVIDIA driver on that host (and in the container: the "
              "NVIDIA container runtime mounts libcuda.so.1)"
        : id == "gpu-count-mismatch"
            ? "give the node as many GPUs as --nproc-per-node (the pod's nvidia.com/gpu limit, "
              "Slurm's --gpus-per-node), or lower --nproc-per-node"
            : "give every rank a GPU: check the job's GPU request (--gpus-per-task, "
              "nvidia.com/gpu) and CUDA_VISIBLE_DEVICES on that host";
    std::string why = key.second.empty() ? "" : ": " + printable(key.second, 200);
    out.push_back(make(id, Severity::kError, exit_code::kGpu,
                       fmt::format("{} for {}, while the other ranks have GPUs{}",
                                   state_text(state), where(rs), why),
                       hint, rs));
  }
}

void check_nccl_missing(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!v.gpu_stage) return;
  auto groups = group_by<std::string>(v, [](const Record& r) -> std::optional<std::string> {
    if (!r.gpu.usable() || r.gpu.nccl_loaded()) return std::nullopt;
    return r.gpu.nccl_error;
  });
  for (const auto& [error, rs] : groups) {
    out.push_back(make("nccl-missing", Severity::kError, exit_code::kGpu,
                       fmt::format("NCCL not found for {}: {}", where(rs), printable(error, 200)),
                       "install NCCL on that host, or point --nccl-lib (RANKCHECK_NCCL_LIB) at "
                       "the libnccl.so.2 the training job loads",
                       rs));
  }
}

void check_cuda_driver_mismatch(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!v.gpu_stage) return;
  auto groups = group_by<std::pair<int32_t, std::string>>(
      v, [](const Record& r) -> std::optional<std::pair<int32_t, std::string>> {
        if (!r.gpu.usable()) return std::nullopt;
        return std::pair{r.gpu.cuda_version, r.gpu.driver};
      });
  if (groups.size() < 2) return;
  std::string parts;
  Records odd;
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& [key, rs] = groups[i];
    if (!parts.empty()) parts += "; ";
    parts += fmt::format("{} on {}",
                         key.second.empty()
                             ? "CUDA " + cuda_version_text(key.first)
                             : fmt::format("driver {} (CUDA {})", printable(key.second, 32),
                                           cuda_version_text(key.first)),
                         where(rs));
    if (i > 0) odd.insert(odd.end(), rs.begin(), rs.end());
  }
  out.push_back(make("cuda-driver-mismatch", Severity::kWarning, exit_code::kMismatch,
                     fmt::format("hosts run different NVIDIA drivers: {}", parts),
                     "usually harmless for NCCL, but a mixed fleet hides bugs: upgrade the "
                     "stragglers",
                     odd));
}

void check_gpu_unavailable(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  if (!v.gpu_stage || v.members.empty() || any_usable(v)) return;
  auto groups = group_by<std::string>(v, [](const Record& r) -> std::optional<std::string> {
    if (r.gpu.error.empty()) return std::string(state_text(r.gpu.state));
    return fmt::format("{} ({})", state_text(r.gpu.state), r.gpu.error);
  });
  std::string why =
      fmt::format("{}: {}", where(groups.front().second), printable(groups.front().first, 200));
  if (groups.size() > 1) why += fmt::format(" (and {} other reasons)", groups.size() - 1);
  out.push_back(
      Finding{"gpu-unavailable",
              Severity::kWarning,
              exit_code::kGpu,
              fmt::format("no member has a usable GPU, so the NCCL stage did not run; {}", why),
              "expected on a machine without GPUs (pass --no-gpu to say so); on a GPU "
              "node, check the driver and the container runtime",
              {},
              {}});
}

void check_env_mismatch(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  // Compare digests first: 16k members with one environment cost one comparison each.
  bool same = true;
  for (const Member& m : v.members) {
    same = same && m.record.env_digest == v.members.front().record.env_digest;
  }
  if (same) return;
  std::map<uint64_t, Records> groups;
  for (const Member& m : v.members)
    groups[m.record.env_digest].push_back(&m.record);
  if (groups.size() < 2) return;
  std::set<std::string> names;
  for (const auto& [digest, rs] : groups) {
    for (const EnvVar& e : rs.front()->env)
      names.insert(e.name);
  }
  for (const std::string& name : names) {
    std::map<std::optional<std::string>, Records> by_value;  // nullopt: unset
    for (const auto& [digest, rs] : groups) {
      std::optional<std::string> value;
      const auto& env = rs.front()->env.get();  // sorted by name (checked at decoding)
      auto it = std::lower_bound(env.begin(), env.end(), name,
                                 [](const EnvVar& e, const std::string& n) { return e.name < n; });
      if (it != env.end() && it->name == name) value = it->value;
      by_value[value].insert(by_value[value].end(), rs.begin(), rs.end());
    }
    if (by_value.size() < 2) continue;
    // The most common value first; "unset" after the values someone set.
    std::vector<std::pair<std::optional<std::string>, Records>> vals(by_value.begin(),
                                                                     by_value.end());
    std::stable_sort(vals.begin(), vals.end(), [](const auto& a, const auto& b) {
      if (a.second.size() != b.second.size()) return a.second.size() > b.second.size();
      return a.first.has_value() && !b.first.has_value();
    });
    std::string parts;
    Records odd;
    for (size_t i = 0; i < vals.size(); ++i) {
      const auto& [value, rs] = vals[i];
      if (!parts.empty()) parts += "; ";
      parts +=
          fmt::format("{} for {}", value ? printable(*value, 48) : std::string("unset"), where(rs));
      if (i > 0) odd.insert(odd.end(), rs.begin(), rs.end());
    }
    out.push_back(make("env-mismatch", Severity::kWarning, exit_code::kMismatch,
                       fmt::format("{} differs: {}", printable(name), parts),
                       fmt::format("set {} the same way for every process (the job script, the "
                                   "container image, or the launcher's environment)",
                                   printable(name)),
                       odd));
  }
}

constexpr Rule kRules[] = {
    {"foreign-job", check_foreign_job},
    {"auth-failed", check_auth_failed},
    {"launcher-env-conflict", check_launcher_conflicts},  // a stale RANK causes duplicates
    {"world-size-mismatch", check_world_size},
    {"duplicate-rank", check_duplicate_rank},
    {"rank-out-of-range", check_rank_range},
    {"master-addr-loopback", check_master_addr_loopback},  // before the ranks it leaves out
    {"local-rank-collision", check_local_rank_collision},
    {"local-world-size-mismatch", check_local_world_size},
    {"nccl-ifname-missing", check_ifname},
    {"duplicate-gpu", check_duplicate_gpu},
    {"nccl-version-mismatch", check_nccl_version},
    {"cuda-driver-missing", check_gpu_usable},  // also gpu-missing, gpu-count-mismatch
    {"nccl-missing", check_nccl_missing},
    {"master-addr-mismatch", check_master_addr_mismatch},
    {"protocol-mismatch", check_protocol_mismatch},
    {"member-disconnected", check_departed},
    {"missing-rank", check_missing},
    {"env-mismatch", check_env_mismatch},
    {"cuda-driver-mismatch", check_cuda_driver_mismatch},
    {"gpu-unavailable", check_gpu_unavailable},
    {"stray-connection", check_stray_connections},
};

std::vector<Finding> order(std::vector<Finding> findings) {
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    return a.is_error() && !b.is_error();
  });
  return findings;
}

}  // namespace

std::span<const Rule> rules() {
  return kRules;
}

void order_findings(std::vector<Finding>& findings) {
  findings = order(std::move(findings));
}

std::vector<Finding> run_checks(const JobView& view) {
  CheckContext ctx(view);
  std::vector<Finding> findings;
  for (const Rule& rule : kRules)
    rule.check(ctx, findings);
  return order(std::move(findings));
}

std::vector<Finding> local_checks(const Record& self) {
  JobView view;
  view.world_size = self.world_size;
  view.job_id = self.job_id;
  view.master_addr = self.master_addr;
  view.master_port = self.master_port;
  view.members.push_back(Member{self, 0, "in-process"});
  if (self.rank == 0) {
    view.master_host = self.host;
    view.master_resolved = self.master_resolved.get();
  }
  CheckContext ctx(view);
  std::vector<Finding> findings;
  check_master_addr_loopback(ctx, findings);
  check_rank_range(ctx, findings);
  check_launcher_conflicts(ctx, findings);
  check_ifname(ctx, findings);
  // A member away from the master's node that resolves MASTER_ADDR to loopback
  // would knock on its own door.
  bool away =
      self.node_rank > 0 || (self.local_world_size >= 1 && self.rank >= self.local_world_size);
  bool all_loopback = !self.master_resolved.empty();
  for (const auto& a : self.master_resolved)
    all_loopback = all_loopback && is_loopback_address(a);
  if (self.rank != 0 && away && all_loopback) {
    // A warning: it is fatal unless rank 0 runs on this very machine after all.
    findings.push_back(make(
        "master-addr-loopback", Severity::kWarning, exit_code::kMismatch,
        fmt::format("MASTER_ADDR {} resolves to {} (loopback) on {}, which is not the master's "
                    "node: unless rank 0 runs on this machine, this process cannot reach it",
                    printable(self.master_addr), format_list(self.master_resolved.get()),
                    printable(self.host)),
        "set MASTER_ADDR to the master's cluster network address, or fix the name's entry in "
        "/etc/hosts on this host",
        {&self}));
  }
  return order(std::move(findings));
}

JoinTracker::JoinTracker(long world_size, std::vector<std::string> master_resolved, bool gpu_stage)
    : world_size_(world_size),
      master_loopback_(!master_resolved.empty() &&
                       std::all_of(master_resolved.begin(), master_resolved.end(),
                                   [](const std::string& a) { return is_loopback_address(a); })),
      gpu_stage_(gpu_stage) {
  claimed_.assign(static_cast<size_t>(std::clamp(world_size, 0L, kMaxWorldSize)), 0);
}

// Each condition mirrors a rule's: anything one rule could report taints.
void JoinTracker::add(const Record& r, std::string_view peer) {
  if (tainted_) return;
  bool ok = r.world_size == world_size_ && r.in_range() && r.conflicts.empty();  // world size,
  for (long k = r.rank; ok && k <= r.last_rank(); ++k) {  // range, conflicts, duplicates
    ok = claimed_[size_t(k)] == 0;
    claimed_[size_t(k)] = 1;
    ++distinct_;
  }
  for (const EnvVar& e : r.env) {  // NCCL_SOCKET_IFNAME
    ok = ok && !ifname_selects_nothing(r, e);
  }
  if (master_loopback_ && peer.find(':') != std::string_view::npos) {  // loopback master
    ok = ok && is_loopback_address(peer_host(peer));
  }
  if (!have_first_) {
    have_first_ = true;
    first_digest_ = r.env_digest;
    first_addr_ = r.master_addr;
    first_port_ = r.master_port;
    first_resolved_ = r.master_resolved.get();
    first_gpu_ = r.gpu;
  }
  ok = ok && r.env_digest == first_digest_ && r.master_addr == first_addr_ &&
       r.master_port == first_port_ && r.master_resolved.get() == first_resolved_;
  if (gpu_stage_) {  // usable, one NCCL and one driver everywhere, no GPU twice
    const GpuFacts& g = r.gpu;
    ok = ok && g.usable() && g.nccl_loaded() && g.nccl_version == first_gpu_.nccl_version &&
         g.cuda_version == first_gpu_.cuda_version && g.driver == first_gpu_.driver &&
         long(g.devices.size()) == r.nranks;
    for (const GpuDevice& d : g.devices)
      ok = ok && uuids_.insert(r.host + '\n' + d.uuid).second;
  }
  // Per host: one local world size, room for these ranks, no local rank twice. The
  // bits per host are bounded by the world and a host's plausible size, not by what
  // a peer claims: anything larger is left to the rules.
  long max_local = std::min(world_size_, kMaxTrackedLocal);
  if (!ok || r.local_world_size > max_local || r.local_rank + r.nranks > max_local) {
    tainted_ = true;
    return;
  }
  auto it = hosts_.find(r.host);
  if (it == hosts_.end()) {
    it = hosts_.emplace(r.host, HostState{r.local_world_size, 0, {}}).first;
    if (r.local_world_size > 0) it->second.locals.assign(size_t(r.local_world_size), false);
  }
  HostState& h = it->second;
  h.ranks += r.nranks;
  ok = r.local_world_size == h.local_world_size &&
       (h.local_world_size < 1 || h.ranks <= h.local_world_size);
  for (long k = r.local_rank; ok && r.local_rank >= 0 && k < r.local_rank + r.nranks; ++k) {
    if (h.local_world_size < 1 && k >= long(h.locals.size())) {
      h.locals.resize(size_t(k) + 1, false);  // no local world size: grow as ranks arrive
    }
    ok = k < long(h.locals.size()) && !h.locals[size_t(k)];
    if (ok) h.locals[size_t(k)] = true;
  }
  tainted_ = !ok;
}

std::optional<std::string> gpu_stage_blocker(const std::vector<Member>& members) {
  for (const Member& m : members) {
    if (m.record.gpu.state == GpuState::kSkipped) {
      return fmt::format("{} was started with --no-gpu", member_label(m.record));
    }
  }
  bool usable = std::any_of(members.begin(), members.end(),
                            [](const Member& m) { return m.record.gpu.usable(); });
  if (!usable) return std::string("no member has a usable GPU");
  return std::nullopt;
}

std::vector<Finding> stage_checks(const StageView& sv) {
  std::vector<Finding> out;
  // Where each rank ran, for the hosts of a finding.
  std::map<long, const Record*> owner;
  if (sv.members != nullptr) {
    for (const Member& m : *sv.members) {
      for (long k = m.record.rank; k <= m.record.last_rank(); ++k)
        owner[k] = &m.record;
    }
  }
  auto about = [&](const std::vector<long>& ranks) {
    Records rs;
    for (long k : ranks) {
      if (auto it = owner.find(k); it != owner.end()) rs.push_back(it->second);
    }
    return rs;
  };
  auto ranks_hosts = [&](const std::vector<long>& ranks) {
    Records rs = about(ranks);
    Finding f;
    f.ranks = ranks;
    f.hosts = hosts_of(rs);
    return f;
  };
  std::map<long, const RankResult*> by_rank;
  for (const RankResult& r : sv.results)
    by_rank[r.rank] = &r;

  // Init that failed, grouped by the error NCCL gave.
  std::map<std::string, std::vector<long>> failed;
  std::vector<long> init_timeout;
  std::vector<long> init_done;
  std::vector<long> silent;  // no result at all
  for (long k = 0; k < sv.world_size; ++k) {
    auto it = by_rank.find(k);
    if (it == by_rank.end()) {
      silent.push_back(k);
      continue;
    }
    const RankResult& r = *it->second;
    if (r.init_ok) {
      init_done.push_back(k);
    } else if (r.init_timed_out) {
      init_timeout.push_back(k);
    } else {
      failed[r.init_error.empty() ? std::string("no error given") : r.init_error].push_back(k);
    }
  }
  for (const auto& [error, ranks] : failed) {
    Finding f = ranks_hosts(ranks);
    f.id = "nccl-init-failed";
    f.exit_code = exit_code::kGpu;
    f.message = fmt::format("NCCL init failed for {} on {}: {}", ranks_word(ranks),
                            format_list(f.hosts, 4), printable(error, 300));
    f.hint =
        "NCCL_DEBUG=INFO on those ranks shows why; a network or topology error on one host "
        "usually names the interface or device";
    out.push_back(std::move(f));
  }
  std::vector<long> stuck = init_timeout;
  stuck.insert(stuck.end(), silent.begin(), silent.end());
  std::sort(stuck.begin(), stuck.end());
  if (!stuck.empty()) {
    Finding f = ranks_hosts(stuck);
    f.id = "nccl-init-timeout";
    f.exit_code = exit_code::kGpu;
    std::string done = init_done.empty() ? std::string("no rank finished init")
                                         : fmt::format("{} finished", ranks_word(init_done));
    f.message = fmt::format("NCCL init did not finish within {} for {} on {}{}; {}",
                            format_seconds(sv.stage_ms), ranks_word(stuck), format_list(f.hosts, 4),
                            silent.empty() ? std::string()
                                           : fmt::format(" ({} sent no result: the process died "
                                                         "or lost its connection)",
                                                         ranks_word(silent)),
                            done);
    f.hint =
        "ranks stuck in init wait for a peer they cannot reach: check the network between "
        "the hosts (NCCL_SOCKET_IFNAME, firewalls, InfiniBand ports); NCCL_DEBUG=INFO "
        "shows the bootstrap";
    out.push_back(std::move(f));
  }

  std::vector<long> ar_timeout;
  std::vector<std::string> wrong;
  std::vector<long> wrong_ranks;
  std::vector<long> low;
  std::vector<std::string> low_text;
  std::vector<long> failed_ranks;
  std::vector<std::string> failed_text;
  for (const RankResult& r : sv.results) {
    if (!r.init_ok) continue;
    if (r.allreduce_timed_out) {
      ar_timeout.push_back(r.rank);
    } else if (!r.allreduce_done) {
      failed_ranks.push_back(r.rank);
      failed_text.push_back(fmt::format("rank {}: {}", r.rank, printable(r.allreduce_error, 200)));
    } else if (!r.allreduce_ok) {
      wrong_ranks.push_back(r.rank);
      wrong.push_back(fmt::format("rank {} expected {}, got {}", r.rank, r.expected, r.got));
    } else if (sv.min_busbw_gbps > 0 && r.bandwidth_bytes > 0 && r.busbw_gbps < sv.min_busbw_gbps) {
      low.push_back(r.rank);
      low_text.push_back(fmt::format("rank {} {:.1f} GB/s", r.rank, r.busbw_gbps));
    }
  }
  if (!wrong_ranks.empty()) {
    Finding f = ranks_hosts(wrong_ranks);
    f.id = "allreduce-wrong-result";
    f.exit_code = exit_code::kGpu;
    f.message = fmt::format("the all-reduce of one value per rank gave a wrong total: {}",
                            format_list(wrong, 4));
    f.hint =
        "a wrong sum from NCCL means broken hardware or a broken NCCL/driver pairing on "
        "those hosts: run nccl-tests there, check the GPU's ECC and NVLink errors";
    out.push_back(std::move(f));
  }
  if (!failed_ranks.empty()) {
    Finding f = ranks_hosts(failed_ranks);
    f.id = "allreduce-failed";
    f.exit_code = exit_code::kGpu;
    f.message = fmt::format("the all-reduce failed: {}", join(failed_text, "; ", 4));
    f.hint =
        "NCCL_DEBUG=INFO on those ranks says why; an error right after a successful init "
        "usually points at the network transport (NCCL_NET, NCCL_IB_HCA)";
    out.push_back(std::move(f));
  }
  if (!ar_timeout.empty()) {
    Finding f = ranks_hosts(ar_timeout);
    f.id = "allreduce-timeout";
    f.exit_code = exit_code::kGpu;
    f.message = fmt::format("the all-reduce did not complete within the deadline for {} on {}",
                            ranks_word(ar_timeout), format_list(f.hosts, 4));
    f.hint =
        "init succeeded but data does not flow: check the inter-host links (IB/RoCE, "
        "NCCL_IB_HCA, NCCL_NET) and NCCL_DEBUG=INFO";
    out.push_back(std::move(f));
  }
  if (!low.empty()) {
    Finding f = ranks_hosts(low);
    f.id = "bandwidth-low";
    f.exit_code = exit_code::kGpu;
    f.message = fmt::format("all-reduce bus bandwidth below --min-busbw {:.1f} GB/s: {}",
                            sv.min_busbw_gbps, format_list(low_text, 6));
    f.hint =
        "compare with nccl-tests on the same hosts; a slow link or a fallback to TCP "
        "(NCCL_DEBUG=INFO says NET/Socket) is the usual cause";
    out.push_back(std::move(f));
  }
  return out;
}

int exit_code_for(const std::vector<Finding>& findings) {
  for (const Finding& f : findings) {
    if (f.is_error()) return f.exit_code;
  }
  return exit_code::kPass;
}

std::string member_label(const Record& r) {
  return fmt::format(
      "{} {} ({}, pid {})", r.nranks == 1 ? "rank" : "ranks",
      r.nranks == 1 ? std::to_string(r.rank) : fmt::format("{}-{}", r.rank, r.last_rank()),
      printable(r.host, 64), r.pid);
}

bool ifname_matches_any(std::string_view spec, const std::vector<std::string>& interfaces) {
  bool exclude = !spec.empty() && spec.front() == '^';
  if (exclude) spec.remove_prefix(1);
  bool exact = !spec.empty() && spec.front() == '=';
  if (exact) spec.remove_prefix(1);
  std::vector<std::string_view> items;
  while (true) {
    auto comma = spec.find(',');
    if (!spec.substr(0, comma).empty()) items.push_back(spec.substr(0, comma));
    if (comma == std::string_view::npos) break;
    spec.remove_prefix(comma + 1);
  }
  for (const std::string& ifname : interfaces) {
    bool match = false;
    for (std::string_view item : items) {
      match = match || (exact ? ifname == item : ifname.rfind(item, 0) == 0);
    }
    if (match != exclude) return true;
  }
  return false;
}

bool spans_hosts(const Record& r) {
  return (r.local_world_size >= 1 && r.local_world_size < r.world_size) ||
         r.node_list.find_first_of(",[") != std::string::npos;
}

bool is_loopback_address(std::string_view a) {
  return a.rfind("127.", 0) == 0 || a == "::1" || a.rfind("::ffff:127.", 0) == 0;
}

}  // namespace rankcheck
