// The load-time state of the process, owned by the preload shim: the only code that runs
// when the library is loaded (no environment read, no file, no thread, no device).
#pragma once

#include "base/shared.hh"

namespace rdmasock::rt {

// Library constructor: the secure-mode check, and nothing else.  (Each real function is
// resolved at its first call, every one of them when the engine is loaded: a start
// spends nothing on symbols it does not call, which under emulation was a third of the
// cost of a process start.)
RS_SHARED void on_load() noexcept;

// True in secure-execution mode (setuid, file capabilities): the library is inert.
RS_SHARED bool secure() noexcept;

}  // namespace rdmasock::rt
