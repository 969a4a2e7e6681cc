#pragma once
// `rankcheck run [options] -- CMD`: the check, then the job under watch. This process
// (the one the launcher started, and signals, and waits for) stays small: it forks
// the check, takes its handoff (watch/handoff.h), and on a pass becomes the
// command's wrapper; on rank 0 it also serves the watch (rendezvous/watch_server.h).

#include "app/run.h"
#include "app/session.h"
#include "master/master_state.h"
#include "model/record.h"
#include "protocol/messages.h"
#include "report/report.h"

namespace rankcheck {

/// The whole run with a command: the check in a child, the command here.
int run_watched(const RunOptions& o, const EnvMap& env, const HostView* host);

// The check's side (in the child), called from the run's phases:

/// Rank 0, before the check's server listens: the watch server's listening sockets on
/// the master's addresses; their port goes into the verdict (0 when they could not
/// be opened: the job then runs unwatched, and says so).
uint16_t listen_for_watch(Session& s, const std::vector<std::string>& addresses);
/// Rank 0, once its report is out: the handoff to the wrapper, with the report.
void hand_off_master(Session& s, const Report& report, int code);
/// A member, once its verdict is out: the handoff to the wrapper.
void hand_off_member(Session& s, const Record& self, const Verdict* verdict, int code);

}  // namespace rankcheck
