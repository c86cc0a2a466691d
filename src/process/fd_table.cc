#include "process/fd_table.hh"

#include <sys/mman.h>

namespace rdmasock::fdt {

namespace {

// Chunks are mmap'd (async-signal-safe, no malloc) and never freed, so a racing
// reader never sees freed memory.
Slot *chunk_for(unsigned u, bool create) noexcept
{
    std::atomic<Slot *> &top = g_top[u >> kChunkBits];
    Slot *chunk = top.load(std::memory_order_acquire);
    if (chunk != nullptr || !create)
        return chunk;
    void *mem = mmap(nullptr, sizeof(Slot) * kChunkSize, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return nullptr;
    Slot *fresh = static_cast<Slot *>(mem);  // zero-filled == all slots null
    Slot *expected = nullptr;
    if (top.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel))
        return fresh;
    munmap(mem, sizeof(Slot) * kChunkSize);
    return expected;
}

}  // namespace

SocketRef install(int fd, const SocketRef &s, bool *ok) noexcept
{
    unsigned u = static_cast<unsigned>(fd);
    Slot *chunk = u < kMaxFd ? chunk_for(u, true) : nullptr;
    if (ok)
        *ok = chunk != nullptr;
    if (chunk == nullptr)
        return {};
    Socket *p = s.get();
    if (p)
        p->acquire();
    Entry *old = chunk[u & (kChunkSize - 1)].exchange(p, std::memory_order_acq_rel);
    return SocketRef::adopt(static_cast<Socket *>(old));
}

SocketRef remove(int fd) noexcept
{
    unsigned u = static_cast<unsigned>(fd);
    if (u >= kMaxFd)
        return {};
    Slot *chunk = chunk_for(u, false);
    if (chunk == nullptr)
        return {};
    Entry *old = chunk[u & (kChunkSize - 1)].exchange(nullptr, std::memory_order_acq_rel);
    return SocketRef::adopt(static_cast<Socket *>(old));
}

unsigned count() noexcept
{
    unsigned n = 0;
    for (unsigned t = 0; t < kTopSize; ++t) {
        Slot *chunk = g_top[t].load(std::memory_order_acquire);
        if (!chunk)
            continue;
        for (unsigned i = 0; i < kChunkSize; ++i)
            n += chunk[i].load(std::memory_order_relaxed) != nullptr;
    }
    return n;
}

}  // namespace rdmasock::fdt
