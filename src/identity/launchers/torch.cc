#include "identity/launchers/launchers.h"

namespace rankcheck::launcher {

namespace {

// Outside torchrun, the Kubeflow operator's RANK is the pod's index and its
// WORLD_SIZE counts either pods or processes (by operator version): read them so,
// rather than report the pod's view as a disagreement.
bool pod_level(const LauncherScan& s) {
  const EnvMap& env = s.env();
  return env_get(env, "TORCHELASTIC_RUN_ID") == nullptr &&
         (env_get(env, "PET_NNODES") != nullptr || env_get(env, "PET_NPROC_PER_NODE") != nullptr);
}

void scan(LauncherScan& s) {
  if (pod_level(s)) {
    const EnvMap& env = s.env();
    Identity& id = s.identity();
    if (const std::string* rank = env_get(env, "RANK")) {
      s.add(Field::kNodeRank, "RANK (pod index)", *rank);
      id.notes.emplace_back(
          "RANK is the pod's index under the Kubeflow operator: read as the node rank");
    }
    if (const std::string* world = env_get(env, "WORLD_SIZE")) {
      const std::string* nnodes = env_get(env, "PET_NNODES");
      bool pods = nnodes != nullptr && *nnodes == *world;
      s.add(pods ? Field::kNnodes : Field::kWorldSize, pods ? "WORLD_SIZE (pods)" : "WORLD_SIZE",
            *world);
    }
  } else {
    s.take(Field::kRank, "RANK");
    s.take(Field::kWorldSize, "WORLD_SIZE");
  }
  s.take(Field::kLocalRank, "LOCAL_RANK");
  s.take(Field::kLocalWorldSize, "LOCAL_WORLD_SIZE");
  s.take(Field::kMasterAddr, "MASTER_ADDR");
  s.take(Field::kMasterPort, "MASTER_PORT");
}

}  // namespace

// The variables torch.distributed's env:// init reads: what the training job will use.
const Launcher kTorch{"torch", "torch env", scan};

}  // namespace rankcheck::launcher
