// Which signal interrupted a blocking call, so the library restarts exactly the calls the
// kernel would restart (a handler installed with SA_RESTART) and returns EINTR for the
// others.
//
// The program's handlers are installed through sigaction()/signal() hooks behind a
// trampoline that notes the signal number in a thread-local variable, then calls the
// program's handler with the calling convention it asked for.  The program sees its own
// handlers in what sigaction() reports.  Inert in secure-execution mode.  Part of the
// preload shim: handlers installed before the engine is loaded are wrapped too.
#pragma once
#include <signal.h>

#include "base/shared.hh"

namespace rdmasock::sig {

// Before a blocking wait: forget the last signal of this thread.
RS_SHARED void clear_last() noexcept;
// After a wait failed with EINTR: the signal whose handler ran on this thread since
// clear_last(), or 0 when unknown (a handler the library did not install).
RS_SHARED int last() noexcept;
// Would the kernel restart a socket call interrupted by `signo` (0: unknown)?  Never
// when the socket has a timeout; for an unknown signal only when every installed
// handler has SA_RESTART.
RS_SHARED bool restart_after(int signo, bool has_timeout) noexcept;

// The wrappers of sigaction(), signal() and bsd_signal().
RS_SHARED int sigaction(int signo, const struct sigaction *act, struct sigaction *old) noexcept;
RS_SHARED sighandler_t signal(int signo, sighandler_t handler) noexcept;

}  // namespace rdmasock::sig
