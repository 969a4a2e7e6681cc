#pragma once
// A problem of the cluster, as data: rules return these, the report renders them.

#include <string>
#include <vector>

namespace rankcheck {

enum class Severity { kError, kWarning };

/// Exit codes, stable and documented in the README.
namespace exit_code {
inline constexpr int kPass = 0;
inline constexpr int kInternal = 1;
inline constexpr int kUsage = 2;
inline constexpr int kMismatch = 3;
inline constexpr int kIncomplete = 4;
inline constexpr int kGpu = 5;
inline constexpr int kRejected = 6;
inline constexpr int kCannotListen = 7;
inline constexpr int kSignalBase = 128;
}  // namespace exit_code

struct Finding {
  std::string id;  ///< stable kebab-case id, documented in docs/findings.md
  Severity severity = Severity::kError;
  int exit_code = exit_code::kMismatch;  ///< what the job exits with when this leads
  std::string message;
  std::string hint;                ///< the fix
  std::vector<long> ranks;         ///< sorted, unique
  std::vector<std::string> hosts;  ///< sorted, unique

  bool is_error() const { return severity == Severity::kError; }
};

/// The job's exit code: the leading error's, or 0 when there is none.
/// `findings` must already be in report order.
int exit_code_for(const std::vector<Finding>& findings);

}  // namespace rankcheck
