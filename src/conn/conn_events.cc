// Conn: completions (from the progress thread or a waiting call), TCP events and
// readiness.
#include "conn/rdma_conn.hh"

#include <poll.h>
#include <sys/ioctl.h>

#include "base/fd.hh"
#include "base/log.hh"
#include "base/real.hh"
#include "process/runtime.hh"
#include "process/socket.hh"

namespace rdmasock {

/* ---- completions ------------------------------------------------------------------------ */

void Conn::poll_cq_locked() noexcept
{
    if (!link_.usable())
        return;
    if (ring_.frozen()) {
        // Fallen back to TCP: what still completes (flushed requests, the peer's writes
        // before it knew) is taken out and ignored.
        link_.poll([](uint32_t) {}, [](ibv_wc_status) {});
        return;
    }
    link_.poll([this](uint32_t imm) { take_imm_locked(imm); },
               [this](ibv_wc_status status) {
                   if (!ring_.st.failed && !ring_.st.reset && status != IBV_WC_WR_FLUSH_ERR)
                       RS_DEBUG("connection fd=%d: completion error %s", tcp_fd(), ibv_wc_status_str(status));
                   if (!ring_.st.peer_fin)
                       ring_.st.failed = true;
                   // (A cause of this side's: the link went down here.)
                   if (status == IBV_WC_LOC_QP_OP_ERR || status == IBV_WC_LOC_LEN_ERR ||
                       status == IBV_WC_LOC_PROT_ERR)
                       local_failure_ = true;
               });
    if (!ring_.st.failed)
        link_.refill_recvs();
    if (ring_.holding() && !link_.signalled_in_flight())
        ring_.flush();  // what the coalesced writes were waiting for has completed
    if (sw_.frame_pending())
        push_frame_locked();
    if (client_fault_) {
        // (Here, not in take_imm_locked(): deciding stops the queue pair and reads the
        // completion queue once more.)
        client_fault_ = false;
        if (sw_.phase() == Phase::maybe) {
            RS_DEBUG("connection fd=%d: the RDMA peer sent a message before the switch: TCP", tcp_fd());
            decide_tcp_locked(Reason::bad_message);
        }
    }
    if (ring_.st.failed && !ring_.st.reset)
        fallback_on_failure_locked();
}

/* ---- fallback to TCP mid-stream ------------------------------------------------------- */

bool Conn::can_fall_back_locked() const noexcept
{
    const RingPath::Status &st = ring_.st;
    if (sw_.phase() != Phase::rdma || closed_ || tcp_fd() < 0 || link_.dead() || st.reset || st.peer_closed ||
        close_fin_posted_)
        return false;
    // (The program shut the TCP socket down before the switch: our frame cannot go, or
    // the peer's cannot be read.)
    if (sw_.tcp_shut_wr() || sw_.tcp_shut_rd())
        return false;
    // A client finds the server's frame after the TCP bytes the PREFIX counts, and its
    // CONFIRM must be whole in its stream; a server falls back only once the client has
    // its PREFIX (that completion in).
    if (side_ == Side::client)
        return !sw_.frame_pending() && sw_.prefix_known();
    return link_.completed() >= prefix_wr_;
}

bool Conn::start_fallback_locked(const char *why) noexcept
{
    if (fb_.active())
        return true;
    RingPath::Status &st = ring_.st;
    const int fd = tcp_fd();
    if (!can_fall_back_locked())
        return false;
    uint64_t start = ring_.acked();
    if (fb_.have_peer()) {
        // Its count: what it has of our stream (it resends from ours).
        if (fb_.peer_count() < ring_.acked() || fb_.peer_count() > ring_.posted())
            return false;
        start = fb_.peer_count();
    }
    awaiting_ = false;
    ring_.freeze();
    up_.release_rdma(*this);  // the queue pair stops: the peer learns it (DISCONNECTED) and answers
    link_.poll([](uint32_t) {}, [](ibv_wc_status) {});
    // Our count: what we hold of the peer's stream (read, or in the ring: read first;
    // only what the program read when the connection leaves the process, leave()).
    const uint64_t residue = ring_.avail();
    const uint64_t count = ring_.consumed() + (leaving_ > 0 ? 0 : residue);
    if (leaving_ > 0)
        ring_.drop_residue();
    fb_.begin(count, start, ring_.produced(), st.shut_wr, sw_.nonce(),
              {ring_.staging(), ring_.staging_size()});
    if (sock_ != nullptr)
        sock_->reason.store(Reason::fell_back, std::memory_order_relaxed);
    fell_back_.store(true, std::memory_order_relaxed);
    log::write(log::kInfo, "event=fallback fd=%d role=%s why=\"%s\" resend_bytes=%llu residue_bytes=%llu", shown_fd(),
               side_ == Side::client ? "client" : "server", why,
               static_cast<unsigned long long>(ring_.produced() - start),
               static_cast<unsigned long long>(residue));
    RS_DEBUG("connection fd=%d: FALLBACK count %llu start %llu end %llu (acked %llu, posted %llu)%s", shown_fd(),
             static_cast<unsigned long long>(count), static_cast<unsigned long long>(start),
             static_cast<unsigned long long>(ring_.produced()), static_cast<unsigned long long>(ring_.acked()),
             static_cast<unsigned long long>(ring_.posted()), fb_.have_peer() ? ", after the peer's" : "");
    fallback_step_locked(fd);
    if (!fb_out_watched_) {
        // Writable edges come from the TCP socket from now on (the backlog, and the
        // program's epoll waiters).
        fb_out_watched_ = true;
        up_.watch_tcp_out(*this, true);
    }
    update_shadows_locked(true);
    sh_.wake();
    return true;
}

bool Conn::await_peer_fallback_locked() noexcept
{
    if (fb_.active() || awaiting_)
        return true;
    if (!can_fall_back_locked())
        return false;
    ring_.freeze();
    up_.release_rdma(*this);
    link_.poll([](uint32_t) {}, [](ibv_wc_status) {});
    awaiting_ = true;
    fb_until_ = Clock::now() + std::chrono::milliseconds(rt::config().fallback_wait_ms);
    up_.timer_set(*this);  // (a program's call may have found the failure: nothing else wakes it)
    RS_DEBUG("connection fd=%d: the RDMA peer's queue pair is gone: waiting for its FALLBACK", shown_fd());
    peer_fell_back_locked();  // (it may be there already)
    update_shadows_locked(true);
    sh_.wake();
    return true;
}

void Conn::fail_and_abort_locked(const char *why) noexcept
{
    fail(why);
    const int fd = tcp_fd();
    if (fd < 0)
        return;
    sockaddr unspec{};
    unspec.sa_family = AF_UNSPEC;
    const int saved = errno;
    RS_REAL(connect)(fd, &unspec, sizeof unspec);  // (the kernel resets a connected TCP socket)
    errno = saved;
}

bool Conn::fallback_on_failure_locked() noexcept
{
    if (fb_.active() || awaiting_)
        return true;
    // (Before the switch a failure of the queue pair is the negotiation's: TCP.)
    if (!ring_.st.failed || ring_.st.reset || sw_.phase() != Phase::rdma || closed_ || link_.dead())
        return false;
    ring_.st.failed = false;  // (as the fallback starts: the frame goes out at once)
    if (local_failure_ ? start_fallback_locked("the RDMA path failed") : await_peer_fallback_locked())
        return true;
    ring_.st.failed = true;
    fail_and_abort_locked("the RDMA path failed, and the connection cannot fall back to TCP");
    return false;
}

void Conn::peer_fell_back_locked() noexcept
{
    const int fd = tcp_fd();
    if (fd < 0 || fb_.active() || ring_.st.broken() || !at_peer_frame_locked())
        return;
    if (!ring_.frozen()) {
        poll_cq_locked();  // (a client takes in the PREFIX first: the frame stands after its TCP bytes)
        if (fb_.active() || ring_.st.broken())
            return;
    }
    uint8_t head[neg::kFallbackSize];
    const ssize_t r = RS_REAL(recv)(fd, head, sizeof head, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        // The end of the stream (the peer's liveness is handled elsewhere), unless the
        // queue pair is gone already: then the peer is.
        if (awaiting_)
            fail("the RDMA peer's TCP connection ended without a FALLBACK");
        return;
    }
    if (r < 0)
        return;
    neg::Fallback f;
    const neg::ConfirmMatch m = neg::match_fallback(head, static_cast<size_t>(r), sw_.nonce(), &f);
    if (m == neg::ConfirmMatch::partial)
        return;  // (the rest comes with the next edge)
    const char *why = "bytes other than a FALLBACK on the TCP stream after the switch";
    if (m == neg::ConfirmMatch::no || fb_.read_peer_frame(fd, sw_.nonce(), &why) < 0 ||
        !start_fallback_locked("the peer fell back to TCP"))
        fail_and_abort_locked(why);
}

bool Conn::leave_can_start_locked() const noexcept
{
    // (A client also needs the server's pre-switch bytes read: its frame stands after them.)
    return !fb_.active() && !awaiting_ && !ring_.st.broken() && can_fall_back_locked() && at_peer_frame_locked();
}

namespace {
// Its words in the fallback's log line, and (the process, the program) in a reset's.
const char *fallback_cause(Conn::Leaving how) noexcept
{
    switch (how) {
    case Conn::Leaving::exec: return "the program exec'd";
    case Conn::Leaving::pass: return "the program passed the socket on";
    case Conn::Leaving::fork: return "a fork child holds the socket";
    }
    return "";
}
const char *leave_cause(Conn::Leaving how) noexcept
{
    switch (how) {
    case Conn::Leaving::exec: return "the process exec'd";
    case Conn::Leaving::pass: return "the program passed the socket on (SCM_RIGHTS)";
    case Conn::Leaving::fork: return "handed to a fork child's copy";
    }
    return "";
}
// A negotiation ended by it: the socket's reason.
Reason leave_reason(Conn::Leaving how) noexcept
{
    switch (how) {
    case Conn::Leaving::exec: return Reason::closed_early;
    case Conn::Leaving::pass: return Reason::passed;
    case Conn::Leaving::fork: return Reason::forked;
    }
    return Reason::forked;
}
// Conn::leaving_ while it lives.
struct LeavingFlag {
    int &on;
    explicit LeavingFlag(int &f) noexcept : on(f) { ++on; }
    ~LeavingFlag() { --on; }
};
}  // namespace

void Conn::leave_fail_locked(Leaving how, const char *what) noexcept
{
    char why[160];
    snprintf(why, sizeof why, "%s %s", leave_cause(how), what);
    if (how == Leaving::fork) {
        // This process still has the connection: it goes on as it was (a fallback under
        // way finishes on its own), and the copies report a reset.
        RS_DEBUG("connection fd=%d: not %s", shown_fd(), why);
        return;
    }
    fail_and_abort_locked(why);
}

void Conn::leave_start(Leaving how) noexcept
{
    if (handed_off() || inherited_.load(std::memory_order_acquire))
        return;
    std::lock_guard<util::WaitedMutex> lk(mu_);
    poll_cq_locked();
    if (!leave_can_start_locked())
        return;  // (leave() sees to it)
    LeavingFlag leaving(leaving_);
    start_fallback_locked(fallback_cause(how));
}

void Conn::leave(Clock::time_point until, Leaving how) noexcept
{
    if (handed_off() || inherited_.load(std::memory_order_acquire))
        return;  // (a fork child's copy: the parent's; or an accepted one another process may negotiate)
    std::unique_lock<util::WaitedMutex> lk(mu_);
    if (closed_)
        return;
    // Each wait: outside the lock, on the TCP socket and (while it is read) the
    // completion channel, 10 ms at most.
    auto nap = [&](short tcp_events) {
        const bool cq = link_.has_cq() && !ring_.frozen();
        pollfd pf[2] = {{tcp_fd(), tcp_events, 0}, {cq ? comp_fd() : -1, POLLIN, 0}};
        lk.unlock();
        RS_REAL(poll)(pf, 2, 10);
        lk.lock();
        if (cq && link_.has_cq() && !ring_.frozen()) {
            link_.ack_events();
            link_.arm();
        }
    };
    RingPath::Status &st = ring_.st;
    if (side_ == Side::client && sw_.phase() == Phase::maybe) {
        // The negotiation ends; a PROOF the server wrote (or will: its PROOF_AT got in)
        // is taken out of the stream, which it can be only once the program has read the
        // bytes before it.
        decide_tcp_locked(leave_reason(how));
        while (sw_.phase() == Phase::maybe && sw_.at_proof_offset() && Clock::now() < until) {
            if (presw_step_locked() != 0)
                break;
            nap(tcp_in_events());
        }
        if (sw_.phase() == Phase::maybe)
            leave_fail_locked(how, "before the server's PROOF was out of the TCP stream");
        return;
    }
    if (side_ == Side::server && sw_.phase() == Phase::maybe) {
        refusing_ = true;  // (no PROOF is in the stream yet, and none will be)
        decide_tcp_locked(how == Leaving::exec ? server_close_reason_locked() : leave_reason(how));
        return;
    }
    if (side_ == Side::server && sw_.phase() == Phase::verifying) {
        // The PROOF is (being) written: the client takes it out.  A client that has not
        // switched is stopped from switching; the CONFIRM of one that has is taken, and
        // the connection switches, to fall back below.
        finish_proof_locked(lk);
        if (sw_.frame_started() && sw_.frame_pending()) {  // (part of it in the stream)
            leave_fail_locked(how, "with its PROOF partly written");
            return;
        }
        poll_cq_locked();
        if (sw_.phase() == Phase::verifying && !sw_.switch_known() && !stop_for_switch_locked())
            decide_tcp_locked(leave_reason(how));
        while (sw_.phase() == Phase::verifying && presw_step_locked() == 0 && !sw_.before_switch_offset() &&
               Clock::now() < until)
            nap(tcp_in_events());
        if (sw_.phase() == Phase::verifying) {
            leave_fail_locked(how, "before its client's CONFIRM was out of the TCP stream");
            return;
        }
    }
    if (sw_.phase() != Phase::rdma)
        return;  // (on TCP: the stream is the program's)
    poll_cq_locked();
    strip_proof_locked();
    if (!st.broken() && !fb_.active() && !awaiting_ && st.peer_closed && ring_.avail() == 0 &&
        (side_ == Side::server || at_peer_frame_locked()))
        return;  // (the peer reads nothing more and sent all it will: its kernel's EOF follows)
    // From here a fallback that starts, ours or (while the lock is dropped) one the
    // progress thread starts for the peer's frame, leaves the ring's residue to be resent.
    LeavingFlag leaving(leaving_);
    // Just switched: a server's PREFIX must have completed (the client finds our frame
    // after the bytes it counts), a client's CONFIRM be whole in the stream and the
    // server's PREFIX in.
    while (!st.broken() && !fb_.active() && !awaiting_ && !closed_ && Clock::now() < until &&
           (side_ == Side::server ? link_.completed() < prefix_wr_ : sw_.frame_pending() || !sw_.prefix_known())) {
        if (side_ == Side::client && sw_.frame_pending())
            push_frame_locked();
        nap(side_ == Side::client && sw_.frame_pending() ? POLLOUT : 0);
        poll_cq_locked();
    }
    if (closed_)
        return;  // (another thread closed it meanwhile: its close saw to it)
    // A client finds the server's frame only after the server's bytes from before its
    // switch, which the program has not all read: they would come first, then the frame.
    if (side_ == Side::client && !fb_.active() && !at_peer_frame_locked()) {
        leave_fail_locked(how, "with the server's bytes from before its switch unread");
        return;
    }
    // The peer's queue pair ended already (it fell back, exec'd or died): its frame
    // starts ours, or none comes.
    while (!st.broken() && awaiting_ && !fb_.active() && !closed_ && Clock::now() < until) {
        peer_fell_back_locked();
        if (!awaiting_ || fb_.active())
            break;
        nap(POLLIN);
    }
    // (A fallback under way before this counted the ring's residue as ours: the socket's
    // next reader cannot get it.)
    const bool started = !st.broken() && (fb_.active() ? ring_.avail() == 0
                                                       : !awaiting_ && start_fallback_locked(fallback_cause(how)));
    while (started && !st.broken() && !closed_ && !(fb_.out_done() && fb_.in_done()) && Clock::now() < until) {
        fallback_step_locked(tcp_fd());
        if (st.broken() || (fb_.out_done() && fb_.in_done()))
            break;
        nap(static_cast<short>((fb_.in_done() ? 0 : POLLIN) | (fb_.out_done() ? 0 : POLLOUT)));
    }
    if (closed_)
        return;
    if (started && !st.broken() && fb_.out_done() && fb_.in_done()) {
        update_shadows_locked(true);  // (after a pass the program's waits go on: the kernel socket's readiness)
        return;
    }
    leave_fail_locked(how, "and the connection could not go back to its TCP socket first");
}

void Conn::fallback_step_locked(int fd) noexcept
{
    if (!fb_.active() || fd < 0 || ring_.st.broken())
        return;
    if (!fb_.out_done() && fb_.push(fd) < 0) {
        fail_and_abort_locked("the TCP connection failed during the fallback");
        return;
    }
    if (!fb_.in_done() && at_peer_frame_locked()) {
        const char *why = "";
        const int r = fb_.take_peer(fd, ring_.acked(), ring_.posted(), ring_.rx_size(), &why);
        if (r > 0 && ring_.st.shut_rd)
            RS_REAL(shutdown)(fd, SHUT_RD);  // (the program shut reading before the frames were through)
        if (r < 0) {
            char head[2 * neg::kFallbackSize + 1];
            fb_.peer_head(head, sizeof head);
            RS_DEBUG("connection fd=%d: the peer's FALLBACK: %s (read %s; acked %llu, posted %llu)", shown_fd(), why,
                     head, static_cast<unsigned long long>(ring_.acked()),
                     static_cast<unsigned long long>(ring_.posted()));
            fail_and_abort_locked(why);
        }
    }
}

unsigned Conn::fallback_events_locked() const noexcept
{
    pollfd pf{tcp_fd_, POLLIN | POLLOUT | POLLRDHUP | POLLPRI, 0};
    if (RS_REAL(poll)(&pf, 1, 0) <= 0)
        return 0;
    const unsigned ev = static_cast<unsigned>(pf.revents);
    unsigned m = ev & (POLLERR | POLLHUP | POLLPRI);
    if (fb_.in_done())
        m |= ev & (POLLIN | POLLRDHUP);
    else if (ev & (POLLRDHUP | POLLHUP | POLLERR))
        m |= POLLIN;  // (the read reports what became of the peer's frame)
    if (fb_.out_done())
        m |= ev & POLLOUT;
    return m;
}

void Conn::take_imm_locked(uint32_t imm) noexcept
{
    using Kind = RingPath::Found::Kind;
    const RingPath::Found f = ring_.take_imm(imm);
    if (side_ == Side::client && sw_.phase() == Phase::maybe) {
        // Before its switch a client expects only the server's PROOF_AT (once), telling
        // where in the TCP stream the PROOF stands.  A process that accepted the RDMA
        // connection without being the TCP peer gets no further than that: the bytes at
        // that offset decide.
        if (f.kind == Kind::proof_at && sw_.accept_proof_at(f.value))
            RS_DEBUG("connection fd=%d: PROOF_AT(%u) with %llu TCP bytes read", tcp_fd(), f.value,
                     static_cast<unsigned long long>(sw_.tcp_read()));
        else
            client_fault_ = true;
        return;
    }
    switch (f.kind) {
    case Kind::data:
    case Kind::fin:
    case Kind::reset:
        // A new arrival (the peer's bytes, its end of the stream or its reset): as the
        // kernel does for a TCP socket, edge-triggered waiters see an edge even when the
        // socket was readable already.
        if (sh_.has_users())
            sh_.edge();
        break;
    case Kind::credit:
        break;
    case Kind::prefix:
    case Kind::prefix_end:
        if (side_ != Side::client || !sw_.accept_prefix(f.value)) {
            fail("unexpected PREFIX");
            break;
        }
        // A TCP EOF seen before the server's switch ended its TCP bytes (a shutdown
        // before its switch); from the switch on it is the peer's liveness again.
        if (tcp_.eof)
            start_grace_locked();
        strip_proof_locked();
        // PREFIX_END: the server shut down writing before its switch, and its end of
        // the stream comes with the PREFIX, in the same completion: a poll that saw the
        // TCP FIN (POLLRDHUP) never finds the PREFIX without the end after it.
        if (f.kind == Kind::prefix_end) {
            ring_.st.peer_fin.store(true, std::memory_order_release);
            if (sh_.has_users())
                sh_.edge();
        }
        break;
    case Kind::proof_at:  // (a client's is handled above)
    case Kind::switch_at:
        if (side_ != Side::server || f.kind != Kind::switch_at || !sw_.accept_switch(f.value)) {
            if (side_ == Side::server && sw_.phase() == Phase::verifying)
                give_up_verify_locked(Reason::bad_message);
            else
                fail("unexpected SWITCH");
            break;
        }
        RS_DEBUG("connection fd=%d: SWITCH(%u) with %llu TCP bytes read", tcp_fd(), f.value,
                 static_cast<unsigned long long>(sw_.tcp_read()));
        // No deadline from here: the bytes at offset n decide (the CONFIRM, or anything
        // else: TCP), and a third party cannot write into the stream.  Giving up before
        // they came could deliver a late CONFIRM as the program's bytes.
        sh_.wake();
        break;
    case Kind::fault:
        fail(f.fault);
        break;
    }
}

void Conn::push_frame_locked() noexcept
{
    // Server: the PROOF (the connection is still verifying); client: the CONFIRM (it
    // is on RDMA already).
    const bool proof = side_ == Side::server;
    // (A PROOF partly in the stream is completed whatever happened meanwhile: bytes
    // after a part of it would be delivered with it.)
    const bool gone = proof ? sw_.phase() != Phase::verifying || ring_.st.broken() : ring_.st.broken();
    if (closed_ || (gone && !(proof && sw_.frame_started()))) {
        // The fd is gone, the connection was decided, or the message before the frame
        // failed: the client's SWITCH (the connection is reset), the server's PROOF_AT
        // (the client is gone, or never got it: no PROOF, and the connection is TCP).
        sw_.end_frame();
        if (sw_.frame_out_watched()) {
            sw_.set_frame_out_watch(false);
            up_.watch_tcp_out(*this, false);
        }
        if (proof && !closed_ && sw_.phase() == Phase::verifying)
            give_up_verify_locked(Reason::timeout);
        refresh_watch();
        return;
    }
    if (!sw_.frame_started() && !sw_.frame_due(link_.completed()))
        return;  // the message before it has not reached the peer yet
    const int w = sw_.write_frame(tcp_fd_);
    if (w == 0) {
        // The TCP send buffer is full of the bytes before the frame: the progress thread
        // writes the rest when it drains.
        if (!sw_.frame_out_watched()) {
            sw_.set_frame_out_watch(true);
            up_.watch_tcp_out(*this, true);
        }
        return;
    }
    sw_.end_frame();
    if (w > 0 && sw_.frame_out_watched()) {
        sw_.set_frame_out_watch(false);
        up_.watch_tcp_out(*this, false);
    }
    if (w < 0 && proof) {
        if (sw_.phase() == Phase::verifying)
            give_up_verify_locked(Reason::closed_early);  // (our end of the stream was shut down)
    } else if (w < 0) {
        fail("cannot write the CONFIRM");
    } else if (proof) {
        RS_DEBUG("connection fd=%d: PROOF written after %llu TCP bytes", tcp_fd(),
                 static_cast<unsigned long long>(sw_.tcp_sent()));
        // The program's FIN follows it; unless the program shut reading too: then the
        // client's CONFIRM, still to come, would meet a socket whose FIN is out and which
        // reads no more, and be answered with a reset.  The switch, or the decision for
        // TCP, lets it go.
        if (!sw_.tcp_shut_rd())
            release_shutdown_locked();
    }
    refresh_watch();
}

void Conn::refresh_watch() noexcept
{
    std::lock_guard<std::mutex> lk(watch_mu_);
    const bool want = needs_progress();
    if (want != comp_watched_) {
        up_.set_comp_watch(*this, want);
        comp_watched_ = want;
    }
}

void Conn::fail(const char *why) noexcept
{
    if (!ring_.st.broken())
        RS_DEBUG("connection fd=%d reset: %s", tcp_fd(), why);
    ring_.st.reset = true;
    update_shadows_locked(true);
}

void Conn::on_completion_event() noexcept
{
    bool unwatch = false;
    {
        // (Under the lock: the device's removal may release the queue meanwhile.)
        std::lock_guard<util::WaitedMutex> lk(mu_);
        if (!link_.usable())
            return;
        link_.ack_events();
        poll_cq_locked();
        link_.arm();
        poll_cq_locked();
        update_shadows_locked();
        // Nothing held back any more: the watch for it ends (a retired connection's
        // watch is the engine's, for the peer's FIN).
        if (!closed_ && !ring_.holding() && coalescing_watched_.load(std::memory_order_relaxed)) {
            coalescing_watched_.store(false);
            unwatch = true;
        }
    }
    if (unwatch)
        refresh_watch();  // outside the connection's lock, as every caller
}

unsigned Conn::peer_tcp_events_locked(unsigned events) const noexcept
{
    // After the program's shutdown(SHUT_RD) before the switch the socket says POLLRDHUP
    // at once, and POLLHUP once its FIN is out too: the peer's stream has not ended, nor
    // the connection been reset, for that.
    if (sw_.tcp_shut_rd() && (events & (POLLRDHUP | POLLHUP)) && !(events & POLLERR) &&
        !util::tcp_peer_ended(tcp_fd_))
        events &= ~static_cast<unsigned>(POLLRDHUP | POLLHUP);
    return events;
}

void Conn::on_tcp_event(unsigned events) noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (closed_)
        return;
    events = peer_tcp_events_locked(events);
    Phase p = sw_.phase();
    if ((events & POLLOUT) && sw_.frame_pending())
        push_frame_locked();  // the TCP socket drained: the rest of the PROOF or CONFIRM
    if (side_ == Side::server && p == Phase::verifying && (events & (POLLIN | POLLRDHUP | POLLHUP))) {
        // A client that closes right after its switch: its TCP FIN comes with the
        // CONFIRM, and this edge is the only one.  Once switched, the peer's liveness
        // counts from it (try_confirm_locked starts the grace period).
        if (events & (POLLRDHUP | POLLHUP | POLLERR))
            tcp_.eof = true;
        poll_cq_locked();
        try_confirm_locked();  // switch even if the program never reads (nothing before it)
        return;
    }
    if (side_ == Side::client && p == Phase::maybe && (events & (POLLIN | POLLRDHUP | POLLHUP | POLLERR))) {
        // The server's PROOF may have come (its PROOF_AT is in the completion queue by
        // then): take it and switch, even if the program never reads.  The edge may
        // also carry the server's EOF (this watch is edge-triggered: no second one), which
        // starts the grace time once the PREFIX says its TCP bytes are all there.
        if (events & (POLLRDHUP | POLLHUP | POLLERR))
            tcp_.eof = true;
        presw_step_locked();
        p = sw_.phase();
        if (p != Phase::rdma)
            return;
    }
    if (p != Phase::rdma)
        return;
    if (fb_.active()) {
        // Fallen back: the frames and the backlog move on, and the TCP socket's events
        // are the connection's (each arrival an edge, as the kernel's).
        fallback_step_locked(tcp_fd());
        if ((events & POLLPRI) && !tcp_.urgent)
            tcp_.urgent = true;
        if ((events & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) && sh_.has_users())
            sh_.edge();
        update_shadows_locked(true);
        return;
    }
    if (awaiting_) {
        // The peer's queue pair is gone: its frame, or the end of its stream, decides.
        if (events & (POLLIN | POLLRDHUP | POLLHUP | POLLERR))
            peer_fell_back_locked();
        if (!fb_.active()) {
            update_shadows_locked(true);
            return;
        }
        fallback_step_locked(tcp_fd());
        update_shadows_locked(true);
        return;
    }
    if ((events & POLLIN) && at_peer_frame_locked()) {
        peer_fell_back_locked();
        if (fb_.active() || ring_.st.broken())
            return;
    }
    if ((events & POLLPRI) && !tcp_.urgent) {
        tcp_.urgent = true;
        update_shadows_locked(true);
    }
    if (events & (POLLRDHUP | POLLHUP | POLLERR)) {
        if (!tcp_.eof) {
            tcp_.eof = true;
            // (A client whose server has not switched yet waits for its PREFIX: the
            // server may have shut down writing before its switch.)
            if (side_ != Side::client || sw_.prefix_known())
                start_grace_locked();
        }
        if ((events & (POLLHUP | POLLERR)) && !ring_.st.peer_fin)
            fail("the TCP connection was reset");
        else if ((events & (POLLHUP | POLLERR)) && ring_.st.peer_closed && !tcp_.error) {
            tcp_.error = true;  // the RST our writes after the peer's close provoked
            update_shadows_locked(true);
        }
    }
    if (side_ == Side::client && sw_.proof_ahead())
        strip_proof_locked();
    if (side_ == Side::client && !sw_.prefix_done() && (events & (POLLIN | POLLRDHUP)))
        update_shadows_locked(true);  // the server's pre-switch bytes (or its EOF) arrived on the TCP socket
}

void Conn::start_grace_locked() noexcept
{
    tcp_.grace_deadline = Clock::now() + std::chrono::milliseconds(rt::config().peer_grace_ms);
    // (No wake-up needed: the TCP socket's end that starts it is an event of the progress
    // thread's too, which then runs its timers.)
}

bool Conn::on_timer(Clock::time_point now) noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (side_ == Side::client && sw_.phase() == Phase::maybe && sw_.established() && !sw_.proof_verified() &&
        sw_.deferred_tcp() == Reason::none && !closed_) {
        // The server's PROOF must come before the client's time to switch is out.
        presw_step_locked();
        return sw_.phase() == Phase::maybe && sw_.deferred_tcp() == Reason::none && !sw_.proof_verified();
    }
    if (awaiting_ && !fb_.active() && !ring_.st.broken()) {
        // No frame from the peer in time: it is not there to answer (exec'd, died,
        // handed the socket on without us, or its link is down for good).  (A side
        // that started a fallback has its frame in the stream: TCP's own timeouts
        // apply to the answer, as to any byte.)
        if (now < fb_until_)
            return true;
        fail_and_abort_locked("no FALLBACK from the RDMA peer in time");
        return false;
    }
    if (!tcp_.eof || ring_.st.peer_fin || ring_.st.reset || fb_.active() ||
        tcp_.grace_deadline.time_since_epoch().count() == 0)
        return false;
    if (now < tcp_.grace_deadline)
        return true;
    // The peer's TCP connection closed and no FIN came over RDMA: the peer died.
    fail("peer closed its TCP connection without an RDMA FIN");
    return false;
}

/* ---- readiness -------------------------------------------------------------------------- */

bool Conn::readable_locked() const noexcept
{
    if (ring_.st.broken() || ring_.st.shut_rd || tcp_.error)
        return true;
    if (side_ == Side::client && !sw_.prefix_done())
        // The server's bytes from before its switch come first, from the TCP socket
        // (its EOF too): the eventfd follows them, so that it never stays readable with
        // nothing to read (an epoll waiter would spin on it).
        return tcp_.eof || tcp_prefix_bytes_locked() > 0;
    if (fb_.active())
        return ring_.avail() > 0 || (fallback_events_locked() & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0;
    if (awaiting_)
        return ring_.avail() > 0;
    const uint64_t lowat = static_cast<uint64_t>(rcvlowat_.load(std::memory_order_relaxed));
    return ring_.avail() >= lowat || ring_.st.peer_fin;
}

bool Conn::writable_locked() const noexcept
{
    if (ring_.st.broken() || ring_.st.shut_wr || ring_.st.peer_closed)
        return true;  // after the peer's close, writes go to the TCP socket
    if (fb_.active())
        return (fallback_events_locked() & (POLLOUT | POLLERR | POLLHUP)) != 0;
    if (awaiting_)
        return false;
    return ring_.can_send();
}

uint64_t Conn::tcp_prefix_bytes_locked() const noexcept
{
    if (side_ != Side::client || sw_.prefix_done())
        return 0;
    int tcp = 0;
    if (RS_REAL(ioctl)(tcp_fd_, FIONREAD, &tcp) != 0 || tcp <= 0)
        return 0;
    return sw_.prefix_cap(sw_.without_proof(static_cast<uint64_t>(tcp)));
}

void Conn::shadow_users(int delta) noexcept
{
    int before = sh_.add_users(delta);
    // epoll waiters see only the eventfds: while there are any, the progress thread
    // handles this connection's completions.
    if ((before == 0 && delta > 0) || (before + delta == 0 && delta < 0))
        refresh_watch();
}

void Conn::sync_shadows() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    poll_cq_locked();
    update_shadows_locked(true);
}

void Conn::update_shadows_locked(bool force) noexcept
{
    // Nobody watches the eventfds (no epoll registration): skip the two syscalls; the
    // first watcher brings them up to date.  Threads blocked in a call or in
    // poll/select wake on the completion channel; state changes that come from
    // elsewhere (a reset seen on the TCP socket) force the update.
    if (sw_.phase() != Phase::rdma || link_.dead() || (!force && !sh_.watched()))
        return;
    if (side_ == Side::client && !sw_.prefix_done()) {
        // The server's bytes from before its switch (its EOF too) arrive on the TCP
        // socket: each arrival is one edge for edge-triggered waiters, as the kernel's,
        // whichever comes first, the TCP socket's event or an update for another cause
        // that finds the bytes there (the event then finds nothing new).
        // (The count can fall: an urgent byte FIONREAD counted until the PREFIX capped
        // it.  Then follow it down, or the next arrival would give no edge.)
        const uint64_t arrived = sw_.tcp_taken() + tcp_prefix_bytes_locked() + (tcp_.eof ? 1 : 0);
        if (arrived < tcp_.arrived_seen)
            tcp_.arrived_seen = arrived;
        if (arrived > tcp_.arrived_seen) {
            tcp_.arrived_seen = arrived;
            sh_.edge();
        }
    }
    // (Urgent data wakes POLLPRI waiters: they recompute.)
    sh_.set(readable_locked() || tcp_.urgent, writable_locked());
}

unsigned Conn::poll_mask(int) noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (sw_.phase() != Phase::rdma) {
        pollfd pf{tcp_fd_, POLLIN | POLLOUT | POLLRDHUP, 0};
        return RS_REAL(poll)(&pf, 1, 0) > 0 ? static_cast<unsigned>(pf.revents) : 0;
    }
    poll_cq_locked();
    update_shadows_locked();
    const RingPath::Status &st = ring_.st;
    if (st.broken())
        return POLLIN | POLLOUT | POLLERR | POLLHUP | POLLRDHUP;
    if (awaiting_ && !fb_.active() && at_peer_frame_locked()) {
        peer_fell_back_locked();
        if (st.broken())
            return POLLIN | POLLOUT | POLLERR | POLLHUP | POLLRDHUP;
        if (!fb_.active())
            return (ring_.avail() > 0 || st.shut_rd ? POLLIN : 0u) | (st.shut_rd ? POLLRDHUP : 0u);
    }
    if (fb_.active() && at_peer_frame_locked()) {
        fallback_step_locked(tcp_fd());
        if (st.broken())
            return POLLIN | POLLOUT | POLLERR | POLLHUP | POLLRDHUP;
        unsigned fm = fallback_events_locked();
        if (ring_.avail() > 0 || st.shut_rd)
            fm |= POLLIN;
        if (st.shut_rd)
            fm |= POLLRDHUP;
        return fm;
    }
    unsigned m = 0;
    const uint64_t lowat = static_cast<uint64_t>(rcvlowat_.load(std::memory_order_relaxed));
    if (side_ == Side::client && !sw_.prefix_done()) {
        // The server's bytes from before its switch come first, from the TCP socket:
        // readable at its EOF, or once SO_RCVLOWAT bytes are there to read.
        pollfd pf{tcp_fd_, POLLIN | POLLRDHUP, 0};
        const bool tcp_eof = RS_REAL(poll)(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
        const uint64_t n = tcp_prefix_bytes_locked() + (sw_.prefix_known() ? ring_.avail() : 0);
        if (tcp_eof || st.shut_rd || n >= lowat)
            m |= POLLIN;
        // The server's end came before its PREFIX (it shut down writing before the
        // switch; its FIN over RDMA follows the PREFIX): the kernel's POLLRDHUP, seen by
        // a poll while the connection was still deciding, stays as the kernel's does.
        // (Parity readiness_ppoll, default mode, once: POLLRDHUP, then the switch, then
        // POLLIN alone.)
        if (tcp_eof)
            m |= POLLRDHUP;
    } else if (readable_locked()) {
        m |= POLLIN;
    }
    if (writable_locked())
        m |= POLLOUT;
    if (st.peer_fin) {
        m |= POLLRDHUP | POLLIN;
        if (st.shut_wr)
            m |= POLLHUP;
    }
    if (st.shut_rd)
        m |= POLLRDHUP | POLLIN;  // SHUT_RD: reads return EOF at once
    if (tcp_.urgent) {
        pollfd pf{tcp_fd_, POLLPRI, 0};
        if (RS_REAL(poll)(&pf, 1, 0) > 0 && (pf.revents & POLLPRI))
            m |= POLLPRI;
        else
            tcp_.urgent = false;  // read (MSG_OOB) meanwhile
    }
    if (st.peer_closed) {  // what the TCP socket says once the peer's RST came
        pollfd pf{tcp_fd_, POLLOUT, 0};
        if (RS_REAL(poll)(&pf, 1, 0) > 0)
            m |= static_cast<unsigned>(pf.revents) & (POLLERR | POLLHUP);
    }
    return m;
}

}  // namespace rdmasock
