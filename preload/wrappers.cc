// The extern "C" entry points of the preload shim, generated from symbols.def.  Until the
// engine is loaded each is a test and a tail call to the real function; from then on a
// call through the engine's table (preload/entry.hh, preload/engine.cc), but for a data
// call on an fd that is not an offloaded socket: that one the shim passes on itself
// (base/fd_slots.hh), with no call into the engine.
#include <cstdarg>
#include <fcntl.h>
#include <sys/syscall.h>

#include "base/fd_slots.hh"
#include "base/real.hh"
#include "preload/shim.hh"
#include "process/signals.hh"

#define RS_EXPORT extern "C" __attribute__((visibility("default")))

// The engine's entry if it is loaded, else the real function.
#define RS_ENGINE_OR_REAL(name, args)                                          \
    if (const auto *rs_engine_ = ::rdmasock::shim::engine())                   \
        return rs_engine_->name args;                                          \
    return RS_REAL(name) args

// An fd is offloaded only by the engine, so a slot says "offloaded" only once it is
// loaded (the table is still tested: the slot's flag is read relaxed).
#define RS_DATA(ret, name, params, args, fd)                                   \
    RS_EXPORT ret name params noexcept                                         \
    {                                                                          \
        if (__builtin_expect(!::rdmasock::fdt::offloaded(fd), 1))              \
            return RS_REAL(name) args;                                         \
        RS_ENGINE_OR_REAL(name, args);                                         \
    }
// The same, but a message with control data (`ctl`) goes to the engine whatever its fd:
// it may carry descriptors (hook::recvmsg, hook::sendmsg).
#define RS_CTL(ret, name, params, args, fd, ctl)                               \
    RS_EXPORT ret name params noexcept                                         \
    {                                                                          \
        if (__builtin_expect(!::rdmasock::fdt::offloaded(fd), 1) &&            \
            __builtin_expect(::rdmasock::shim::engine() == nullptr || !(ctl), 1)) \
            return RS_REAL(name) args;                                         \
        RS_ENGINE_OR_REAL(name, args);                                         \
    }
#define RS_HOOK(ret, name, params, args)                                       \
    RS_EXPORT ret name params noexcept                                         \
    {                                                                          \
        RS_ENGINE_OR_REAL(name, args);                                         \
    }
#define RS_LOAD(ret, name, params, args)                                       \
    RS_EXPORT ret name params noexcept                                         \
    {                                                                          \
        const auto *rs_engine_ = ::rdmasock::shim::engine();                            \
        if (rs_engine_ == nullptr && ::rdmasock::shim::loads_engine_##name args)        \
            rs_engine_ = ::rdmasock::shim::load();                                      \
        if (rs_engine_ != nullptr)                                                      \
            return rs_engine_->name args;                                               \
        return RS_REAL(name) args;                                             \
    }
#define RS_SHIM(ret, name, params, args)
#include "base/symbols.def"

// The variadic ones: the third argument is an int or a pointer depending on the command;
// like the C library we pass it on as a pointer-sized value.
// Only fcntl's dup commands change the fd table: the engine sees them all.
#define RS_VA_FD(ret, name, type, engine_cmd)                                  \
    RS_EXPORT ret name(int fd, type cmd, ...) noexcept                         \
    {                                                                          \
        va_list ap;                                                            \
        va_start(ap, cmd);                                                     \
        void *arg = va_arg(ap, void *);                                        \
        va_end(ap);                                                            \
        if (__builtin_expect(!(engine_cmd) && !::rdmasock::fdt::offloaded(fd), 1)) \
            return RS_REAL(name)(fd, cmd, arg);                                \
        RS_ENGINE_OR_REAL(name, (fd, cmd, arg));                               \
    }
RS_VA_FD(int, fcntl, int, cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
RS_VA_FD(int, fcntl64, int, cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
RS_VA_FD(int, ioctl, unsigned long, false)
#undef RS_VA_FD

// The RS_SHIM symbols.  Signal handlers are wrapped from the start, engine or not
// (process/signals.hh).
RS_EXPORT int sigaction(int signo, const struct sigaction *act, struct sigaction *old) noexcept
{
    return ::rdmasock::sig::sigaction(signo, act, old);
}
RS_EXPORT sighandler_t signal(int signo, sighandler_t handler) noexcept
{
    return ::rdmasock::sig::signal(signo, handler);
}
RS_EXPORT sighandler_t bsd_signal(int signo, sighandler_t handler) noexcept
{
    return ::rdmasock::sig::signal(signo, handler);
}
// syscall(2): a raw call that closes or renumbers a descriptor (SYS_close, SYS_close_range,
// SYS_dup, SYS_dup2, SYS_dup3), or execs (SYS_execve, SYS_execveat), takes the engine's
// hook, as the C library's function would, so that the number is not left mapped to a
// closed socket (and a file that reuses it sent to the peer), nor a connection left on
// RDMA under a new program.  Anything else, and everything before the engine is
// loaded, goes to the C library's syscall() unchanged; like it, six arguments are read
// whatever the call takes.
RS_EXPORT long syscall(long number, ...) noexcept
{
    va_list ap;
    va_start(ap, number);
    long a[6];
    for (long &x : a)
        x = va_arg(ap, long);
    va_end(ap);
    if (const auto *e = ::rdmasock::shim::engine(); __builtin_expect(e != nullptr, 0)) {
        switch (number) {
        case SYS_close:
            return e->close(static_cast<int>(a[0]));
#ifdef SYS_close_range
        case SYS_close_range:
            return e->close_range(static_cast<unsigned>(a[0]), static_cast<unsigned>(a[1]), static_cast<int>(a[2]));
#endif
        case SYS_dup:
            return e->dup(static_cast<int>(a[0]));
#ifdef SYS_dup2
        case SYS_dup2:
            return e->dup2(static_cast<int>(a[0]), static_cast<int>(a[1]));
#endif
        case SYS_dup3:
            return e->dup3(static_cast<int>(a[0]), static_cast<int>(a[1]), static_cast<int>(a[2]));
        case SYS_execve:
            return e->execve(reinterpret_cast<const char *>(a[0]), reinterpret_cast<char *const *>(a[1]),
                             reinterpret_cast<char *const *>(a[2]));
#ifdef SYS_execveat
        case SYS_execveat:
            return e->execveat(static_cast<int>(a[0]), reinterpret_cast<const char *>(a[1]),
                               reinterpret_cast<char *const *>(a[2]), reinterpret_cast<char *const *>(a[3]),
                               static_cast<int>(a[4]));
#endif
        default:
            break;
        }
    }
    return RS_REAL(syscall)(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

// dprintf: through vdprintf (above), which the engine sees for an offloaded socket.
RS_EXPORT int dprintf(int fd, const char *format, ...) noexcept
{
    va_list ap;
    va_start(ap, format);
    int r = vdprintf(fd, format, ap);
    va_end(ap);
    return r;
}
RS_EXPORT int __dprintf_chk(int fd, int flag, const char *format, ...) noexcept
{
    va_list ap;
    va_start(ap, format);
    int r = __vdprintf_chk(fd, flag, format, ap);
    va_end(ap);
    return r;
}
// A vfork child shares the parent's stack: returning from this wrapper in the child
// would corrupt the parent's frame.  vfork is therefore a fork here (POSIX allows a
// conforming vfork child to run as a fork child; the only difference is speed).
RS_EXPORT pid_t vfork() noexcept { return fork(); }

// execl, execlp, execle: the argument list as an array, then execv, execvp or execve
// (the wrappers above, which the engine sees), as the C library's own do.
namespace {
// The list's pointers (ending with the null one) counted from `ap`, copied into `argv`
// when it is given.
size_t exec_args(const char *arg, va_list *ap, char **argv) noexcept
{
    size_t n = 0;
    for (const char *a = arg;; a = va_arg(*ap, const char *)) {
        if (argv != nullptr)
            argv[n] = const_cast<char *>(a);
        ++n;
        if (a == nullptr)
            return n;
    }
}
}  // namespace

#define RS_EXEC_LIST(name, first, call, with_env)                              \
    RS_EXPORT int name(const char *first, const char *arg, ...) noexcept       \
    {                                                                          \
        va_list ap, ap2;                                                       \
        va_start(ap, arg);                                                     \
        va_copy(ap2, ap);                                                      \
        const size_t n = exec_args(arg, &ap, nullptr);                         \
        char **argv = static_cast<char **>(__builtin_alloca(n * sizeof(char *))); \
        exec_args(arg, &ap2, argv);                                            \
        char *const *envp = with_env ? va_arg(ap2, char *const *) : nullptr;   \
        va_end(ap2);                                                           \
        va_end(ap);                                                            \
        (void)envp;                                                            \
        return call;                                                           \
    }
RS_EXEC_LIST(execl, path, execv(path, argv), false)
RS_EXEC_LIST(execlp, file, execvp(file, argv), false)
RS_EXEC_LIST(execle, path, execve(path, argv, envp), true)
#undef RS_EXEC_LIST
