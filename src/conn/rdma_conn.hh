// One offload-candidate TCP connection and, once negotiated, its RDMA data path
// (docs/protocol.md).  A Conn is the Transport of its socket through every phase
// (switchover.hh), a facade that routes events between its parts:
//
//   Link        the queue pair side: rdma_cm id, PD, CQ and channel, QP, posting
//   RingPath    the rings, their cursors and credits, the stream's end (FIN, RESET)
//   Switchover  the phase (its only writer) and the TCP bytes before the switch
//   Shadows     the eventfds that carry readiness to poll, select and epoll
//   FallbackPath the way back to the TCP socket mid-stream (the queue pair failed)
//   waits::     the spin, the deadline and the signal-aware sleep of a blocking call
//
// Thread safety: one mutex per connection guards all state; the progress thread and
// application threads take it.  Blocking waits happen outside it, on the shadow eventfds.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>

#include "base/mutex.hh"
#include "base/reason.hh"
#include "conn/fallback.hh"
#include "conn/link.hh"
#include "conn/ring.hh"
#include "conn/shadows.hh"
#include "conn/switchover.hh"
#include "conn/upcalls.hh"
#include "conn/wait.hh"
#include "process/copies.hh"
#include "process/transport.hh"
#include "rdma/owners.hh"
#include "wire/negotiate.hh"

namespace rdmasock {

class Socket;

class Conn final : public Transport {
public:
    enum class Side : uint8_t { client, server };
    using Phase = Switchover::Phase;

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
    const neg::Nonce &nonce() const noexcept { return sw_.nonce(); }
    void set_nonce(const neg::Nonce &n) noexcept { sw_.set_nonce(n); }
    rdma::CmId *cm_id() const noexcept { return link_.cm_id(); }
    std::shared_ptr<rdma::CmId> cm_id_ref() const noexcept { return link_.cm_id_ref(); }

    // Client: the RDMA connection is established and the peer's ring set.  The server
    // proves next, in the TCP stream, that it is the TCP peer (its PROOF at the offset
    // its PROOF_AT names); once the PROOF is taken out of the stream, before
    // `switch_by`, the client posts SWITCH(TCP bytes sent so far) and goes to rdma; the
    // CONFIRM follows on the TCP stream once the SWITCH has completed.  Returns
    // Reason::none, or not_connected (the connection was decided or closed meanwhile).
    Reason client_established(std::chrono::steady_clock::time_point switch_by) noexcept;
    // Decided: on RDMA, or on TCP (a client's bytes may still go through the library
    // until the server's PROOF is out of the stream).
    bool decided() const noexcept
    {
        std::lock_guard<util::WaitedMutex> lk(mu_);
        return sw_.phase() == Phase::rdma || sw_.phase() == Phase::tcp || sw_.deferred_tcp() != Reason::none;
    }
    // Server: the program shut down writing (a request for the connection can no longer
    // be proved in its stream).
    bool write_shut() const noexcept
    {
        std::lock_guard<util::WaitedMutex> lk(mu_);
        return sw_.tcp_shut_wr();
    }
    // Client: the server's PROOF has not come (for `d` since its PROOF_AT) behind bytes
    // of the server's the program has not read: they may have to be read first (the
    // server's socket buffer full of them).
    bool proof_behind_bytes(std::chrono::steady_clock::duration d) const noexcept
    {
        std::lock_guard<util::WaitedMutex> lk(mu_);
        return sw_.phase() == Phase::maybe && sw_.proof_behind_bytes(Clock::now(), d);
    }
    // Client: the negotiation ended without RDMA (the socket stays on TCP with `why`).
    void client_failed(Reason why) noexcept;
    // Client, the negotiation over without RDMA: the queue pair goes, and the rdma_cm id
    // is handed back (to be destroyed once its events are acknowledged): a server that
    // accepts the request late finds no one there.
    std::shared_ptr<rdma::CmId> release_client_rdma() noexcept;
    // A client request sent on to another port: its queue pair, queues and rings go
    // (create_resources() makes new ones on the new id); the old id is handed back.
    // Null when the connection is no longer negotiating.
    std::shared_ptr<rdma::CmId> restart_client_rdma() noexcept;
    // Client, before fork(): a negotiation still running is given up (the child would
    // write to the TCP socket behind our count).
    // Also: a connection with RDMA bound gets a slot in the table it shares with the
    // child (process/copies.hh), which after_fork_parent names as a holder of a copy.
    void before_fork() noexcept override;
    void after_fork_parent(pid_t child) noexcept override;
    bool claim_copy() noexcept override;
    // The first half of it: asks the owner, without waiting (for all a call has, before
    // it waits for any).  False: not a copy that can be asked for.
    bool ask_copy() noexcept;
    // The owner, for the holders of copies (one wants it, or the program closes its own
    // copy while a child that lives holds one): the connection goes back to its TCP
    // socket, as at a pass (leave), and the slot says how that went (tcp, or ended).
    // Another thread already at it is waited for.
    // (taken: the caller moved the slot to handing, take_for_copies.)
    void hand_to_copies(std::chrono::steady_clock::time_point until, bool taken = false) noexcept;
    bool take_for_copies() noexcept;
    // A fork child's copy of a connection with RDMA bound (the parent's).
    bool is_copy() const noexcept { return parent_copy_.load(std::memory_order_acquire); }
    // This process holds the copy no more (an exec closes it).
    void drop_copy() noexcept;
    // After leave(): the copies' slot says how it went (tcp, or ended: reset), so that a
    // holder asks for nothing any more (an exec or a pass of the owner's made the
    // connection the TCP socket's).
    void settle_copies() noexcept;
    // The engine could not (no thread): the copies report a reset.
    void copies_failed() noexcept { copies::move(share(), copies::State::handing, copies::State::ended); }
    uint64_t copies_id() const noexcept { return share().id; }
    // The owner's image goes (exec): the slot is freed once no holder lives.
    void let_copies_go() noexcept
    {
        if (!is_copy() && share())
            copies::release(share());
    }
    // Whether a fork child's copy may be asked for now (some holder lives).
    bool copies_held() const noexcept { return share() && copies::held(share()); }
    // The connection leaves the process's hands: it execs (execve and its family: the
    // new program reads and writes the TCP socket itself, the library's view of it
    // gone), or passes the socket on (SCM_RIGHTS: whoever receives it may be another
    // process, which uses the kernel socket).
    // (fork: hand_to_copies.)
    enum class Leaving : uint8_t { exec, pass, fork };
    // Before, the stream is made the kernel socket's alone, waiting at most until
    // `until`: a negotiation ends (a PROOF due is taken out of the stream, a SWITCH that
    // got in is honoured), a connection on RDMA falls back to TCP (our frame and backlog
    // into the stream, the peer's frame out of it; what the program had not read of the
    // ring the peer resends: our count is what it read).  One that cannot be made so is
    // reset: the socket's next reader never reads a frame as data, nor misses a byte
    // silently.  After a pass this process's numbers go on with it over TCP.
    void leave(std::chrono::steady_clock::time_point until, Leaving how) noexcept;
    // The first step of it, for every connection before any waits: a connection on RDMA
    // that can fall back at once starts to (its peer then answers while the others are
    // seen to).
    void leave_start(Leaving how) noexcept;
    bool handed_off() const noexcept override
    {
        // A fork child's copy of a connection with RDMA bound (the parent's); or an accepted
    // connection unused at a fork: the parent's copy, or the child's until used there.
        if (parent_copy_.load(std::memory_order_acquire))
            return true;
        return (forked_unused_.load(std::memory_order_acquire) || adoptable_.load(std::memory_order_acquire)) &&
               !sw_.interested();
    }
    // Server: bind the accepted RDMA request (nonce) to this connection, before
    // rdma_accept.  False when the connection was decided meanwhile.
    bool begin_verify(const neg::Nonce &n) noexcept;
    // Server: this process declined the client's RDMA request for `why` (memlock,
    // resources): the socket, once decided TCP, reports that rather than
    // peer_no_rdmasock.
    // The client runs rdmasock and will stay on TCP: the socket is decided at once.
    void note_declined(Reason why) noexcept;
    // Server: the program passes the socket on (SCM_RIGHTS) while it is still being
    // decided (maybe): it stays on TCP, reason passed, and true is returned (any other
    // phase: leave()).
    bool note_passed() noexcept;
    // Server: an RDMA request came for this socket after it had stopped waiting for one
    // and gone to TCP: its reason is timeout, not peer_no_rdmasock.
    void note_late_request() noexcept;
    // Server: a client's RDMA request for this socket came (accept_request): if it comes
    // to nothing, the socket's reason is timeout, not peer_no_rdmasock.
    void note_asked() noexcept { sw_.note_asked(); }
    // Server: why a socket no RDMA request bound is on TCP (the reason this process
    // declined one with; timeout after a request; else no rdmasock on the client).
    Reason undecided_reason() const noexcept { return sw_.undecided_reason(); }
    // Server: the RDMA connection for this socket is established: PROOF_AT, then (once
    // it has completed) the PROOF in the TCP stream.
    void server_established() noexcept;
    // The RDMA side is gone before the switch (reject, disconnect, error): tcp.
    void abandon_rdma() noexcept;
    // Its device is being removed (RDMA_CM_EVENT_DEVICE_REMOVAL; the engine has stopped
    // watching its completion channel): a cause of this side's, so a connection on RDMA
    // falls back to TCP, one being verified stays on TCP; then every verbs object of the
    // connection goes, the rings' memory kept.  Returns its id, to be destroyed once its
    // events are acknowledged.
    std::shared_ptr<rdma::CmId> on_device_removal() noexcept;
    // Whether anything of the connection's (its id, its protection domain) is on `ctx`.
    bool on_device(const ibv_context *ctx) const noexcept;

    Phase phase() const noexcept { return sw_.phase(); }
    // The connection behind a socket's transport (nullptr: kernel TCP).  The one place
    // that turns a Transport into a Conn: every Transport the engine gives a socket is one.
    static Conn *of(Transport *t) noexcept
    {
        return t != nullptr && t->is_rdma() ? static_cast<Conn *>(t) : nullptr;
    }
    // The Conn an rdma_cm id's context names (the engine sets it to the Conn).
    static Conn *of_cm_context(void *context) noexcept { return static_cast<Conn *>(context); }
    Side side() const noexcept { return side_; }
    // The number the library's own calls use on the TCP socket: -1 once the program
    // closed it (mark_closed), so a number reused by another file is never acted on.
    int tcp_fd() const noexcept { return tcp_fd_.load(std::memory_order_acquire); }
    // The number for messages: the program's, also once it is closed.
    int shown_fd() const noexcept
    {
        const int fd = tcp_fd();
        return fd >= 0 ? fd : closed_number_.load(std::memory_order_acquire);
    }
    // The number the progress thread's epoll registration of the TCP socket was made
    // under (-1: none), which deletes it (the engine's, under its lock).
    int watched_as() const noexcept { return watched_as_.load(std::memory_order_acquire); }
    void set_watched_as(int fd) noexcept { watched_as_.store(fd, std::memory_order_release); }
    bool tcp_out_watched() noexcept;
    void set_socket(Socket *s) noexcept { sock_ = s; }
    Socket *socket() const noexcept { return sock_; }
    // In a fork child: an accepted connection nobody had read when the parent forked,
    // whose listener has a table (process/registry.hh): the first use here negotiates it
    // in this process (offload::interest).  True once.
    bool take_adoptable() noexcept { return adoptable_.exchange(false, std::memory_order_acq_rel); }
    // Deadline for a server socket in phase maybe to see an RDMA request.
    void set_maybe_deadline(std::chrono::steady_clock::time_point t) noexcept { sw_.set_maybe_deadline(t); }

    // --- Transport ----------------------------------------------------------------------
    const char *name() const noexcept override { return "rdma"; }
    const char *phase_name() const noexcept override;
    bool on_rdma() const noexcept override { return phase() == Phase::rdma; }
    void link_name(char *buf, size_t n) const noexcept override;
    int kernel_fd() const noexcept override { return tcp_fd(); }
    ssize_t recvmsg(int fd, msghdr *msg, int flags) noexcept override;
    ssize_t sendmsg(int fd, const msghdr *msg, int flags) noexcept override;
    int shutdown(int fd, int how) noexcept override;
    // MSG_OOB: all but the last byte as ordinary data, the last on the TCP socket.
    ssize_t send_urgent(int fd, const msghdr *msg, size_t total, int flags) noexcept;
    unsigned poll_mask(int fd) noexcept override;
    Counters counters(int fd) noexcept override;
    void destroy() noexcept override;
    // Counted in rt::g_offloaded: true once (retire takes it back).
    bool take_counted() noexcept;
    // The reason its socket records (none once closed).
    Reason socket_reason() const noexcept;

    // Server: the program reads or waits for input on this connection (first time:
    // Upcalls::interest()).
    void note_interest() noexcept
    {
        if (side_ == Side::server && sw_.note_interest())
            up_.interest(*this);
    }
    bool interested() const noexcept { return sw_.interested(); }

    // A server socket that is deciding (maybe/verifying) counts in rt::g_pending, so the
    // wait primitives take the mixed path for it.
    void enter_pending() noexcept;

    // The program closed the TCP fd: its number may be reused, never touch it again.
    void mark_closed() noexcept;
    // Close the shadow eventfds once the connection is closed (or on TCP for good) and
    // nobody watches them (mark_closed and the decision try too; the engine tries when
    // the socket is gone, when no call or poll can hold it any more).
    void release_shadows() noexcept;
    // close() while other threads of the program are in calls on this connection: when
    // it is on RDMA, it goes on through `keep` (a duplicate of the TCP socket the library
    // owns) and true is returned; the program's number may then be reused.
    bool continue_on(int keep) noexcept override;
    // The program closed number `from` (tcp_fd()) but still holds the socket as `to`.
    void renumber(int from, int to) noexcept override;
    // Before the close: a server socket still in maybe records its final reason (no
    // RDMA request came for it, or this process declined one).
    void note_closing() noexcept;
    // The process exits: a server socket still in maybe takes no RDMA request from now
    // on (one accepted after the exit step switched a connection the exit then cut).
    void refuse_requests() noexcept;
    bool refusing() noexcept;

    // poll/select on a socket still deciding: -1 it is on RDMA now (start over with its
    // eventfds), 1 its TCP bytes are held back (not readable, whatever the TCP socket
    // says), 0 the TCP socket's readiness is the socket's.  `polled_in`: the TCP socket
    // was just seen readable (a client's readiness that was only the server's PROOF,
    // now out of the stream, is none).
    int presw_gated(bool polled_in = false) noexcept;

    // SO_RCVLOWAT of the socket (setsockopt hook; read from the socket at the switch).
    void set_rcvlowat(int v) noexcept override { rcvlowat_.store(v < 1 ? 1 : v, std::memory_order_relaxed); }
    // SO_OOBINLINE: undecided, the connection stays on TCP (urgent_data); on RDMA (or a
    // server verifying, whose client may have switched) refused with ENOPROTOOPT.
    int urgent_inline() noexcept override;
    // The TCP socket has SO_OOBINLINE (inherited from its listener): not for RDMA.
    bool urgent_inline_set() const noexcept;
    // O_NONBLOCK as the program just set it (F_SETFL, FIONBIO hooks).
    void note_nonblocking(bool on) noexcept override { nb_seen_.store(on ? 1 : 0, std::memory_order_relaxed); }
    // FIONREAD / SIOCINQ and SIOCOUTQ.
    int bytes_readable() noexcept override;
    int bytes_unacked() noexcept override;
    // close(): orderly (FIN) or abortive (RESET).  As the kernel's close() returns
    // before the last bytes are acknowledged, the orderly one waits only with SO_LINGER
    // set (linger_s > 0, up to that long): true when the last bytes or the FIN are
    // still to go out or be acknowledged (the peer has stopped taking them), or when a
    // server's client may still switch (it has the PROOF), which the progress thread
    // then finishes (start_drain).  `exiting`: the process's exit, where nobody waits
    // after us: a server's client that has not switched by now is kept from switching
    // (its queue pair stops), and the CONFIRM of one that has is waited for briefly.
    bool close_connection(bool abortive, int linger_s = 0, bool exiting = false) noexcept;
    // Closed with its last messages still to go (close_connection returned true):
    // the library holds a duplicate of `fd`, the TCP socket, until they went (false:
    // no descriptor for it).
    bool start_drain(int fd) noexcept;
    // The progress thread, for a closed connection: true while its last messages are
    // still going out (the peer's queue pair still takes none: a stopped process), or
    // a server's client may still switch (verify_closed_locked).
    // Gives up once the connection breaks, the peer's TCP connection ends, or after
    // RDMASOCK_LINGER_MS (as long as close() waited before); then sets to_close to the
    // duplicate (unless the program closed that number meanwhile), for the caller to
    // close with close_drained() once it holds no lock (a close with SO_LINGER may block).
    bool draining(std::chrono::steady_clock::time_point now, int &to_close) noexcept;
    bool drain_pending() const noexcept { return drain_fd_.load(std::memory_order_acquire) >= 0; }
    // In a fork child: the copies of the duplicates go (held, they would keep the TCP
    // connections open after the parent's drains).  Lock-free, from a table of them.
    static void drop_drains_in_child() noexcept;
    static void close_drained(int d) noexcept;
    // Held across fork(): a child inherits no duplicate it does not know of.
    static void lock_drains() noexcept;
    static void unlock_drains() noexcept;
    static constexpr int kCloseWaitMs = 5;

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
    // eventfds, held-back writes, or a PROOF or CONFIRM to write when the message
    // before it completes.
    bool needs_progress() const noexcept
    {
        return sh_.has_users() || coalescing_watched_.load() || sw_.frame_pending() || sw_.verify_watched();
    }
    // Make the progress thread's watch of the completion channel match needs_progress()
    // (serialised: concurrent changes cannot leave it wrong).
    void refresh_watch() noexcept;
    void sync_shadows() noexcept;
    // A poll/select call sleeps on this connection's eventfds (they must then be kept
    // current by whoever handles a completion), or stops doing so.
    void begin_wait() noexcept
    {
        std::lock_guard<util::WaitedMutex> lk(mu_);
        sh_.sleep_begin();
        update_shadows_locked(true);
    }
    void end_wait() noexcept
    {
        std::lock_guard<util::WaitedMutex> lk(mu_);
        sh_.sleep_end();
    }
    int wr_fd() const noexcept { return sh_.wr_fd(); }
    int comp_fd() const noexcept { return link_.comp_fd(); }
    // Another thread waits for this connection's lock: a poll/epoll spin over
    // poll_mask() gives way to it (as waits::spin does).
    bool lock_wanted() const noexcept { return mu_.wanted(); }

    // --- progress thread ----------------------------------------------------------------
    void on_completion_event() noexcept;  // the completion channel is readable
    void on_tcp_event(unsigned events) noexcept;  // EPOLLRDHUP/HUP/ERR/IN on the TCP fd
    // What a wait for the negotiation's bytes polls the TCP socket for: POLLIN, unless
    // the program shut it for reading (it polls readable from then on: the wait's tick
    // looks again).
    short tcp_in_events() const noexcept { return sw_.tcp_shut_rd() ? 0 : POLLIN; }
    // The TCP socket's events, without those the program's own shutdown caused.
    unsigned peer_tcp_events_locked(unsigned events) const noexcept;
    // A fatal problem: the connection is reset (ECONNRESET/EPIPE for the program).
    void fail(const char *why) noexcept;
    // Timers: grace after TCP EOF without RDMA FIN.  Returns true when still pending.
    bool on_timer(std::chrono::steady_clock::time_point now) noexcept;
    bool peer_finished() const noexcept { return ring_.st.peer_fin.load(std::memory_order_acquire); }

    // In a fork child: this connection is unusable (documented rule: an offloaded
    // connection belongs to the process that made it).
    void after_fork_child() noexcept override;

    std::shared_ptr<Conn> self() const noexcept { return self_.lock(); }
    void set_self(const std::shared_ptr<Conn> &s) noexcept { self_ = s; }

private:
    using Clock = std::chrono::steady_clock;
    using Deadline = waits::Deadline;

    // All *_locked functions need mu_ held.
    // --- completions (conn_events.cc) ---
    void poll_cq_locked() noexcept;
    void take_imm_locked(uint32_t imm) noexcept;
    // Write (the rest of) the server's PROOF once its PROOF_AT has completed, or the
    // client's CONFIRM once its SWITCH has.
    void push_frame_locked() noexcept;
    // Server: the program's bytes wait while the PROOF is due (its PROOF_AT in flight,
    // or part of it still to write).  kLookAgain when it waited, 0 when nothing is due,
    // or the call's error.
    ssize_t hold_for_proof_locked(std::unique_lock<util::WaitedMutex> &lk, int flags, Deadline &dl) noexcept;
    // Server: the PROOF due goes into the stream before the end of it (shutdown, close),
    // waited for (bounded); never written, the connection is TCP (closed_early).
    void finish_proof_locked(std::unique_lock<util::WaitedMutex> &lk) noexcept;
    // Server: the program's shutdown(SHUT_WR) that waited for the PROOF (shut_held_)
    // reaches the TCP socket now.
    void release_shutdown_locked() noexcept;
    // --- the switch (conn_switch.cc) ---
    // Before the switch (phases maybe, verifying): decide what can be decided now.
    // Returns 1 switched, -1 decided tcp, 0 still undecided.
    int presw_step_locked() noexcept;
    // Client, maybe: the PROOF_AT, the PROOF at its offset, then the switch.  Returns as
    // presw_step_locked().
    int client_presw_locked() noexcept;
    // Client, the PROOF taken and the ACCEPT valid: SWITCH, and the phase rdma.
    int client_switch_locked() noexcept;
    // Client: a PROOF seen in place before the switch, now at the next TCP byte, goes
    // out of the stream (it is no byte of the program's; left there, it would make our
    // close reset the connection).
    void strip_proof_locked() noexcept
    {
        if (side_ == Side::client && sw_.at_proof_offset() && sw_.proof_verified())
            sw_.look_for_proof(tcp_fd_);
    }
    // Server, verifying, at the client's switch offset: look for the CONFIRM.  Returns 1
    // when the switch to rdma happened, 0 when undecided (wait), -1 when decided tcp.
    int try_confirm_locked() noexcept;
    // Server, verifying, no SWITCH yet: 0 while it may still come (or it got in as the
    // wait ended), else decided tcp (timeout) and -1.
    int gate_expired_locked() noexcept;
    // No SWITCH in time: the queue pair stops (rdma_disconnect moves it to the error
    // state), then the completion queue is read once more; true when a SWITCH got in
    // before the stop (none can after, nor be acknowledged).
    bool stop_for_switch_locked() noexcept;
    void give_up_verify_locked(Reason why) noexcept;
    // Both sides, at the switch: phase rdma, readiness moves to the eventfds.
    void enter_rdma_locked(Switchover::Event e, int lowat) noexcept;
    // The connection is committed to RDMA but cannot go on: rdma, then reset.
    void enter_rdma_broken_locked(const char *why) noexcept;
    void decide_tcp_locked(Reason why) noexcept;
    // The peer's TCP connection ended: without its RDMA FIN within the grace time, it died.
    void start_grace_locked() noexcept;
    // --- fallback to TCP mid-stream (conn_events.cc; conn/fallback.hh) ---
    // The RDMA path ends here: the queue pair stops, nothing more is taken from it, and
    // the connection goes on over its TCP socket (our FALLBACK frame, then the bytes the
    // peer may not have, then the program's).  The residue of the receive ring is read
    // first.  False when it cannot (the caller resets): a client whose CONFIRM is not
    // whole in the stream or who lacks the PREFIX (the peer's frame could not be found),
    // a connection reset or closed by its peer, or a bad frame from the peer.
    bool start_fallback_locked(const char *why) noexcept;
    // The queue pair failed (st.failed, no reset): fall back when the connection can;
    // true when it is falling back (or waits for the peer's frame).
    bool fallback_on_failure_locked() noexcept;
    // abandon_rdma(); `why`: the log's reason, when this side falls back.
    void abandon_locked(const char *why) noexcept;
    // The RDMA path ended by the peer's doing: nothing more is taken from it, and the
    // connection waits (RDMASOCK_PROBE_TIMEOUT_MS) for the peer's frame, which starts
    // our side's fallback; none, and it is reset.  False when it cannot wait so.
    bool await_peer_fallback_locked() noexcept;
    // The connection cannot go on: reset here, and the TCP connection aborted, so the
    // peer's library (waiting for our frame, maybe) sees it at once.
    void fail_and_abort_locked(const char *why) noexcept;
    // Whether this side can write and find the frames at all (fallback or awaiting).
    bool can_fall_back_locked() const noexcept;
    // The next TCP byte of the peer's after the switch is where its FALLBACK stands.
    bool at_peer_frame_locked() const noexcept
    {
        return side_ == Side::server || (sw_.prefix_done() && !sw_.proof_ahead());
    }
    // The peer fell back first: its frame is in the TCP stream (taken, and this side
    // falls back too).  Bytes there that are no frame reset the connection.
    void peer_fell_back_locked() noexcept;
    // Frame and backlog out, the peer's frame in, as far as the socket `fd` goes now.
    void fallback_step_locked(int fd) noexcept;
    // Readiness in fallback (the kernel socket's, but input only once the peer's frame
    // is out of the stream, output once ours and the backlog are in it).
    unsigned fallback_events_locked() const noexcept;
    // The program's calls in fallback, once the ring's residue is read: the call's
    // result, kLookAgain, or kNotHere (the connection is reset or shut: the RDMA path's
    // answers apply).
    ssize_t recv_fallback_locked(std::unique_lock<util::WaitedMutex> &lk, int fd, msghdr *msg, int flags, size_t total,
                                 size_t done, Deadline &dl) noexcept;
    ssize_t send_fallback_locked(std::unique_lock<util::WaitedMutex> &lk, int fd, const msghdr *msg, int flags,
                                 size_t done, Deadline &dl) noexcept;
    // --- readiness (conn_events.cc) ---
    void update_shadows_locked(bool force = false) noexcept;
    void release_shadows_locked() noexcept;
    bool readable_locked() const noexcept;
    bool writable_locked() const noexcept;
    // Client, before the PREFIX is consumed: the server's pre-switch bytes queued on the
    // TCP socket (capped at what the PREFIX announced).
    uint64_t tcp_prefix_bytes_locked() const noexcept;
    // --- calls (conn_io.cc) ---
    // Before the switch: recvmsg from the TCP socket, counted and gated.  Returns the
    // call's result, or kLookAgain.
    ssize_t recv_presw_locked(std::unique_lock<util::WaitedMutex> &lk, int fd, msghdr *msg, int flags, size_t total,
                              size_t &done, Deadline &dl) noexcept;
    // Client, on RDMA: the server's bytes from before its switch, on the TCP socket, come
    // first.  Returns the call's result, or kLookAgain, or kNotHere (they are all read).
    ssize_t recv_prefix_locked(std::unique_lock<util::WaitedMutex> &lk, msghdr *msg, int flags, size_t total,
                               size_t &done, Deadline &dl) noexcept;
    // Up to `room` bytes from the receive ring into `msg` at `at` (counted unless `peek`).
    size_t take_ring_locked(msghdr *msg, size_t at, size_t room, bool peek) noexcept;
    // Read from the TCP socket before the switch (counted), into `msg` at `done`.
    ssize_t presw_recv_locked(msghdr *msg, size_t done, size_t total, uint64_t limit, int flags) noexcept;
    // Before the switch: sendmsg on the TCP socket, counted.  The call's result, or
    // kLookAgain.
    ssize_t send_presw_locked(std::unique_lock<util::WaitedMutex> &lk, int fd, const msghdr *msg, int flags,
                              Deadline &dl) noexcept;
    static constexpr ssize_t kLookAgain = std::numeric_limits<ssize_t>::min();
    static constexpr ssize_t kNotHere = std::numeric_limits<ssize_t>::min() + 1;
    // Wait (outside mu_) until the shadow `efd` is ready for `events` or the TCP fd for
    // `tcp_events` (0: nothing; POLLIN: bytes before the peer's switch; POLLOUT: room for
    // ours before our switch), honouring the socket's timeout over the whole call (`dl`).
    // Returns < 0 (-errno: timeout, signal), 0 (look again), or 1 (look again: the
    // completion queue has just been polled).  check_nonblocking: the caller skipped its
    // O_NONBLOCK check (spin_before_flag_check); it is made after the spin.
    int wait(int efd, short events, short tcp_events, bool for_send, std::unique_lock<util::WaitedMutex> &lk,
             Deadline &dl, bool check_nonblocking = false) noexcept;
    bool nonblocking() const noexcept;
    // Whether a blocking call may skip reading O_NONBLOCK before its spin (busy-poll, or
    // the adaptive one): the flag was last seen clear (wait() reads it after the spin,
    // before it sleeps, or at once when the adaptive spin does not spin).
    bool spin_before_flag_check(int flags) const noexcept;
    void count_sent(uint64_t n) noexcept { counters_.bytes_sent += n; }
    void count_received(uint64_t n) noexcept { counters_.bytes_received += n; }

    const Side side_;
    Upcalls &up_;
    // continue_on() under mu_: `from` is the number the calls leave.
    bool adopt_duplicate(int keep, int &from) noexcept;
    // The program's number; continue_on() may move it to the library's duplicate.  Set
    // under mu_, read without it by the engine (its epoll registrations, messages).
    std::atomic<int> tcp_fd_;
    std::atomic<int> closed_number_{-1};  // what tcp_fd_ was before mark_closed() cleared it
    std::atomic<int> watched_as_{-1};
    bool handed_off_ = false;  // continue_on() did: the program's number is closed
    // The number a call of the program uses on the TCP socket: its own (a duplicate the
    // library does not track may be in use, and tcp_fd_ may move under it), but the
    // library's duplicate once the program closed its numbers (continue_on).
    int call_fd_locked(int fd) const noexcept { return handed_off_ ? tcp_fd() : fd; }
    // A server's reason when its program closes it before anything was decided: the
    // undecided reason once bytes moved with a client that showed interest; else
    // pending (a connection that moved no byte had nothing decided about it).
    Reason server_close_reason_locked() const noexcept
    {
        return sw_.interested() && (sw_.tcp_read() > 0 || sw_.tcp_sent() > 0) ? undecided_reason() : Reason::pending;
    }
    Socket *sock_ = nullptr;
    std::atomic<bool> forked_unused_{false};  // after_fork_parent() before any use here
    std::atomic<bool> parent_copy_{false};    // after_fork_child() of a connection with RDMA bound
    std::atomic<bool> adoptable_{false};
    std::weak_ptr<Conn> self_;
    mutable util::WaitedMutex mu_;

    Link link_;
    RingPath ring_{link_};
    Switchover sw_;
    Shadows sh_;
    FallbackPath fb_;
    bool fb_out_watched_ = false;  // the progress thread watches the TCP socket's POLLOUT for it
    uint64_t prefix_wr_ = 0;       // server: the PREFIX's work request (signalled)
    // A completion failed for a cause of this side's (LOC_*: the link went down here):
    // this side starts a fallback.  Otherwise (the peer's queue pair is gone: it fell
    // back, or exec'd, died, handed the socket on) it only answers one (awaiting_): a
    // frame written into a stream that no library of ours reads any more would be read
    // as data.
    bool local_failure_ = false;
    bool awaiting_ = false;
    // In leave(): a fallback that starts leaves the ring's residue unread (the socket's
    // next reader gets it from the peer again), and our count says so.
    int leaving_ = 0;  // (a count: an exec or a pass of the owner's while a fork child's hand-back runs)
    bool leave_can_start_locked() const noexcept;
    // presw_gated: fewer bytes than SO_RCVLOWAT for the program while verifying.
    bool below_rcvlowat_locked() const noexcept;
    void leave_fail_locked(Leaving how, const char *what) noexcept;
    // A fork child's copy of a connection it did not adopt: the parent's stream, which
    // the child's exec leaves alone.
    std::atomic<bool> inherited_{false};
    // The connection's slot among those whose copies fork children hold (set at a fork
    // that copies it, by the program's thread in fork(); the owner's, or the copy's).
    // (Its id and index in one word: written once, read without the lock.)
    static constexpr unsigned kShareIndexBits = 14;  // (copies.cc: 16384 slots)
    std::atomic<uint64_t> share_{0};
    copies::Ref share() const noexcept;
    bool shared_at_fork_locked() const noexcept;
    std::atomic<bool> copy_claimed_{false};  // this copy is a kernel socket now
    std::atomic<bool> copy_failed_{false};   // its owner could not hand it back: a reset
    Clock::time_point fb_until_{};  // no peer's frame by then: reset
    // Fell back (fb_ active): reported as on TCP (reason fell_back, phase tcp), read
    // without the lock by RDMASOCK_INFO, `rdmasock ss` and the close line.
    std::atomic<bool> fell_back_{false};

    std::atomic<bool> coalescing_watched_{false};
    std::mutex watch_mu_;       // refresh_watch (a leaf lock)
    bool comp_watched_ = false; // under watch_mu_
    std::atomic<int> rcvlowat_{1};
    // O_NONBLOCK as last seen: -1 unknown, 0 clear, 1 set.  Set by every read of the flag
    // and by the program's F_SETFL/FIONBIO through the library.  Used only to spin
    // before reading the flag (another process sharing the socket may have changed it:
    // the flag is read again before any sleep): a receive whose data the spin finds
    // makes no fcntl() at all.
    mutable std::atomic<int> nb_seen_{-1};
    // The default mode's spins before a blocking receive, and a blocking send (under mu_).
    waits::AdaptiveSpin rx_spin_, tx_spin_;

    // The TCP socket as the progress thread watches it once on RDMA.
    struct TcpWatch {
        bool eof = false;    // the TCP connection saw EOF/RST
        bool error = false;  // after the peer's close: the TCP socket reports ERR/HUP
        // Urgent data (MSG_OOB) travels on the TCP socket, as the kernel's would: the
        // peer's TCP socket has it pending (POLLPRI) until it is read with MSG_OOB.
        bool urgent = false;
        Clock::time_point grace_deadline{};  // no RDMA FIN by then: the peer died
        // Client, before the server's bytes from before its switch are all read: how
        // many of them (and its EOF, as one more) the readable eventfd has reflected.
        uint64_t arrived_seen = 0;
    } tcp_;
    bool closed_ = false;  // the TCP fd is closed (its number may be reused)
    bool refusing_ = false;  // refuse_requests()
    // Its socket object is recycled (destroy()): the close line is written.
    bool released_ = false;
    // Counted in rt::g_offloaded (a switch while the program had it), which retire()
    // takes back once (take_counted).
    bool counted_ = false;
    // close(): the FIN "closed" is posted (close_fin_wr_: its request's number), and
    // the duplicate of the TCP socket the progress thread holds until it has completed.
    bool close_fin_posted_ = false;
    uint64_t close_fin_wr_ = 0;
    std::atomic<int> drain_fd_{-1};
    uint64_t drain_ino_ = 0, drain_dev_ = 0;  // the socket it is (fstat)
    Clock::time_point drain_until_{};
    // The staged bytes, then the FIN "closed", as far as the send queue takes them now:
    // true once the FIN has completed or the connection broke.
    bool drain_locked() noexcept;
    // A server closed while verifying, its PROOF written: the client may switch until
    // the switch window ends.  Takes its SWITCH and CONFIRM from the duplicate and
    // switches (1: the FIN "closed" goes next), or gives up (-1: the socket closes as
    // TCP), or waits (0).
    int verify_closed_locked(Clock::time_point now) noexcept;
    // The queue pair and queues are made and the receives posted: a call of the program
    // may poll the completion queue (a client's before its switch: the PROOF_AT).
    bool cq_ready_ = false;
    // Server: the program shut the TCP socket down for writing before the PROOF was
    // written; the kernel's shutdown waits for it (release_shutdown_locked).
    bool shut_held_ = false;
    // Client before its switch: the RDMA peer sent something else than a PROOF_AT
    // (decided tcp once the completion queue has been read).
    bool client_fault_ = false;
    Counters counters_;
    const Clock::time_point made_ = Clock::now();  // connect() or accept(): the switch line's setup time
    // The info-level line of the switch (rdmasock(7), LOGGING).
    // The switch's set-up time in the statistics, and its info line (fd: the TCP socket,
    // the program's or, after its close, the library's duplicate).
    void note_switch_locked(int fd) const noexcept;
};

}  // namespace rdmasock
