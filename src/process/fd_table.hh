// The fd table: kernel fd -> socket object (its slots: base/fd_slots.hh).
//
// Reads are lock-free and O(1): a two-level array of atomic pointers.  Socket objects
// live in type-stable memory (see socket_pool.hh): a block is never returned to the
// system, so a reader that races with close() and fd reuse can always dereference what
// it loaded; it then takes a reference only if the object is still alive and re-checks
// that the slot still holds it.  No lock and no allocation on the lookup path.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/fd_slots.hh"
#include "process/socket.hh"

namespace rdmasock::fdt {

// The object in fd's slot, without taking a reference (may be stale; never null
// memory).
inline Socket *peek(int fd) noexcept
{
    Slot *slot = slot_of(fd);
    return slot == nullptr ? nullptr : static_cast<Socket *>(slot->load(std::memory_order_acquire));
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
        auto *s = static_cast<Socket *>(slot.load(std::memory_order_acquire));
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
