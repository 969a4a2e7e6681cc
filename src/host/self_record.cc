// This member's own record: its identity and the facts of its host, as NCCL would
// see them (the environment plus NCCL's configuration files).

#include "host/self_record.h"

#include <cstdio>

#include <sys/utsname.h>
#include <unistd.h>

#include "host/interfaces.h"
#include "host/pcie.h"
#include "host/resolve.h"
#include "host/shm.h"
#include "host/sysfs_ib.h"
#include "host/sysfs_read.h"
#include "nccl/param.h"
#include "nccl/socket_if.h"

namespace rankcheck {

namespace {

// A configuration file NCCL would read; nullopt when there is none to read. NCCL
// reads the whole file; 1 MiB is more than any configuration holds.
std::optional<std::string> read_small_file(const std::string& path) {
  return read_file(path, 1u << 20);
}

// What NCCL's rules pick here, with NCCL_COMM_ID's host resolved as NCCL would.
NcclIfFacts collect_nccl_if(const std::vector<IfAddr>& ifs, const EnvMap& env, int32_t nccl_version,
                            Deadline resolve_by) {
  NcclIfInput in;
  in.env = &env;
  in.nccl_version = nccl_version;
  if (const std::string* id = env_get(env, "NCCL_COMM_ID")) {
    if (auto parsed = parse_comm_id(*id)) {
      auto addrs = resolve_host(parsed->host, resolve_by);
      if (addrs && !addrs->empty()) in.comm_id_address = addrs->front();
    }
  }
  return nccl_if_facts(ifs, in);
}

}  // namespace

Record self_record(const Identity& id, const std::optional<std::string>& host_name,
                   const EnvMap& env, Deadline resolve_by, GpuFacts gpu, const HostView* view) {
  HostFacts facts;
  facts.host = host_name ? *host_name : local_host_name();
  facts.pid = static_cast<uint32_t>(::getpid());
  // One netlink dump serves both the interface names and NCCL's interface rules.
  HostView mine;
  if (view == nullptr) {
    mine = read_host_view();
    view = &mine;
  }
  const std::vector<IfAddr>& ifs = view->interfaces;
  facts.interfaces = interfaces_with_address(ifs);
  if (!id.master_addr.empty()) {
    auto resolved = resolve_host(id.master_addr, resolve_by);
    if (resolved) {
      facts.master_resolved = *resolved;
    } else {
      facts.resolve_error = resolved.error().message;
    }
  }
  // NCCL sees the environment plus its configuration files: so do the record's
  // variables and the interface its rules pick.
  nccl::Conf conf = nccl::apply_conf(env, read_small_file);
  for (const auto& [name, file] : conf.from)
    facts.env_sources.push_back({name, file});
  facts.nccl_if = collect_nccl_if(ifs, conf.env, gpu.nccl_version, resolve_by);
  facts.nccl_if.netns = view->netns;
  // And the data network NCCL's IB transport or a plugin would carry the job over.
  SysFs sys = sysfs_from_env(env);
  facts.nccl_net = collect_nccl_net(sys, conf.env, gpu.nccl_version, conf.from);
  // And the /dev/shm its SHM transport would map the host's connections in.
  facts.shm = read_shm(sys, conf.env);
  // And the machine, which some NCCL releases' faults depend on (nccl/known_faults.h).
  if (struct utsname u{}; ::uname(&u) == 0) facts.arch = u.machine;
  // And the PCIe under the GPUs and HCAs NCCL will use.
  facts.pcie = read_pcie(sys, gpu, facts.nccl_net);
  facts.pcie.topo_error = topo_file_problem(sys, conf.env, gpu.nccl_version);
  return make_record(id, facts, conf.env, std::move(gpu));
}

}  // namespace rankcheck
