#pragma once
// NCCL's versions, and the places where its behaviour changed that rankcheck follows,
// each a named gate read in NVIDIA/nccl at the tags it names. A version is NCCL's own
// code, ncclGetVersion's: major * 10000 + minor * 100 + patch (2.28.9 is 22809).

#include <cstdint>

namespace rankcheck::nccl {

using Version = int32_t;

/// The rules of `v` from `since` on, where a version that is not known (0) follows
/// the newest rules: what NCCL would do on a host whose library was not loaded.
constexpr bool rules_since(Version v, Version since) {
  return v == 0 || v >= since;
}
/// The library loaded is `since` or newer: a feature the loaded library has (0, no
/// library, has none).
constexpr bool has(Version v, Version since) {
  return v >= since;
}

// The list grammar (src/misc/utils.cc parseStringList): from 2.30.7 an entry's empty
// port ("mlx5_0:") is every port, as no port at all; before, atoi's 0.
inline constexpr Version kEmptyPortIsEvery = 23007;

// Interfaces (src/misc/socket.cc ncclFindInterfaces, 2.29+ src/os/linux.cc):
// from 2.28 (2.28.3, its first release) interfaces without IFF_RUNNING are skipped
// (NVIDIA/nccl#1798) and libvirt's virbr bridges come after lo in the default order.
inline constexpr Version kSkipsNotRunning = 22800;
inline constexpr Version kVirbrLast = 22800;
// 2.29.2 to 2.29.7 invert the IPv4 subnet test of NCCL_COMM_ID (matchSubnet);
// 2.30.3 fixed it (NVIDIA/nccl#2047).
inline constexpr Version kInvertedSubnetFrom = 22900;
inline constexpr Version kInvertedSubnetUntil = 23000;

// The data network (src/transport/net_ib.cc, src/plugin/net.cc):
inline constexpr Version kMergeNics = 22000;       // NCCL_IB_MERGE_NICS
inline constexpr Version kGidChoice = 22100;       // NCCL picks the RoCE GID itself
inline constexpr Version kFourDevsPerNic = 22400;  // NCCL_IB_MAX_DEVS_PER_NIC 4, was 2
// NCCL_NET_PLUGIN (src/net.cc, from 2.26 src/plugin/plugin_open.cc openPluginLib):
// before 2.21 only "libnccl-net-NAME.so"; 2.21 to 2.27.2 NAME as given, then the
// prefixed name; 2.27.3 and 2.27.4 a "lib*.so" name (7 characters or more) as given,
// any other the prefixed name only (a full path is never loaded); from 2.27.5 NAME as
// given, then the prefixed name unless NAME has a '/' or is "lib*.so".
inline constexpr Version kPluginAsIs = 22100;
inline constexpr Version kPluginList = 22703;      // a comma list (strtok_r: no empty names)
inline constexpr Version kPluginNoPrefix = 22705;  // as given, prefixed unless a path or lib*.so
inline constexpr Version kPluginNone = 22800;      // "none" (any case): no plugin at all

// NCCL_TOPO_FILE's reader (src/graph/xml.cc xmlGetValue): a value in single quotes as
// well as double from 2.27.3 (2.26.6 takes double quotes only).
inline constexpr Version kTopoSingleQuotes = 22703;

// Communicators (src/init.cc, src/group.cc):
// ncclCommAbort may be called from another thread than the one whose non-blocking
// init runs the communicator: before, the group job is thread-local and the abort
// frees the communicator under the init (NVIDIA/nccl#992).
inline constexpr Version kAbortFromAnyThread = 21901;
// ncclCommInitRankScalable: several roots for one communicator.
inline constexpr Version kScalableInit = 22300;
// A failed ncclCommDestroy leaves the caller inside the group it started
// (ncclCommEnsureReady returns before ncclGroupEndInternal; v2.24.3-1 to v2.29.7-1).
inline constexpr Version kDestroyLeavesGroup = 22400;

}  // namespace rankcheck::nccl
