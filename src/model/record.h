#pragma once
// What a member sends the master: its identity and the facts of its host.

#include <cstdint>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/shared_list.h"
#include "base/shared_string.h"
#include "base/shared_value.h"
#include "model/gpu.h"
#include "model/identity.h"
#include "model/nccl_net.h"
#include "model/pcie.h"
#include "model/shm.h"

namespace rankcheck {

/// Caps on what a peer may send; checked while decoding, before allocation.
inline constexpr size_t kMaxHostName = 255;
inline constexpr size_t kMaxShortString = 512;
inline constexpr size_t kMaxEnvValue = 4096;
inline constexpr uint32_t kMaxEnvVars = 128;
inline constexpr uint32_t kMaxAddresses = 32;
inline constexpr uint32_t kMaxInterfaces = 64;
inline constexpr uint32_t kMaxConflicts = kFieldCount;
inline constexpr uint32_t kMaxConflictValues = 16;
inline constexpr uint32_t kMaxNcclSocketIfs = 16;  ///< NCCL's MAX_IFS
inline constexpr uint32_t kMaxEnvSources = 32;     ///< variables a record says came from a file

struct EnvVar {
  std::string name;
  std::string value;
  auto operator<=>(const EnvVar&) const = default;
};
inline size_t hash_item(const EnvVar& v) {
  return std::hash<std::string>{}(v.name) * 31 + std::hash<std::string>{}(v.value);
}

/// The interface NCCL's rules pick on a member's host (see nccl/socket_if.h), as sent.
struct NcclIfFacts {
  enum State : uint8_t { kUnknown = 0, kFound = 1, kNone = 2 };
  enum Flags : uint8_t { kLoopback = 1, kCommIdLocal = 2, kLinkScope = 4 };
  uint8_t state = kUnknown;  ///< kUnknown: not collected (a record made by hand, an old probe)
  uint8_t flags = 0;
  SharedString name;               ///< the bootstrap interface
  SharedString address;            ///< its address, numeric
  SharedString rule;               ///< how NCCL's rules came to it
  SharedString error;              ///< NCCL's own words when it finds none
  SharedList<std::string> socket;  ///< the socket transport's, "eth1 198.18.1.2", up to 16
  int32_t rules_version = 0;       ///< the NCCL version whose rules applied; 0: the newest
  /// The network stack the member runs in (boot id and network namespace): two
  /// "hosts" in one stack reach each other even over loopback or one address.
  SharedString netns;
  /// The rehearsal's listener on `address` (rehearsal/probe.h), 0: none on this member;
  /// and the host's ephemeral port range, which the listener's port came from.
  uint16_t listen_port = 0;
  uint16_t port_lo = 0, port_hi = 0;

  bool known() const { return state != kUnknown; }
  bool operator==(const NcclIfFacts&) const = default;
  /// "eth1 198.18.1.2", "none" or "-".
  std::string text() const;
};

/// What a member sends: its identity's fields again, not an Identity, since the master
/// holds one per member (100k of them): int32s and interned strings, not longs and
/// std::strings, and no observations or notes.
struct Record {
  SharedString version;  ///< the probe's own version
  int32_t rank = -1;     ///< first global rank
  int32_t nranks = 1;    ///< ranks this member stands for
  int32_t world_size = -1;
  int32_t local_rank = -1;  ///< -1: unknown
  int32_t local_world_size = -1;
  int32_t node_rank = -1;
  int32_t nnodes = -1;
  uint32_t pid = 0;
  uint16_t master_port = 0;
  uint8_t distribution = 0;  ///< Distribution
  // (The numbers together, then the handles: no padding among them.)
  SharedString launcher;
  SharedString master_addr;
  SharedList<std::string> master_resolved;  ///< what MASTER_ADDR resolved to on this host
  SharedString resolve_error;               ///< why it did not resolve, if it did not
  SharedString job_id;
  SharedString host;
  std::vector<Conflict> conflicts;
  SharedList<EnvVar> env;  ///< variables that must agree across ranks, sorted by name
  uint64_t env_digest = 0;
  SharedList<std::string> interfaces;  ///< names of interfaces with an address
  SharedString node_list;              ///< the launcher's node list, compressed
  SharedString tasks_per_node;
  GpuFacts gpu;                  ///< what the GPU inventory found
  uint64_t started_unix_ms = 0;  ///< when this process started (wall clock); 0: unknown
  // What the members of one host share (NCCL's interface and data network, /dev/shm)
  // is held by a handle: the master keeps one copy a host (SharedValue).
  SharedValue<NcclIfFacts> nccl_if;    ///< the interface NCCL would use on this host
  SharedValue<NcclNetFacts> nccl_net;  ///< the data network NCCL would use on this host
  /// Where tracked variables not from the environment came from: value = the file
  /// ("/etc/nccl.conf"); `env` holds the effective values NCCL sees.
  SharedList<EnvVar> env_sources;
  SharedValue<ShmFacts> shm;  ///< /dev/shm, for NCCL's SHM transport
  SharedString arch;          ///< the host's machine as uname(2) gives it ("x86_64", "aarch64")
  PcieFacts pcie;             ///< the PCIe links, IOMMU and ACS under NCCL

  bool in_range() const { return rank >= 0 && rank + nranks <= world_size; }
  int32_t last_rank() const { return rank + nranks - 1; }
};

/// Whether a variable must agree across ranks (NCCL_*, TORCH_NCCL_*, ...).
bool is_tracked_env(std::string_view name);
/// The tracked variables of `env`, sorted, values capped.
std::vector<EnvVar> tracked_env(const EnvMap& env);
/// FNV-1a over the tracked variables: equal sets, equal digests.
uint64_t env_digest(const std::vector<EnvVar>& env);

/// Facts about this host that go into the record.
struct HostFacts {
  std::string host;
  uint32_t pid = 0;
  std::vector<std::string> interfaces;
  std::vector<std::string> master_resolved;
  std::string resolve_error;
  uint64_t started_unix_ms = 0;  ///< the process's start, wall clock
  NcclIfFacts nccl_if;           ///< unknown unless collected
  NcclNetFacts nccl_net;         ///< unknown unless collected
  std::vector<EnvVar> env_sources;
  ShmFacts shm;      ///< unknown unless collected
  std::string arch;  ///< uname(2)'s machine; "" unless collected
  PcieFacts pcie;    ///< unknown unless collected
};

Record make_record(const Identity& id, const HostFacts& host, const EnvMap& env, GpuFacts gpu = {});

}  // namespace rankcheck
