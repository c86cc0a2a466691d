// Conn: set-up, fork and close.  The switch is in conn_switch.cc, completions and
// readiness in conn_events.cc, the program's calls in conn_io.cc.
#include "conn/rdma_conn.hh"

#include <poll.h>

#include "base/log.hh"
#include "base/real.hh"
#include "process/runtime.hh"
#include "process/socket.hh"

namespace rdmasock {

Conn::Conn(Side side, int tcp_fd, Upcalls &up) noexcept : Transport(true), side_(side), up_(up), tcp_fd_(tcp_fd) {}

Conn::~Conn()
{
    // The queue pair and the queues go before the rings (then the protection domain).
    link_.release_queues();
    ring_.release();
}

/* ---- set-up ------------------------------------------------------------------------------ */

Reason Conn::create_resources(std::shared_ptr<rdma::CmId> id, unsigned ring_log2) noexcept
{
    if (!sh_.ok())
        return Reason::resource;
    link_.set_id(std::move(id));
    auto ctx = link_.cm_id()->context();
    if (!ctx)
        return Reason::not_rdma_addr;
    kits::Kit k;
    if (Reason r = kits::obtain(ctx, ring_log2, Link::cq_entries(), k); r != Reason::none)
        return r;
    ring_.attach(std::move(k.rx), std::move(k.tx));
    return link_.create(k);
}

neg::RingInfo Conn::local_ring() const noexcept { return ring_.local_ring(); }

Reason Conn::set_peer_ring(const neg::RingInfo &r) noexcept { return ring_.set_peer_ring(r); }

Reason Conn::post_initial_receives() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (link_.post_recvs(Link::kRecvDepth) != 0 || link_.arm() != 0)
        return Reason::resource;
    cq_ready_ = true;
    return Reason::none;
}

std::shared_ptr<rdma::CmId> Conn::release_client_rdma() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (sw_.phase() == Phase::rdma)
        return {};
    cq_ready_ = false;
    return link_.release();
}

std::shared_ptr<rdma::CmId> Conn::restart_client_rdma() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (side_ != Side::client || sw_.phase() != Phase::maybe || closed_)
        return {};
    auto id = link_.cm_id_ref();
    cq_ready_ = false;
    link_.release_queues();  // the queue pair before the rings it used
    ring_.release();
    return id;
}

void Conn::before_fork() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    // A negotiating client counts its TCP bytes, and so does a server that has used its
    // connection (it may be switching): the child would move bytes behind that count.
    // Both processes keep such a connection on TCP.  (A server connection nobody used
    // yet goes to the first process that uses it: after_fork_parent/child.)
    if (sw_.phase() == Phase::maybe && !closed_ && (side_ == Side::client || sw_.interested()))
        decide_tcp_locked(Reason::forked);
}

bool Conn::continue_on(int keep) noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_)
        return false;
    if (sw_.phase() == Phase::maybe) {
        // Before the switch (the default mode's first moments): the calls still blocked
        // go on over TCP, on the library's duplicate, as the kernel's go on with the
        // socket they hold; nothing switches after the program's close.  (They would
        // otherwise wake on a closed number, or on the file that reused it.)
        // (The reason a close would have logged: a server's undecided one.)
        decide_tcp_locked(side_ == Side::server ? server_close_reason_locked() : Reason::closed_early);
        tcp_fd_ = keep;
        handed_off_ = true;
        return true;
    }
    // On RDMA: from there on no path reads or writes through the program's number (the
    // server's bytes from before its switch are read through tcp_fd_).
    if (sw_.phase() != Phase::rdma || ring_.st.broken() || ring_.st.peer_closed || tcp_.urgent)
        return false;
    tcp_fd_ = keep;
    handed_off_ = true;
    return true;
}

void Conn::renumber(int from, int to) noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (!closed_ && tcp_fd_ == from)
        tcp_fd_ = to;
}

void Conn::mark_closed() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = true;
    sw_.leave_pending();
    release_shadows_locked();
}

void Conn::release_shadows() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    release_shadows_locked();
}

void Conn::release_shadows_locked() noexcept
{
    // Closed, or on TCP for good (a deferred client still reads through the library):
    // nobody will look at the eventfds again once nobody does now.
    if ((closed_ || sw_.phase() == Phase::tcp) && !sh_.watched())
        sh_.close_fds();
}

void Conn::enter_pending() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    sw_.enter_pending();
}

void Conn::after_fork_parent() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (side_ == Side::server && sw_.phase() == Phase::maybe && !sw_.interested() && !closed_)
        forked_unused_.store(true, std::memory_order_release);
}

void Conn::after_fork_child() noexcept
{
    // The parent's queue pair and rings are not usable here; another thread may have
    // held the lock at fork time.
    new (&mu_) std::mutex();
    new (&cv_) std::condition_variable();
    new (&watch_mu_) std::mutex();
    link_.mark_dead();  // the verbs objects are still the parent's
    if (side_ == Side::server && sw_.phase() == Phase::maybe && !sw_.interested()) {
        // Accepted, not yet read, no RDMA bound (a request is only accepted once the
        // connection is read).  A fork-per-connection server: the child that uses it
        // negotiates it, its listener's holder sending the request on to it.
        if (sock_ != nullptr && sock_->registry) {
            adoptable_.store(true, std::memory_order_release);
            return;
        }
        // (No table: the child serves it on TCP; the parent's copy, once closed,
        // declines any request for it.)
        sw_.forget_pending();
        sw_.on(Switchover::Event::decide_tcp);
        if (sock_ != nullptr) {
            sock_->reason.store(Reason::forked, std::memory_order_relaxed);
            sock_->set_offloaded(false);
        }
        return;
    }
    ring_.st.reset = true;
    ring_.st.failed = true;
    // A copy of a connection with RDMA bound: the parent's, which logs it; this one
    // reports a reset and logs nothing at its close.
    if (sw_.phase() == Phase::rdma || sw_.phase() == Phase::verifying)
        parent_copy_.store(true, std::memory_order_release);
}

/* ---- close ------------------------------------------------------------------------------ */

void Conn::close_connection(bool abortive) noexcept
{
    // A fork child's copy of a connection with RDMA bound is the parent's: nothing to
    // send or wait for here (a child that closes every descriptor waited for the
    // parent's SWITCH up to the probe timeout per connection being verified).
    if (parent_copy_.load(std::memory_order_acquire))
        return;
    std::unique_lock<std::mutex> lk(mu_);
    if (side_ == Side::client && sw_.phase() == Phase::maybe && !closed_) {
        // A negotiating client stays on TCP (closed_early): its queue pair stops, and a
        // PROOF_AT that got in before means a PROOF in the stream.  Unread, it would make
        // our kernel answer with a reset where the program's close sends a FIN: it is
        // taken out first when it is next (briefly waited for: it follows its PROOF_AT by
        // the server's write).  (Bytes of the program's left unread reset the connection
        // at close, as the kernel's TCP does.)
        decide_tcp_locked(Reason::closed_early);
        const auto until = Clock::now() + std::chrono::milliseconds(200);
        while (!abortive && sw_.phase() == Phase::maybe && sw_.at_proof_offset() && Clock::now() < until) {
            if (presw_step_locked() != 0)
                break;
            lk.unlock();
            pollfd pf{tcp_fd_, POLLIN, 0};
            RS_REAL(poll)(&pf, 1, 10);
            lk.lock();
        }
        return;
    }
    if (side_ == Side::server && !closed_)
        finish_proof_locked(lk);  // (the client switches only once it has it)
    if (side_ == Side::server && sw_.phase() == Phase::verifying && !closed_) {
        // The client is switched (or about to): its SWITCH and CONFIRM are on their
        // way.  Take them and switch before closing, so that the client reads an
        // orderly EOF (our FIN) and no unread CONFIRM makes our kernel send an RST.
        // (Unread bytes before the CONFIRM make the kernel reset the connection at
        // close, as it does for any socket closed with unread input.)
        auto deadline = Clock::now() + std::chrono::milliseconds(rt::config().probe_timeout_ms);
        while (sw_.phase() == Phase::verifying && presw_step_locked() == 0 && !sw_.before_switch_offset() &&
               Clock::now() < deadline) {
            lk.unlock();
            pollfd pf[2] = {{tcp_fd_, POLLIN, 0}, {comp_fd(), POLLIN, 0}};
            RS_REAL(poll)(pf, 2, 10);
            lk.lock();
            if (link_.has_cq()) {
                link_.ack_events();
                link_.arm();
            }
        }
    }
    if (sw_.phase() != Phase::rdma)
        return;
    poll_cq_locked();
    strip_proof_locked();
    RingPath::Status &st = ring_.st;
    if (st.broken())
        return;
    if (abortive) {
        ring_.post_ctrl(neg::Imm::reset, 0);
        return;
    }
    if (ring_.data_msgs() > 0)
        RS_DEBUG("connection fd=%d: %llu writes went out in %llu data messages", tcp_fd_,
                 static_cast<unsigned long long>(ring_.writes()), static_cast<unsigned long long>(ring_.data_msgs()));
    if (ring_.flush() != 0)  // every byte before the FIN
        return;
    // FIN "closed" (after a FIN of shutdown(), a second one): the peer learns that this
    // side reads nothing more; signalled, so its completion tells that every byte
    // before it has arrived.
    link_.signal_next();
    if (ring_.post_ctrl(neg::Imm::fin, neg::kFinClosed) != 0)
        return;
    st.fin_sent = true;
    st.shut_wr = true;
    // Every byte written must reach the peer before the TCP connection closes: wait
    // (bounded) until the FIN, the last request, has completed.
    const uint64_t last = link_.posted();
    auto deadline = Clock::now() + std::chrono::milliseconds(rt::config().linger_ms);
    while (link_.completed() < last && !st.broken()) {
        poll_cq_locked();
        if (link_.completed() >= last)
            break;
        link_.arm();
        poll_cq_locked();
        if (link_.completed() >= last)
            break;
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0)
            break;
        // A peer that has sent its FIN and closed its TCP connection is gone (or going):
        // its queue pair may no longer answer, and it reads nothing more.
        pollfd t{tcp_fd_, POLLRDHUP, 0};
        if (st.peer_fin && RS_REAL(poll)(&t, 1, 0) > 0 && (t.revents & (POLLRDHUP | POLLHUP | POLLERR)))
            break;
        lk.unlock();
        pollfd p{comp_fd(), POLLIN, 0};
        RS_REAL(poll)(&p, 1, static_cast<int>(left < 50 ? left : 50));
        lk.lock();
        link_.ack_events();
    }
    // A client's CONFIRM must be whole in the TCP stream before the socket closes: the
    // server delivers nothing of ours without it.
    while (sw_.frame_pending() && !st.broken()) {
        push_frame_locked();
        if (!sw_.frame_pending())
            break;
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0)
            break;
        lk.unlock();
        pollfd p[2] = {{tcp_fd_, POLLOUT, 0}, {comp_fd(), POLLIN, 0}};
        RS_REAL(poll)(p, 2, static_cast<int>(left < 50 ? left : 50));
        lk.lock();
        link_.ack_events();
        link_.arm();
        poll_cq_locked();
    }
}

void Conn::destroy() noexcept { up_.retire(*this); }

void Conn::link_name(char *buf, size_t n) const noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    link_.describe(buf, n);
}

const char *Conn::phase_name() const noexcept
{
    static const char *const kPhases[] = {"maybe", "verifying", "rdma", "tcp"};
    return kPhases[static_cast<int>(phase())];
}

}  // namespace rdmasock
