#pragma once
// What this host offers NCCL's IB transport, read from sysfs and /dev without
// libibverbs: the RDMA devices and their ports (/sys/class/infiniband), the uverbs
// character devices a process opens (/dev/infiniband), whether GPUDirect RDMA's
// peer-memory module is loaded (/sys/module, /sys/kernel/mm/memory_peers), and
// where the loader would find libibverbs and a network plugin.
//
// A seam like ProcFs's: `root` stands for "/" (RANKCHECK_SYSFS_ROOT), so that tests
// and a user replaying a copy of another host's sysfs read a folder instead.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/env.h"

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
  std::string root;                   ///< the root read ("" for "/")
};

struct SysFs {
  std::string root;  ///< stands for "/": "" reads the host itself

  /// `abs` ("/sys/class/infiniband") under the root.
  std::string path(std::string_view abs) const;
  /// The devices, their ports and GID tables, /dev/infiniband, the modules and the
  /// container markers. The memlock limit is this process's own.
  IbHostView read_ib() const;
  /// Where the dynamic loader would find `name` (a file name, or a path when it has
  /// a '/'): LD_LIBRARY_PATH's folders as given, then /etc/ld.so.conf's folders and
  /// the default ones under the root. nullopt when it finds none.
  std::optional<std::string> find_library(const std::string& name,
                                          const std::string& ld_library_path) const;
};

/// The root RANKCHECK_SYSFS_ROOT names, or the host's own.
SysFs sysfs_from_env(const EnvMap& env);

}  // namespace rankcheck
