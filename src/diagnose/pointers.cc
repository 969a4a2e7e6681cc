// 5. NCCL's and the others' pointers to a peer that is gone (conclude.cc calls it):
// downstream of a failure above, or alone the peer (or the network) to blame.

#include <fmt/format.h>

#include "base/text.h"
#include "diagnose/builder.h"

namespace rankcheck::diagnose {
namespace {

// What an IB work completion's status says (NCCL's "Got completion from peer ... with
// error 12" before 2.19, "with status=IBV_WC_RETRY_EXC_ERR(12)" after): libibverbs'
// enum ibv_wc_status, in a few words each; "" for a status without a plain cause.
std::string ib_completion_meaning(std::string_view text) {
  size_t at = text.find("with error ");
  if (at != std::string_view::npos) {
    at += 11;
  } else if ((at = text.find("with status=")) != std::string_view::npos) {
    at = text.find('(', at);
    if (at != std::string_view::npos) ++at;
  }
  long status = -1;
  for (size_t i = at; at != std::string_view::npos && i < text.size() && i < at + 3; ++i) {
    if (text[i] < '0' || text[i] > '9') break;
    status = (status < 0 ? 0 : status * 10) + (text[i] - '0');
  }
  switch (status) {
    case 4:
      return "IB status 4, a local protection error: the HCA may not touch the memory NCCL "
             "registered; for GPU memory, nvidia-peermem or dma-buf, ACS or the IOMMU";
    case 5:
      return "IB status 5, flushed after an earlier error on the same connection";
    case 10:
      return "IB status 10, a remote access error: the peer refused the access";
    case 12:
      return "IB status 12, transport retries exceeded: the peer's HCA never acknowledged; a "
             "link, a switch port or the peer is down, or the fabric drops the route";
    case 13:
      return "IB status 13, receiver-not-ready retries exceeded: the peer stopped receiving";
    default:
      return "";
  }
}

}  // namespace

// 5. Pointers to peers: downstream of any initiating finding; alone, a peer that
// failed without a trace (or the network). The unreachable store, when added already,
// is not added again.
void add_pointers(Builder& b, const std::map<FindingId, Group>& pointers, bool skip_unreachable) {
  for (const auto& [id, g] : pointers) {
    if (skip_unreachable && id == FindingId::kMasterUnreachable) continue;
    bool explained = b.any_initiating();
    std::string who = g.ranks.empty() ? std::string("a rank") : ranks_text(g.ranks);
    std::string peer = g.hosts.empty()
                           ? ""
                           : fmt::format(" ({})", format_list({g.hosts.begin(), g.hosts.end()}, 3));
    std::string ib = ib_completion_meaning(g.detail);
    std::string message =
        id == FindingId::kMasterUnreachable
            ? fmt::format("{} could not reach the store{}: {}", who, peer, g.detail)
        : explained ? fmt::format("{} lost a peer{}, a consequence of the failure above: {}", who,
                                  peer, g.detail)
        : id == FindingId::kNcclNetworkError
            ? fmt::format(
                  "{} lost its connection to a peer{} and no peer shows an error of "
                  "its own: the network between them, or a peer that exited without a "
                  "word: {}{}",
                  who, peer, g.detail, ib.empty() ? std::string() : " (" + ib + ")")
            : fmt::format("{} lost a peer{} and no peer shows an error of its own: {}", who, peer,
                          g.detail);
    // Downstream of a failure above, NCCL's remote error is that failure's peer, lost.
    FindingId as = explained && id == FindingId::kNcclNetworkError ? FindingId::kPeerFailed : id;
    DiagFinding& f = b.add(as, message, !explained, g.first);
    // The network between them: the hosts at both ends.
    std::set<std::string> ends;
    if (as == FindingId::kNcclNetworkError) {
      ends = g.from_hosts;
      ends.insert(g.hosts.begin(), g.hosts.end());
    }
    attach(f, g.ranks, ends, g.evidence);
  }
}

}  // namespace rankcheck::diagnose
