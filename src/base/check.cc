#define UNW_LOCAL_ONLY
#include "base/check.hh"

#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <execinfo.h>
#include <libunwind.h>
#include <unistd.h>

#include "base/log.hh"
#include "base/real.hh"

namespace rdmasock {

namespace {

// libunwind is loaded when a backtrace is wanted, not with the library: every process
// of a machine may load rdmasock, and it is needed only on the way to abort().  The
// names are libunwind's exported ones (its header maps unw_* to them).  Where its
// getcontext is a macro rather than a function (not x86-64), glibc's backtrace() is used.
#define RS_STR2(x) #x
#define RS_STR(x) RS_STR2(x)

#if defined(__x86_64__)
struct Unwind {
    decltype(&unw_tdep_getcontext) getcontext = nullptr;
    decltype(&unw_init_local) init_local = nullptr;
    decltype(&unw_step) step = nullptr;
    decltype(&unw_get_reg) get_reg = nullptr;
    decltype(&unw_get_proc_name) get_proc_name = nullptr;

    bool load() noexcept
    {
        void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
        if (h == nullptr)
            return false;
        getcontext = reinterpret_cast<decltype(getcontext)>(dlsym(h, RS_STR(unw_tdep_getcontext)));
        init_local = reinterpret_cast<decltype(init_local)>(dlsym(h, RS_STR(unw_init_local)));
        step = reinterpret_cast<decltype(step)>(dlsym(h, RS_STR(unw_step)));
        get_reg = reinterpret_cast<decltype(get_reg)>(dlsym(h, RS_STR(unw_get_reg)));
        get_proc_name = reinterpret_cast<decltype(get_proc_name)>(dlsym(h, RS_STR(unw_get_proc_name)));
        return getcontext && init_local && step && get_reg && get_proc_name;
    }
};
#endif

void glibc_backtrace(int fd) noexcept
{
    void *frames[64];
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, fd);
}

}  // namespace

void write_backtrace(int fd) noexcept
{
#if !defined(__x86_64__)
    glibc_backtrace(fd);
#else
    Unwind u;
    if (!u.load()) {
        const char msg[] = "rdmasock: libunwind.so.8 cannot be loaded; glibc's backtrace:\n";
        RS_REAL(write)(fd, msg, sizeof msg - 1);
        glibc_backtrace(fd);
        return;
    }
    unw_context_t ctx;
    unw_cursor_t cur;
    if (u.getcontext(&ctx) != 0 || u.init_local(&cur, &ctx) != 0)
        return;
    for (int depth = 0; depth < 64 && u.step(&cur) > 0; ++depth) {
        unw_word_t ip = 0, off = 0;
        u.get_reg(&cur, UNW_REG_IP, &ip);
        char name[256] = "??";
        u.get_proc_name(&cur, name, sizeof name, &off);
        char line[400];
        int n = snprintf(line, sizeof line, "rdmasock[%d]:   #%d 0x%lx %s+0x%lx\n",
                         static_cast<int>(getpid()), depth, static_cast<unsigned long>(ip), name,
                         static_cast<unsigned long>(off));
        if (n > 0)
            RS_REAL(write)(fd, line, static_cast<size_t>(n) < sizeof line ? n : sizeof line - 1);
    }
#endif
}

void fatal(const char *file, int line, const char *what) noexcept
{
    log::write(log::kError, "internal invariant broken at %s:%d: %s; backtrace follows", file, line,
               what);
    write_backtrace(STDERR_FILENO);
    abort();
}

}  // namespace rdmasock
