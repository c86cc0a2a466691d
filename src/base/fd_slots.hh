// The fd table's slots: kernel fd -> the object the engine keeps for one TCP socket.
//
// Defined in the preload shim (src/base/shared.hh), so that the shim's data-path
// wrappers ask the one question of the pass-through path, "is this fd an offloaded
// socket?", themselves: a load, a test and a tail call to the real function, with no
// call into the engine.  The engine fills the slots (process/fd_table.hh), with objects
// whose first base is an Entry (process/socket.hh).
//
// Reads are lock-free and O(1): a two-level array of atomic pointers; chunks are never
// freed and socket objects live in type-stable memory, so a stale pointer still points
// at an Entry.
#pragma once

#include <atomic>

#include "base/shared.hh"

namespace rdmasock::fdt {

// What the pass-through path reads of a socket object.
class Entry {
public:
    // Calls on this socket need the engine (a connection is negotiated or offloaded).
    bool offloaded() const noexcept { return offloaded_.load(std::memory_order_relaxed); }
    void set_offloaded(bool on) noexcept { offloaded_.store(on, std::memory_order_release); }

protected:
    Entry() = default;
    ~Entry() = default;
    void clear_offloaded() noexcept { offloaded_.store(false, std::memory_order_relaxed); }

private:
    std::atomic<bool> offloaded_{false};
};

constexpr unsigned kChunkBits = 10;
constexpr unsigned kChunkSize = 1u << kChunkBits;
constexpr unsigned kTopSize = 1u << 14;
constexpr unsigned kMaxFd = kChunkSize * kTopSize;  // fds >= this are never tracked

using Slot = std::atomic<Entry *>;
extern RS_SHARED std::atomic<Slot *> g_top[kTopSize];

// fd's slot, or null when no slot was ever made for it.
inline Slot *slot_of(int fd) noexcept
{
    unsigned u = static_cast<unsigned>(fd);
    if (__builtin_expect(u >= kMaxFd, 0))
        return nullptr;
    Slot *chunk = g_top[u >> kChunkBits].load(std::memory_order_acquire);
    return chunk == nullptr ? nullptr : &chunk[u & (kChunkSize - 1)];
}

// True when fd is an offloaded socket: the only question the data-path wrappers ask.
inline bool offloaded(int fd) noexcept
{
    Slot *slot = slot_of(fd);
    if (slot == nullptr)
        return false;
    Entry *e = slot->load(std::memory_order_acquire);
    return e != nullptr && __builtin_expect(e->offloaded(), 0);
}

}  // namespace rdmasock::fdt
