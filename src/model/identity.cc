// The identity's data (model/identity.h).

#include "model/identity.h"

namespace rankcheck {

std::string_view field_name(Field f) {
  switch (f) {
    case Field::kRank:
      return "rank";
    case Field::kWorldSize:
      return "world size";
    case Field::kLocalRank:
      return "local rank";
    case Field::kLocalWorldSize:
      return "local world size";
    case Field::kNodeRank:
      return "node rank";
    case Field::kNnodes:
      return "node count";
    case Field::kNprocPerNode:
      return "processes per node";
    case Field::kMasterAddr:
      return "master address";
    case Field::kMasterPort:
      return "master port";
    case Field::kJobId:
      return "job id";
  }
  return "?";
}

}  // namespace rankcheck
