#pragma once
// The data network NCCL will use on a member's host, as a record carries it: the
// transport NCCL's rules pick (its IB transport, a network plugin, or NET/Socket),
// the InfiniBand/RoCE ports they open and the GID they pick on each, and what
// memory registration needs (see nccl/ib.h for the rules, host/sysfs_ib.h for
// the facts they read).

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/shared_string.h"

namespace rankcheck {

inline constexpr uint32_t kMaxIbPorts = 32;  ///< NCCL's MAX_IB_DEVS

/// One port of an RDMA device as NCCL's IB transport sees it.
struct IbPortFacts {
  /// ibv_port_state: the numbers sysfs's `state` file starts with.
  enum State : uint8_t { kNop = 0, kDown = 1, kInit = 2, kArmed = 3, kActive = 4, kDefer = 5 };
  enum Link : uint8_t { kLinkUnknown = 0, kInfiniBand = 1, kEthernet = 2 };
  enum Flags : uint8_t {
    kSelected = 1,      ///< NCCL_IB_HCA (or its absence) selects it
    kUsed = 2,          ///< selected, ACTIVE, IB or Ethernet: NCCL opens it
    kGidLinkLocal = 4,  ///< the GID NCCL picks is link-local (fe80::/64) or unset
    kNoCdev = 8,        ///< its device's /dev/infiniband/uverbsN is missing or does not open
  };
  SharedString device;  ///< "mlx5_0"
  uint8_t port = 1;
  uint8_t state = kNop;
  uint8_t link = kLinkUnknown;
  uint8_t flags = 0;
  uint32_t rate_gbps = 0;  ///< sysfs `rate`, "400 Gb/sec (4X NDR)" -> 400
  /// RoCE: the GID NCCL picks, -1 on InfiniBand (NCCL uses the LID there).
  int16_t gid_index = -1;
  uint8_t gid_roce = 0;    ///< 1 or 2 (gid_attrs/types), 0: unknown
  uint8_t gid_family = 0;  ///< 4 (IPv4-mapped) or 6, 0: none
  SharedString gid;        ///< "::ffff:198.18.0.1", "fe80::..."
  SharedString netdev;     ///< gid_attrs/ndevs: the Ethernet device behind the GID

  bool used() const { return (flags & kUsed) != 0; }
  /// "mlx5_0:1"
  std::string name() const;
  bool operator==(const IbPortFacts&) const = default;
};

/// NCCL's data network on one host.
struct NcclNetFacts {
  enum Transport : uint8_t { kUnknown = 0, kIb = 1, kSocket = 2, kPlugin = 3, kNoNet = 4 };
  /// Why the IB transport has no port (kSocket), or why NCCL_NET cannot be met (kNoNet).
  enum Reason : uint8_t {
    kNone = 0,
    kNoDevice = 1,    ///< no RDMA device in sysfs
    kDisabled = 2,    ///< NCCL_IB_DISABLE
    kNoVerbs = 3,     ///< libibverbs not found by the loader
    kNoUverbs = 4,    ///< devices in sysfs, but /dev/infiniband has no uverbs to open
    kHcaNone = 5,     ///< NCCL_IB_HCA matches no port
    kNoActive = 6,    ///< ports, none ACTIVE
    kNetNamed = 7,    ///< NCCL_NET names Socket
    kNetMissing = 8,  ///< NCCL_NET names a network this host does not have
  };
  enum Gdr : uint8_t { kGdrUnknown = 0, kGdrNone = 1, kGdrPeermem = 2 };
  enum Flags : uint8_t {
    kContainer = 1,
    kUverbs = 2,
    kUverbsOpen = 4,
    kFromRoot = 8,
    kIpcLock = 16,     ///< CAP_IPC_LOCK: RLIMIT_MEMLOCK does not bound RDMA registrations
    kPluginRead = 32,  ///< the plugin's exported symbols were read (plugin_abi)
    /// It exports no ncclNetPlugin_vN the release reads: NCCL unloads it, as if not found.
    kPluginUnsupported = 64,
  };
  uint8_t transport = kUnknown;  ///< kUnknown: not collected
  uint8_t reason = kNone;
  uint8_t gdr = kGdrUnknown;
  uint8_t flags = 0;
  uint8_t ib_devices = 0;     ///< RDMA devices in sysfs
  uint8_t nics = 0;           ///< NICs NCCL counts, after NCCL_IB_MERGE_NICS
  int64_t memlock = -2;       ///< RLIMIT_MEMLOCK bytes; -1 unlimited, -2 unknown
  int64_t memlock_need = 0;   ///< what NCCL's registrations need, estimated
  SharedString rule;          ///< how: "NCCL_IB_HCA=mlx5_0 (environment)", "default"
  SharedString plugin;        ///< the plugin library the loader finds, or ""
  SharedString plugin_tried;  ///< the names NCCL would try, "libnccl-net.so"
  /// Bit N: the plugin exports ncclNetPlugin_vN (with kPluginRead; 0 then: none).
  uint16_t plugin_abi = 0;
  SharedString net_name;      ///< NCCL_NET, "" when unset
  SharedString gid_rule;      ///< how the RoCE GID was chosen (choose_roce_gid's rule)
  SharedString root;          ///< RANKCHECK_SYSFS_ROOT when the facts came from a copy
  int32_t rules_version = 0;  ///< the NCCL version whose rules applied; 0: the newest
  /// Every port of every device; beyond kMaxIbPorts, the ones NCCL does not open go
  /// from the end first.
  std::vector<IbPortFacts> ports;

  bool known() const { return transport != kUnknown; }
  bool operator==(const NcclNetFacts&) const = default;
  /// The ports NCCL opens.
  std::vector<const IbPortFacts*> used_ports() const;
  /// The link layer of the used ports: "IB", "RoCE", "IB+RoCE" or "".
  std::string link_text() const;
  /// The table's cell: "IB mlx5_0:1,mlx5_1:1 800G" (beyond 3 ports "IB mlx5_0:1..mlx5_7:1
  /// (8) 3200G"), "RoCE v2 gid 3 mlx5_0:1 100G",
  /// "Socket (no IB device)", "plugin aws-ofi", "-".
  std::string text() const;
};

/// Why NCCL's IB transport has no port, in words: "no IB device", "NCCL_IB_DISABLE=1".
std::string nccl_net_reason_text(const NcclNetFacts& f);
/// The error counters of the IB ports, read at the check's start and after its GPU
/// stage (sysfs ports/N/counters/): a port whose counters moved while NCCL's init and
/// all-reduce ran has a flapping or noisy link.
inline constexpr std::array<std::string_view, 4> kIbErrorCounters = {
    "link_downed", "symbol_error", "link_error_recovery", "port_rcv_errors"};
/// "mlx5_0:1" -> each of kIbErrorCounters' values (-1: not readable).
using IbCounters = std::map<std::string, std::array<int64_t, 4>, std::less<>>;
/// What moved from `before` to `after`: "mlx5_0:1 symbol_error +12, link_downed +1;
/// mlx5_1:1 port_rcv_errors +3"; "" when nothing did (a port or a value missing from
/// either reading is not compared; a counter that went down was reset, not moved).
std::string ib_counters_moved(const IbCounters& before, const IbCounters& after);

/// Plugin ABI versions, bit N each: "v5", "v5, v8", "v6-v11"; "no ncclNetPlugin_v symbol".
std::string nccl_plugin_abi_text(uint16_t abi);
/// A plugin library's short name: "libnccl-net-aws-ofi.so" -> "aws-ofi".
std::string nccl_plugin_short_name(std::string_view library);

}  // namespace rankcheck
