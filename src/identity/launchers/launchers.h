#pragma once
// One launcher a file; the table in table.cc lists them in precedence order.

#include "identity/identity.h"

namespace rankcheck::launcher {

extern const Launcher kFlags;
extern const Launcher kTorch;
extern const Launcher kTorchrun;
extern const Launcher kNodeEnv;
extern const Launcher kKubeflow;
extern const Launcher kJobSet;
extern const Launcher kSlurm;
extern const Launcher kOpenMpi;
extern const Launcher kPmi;

}  // namespace rankcheck::launcher
