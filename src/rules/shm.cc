// /dev/shm, before NCCL maps its SHM transport's segments there: a host whose free
// space is below what its ranks' connections take (nccl/shm.h has the formula and its
// source) fails NCCL's init with "Error while creating shared memory segment" where
// that transport carries them.

#include "nccl/shm.h"

#include <fmt/format.h>

#include "base/text.h"
#include "rules/context.h"

namespace rankcheck {
namespace {

std::string mib(int64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

bool shm_short(bool on, int64_t avail, int64_t segment, int64_t ranks) {
  return on && avail >= 0 && avail < nccl::shm_need_bytes(segment, ranks);
}

void check_shm(const CheckContext& ctx, std::vector<Finding>& out) {
  std::vector<std::string> parts;
  Records about;
  bool certain = false;
  int64_t largest = 0;  // the segment the message names
  for (const auto& [host, rs] : ctx.hosts) {
    int64_t ranks = 0, avail = -1, size = -1, segment = 0;
    bool on = false, p2p_off = false;
    for (const Record* r : rs) {
      ranks += r->nranks;
      if (!r->shm->known()) continue;
      if (avail < 0 || r->shm->avail < avail) {
        avail = r->shm->avail;
        size = r->shm->size;
      }
      segment = std::max(segment, r->shm->segment);
      on = on || (r->shm->flags & ShmFacts::kShmDisabled) == 0;
      p2p_off = p2p_off || (r->shm->flags & ShmFacts::kP2pDisabled) != 0;
    }
    if (!shm_short(on, avail, segment, ranks)) continue;
    certain = certain || p2p_off;
    largest = std::max(largest, segment);
    parts.push_back(fmt::format(
        "{} ({} free of {}; {} ranks need {}{})", printable(host, 40), mib(avail), mib(size), ranks,
        mib(nccl::shm_need_bytes(segment, ranks)), p2p_off ? ", NCCL_P2P_DISABLE=1" : ""));
    about.insert(about.end(), rs.begin(), rs.end());
  }
  if (parts.empty()) return;
  out.push_back(
      make(FindingId::kShmTooSmall,
           fmt::format("/dev/shm is short of what NCCL's SHM transport maps on {}: each connection "
                       "between a host's ranks is a segment of {} (at least 2 channels of one per "
                       "rank); where that transport carries them (GPUs without peer access, "
                       "NCCL_P2P_DISABLE=1), NCCL's init fails with \"Error while creating shared "
                       "memory segment\"",
                       format_list(parts, 4), mib(largest)),
           {}, about, certain ? std::optional(Severity::kError) : std::nullopt));
}

}  // namespace rankcheck
