// The network NCCL will use, decided before any NCCL call: the interface NCCL's
// own rules pick on each host (sent in each record, see nccl/socket_if.h), and
// NCCL_COMM_ID.

#include <map>
#include <set>

#include <fmt/format.h>

#include "base/env.h"
#include "base/odd_ones_out.h"
#include "base/text.h"
#include "model/gpu.h"
#include "rules/context.h"

namespace rankcheck {
namespace {

// The network stack a member runs in: "hosts" that share one (names given with
// --host-name on one machine, ranks of one pod) reach each other over any address
// they have, loopback included, so none of these rules fire between them.
std::string stack_of(const Record& r) {
  return r.nccl_if->netns.empty() ? "host " + r.host.str() : r.nccl_if->netns.str();
}

std::string rules_text(int32_t version) {
  return version == 0 ? std::string("the newest NCCL's rules")
                      : fmt::format("NCCL {}'s rules", nccl_version_text(version));
}

const std::string* tracked(const Record& r, std::string_view name) {
  for (const EnvVar& e : r.env) {
    if (e.name == name) return &e.value;
  }
  return nullptr;
}

// "NCCL_SOCKET_IFNAME=lo (from /etc/nccl.conf)": where a value the message names came from.
std::string source_note(const Record& r, std::string_view name) {
  for (const EnvVar& e : r.env_sources) {
    if (e.name == name) return fmt::format(" (from {})", printable(e.value, 64));
  }
  return "";
}

// How many network stacks the job's members with a known interface run in.
size_t stacks(const CheckContext& ctx) {
  std::set<std::string> s;
  for (const Member& m : ctx.view.members) {
    if (m.record.nccl_if->known()) s.insert(stack_of(m.record));
  }
  return s.size();
}

// The members of `rs` grouped by what `key` says, in first-seen order of hosts.
template <class Key>
std::map<std::string, Records> group(const Records& rs, Key key) {
  std::map<std::string, Records> out;
  for (const Record* r : rs)
    out[key(*r)].push_back(r);
  return out;
}

}  // namespace

void check_nccl_no_interface(const CheckContext& ctx, std::vector<Finding>& out) {
  Records none;
  for (const Member& m : ctx.view.members) {
    const Record& r = m.record;
    if (r.nccl_if->state != NcclIfFacts::kNone) continue;
    // A NCCL_SOCKET_IFNAME that names nothing is nccl-ifname-missing, said once.
    bool said = false;
    for (const EnvVar& e : r.env)
      said = said || ifname_selects_nothing(r, e);
    if (!said) none.push_back(&r);
  }
  auto by = group(none, [](const Record& r) {
    return fmt::format("{}\n{}\n{}\n{}", r.host.str(), r.nccl_if->rule.str(),
                       r.nccl_if->error.str(), r.nccl_if->rules_version);
  });
  for (const auto& [key, rs] : by) {
    const Record& r = *rs.front();
    out.push_back(
        make(FindingId::kNcclNoInterface,
             fmt::format("NCCL would find no interface on {} ({}): {} with {}{} leave none; NCCL's "
                         "init fails there with \"{}\"",
                         printable(r.host), ranks_word(ranks_of(rs)),
                         rules_text(r.nccl_if->rules_version), printable(r.nccl_if->rule, 120),
                         source_note(r, "NCCL_SOCKET_IFNAME") + source_note(r, "NCCL_COMM_ID"),
                         printable(r.nccl_if->error, 160)),
             {}, rs));
  }
}

void check_nccl_comm_id(const CheckContext& ctx, std::vector<Finding>& out) {
  const JobView& v = ctx.view;
  const Record* root = nullptr;
  Records members;
  for (const Member& m : v.members) {
    members.push_back(&m.record);
    if (m.record.rank == 0) root = &m.record;
  }
  auto vals = odd_ones_out<std::string>(  // "": unset
      members,
      [](const Record* r) -> std::optional<std::string> {
        const std::string* id = tracked(*r, "NCCL_COMM_ID");
        return id ? "=" + *id : "";
      },
      no_order);
  if (vals.size() > 1) {
    std::vector<std::string> parts;
    Records odd;
    for (size_t i = 0; i < vals.size(); ++i) {
      const auto& [value, rs] = vals[i];
      parts.push_back(fmt::format(
          "{} for {}{}", value.empty() ? std::string("unset") : printable(value.substr(1), 64),
          where(rs), value.empty() ? "" : source_note(*rs.front(), "NCCL_COMM_ID")));
      if (i > 0) odd.insert(odd.end(), rs.begin(), rs.end());
    }
    out.push_back(make(FindingId::kNcclCommIdMismatch,
                       fmt::format("NCCL_COMM_ID differs: {}; NCCL's ranks would look for "
                                   "different bootstrap roots and wait for each other",
                                   join(parts, "; ", 6)),
                       {}, odd));
    return;
  }
  if (root == nullptr || !root->nccl_if->known()) return;
  const std::string* id = tracked(*root, "NCCL_COMM_ID");
  if (id == nullptr || (root->nccl_if->flags & NcclIfFacts::kCommIdLocal) != 0) return;
  Records all;
  for (const Member& m : v.members)
    all.push_back(&m.record);
  out.push_back(make(
      FindingId::kNcclCommIdMismatch,
      fmt::format("NCCL_COMM_ID={}{} is not an address of rank 0's host {}{}: rank 0 creates "
                  "NCCL's bootstrap root there, and no rank can reach it",
                  printable(*id, 64), source_note(*root, "NCCL_COMM_ID"), printable(root->host),
                  root->nccl_if->state == NcclIfFacts::kFound
                      ? fmt::format(" (which would use {})", printable(root->nccl_if->text(), 80))
                      : std::string()),
      {}, all));
}

void check_nccl_interface_loopback(const CheckContext& ctx, std::vector<Finding>& out) {
  if (stacks(ctx) < 2) return;  // one network stack: loopback reaches every member
  Records lo;
  for (const Member& m : ctx.view.members) {
    const NcclIfFacts& f = m.record.nccl_if;
    if (f.state == NcclIfFacts::kFound && (f.flags & NcclIfFacts::kLoopback) != 0) {
      lo.push_back(&m.record);
    }
  }
  if (lo.empty()) return;
  auto by =
      group(lo, [](const Record& r) { return r.nccl_if->text() + "\n" + r.nccl_if->rule.str(); });
  for (const auto& [key, rs] : by) {
    const Record& r = *rs.front();
    auto hosts = hosts_of(rs);
    out.push_back(make(
        FindingId::kNcclInterfaceLoopback,
        fmt::format("NCCL would bootstrap from loopback ({}, by {}{}) on {}, in a job across {}: "
                    "the address it gives the other hosts leads back to themselves",
                    printable(r.nccl_if->text(), 80), printable(r.nccl_if->rule, 80),
                    source_note(r, "NCCL_SOCKET_IFNAME"),
                    hosts.size() <= 4 ? format_list(hosts) : plural(hosts.size(), "host", "hosts"),
                    plural(ctx.hosts.size(), "host", "hosts")),
        {}, rs));
  }
}

void check_nccl_interface_shared_address(const CheckContext& ctx, std::vector<Finding>& out) {
  // address -> stack -> members; loopback is nccl-interface-loopback's.
  std::map<std::string, std::map<std::string, Records>> by_addr;
  for (const Member& m : ctx.view.members) {
    const NcclIfFacts& f = m.record.nccl_if;
    if (f.state != NcclIfFacts::kFound || (f.flags & NcclIfFacts::kLoopback) != 0) continue;
    by_addr[f.address.str()][stack_of(m.record)].push_back(&m.record);
  }
  for (const auto& [addr, by_stack] : by_addr) {
    if (by_stack.size() < 2) continue;
    Records rs;
    std::set<std::string> names;
    for (const auto& [stack, members] : by_stack) {
      rs.insert(rs.end(), members.begin(), members.end());
      for (const Record* r : members)
        names.insert(r->nccl_if->name.str());
    }
    auto hosts = hosts_of(rs);
    out.push_back(make(
        FindingId::kNcclInterfaceSharedAddress,
        fmt::format("{} would bootstrap NCCL from the same address {} ({} {}, by {}): each host "
                    "that connects to it reaches itself, and NCCL's init hangs",
                    hosts.size() <= 4 ? format_list(hosts) : plural(hosts.size(), "host", "hosts"),
                    printable(addr, 64), names.size() == 1 ? "interface" : "interfaces",
                    printable(format_list({names.begin(), names.end()}, 4), 80),
                    printable(rs.front()->nccl_if->rule, 80)),
        {}, rs));
  }
}

void check_nccl_interface_link_local(const CheckContext& ctx, std::vector<Finding>& out) {
  if (stacks(ctx) < 2) return;
  Records ll;
  for (const Member& m : ctx.view.members) {
    const NcclIfFacts& f = m.record.nccl_if;
    if (f.state == NcclIfFacts::kFound && (f.flags & NcclIfFacts::kLinkScope) != 0 &&
        (f.flags & NcclIfFacts::kLoopback) == 0) {
      ll.push_back(&m.record);
    }
  }
  auto by = group(ll, [](const Record& r) { return r.host.str(); });
  for (const auto& [host, rs] : by) {
    const Record& r = *rs.front();
    out.push_back(make(
        FindingId::kNcclInterfaceLinkLocal,
        fmt::format("NCCL would bootstrap from the link-local address {} on {} ({}, by {}{}): "
                    "other hosts reach it only on that link, if at all",
                    printable(r.nccl_if->text(), 80), printable(host), ranks_word(ranks_of(rs)),
                    printable(r.nccl_if->rule, 80), source_note(r, "NCCL_SOCKET_IFNAME")),
        {}, rs));
  }
}

}  // namespace rankcheck
