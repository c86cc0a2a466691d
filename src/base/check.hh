// Invariant checks: a broken invariant logs the failed condition and a backtrace
// (libunwind) before the process aborts, so a user's report says where.
#pragma once

namespace rdmasock {

[[noreturn]] void fatal(const char *file, int line, const char *what) noexcept;

// Write the current backtrace to fd (one frame per line).  Async-signal-safe enough for
// a crash path: no malloc, real write().
void write_backtrace(int fd) noexcept;

}  // namespace rdmasock

#define RS_CHECK(cond)                                                                            \
    do {                                                                                          \
        if (__builtin_expect(!(cond), 0))                                                         \
            ::rdmasock::fatal(__FILE__, __LINE__, #cond);                                         \
    } while (0)
