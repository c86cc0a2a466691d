// Conn: the program's calls (recvmsg, sendmsg, shutdown, FIONREAD, SIOCOUTQ) and how
// they wait.  Set-up, completions, the switch and readiness are in rdma_conn.cc.
#include "conn/rdma_conn.hh"

#include <cerrno>
#include <climits>
#include <csignal>
#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>

#include "base/real.hh"
#include "conn/iov.hh"
#include "process/runtime.hh"
#include "process/signals.hh"

namespace rdmasock {

bool Conn::nonblocking() const noexcept
{
    int fl = RS_REAL(fcntl)(tcp_fd_, F_GETFL, nullptr);
    const bool nb = fl >= 0 && (fl & O_NONBLOCK);
    nb_seen_.store(nb ? 1 : 0, std::memory_order_relaxed);
    return nb;
}

bool Conn::spin_before_flag_check(int flags) const noexcept
{
    return !(flags & MSG_DONTWAIT) && (rt::config().busy_poll_us > 0 || rt::config().spin_us > 0) &&
           nb_seen_.load(std::memory_order_relaxed) == 0;
}

int Conn::wait(int efd, short events, short tcp_events, bool for_send, std::unique_lock<util::WaitedMutex> &lk,
               Deadline &dl, bool check_nonblocking) noexcept
{
    // A server waiting for the client's SWITCH sleeps on its completions too.
    const Phase ph = sw_.phase();
    const bool have_cq = (ph == Phase::rdma || (ph == Phase::verifying && side_ == Side::server)) && link_.usable() &&
                         !ring_.frozen();
    // Busy-poll mode (RDMASOCK_BUSY_POLL_US): spin on the completion queue for a bounded
    // time before sleeping.  With RDMASOCK_SPIN_US the spin adapts (waits::AdaptiveSpin):
    // it spins only while spins find data, so an idle connection uses no CPU.  The spin comes
    // before the socket's timeout is read (a system call the data often makes needless);
    // a timeout counts from the spin's start.
    const long fixed_us = rt::config().busy_poll_us, adaptive_us = rt::config().spin_us;
    // Only on RDMA: before the switch the predicate can hold while the call cannot go on
    // (a server gated until the client's SWITCH has its ring readable), and a spin that
    // finds it at once would go round with the lock never given up (the parity fork storm
    // with 8 KiB rings: a fork waited up to 14 s for a server connection's lock).
    const bool can_spin = have_cq && tcp_events == 0 && ph == Phase::rdma;
    waits::AdaptiveSpin *adapt =
        can_spin && fixed_us == 0 && adaptive_us > 0 ? (efd == sh_.rd_fd() ? &rx_spin_ : &tx_spin_) : nullptr;
    auto ready = [&] { return efd == sh_.rd_fd() ? readable_locked() : writable_locked(); };
    // How long the data took, for the adaptive spin: from the spin's first clock reading
    // (after 16 polls: none is taken before), or from the sleep's start when it did not
    // spin; counted only when the wait ends with its data there.
    waits::Clock::time_point began{};
    auto came = [&] {
        if (adapt != nullptr && ready())
            adapt->came_after(began == waits::Clock::time_point{}
                                  ? 0
                                  : std::chrono::duration_cast<std::chrono::nanoseconds>(waits::Clock::now() - began)
                                        .count(),
                              adaptive_us);
    };
    // Nor when the predicate holds already: the caller waits for something else (a send
    // that has sent part of its bytes when the peer's FIN came, its ring full), and a
    // spin would end at once every time, the sleep's socket timeout never read.
    const long spin_us = !can_spin || ready() ? 0 : adapt != nullptr ? adapt->budget_us(adaptive_us) : fixed_us;
    waits::Clock::time_point spun_from{};
    if (spin_us > 0) {
        const bool found = waits::spin(
            lk, spin_us,
            [&] {
                poll_cq_locked();
                update_shadows_locked();
                return ready();
            },
            &spun_from);
        began = spun_from;
        if (adapt != nullptr)
            adapt->spun(found);
        if (found) {
            came();
            return 1;  // (the completion queue was just polled)
        }
    }
    // The spin came before the O_NONBLOCK check (spin_before_flag_check): a socket that
    // is nonblocking after all (another process changed the flag) does not sleep.
    if (check_nonblocking && nonblocking())
        return -EAGAIN;
    bool has_timeout = false;
    int tmo = waits::sleep_limit(tcp_fd_, for_send, dl, spun_from, &has_timeout);
    if (tmo == -EAGAIN)
        return -EAGAIN;
    // Before the switch, look again at least every 50 ms: the switch happens on another
    // thread and its wake-up is an eventfd that a later update may drain.
    bool sliced = false;
    if (sw_.phase() != Phase::rdma && (tmo < 0 || tmo > 50)) {
        tmo = 50;
        sliced = true;
    }
    update_shadows_locked(true);  // no stale "readable" left to wake us for nothing
    // While a thread sleeps here, whoever handles a completion (another thread of the
    // program, the progress thread) keeps the eventfds current: a credit taken in by a
    // reader must wake a writer sleeping on the writable eventfd.  The waiting thread
    // also watches the completion channel itself, so a wake-up does not have to go
    // through the progress thread (whichever reads the event first handles it; both
    // re-arm and re-poll, so none is lost).
    if (adapt != nullptr && began == waits::Clock::time_point{})
        began = waits::Clock::now();  // (no spin: the time is the sleep's)
    sh_.sleep_begin();
    pollfd p[3] = {{efd, events, 0}, {have_cq ? comp_fd() : -1, POLLIN, 0}, {tcp_fd_, tcp_events, 0}};
    const int r = waits::sleep(lk, p, tcp_events ? 3 : 2, tmo, has_timeout);
    sh_.sleep_end();
    if (r == waits::kRestart)
        return 0;
    if (r == 0)
        return sliced ? 0 : -EAGAIN;  // a slice ended: the caller looks again
    if (r < 0)
        return r;
    const bool completion = have_cq && (p[1].revents & POLLIN);
    if (completion) {
        // One event per arming: one read (another one pending keeps the fd readable).
        link_.ack_event();
        poll_cq_locked();
        link_.arm();
        poll_cq_locked();
        update_shadows_locked();
    }
    came();  // (after the completions are taken in: whether the data is there)
    if (completion && !(efd == sh_.rd_fd() && (p[0].revents & POLLIN) && !sh_.readable_set()))
        return 1;  // (the completion queue was just polled)
    // A stale wake-up of a level flag we are about to recompute: drain it.
    if (efd == sh_.rd_fd() && (p[0].revents & POLLIN))
        sh_.drain_stale();
    return 0;
}

/* ---- receive ---------------------------------------------------------------------------- */

size_t Conn::take_ring_locked(msghdr *msg, size_t at, size_t room, bool peek) noexcept
{
    const size_t n = ring_.take(msg, at, room, peek);
    if (!peek)
        count_received(n);
    return n;
}

ssize_t Conn::presw_recv_locked(msghdr *msg, size_t done, size_t total, uint64_t limit, int flags) noexcept
{
    const int fl = (flags & ~MSG_WAITALL) | MSG_DONTWAIT;
    ssize_t r;
    if (done == 0 && limit >= total)
        r = RS_REAL(recvmsg)(tcp_fd_, msg, fl);
    else
        r = iov::tcp_recv_at(tcp_fd_, msg, done, limit, fl);
    if (r < 0)
        return -errno;
    if (r > 0 && !(flags & MSG_PEEK)) {
        sw_.took_from_tcp(static_cast<uint64_t>(r));
        count_received(static_cast<uint64_t>(r));
    }
    return r;
}

ssize_t Conn::recv_presw_locked(std::unique_lock<util::WaitedMutex> &lk, int fd, msghdr *msg, int flags, size_t total,
                                size_t &done, Deadline &dl) noexcept
{
    const bool waitall = (flags & MSG_WAITALL) && !(flags & MSG_PEEK);
    const ssize_t partial = static_cast<ssize_t>(done);
    if (side_ == Side::server && !sw_.interested()) {
        lk.unlock();
        note_interest();
        lk.lock();
        return kLookAgain;
    }
    if (flags & MSG_OOB) {  // the urgent byte is not part of the counted stream
        const int kfd = call_fd_locked(fd);
        lk.unlock();
        ssize_t r = RS_REAL(recvmsg)(kfd, msg, flags);
        return r < 0 ? -errno : r;
    }
    if (presw_step_locked() != 0)
        return kLookAgain;
    const Phase p = sw_.phase();
    uint64_t limit = sw_.tcp_limit();
    bool tcp_input = limit > 0 || (p == Phase::verifying && sw_.switch_known());
    if (side_ == Side::client && cq_ready_ && !sw_.proof_known() && limit > 0) {
        // The server's PROOF may be among the bytes queued: the PROOF_AT naming its
        // offset came before it.  So the bytes are counted first, the completion queue
        // is read next, and only the bytes counted are delivered.
        pollfd pf{tcp_fd_, POLLRDHUP, 0};
        int queued = 0;
        const bool ended = RS_REAL(poll)(&pf, 1, 0) > 0;
        if (RS_REAL(ioctl)(tcp_fd_, FIONREAD, &queued) != 0)
            queued = 0;
        poll_cq_locked();
        if (sw_.phase() != Phase::maybe || sw_.proof_known())
            return kLookAgain;
        // (Nothing queued and the stream ended or failed: the read reports it.)
        limit = queued > 0 ? static_cast<uint64_t>(queued) : ended ? UINT64_MAX : 0;
    } else if (side_ == Side::client && sw_.at_proof_offset()) {
        // Part of the PROOF is there: the rest will come (wait without the TCP socket,
        // which is readable with it).
        int queued = 0;
        tcp_input = RS_REAL(ioctl)(tcp_fd_, FIONREAD, &queued) != 0 || queued == 0;
    }
    if (limit == 0 && sw_.tcp_shut_rd())
        return partial;  // the program shut reading: nothing it may have now (the kernel's read gives 0)
    const bool block = !((flags & MSG_DONTWAIT) || nonblocking());
    if (limit > 0) {
        // A blocking call reads once poll() says readable, which honours SO_RCVLOWAT as
        // the kernel's own blocking read does.
        bool ready = true;
        if (block && done == 0 && total > 0) {
            pollfd pf{tcp_fd_, POLLIN, 0};
            ready = RS_REAL(poll)(&pf, 1, 0) > 0;
        }
        if (ready) {
            ssize_t r = presw_recv_locked(msg, done, total, limit, flags);
            if (r > 0 && sw_.at_proof_offset())
                presw_step_locked();  // the PROOF follows: take it now (the program may not read again)
            if (r > 0) {
                done += static_cast<size_t>(r);
                if (!waitall || done == total)
                    return static_cast<ssize_t>(done);
                return kLookAgain;
            }
            if (r == 0)
                return partial;  // EOF (or an empty buffer)
            if (r != -EAGAIN && r != -EWOULDBLOCK && r != -EINTR)
                return done > 0 ? partial : r;
        }
    }
    if (!block)
        return done > 0 ? partial : -EAGAIN;
    // Gated (a server waiting for the SWITCH): the TCP socket may be readable with bytes
    // not ours to deliver yet; sleep on the eventfd and completions.
    int w = wait(sh_.rd_fd(), POLLIN, tcp_input ? POLLIN : 0, false, lk, dl);
    if (w < 0)
        return done > 0 ? partial : w;
    sh_.drain();
    return kLookAgain;
}

ssize_t Conn::recv_prefix_locked(std::unique_lock<util::WaitedMutex> &lk, msghdr *msg, int flags, size_t total,
                                 size_t &done, Deadline &dl) noexcept
{
    // Bytes the server sent on TCP before it switched come first, into the program's
    // buffer at `done` (MSG_WAITALL fills it across both sources).
    const bool peek = flags & MSG_PEEK;
    const bool waitall = (flags & MSG_WAITALL) && !peek;
    // (Never beyond a PROOF still in the stream: it is taken out once it is next.)
    strip_proof_locked();
    if (!sw_.prefix_known() && (ring_.st.broken() || ring_.frozen())) {
        // Without the PREFIX nothing tells where the server's TCP bytes from before its
        // switch end (a frame of a fallback may follow them): none is delivered.
        if (done > 0)
            return static_cast<ssize_t>(done);
        if (!ring_.st.reset_reported) {
            ring_.st.reset_reported = true;
            return -ECONNRESET;
        }
        return 0;
    }
    const size_t want = static_cast<size_t>(sw_.proof_cap(sw_.prefix_cap(total - done)));
    const int fl = MSG_DONTWAIT | (flags & MSG_PEEK);
    ssize_t r = want ? iov::tcp_recv_at(tcp_fd_, msg, done, want, fl) : 0;
    const int e = errno;
    if (r > 0) {
        if (!peek) {
            sw_.took_from_tcp(static_cast<uint64_t>(r));
            count_received(static_cast<uint64_t>(r));
        }
        done += static_cast<size_t>(r);
        const bool prefix_done =
            sw_.prefix_known() && (peek ? static_cast<uint64_t>(r) == sw_.prefix_left() : sw_.prefix_left() == 0);
        if (prefix_done && !peek && !fb_.active())
            peer_fell_back_locked();  // (a frame that came behind the prefix had no edge of its own)
        if (!waitall && done < total && prefix_done && !ring_.st.shut_rd && ring_.avail() != 0) {
            // The prefix ends inside this call: what the ring already holds comes with
            // it, as one kernel read returns everything queued (a poll that counted both
            // for SO_RCVLOWAT must not get a shorter read).
            done += take_ring_locked(msg, done, total - done, peek);
        }
        update_shadows_locked();
        if (!waitall || done == total)
            return static_cast<ssize_t>(done);
        return kLookAgain;
    }
    const ssize_t partial = static_cast<ssize_t>(done);
    if (ring_.st.shut_rd && (r == 0 || (r < 0 && e == EAGAIN)))
        return partial;  // the program shut reading: what it may have now, else 0 (as the kernel's read)
    if (r == 0 && want > 0 && !sw_.prefix_known()) {
        // The server closes its TCP socket only after its RDMA FIN completed, so a PREFIX
        // it sent is in our completion queue by now: look once more (the TCP EOF may
        // have arrived after this call's first look).
        poll_cq_locked();
        if (sw_.prefix_known())
            return kLookAgain;
        return partial;  // the server closed before it ever switched: plain EOF
    }
    if (r == 0 && want > 0)
        // The server announced more TCP bytes than its stream holds: they can never come
        // (and waiting for the readable TCP fd would spin).
        fail("the TCP stream ended inside the announced prefix");
    if (r < 0 && e != EAGAIN && e != EINTR)
        return done > 0 ? partial : -e;
    if (sw_.prefix_done())
        return kNotHere;
    if (ring_.st.broken())
        return done > 0 ? partial : -ECONNRESET;
    if ((flags & MSG_DONTWAIT) || nonblocking())
        return done > 0 ? partial : -EAGAIN;
    ring_.flush();
    int w = wait(sh_.rd_fd(), POLLIN, POLLIN, false, lk, dl);
    if (w < 0)
        return done > 0 ? partial : w;
    return kLookAgain;
}

ssize_t Conn::recv_fallback_locked(std::unique_lock<util::WaitedMutex> &lk, int fd, msghdr *msg, int flags,
                                   size_t total, size_t done, Deadline &dl) noexcept
{
    const RingPath::Status &st = ring_.st;
    if (st.shut_rd)
        return static_cast<ssize_t>(done);  // (as the kernel's read after SHUT_RD)
    if (awaiting_ && !fb_.active())
        peer_fell_back_locked();
    fallback_step_locked(tcp_fd());
    if (st.broken())
        return kNotHere;
    if (!fb_.in_done()) {
        // The peer's frame (and the bytes it resends that the ring gave already) first.
        if ((flags & MSG_DONTWAIT) || nonblocking()) {
            update_shadows_locked(true);  // (not readable: the next arrival is an edge)
            return done > 0 ? static_cast<ssize_t>(done) : -EAGAIN;
        }
        const int w = wait(sh_.rd_fd(), POLLIN, POLLIN, false, lk, dl);
        if (w < 0)
            return done > 0 ? static_cast<ssize_t>(done) : w;
        return kLookAgain;
    }
    // The kernel's socket from here, as the program asked (its flags, timeouts, signals).
    const int kfd = call_fd_locked(fd);
    lk.unlock();
    const ssize_t r = done == 0 ? RS_REAL(recvmsg)(kfd, msg, flags) : iov::tcp_recv_at(kfd, msg, done, total - done, flags);
    const int e = errno;
    lk.lock();
    if (r > 0 && !(flags & MSG_PEEK))
        count_received(static_cast<uint64_t>(r));
    if (r < 0 && (e == EAGAIN || e == EWOULDBLOCK))
        update_shadows_locked(true);
    if (r < 0)
        return done > 0 ? static_cast<ssize_t>(done) : -e;
    return static_cast<ssize_t>(done) + r;
}

ssize_t Conn::recvmsg(int fd, msghdr *msg, int flags) noexcept
{
    sig::clear_last();  // a handler that runs from here on interrupts the call's waits
    std::unique_lock<util::WaitedMutex> lk(mu_);
    Deadline dl;
    bool lowat_gave_up = false;
    bool just_polled = false;  // wait() polled the completion queue as it returned
    const size_t total = iov::total(msg);
    size_t done = 0;
    const bool peek = flags & MSG_PEEK;
    const bool waitall = (flags & MSG_WAITALL) && !peek;
    msg->msg_flags = 0;
    msg->msg_controllen = 0;
    if (msg->msg_name)
        msg->msg_namelen = 0;
    const RingPath::Status &st = ring_.st;
    for (;;) {
        const Phase p = sw_.phase();
        if (p == Phase::tcp || (p == Phase::rdma && (flags & MSG_OOB))) {
            // Plain TCP, or urgent data (on the TCP socket).  (After a close handed the
            // connection to this call: through the library's duplicate.)
            const int kfd = call_fd_locked(fd);
            lk.unlock();
            if (done == 0) {
                ssize_t r = RS_REAL(recvmsg)(kfd, msg, flags);
                return r < 0 ? -errno : r;
            }
            // Decided for TCP while this call (MSG_WAITALL) waited with some bytes
            // already in the program's buffer: the rest goes after them.
            ssize_t r = iov::tcp_recv_at(kfd, msg, done, total - done, flags);
            return static_cast<ssize_t>(done) + (r > 0 ? r : 0);
        }
        if (p != Phase::rdma) {  // before the switch: the TCP socket, counted
            const ssize_t r = recv_presw_locked(lk, fd, msg, flags, total, done, dl);
            if (r == kLookAgain)
                continue;
            return r;
        }
        if (!just_polled)
            poll_cq_locked();
        just_polled = false;
        if (total == 0)
            return 0;
        if (side_ == Side::client && sw_.proof_ahead())
            strip_proof_locked();
        if (side_ == Side::client && !sw_.prefix_done()) {
            const ssize_t r = recv_prefix_locked(lk, msg, flags, total, done, dl);
            if (r == kLookAgain)
                continue;
            if (r != kNotHere)
                return r;
        }
        const uint64_t avail = ring_.avail();
        // SO_RCVLOWAT: a blocking call waits for that many bytes (or all it asked for).
        const uint64_t lowat = static_cast<uint64_t>(rcvlowat_.load(std::memory_order_relaxed));
        if (avail > 0 && done == 0 && !waitall && !lowat_gave_up && avail < lowat && avail < total && !st.shut_rd &&
            !st.peer_fin && !st.broken() && !fb_.active() && !(flags & MSG_DONTWAIT) && !nonblocking()) {
            ring_.flush();
            if (wait(sh_.rd_fd(), POLLIN, 0, false, lk, dl) < 0)
                lowat_gave_up = true;  // timeout or signal: what there is, as the kernel
            continue;
        }
        if (avail > 0 && !st.shut_rd) {
            done += take_ring_locked(msg, done, total - done, peek);
            update_shadows_locked();
            if (!waitall || done == total)
                return static_cast<ssize_t>(done);
            continue;
        }
        if (fb_.active() || awaiting_) {
            const ssize_t r = recv_fallback_locked(lk, fd, msg, flags, total, done, dl);
            if (r == kLookAgain)
                continue;
            if (r != kNotHere)
                return r;
        }
        if (done > 0 && (st.peer_fin || st.broken() || st.shut_rd))
            return static_cast<ssize_t>(done);
        if (st.peer_fin || st.shut_rd)
            return 0;
        if (st.broken()) {
            if (!st.reset_reported) {
                ring_.st.reset_reported = true;
                return -ECONNRESET;
            }
            return 0;
        }
        // (A socket last seen blocking spins first, in busy-poll mode or when the adaptive
        // spin spins; wait() reads the flag before it sleeps.)
        const bool spin_first = spin_before_flag_check(flags);
        if (!spin_first && ((flags & MSG_DONTWAIT) || nonblocking()))
            return done > 0 ? static_cast<ssize_t>(done) : -EAGAIN;
        ring_.flush();  // about to sleep for input: what we coalesced goes out first
        int w = wait(sh_.rd_fd(), POLLIN, 0, false, lk, dl, spin_first);
        if (w < 0)
            return done > 0 ? static_cast<ssize_t>(done) : w;
        just_polled = w > 0;
    }
}

/* ---- send ------------------------------------------------------------------------------- */

ssize_t Conn::send_presw_locked(std::unique_lock<util::WaitedMutex> &lk, int fd, const msghdr *msg, int flags,
                                Deadline &dl) noexcept
{
    if ((flags & MSG_OOB) && sw_.phase() == Phase::maybe && sw_.deferred_tcp() == Reason::none) {
        // Several urgent bytes make the receiver's in-band count ambiguous: the
        // connection stays on TCP.  (A client whose server's PROOF is still in the
        // stream stays undecided until it is out: the byte goes on TCP, below.)
        decide_tcp_locked(Reason::urgent_data);
        if (sw_.phase() != Phase::maybe)
            return kLookAgain;
    }
    if (side_ == Side::server && !sw_.interested()) {
        // A server that only writes (it sends a file, a feed) serves the connection as
        // surely as one that reads: its parked request may be accepted.
        lk.unlock();
        note_interest();
        lk.lock();
        return kLookAgain;
    }
    if (shut_held_) {  // (shutdown(SHUT_WR) waits for the PROOF: as after the kernel's)
        if (!(flags & MSG_NOSIGNAL))
            raise(SIGPIPE);
        return -EPIPE;
    }
    if (ssize_t h = hold_for_proof_locked(lk, flags, dl); h != 0)
        return h;
    ssize_t r = RS_REAL(sendmsg)(call_fd_locked(fd), msg, flags | MSG_DONTWAIT);
    if (r >= 0) {
        // The urgent byte is not in the peer's in-band stream (one per send;
        // SO_OOBINLINE is not supported).
        sw_.sent_on_tcp(static_cast<uint64_t>(r) - ((flags & MSG_OOB) && r > 0 ? 1 : 0));
        count_sent(static_cast<uint64_t>(r));
        return r;
    }
    if (errno != EAGAIN || (flags & MSG_DONTWAIT) || nonblocking())
        return -errno;
    // Wait for room in the TCP send buffer (in slices, and woken by the switch: then the
    // bytes go to the ring).
    int w = wait(sh_.rd_fd(), POLLIN, POLLOUT, true, lk, dl);
    return w < 0 ? w : kLookAgain;
}

ssize_t Conn::hold_for_proof_locked(std::unique_lock<util::WaitedMutex> &lk, int flags, Deadline &dl) noexcept
{
    if (side_ != Side::server || !sw_.frame_pending())
        return 0;
    poll_cq_locked();  // (the PROOF_AT's completion writes the PROOF)
    if (!sw_.frame_pending())
        return sw_.phase() == Phase::verifying ? 0 : kLookAgain;
    if (sw_.phase() != Phase::verifying && !sw_.frame_started())
        return kLookAgain;
    if (sw_.frame_started()) {
        // The rest of the PROOF goes first: the send buffer is full, as for any write.
        if ((flags & MSG_DONTWAIT) || nonblocking())
            return -EAGAIN;
        int w = wait(sh_.rd_fd(), POLLIN, POLLOUT, true, lk, dl);
        return w < 0 ? w : kLookAgain;
    }
    // The PROOF_AT is on its way to the client (a round trip): the program's bytes
    // follow the PROOF, whether the socket blocks or not.
    if (sw_.frame_wait_over(Clock::now())) {
        sw_.end_frame();  // (the client never sees a PROOF: it stays on TCP too)
        give_up_verify_locked(Reason::timeout);
        return kLookAgain;
    }
    lk.unlock();
    pollfd p{comp_fd(), POLLIN, 0};
    RS_REAL(poll)(&p, 1, 1);
    lk.lock();
    return kLookAgain;
}

void Conn::finish_proof_locked(std::unique_lock<util::WaitedMutex> &lk) noexcept
{
    if (side_ != Side::server || !sw_.frame_pending())
        return;
    const auto until = Clock::now() + std::chrono::milliseconds(rt::config().probe_timeout_ms + 250);
    while (sw_.phase() == Phase::verifying && sw_.frame_pending() && !closed_ && Clock::now() < until) {
        poll_cq_locked();  // (the PROOF_AT's completion writes it)
        if (!sw_.frame_pending())
            break;
        const bool started = sw_.frame_started();
        lk.unlock();
        pollfd p[2] = {{comp_fd(), POLLIN, 0}, {tcp_fd_, POLLOUT, 0}};
        RS_REAL(poll)(p, started ? 2 : 1, 5);
        lk.lock();
    }
    if (sw_.phase() == Phase::verifying && sw_.frame_pending() && !sw_.frame_started()) {
        // Never written: the client finds the end of the stream where it was to stand.
        sw_.end_frame();
        give_up_verify_locked(Reason::closed_early);
    }
}

ssize_t Conn::sendmsg(int fd, const msghdr *msg, int flags) noexcept
{
    // Declared before the lock, so it runs after the lock is released (the engine's lock
    // comes before a connection's).
    struct WatchAfter {
        Conn *c = nullptr;
        ~WatchAfter()
        {
            if (c != nullptr)
                c->refresh_watch();
        }
    } watch_after;
    sig::clear_last();  // a handler that runs from here on interrupts the call's waits
    std::unique_lock<util::WaitedMutex> lk(mu_);
    Deadline dl;
    const size_t total = iov::total(msg);
    size_t done = 0;
    RingPath::Status &st = ring_.st;
    for (;;) {
        const Phase p = sw_.phase();
        if (p == Phase::tcp) {
            const int kfd = call_fd_locked(fd);  // (as in recvmsg)
            lk.unlock();
            ssize_t r = RS_REAL(sendmsg)(kfd, msg, flags);
            return r < 0 ? -errno : r;
        }
        if (p != Phase::rdma) {  // before the switch: TCP, counted
            const ssize_t r = send_presw_locked(lk, fd, msg, flags, dl);
            if (r == kLookAgain)
                continue;
            return r;
        }
        poll_cq_locked();
        if (fb_.active() || awaiting_) {
            const ssize_t r = send_fallback_locked(lk, fd, msg, flags, done, dl);
            if (r == kLookAgain)
                continue;
            if (r != kNotHere)
                return r;
        }
        if ((flags & MSG_OOB) && total > 0 && done == 0 && !st.broken() && !st.shut_wr && !st.peer_closed) {
            // Urgent data goes on the TCP socket (the peer's kernel shows POLLPRI and
            // keeps it for recv(MSG_OOB)); the bytes before the last are ordinary data.
            const int kfd = call_fd_locked(fd);
            lk.unlock();
            return send_urgent(kfd, msg, total, flags);
        }
        // (Also in a fork child, whose copy is otherwise dead: the TCP socket is shared.)
        if (st.peer_closed && (link_.dead() || !st.broken()) && !st.shut_wr && done == 0) {
            // The peer closed: as with the kernel's TCP, the bytes go to a socket nobody
            // reads, and its kernel answers with an RST (then EPIPE and SIGPIPE here).
            const int kfd = call_fd_locked(fd);
            lk.unlock();
            ssize_t r = RS_REAL(sendmsg)(kfd, msg, flags);
            int e = errno;
            lk.lock();
            if (r > 0)
                count_sent(static_cast<uint64_t>(r));
            return r < 0 ? -e : r;
        }
        if (st.broken() || st.shut_wr) {
            if (done > 0)
                return static_cast<ssize_t>(done);
            if (!st.shut_wr && !st.reset_reported && st.reset) {
                st.reset_reported = true;
                return -ECONNRESET;
            }
            if (!(flags & MSG_NOSIGNAL))
                raise(SIGPIPE);
            return -EPIPE;
        }
        if (total == 0)
            return 0;
        if (ring_.can_send()) {
            const uint64_t space = ring_.space();
            size_t n = total - done < space ? total - done : static_cast<size_t>(space);
            if (n > neg::kImmValueMask)
                n = neg::kImmValueMask;
            // Coalesce a small write while a signalled one is in flight.
            const bool hold = n < RingPath::kCoalesceBelow && link_.signalled_in_flight();
            ssize_t r = ring_.send(msg, done, n, hold);
            if (hold && ring_.holding() && !coalescing_watched_.exchange(true))
                watch_after.c = this;
            if (r < 0 && fallback_on_failure_locked())
                continue;  // (not staged: the bytes go to the TCP socket after the backlog)
            if (r < 0)
                return done > 0 ? static_cast<ssize_t>(done) : r;
            done += static_cast<size_t>(r);
            count_sent(static_cast<uint64_t>(r));
            update_shadows_locked();
            if (done == total || (flags & MSG_DONTWAIT) || nonblocking())
                return static_cast<ssize_t>(done);
            continue;
        }
        if ((flags & MSG_DONTWAIT) || nonblocking()) {
            update_shadows_locked();
            return done > 0 ? static_cast<ssize_t>(done) : -EAGAIN;
        }
        update_shadows_locked();
        ring_.flush();
        int w = wait(sh_.wr_fd(), POLLOUT, 0, true, lk, dl);
        if (w < 0)
            return done > 0 ? static_cast<ssize_t>(done) : w;
    }
}

ssize_t Conn::send_fallback_locked(std::unique_lock<util::WaitedMutex> &lk, int fd, const msghdr *msg, int flags,
                                   size_t done, Deadline &dl) noexcept
{
    const RingPath::Status &st = ring_.st;
    if (st.broken() || st.shut_wr)
        return kNotHere;
    if (awaiting_ && !fb_.active())
        peer_fell_back_locked();
    fallback_step_locked(tcp_fd());
    if (st.broken())
        return kNotHere;
    if (!fb_.active() || !fb_.out_done()) {
        // Our frame and the bytes the peer may not have go first (and, while we wait for
        // the peer's frame, nothing of ours may): the send buffer is full, as for any
        // write.
        if ((flags & MSG_DONTWAIT) || nonblocking()) {
            update_shadows_locked(true);  // (not writable: the next room is an edge)
            return done > 0 ? static_cast<ssize_t>(done) : -EAGAIN;
        }
        const int w = wait(sh_.wr_fd(), POLLOUT, fb_.active() ? POLLOUT : POLLIN, true, lk, dl);
        if (w < 0)
            return done > 0 ? static_cast<ssize_t>(done) : w;
        return kLookAgain;
    }
    const int kfd = call_fd_locked(fd);
    lk.unlock();
    const ssize_t r = done == 0 ? RS_REAL(sendmsg)(kfd, msg, flags) : iov::tcp_send_at(kfd, msg, done, flags);
    const int e = errno;
    lk.lock();
    if (r > 0)
        count_sent(static_cast<uint64_t>(r));
    if (r < 0 && (e == EAGAIN || e == EWOULDBLOCK))
        update_shadows_locked(true);
    if (r < 0)
        return done > 0 ? static_cast<ssize_t>(done) : -e;
    return static_cast<ssize_t>(done) + r;
}

int Conn::urgent_inline() noexcept
{
    // Urgent bytes in-band would stand in the TCP stream while the rest of the bytes
    // come through the ring, and nothing tells where among them: the ring cannot place
    // them.
    std::lock_guard<util::WaitedMutex> lk(mu_);
    switch (sw_.phase()) {
    case Phase::maybe:
        decide_tcp_locked(Reason::urgent_data);
        return 0;
    case Phase::tcp:
        return 0;
    default:
        return -ENOPROTOOPT;
    }
}

bool Conn::urgent_inline_set() const noexcept
{
    int on = 0;
    socklen_t len = sizeof on;
    const int e = errno;
    const bool set = RS_REAL(getsockopt)(tcp_fd_, SOL_SOCKET, SO_OOBINLINE, &on, &len) == 0 && on != 0;
    errno = e;
    return set;
}

ssize_t Conn::send_urgent(int fd, const msghdr *msg, size_t total, int flags) noexcept
{
    ssize_t head = 0;
    if (total > 1) {
        iovec iv[64];
        msghdr m{};
        m.msg_iov = iv;
        size_t left = total - 1;
        for (size_t i = 0; i < msg->msg_iovlen && left > 0 && m.msg_iovlen < 64; ++i) {
            size_t n = msg->msg_iov[i].iov_len < left ? msg->msg_iov[i].iov_len : left;
            if (n == 0)
                continue;
            iv[m.msg_iovlen++] = {msg->msg_iov[i].iov_base, n};
            left -= n;
        }
        head = sendmsg(fd, &m, flags & ~MSG_OOB);
        if (head < static_cast<ssize_t>(total - 1))
            return head;
    }
    // The last byte of the message.
    uint8_t last = 0;
    size_t skip = total - 1;
    for (size_t i = 0; i < msg->msg_iovlen; ++i) {
        if (skip < msg->msg_iov[i].iov_len) {
            last = static_cast<const uint8_t *>(msg->msg_iov[i].iov_base)[skip];
            break;
        }
        skip -= msg->msg_iov[i].iov_len;
    }
    ssize_t r = RS_REAL(send)(fd, &last, 1, flags);
    if (r < 0)
        return head > 0 ? head : -errno;
    std::lock_guard<util::WaitedMutex> lk(mu_);
    count_sent(1);
    return head + 1;
}

int Conn::shutdown(int fd, int how) noexcept
{
    std::unique_lock<util::WaitedMutex> lk(mu_);
    // Reading shut down before the switch: recorded first, so that nothing decided below
    // lets a held FIN go out ahead of the negotiation's last bytes.
    if ((how == SHUT_RD || how == SHUT_RDWR) && sw_.phase() != Phase::rdma)
        sw_.note_tcp_shutdown(SHUT_RD);
    if (shut_held_ && how != SHUT_RD) {  // (shut down already, as far as the program sees)
        lk.unlock();
        if (how == SHUT_RDWR)
            return RS_REAL(shutdown)(fd, SHUT_RD) < 0 ? -errno : 0;
        return 0;
    }
    // A kernel socket whose FIN is out and which reads no more answers any byte that
    // still arrives with a reset.  Before the switch, bytes of ours may still come after
    // the program's last ones (a PROOF to the client, a CONFIRM to the server): a
    // shutdown of both directions must not reach the kernel before them.
    const bool ends_both = sw_.tcp_shut_rd() && (how != SHUT_RD || sw_.tcp_shut_wr());
    const bool client_held = side_ == Side::client && sw_.phase() == Phase::maybe && sw_.established() &&
                             sw_.deferred_tcp() == Reason::none;
    bool proof_due = false;
    if (side_ == Side::client && sw_.phase() == Phase::maybe && !(client_held && how != SHUT_RD)) {
        decide_tcp_locked(Reason::closed_early);  // a switch could not send its CONFIRM
        // Still undecided: its PROOF is on its way.  The FIN waits for it: the progress
        // thread takes it out of the stream as it comes (or a read, or the close), and
        // the decision that follows lets the FIN go.
        proof_due = ends_both && sw_.phase() == Phase::maybe && sw_.proof_ahead();
    }
    const bool server_held =
        side_ == Side::server && sw_.phase() == Phase::verifying && (!sw_.proof_written() || ends_both);
    if ((client_held || server_held || proof_due) && how != SHUT_RD) {
        // A server's PROOF (to come: the RDMA connection may not even be established
        // yet), a client's CONFIRM (once it has the PROOF) must stand in the stream
        // before its FIN: the TCP socket is shut down once it is written, or once the
        // connection is decided without it (a client that switches ends its stream over
        // RDMA instead).  The program sees the kernel's shutdown at once (a write fails
        // with EPIPE).
        sw_.note_tcp_shutdown(how);
        shut_held_ = true;
        lk.unlock();
        if (how == SHUT_RDWR)
            return RS_REAL(shutdown)(fd, SHUT_RD) < 0 ? -errno : 0;
        return 0;
    }
    if (sw_.phase() != Phase::rdma) {
        // A server that has not switched yet: its FIN goes into the TCP stream after its
        // TCP bytes; if the connection switches all the same, the ring's end of the
        // stream follows it (try_confirm_locked).
        sw_.note_tcp_shutdown(how);
        lk.unlock();
        return RS_REAL(shutdown)(fd, how) < 0 ? -errno : 0;
    }
    if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
        return -EINVAL;
    RingPath::Status &st = ring_.st;
    if ((fb_.active() || awaiting_) && !st.broken()) {
        // Fallen back: reading ends here (the peer's frame may still have to come out of
        // the stream); writing ends after the backlog, with the kernel's FIN.
        if (how != SHUT_WR) {
            st.shut_rd = true;
            // (Once the peer's frame is out of the stream: a reader blocked in the
            // kernel's recv wakes, as after the kernel's own shutdown.)
            if (fb_.in_done())
                RS_REAL(shutdown)(call_fd_locked(fd), SHUT_RD);
        }
        if (how != SHUT_RD && !st.shut_wr) {
            st.shut_wr = true;
            fb_.shut_after();
            fallback_step_locked(tcp_fd());
        }
        update_shadows_locked(true);
        return 0;
    }
    // Both FINs exchanged: the kernel's socket would be closed (TIME_WAIT or CLOSE).
    if (st.fin_sent && st.peer_fin)
        return -ENOTCONN;
    if (how != SHUT_WR)
        st.shut_rd = true;
    if (how != SHUT_RD && !st.shut_wr) {
        st.shut_wr = true;
        ring_.flush();  // every byte before the FIN
        if (!st.fin_sent && !st.broken() && ring_.post_ctrl(neg::Imm::fin, 0) == 0)
            st.fin_sent = true;
    }
    update_shadows_locked();
    return 0;
}

int Conn::bytes_readable() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    poll_cq_locked();
    // The server's bytes from before its switch, still on the TCP socket, come first.
    uint64_t n = ring_.avail() + tcp_prefix_bytes_locked();
    if (fb_.active() && at_peer_frame_locked()) {
        fallback_step_locked(tcp_fd());
        int k = 0;
        if (fb_.in_done() && RS_REAL(ioctl)(tcp_fd_, FIONREAD, &k) == 0 && k > 0)
            n += static_cast<uint64_t>(k);
    }
    return n > INT_MAX ? INT_MAX : static_cast<int>(n);
}

int Conn::bytes_unacked() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    poll_cq_locked();
    uint64_t n = ring_.unacked();
    if (fb_.active()) {
        int k = 0;
        n = fb_.out_left() + (RS_REAL(ioctl)(tcp_fd_, SIOCOUTQ, &k) == 0 && k > 0 ? static_cast<uint64_t>(k) : 0);
    }
    return n > INT_MAX ? INT_MAX : static_cast<int>(n);
}

Counters Conn::counters(int fd) noexcept
{
    if (sw_.phase() == Phase::tcp) {
        // (The kernel counts a PROOF in the stream; the program never saw it.)
        Counters k = kernel_tcp().counters(fd);
        std::lock_guard<util::WaitedMutex> lk(mu_);
        uint64_t &n = side_ == Side::client ? k.bytes_received : k.bytes_sent;
        n -= n < sw_.proof_bytes() ? n : sw_.proof_bytes();
        return k;
    }
    std::lock_guard<util::WaitedMutex> lk(mu_);
    return counters_;
}

}  // namespace rdmasock
