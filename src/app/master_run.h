#pragma once
// Rank 0's side of a run: the master's configuration and the master in this process.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "app/session.h"
#include "identity/identity.h"
#include "master/master_state.h"
#include "model/record.h"

namespace rankcheck {

/// Which transport a master serves (master_config()).
enum class MasterTransport { kTcp, kMpi };
/// The master's configuration for this run, filled in one place for both
/// transports (master_run.cc).
MasterConfig master_config(const Identity& id, const Record& self, Session& s,
                           MasterTransport transport);

/// Where rank 0's master listens.
struct MasterSetup {
  std::vector<std::string> addresses;
  uint16_t port = 0;
  /// A socket already listening on addresses.front() (rankcheck local binds it before
  /// it forks its members, who then know the port from their start): taken over, and
  /// closed with the server; -1: listen anew.
  int listen_fd = -1;
};

/// Hosts the master in this process, joins it as a member, and prints the report
/// (master_run.cc). Returns nullopt when another master of this job already answers and
/// `join_other` (this process then joins it as an ordinary member); without it,
/// that master holding the port is master-port-in-use.
std::optional<int> serve_master(Record& self, const Identity& id, Session& s,
                                const MasterSetup& setup, bool join_other = true,
                                const std::function<void(uint16_t)>& on_listening = {});

}  // namespace rankcheck
