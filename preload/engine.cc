// The engine's side of the preload library (librdmasock_engine.so, loaded by the shim
// at the first eligible socket): its table of entry points and its work at exit.
//
// An RS_DATA entry passes a call on an fd that is not an offloaded socket straight to the
// real function (a table load, a test and a tail call: no lock, no allocation, errno
// untouched); every other entry enters its hook.
#include "preload/entry.hh"

#include <fcntl.h>

#include "engine/offload.hh"
#include "preload/hooks.hh"
#include "process/fd_table.hh"

namespace rdmasock::entry {
namespace {

#define RS_DATA(ret, name, params, args, fd)                                   \
    ret name params noexcept                                                   \
    {                                                                          \
        if (__builtin_expect(!fdt::offloaded(fd), 1))                          \
            return RS_REAL(name) args;                                         \
        return hook::name args;                                                \
    }
#define RS_HOOK(ret, name, params, args)
#include "base/symbols.def"

// fcntl's third argument is an int or a pointer depending on cmd; like the C library we
// pass it on as a pointer-sized value.  Only the dup commands change the fd table.
#define RS_FCNTL(name)                                                         \
    int name(int fd, int cmd, void *arg) noexcept                              \
    {                                                                          \
        if (__builtin_expect(cmd != F_DUPFD && cmd != F_DUPFD_CLOEXEC &&       \
                                 !fdt::offloaded(fd),                          \
                             1))                                               \
            return RS_REAL(name)(fd, cmd, arg);                                \
        return hook::fcntl(fd, cmd, arg);                                      \
    }
RS_FCNTL(fcntl)
RS_FCNTL(fcntl64)
#undef RS_FCNTL

int ioctl(int fd, unsigned long request, void *arg) noexcept
{
    if (__builtin_expect(!fdt::offloaded(fd), 1))
        return RS_REAL(ioctl)(fd, request, arg);
    return hook::ioctl(fd, request, arg);
}

const Table g_table = {
#define RS_DATA(ret, name, params, args, fd) entry::name,
#define RS_HOOK(ret, name, params, args) hook::name,
#define RS_SHIM(ret, name, params, args)
#include "base/symbols.def"
    entry::fcntl,
    entry::fcntl64,
    entry::ioctl,
};

// exit(): flush offloaded connections (their bytes reach the peer before its EOF).
__attribute__((destructor(101))) void rdmasock_unload() noexcept
{
    hook::finish_deferred_at_exit();  // closed by the program, calls still blocked
    hook::close_lines_at_exit();      // left open by the program
    offload::at_exit();
}

}  // namespace
}  // namespace rdmasock::entry

extern "C" __attribute__((visibility("default"))) const rdmasock::entry::Table *
rdmasock_engine_start() noexcept
{
    return &rdmasock::entry::g_table;
}
