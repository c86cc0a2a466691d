// The switch of one connection from TCP to RDMA (docs/protocol.md): its phase and
// everything the negotiation counts and waits for on the TCP stream (bytes before the
// switch, the server's PROOF offset, the client's SWITCH offset and CONFIRM, the
// server's PREFIX), as a state machine whose transition function, on(), is the only
// writer of the phase.
//
//   maybe      undecided: bytes move on the TCP socket, counted (client: negotiating in
//              the background, its TCP bytes delivered up to the server's PROOF once
//              the PROOF_AT named it; server: accepted, no RDMA request bound yet)
//   verifying  server: RDMA connection accepted; TCP bytes are delivered up to the
//              offset the client's SWITCH names, where its CONFIRM must stand
//   rdma       both: bytes move through the rings
//   tcp        decided: plain TCP
//
// No verbs and no rings here; the TCP socket is only read or written for the PROOF and
// the CONFIRM.
// Thread safety: the connection's lock guards it; the atomics are also read without it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <sys/socket.h>

#include "base/reason.hh"
#include "wire/negotiate.hh"

namespace rdmasock {

class Switchover {
public:
    using Clock = std::chrono::steady_clock;
    enum class Phase : uint8_t { maybe, verifying, rdma, tcp };
    enum class Event : uint8_t {
        client_switch,    // maybe -> rdma: the client took the PROOF and posted its SWITCH
        server_verify,    // maybe -> verifying: an accepted RDMA request is bound to it
        server_unverify,  // verifying -> maybe: the RDMA side went before any SWITCH
        server_switch,    // verifying -> rdma: the CONFIRM was taken (or the client is
                          // committed and the connection can only be reset)
        decide_tcp,       // maybe, verifying -> tcp
    };

    Phase phase() const noexcept { return phase_.load(std::memory_order_acquire); }
    // The transition function: the only writer of the phase.  False, changing nothing,
    // for a transition the machine does not have.
    bool on(Event e) noexcept;

    // The process's count of deciding sockets (rt::g_pending: the wait primitives take
    // the mixed path while it is not zero): entered while maybe or verifying, left at
    // the switch, the decision for TCP or the close.
    void enter_pending() noexcept;
    void leave_pending() noexcept;
    // In a fork child: this copy's count is not the child's to give back.
    void forget_pending() noexcept { pending_counted_ = false; }

    const neg::Nonce &nonce() const noexcept { return nonce_; }
    void set_nonce(const neg::Nonce &n) noexcept { nonce_ = n; }

    // --- TCP bytes before the switch ---
    uint64_t tcp_sent() const noexcept { return tcp_sent_; }
    // The program shut the TCP socket down (shutdown(2) before the switch): what the
    // ring's end of the stream must say once the connection switches all the same.
    void note_tcp_shutdown(int how) noexcept
    {
        tcp_shut_rd_ = tcp_shut_rd_ || how != SHUT_WR;
        tcp_shut_wr_ = tcp_shut_wr_ || how != SHUT_RD;
    }
    bool tcp_shut_rd() const noexcept { return tcp_shut_rd_; }
    bool tcp_shut_wr() const noexcept { return tcp_shut_wr_; }
    uint64_t tcp_read() const noexcept { return tcp_read_; }
    uint64_t tcp_taken() const noexcept { return tcp_taken_; }  // every TCP byte the program took
    void sent_on_tcp(uint64_t n) noexcept { tcp_sent_ += n; }
    // The program took `n` bytes from the TCP socket: counted before the server's PREFIX
    // (client) or SWITCH (server), or out of the PREFIX once it is known.
    void took_from_tcp(uint64_t n) noexcept
    {
        tcp_taken_ += n;
        if (prefix_known_)
            prefix_left_ -= n;
        else
            tcp_read_ += n;
    }
    // How many TCP bytes may be delivered to the program now: all of them while maybe
    // (a client: up to the PROOF, once the PROOF_AT named its offset, until it is
    // taken); while verifying, up to the SWITCH's offset (none before it is known).
    uint64_t tcp_limit() const noexcept;

    // --- client: the server's PROOF (docs/protocol.md, version 3) ---
    // PROOF_AT(v) came: false when it cannot be (a second one, or behind what was read).
    bool accept_proof_at(uint32_t v) noexcept;
    bool proof_known() const noexcept { return proof_known_; }
    // The PROOF was seen in place (it may still have bytes before it to read).
    bool proof_verified() const noexcept { return proof_verified_; }
    bool proof_taken() const noexcept { return proof_taken_; }
    // Something else than the PROOF stood at its offset: no more looking for it.
    void end_proof() noexcept { proof_known_ = false; }
    // The PROOF is in the stream ahead, not taken out yet.
    bool proof_ahead() const noexcept { return proof_known_ && !proof_taken_; }
    // The PROOF is known to stand at the next TCP byte, and is not taken yet.
    bool at_proof_offset() const noexcept { return proof_ahead() && tcp_taken_ == proof_at_; }
    // `want` TCP bytes capped at the PROOF's offset while it is ahead.
    uint64_t proof_cap(uint64_t want) const noexcept
    {
        return proof_ahead() && want > proof_at_ - tcp_taken_ ? proof_at_ - tcp_taken_ : want;
    }
    // How many of `queued` TCP bytes are the program's (the PROOF's are not).
    uint64_t without_proof(uint64_t queued) const noexcept;
    // Look for the PROOF: in place, once the bytes queued on the socket reach it (a
    // connection whose program has not read that far may switch all the same), or at
    // the next byte, where it is taken out of the stream.  1 seen (taken when at the
    // next byte), 0 not (all) there yet, -2 something else stands there, -1 the stream
    // ended or failed at the PROOF's offset.
    int look_for_proof(int fd) noexcept;
    // The PROOF_AT came this long ago and its PROOF is not seen yet, with bytes of the
    // program's before it (they may have to be read for it to come).
    bool proof_behind_bytes(Clock::time_point now, Clock::duration d) const noexcept
    {
        return proof_ahead() && !proof_verified_ && proof_at_ > tcp_taken_ && now - proof_came_ > d;
    }
    // TCP bytes of the stream that are no byte of the program's: the PROOF a client took
    // out, the PROOF a server wrote (the kernel's counters include them).
    bool proof_written() const noexcept { return frame_ == Frame::proof && frame_done_ == neg::kProofSize; }
    uint64_t proof_bytes() const noexcept
    {
        return proof_taken_ ? neg::kProofSize : frame_ == Frame::proof ? frame_done_ : 0;
    }
    // The ACCEPT was valid: the client switches once it has the PROOF, if before `t`.
    void set_established(Clock::time_point switch_by) noexcept
    {
        established_ = true;
        switch_by_ = switch_by;
    }
    bool established() const noexcept { return established_; }
    bool switch_too_late(Clock::time_point now) const noexcept { return now > switch_by_; }
    // The connection was decided for TCP (`why`) while the PROOF it was told of is not
    // taken yet: it stays undecided until the PROOF is out of the stream.
    void defer_tcp(Reason why) noexcept { deferred_tcp_ = why; }
    Reason deferred_tcp() const noexcept { return deferred_tcp_; }

    // --- client: the server's PREFIX (its TCP bytes before its switch) ---
    // Every byte the PREFIX announced has been read (then the ring's bytes follow; a
    // PROOF still in the TCP stream is not the program's).
    bool prefix_done() const noexcept { return prefix_known_ && prefix_left_ == 0; }
    bool prefix_known() const noexcept { return prefix_known_; }
    uint64_t prefix_left() const noexcept { return prefix_left_; }
    // `want` capped at what the PREFIX still announces, once known.
    uint64_t prefix_cap(uint64_t want) const noexcept
    {
        return prefix_known_ && want > prefix_left_ ? prefix_left_ : want;
    }
    // PREFIX(v) came: false when it cannot be (a second one, or behind what was read).
    bool accept_prefix(uint32_t v) noexcept;

    // --- a frame written into the TCP stream once a signalled message completed: the
    // server's PROOF behind its PROOF_AT, the client's CONFIRM behind its SWITCH ---
    enum class Frame : uint8_t { proof, confirm };
    // The message was posted as work request `wr`: the frame follows once it completed.
    void start_frame(Frame f, uint64_t wr, Clock::time_point wait_until) noexcept
    {
        frame_ = f;
        frame_wr_ = wr;
        frame_done_ = 0;
        frame_wait_until_ = wait_until;
        frame_pending_.store(true);
    }
    bool frame_pending() const noexcept { return frame_pending_.load(std::memory_order_relaxed); }
    // Some of the frame is in the stream already: nothing else may go before the rest.
    bool frame_started() const noexcept { return frame_done_ > 0; }
    bool frame_wait_over(Clock::time_point now) const noexcept { return now > frame_wait_until_; }
    void end_frame() noexcept { frame_pending_.store(false); }
    bool frame_due(uint64_t completed) const noexcept { return completed >= frame_wr_; }
    // Write (the rest of) the frame into the TCP stream: 1 whole, 0 the send buffer is
    // full (write the rest when it drains), -1 failed.
    int write_frame(int fd) noexcept;
    // Whether the progress thread watches the TCP socket's POLLOUT for the frame.
    bool frame_out_watched() const noexcept { return frame_out_watch_; }
    void set_frame_out_watch(bool on) noexcept { frame_out_watch_ = on; }

    // --- server: the client's SWITCH and CONFIRM ---
    // Bound to an accepted request: from now on no TCP byte goes beyond what the SWITCH
    // will name, until switch_window() passes without it.
    void start_verify(const neg::Nonce &n, Clock::time_point gate_deadline) noexcept;
    bool switch_known() const noexcept { return switch_known_; }
    // SWITCH(v) came: false when it cannot be (not verifying, a second one, or behind
    // what was delivered).
    bool accept_switch(uint32_t v) noexcept;
    // The TCP bytes delivered stand at the SWITCH's offset (where the CONFIRM is), or
    // some are still to deliver before it.
    bool at_switch_offset() const noexcept { return switch_known_ && tcp_read_ == switch_at_; }
    bool before_switch_offset() const noexcept { return switch_known_ && tcp_read_ < switch_at_; }
    bool gate_expired(Clock::time_point now) const noexcept { return now > gate_deadline_; }
    Clock::time_point gate_deadline() const noexcept { return gate_deadline_; }
    // The wait for the SWITCH timed out and stopped the queue pair, and a SWITCH was
    // found after all.
    void note_qp_stopped() noexcept { qp_stopped_ = true; }
    bool qp_stopped() const noexcept { return qp_stopped_; }
    // Look for the CONFIRM at the SWITCH's offset: 1 taken out of the stream, 0 not
    // (all) there yet, -2 something else stands there, -1 the stream ended or failed.
    int take_confirm(int fd) noexcept;
    // Whether the progress thread takes the SWITCH in as it arrives (while verifying).
    bool verify_watched() const noexcept { return verify_watch_.load(); }
    // Stop that; true when it was on.
    bool stop_verify_watch() noexcept { return verify_watch_.exchange(false); }

    // --- server: before any RDMA request ---
    // A connection still maybe at this time is plain TCP.
    void set_maybe_deadline(Clock::time_point t) noexcept { maybe_deadline_ = t; }
    bool maybe_expired(Clock::time_point now) const noexcept
    {
        return maybe_deadline_.time_since_epoch().count() != 0 && now > maybe_deadline_;
    }
    // This process declined the client's request for `why` (memlock, resources).
    void set_declined(Reason why) noexcept { declined_.store(why, std::memory_order_relaxed); }
    // A client's RDMA request for this socket came (whatever became of it: the client
    // does run rdmasock).
    void note_asked() noexcept { asked_.store(true, std::memory_order_relaxed); }
    // Why a socket no RDMA request bound is on TCP: what this process declined, else
    // timeout for one whose request came to nothing (the client gave up waiting before
    // the switch: its id went before the accept, or before its SWITCH), else
    // peer_no_rdmasock.
    Reason undecided_reason() const noexcept
    {
        const Reason d = declined_.load(std::memory_order_relaxed);
        return d != Reason::none                         ? d
               : asked_.load(std::memory_order_relaxed) ? Reason::timeout
                                                         : Reason::peer_no_rdmasock;
    }
    // The program reads or waits for input (a parked request may now be accepted):
    // true the first time.
    bool note_interest() noexcept { return !interested_.exchange(true, std::memory_order_acq_rel); }
    bool interested() const noexcept { return interested_.load(std::memory_order_acquire); }

private:
    std::atomic<Phase> phase_{Phase::maybe};
    bool pending_counted_ = false;
    neg::Nonce nonce_{};
    uint64_t tcp_sent_ = 0;      // bytes sent on TCP before the switch
    uint64_t tcp_read_ = 0;      // TCP bytes read before the peer's PREFIX / SWITCH
    uint64_t tcp_taken_ = 0;     // TCP bytes read, all
    bool tcp_shut_rd_ = false;   // shutdown(2) before the switch
    bool tcp_shut_wr_ = false;
    bool prefix_known_ = false;  // client: PREFIX received
    uint64_t prefix_left_ = 0;   // client: TCP bytes still to read before the ring
    bool proof_known_ = false;   // client: PROOF_AT received (its PROOF still looked for)
    bool proof_at_seen_ = false; // client: a PROOF_AT came (only one may)
    bool proof_verified_ = false;  // client: the PROOF was seen in place
    bool proof_taken_ = false;   // client: the PROOF was taken out of the stream
    uint64_t proof_at_ = 0;
    Clock::time_point proof_came_{};
    static constexpr uint64_t kMaxLookahead = uint64_t{64} << 20;  // (beyond any socket buffer)
    bool established_ = false;   // client: the ACCEPT was valid
    Clock::time_point switch_by_{};
    Reason deferred_tcp_ = Reason::none;
    Frame frame_ = Frame::confirm;
    uint64_t frame_wr_ = 0;      // the PROOF_AT's / SWITCH's work request
    std::atomic<bool> frame_pending_{false};  // the frame is still to write
    unsigned frame_done_ = 0;
    bool frame_out_watch_ = false;
    Clock::time_point frame_wait_until_{};
    bool switch_known_ = false;  // server: the client's SWITCH came
    bool qp_stopped_ = false;
    uint64_t switch_at_ = 0;
    Clock::time_point gate_deadline_{};  // server, verifying: give up without a SWITCH
    Clock::time_point maybe_deadline_{};
    std::atomic<bool> verify_watch_{false};
    std::atomic<Reason> declined_{Reason::none};
    std::atomic<bool> asked_{false};
    std::atomic<bool> interested_{false};
};

}  // namespace rdmasock
