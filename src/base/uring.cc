#include "base/uring.hh"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "base/maps.hh"

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

// Does /proc/self/maps name an io_uring file?
bool maps_name_a_ring() noexcept
{
    bool found = false;
    util::each_map(
        [](const char *line, size_t len, void *arg) {
            static const char kName[] = "anon_inode:[io_uring]";
            if (memmem(line, len, kName, sizeof kName - 1) == nullptr)
                return true;
            *static_cast<bool *>(arg) = true;
            return false;
        },
        &found);
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
