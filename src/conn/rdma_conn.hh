// One offload-candidate TCP connection and, once negotiated, its RDMA data path
// (docs/protocol.md).  A Conn is the Transport of its socket through every phase:
//
//   maybe      undecided: bytes move on the TCP socket, counted, through the hooked
//              path (client: negotiating in the background; server: accepted, no RDMA
//              request bound yet)
//   verifying  server: RDMA connection accepted; TCP bytes are delivered up to the
//              offset the client's SWITCH names, where its CONFIRM must stand
//   rdma       both: bytes move through the rings
//   tcp        decided: plain TCP (the socket is an ordinary fast-path fd again)
//
// Thread safety: one mutex per connection guards all state; the progress thread and
// application threads take it.  Blocking waits happen outside it, on the shadow eventfds.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "base/reason.hh"
#include "conn/shadows.hh"
#include "conn/upcalls.hh"
#include "process/transport.hh"
#include "rdma/kit.hh"
#include "rdma/owners.hh"
#include "wire/negotiate.hh"

namespace rdmasock {

class Socket;

class Conn final : public Transport {
public:
    enum class Side : uint8_t { client, server };
    enum class Phase : uint8_t { maybe, verifying, rdma, tcp };

    Conn(Side side, int tcp_fd, Upcalls &up) noexcept;
    ~Conn();

    // --- setup (negotiation code) ------------------------------------------------------
    // Create PD, CQ with channel, QP on `id`, the receive ring.  Returns Reason::none or
    // why not (memlock, resource).
    Reason create_resources(std::shared_ptr<rdma::CmId> id, unsigned ring_log2) noexcept;
    neg::RingInfo local_ring() const noexcept;
    // The peer's ring: allocates and registers the send staging ring of the same size.
    Reason set_peer_ring(const neg::RingInfo &r) noexcept;
    // Post receives and arm the CQ (before the connection is accepted/established).
    Reason post_initial_receives() noexcept;
    const neg::Nonce &nonce() const noexcept { return nonce_; }
    void set_nonce(const neg::Nonce &n) noexcept { nonce_ = n; }
    rdma::CmId *cm_id() const noexcept { return id_.get(); }
    std::shared_ptr<rdma::CmId> cm_id_ref() const noexcept { return id_; }

    // Client: the RDMA connection is established and the peer's ring set.  Posts
    // SWITCH(TCP bytes sent so far) and goes to rdma; the CONFIRM follows on the TCP
    // stream once the SWITCH has completed.  Returns Reason::none, or why not (the
    // connection was decided or closed meanwhile: not_connected; too many TCP bytes:
    // limit), in which case nothing was posted.
    Reason client_established() noexcept;
    // Client: the negotiation ended without RDMA (the socket stays on TCP with `why`).
    void client_failed(Reason why) noexcept;
    // Client, the negotiation over without RDMA: the queue pair goes, and the rdma_cm id
    // is handed back (to be destroyed once its events are acknowledged): a server that
    // accepts the request late finds no one there.
    std::shared_ptr<rdma::CmId> release_client_rdma() noexcept;
    // Client, before fork(): a negotiation still running is given up (the child would
    // write to the TCP socket behind our count).
    void before_fork() noexcept override;
    // Server: bind the accepted RDMA request (nonce) to this connection, before
    // rdma_accept.  False when the connection was decided meanwhile.
    bool begin_verify(const neg::Nonce &n) noexcept;
    // Server: this process declined the client's RDMA request for `why` (memlock,
    // resources): the socket, once decided TCP, reports that rather than
    // peer_no_rdmasock.
    // The client runs rdmasock and will stay on TCP: the socket is decided at once.
    void note_declined(Reason why) noexcept;
    // Server: an RDMA request came for this socket after it had stopped waiting for one
    // and gone to TCP: its reason is timeout, not peer_no_rdmasock.
    void note_late_request() noexcept;
    // Server: why a socket no RDMA request bound is on TCP (the reason this process
    // declined one with, else no rdmasock on the client).
    Reason undecided_reason() const noexcept
    {
        const Reason d = declined_.load(std::memory_order_relaxed);
        return d != Reason::none ? d : Reason::peer_no_rdmasock;
    }
    // Server: the RDMA connection for this socket is established.
    void server_established() noexcept;
    // The RDMA side is gone before the switch (reject, disconnect, error): tcp.
    void abandon_rdma() noexcept;

    Phase phase() const noexcept { return phase_.load(std::memory_order_acquire); }
    // The connection behind a socket's transport (nullptr: kernel TCP).  The one place
    // that turns a Transport into a Conn: every Transport the engine gives a socket is one.
    static Conn *of(Transport *t) noexcept
    {
        return t != nullptr && t->is_rdma() ? static_cast<Conn *>(t) : nullptr;
    }
    // The Conn an rdma_cm id's context names (the engine sets it to the Conn).
    static Conn *of_cm_context(void *context) noexcept { return static_cast<Conn *>(context); }
    Side side() const noexcept { return side_; }
    int tcp_fd() const noexcept { return tcp_fd_; }
    void set_socket(Socket *s) noexcept { sock_ = s; }
    // Deadline for a server socket in phase maybe to see an RDMA request.
    void set_maybe_deadline(std::chrono::steady_clock::time_point t) noexcept { maybe_deadline_ = t; }

    // --- Transport ----------------------------------------------------------------------
    const char *name() const noexcept override { return "rdma"; }
    const char *phase_name() const noexcept override;
    bool on_rdma() const noexcept override { return phase() == Phase::rdma; }
    int kernel_fd() const noexcept override { return tcp_fd_; }
    ssize_t recvmsg(int fd, msghdr *msg, int flags) noexcept override;
    ssize_t sendmsg(int fd, const msghdr *msg, int flags) noexcept override;
    int shutdown(int fd, int how) noexcept override;
    // MSG_OOB: all but the last byte as ordinary data, the last on the TCP socket.
    ssize_t send_urgent(int fd, const msghdr *msg, size_t total, int flags) noexcept;
    unsigned poll_mask(int fd) noexcept override;
    Counters counters(int fd) noexcept override;
    void destroy() noexcept override;

    // Server: the program reads or waits for input on this connection (first time:
    // Upcalls::interest()).
    void note_interest() noexcept
    {
        if (side_ == Side::server && !interested_.exchange(true, std::memory_order_acq_rel))
            up_.interest(*this);
    }
    bool interested() const noexcept { return interested_.load(std::memory_order_acquire); }

    // A server socket that is deciding (maybe/verifying) counts in rt::g_pending, so the
    // wait primitives take the mixed path for it.
    void enter_pending() noexcept;

    // The program closed the TCP fd: its number may be reused, never touch it again.
    void mark_closed() noexcept;
    // close() while other threads of the program are in calls on this connection: when
    // it is on RDMA, it goes on through `keep` (a duplicate of the TCP socket the library
    // owns) and true is returned; the program's number may then be reused.
    bool continue_on(int keep) noexcept override;
    // The program closed number `from` (tcp_fd()) but still holds the socket as `to`.
    void renumber(int from, int to) noexcept override;
    // Before the close: a server socket still in maybe records its final reason (no
    // RDMA request came for it, or this process declined one).
    void note_closing() noexcept;

    // poll/select on a socket still deciding: -1 it is on RDMA now (start over with its
    // eventfds), 1 its TCP bytes are held back (not readable, whatever the TCP socket
    // says), 0 the TCP socket's readiness is the socket's.
    int presw_gated() noexcept;

    // SO_RCVLOWAT of the socket (setsockopt hook; read from the socket at the switch).
    void set_rcvlowat(int v) noexcept override { rcvlowat_.store(v < 1 ? 1 : v, std::memory_order_relaxed); }
    // O_NONBLOCK as the program just set it (F_SETFL, FIONBIO hooks).
    void note_nonblocking(bool on) noexcept override { nb_seen_.store(on ? 1 : 0, std::memory_order_relaxed); }
    // FIONREAD / SIOCINQ and SIOCOUTQ.
    int bytes_readable() noexcept override;
    int bytes_unacked() noexcept override;
    // close(): orderly (FIN, bounded wait for it to be sent) or abortive (RESET).
    void close_connection(bool abortive) noexcept;

    // --- readiness ----------------------------------------------------------------------
    int rd_fd() const noexcept { return sh_.rd_fd(); }
    // Someone starts (+1) or stops (-1) watching the eventfds: an epoll registration or
    // a poll/select call.  They are kept up to date only while watched; a new watcher
    // calls sync_shadows() (takes the connection lock) once it holds no other lock.
    void shadow_users(int delta) noexcept;
    // While this connection holds back (coalesces) written bytes, the progress thread
    // watches its completions: the held bytes must go out at the completion they wait
    // for even when no thread of the program is in a call or a wait.  It stops at the
    // first completion event that finds nothing held (each watched completion costs a
    // wake-up of the progress thread and a fight for the connection's lock).
    bool coalescing_watched() const noexcept { return coalescing_watched_.load(); }
    // The progress thread must watch the completion channel: epoll registrations on the
    // eventfds, held-back writes, or a CONFIRM to write when the SWITCH completes.
    bool needs_progress() const noexcept
    {
        return sh_.has_users() || coalescing_watched_.load() || confirm_pending_.load() ||
               verify_watch_.load();
    }
    // Make the progress thread's watch of the completion channel match needs_progress()
    // (serialised: concurrent changes cannot leave it wrong).
    void refresh_watch() noexcept;
    void sync_shadows() noexcept;
    // A poll/select call sleeps on this connection's eventfds (they must then be kept
    // current by whoever handles a completion), or stops doing so.
    void begin_wait() noexcept
    {
        std::lock_guard<std::mutex> lk(mu_);
        sh_.sleep_begin();
        update_shadows_locked(true);
    }
    void end_wait() noexcept
    {
        std::lock_guard<std::mutex> lk(mu_);
        sh_.sleep_end();
    }
    int wr_fd() const noexcept { return sh_.wr_fd(); }
    int comp_fd() const noexcept;

    // --- progress thread ----------------------------------------------------------------
    void on_completion_event() noexcept;  // the completion channel is readable
    void on_tcp_event(unsigned events) noexcept;  // EPOLLRDHUP/HUP/ERR/IN on the TCP fd
    // A fatal problem: the connection is reset (ECONNRESET/EPIPE for the program).
    void fail(const char *why) noexcept;
    // Timers: grace after TCP EOF without RDMA FIN.  Returns true when still pending.
    bool on_timer(std::chrono::steady_clock::time_point now) noexcept;
    bool peer_finished() const noexcept { return peer_fin_.load(std::memory_order_acquire); }

    // In a fork child: this connection is unusable (documented rule: an offloaded
    // connection belongs to the process that made it).
    void after_fork_child() noexcept override;

    std::shared_ptr<Conn> self() const noexcept { return self_.lock(); }
    void set_self(const std::shared_ptr<Conn> &s) noexcept { self_ = s; }

private:

    // All *_locked functions need mu_ held.
    void poll_cq_locked() noexcept;
    void handle_recv_locked(uint32_t imm) noexcept;
    void update_shadows_locked(bool force = false) noexcept;
    bool readable_locked() const noexcept;
    // Client, before the PREFIX is consumed: the server's pre-switch bytes queued on the
    // TCP socket (capped at what the PREFIX announced).
    uint64_t tcp_prefix_bytes_locked() const noexcept;
    bool writable_locked() const noexcept;
    int post_write_locked(uint64_t off, const void *src, uint32_t len, uint32_t lkey,
                          bool with_imm, uint32_t imm, bool inline_data) noexcept;
    int post_ctrl_locked(neg::Imm t, uint32_t v) noexcept;
    void maybe_credit_locked() noexcept;
    // Up to `room` bytes from the receive ring into the program's iovecs at offset `at`
    // (consumed and credited unless `peek`); returns how many.
    size_t take_ring_locked(msghdr *msg, size_t at, size_t room, bool peek) noexcept;
    int repost_recv_locked(unsigned n) noexcept;
    // Stage `want` bytes of `msg` (from `skip`) and post them, or only stage them when
    // `hold` (coalescing; flush_locked() posts them later).
    ssize_t tx_ring_locked(const msghdr *msg, size_t skip, size_t want, bool hold) noexcept;
    // Post the staged bytes not yet posted ([tx_posted_, tx_prod_)) as one message.
    int flush_locked() noexcept;
    // Server, verifying, at the client's switch offset: look for the CONFIRM.  Returns 1
    // when the switch to rdma happened, 0 when undecided (wait), -1 when decided tcp.
    int try_confirm_locked() noexcept;
    // Before the switch (phases maybe, verifying): decide what can be decided now.
    // Returns 1 switched, -1 decided tcp, 0 still undecided.
    int presw_step_locked() noexcept;
    // Before the switch: how many TCP bytes may be delivered to the program now (server,
    // verifying: up to the SWITCH offset; none before the SWITCH is known).
    uint64_t tcp_limit_locked() const noexcept;
    // Read from the TCP socket before the switch (counted), into `msg` at `done`.
    ssize_t presw_recv_locked(msghdr *msg, size_t done, size_t total, uint64_t limit, int flags) noexcept;
    // Client: write (the rest of) the CONFIRM once the SWITCH has completed.
    void push_confirm_locked() noexcept;
    void give_up_verify_locked(Reason why) noexcept;
    // Server, verifying, no SWITCH yet: 0 while it may still come (or it got in as the
    // wait ended), else decided tcp (timeout) and -1.
    int gate_expired_locked() noexcept;
    // Both sides, at the switch: phase rdma, readiness moves to the eventfds.
    void enter_rdma_locked(int lowat) noexcept;
    void leave_pending_locked() noexcept;
    void decide_tcp_locked(Reason why) noexcept;
    // Wait (outside mu_) until the shadow `efd` is ready for `events` or the TCP fd for
    // `tcp_events`, honouring the socket's timeout.  0, -EAGAIN (timed out), -EINTR.
    // `dl` is the call's deadline (SO_RCVTIMEO/SO_SNDTIMEO counted from the first wait of
    // the call, as the kernel counts it, however many times the call waits).
    struct Deadline {
        bool set = false;
        std::chrono::steady_clock::time_point at{};
    };
    // tcp_events: what to wait for on the TCP socket too (0: nothing; POLLIN: bytes
    // before the peer's switch; POLLOUT: room for ours before our switch).  Returns < 0
    // (-errno: timeout, signal), 0 (look again), or 1 (look again: the completion queue
    // has just been polled).  check_nonblocking: the caller skipped its O_NONBLOCK check
    // (spin_before_flag_check); it is made after the spin.
    int wait(int efd, short events, short tcp_events, bool for_send, std::unique_lock<std::mutex> &lk,
             Deadline &dl, bool check_nonblocking = false) noexcept;
    bool nonblocking() const noexcept;
    // Whether a blocking call may skip reading O_NONBLOCK before its busy-poll spin: the
    // flag was last seen clear (wait() reads it after the spin, before it sleeps).
    bool spin_before_flag_check(int flags) const noexcept;

    const Side side_;
    Upcalls &up_;
    int tcp_fd_;  // the program's number; continue_on() may move it to the library's duplicate
    Socket *sock_ = nullptr;
    std::weak_ptr<Conn> self_;
    std::atomic<Phase> phase_;
    mutable std::mutex mu_;
    std::condition_variable cv_;  // send completions (close waits for its FIN)

    std::shared_ptr<rdma::CmId> id_;
    std::shared_ptr<rdma::Pd> pd_;
    std::shared_ptr<rdma::CompChannel> chan_;
    std::shared_ptr<rdma::Cq> cq_;
    std::shared_ptr<rdma::Qp> qp_;
    kits::RingMem rx_;
    kits::RingMem tx_;
    kits::RingMem spare_tx_;  // the kit's staging ring, until the peer's ring size is known
    neg::RingInfo peer_ring_{};
    neg::Nonce nonce_{};
    uint32_t max_inline_ = 0;

    Shadows sh_;
    std::atomic<bool> coalescing_watched_{false};
    std::mutex watch_mu_;       // refresh_watch (a leaf lock)
    bool comp_watched_ = false; // under watch_mu_
    std::atomic<Reason> declined_{Reason::none};
    std::atomic<int> rcvlowat_{1};
    // O_NONBLOCK as last seen: -1 unknown, 0 clear, 1 set.  Set by every read of the flag
    // and by the program's F_SETFL/FIONBIO through the library.  Only busy-poll mode uses
    // it, and only to spin before reading the flag (another process sharing the socket
    // may have changed it: the flag is read again before any sleep).
    mutable std::atomic<int> nb_seen_{-1};
    std::atomic<bool> interested_{false};

    // receive side
    uint64_t rx_prod_ = 0;      // bytes the peer has placed in our ring
    uint64_t rx_cons_ = 0;      // bytes the program has read
    uint64_t rx_credited_ = 0;  // rx_cons_ as last reported to the peer
    bool prefix_known_ = false; // client: PREFIX received
    uint64_t prefix_left_ = 0;  // client: TCP bytes still to read before the ring
    uint64_t tcp_read_ = 0;     // TCP bytes read before the peer's PREFIX / SWITCH
    // server: the client's SWITCH (its TCP bytes before the CONFIRM)
    bool switch_known_ = false;
    // server: the wait for the SWITCH timed out and stopped the queue pair, and a SWITCH
    // was found after all (gate_expired_locked)
    bool qp_stopped_ = false;
    uint64_t switch_at_ = 0;
    // server, verifying: give up (decide tcp) when no SWITCH has come by then (once it
    // has, the bytes at its offset decide, with no deadline)
    std::chrono::steady_clock::time_point gate_deadline_{};
    // client: the CONFIRM still to write once the SWITCH request has completed
    std::atomic<bool> confirm_pending_{false};
    std::atomic<bool> verify_watch_{false};  // server, verifying: the SWITCH is awaited
    uint64_t switch_wr_ = 0;
    unsigned confirm_done_ = 0;
    bool confirm_out_watch_ = false;  // the progress thread watches POLLOUT for it
    bool shut_rd_ = false;
    std::atomic<bool> peer_fin_{false};
    // The peer close()d (FIN with value 1): it reads nothing more.  Later writes go to
    // the TCP socket, so the peer's kernel answers them with an RST and this side sees
    // what the kernel's own TCP shows (EPIPE, SIGPIPE, POLLERR|POLLHUP).
    bool peer_closed_ = false;
    bool tcp_error_ = false;  // after peer_closed_: the TCP socket reports ERR/HUP
    // Urgent data (MSG_OOB) travels on the TCP socket, as the kernel's would: the peer's
    // TCP socket has it pending (POLLPRI) until it is read with MSG_OOB.
    bool urgent_ = false;

    // send side
    uint64_t tx_prod_ = 0;   // bytes staged for the peer's ring (accepted from the program)
    uint64_t tx_posted_ = 0; // bytes posted to the peer's ring (tx_acked_ <= this <= tx_prod_)
    uint64_t writes_ = 0;    // send calls that moved data (statistics)
    uint64_t data_msgs_ = 0; // DATA messages posted: fewer than writes_ when coalescing
    uint64_t tx_acked_ = 0;  // bytes the peer has consumed (credited)
    uint64_t tcp_sent_ = 0;  // bytes sent on TCP before the switch (PREFIX / SWITCH)
    bool shut_wr_ = false;
    bool fin_sent_ = false;
    uint64_t wr_posted_ = 0;     // work requests posted
    uint64_t wr_completed_ = 0;  // work requests known complete (signalled ones cover earlier)
    unsigned unsignaled_ = 0;
    uint64_t last_signaled_ = 0;  // wr_id of the last signalled request
    uint32_t sq_depth_ = 0;
    unsigned recv_posted_ = 0;

    // failure
    bool reset_ = false;           // reset by the peer (ECONNRESET once, then EPIPE)
    bool reset_reported_ = false;
    bool failed_ = false;          // local failure (QP error)
    bool tcp_eof_ = false;         // the TCP connection saw EOF/RST
    bool pending_counted_ = false;
    bool closed_ = false;          // the TCP fd is closed (its number may be reused)
    bool dead_ = false;            // fork child: never touch the verbs objects
    std::chrono::steady_clock::time_point grace_deadline_{};
    std::chrono::steady_clock::time_point maybe_deadline_{};

    uint64_t bytes_sent_ = 0;
    uint64_t bytes_received_ = 0;
};

}  // namespace rdmasock
