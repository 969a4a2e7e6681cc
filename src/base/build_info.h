#pragma once

#include <string>

#include <fmt/format.h>

#include "base/version.h"

namespace rankcheck {

/// What `rankcheck --version` prints: the version and the glibc the binary needs.
/// A release build (scripts/release.sh) knows its floor, the highest GLIBC_ symbol
/// version it links, measured after linking; any other build names the glibc it
/// was compiled against, which is its floor at most.
inline std::string version_text() {
#if defined(RANKCHECK_GLIBC_FLOOR)
  return fmt::format("rankcheck {} (glibc {} or newer)", kRankcheckVersion, RANKCHECK_GLIBC_FLOOR);
#elif defined(__GLIBC__)
  return fmt::format("rankcheck {} (built against glibc {}.{})", kRankcheckVersion, __GLIBC__,
                     __GLIBC_MINOR__);
#else
  return fmt::format("rankcheck {}", kRankcheckVersion);
#endif
}

}  // namespace rankcheck
