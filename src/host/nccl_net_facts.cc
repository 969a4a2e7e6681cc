// This host's data network for the record: the sysfs view, the loader's lookups,
// then NCCL's rules (nccl/ib.cc).

#include <fmt/format.h>

#include "host/elf.h"
#include "host/sysfs_ib.h"
#include "nccl/ib.h"

namespace rankcheck {
namespace {

// "ncclNetPlugin_v8" -> bit 8; other names and versions past 15, nothing.
uint16_t plugin_abi_of(const std::vector<std::string>& symbols) {
  uint16_t abi = 0;
  for (const std::string& s : symbols) {
    std::string_view v = std::string_view(s).substr(std::string_view("ncclNetPlugin_v").size());
    int n = 0;
    bool digits = !v.empty() && v.size() <= 2;
    for (char c : v) {
      digits = digits && c >= '0' && c <= '9';
      n = n * 10 + (c - '0');
    }
    if (digits && n < 16) abi = static_cast<uint16_t>(abi | (1u << n));
  }
  return abi;
}

}  // namespace

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
    auto found = sys.find_library(name, ld_path);
    if (!found) continue;
    // The loader refuses a library built for another machine: NCCL tries the next name.
    std::optional<ElfExports> elf = elf_exports(*found, "ncclNetPlugin_v");
    if (elf && !elf->this_machine) continue;
    in.plugin = *found;
    if (elf) in.plugin_abi = plugin_abi_of(elf->symbols);
    break;
  }
  if (auto it = sources.find("NCCL_IB_HCA"); it != sources.end())
    in.hca_source = fmt::format(" (from {})", it->second);
  return choose_nccl_net(host, in);
}

}  // namespace rankcheck
