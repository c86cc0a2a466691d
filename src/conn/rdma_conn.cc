// Conn: set-up, fork and close.  The switch is in conn_switch.cc, completions and
// readiness in conn_events.cc, the program's calls in conn_io.cc.
#include "conn/rdma_conn.hh"

#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <utility>

#include "base/fd.hh"
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
    auto ctx = id->context();
    {
        // The link and the ring change under mu_: the program's threads read them there
        // (a fork or a close deciding TCP, a poll reading the queues).
        std::lock_guard<util::WaitedMutex> lk(mu_);
        link_.set_id(std::move(id));
    }
    if (!ctx)
        return Reason::not_rdma_addr;
    kits::Kit k;
    if (Reason r = kits::obtain(ctx, ring_log2, Link::cq_entries(), k); r != Reason::none)
        return r;
    std::lock_guard<util::WaitedMutex> lk(mu_);
    // A client decided TCP meanwhile (a fork: decide_tcp_locked found no queue pair to
    // stop) must not go on: a queue pair would take the server's PROOF_AT, and the server
    // would then write its PROOF into a stream that now belongs to the program.
    if (side_ == Side::client && (sw_.phase() != Phase::maybe || sw_.deferred_tcp() != Reason::none)) {
        k.rx.release();
        k.tx.release();
        return Reason::closed_early;
    }
    ring_.attach(std::move(k.rx), std::move(k.tx));
    return link_.create(k);
}

neg::RingInfo Conn::local_ring() const noexcept { return ring_.local_ring(); }

Reason Conn::set_peer_ring(const neg::RingInfo &r) noexcept { return ring_.set_peer_ring(r); }

Reason Conn::post_initial_receives() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (link_.post_recvs(Link::kRecvDepth) != 0 || link_.arm() != 0)
        return Reason::resource;
    cq_ready_ = true;
    return Reason::none;
}

std::shared_ptr<rdma::CmId> Conn::release_client_rdma() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (sw_.phase() == Phase::rdma)
        return {};
    cq_ready_ = false;
    return link_.release();
}

std::shared_ptr<rdma::CmId> Conn::restart_client_rdma() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
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
    std::lock_guard<util::WaitedMutex> lk(mu_);
    // A negotiating client counts its TCP bytes, and so does a server that has used its
    // connection (it may be switching): the child would move bytes behind that count.
    // Both processes keep such a connection on TCP.  (A server connection nobody used
    // yet goes to the first process that uses it: after_fork_parent/child.)
    if (sw_.phase() == Phase::maybe && !closed_ && (side_ == Side::client || sw_.interested()))
        decide_tcp_locked(Reason::forked);
    // One with RDMA bound (or a copy of one, which a child of this child holds too): the
    // child's copy can have it back on the TCP socket when it uses it (process/copies.hh).
    if (!shared_at_fork_locked())
        return;
    if (!share() && !is_copy()) {
        const copies::Ref r = copies::add();
        share_.store(r ? r.id << kShareIndexBits | r.index : 0, std::memory_order_release);
    }
    if (share()) {
        copies::note_fork_shares(true);
        copies::add_holder(share(), copies::fork_placeholder());  // (named after the fork)
    }
}

bool Conn::shared_at_fork_locked() const noexcept
{
    const Phase p = sw_.phase();
    return !closed_ && !copy_claimed_.load(std::memory_order_relaxed) && (p == Phase::rdma || p == Phase::verifying);
}

void Conn::after_fork_parent(pid_t child) noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (side_ == Side::server && sw_.phase() == Phase::maybe && !sw_.interested() && !closed_ && child > 0)
        forked_unused_.store(true, std::memory_order_release);
    if (share())  // (also one closed meanwhile: its slot is freed once the child is gone)
        copies::rename_holder(share(), copies::fork_placeholder(), child > 0 ? child : 0);
}

copies::Ref Conn::share() const noexcept
{
    const uint64_t w = share_.load(std::memory_order_acquire);
    return w == 0 ? copies::Ref{} : copies::Ref{static_cast<uint32_t>(w & ((1u << kShareIndexBits) - 1)),
                                                w >> kShareIndexBits};
}

bool Conn::ask_copy() noexcept
{
    if (!is_copy() || copy_claimed_.load(std::memory_order_acquire) || copy_failed_.load(std::memory_order_acquire))
        return false;
    const copies::Ref r = share();
    if (!r)
        return false;
    if (copies::ask(r))
        copies::wake(copies::owner(r));
    return true;
}

bool Conn::claim_copy() noexcept
{
    if (!is_copy() || copy_failed_.load(std::memory_order_acquire))
        return false;
    if (copy_claimed_.load(std::memory_order_acquire))
        return true;
    const copies::Ref r = share();
    if (!r)
        return false;
    using copies::State;
    const int saved_errno = errno;
    // The owner hands it back within its fallback's time (its engine looks at once when
    // woken, else within 250 ms); an owner that is gone never will.  (Meanwhile the call
    // waits, even a nonblocking one: once per copy.)
    const pid_t owner = copies::owner(r);
    const auto until = Clock::now() + std::chrono::milliseconds(rt::config().fallback_wait_ms + 1000);
    auto next_look = Clock::now();
    ask_copy();
    State st;
    while ((st = copies::state(r)) != State::tcp && st != State::ended) {
        const auto now = Clock::now();
        if (now >= until || (now >= next_look && !copies::alive(owner)))
            break;
        if (now >= next_look)
            next_look = now + std::chrono::milliseconds(100);
        usleep(1000);
    }
    if (st != State::tcp) {
        // Not to be had: the copy reports a reset from now on, at once (an owner that
        // takes the ask up later finds it ended).
        copies::move(r, State::wanted, State::ended);
        copy_failed_.store(true, std::memory_order_release);
        errno = saved_errno;
        return false;
    }
    if (!copy_claimed_.exchange(true, std::memory_order_acq_rel)) {
        copies::drop_holder(r);
        if (sock_ != nullptr) {
            sock_->reason.store(Reason::forked, std::memory_order_relaxed);
            sock_->set_offloaded(false);  // (its calls take the kernel's path from now on)
        }
        RS_DEBUG("connection fd=%d: a fork child's copy, handed back to its TCP socket by process %d", shown_fd(),
                 static_cast<int>(owner));
    }
    errno = saved_errno;
    return true;
}

void Conn::drop_copy() noexcept
{
    if (is_copy() && !copy_claimed_.load(std::memory_order_acquire))
        copies::drop_holder(share());
}

bool Conn::take_for_copies() noexcept
{
    using copies::State;
    const copies::Ref r = share();
    return r && !is_copy() && (copies::move(r, State::owned, State::handing) || copies::move(r, State::wanted, State::handing));
}

void Conn::hand_to_copies(Clock::time_point until, bool taken) noexcept
{
    using copies::State;
    const copies::Ref r = share();
    if (!r || is_copy())
        return;
    if (!taken && !take_for_copies()) {
        while (copies::state(r) == State::handing && Clock::now() < until)
            usleep(1000);  // (another thread hands it over)
        return;
    }
    // (One that cannot go back to its TCP socket cleanly now stays as it is here: the
    // copies report a reset.  leave: Leaving::fork resets nothing.)
    leave(until, Leaving::fork);
    settle_copies();
}

void Conn::settle_copies() noexcept
{
    using copies::State;
    const copies::Ref r = share();
    if (!r || is_copy())
        return;
    bool clean;
    {
        // The kernel socket carries the stream alone: decided for TCP, or fallen back
        // with our frame and backlog out, the peer's frame in, the ring read out; or the
        // peer ended it and nothing of its is unread.
        std::lock_guard<util::WaitedMutex> lk(mu_);
        const bool done = fb_.active() ? fb_.out_done() && fb_.in_done() && ring_.avail() == 0
                                       : !awaiting_ && ring_.st.peer_closed && ring_.avail() == 0;
        clean = !ring_.st.broken() && !closed_ && (sw_.phase() == Phase::tcp || (sw_.phase() == Phase::rdma && done));
    }
    const State to = clean ? State::tcp : State::ended;
    for (State from : {State::owned, State::wanted, State::handing})
        if (copies::move(r, from, to))
            return;
}

bool Conn::continue_on(int keep) noexcept
{
    int from = -1;
    if (!adopt_duplicate(keep, from))
        return false;
    up_.move_tcp_watch(*this, from, keep);
    return true;
}

bool Conn::adopt_duplicate(int keep, int &from) noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (closed_)
        return false;
    from = tcp_fd_;
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
    up_.move_tcp_watch(*this, from, to);  // (before the lock: the engine's comes first)
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (!closed_ && tcp_fd_ == from)
        tcp_fd_ = to;
}

bool Conn::tcp_out_watched() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    return sw_.frame_out_watched() || fb_out_watched_;
}

void Conn::mark_closed() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    closed_ = true;
    // The number may be reused at once (by a connection of its own, whose epoll
    // registrations and bytes an act by number would take): no call through it again.
    if (tcp_fd_ >= 0) {
        closed_number_.store(tcp_fd_.load(), std::memory_order_release);
        tcp_fd_.store(-1, std::memory_order_release);
    }
    sw_.leave_pending();
    release_shadows_locked();
    sock_ = nullptr;  // (recycled with the number's last close: another socket's soon)
    if (is_copy()) {
        drop_copy();
    } else if (const copies::Ref r = share()) {
        // The owner's close: over, unless it went back to TCP for the copies.
        copies::move(r, copies::State::owned, copies::State::ended);
        copies::move(r, copies::State::wanted, copies::State::ended);
        copies::release(r);
    }
}

void Conn::release_shadows() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
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
    std::lock_guard<util::WaitedMutex> lk(mu_);
    sw_.enter_pending();
}

void Conn::after_fork_child() noexcept
{
    // The parent's queue pair and rings are not usable here; another thread may have
    // held the lock at fork time.
    new (&mu_) util::WaitedMutex();
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
    // The parent's placeholder for this child's copy names this child (if the parent's
    // fork() has not already: process/copies.hh).
    if (share())
        copies::rename_holder(share(), copies::fork_placeholder(), getpid());
    inherited_.store(true, std::memory_order_release);
    ring_.st.reset = true;
    ring_.st.failed = true;
    // A copy of a connection with RDMA bound: the parent's, which logs it; this one
    // reports a reset and logs nothing at its close.
    if (sw_.phase() == Phase::rdma || sw_.phase() == Phase::verifying)
        parent_copy_.store(true, std::memory_order_release);
}

/* ---- close ------------------------------------------------------------------------------ */

bool Conn::close_connection(bool abortive, int linger_s, bool exiting) noexcept
{
    // A fork child's copy of a connection with RDMA bound is the parent's: nothing to
    // send or wait for here (a child that closes every descriptor waited for the
    // parent's SWITCH up to the probe timeout per connection being verified).
    if (parent_copy_.load(std::memory_order_acquire))
        return false;
    // A fork child that lives holds a copy: the connection goes on for it, over its TCP
    // socket (the kernel's close of a socket another process holds ends nothing).
    // (Also one SO_LINGER {1, 0} closes: the kernel resets a shared socket only at its
    // last close.)
    if (share() && copies::held(share()))
        hand_to_copies(Clock::now() + std::chrono::milliseconds(rt::config().fallback_wait_ms));
    std::unique_lock<util::WaitedMutex> lk(mu_);
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
            pollfd pf{tcp_fd_, tcp_in_events(), 0};
            RS_REAL(poll)(&pf, 1, 10);
            lk.lock();
        }
        return false;
    }
    if (side_ == Side::server && !closed_)
        finish_proof_locked(lk);  // (the client switches only once it has it)
    if (side_ == Side::server && sw_.phase() == Phase::verifying && !closed_) {
        // The client is switched (or about to): its SWITCH and CONFIRM are on their
        // way.  Take them and switch before closing, so that the client reads an
        // orderly EOF (our FIN) and no unread CONFIRM makes our kernel send an RST.
        // (Unread bytes before the CONFIRM make the kernel reset the connection at
        // close, as it does for any socket closed with unread input.)  Briefly here;
        // then the progress thread waits on for them, as long as the client may still
        // switch (verify_closed_locked), and the socket's FIN waits with it.
        //   At exit no such wait goes on after the process (each would add up to the
        // switch window to the exit): a client that has not switched is stopped from
        // switching now (its queue pair stops: a SWITCH that got in before is honoured,
        // and none can get in after), and the CONFIRM of one that switched follows its
        // SWITCH by an exchange.  (Before, the kernel's close at exit reset a connection
        // whose CONFIRM had come unread: parity exit_with_connection_open under TSan.)
        if (exiting) {
            poll_cq_locked();
            if (sw_.phase() == Phase::verifying && !sw_.switch_known() && !stop_for_switch_locked())
                decide_tcp_locked(Reason::closed_early);
        }
        auto deadline = Clock::now() + std::chrono::milliseconds(exiting ? 200 : rt::config().probe_timeout_ms);
        while (sw_.phase() == Phase::verifying && presw_step_locked() == 0 && !sw_.before_switch_offset() &&
               Clock::now() < deadline) {
            lk.unlock();
            pollfd pf[2] = {{tcp_fd_, tcp_in_events(), 0}, {comp_fd(), POLLIN, 0}};
            RS_REAL(poll)(pf, 2, 10);
            lk.lock();
            if (link_.has_cq()) {
                link_.ack_events();
                link_.arm();
            }
        }
    }
    if (side_ == Side::server && sw_.phase() == Phase::verifying && !closed_ && !abortive) {
        // (Bytes of the client's the program left unread make the kernel reset the
        // connection at close, at once: no CONFIRM can be among them before the SWITCH.)
        int unread = 0;
        poll_cq_locked();
        const bool reset = sw_.before_switch_offset() ||
                           (!sw_.switch_known() && RS_REAL(ioctl)(tcp_fd_, FIONREAD, &unread) == 0 && unread > 0);
        return sw_.phase() == Phase::verifying && sw_.proof_written() && !reset;
    }
    if (sw_.phase() != Phase::rdma)
        return false;
    poll_cq_locked();
    strip_proof_locked();
    RingPath::Status &st = ring_.st;
    if (st.broken())
        return false;
    if (fb_.active()) {
        // Fallen back: the kernel's close (an RST when abortive).  Our frame and backlog
        // must be in the stream first, and the peer's frame out of it (left unread, it
        // would make our kernel answer with an RST): the progress thread finishes them
        // (start_drain).
        if (abortive)
            return false;
        fallback_step_locked(tcp_fd());
        return !st.broken() && !(fb_.out_done() && fb_.in_done());
    }
    if (abortive) {
        ring_.post_ctrl(neg::Imm::reset, 0);
        return false;
    }
    if (ring_.data_msgs() > 0)
        RS_DEBUG("connection fd=%d: %llu writes went out in %llu data messages", tcp_fd(),
                 static_cast<unsigned long long>(ring_.writes()), static_cast<unsigned long long>(ring_.data_msgs()));
    // Every byte before the FIN; the FIN "closed" (after a FIN of shutdown(), a second
    // one) tells the peer that this side reads nothing more.  Its completion tells that
    // every byte before it has arrived: the TCP connection closes only then.
    bool done = drain_locked();
    const auto deadline = Clock::now() + std::chrono::milliseconds(rt::config().linger_ms);
    // SO_LINGER with a time: the kernel's close() waits that long for the bytes to go.
    // Otherwise a few milliseconds, the time a peer that takes them acknowledges in.
    const auto linger_until = Clock::now() + (linger_s > 0 ? std::chrono::milliseconds(linger_s * 1000LL)
                                                           : std::chrono::milliseconds(kCloseWaitMs));
    while (!done && Clock::now() < linger_until) {
        link_.arm();
        if ((done = drain_locked()))
            break;
        const int left = waits::ms_until(linger_until, 50);
        if (left == 0)
            break;
        lk.unlock();
        pollfd p{comp_fd(), POLLIN, 0};
        RS_REAL(poll)(&p, 1, left);
        lk.lock();
        link_.ack_events();
    }
    // A client's CONFIRM must be whole in the TCP stream before the socket closes: the
    // server delivers nothing of ours without it.
    while (sw_.frame_pending() && !st.broken()) {
        push_frame_locked();
        if (!sw_.frame_pending())
            break;
        const int left = waits::ms_until(deadline, 50);
        if (left == 0)
            break;
        lk.unlock();
        pollfd p[2] = {{tcp_fd_, POLLOUT, 0}, {comp_fd(), POLLIN, 0}};
        RS_REAL(poll)(p, 2, left);
        lk.lock();
        link_.ack_events();
        link_.arm();
        poll_cq_locked();
    }
    return !done;
}

namespace {
// The duplicates the progress thread holds (fd + 1; 0 is free), for a fork child to
// close (Conn::drop_drains_in_child).  Beyond 256 at once, one is not closed there.
// Made and closed under g_drain_mu, which fork() holds: a child never has one that is
// not listed.
std::mutex g_drain_mu;
std::atomic<int> g_drain_slots[256];

// The first slot holding `from` now holds `to` (listing: 0 -> d + 1; unlisting: back).
void swap_slot(int from, int to) noexcept
{
    for (auto &slot : g_drain_slots) {
        int v = from;
        if (slot.compare_exchange_strong(v, to))
            break;
    }
}
}  // namespace

bool Conn::drain_locked() noexcept
{
    RingPath::Status &st = ring_.st;
    poll_cq_locked();
    if (st.broken())
        return true;
    if (fb_.active()) {
        fallback_step_locked(drain_fd_ >= 0 ? drain_fd_.load() : tcp_fd());
        return st.broken() || (fb_.out_done() && fb_.in_done());
    }
    if (!close_fin_posted_) {
        if (!link_.send_room())
            return false;  // (requests waiting for the peer's receives)
        if (ring_.flush() != 0)
            return true;
        if (!link_.send_room())
            return false;
        link_.signal_next();
        if (ring_.post_ctrl(neg::Imm::fin, neg::kFinClosed) != 0)
            return true;
        st.fin_sent = true;
        st.shut_wr = true;
        close_fin_posted_ = true;
        close_fin_wr_ = link_.posted();
        poll_cq_locked();
    }
    return link_.completed() >= close_fin_wr_;
}

bool Conn::start_drain(int fd) noexcept
{
    int d = -1;
    {
        std::lock_guard<std::mutex> dl(g_drain_mu);
        d = util::dup_high(fd);
        if (d < 0)
            return false;
        swap_slot(0, d + 1);
    }
    struct stat st{};
    ::fstat(d, &st);
    std::unique_lock<util::WaitedMutex> lk(mu_);
    if (drain_fd_ >= 0 || closed_) {
        // (Another thread's close or exit of the same connection made one first.)
        lk.unlock();
        close_drained(d);
        return false;
    }
    drain_ino_ = st.st_ino;
    drain_dev_ = st.st_dev;
    drain_fd_ = d;
    drain_until_ = std::max(Clock::now(), sw_.phase() == Phase::verifying ? sw_.gate_deadline() : Clock::time_point{}) +
                   std::chrono::milliseconds(rt::config().linger_ms);
    return true;
}

int Conn::verify_closed_locked(Clock::time_point now) noexcept
{
    const int d = drain_fd_;
    struct stat st{};
    if (::fstat(d, &st) != 0 || st.st_ino != drain_ino_ || st.st_dev != drain_dev_)
        return -1;  // (the program closed the duplicate's number: close_range(), closefrom())
    // The client's FIN first, then the completion queue: a client that switches has its
    // SWITCH acknowledged before it writes its CONFIRM, and so before its FIN.
    const bool ended = util::tcp_peer_ended(d);
    poll_cq_locked();
    if (sw_.phase() != Phase::verifying)
        return sw_.phase() == Phase::rdma ? 1 : -1;
    if (!sw_.switch_known()) {
        if (!ended && !sw_.gate_expired(now))
            return 0;
        // As gate_expired_locked(): a SWITCH that got in before the stop is honoured.
        if (!stop_for_switch_locked())
            return -1;
    }
    if (sw_.before_switch_offset())
        return -1;  // (the program left the client's bytes unread: its kernel resets)
    // (Switched only once the close line is written, which says TCP, closed_early.)
    if (!released_)
        return 0;
    const int t = sw_.take_confirm(d);
    if (t == 0)
        return 0;
    // (A CONFIRM taken out with the queue pair stopped: the client switched, and its
    // queue pair fails now, a reset, as in try_confirm_locked.)
    if (t < 0 || sw_.qp_stopped() || sw_.tcp_sent() > neg::kImmValueMask ||
        ring_.post_ctrl(neg::Imm::prefix, static_cast<uint32_t>(sw_.tcp_sent())) != 0)
        return -1;
    sw_.on(Switchover::Event::server_switch);
    sw_.stop_verify_watch();
    note_switch_locked(d);
    RS_DEBUG("connection fd=%d: switched to RDMA after its close, %llu TCP bytes", shown_fd(),
             static_cast<unsigned long long>(sw_.tcp_sent()));
    drain_until_ = now + std::chrono::milliseconds(rt::config().linger_ms);
    return 1;
}

bool Conn::draining(Clock::time_point now, int &to_close) noexcept
{
    std::unique_lock<util::WaitedMutex> lk(mu_);
    if (drain_fd_ < 0)
        return false;
    link_.ack_events();
    int verify = 1;
    if (sw_.phase() == Phase::verifying)
        verify = verify_closed_locked(now);
    bool done = verify < 0 || (verify > 0 && drain_locked()) || (verify == 0 && now >= drain_until_);
    if (!done && verify > 0) {
        // A peer that sent its FIN and ended its TCP connection is gone (or going): its
        // queue pair may no longer answer, and it reads nothing more.  A reset, too.
        pollfd t{drain_fd_, POLLRDHUP, 0};
        const int r = RS_REAL(poll)(&t, 1, 0);
        if (r > 0 && (t.revents & POLLNVAL))
            done = true;  // (the program closed it: close_range(), closefrom())
        else if (r > 0 && ((t.revents & POLLERR) ||
                           (ring_.st.peer_fin && !fb_.active() && (t.revents & (POLLRDHUP | POLLHUP)))))
            done = true;
        else if (now >= drain_until_)
            done = true;
    }
    if (!done) {
        link_.arm();
        return true;
    }
    RS_DEBUG("connection fd=%d: closed earlier, its last messages %s", shown_fd(),
             sw_.phase() != Phase::rdma ? "are none: it stays on TCP"
             : ring_.st.broken() ? "are lost: the connection broke"
             : link_.completed() >= close_fin_wr_ && close_fin_posted_ ? "went out" : "are given up");
    if (fb_.active() && !fb_.out_done() && !ring_.st.broken()) {
        // Fallen back, and our frame or backlog never all went: the peer must not take
        // our FIN for the end of a whole stream.  The close resets it.
        linger lg{1, 0};
        RS_REAL(setsockopt)(drain_fd_, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    const int d = drain_fd_.exchange(-1);
    // Still the socket it was made as (the program may have closed the number, and
    // another file have it now): the caller closes it, outside the connection's lock
    // (close_drained).
    struct stat st{};
    if (::fstat(d, &st) == 0 && st.st_ino == drain_ino_ && st.st_dev == drain_dev_) {
        to_close = d;
    } else {
        std::lock_guard<std::mutex> dl(g_drain_mu);
        swap_slot(d + 1, 0);
    }
    return false;
}

void Conn::close_drained(int d) noexcept
{
    std::lock_guard<std::mutex> dl(g_drain_mu);
    swap_slot(d + 1, 0);
    util::close_own(d);
}

void Conn::lock_drains() noexcept { g_drain_mu.lock(); }
void Conn::unlock_drains() noexcept { g_drain_mu.unlock(); }

void Conn::drop_drains_in_child() noexcept
{
    for (auto &slot : g_drain_slots)
        if (int v = slot.exchange(0); v > 0)
            util::close_own(v - 1);
}

void Conn::destroy() noexcept
{
    {
        std::lock_guard<util::WaitedMutex> lk(mu_);
        released_ = true;
    }
    up_.retire(*this);
}

bool Conn::take_counted() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    return std::exchange(counted_, false);
}

Reason Conn::socket_reason() const noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    return sock_ != nullptr ? sock_->reason.load(std::memory_order_relaxed) : Reason::none;
}

void Conn::link_name(char *buf, size_t n) const noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    link_.describe(buf, n);
}

const char *Conn::phase_name() const noexcept
{
    static const char *const kPhases[] = {"maybe", "verifying", "rdma", "tcp"};
    // (A fork child's copy handed back: a kernel socket here too.)
    return fell_back_.load(std::memory_order_relaxed) || copy_claimed_.load(std::memory_order_relaxed)
               ? "tcp"
               : kPhases[static_cast<int>(phase())];
}

}  // namespace rdmasock
