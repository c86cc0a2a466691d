// The engine's side of the preload library (librdmasock_engine.so, loaded by the shim
// at the first eligible socket): its table of entry points and its work at exit.
//
// Every entry is a hook.  The shim calls an RS_DATA one only for an fd it found
// offloaded (preload/wrappers.cc); the hook looks again, under a reference, since the
// fd may have been closed since.
#include "preload/entry.hh"

#include "engine/offload.hh"
#include "preload/hooks.hh"
#include "preload/report.hh"

namespace rdmasock::entry {
namespace {

const Table g_table = {
#define RS_DATA(ret, name, params, args, fd) hook::name,
#define RS_HOOK(ret, name, params, args) hook::name,
#define RS_SHIM(ret, name, params, args)
#include "base/symbols.def"
    hook::fcntl,
    hook::fcntl,  // (fcntl64: the same on LP64)
    hook::ioctl,
};

// exit(): flush offloaded connections (their bytes reach the peer before its EOF).
__attribute__((destructor(101))) void rdmasock_unload() noexcept
{
    if (offload::foreign_child())
        return;  // (the connections, and their lines, are the parent's)
    hook::flush_streams();            // stdio streams on connections (C's own flush comes later)
    hook::finish_deferred_at_exit();  // closed by the program, calls still blocked
    hook::close_lines_at_exit();      // left open by the program
    report::log_exit();               // the totals
    offload::at_exit();
}

}  // namespace
}  // namespace rdmasock::entry

extern "C" __attribute__((visibility("default"))) const rdmasock::entry::Table *
rdmasock_engine_start() noexcept
{
    rdmasock::offload::set_report(rdmasock::report::open, rdmasock::report::answer);
    return &rdmasock::entry::g_table;
}
