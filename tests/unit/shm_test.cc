// /dev/shm against NCCL's SHM transport: the segment NCCL maps, the need of a host's
// ranks, the reader, and the finding on both paths of the decision.

#include "host/shm.h"

#include <catch2/catch.hpp>
#include <sys/statvfs.h>

#include "helpers.h"
#include "nccl/shm.h"

using namespace rankcheck;

TEST_CASE("NCCL's SHM segment: the size its failure prints", "[shm]") {
  // "Error while creating shared memory segment /dev/shm/nccl-NzwJ7O (size 9637888)"
  // (NVIDIA/nccl#1518) at the default buffer sizes.
  CHECK(nccl::shm_segment_bytes({}) == 9637888);
  CHECK(nccl::shm_segment_bytes({{"NCCL_BUFFSIZE", "65536"}}) == 9637888 - 4194304 + 65536);
  CHECK(nccl::shm_segment_bytes({{"NCCL_LL128_BUFFSIZE", "-2"}}) == 9637888);  // NCCL's "unset"
  // 4 ranks do not fit a container's 64 MB, 2 do (#1518: "works fine with 2 GPUs").
  CHECK(nccl::shm_need_bytes(9637888, 4) > 64 * 1000 * 1000);
  CHECK(nccl::shm_need_bytes(9637888, 2) < 64 * 1000 * 1000);
  CHECK(nccl::shm_need_bytes(9637888, 1) == 0);
}

TEST_CASE("the /dev/shm reader: this host's, under a root, and NCCL's switches", "[shm]") {
  ShmFacts here = read_shm(SysFs{}, {});
  struct statvfs st {};
  if (::statvfs("/dev/shm", &st) == 0) {
    CHECK(here.known());
    CHECK(here.avail <= here.size);
  }
  CHECK(here.segment == 9637888);
  // A root without dev/shm: unknown, and no finding can come of it.
  ShmFacts none = read_shm(SysFs{"/nonexistent-root"}, {{"NCCL_SHM_DISABLE", "1"}});
  CHECK_FALSE(none.known());
  CHECK(none.flags == ShmFacts::kShmDisabled);
  CHECK(read_shm(SysFs{}, {{"NCCL_P2P_DISABLE", "1 "}}).flags == ShmFacts::kP2pDisabled);
}

namespace {

// `world` ranks, `per_host` a host, every record's /dev/shm `avail` of 64 MiB.
JobView shm_job(int world, int per_host, int64_t avail, uint8_t flags = 0) {
  JobView v = test::healthy_job(world, per_host);
  for (Member& m : v.members)
    m.record.shm = ShmFacts{int64_t{64} << 20, avail, 9637888, flags};
  return v;
}

}  // namespace

TEST_CASE("findings: /dev/shm short of the SHM transport's segments", "[shm][rules]") {
  // Two ranks a host in a 64 MiB /dev/shm: 36.8 MiB, it fits.
  CHECK(test::clean_and_silent(shm_job(4, 2, int64_t{64} << 20)));
  // Four: 73.5 MiB, a warning naming both hosts.
  JobView four = shm_job(8, 4, int64_t{64} << 20);
  CHECK_FALSE(test::tracker_clean(four));
  auto fs = test::checks(four);
  const Finding* f = test::find(fs, "shm-too-small");
  REQUIRE(f != nullptr);
  CHECK_FALSE(f->is_error());
  CHECK(
      f->message.starts_with("/dev/shm is short of what NCCL's SHM transport maps on "
                             "gpu-01 (64.0 MiB free of 64.0 MiB; 4 ranks need 73.5 MiB) and "
                             "gpu-02 (64.0 MiB free of 64.0 MiB; 4 ranks need 73.5 MiB): each "
                             "connection between a host's ranks is a segment of 9.2 MiB"));
  // Stale segments of a killed job leave 20 MiB of a large /dev/shm: two ranks are short.
  JobView stale = shm_job(4, 2, int64_t{20} << 20);
  auto sf = test::checks(stale);
  REQUIRE(test::find(sf, "shm-too-small") != nullptr);
  // NCCL_P2P_DISABLE=1: the GPUs certainly go through SHM, an error.
  JobView p2p = shm_job(8, 4, int64_t{64} << 20, ShmFacts::kP2pDisabled);
  auto pf = test::checks(p2p);
  const Finding* e = test::find(pf, "shm-too-small");
  REQUIRE(e != nullptr);
  CHECK(e->is_error());
  // NCCL_SHM_DISABLE=1, or /dev/shm unreadable: nothing to say.
  CHECK(test::clean_and_silent(shm_job(8, 4, int64_t{64} << 20, ShmFacts::kShmDisabled)));
  JobView unknown = shm_job(8, 4, int64_t{64} << 20);
  for (Member& m : unknown.members)
    m.record.shm = {};
  CHECK(test::clean_and_silent(unknown));
  // One rank a host: no SHM connection at all.
  CHECK(test::clean_and_silent(shm_job(4, 1, 0)));
}
