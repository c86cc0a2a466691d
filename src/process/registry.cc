#include "process/registry.hh"

#include <new>
#include <sys/mman.h>

namespace rdmasock {

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free,
              "the table is shared between processes: its atomics must be lock-free");

Registry *Registry::create() noexcept
{
    void *p = mmap(nullptr, sizeof(Registry), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return nullptr;
    return new (p) Registry();  // zero pages: every slot free
}

void Registry::destroy(Registry *r) noexcept
{
    if (r != nullptr)
        munmap(r, sizeof(Registry));
}

bool Registry::put(uint64_t key, Entry e, int64_t until_ms, int64_t now_ms) noexcept
{
    const unsigned home = static_cast<unsigned>(key % kSlots);
    for (unsigned i = 0; i < kProbe; ++i) {
        Slot &s = slots_[(home + i) % kSlots];
        uint32_t st = s.state.load(std::memory_order_acquire);
        // A slot of ours for this key, a free one, or an expired one.
        bool take = st == kFree;
        if (st == kReady) {
            const bool same = s.key.load(std::memory_order_relaxed) == key;
            const bool expired = s.until_ms.load(std::memory_order_relaxed) <= now_ms;
            take = same || expired;
        }
        if (!take || !s.state.compare_exchange_strong(st, kWriting, std::memory_order_acq_rel))
            continue;
        s.key.store(key, std::memory_order_relaxed);
        s.pid.store(e.pid, std::memory_order_relaxed);
        s.port.store(e.port, std::memory_order_relaxed);
        s.until_ms.store(until_ms, std::memory_order_relaxed);
        s.state.store(kReady, std::memory_order_release);
        if (used_.load(std::memory_order_relaxed) == 0)
            used_.store(1, std::memory_order_relaxed);
        return true;
    }
    return false;
}

bool Registry::find(uint64_t key, int64_t now_ms, Entry *out) const noexcept
{
    const unsigned home = static_cast<unsigned>(key % kSlots);
    for (unsigned i = 0; i < kProbe; ++i) {
        const Slot &s = slots_[(home + i) % kSlots];
        const uint32_t st = s.state.load(std::memory_order_acquire);
        if (st == kFree)
            return false;  // (a put would have taken this one before any later slot)
        if (st != kReady || s.key.load(std::memory_order_relaxed) != key)
            continue;
        Entry e;
        e.pid = s.pid.load(std::memory_order_relaxed);
        e.port = static_cast<uint16_t>(s.port.load(std::memory_order_relaxed));
        const int64_t until = s.until_ms.load(std::memory_order_relaxed);
        // Still the same publication (not rewritten meanwhile) and not expired.
        std::atomic_thread_fence(std::memory_order_acquire);
        if (s.state.load(std::memory_order_acquire) != kReady || s.key.load(std::memory_order_relaxed) != key ||
            until <= now_ms)
            continue;
        *out = e;
        return true;
    }
    return false;
}

void Registry::erase(uint64_t key, pid_t pid) noexcept
{
    const unsigned home = static_cast<unsigned>(key % kSlots);
    for (unsigned i = 0; i < kProbe; ++i) {
        Slot &s = slots_[(home + i) % kSlots];
        uint32_t st = kReady;
        if (s.key.load(std::memory_order_relaxed) == key &&
            s.state.compare_exchange_strong(st, kWriting, std::memory_order_acq_rel)) {
            if (s.key.load(std::memory_order_relaxed) == key && s.pid.load(std::memory_order_relaxed) == pid)
                s.until_ms.store(0, std::memory_order_relaxed);
            s.state.store(kReady, std::memory_order_release);  // expired: free for the next put
        }
    }
}

uint64_t registry_key(const void *data, unsigned len) noexcept
{
    uint64_t h = 14695981039346656037ull;
    const auto *p = static_cast<const unsigned char *>(data);
    for (unsigned i = 0; i < len; ++i) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h == 0 ? 1 : h;
}

}  // namespace rdmasock
