// Connection kits: the slow part of a connection's RDMA resources, made ahead of time.
//
// A kit is a protection domain, a completion channel and queue, a receive ring
// registered for remote write and a send staging ring registered for local access, all
// fresh and used by exactly one connection (its queue pair is created on the kit's PD
// when the connection is set up).  Registering a 4 MiB ring costs tens of ms under
// emulation (about a ms on hardware); with one kit kept in reserve per device and ring
// size, a connection set-up (client probe or server accept) does not pay it.  A kit
// taken is replaced by the progress thread in the background.
//
// Nothing of a kit is ever shared between connections or reused after one: a ring a
// peer has known is only ever freed (after the linger rules of docs/protocol.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include "base/reason.hh"
#include "rdma/owners.hh"

namespace rdmasock::kits {

// Ring memory: anonymous, 2 MiB aligned and marked for transparent huge pages when that
// large (registration then pins a few huge pages, not hundreds of small ones), never
// shared copy-on-write with a fork child.  nullptr on failure.
uint8_t *map_ring(size_t size) noexcept;

// A ring's memory and registration; owns both (move-only).
struct RingMem {
    uint8_t *mem = nullptr;
    size_t size = 0;
    std::shared_ptr<rdma::Mr> mr;
    RingMem() = default;
    RingMem(RingMem &&o) noexcept { *this = std::move(o); }
    RingMem &operator=(RingMem &&o) noexcept
    {
        if (this != &o) {
            release();
            mem = o.mem;
            size = o.size;
            mr = std::move(o.mr);
            o.mem = nullptr;
            o.size = 0;
        }
        return *this;
    }
    ~RingMem() { release(); }
    void release() noexcept;  // deregisters, then unmaps
};

struct Kit {
    ibv_context *ctx = nullptr;
    unsigned log2 = 0;
    std::shared_ptr<rdma::Pd> pd;
    std::shared_ptr<rdma::CompChannel> chan;  // nonblocking
    std::shared_ptr<rdma::Cq> cq;
    RingMem rx;  // remote write
    RingMem tx;  // local only, same size
};

// Completion channels for later kits of `ctx`, made now on the calling thread: a
// program's thread, in a call that sets up a connection.  A channel is a descriptor; made
// on the builder or the progress thread it would hold the lowest free number for a
// moment, the number the program's next socket or file is due to get.  At least 2 are
// kept, and each call adds two up to 8 (a burst of connections); a kit built when none
// is left makes its own.
void prepare_channels(const std::shared_ptr<rdma::Context> &ctx) noexcept;
// Build one now.  Reason::none, memlock or resource.
Reason build(const std::shared_ptr<rdma::Context> &ctx, unsigned log2, int cqe, Kit &out) noexcept;
// Take the reserve kit for (ctx, log2) if there is one.
bool take(ibv_context *ctx, unsigned log2, Kit &out) noexcept;
// A kit for a connection being set up: the reserve's; else the one the background
// builder is making for (ctx, log2), which is then raised to normal priority and waited
// for (under load a builder at low priority can take seconds; a second build here would
// compete with it); else one built here.  Then a refill is started.  Reason::none,
// memlock or resource.
Reason obtain(const std::shared_ptr<rdma::Context> &ctx, unsigned log2, int cqe, Kit &out) noexcept;
// Make sure a reserve kit exists for (ctx, log2): built now, on the calling thread.
void refill(const std::shared_ptr<rdma::Context> &ctx, unsigned log2, int cqe) noexcept;
// The same on a short-lived thread of its own (signals blocked, low priority), so
// neither the program nor the progress thread waits for it; at most one at a time.
void refill_async(const std::shared_ptr<rdma::Context> &ctx, unsigned log2, int cqe) noexcept;
// The device of `ctx` is being removed: its reserve kits and channels go now (a builder
// at work on it is waited for, up to 5 s), and none is kept for it afterwards (a device
// that later comes at the same address gets its kits built on the spot).
void forget(ibv_context *ctx) noexcept;
// In a fork child: the reserve belongs to the parent; forget it without freeing.
void after_fork_child() noexcept;

}  // namespace rdmasock::kits
