// Logging: one line per call, written with the real write() so it never re-enters the
// interposer.  Levels: 0 error, 1 warn, 2 info, 3 debug, 4 trace.  RDMASOCK_LOG_CEILING
// (configure time) removes the calls above it from the binary.
#pragma once

#include <atomic>
#include <strings.h>

#ifndef RDMASOCK_LOG_CEILING
#define RDMASOCK_LOG_CEILING 4
#endif

namespace rdmasock::log {

enum Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

extern std::atomic<int> g_level;

// The levels' names ("?" for no level) and back (-1 when not a level; a digit 0-4 too).
inline const char *level_name(int level) noexcept
{
    static const char *const names[] = {"error", "warn", "info", "debug", "trace"};
    return level >= kError && level <= kTrace ? names[level] : "?";
}
inline int parse_level(const char *s) noexcept
{
    for (int i = kError; i <= kTrace; ++i)
        if (!strcasecmp(s, level_name(i)))
            return i;
    if (s[0] >= '0' && s[0] <= '4' && s[1] == '\0')
        return s[0] - '0';
    return -1;
}

inline bool enabled(int level) noexcept
{
    return level <= RDMASOCK_LOG_CEILING && level <= g_level.load(std::memory_order_relaxed);
}

// Configure: level and target file ("" = standard error).  Opens the file at once.
void configure(int level, const char *file) noexcept;

// printf-style; adds the "rdmasock[pid]: level: " prefix and the newline.
void write(int level, const char *fmt, ...) noexcept __attribute__((format(printf, 2, 3)));

// The application closed (or dup2'd over) the numbers in [first, last] (close,
// close_range, closefrom): if our log file was among them, forget it.
void on_fds_closed(unsigned first, unsigned last) noexcept;

// After fork, in the child (the prefix carries the pid).
void after_fork_child() noexcept;

}  // namespace rdmasock::log

#define RS_LOG(level, ...)                                                                        \
    do {                                                                                          \
        if (::rdmasock::log::enabled(level))                                                      \
            ::rdmasock::log::write(level, __VA_ARGS__);                                           \
    } while (0)
#define RS_ERROR(...) RS_LOG(::rdmasock::log::kError, __VA_ARGS__)
#define RS_WARN(...) RS_LOG(::rdmasock::log::kWarn, __VA_ARGS__)
#define RS_INFO(...) RS_LOG(::rdmasock::log::kInfo, __VA_ARGS__)
#define RS_DEBUG(...) RS_LOG(::rdmasock::log::kDebug, __VA_ARGS__)
