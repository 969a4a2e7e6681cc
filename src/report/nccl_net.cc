// NCCL's data network in the reports: the member table's cell, `rankcheck env`'s
// rows and the JSON, each value with where it came from.

#include <fmt/format.h>

#include "base/text.h"
#include "report/common.h"

namespace rankcheck {
namespace {

const char* transport_name(uint8_t t) {
  static constexpr const char* kNames[] = {"unknown", "IB", "Socket", "plugin", "none"};
  return kNames[t <= NcclNetFacts::kNoNet ? t : 0];
}

const char* state_name(uint8_t s) {
  static constexpr const char* kNames[] = {"NOP",   "DOWN",   "INIT",
                                           "ARMED", "ACTIVE", "ACTIVE_DEFER"};
  return kNames[s <= IbPortFacts::kDefer ? s : 0];
}

std::string memlock_text(int64_t v) {
  if (v == -1) return "unlimited";
  if (v < 0) return "unknown";
  return v >= (int64_t{1} << 20) ? fmt::format("{} MiB", v >> 20) : fmt::format("{} KiB", v >> 10);
}

std::string rules_of(int32_t version) {
  return version == 0 ? std::string("the newest NCCL's rules")
                      : fmt::format("NCCL {}'s rules", nccl_version_text(version));
}

}  // namespace

std::string nccl_net_cell(const Record& r, const std::string* stage_net) {
  const NcclNetFacts& f = r.nccl_net;
  std::string cell = f.known() ? printable(f.text(), 48) : "-";
  if (stage_net == nullptr) return cell;
  if (!f.known()) return printable(*stage_net, 24);
  return cell + " · NCCL: " + printable(*stage_net, 24);
}

nlohmann::json nccl_net_json(const NcclNetFacts& f) {
  nlohmann::json j = {{"transport", transport_name(f.transport)}};
  if (!f.known()) return j;
  j["text"] = f.text();
  j["reason"] =
      f.reason == NcclNetFacts::kNone ? nlohmann::json() : nlohmann::json(nccl_net_reason_text(f));
  j["rule"] = f.rule;
  j["rules_version"] = f.rules_version;
  j["net"] = f.net_name.empty() ? nlohmann::json() : nlohmann::json(f.net_name.str());
  j["plugin"] = f.plugin.empty() ? nlohmann::json() : nlohmann::json(f.plugin.str());
  j["plugin_tried"] = f.plugin_tried;
  nlohmann::json abi = nlohmann::json::array();
  for (int n = 0; n < 16; ++n) {
    if ((f.plugin_abi & (1u << n)) != 0) abi.push_back(n);
  }
  j["plugin_abi"] = (f.flags & NcclNetFacts::kPluginRead) != 0 ? abi : nlohmann::json();
  j["plugin_unsupported"] = (f.flags & NcclNetFacts::kPluginUnsupported) != 0;
  j["ib_devices"] = f.ib_devices;
  j["nics"] = f.nics;
  j["uverbs"] = (f.flags & NcclNetFacts::kUverbs) != 0;
  j["uverbs_openable"] = (f.flags & NcclNetFacts::kUverbsOpen) != 0;
  j["container"] = (f.flags & NcclNetFacts::kContainer) != 0;
  j["gpudirect_rdma"] =
      f.gdr == NcclNetFacts::kGdrPeermem ? nlohmann::json("nvidia_peermem") : nlohmann::json();
  j["memlock_bytes"] = f.memlock >= 0 ? nlohmann::json(f.memlock) : nlohmann::json();
  j["memlock_unlimited"] = f.memlock == -1;
  j["memlock_need_bytes"] = f.memlock_need;
  j["cap_ipc_lock"] = (f.flags & NcclNetFacts::kIpcLock) != 0;
  j["gid_rule"] = f.gid_rule.empty() ? nlohmann::json() : nlohmann::json(f.gid_rule.str());
  j["sysfs_root"] = f.root.empty() ? nlohmann::json() : nlohmann::json(f.root.str());
  j["ports"] = nlohmann::json::array();
  for (const IbPortFacts& p : f.ports) {
    nlohmann::json port = {{"device", p.device},
                           {"port", p.port},
                           {"state", state_name(p.state)},
                           {"link_layer", p.link == IbPortFacts::kInfiniBand ? "InfiniBand"
                                          : p.link == IbPortFacts::kEthernet ? "Ethernet"
                                                                             : "unknown"},
                           {"rate_gbps", p.rate_gbps},
                           {"selected", (p.flags & IbPortFacts::kSelected) != 0},
                           {"listed", (p.flags & IbPortFacts::kNoCdev) == 0},
                           {"used", p.used()}};
    if (p.gid_index >= 0) {
      port["gid"] = {
          {"index", p.gid_index},
          {"roce_version", p.gid_roce},
          {"family", p.gid_family == 0 ? nlohmann::json() : nlohmann::json(p.gid_family)},
          {"address", p.gid},
          {"netdev", p.netdev},
          {"link_local", (p.flags & IbPortFacts::kGidLinkLocal) != 0}};
    }
    j["ports"].push_back(std::move(port));
  }
  return j;
}

void nccl_net_env_rows(const Record& self, const EnvRowFn& row) {
  const NcclNetFacts& f = self.nccl_net;
  if (!f.known()) return;
  std::string how = rules_of(f.rules_version);
  if (f.transport == NcclNetFacts::kPlugin) {
    how = fmt::format("{} (the loader finds it; tried: {}) · {}", printable(f.plugin, 80),
                      printable(f.plugin_tried, 80), how);
  } else {
    how = printable(f.rule, 80) + " · " + how;
  }
  if ((f.flags & NcclNetFacts::kPluginUnsupported) != 0) {
    how += fmt::format(" · plugin {} unloaded: it exports {}, which this NCCL does not read",
                       printable(f.plugin, 80), nccl_plugin_abi_text(f.plugin_abi));
  }
  if (!f.net_name.empty()) how += " · NCCL_NET=" + printable(f.net_name, 32);
  if (!f.root.empty()) how += " · RANKCHECK_SYSFS_ROOT=" + printable(f.root, 80);
  row("nccl net", printable(f.text(), 48), how);
  for (const IbPortFacts& p : f.ports) {
    std::string what = fmt::format("{} {} {}G", state_name(p.state),
                                   p.link == IbPortFacts::kInfiniBand ? "IB"
                                   : p.link == IbPortFacts::kEthernet ? "RoCE"
                                                                      : "?",
                                   p.rate_gbps);
    std::string note = p.used() ? std::string("used")
                       : (p.flags & IbPortFacts::kNoCdev) != 0
                           ? std::string(
                                 "not listed: its /dev/infiniband/uverbs node is missing "
                                 "or does not open")
                       : (p.flags & IbPortFacts::kSelected) == 0 ? std::string("not selected")
                       : p.state != IbPortFacts::kActive ? std::string("skipped: not ACTIVE")
                       : f.transport == NcclNetFacts::kPlugin
                           ? std::string("the plugin's")
                           : "not opened: " + nccl_net_reason_text(f);
    if (p.gid_index >= 0) {
      note += fmt::format(" · gid {} {} {}{} · {}", p.gid_index, printable(p.gid, 40),
                          p.gid_roce ? fmt::format("RoCE v{}", p.gid_roce) : "type ?",
                          p.netdev.empty() ? "" : " " + printable(p.netdev, 16),
                          printable(f.gid_rule, 80));
    }
    row("  ib port", printable(p.name(), 24) + " " + what, note);
  }
  row("  memlock", memlock_text(f.memlock),
      fmt::format("RLIMIT_MEMLOCK · NCCL registers about {}{}", memlock_text(f.memlock_need),
                  (f.flags & NcclNetFacts::kIpcLock) != 0
                      ? " · CAP_IPC_LOCK: the kernel does not hold RDMA registrations to it"
                      : ""));
  row("  gpudirect", f.gdr == NcclNetFacts::kGdrPeermem ? "nvidia_peermem" : "no peermem",
      "/sys/module/nvidia_peermem, /sys/kernel/mm/memory_peers (dma-buf not probed)");
  const ShmFacts& shm = self.shm;
  if (!shm.known()) {
    row("/dev/shm", "no size", "statvfs failed, or a tmpfs without a size limit: not compared");
  } else {
    std::string flags = (shm.flags & ShmFacts::kShmDisabled) != 0   ? " · NCCL_SHM_DISABLE=1"
                        : (shm.flags & ShmFacts::kP2pDisabled) != 0 ? " · NCCL_P2P_DISABLE=1"
                                                                    : "";
    auto mib = [](int64_t v) {
      return fmt::format("{:.1f} MiB", static_cast<double>(v) / (1 << 20));
    };
    row("/dev/shm", fmt::format("{} free of {}", mib(shm.avail), mib(shm.size)),
        fmt::format("NCCL's SHM transport maps {} per connection, 2 channels per local rank{}",
                    mib(shm.segment), flags));
  }
}

nlohmann::json shm_json(const ShmFacts& f) {
  if (!f.known()) return nullptr;
  return {{"size_bytes", f.size},
          {"available_bytes", f.avail},
          {"segment_bytes", f.segment},
          {"shm_disabled", (f.flags & ShmFacts::kShmDisabled) != 0},
          {"p2p_disabled", (f.flags & ShmFacts::kP2pDisabled) != 0}};
}

}  // namespace rankcheck
