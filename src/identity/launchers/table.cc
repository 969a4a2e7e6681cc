#include "identity/launchers/launchers.h"

namespace rankcheck {

std::span<const Launcher> launchers() {
  // Precedence: explicit flags, then the variables the training job itself reads
  // (torch), then the launchers' own.
  static const Launcher kTable[] = {
      launcher::kFlags,   launcher::kTorch,    launcher::kTorchrun,
      launcher::kNodeEnv, launcher::kKubeflow, launcher::kJobSet,
      launcher::kSlurm,   launcher::kOpenMpi,  launcher::kPmi,
  };
  return kTable;
}

}  // namespace rankcheck
