#pragma once
// NCCL releases with a fault a job meets without doing anything wrong: each row the
// releases it was read or reported on, what goes wrong, where that was established, and
// what avoids it. The rows are data (known_faults.cc), one file; the rules name them
// (rules/nccl_faults.cc), and docs/findings.md lists them under nccl-known-fault.

#include <cstdint>
#include <span>
#include <string_view>

#include "nccl/version.h"

namespace rankcheck::nccl {

/// What else a fault needs besides the release.
enum class FaultWhen : uint8_t {
  kAlways,       ///< every host that loads the release
  kAarch64,      ///< hosts whose machine is aarch64 (uname's)
  kUnevenHosts,  ///< a job whose hosts carry different numbers of ranks
};

struct KnownFault {
  Version first;  ///< the first release it was read or reported on
  Version last;   ///< the last (the release before the one that fixed it, where known)
  FaultWhen when;
  std::string_view what;    ///< what goes wrong, a clause: "its RAS thread can segfault ..."
  std::string_view source;  ///< where it was established: issues, release notes, code
  /// A variable that avoids it when set to this value ("NCCL_RAS_ENABLE=0"); "" for none.
  std::string_view avoided_by;
  std::string_view fix;
};

/// Every row, oldest release first.
std::span<const KnownFault> known_faults();

/// Whether `f` is a fault of release `v` (0, no library loaded, has none).
constexpr bool in_release(const KnownFault& f, Version v) {
  return v != 0 && v >= f.first && v <= f.last;
}

}  // namespace rankcheck::nccl
