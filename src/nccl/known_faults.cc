// The known faults of NCCL releases, as data. A row is added only where the releases
// are established: by NCCL's own code at its tags (read in NVIDIA/nccl), its release
// notes (the tag messages), or a thread whose reporter or maintainers showed them. Where
// the fixed release is not known, `last` is the last release the fault was seen on, and
// the row says so.

#include "nccl/known_faults.h"

namespace rankcheck::nccl {
namespace {

constexpr KnownFault kFaults[] = {
    // NVIDIA/nccl#1996: segfaults in rasMsgHandlePeersUpdate on 2.27.7 (H100 and H20),
    // with no RAS query made; NCCL_RAS_ENABLE=0 avoided them. The use-after-free fix
    // (nccl#2406) went to NCCL's dev branch; no release is named as fixed.
    {22707, 22707, FaultWhen::kAlways,
     "its RAS thread can segfault in rasMsgHandlePeersUpdate while the job runs, with no RAS "
     "query made",
     "NVIDIA/nccl#1996, reported on 2.27.7", "NCCL_RAS_ENABLE=0",
     "set NCCL_RAS_ENABLE=0 for the job (it turns NCCL's RAS off), or load another release"},
    // src/proxy.cc: 2.28.9 replaced the free-op return with a weak compare-and-swap whose
    // loop tests the value seen, not the exchange's result (v2.28.9-1, and v2.29.2-1
    // through COMPILER_ATOMIC_COMPARE_EXCHANGE); 2.29.3's release note: "Fixes CAS usage
    // in case of weak failure which was causing a hang on ARM. The issue affects NCCL when
    // compiled with gcc versions prior to 10." marin-community/marin#8038 shows the hang
    // (2.28.9 on GB200: 7 of 7 runs wedged; 2.30.7: none). x86's exchange never fails
    // spuriously, so only Arm hosts meet it.
    {22809, 22902, FaultWhen::kAarch64,
     "on Arm its proxy thread can lose the slots it returns (a weak compare-and-swap whose "
     "failure is not retried), and a rank then spins in ncclLocalOpAppend: the job hangs with "
     "no error or timeout (NCCL builds by gcc older than 10)",
     "NCCL 2.29.3's release notes; src/proxy.cc at v2.28.9-1 and v2.29.2-1; "
     "marin-community/marin#8038",
     "", "load NCCL 2.29.3 or newer (the pip wheel nvidia-nccl-cu12/cu13 of that release)"},
    // NVIDIA/nccl#2385: 7 ranks on one node and 8 on the other deadlock in
    // ncclCommInitRank on 2.31.2, 3 runs of 3 (8+8 and 7+7 work); the reporter traced it
    // to contiguousRanksPerHost falling back to INT_MAX. 2.30.7's code has no
    // contiguousRanksPerHost, so the row starts at 2.31; no fixed release is named.
    {23100, 23102, FaultWhen::kUnevenHosts,
     "ncclCommInitRank deadlocks in its bootstrap when hosts carry different numbers of ranks",
     "NVIDIA/nccl#2385, reported on 2.31.2 (7 ranks on one host, 8 on the other)", "",
     "start the same number of ranks on every host, or load a release before 2.31"},
};

}  // namespace

std::span<const KnownFault> known_faults() {
  return kFaults;
}

}  // namespace rankcheck::nccl
