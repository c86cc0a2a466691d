#include "base/uring.hh"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/fd.hh"

namespace rdmasock::uring {
namespace {

std::atomic<bool> g_seen{false};
std::atomic<long long> g_last_look_ms{-1000000};

long long now_ms() noexcept
{
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<long long>(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}

// Does /proc/self/maps name an io_uring file?  Read in pieces, each searched with the
// tail of the one before (a name cut in two is still found).
bool maps_name_a_ring() noexcept
{
    static const char kName[] = "anon_inode:[io_uring]";
    constexpr size_t kKeep = sizeof kName - 1;
    char buf[16384 + kKeep + 1];
    util::FdGate making(util::FdGate::making);
    const long fd = syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool found = false;
    size_t kept = 0;
    for (;;) {
        const long r = syscall(SYS_read, static_cast<int>(fd), buf + kept, sizeof buf - 1 - kept);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        const size_t len = kept + static_cast<size_t>(r);
        buf[len] = '\0';
        if (memmem(buf, len, kName, kKeep) != nullptr) {
            found = true;
            break;
        }
        kept = len < kKeep ? len : kKeep;
        memmove(buf, buf + len - kept, kept);
    }
    util::close_own(static_cast<int>(fd));  // (not syscall(): the shim hooks SYS_close)
    return found;
}

}  // namespace

bool seen() noexcept
{
    return g_seen.load(std::memory_order_relaxed);
}

bool in_use() noexcept
{
    if (seen())
        return true;
    const long long now = now_ms(), last = g_last_look_ms.load(std::memory_order_relaxed);
    if (now - last < kLookEveryMs)
        return false;
    g_last_look_ms.store(now, std::memory_order_relaxed);
    const int saved = errno;
    const bool found = maps_name_a_ring();
    errno = saved;
    if (found)
        g_seen.store(true, std::memory_order_relaxed);
    return found;
}

}  // namespace rdmasock::uring
