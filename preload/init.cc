// Library constructor: the only code that runs at load.  It checks secure-execution
// mode and resolves the real symbols; nothing else (no environment, file, thread or
// device) until the first eligible socket.
#include "engine/offload.hh"
#include "hooks.hh"
#include "process/runtime.hh"

namespace {
__attribute__((constructor(101))) void rdmasock_load() noexcept { rdmasock::rt::on_load(); }
// exit(): flush offloaded connections (their bytes reach the peer before its EOF).
__attribute__((destructor(101))) void rdmasock_unload() noexcept
{
    rdmasock::hook::finish_deferred_at_exit();  // closed by the program, calls still blocked
    rdmasock::hook::close_lines_at_exit();      // left open by the program
    rdmasock::offload::at_exit();
}
}  // namespace
