#pragma once
// SIGINT/SIGTERM as a value every wait can see: a flag plus a pipe to poll on.

namespace rankcheck {

/// Installs handlers for SIGINT and SIGTERM (once).
void install_interrupt_handlers();
/// The signal that arrived, or 0.
int interrupted();
/// Readable once a signal arrived; for poll(2).
int interrupt_fd();
/// "SIGTERM".
const char* signal_name(int sig);

}  // namespace rankcheck
