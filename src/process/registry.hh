// Which process of a group serves a TCP connection: a table in memory shared by every
// process that inherits one listening socket (mapped at listen(), inherited by fork).
//
// A pre-fork server's master calls listen() and so holds the port's RDMA listener; its
// workers accept the connections.  A client's RDMA request for a connection therefore
// reaches the master, which does not have that connection: the worker that accepted it
// records it here (the connection's 4-tuple, its own process and the port of its own
// RDMA listener), and the master sends the request on to that port (a DECLINE that
// redirects, docs/protocol.md).
//
// Lock-free: the processes share nothing else (no lock may be left held by a process
// that dies).  A slot is claimed by one compare-and-swap on its state, written, then
// published; readers take only published slots that have not expired (a slot is never
// free again once used, so a lookup ends at the first free one).  Entries expire
// on their own (a worker that dies leaves nothing behind for long); a 64-bit hash of the
// 4-tuple names the connection (a collision only sends a request to a process that does
// not have the connection, which declines it: no connection is ever bound by it).
#pragma once

#include <atomic>
#include <cstdint>
#include <sys/types.h>

namespace rdmasock {

class Registry {
public:
    static constexpr unsigned kSlots = 8192;  // 256 KiB, touched as used
    static constexpr unsigned kProbe = 64;  // slots tried from a key's home slot

    struct Entry {
        pid_t pid = 0;
        uint16_t port = 0;  // the process's RDMA listener (RDMA port space)
    };

    // A new, empty table in shared anonymous memory; null when it cannot be mapped.
    static Registry *create() noexcept;
    // Unmaps this process's view (the other processes keep theirs).
    static void destroy(Registry *r) noexcept;

    // Records (or refreshes) `key` as served by `e` until `until_ms` (steady clock, ms).
    // False when the table is full around the key's home slot.
    bool put(uint64_t key, Entry e, int64_t until_ms, int64_t now_ms) noexcept;
    // The entry for `key` that has not expired, if any.
    bool find(uint64_t key, int64_t now_ms, Entry *out) const noexcept;
    // Forgets `key` as recorded by `pid` (the request went on to it, or it closed the
    // connection; another process's later entry for the key stays).
    void erase(uint64_t key, pid_t pid) noexcept;
    // The process that holds the port's RDMA listener (0: none recorded).
    pid_t holder() const noexcept { return holder_.load(std::memory_order_acquire); }
    void set_holder(pid_t p) noexcept { holder_.store(p, std::memory_order_release); }
    // Becomes the holder if the holder is still `was` (a process that took the port over
    // after the holder's exit).
    bool claim_holder(pid_t was, pid_t self) noexcept
    {
        return holder_.compare_exchange_strong(was, self, std::memory_order_acq_rel);
    }
    // Whether any process ever recorded a connection here (a single-process server's
    // table never is: its engine does not look).
    bool used() const noexcept { return used_.load(std::memory_order_relaxed) != 0; }

private:
    enum : uint32_t { kFree = 0, kWriting = 1, kReady = 2 };
    struct Slot {
        std::atomic<uint32_t> state;
        std::atomic<int32_t> pid;
        std::atomic<uint64_t> key;
        std::atomic<int64_t> until_ms;
        std::atomic<uint32_t> port;
    };
    std::atomic<uint32_t> used_;
    std::atomic<pid_t> holder_;
    Slot slots_[kSlots];
};

// A 64-bit name (FNV-1a) for the bytes of a connection's 4-tuple.
uint64_t registry_key(const void *data, unsigned len) noexcept;

}  // namespace rdmasock
