#define UNW_LOCAL_ONLY
#include "base/check.hh"

#include <cstdio>
#include <cstdlib>
#include <libunwind.h>
#include <unistd.h>

#include "base/log.hh"
#include "base/real.hh"

namespace rdmasock {

void write_backtrace(int fd) noexcept
{
    unw_context_t ctx;
    unw_cursor_t cur;
    if (unw_getcontext(&ctx) != 0 || unw_init_local(&cur, &ctx) != 0)
        return;
    for (int depth = 0; depth < 64 && unw_step(&cur) > 0; ++depth) {
        unw_word_t ip = 0, off = 0;
        unw_get_reg(&cur, UNW_REG_IP, &ip);
        char name[256] = "??";
        unw_get_proc_name(&cur, name, sizeof name, &off);
        char line[400];
        int n = snprintf(line, sizeof line, "rdmasock[%d]:   #%d 0x%lx %s+0x%lx\n",
                         static_cast<int>(getpid()), depth, static_cast<unsigned long>(ip), name,
                         static_cast<unsigned long>(off));
        if (n > 0)
            RS_REAL(write)(fd, line, static_cast<size_t>(n) < sizeof line ? n : sizeof line - 1);
    }
}

void fatal(const char *file, int line, const char *what) noexcept
{
    log::write(log::kError, "internal invariant broken at %s:%d: %s; backtrace follows", file, line,
               what);
    write_backtrace(STDERR_FILENO);
    abort();
}

}  // namespace rdmasock
