#include "identity/launchers/launchers.h"

namespace rankcheck::launcher {

// Kubeflow's PyTorchJob (training-operator) and TrainJob (Trainer) set the torchrun
// arguments of each pod as PET_* variables. In a torchrun worker they describe the
// pod, not the worker, and are not read.
const Launcher kKubeflow{"kubeflow", "Kubeflow PET_*", [](LauncherScan& s) {
                           if (env_get(s.env(), "TORCHELASTIC_RUN_ID") != nullptr) return;
                           s.take(Field::kNodeRank, "PET_NODE_RANK");
                           s.take(Field::kNnodes, "PET_NNODES");
                           s.take(Field::kNprocPerNode, "PET_NPROC_PER_NODE");
                           s.take(Field::kMasterAddr, "PET_MASTER_ADDR");
                           s.take(Field::kMasterPort, "PET_MASTER_PORT");
                         }};

// An Indexed Job: the pod's completion index is its node rank. Kubernetes injects
// it into every container, and in a JobSet of several jobs it restarts at 0 in
// each: so it is a weak source, used only when nothing else gives the node rank.
const Launcher kJobSet{"jobset", "Indexed Job / JobSet", [](LauncherScan& s) {
                         if (env_get(s.env(), "TORCHELASTIC_RUN_ID") != nullptr) return;
                         s.take_weak(Field::kNodeRank, "JOB_COMPLETION_INDEX");
                       }};

}  // namespace rankcheck::launcher
