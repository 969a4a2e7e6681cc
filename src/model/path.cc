#include "model/path.h"

namespace rankcheck {

std::string_view outcome_text(PathOutcome o) {
  switch (o) {
    case PathOutcome::kOk:
      return "connected";
    case PathOutcome::kTimeout:
      return "timed out";
    case PathOutcome::kRefused:
      return "refused";
    case PathOutcome::kUnreachable:
      return "no route to host";
    case PathOutcome::kSelf:
      return "reached itself";
    case PathOutcome::kWrongHost:
      return "answered by another host";
    case PathOutcome::kOther:
      return "failed";
    case PathOutcome::kNotRun:
      return "not tried";
    case PathOutcome::kDenied:
      return "denied by the local firewall";
    case PathOutcome::kFlooded:
      return "flooded";
  }
  return "failed";
}

}  // namespace rankcheck
