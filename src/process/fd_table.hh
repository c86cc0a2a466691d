// The fd table: kernel fd -> socket object.
//
// Reads are lock-free and O(1): a two-level array of atomic pointers.  Socket objects
// live in type-stable memory (see socket_pool.hh): a block is never returned to the
// system, so a reader that races with close() and fd reuse can always dereference what
// it loaded; it then takes a reference only if the object is still alive and re-checks
// that the slot still holds it.  No lock and no allocation on the lookup path.
#pragma once

#include <atomic>
#include <cstdint>

#include "process/socket.hh"

namespace rdmasock::fdt {

constexpr unsigned kChunkBits = 10;
constexpr unsigned kChunkSize = 1u << kChunkBits;
constexpr unsigned kTopSize = 1u << 14;
constexpr unsigned kMaxFd = kChunkSize * kTopSize;  // fds >= this are never tracked

using Slot = std::atomic<Socket *>;
extern std::atomic<Slot *> g_top[kTopSize];

// fd's slot, or null when no slot was ever made for it.
inline Slot *slot_of(int fd) noexcept
{
    unsigned u = static_cast<unsigned>(fd);
    if (__builtin_expect(u >= kMaxFd, 0))
        return nullptr;
    Slot *chunk = g_top[u >> kChunkBits].load(std::memory_order_acquire);
    return chunk == nullptr ? nullptr : &chunk[u & (kChunkSize - 1)];
}

// The object in fd's slot, without taking a reference (may be stale; never null
// memory).  The pass-through fast path uses only this.
inline Socket *peek(int fd) noexcept
{
    Slot *slot = slot_of(fd);
    return slot == nullptr ? nullptr : slot->load(std::memory_order_acquire);
}

// True when fd is an offloaded socket: the only question the data-path wrappers ask.
inline bool offloaded(int fd) noexcept
{
    Socket *s = peek(fd);
    return s != nullptr && __builtin_expect(s->offloaded(), 0);
}

// A counted reference to fd's socket, or null.  (Inline: every call of the program on
// an offloaded socket starts here.)
inline SocketRef get(int fd) noexcept
{
    Slot *slot_p = slot_of(fd);
    if (slot_p == nullptr)
        return {};
    Slot &slot = *slot_p;
    for (;;) {
        Socket *s = slot.load(std::memory_order_acquire);
        if (s == nullptr)
            return {};
        if (!s->try_acquire())
            continue;  // being torn down: the slot must have changed; reload
        if (__builtin_expect(slot.load(std::memory_order_acquire) == s, 1))
            return SocketRef::adopt(s);
        s->release();  // the fd was closed (and maybe reused) meanwhile
    }
}

// Put `s` in fd's slot (taking a new reference); returns the previous occupant, if any.
// Returns false in `ok` when fd is out of range or the chunk could not be allocated.
SocketRef install(int fd, const SocketRef &s, bool *ok = nullptr) noexcept;

// Empty fd's slot and hand back the reference the table held.
SocketRef remove(int fd) noexcept;

// Number of occupied slots (for tests and stats; O(table)).
unsigned count() noexcept;

// Visit every occupied slot (stats; not on any hot path).
template <class F> void for_each(F &&f)
{
    for (unsigned t = 0; t < kTopSize; ++t) {
        Slot *chunk = g_top[t].load(std::memory_order_acquire);
        if (!chunk)
            continue;
        for (unsigned i = 0; i < kChunkSize; ++i) {
            int fd = static_cast<int>(t * kChunkSize + i);
            if (chunk[i].load(std::memory_order_acquire) == nullptr)
                continue;
            SocketRef r = get(fd);
            if (r)
                f(fd, r);
        }
    }
}

}  // namespace rdmasock::fdt
