// This host's data network for the record: the sysfs view, the loader's lookups,
// then NCCL's rules (nccl/ib.cc).

#include <fmt/format.h>

#include "host/sysfs_ib.h"
#include "nccl/ib.h"

namespace rankcheck {

NcclNetFacts collect_nccl_net(const SysFs& sys, const EnvMap& env, int32_t nccl_version,
                              const std::map<std::string, std::string, std::less<>>& sources) {
  IbHostView host = sys.read_ib();
  const std::string* ld = env_get(env, "LD_LIBRARY_PATH");
  std::string ld_path = ld ? *ld : std::string();
  // ibvwrap.cc: dlopen("libibverbs.so"), then "libibverbs.so.1".
  host.verbs_library = sys.find_library("libibverbs.so", ld_path).has_value() ||
                       sys.find_library("libibverbs.so.1", ld_path).has_value();
  NcclNetInput in;
  in.env = &env;
  in.nccl_version = nccl_version;
  in.plugin_tried = nccl_plugin_candidates(env, nccl_version);
  for (const std::string& name : in.plugin_tried) {
    if (auto found = sys.find_library(name, ld_path)) {
      in.plugin = *found;
      break;
    }
  }
  if (auto it = sources.find("NCCL_IB_HCA"); it != sources.end())
    in.hca_source = fmt::format(" (from {})", it->second);
  return choose_nccl_net(host, in);
}

}  // namespace rankcheck
