#include "model/record.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/version.h"

namespace rankcheck {

bool is_tracked_env(std::string_view name) {
  // Diagnostics-only variables may differ freely (NCCL_DEBUG_FILE names a file per rank).
  if (name.rfind("NCCL_DEBUG", 0) == 0 || name == "NCCL_TOPO_DUMP_FILE") return false;
  return name.rfind("NCCL_", 0) == 0 || name.rfind("TORCH_NCCL_", 0) == 0 ||
         name == "CUDA_DEVICE_MAX_CONNECTIONS" || name == "CUDA_LAUNCH_BLOCKING" ||
         name == "TORCH_DISTRIBUTED_DEBUG" || name == "GLOO_SOCKET_IFNAME";
}

std::vector<EnvVar> tracked_env(const EnvMap& env) {
  std::vector<EnvVar> out;
  for (const auto& [name, value] : env) {  // EnvMap is ordered: `out` is sorted
    if (!is_tracked_env(name) || name.size() > kMaxShortString) continue;
    if (out.size() == kMaxEnvVars) break;
    out.push_back({name, value.substr(0, kMaxEnvValue)});
  }
  return out;
}

uint64_t env_digest(const std::vector<EnvVar>& env) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](std::string_view s) {
    for (char c : s)
      h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
    h = (h ^ 0xff) * 0x100000001b3ull;  // separator: ("ab","c") != ("a","bc")
  };
  for (const EnvVar& v : env) {
    mix(v.name);
    mix(v.value);
  }
  return h;
}

Record make_record(const Identity& id, const HostFacts& host, const EnvMap& env, GpuFacts gpu) {
  Record r;
  r.version = std::string(kRankcheckVersion);
  r.rank = static_cast<int32_t>(id.rank);
  r.nranks = static_cast<int32_t>(id.nranks);
  r.world_size = static_cast<int32_t>(id.world_size);
  r.local_rank = static_cast<int32_t>(id.local_rank);
  r.local_world_size = static_cast<int32_t>(id.local_world_size);
  r.node_rank = static_cast<int32_t>(id.node_rank);
  r.nnodes = static_cast<int32_t>(id.nnodes);
  r.launcher = id.launcher;
  r.master_addr = id.master_addr.substr(0, kMaxShortString);
  r.master_port = static_cast<uint16_t>(id.master_port);
  std::vector<std::string> resolved = host.master_resolved;
  if (resolved.size() > kMaxAddresses) resolved.resize(kMaxAddresses);
  r.master_resolved = std::move(resolved);
  r.resolve_error = host.resolve_error.substr(0, kMaxShortString);
  r.job_id = id.job_id.substr(0, kMaxShortString);
  r.host = host.host.substr(0, kMaxHostName);
  r.pid = host.pid;
  r.conflicts = id.conflicts;
  std::vector<EnvVar> tracked = tracked_env(env);
  r.env_digest = env_digest(tracked);
  r.env = std::move(tracked);
  std::vector<std::string> interfaces = host.interfaces;
  if (interfaces.size() > kMaxInterfaces) interfaces.resize(kMaxInterfaces);
  r.interfaces = std::move(interfaces);
  r.node_list = id.node_list.substr(0, kMaxEnvValue);
  r.tasks_per_node = id.tasks_per_node.substr(0, kMaxShortString);
  r.distribution = static_cast<uint8_t>(id.distribution);
  r.gpu = std::move(gpu);
  r.started_unix_ms = host.started_unix_ms;
  r.nccl_if = host.nccl_if;
  r.nccl_net = host.nccl_net;
  r.shm = host.shm;
  r.arch = host.arch;
  r.pcie = host.pcie;
  std::vector<EnvVar> sources;
  for (const EnvVar& e : host.env_sources) {
    if (!is_tracked_env(e.name) || e.name.size() > 64) continue;
    if (sources.size() == kMaxEnvSources) break;
    sources.push_back({e.name, e.value.substr(0, 128)});
  }
  std::sort(sources.begin(), sources.end());
  r.env_sources = std::move(sources);
  return r;
}

std::string NcclIfFacts::text() const {
  if (state == kUnknown) return "-";
  if (state == kNone) return "none";
  return fmt::format("{} {}", name.str(), address.str());
}

}  // namespace rankcheck
