// Library constructor: the only code that runs at load.  It checks secure-execution
// mode and resolves the real symbols; nothing else (no environment, file, thread or
// device) until the first eligible socket.
#include "core/runtime.hh"

namespace {
__attribute__((constructor(101))) void rdmasock_load() noexcept { rdmasock::rt::on_load(); }
}  // namespace
