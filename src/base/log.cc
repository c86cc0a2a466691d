#include "base/log.hh"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "base/fd.hh"
#include "base/real.hh"

namespace rdmasock::log {

std::atomic<int> g_level{kWarn};

namespace {
std::atomic<int> g_fd{STDERR_FILENO};
// RDMASOCK_LOG_FILE when it names the process (%p): a fork child opens its own.
char g_pattern[512] = "";

// The log file's name: `pattern` with each %p replaced by the process id (%% is %).
void expand(const char *pattern, char *out, size_t n) noexcept
{
    size_t o = 0;
    for (const char *p = pattern; *p != '\0' && o + 1 < n; ++p) {
        if (p[0] == '%' && (p[1] == 'p' || p[1] == '%')) {
            char pid[16];
            const char *s = p[1] == '%' ? "%" : pid;
            if (p[1] == 'p')
                snprintf(pid, sizeof pid, "%d", static_cast<int>(getpid()));
            for (; *s != '\0' && o + 1 < n; ++s)
                out[o++] = *s;
            ++p;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

void open_file(const char *pattern) noexcept
{
    char file[sizeof g_pattern + 16];
    expand(pattern, file, sizeof file);
    util::FdGate making(util::FdGate::making);
    int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        g_fd.store(util::move_high(fd), std::memory_order_relaxed);
    } else {
        g_fd.store(STDERR_FILENO, std::memory_order_relaxed);
        write(kWarn, "cannot open log file %s: %s; logging to standard error", file, strerror(errno));
    }
}

void write_all(int fd, const char *p, size_t n) noexcept
{
    while (n > 0) {
        ssize_t w = RS_REAL(write)(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        p += w;
        n -= static_cast<size_t>(w);
    }
}
}  // namespace

void configure(int level, const char *file) noexcept
{
    g_level.store(level, std::memory_order_relaxed);
    if (file == nullptr || *file == '\0')
        return;
    int saved = errno;
    if (strstr(file, "%p") != nullptr && strlen(file) < sizeof g_pattern)
        snprintf(g_pattern, sizeof g_pattern, "%s", file);
    open_file(file);
    errno = saved;
}

void write(int level, const char *fmt, ...) noexcept
{
    int saved = errno;
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "rdmasock[%d]: %s: ", static_cast<int>(getpid()),
                     level_name(level));
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - static_cast<size_t>(n) - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    size_t len = static_cast<size_t>(n) + static_cast<size_t>(m);
    if (len > sizeof buf - 2)
        len = sizeof buf - 2;
    buf[len++] = '\n';
    int fd = g_fd.load(std::memory_order_relaxed);
    if (fd >= 0)
        write_all(fd, buf, len);
    errno = saved;
}

void on_fds_closed(unsigned first, unsigned last) noexcept
{
    int fd = g_fd.load(std::memory_order_relaxed);
    if (fd != STDERR_FILENO && fd >= 0 && static_cast<unsigned>(fd) >= first && static_cast<unsigned>(fd) <= last)
        // Our log file was closed behind our back: fall back to standard error.
        g_fd.compare_exchange_strong(fd, STDERR_FILENO, std::memory_order_relaxed);
}

// A log file named by the process id: the child's is its own (the parent's stays open
// in the parent only).
void after_fork_child() noexcept
{
    if (g_pattern[0] == '\0')
        return;
    int saved = errno;
    int old = g_fd.load(std::memory_order_relaxed);
    open_file(g_pattern);
    if (old != STDERR_FILENO && old >= 0 && old != g_fd.load(std::memory_order_relaxed))
        util::close_own(old);
    errno = saved;
}

}  // namespace rdmasock::log
