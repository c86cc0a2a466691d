#include "rdma/device_maps.hh"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <sys/mman.h>

#include "base/maps.hh"
#include "rdma/dl.hh"

namespace rdmasock::rdma::device_maps {
namespace {

std::atomic<bool> g_made{false};
std::shared_mutex g_unmapping;
std::atomic<uint64_t> g_unmapped{0};  // Unmappings ended

struct Range {
    uintptr_t start, stop;
};
constexpr size_t kMaxRanges = 1024;  // a pass's; more: another pass
struct Found {
    Range r[kMaxRanges];
    size_t skip = 0;  // device mappings the passes before took
    size_t seen = 0;
    size_t n = 0;
    bool more = false;
};

// "start-end perms offset dev inode path": a mapping of one of rdma-core's device files.
bool device_line(const char *line, size_t len, void *arg) noexcept
{
    static const char kDev[] = " /dev/infiniband/";
    if (memmem(line, len, kDev, sizeof kDev - 1) == nullptr)
        return true;
    char *end = nullptr;
    const uintptr_t start = strtoull(line, &end, 16);
    if (end == nullptr || *end != '-')
        return true;
    const uintptr_t stop = strtoull(end + 1, nullptr, 16);
    auto *f = static_cast<Found *>(arg);
    if (stop <= start || f->seen++ < f->skip)
        return true;
    if (f->n == kMaxRanges) {
        f->more = true;
        return false;
    }
    f->r[f->n++] = {start, stop};
    return true;
}

Found g_found;     // (not on the program's stack: 16 KiB)
std::mutex g_one;  // (two threads forking at once: one list)

}  // namespace

void note_made() noexcept { g_made.store(true, std::memory_order_release); }

Unmapping::Unmapping() noexcept { g_unmapping.lock_shared(); }
Unmapping::~Unmapping()
{
    g_unmapped.fetch_add(1, std::memory_order_release);
    g_unmapping.unlock_shared();
}

void before_fork() noexcept
{
    if (!g_made.exchange(false, std::memory_order_acq_rel) || !dl::loaded() || dl::program_has_it())
        return;
    const int saved = errno;
    std::lock_guard<std::mutex> serial(g_one);
    Found &found = g_found;
    found.skip = 0;
    int tries = 3;  // (passes read again when a queue went meanwhile)
    do {
        const uint64_t before = g_unmapped.load(std::memory_order_acquire);
        found.seen = found.n = 0;
        found.more = false;
        util::each_map(device_line, &found);
        std::unique_lock<std::shared_mutex> none_unmapping(g_unmapping);
        if (g_unmapped.load(std::memory_order_acquire) != before) {  // (a range may be gone)
            if (--tries > 0) {
                found.more = true;
                continue;
            }
            g_made.store(true, std::memory_order_relaxed);  // (at the next fork)
            break;
        }
        // (Refused for VM_IO mappings, doorbell pages: those stay.)
        for (size_t i = 0; i < found.n; ++i)
            madvise(reinterpret_cast<void *>(found.r[i].start), found.r[i].stop - found.r[i].start,
                    MADV_DONTFORK);
        found.skip += found.n;
    } while (found.more);
    errno = saved;
}

void after_fork_child() noexcept
{
    // (Another thread of the parent's may have held them: new ones, as the child's other locks.)
    new (&g_unmapping) std::shared_mutex();
    new (&g_one) std::mutex();
    g_made.store(false, std::memory_order_relaxed);
}

}  // namespace rdmasock::rdma::device_maps
