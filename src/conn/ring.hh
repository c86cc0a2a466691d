// The ring data path of one connection: its receive ring (the peer writes into it) and
// its send staging ring (we write from it into the peer's), the byte cursors of both,
// credits, and the end of the stream (FIN, RESET, failure, shutdowns).  It knows nothing
// of TCP, phases or eventfds: what a receive completion's immediate carries is taken in
// here (data, credit, FIN, RESET) or handed back as a value (PREFIX and SWITCH are the
// switchover's; a bad value is a fault for the connection to act on).
//
// Thread safety: the connection's lock guards it (peer_fin is also read without it).
#pragma once

#include <atomic>
#include <cstdint>
#include <sys/socket.h>
#include <sys/types.h>

#include "base/reason.hh"
#include "conn/link.hh"
#include "rdma/kit.hh"
#include "wire/negotiate.hh"

namespace rdmasock {

class RingPath {
public:
    // Coalescing (like the kernel's TCP autocorking): a write smaller than this is only
    // staged, not posted, while a signalled work request (one in Link::kSignalEvery) is
    // in flight, so a completion is sure to come; the staged bytes go out as one message
    // at that completion, before any wait, FIN or close, or as soon as this many bytes
    // are staged.  Signalling stays selective: a ping-pong pays no completion per
    // message, and rarely has a signalled request in flight.
    static constexpr uint64_t kCoalesceBelow = 16384;

    // What one receive completion carried, for the connection.
    struct Found {
        enum class Kind : uint8_t { data, credit, fin, reset, prefix, prefix_end, switch_at, proof_at, fault } kind;
        uint32_t value;     // prefix(_end), switch_at, proof_at: the peer's count of TCP bytes
        const char *fault;  // fault: why the connection must be reset
    };

    // The end of the stream.
    struct Status {
        std::atomic<bool> peer_fin{false};
        // The peer close()d (FIN with value 1): it reads nothing more.  Later writes go to
        // the TCP socket, so the peer's kernel answers them with an RST and this side
        // sees what the kernel's own TCP shows (EPIPE, SIGPIPE, POLLERR|POLLHUP).
        bool peer_closed = false;
        bool reset = false;           // reset by the peer (ECONNRESET once, then EPIPE)
        bool reset_reported = false;
        bool failed = false;          // local failure (QP error)
        bool fin_sent = false;
        bool shut_rd = false;
        bool shut_wr = false;
        bool broken() const noexcept { return reset || failed; }
    };
    Status st;

    explicit RingPath(Link &link) noexcept : link_(link) {}

    // The kit's rings: the receive ring, and a staging ring of the same size kept until
    // the peer's ring size is known.
    void attach(kits::RingMem &&rx, kits::RingMem &&spare_tx) noexcept
    {
        rx_ = std::move(rx);
        spare_tx_ = std::move(spare_tx);
    }
    neg::RingInfo local_ring() const noexcept;
    // The peer's ring: the staging ring gets its size (registered on `link`'s domain).
    Reason set_peer_ring(const neg::RingInfo &r) noexcept;
    void release() noexcept
    {
        rx_.release();
        tx_.release();
    }
    // The device is being removed: the registrations go (frozen: nothing is posted any
    // more), the memory stays for what a fallback still reads from it (the residue, the
    // resend).
    void deregister() noexcept
    {
        frozen_ = true;
        rx_.mr.reset();
        tx_.mr.reset();
        spare_tx_.release();
    }

    // A receive completion's immediate.
    Found take_imm(uint32_t imm) noexcept;

    // --- receive ---
    uint64_t avail() const noexcept { return rx_prod_ - rx_cons_; }
    // Up to `room` bytes from the receive ring into `msg`'s iovecs at offset `at`
    // (consumed and credited unless `peek`); returns how many.
    size_t take(msghdr *msg, size_t at, size_t room, bool peek) noexcept;

    // --- send ---
    uint64_t space() const noexcept { return tx_.size - (tx_prod_ - tx_acked_); }
    bool can_send() const noexcept { return space() > 0 && link_.send_room(); }
    uint64_t unacked() const noexcept { return tx_prod_ - tx_acked_; }
    bool holding() const noexcept { return tx_posted_ != tx_prod_; }
    // Stage `n` bytes of `msg` (from `skip`) and post them, or only stage them when
    // `hold` (coalescing; flush() posts them later).  n or -EPIPE.
    ssize_t send(const msghdr *msg, size_t skip, size_t n, bool hold) noexcept;
    // Post the staged bytes not yet posted as one message.  0 or -EPIPE.
    int flush() noexcept;
    // A control message (credit, FIN, RESET, PREFIX, SWITCH): a zero-length WRITE WITH
    // IMM.  0 or -errno.
    int post_ctrl(neg::Imm t, uint32_t v) noexcept;

    // --- fallback to TCP (conn/fallback.hh) ---
    // From now on nothing is posted (flush and control messages fail) and no credit is
    // sent; the cursors stay as they are.
    void freeze() noexcept { frozen_ = true; }
    bool frozen() const noexcept { return frozen_; }
    uint64_t consumed() const noexcept { return rx_cons_; }
    // The bytes received and not read go unread (the peer resends them over TCP).
    void drop_residue() noexcept { rx_cons_ = rx_prod_; }
    uint64_t acked() const noexcept { return tx_acked_; }
    uint64_t posted() const noexcept { return tx_posted_; }
    uint64_t produced() const noexcept { return tx_prod_; }
    uint64_t rx_size() const noexcept { return rx_.size; }
    // The staging ring (the bytes from acked() to produced() are there).
    const uint8_t *staging() const noexcept { return tx_.mem; }
    uint64_t staging_size() const noexcept { return tx_.size; }

    // Sends that moved data, and the data messages they went out in (statistics).
    uint64_t writes() const noexcept { return writes_; }
    uint64_t data_msgs() const noexcept { return data_msgs_; }

private:
    int post(uint64_t off, const void *src, uint32_t len, uint32_t lkey, bool with_imm, uint32_t imm,
             bool inline_data) noexcept;
    void maybe_credit() noexcept;

    Link &link_;
    kits::RingMem rx_;
    kits::RingMem tx_;
    kits::RingMem spare_tx_;  // the kit's staging ring, until the peer's ring size is known
    neg::RingInfo peer_ring_{};
    uint64_t rx_prod_ = 0;      // bytes the peer has placed in our ring
    uint64_t rx_cons_ = 0;      // bytes the program has read
    uint64_t rx_credited_ = 0;  // rx_cons_ as last reported to the peer
    uint64_t tx_prod_ = 0;      // bytes staged for the peer's ring (accepted from the program)
    uint64_t tx_posted_ = 0;    // bytes posted to the peer's ring (tx_acked_ <= this <= tx_prod_)
    uint64_t tx_acked_ = 0;     // bytes the peer has consumed (credited)
    uint64_t writes_ = 0;       // send calls that moved data (statistics)
    uint64_t data_msgs_ = 0;    // DATA messages posted: fewer than writes_ when coalescing
    bool frozen_ = false;
};

}  // namespace rdmasock
