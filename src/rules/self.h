#pragma once
// Findings about this process alone, made where no master's verdict can be had: a
// rank 0 that cannot listen or resolve its own MASTER_ADDR, a member that cannot
// join or lost the master, a process that started past the job's deadline. The
// master's rules read every record (rules.h); these read one process's own, and
// name its rank and host.

#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"
#include "model/finding.h"
#include "model/record.h"

namespace rankcheck {

/// An error about this process (its rank and host), whatever the catalogue's
/// severity: a process that cannot go on.
Finding self_failure(const Record& self, FindingId id, std::string message, std::string fix = {});

/// Started `late_ms` after the job's start (RANKCHECK_START_TIME) by this host's
/// clock, past the job's deadline (--timeout `timeout_s`); `tried`: and no master
/// answered the try it made anyway (its clock may be ahead, not its start late).
Finding started_past_deadline(const Record& self, double late_ms, double timeout_s,
                              bool tried = false);

/// Rank 0 cannot resolve its own MASTER_ADDR (`self.resolve_error` says why).
Finding master_addr_unresolved(const Record& self, std::string_view master_addr);
/// Another rank cannot resolve MASTER_ADDR now (`rankcheck env`): a warning, since
/// `run` retries it until --timeout, and the name may appear later.
Finding master_addr_unresolved_yet(const Record& self, std::string_view master_addr);

/// Why rank 0 could not listen on MASTER_ADDR:MASTER_PORT.
struct ListenFailure {
  std::string_view master_addr;
  uint16_t port = 0;
  Error error;  ///< the listen's, with its fault (kNotLocal, kInUse, kDenied, ...)
  /// A rankcheck master already answers on the port: whether it wants a job token,
  /// and the job id it shows.
  bool other_master = false;
  bool other_auth = false;
  std::string other_job_id;
  /// MASTER_ADDR is another host's, and no master of this job answered there by the
  /// deadline.
  bool waited_elsewhere = false;
  /// The holder shows this job's id, but without a job token nothing proves it is
  /// this job's master (anyone may show an id): a second rank 0, most likely.
  bool unproven_same_job = false;
};
Finding cannot_listen(const Record& self, const ListenFailure& why);

/// The verdict never came from the master at `master` ("addr:port"): its connection
/// was lost, or what answered failed the job token's check (`error.fault`).
/// The host MASTER_ADDR names, as a suspect host: a name, not an address.
std::optional<std::string> master_host_name(std::string_view master_addr);

Finding verdict_not_received(const Record& self, std::string_view master, const Error& error);

/// A collective step of the MPI bootstrap did not complete by the deadline.
Finding mpi_step_lost(const Record& self, std::string_view step);

}  // namespace rankcheck
