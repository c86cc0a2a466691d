// The extern "C" entry points, generated from symbols.def.  Each wrapper is one line of
// dispatch; for a call on an fd that is not an offloaded socket it is a table load, a
// test and a tail call to the real function: no lock, no allocation, errno untouched.
#include <cstdarg>
#include <fcntl.h>

#include "base/real.hh"
#include "preload/hooks.hh"
#include "process/fd_table.hh"

#define RS_EXPORT extern "C" __attribute__((visibility("default")))

#define RS_DATA(ret, name, params, args, fd)                                   \
    RS_EXPORT ret name params noexcept                                         \
    {                                                                          \
        if (__builtin_expect(!::rdmasock::fdt::offloaded(fd), 1))              \
            return RS_REAL(name) args;                                         \
        return ::rdmasock::hook::name args;                                    \
    }
#define RS_HOOK(ret, name, params, args)                                       \
    RS_EXPORT ret name params noexcept { return ::rdmasock::hook::name args; }
#define RS_VA(ret, name, params)
#include "base/symbols.def"
#undef RS_DATA
#undef RS_HOOK
#undef RS_VA

// fcntl's third argument is an int or a pointer depending on cmd; like the C library we
// pass it on as a pointer-sized value.  Only the dup commands change the fd table.
#define RS_FCNTL(name)                                                         \
    RS_EXPORT int name(int fd, int cmd, ...) noexcept                          \
    {                                                                          \
        va_list ap;                                                            \
        va_start(ap, cmd);                                                     \
        void *arg = va_arg(ap, void *);                                        \
        va_end(ap);                                                            \
        if (__builtin_expect(cmd != F_DUPFD && cmd != F_DUPFD_CLOEXEC &&       \
                                 !::rdmasock::fdt::offloaded(fd),              \
                             1))                                               \
            return RS_REAL(name)(fd, cmd, arg);                                \
        return ::rdmasock::hook::fcntl(fd, cmd, arg);                          \
    }
RS_FCNTL(fcntl)
RS_FCNTL(fcntl64)

RS_EXPORT int ioctl(int fd, unsigned long request, ...) noexcept
{
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (__builtin_expect(!::rdmasock::fdt::offloaded(fd), 1))
        return RS_REAL(ioctl)(fd, request, arg);
    return ::rdmasock::hook::ioctl(fd, request, arg);
}
