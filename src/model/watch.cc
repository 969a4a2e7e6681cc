#include "model/watch.h"

namespace rankcheck {

std::string_view phase_name(JobPhase p) {
  switch (p) {
    case JobPhase::kWaiting:
      return "waiting";
    case JobPhase::kStarted:
      return "started";
    case JobPhase::kInit:
      return "in init";
    case JobPhase::kInitDone:
      return "init done";
    case JobPhase::kExited:
      return "exited";
  }
  return "waiting";
}

}  // namespace rankcheck
