#pragma once
// Which data network NCCL will use on this host, by NCCL's own rules
// (src/transport/net_ib.cc ncclIbInit and ncclIbGetGidIndex, src/misc/utils.cc
// parseStringList and matchIfList, the network plugin loader in src/net.cc and
// src/plugin/), as pure functions of a host's view (what host/sysfs_ib.h reads from
// sysfs), the effective NCCL_* settings and the NCCL version the host loads.

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "model/nccl_net.h"

namespace rankcheck {

/// One entry of a port's GID table (ports/N/gids/I, gid_attrs/types/I, gid_attrs/ndevs/I).
struct IbGid {
  int index = 0;
  std::array<uint8_t, 16> raw{};  ///< all zero: an empty slot
  int roce = 0;                   ///< 1 ("IB/RoCE v1", "RoCE v1"), 2 ("RoCE v2"), 0 unreadable
  std::string ndev;               ///< the netdev behind it, "" when none
};

struct IbPortView {
  int port = 1;
  int state = 0;            ///< the number `state` starts with ("4: ACTIVE" -> 4)
  int phys_state = 0;       ///< the number `phys_state` starts with ("5: LinkUp" -> 5)
  std::string link_layer;   ///< "InfiniBand", "Ethernet"
  uint32_t rate_gbps = 0;   ///< "400 Gb/sec (4X NDR)" -> 400
  std::vector<IbGid> gids;  ///< the whole table, in index order (its length is gid_tbl_len)
};

struct IbDeviceView {
  std::string name;            ///< "mlx5_0"
  std::string pci_path;        ///< realpath of the device link, as NCCL merges by it
  std::string sys_image_guid;  ///< NCCL merges ports of one NIC by it too
  std::vector<IbPortView> ports;
  /// Its uverbs character device ("uverbs3", from device/infiniband_verbs/ or
  /// /sys/class/infiniband_verbs/*/ibdev), "" when sysfs names none.
  std::string uverbs;
  bool cdev = false;      ///< /dev/infiniband/<uverbs> exists (libibverbs lists the device)
  bool openable = false;  ///< and opens read-write (NCCL's ibv_open_device)
};

/// This host's view, as NCCL's IB transport would find it.
struct IbHostView {
  std::vector<IbDeviceView> devices;  ///< sorted by name, as libibverbs lists them
  std::vector<std::string> uverbs;    ///< /dev/infiniband/uverbs* present
  bool uverbs_openable = false;       ///< at least one opens read-write
  bool peermem = false;               ///< nvidia_peermem (or nv_peer_mem) loaded
  bool container = false;             ///< /.dockerenv or /run/.containerenv
  bool verbs_library = false;         ///< the loader finds libibverbs.so.1
  int64_t memlock = -2;               ///< RLIMIT_MEMLOCK soft limit; -1 unlimited, -2 unknown
  /// CAP_IPC_LOCK in this process's effective set: the kernel does not hold its RDMA
  /// registrations to RLIMIT_MEMLOCK (ib_umem_get, drivers/infiniband/core/umem.c).
  bool ipc_lock = false;
  std::string root;  ///< the root read ("" for "/")
};

/// NCCL_IB_HCA is read with NCCL's list grammar (nccl/list.h: '^', '=', prefixes,
/// ":port"), at most kMaxHcas entries; an empty list selects every port, "^" none.
/// The GID NCCL's IB transport uses on a RoCE port, and how it came to it.
struct GidChoice {
  int index = 0;
  std::string rule;  ///< "NCCL_IB_GID_INDEX=3", "NCCL 2.18's default 0", "chosen: RoCE v2, AF_INET"
};
/// Before 2.21: NCCL_IB_GID_INDEX, default 0. From 2.21: NCCL_IB_GID_INDEX when >= 0,
/// else NCCL walks the table from index 1 and keeps a candidate of the family
/// NCCL_IB_ADDR_FAMILY names (AF_INET unless "AF_INET6") inside NCCL_IB_ADDR_RANGE,
/// preferring a configured, not link-local GID of NCCL_IB_ROCE_VERSION_NUM (2).
GidChoice choose_roce_gid(const std::vector<IbGid>& table, const EnvMap& env, int32_t nccl_version);

/// 4 for an IPv4-mapped GID (::ffff:a.b.c.d, also its multicast form), else 6.
int gid_family(const std::array<uint8_t, 16>& raw);
/// NCCL's validGid: configured (not all zero, not fe80:: with nothing after) and
/// not link-local (fe80::/64).
bool gid_valid(const std::array<uint8_t, 16>& raw);
bool gid_link_local(const std::array<uint8_t, 16>& raw);
/// "::ffff:198.18.0.1", "fe80::e42:a1ff:fe5d:b4a2"
std::string gid_text(const std::array<uint8_t, 16>& raw);

/// The network plugin libraries NCCL would try, in order, for NCCL_NET_PLUGIN at
/// `nccl_version`: unset: "libnccl-net.so"; set, by the versions of nccl/version.h's
/// kPlugin* gates (a comma list from 2.27.3, "none" for no plugin from 2.28).
std::vector<std::string> nccl_plugin_candidates(const EnvMap& env, int32_t nccl_version);

/// The ncclNetPlugin_vN symbols release `nccl_version` looks for in a plugin, bit N
/// each (its src/plugin/net.cc and net_v*.cc, read at every tag from 2.18.1 to 2.30.7):
/// 2.18 v4-v6, 2.19 v5-v7, 2.20-2.23 v5-v8, 2.24-2.25 v5-v9, 2.26-2.27 v6-v10, 2.28-2.29
/// v6-v11, 2.30 v6-v12; 0 (unknown) the newest; before 2.18, not read: every bit.
uint16_t nccl_plugin_abi_read(int32_t nccl_version);

/// What the choice reads besides the host view.
struct NcclNetInput {
  const EnvMap* env = nullptr;  ///< the effective NCCL_* values (environment, then conf files)
  int32_t nccl_version = 0;     ///< 0: unknown, the newest rules
  /// The first plugin library the loader finds among nccl_plugin_candidates, or "".
  std::string plugin;
  std::vector<std::string> plugin_tried;
  /// The plugin's ncclNetPlugin_vN exports, bit N each; nullopt where its ELF could
  /// not be read (it is then taken as NCCL takes a plugin that loads).
  std::optional<uint16_t> plugin_abi;
  /// "NCCL_IB_HCA" -> " (from /etc/nccl.conf)": where a value came from, for `rule`.
  std::string hca_source;
};

/// NCCL's data network on this host:
/// - NCCL_NET, when set, names the one network NCCL may use ("IB", "Socket" or a
///   plugin's); a plugin the loader finds wins otherwise;
/// - the IB transport is off with NCCL_IB_DISABLE, without libibverbs, and finds no
///   device it can open without /dev/infiniband; libibverbs (rdma-core v20+,
///   try_access_device) lists only the devices whose own uverbs character device
///   exists, and NCCL skips one that does not open; when sysfs names no device's
///   uverbs (a copy of sysfs without /sys/class/infiniband_verbs), any uverbs that
///   opens stands for all of them;
/// - it opens every port of those that NCCL_IB_HCA selects, that is ACTIVE, and whose
///   link layer is InfiniBand or Ethernet, up to 32 (the cap counts opened ports, not
///   the ports before them); none left: NET/Socket;
/// - NICs: from 2.20 NCCL_IB_MERGE_NICS (default 1) counts the ports of one PCI
///   device with one system image GUID and one link layer as one NIC (2 ports at
///   most, 4 from 2.24);
/// - on RoCE ports, the GID of choose_roce_gid.
NcclNetFacts choose_nccl_net(const IbHostView& host, const NcclNetInput& in);

/// The memory NCCL's registrations pin, estimated: 16 buffers of NCCL_BUFFSIZE
/// (default 4 MiB), the send and receive buffers of 8 channels.
int64_t nccl_memlock_need(const EnvMap& env);

}  // namespace rankcheck
