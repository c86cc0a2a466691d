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
    int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        g_fd.store(util::move_high(fd), std::memory_order_relaxed);
    } else {
        write(kWarn, "cannot open log file %s: %s; logging to standard error", file, strerror(errno));
    }
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

void on_fd_closed(int fd) noexcept { on_fds_closed(static_cast<unsigned>(fd), static_cast<unsigned>(fd)); }

void on_fds_closed(unsigned first, unsigned last) noexcept
{
    int fd = g_fd.load(std::memory_order_relaxed);
    if (fd != STDERR_FILENO && fd >= 0 && static_cast<unsigned>(fd) >= first && static_cast<unsigned>(fd) <= last)
        // Our log file was closed behind our back: fall back to standard error.
        g_fd.compare_exchange_strong(fd, STDERR_FILENO, std::memory_order_relaxed);
}

void after_fork_child() noexcept {}

}  // namespace rdmasock::log
