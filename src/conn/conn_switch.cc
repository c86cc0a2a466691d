// Conn: the switch from TCP to RDMA (the negotiation's side of the connection).
#include "conn/rdma_conn.hh"

#include <cerrno>
#include <poll.h>
#include <sys/ioctl.h>

#include "base/addr.hh"
#include "base/log.hh"
#include "base/real.hh"
#include "conn/windows.hh"
#include "process/runtime.hh"
#include "process/socket.hh"

namespace rdmasock {

namespace {

int socket_rcvlowat(int fd) noexcept
{
    int v = 1;
    socklen_t len = sizeof v;
    int saved = errno;
    if (RS_REAL(getsockopt)(fd, SOL_SOCKET, SO_RCVLOWAT, &v, &len) != 0)
        v = 1;
    errno = saved;
    return v;
}

}  // namespace

/* ---- negotiation --------------------------------------------------------------------- */

Reason Conn::client_established(Clock::time_point switch_by) noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (closed_ || sw_.phase() != Phase::maybe)
        return Reason::not_connected;
    // Whoever accepted the RDMA connection knows the nonce, but only the TCP peer can
    // write into the TCP stream: nothing of ours goes over RDMA (and no CONFIRM into
    // the stream) before the PROOF stands in it where the PROOF_AT said.
    sw_.set_established(switch_by);
    presw_step_locked();  // (the PROOF may be taken already)
    return Reason::none;
}

int Conn::client_presw_locked() noexcept
{
    // The PROOF_AT comes before the PROOF (the server writes the PROOF once its
    // PROOF_AT has completed here): completions first, then the TCP stream.
    if (cq_ready_ && !sw_.proof_known())
        poll_cq_locked();
    if (sw_.phase() != Phase::maybe)
        return sw_.phase() == Phase::rdma ? 1 : -1;
    if (sw_.proof_ahead()) {
        const int t = sw_.look_for_proof(tcp_fd_);
        if (t < 0) {
            // Something else stands where the PROOF should: whoever accepted the RDMA
            // connection is not the TCP peer (or the stream ended there).  Those bytes
            // are the stream's.
            sw_.end_proof();
            const Reason d = sw_.deferred_tcp();
            RS_DEBUG("connection fd=%d: no PROOF at offset %llu: TCP", tcp_fd(),
                     static_cast<unsigned long long>(sw_.tcp_taken()));
            decide_tcp_locked(d != Reason::none ? d : t == -1 ? Reason::closed_early : Reason::unproved);
            return -1;
        }
        if (t > 0 && sw_.proof_taken())
            RS_DEBUG("connection fd=%d: PROOF taken at offset %llu", tcp_fd(),
                     static_cast<unsigned long long>(sw_.tcp_taken()));
    }
    if (sw_.deferred_tcp() != Reason::none) {
        // Decided while the PROOF was on its way: TCP once it is out of the stream (a
        // PROOF that came late after all: the server was slow, not an impostor).
        if (sw_.proof_ahead())
            return 0;
        const Reason d = sw_.deferred_tcp();
        decide_tcp_locked(d == Reason::unproved && sw_.proof_taken() ? Reason::timeout : d);
        return -1;
    }
    if (sw_.proof_verified())
        return sw_.established() ? client_switch_locked() : 0;
    if (sw_.established() && sw_.switch_too_late(Clock::now())) {
        // No PROOF_AT in time (timeout), or no PROOF where it said (unproved: the bytes
        // at its offset never came; whoever accepted may not be the TCP peer).
        RS_DEBUG("connection fd=%d: no %s from the RDMA peer in time: TCP", tcp_fd(),
                 sw_.proof_known() ? "PROOF" : "PROOF_AT");
        decide_tcp_locked(sw_.proof_known() ? Reason::unproved : Reason::timeout);
        return sw_.phase() == Phase::maybe ? 0 : -1;  // (still to take out of the stream)
    }
    return 0;
}

int Conn::client_switch_locked() noexcept
{
    // The server waits for the SWITCH for switch_window() from its accept, which came
    // after our request.  A SWITCH sent later than that (a progress thread busy with
    // other connections' set-up, a program slow to read up to the PROOF) could arrive
    // after the server gave up, and its CONFIRM would then be bytes of the server
    // program's stream: too late, the connection stays on TCP (the PROOF is out of it).
    if (sw_.switch_too_late(Clock::now())) {
        RS_DEBUG("connection fd=%d: the PROOF came too late to switch", tcp_fd());
        decide_tcp_locked(Reason::timeout);
        return -1;
    }
    // SWITCH(n): the server delivers n TCP bytes, then expects the CONFIRM.  Signalled:
    // the CONFIRM goes into the TCP stream only once the SWITCH has reached the server,
    // so a server that has not seen it (and gives up) never finds a CONFIRM in its
    // stream.
    if (sw_.tcp_sent() > neg::kImmValueMask) {
        decide_tcp_locked(Reason::limit);
        return -1;
    }
    const int lowat = socket_rcvlowat(tcp_fd_);
    link_.signal_next();
    if (ring_.post_ctrl(neg::Imm::switch_at, static_cast<uint32_t>(sw_.tcp_sent())) != 0) {
        decide_tcp_locked(Reason::resource);
        return -1;
    }
    sw_.start_frame(Switchover::Frame::confirm, link_.posted(), Clock::time_point::max());
    enter_rdma_locked(Switchover::Event::client_switch, lowat);
    if (shut_held_) {
        // The program shut down writing while the PROOF was on its way: its end of the
        // stream goes over RDMA, right after the SWITCH (the TCP socket stays open for
        // the CONFIRM).
        shut_held_ = false;
        ring_.st.shut_wr = true;
        if (sw_.tcp_shut_rd())
            ring_.st.shut_rd = true;
        if (ring_.post_ctrl(neg::Imm::fin, 0) == 0)
            ring_.st.fin_sent = true;
    }
    refresh_watch();  // the progress thread writes the CONFIRM at the SWITCH's completion
    RS_DEBUG("connection fd=%d: client switched to RDMA after %llu TCP bytes", tcp_fd(),
             static_cast<unsigned long long>(sw_.tcp_sent()));
    return 1;
}

void Conn::client_failed(Reason why) noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (sw_.phase() != Phase::maybe)
        return;
    if (!closed_)
        decide_tcp_locked(why);
    else if (sw_.on(Switchover::Event::decide_tcp))  // the fd number may be reused: touch nothing through it
        sw_.leave_pending();
    release_shadows_locked();
}

bool Conn::begin_verify(const neg::Nonce &n) noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    // (A program that shut down writing can no longer put a PROOF into its stream.)
    if (closed_ || refusing_ || sw_.phase() != Phase::maybe || sw_.tcp_shut_wr())
        return false;
    // From here on no TCP byte is delivered beyond what the SWITCH will name; a peer
    // that never sends it (a third party that knew the 4-tuple) holds the stream only
    // this long.
    sw_.start_verify(n, Clock::now() + windows::switch_window());
    // The progress thread takes the SWITCH in as it arrives and wakes whoever waits.
    sw_.on(Switchover::Event::server_verify);
    refresh_watch();
    return true;
}

void Conn::server_established() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    sh_.wake();  // wake waiters: the SWITCH can now arrive
    if (closed_ || sw_.phase() != Phase::verifying || sw_.frame_pending())
        return;
    // Prove to the client, in the TCP stream, that this process is its TCP peer:
    // PROOF_AT(m) over RDMA, then, once it has reached the client, the PROOF at offset
    // m.  The program's bytes wait meanwhile (hold_for_proof_locked).
    if (sw_.tcp_sent() > neg::kImmValueMask) {
        give_up_verify_locked(Reason::limit);
        return;
    }
    link_.signal_next();
    if (ring_.post_ctrl(neg::Imm::proof_at, static_cast<uint32_t>(sw_.tcp_sent())) != 0) {
        give_up_verify_locked(Reason::resource);
        return;
    }
    // (A round trip, unless the client's queue pair is gone: then the program's bytes
    // go on without a PROOF, and the connection is TCP.)
    sw_.start_frame(Switchover::Frame::proof, link_.posted(),
                    Clock::now() + std::chrono::milliseconds(rt::config().probe_timeout_ms + 250));
    refresh_watch();
}

void Conn::abandon_rdma() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    abandon_locked("the RDMA path failed");
}

std::shared_ptr<rdma::CmId> Conn::on_device_removal() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (link_.dead())
        return nullptr;  // (a fork child's copy: the parent's)
    RS_DEBUG("connection fd=%d: its RDMA device is being removed", shown_fd());
    local_failure_ = true;
    const char *why = "the RDMA device was removed";
    if (side_ == Side::client && sw_.phase() == Phase::maybe && !closed_) {
        // Established, waiting for the server's PROOF: what arrived counts (a PROOF_AT
        // says where a PROOF stands in the stream, taken out, not delivered), then TCP.
        poll_cq_locked();
        if (sw_.phase() == Phase::maybe)
            decide_tcp_locked(Reason::no_device);
    } else if (sw_.phase() != Phase::rdma) {
        abandon_locked(why);  // (a server being verified stays on TCP)
    } else if (!ring_.st.peer_closed && !ring_.st.broken() && !fb_.active()) {
        // (Also while awaiting the peer's frame: the cause is this side's now.)  After
        // the peer's close nothing more goes to it over RDMA: what is in the ring stays
        // readable, then EOF.
        poll_cq_locked();  // (what arrived first counts)
        if (!fb_.active() && !ring_.st.broken() && !start_fallback_locked(why))
            fail_and_abort_locked("the RDMA device was removed, and the connection cannot fall back to TCP");
    }
    ring_.deregister();
    cq_ready_ = false;
    std::shared_ptr<rdma::CmId> id = link_.release_device();
    update_shadows_locked(true);
    sh_.wake();
    return id;
}

bool Conn::on_device(const ibv_context *ctx) const noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (link_.dead())
        return false;
    const rdma::CmId *id = link_.cm_id();
    if (id != nullptr && id->get() != nullptr && id->get()->verbs == ctx)
        return true;
    const std::shared_ptr<rdma::Pd> &pd = link_.pd();
    return pd && pd->context() && pd->context()->get() == ctx;
}

void Conn::abandon_locked(const char *why) noexcept
{
    Phase p = sw_.phase();
    if (p == Phase::verifying && side_ == Side::server) {
        // Whatever arrived before the end counts: a SWITCH that completed at the client
        // may have a CONFIRM behind it in the TCP stream.
        poll_cq_locked();
        if (!sw_.switch_known()) {
            release_shutdown_locked();
            sw_.on(Switchover::Event::server_unverify);
            sh_.wake();
            if (sw_.stop_verify_watch())
                refresh_watch();
        }
    } else if (p == Phase::rdma && !ring_.st.peer_closed && !ring_.st.broken()) {
        // The peer's queue pair is gone: it fell back to TCP (its frame follows), or it
        // exec'd, died or handed the socket on: then no frame comes, and nothing of ours
        // may go into the stream (whoever reads it now is no library of ours).  Our own
        // link's failure (a local completion error) starts a fallback from this side.
        poll_cq_locked();
        if (fb_.active() || awaiting_ || ring_.st.broken())
            return;
        const bool ok = local_failure_ ? start_fallback_locked(why) : await_peer_fallback_locked();
        if (!ok && !ring_.st.peer_fin) {
            ring_.st.reset = true;
            update_shadows_locked(true);
        }
    }
}

void Conn::note_declined(Reason why) noexcept
{
    sw_.set_declined(why);
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (side_ == Side::server && sw_.phase() == Phase::maybe && !closed_)
        decide_tcp_locked(why);
}

bool Conn::note_passed() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (side_ != Side::server || closed_ || sw_.phase() != Phase::maybe)
        return false;
    decide_tcp_locked(Reason::passed);
    return true;
}

void Conn::note_late_request() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (side_ == Side::server && sw_.phase() == Phase::tcp && !closed_ && sock_ != nullptr &&
        sock_->reason.load(std::memory_order_relaxed) == Reason::peer_no_rdmasock)
        sock_->reason.store(Reason::timeout, std::memory_order_relaxed);
}

void Conn::note_closing() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (side_ != Side::server || sock_ == nullptr)
        return;
    if (sw_.phase() == Phase::maybe) {
        if (Reason why = server_close_reason_locked(); why != Reason::pending)
            sock_->reason.store(why, std::memory_order_relaxed);
    } else if (sw_.phase() == Phase::verifying) {
        sock_->reason.store(Reason::closed_early, std::memory_order_relaxed);  // the switch never completed
    }
}

void Conn::refuse_requests() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    refusing_ = true;
}

bool Conn::refusing() noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    return refusing_;
}

/* ---- the switch ------------------------------------------------------------------------- */

int Conn::presw_step_locked() noexcept
{
    const Phase p = sw_.phase();
    if (p == Phase::maybe) {
        if (side_ == Side::client)
            return client_presw_locked();
        // A server's connection that no RDMA request claimed in time is plain TCP.
        if (sw_.maybe_expired(Clock::now())) {
            decide_tcp_locked(undecided_reason());
            return -1;
        }
        return 0;
    }
    if (p != Phase::verifying)
        return p == Phase::rdma ? 1 : -1;
    poll_cq_locked();  // the SWITCH
    if (sw_.phase() != Phase::verifying)
        return sw_.phase() == Phase::rdma ? 1 : -1;
    if (!sw_.switch_known())
        return gate_expired_locked();
    if (sw_.before_switch_offset())
        return 0;
    return try_confirm_locked();
}

int Conn::presw_gated(bool polled_in) noexcept
{
    std::lock_guard<util::WaitedMutex> lk(mu_);
    if (sw_.phase() == Phase::rdma || presw_step_locked() > 0)
        return -1;
    if (polled_in && side_ == Side::client && sw_.phase() != Phase::tcp) {
        // The TCP socket was readable, perhaps for the PROOF alone, which this call or
        // another thread (the progress thread, a read) has taken out since: readable
        // only if bytes of the program's (or the end of the stream) are there.
        pollfd pf{tcp_fd_, POLLRDHUP, 0};
        int queued = 0;
        const bool ended = RS_REAL(poll)(&pf, 1, 0) > 0;
        if (!ended && RS_REAL(ioctl)(tcp_fd_, FIONREAD, &queued) == 0 && queued == 0)
            return 1;
    }
    if (sw_.phase() == Phase::verifying && sw_.switch_known() && sw_.tcp_limit() > 0 && below_rcvlowat_locked())
        return 1;
    return sw_.phase() != Phase::tcp && sw_.tcp_limit() == 0 ? 1 : 0;
}

bool Conn::below_rcvlowat_locked() const noexcept
{
    // A server verifying its switched client: the kernel's SO_RCVLOWAT counted the whole
    // TCP queue (the CONFIRM and anything behind it too), while the program has the
    // bytes before the client's switch, then the ring's, which follow them.  (Before,
    // 4 such bytes made poll() say readable with SO_RCVLOWAT 8.)
    const int lowat = socket_rcvlowat(tcp_fd_);
    if (lowat <= 1)
        return false;
    int queued = 0;
    if (RS_REAL(ioctl)(tcp_fd_, FIONREAD, &queued) != 0 || queued < 0)
        return false;
    pollfd pf{tcp_fd_, POLLRDHUP, 0};
    if (RS_REAL(poll)(&pf, 1, 0) > 0)
        return false;  // (the end of the stream is readable as the kernel's is)
    const uint64_t have = std::min<uint64_t>(static_cast<uint64_t>(queued), sw_.tcp_limit()) + ring_.avail();
    return have < static_cast<uint64_t>(lowat);
}

int Conn::gate_expired_locked() noexcept
{
    if (!sw_.gate_expired(Clock::now()))
        return 0;
    // No SWITCH in time.  The queue pair stops first (rdma_disconnect moves it to the
    // error state), then the completion queue is read once more: a SWITCH that got in
    // before is honoured, and none can get in (nor be acknowledged, so no CONFIRM can
    // follow) after.  Giving up without that could race a SWITCH arriving this moment.
    if (stop_for_switch_locked())
        return 0;
    give_up_verify_locked(Reason::timeout);
    return -1;
}

bool Conn::stop_for_switch_locked() noexcept
{
    up_.release_rdma(*this);
    poll_cq_locked();
    if (!sw_.switch_known())
        return false;
    // Its CONFIRM may follow (if the acknowledgement left before the stop): it must be
    // taken out of the stream, but the queue pair is gone (try_confirm_locked).
    sw_.note_qp_stopped();
    return true;
}

void Conn::give_up_verify_locked(Reason why) noexcept
{
    RS_DEBUG("connection fd=%d: no valid SWITCH/CONFIRM from the RDMA peer (%s): TCP", tcp_fd(),
             reason_code(why));
    decide_tcp_locked(why);
}

int Conn::try_confirm_locked() noexcept
{
    // Only a server looks for a CONFIRM, and only at the offset the client's SWITCH
    // named: a client's inbound bytes are the server's own (a banner), never ours.
    if (closed_ || side_ != Side::server || sw_.phase() != Phase::verifying || !sw_.at_switch_offset())
        return 0;
    const int t = sw_.take_confirm(tcp_fd_);
    if (t == 0)
        return 0;
    if (t < 0) {
        give_up_verify_locked(t == -2 && sw_.qp_stopped() ? Reason::timeout : Reason::bad_message);
        return -1;
    }
    if (sw_.qp_stopped()) {
        // The client switched, but this side had stopped the queue pair: the CONFIRM is
        // out of the stream, and the connection cannot go on.
        enter_rdma_broken_locked("the SWITCH came as the wait for it ended");
        return 1;
    }
    // The program shut down writing before the switch (its FIN is in the TCP stream
    // after the prefix): the client's end of the stream comes over RDMA too, with the
    // PREFIX (PREFIX_END), so the TCP FIN is not taken for a peer that died.
    const bool ended = sw_.tcp_shut_wr();
    // (Signalled: its completion tells that the client has it, which a fallback to TCP
    // needs: the client finds our frame after the TCP bytes the PREFIX counts.)
    link_.signal_next();
    if (sw_.tcp_sent() > neg::kImmValueMask ||
        ring_.post_ctrl(ended ? neg::Imm::prefix_end : neg::Imm::prefix, static_cast<uint32_t>(sw_.tcp_sent())) !=
            0) {
        // Bytes went into the TCP stream and the client is committed to RDMA: nothing
        // else can be done than reset this connection.
        enter_rdma_broken_locked("cannot announce the TCP prefix");
        return 1;
    }
    prefix_wr_ = link_.posted();
    enter_rdma_locked(Switchover::Event::server_switch, socket_rcvlowat(tcp_fd_));
    if (tcp_.eof)
        start_grace_locked();  // the client's TCP FIN came before the switch
    if (sw_.tcp_shut_rd())
        ring_.st.shut_rd = true;
    if (ended) {
        ring_.st.shut_wr = true;
        ring_.st.fin_sent = true;
    }
    if (sw_.stop_verify_watch())
        refresh_watch();
    // No eventfd update here: it could drain the wake-up just written before the
    // thread waiting for the switch has run.
    RS_DEBUG("connection fd=%d: server switched to RDMA after %llu TCP bytes", tcp_fd(),
             static_cast<unsigned long long>(sw_.tcp_sent()));
    // Bytes that came behind the CONFIRM had their edge before the switch: looked at
    // now (no FALLBACK can be among them yet: the client falls back only once it has
    // our PREFIX).
    peer_fell_back_locked();
    return 1;
}

void Conn::enter_rdma_locked(Switchover::Event e, int lowat) noexcept
{
    if (side_ == Side::server)
        release_shutdown_locked();
    set_rcvlowat(lowat);
    sw_.on(e);
    sw_.leave_pending();
    tcp_.arrived_seen = sw_.tcp_taken();  // (bytes read before the switch are no arrival)
    // Wake a poll/select sleeping on the pre-switch readiness (it starts over with the
    // eventfds); the first update by a watcher drains it if not readable.
    sh_.wake_set();
    if (sock_ != nullptr)
        sock_->reason.store(Reason::none, std::memory_order_relaxed);
    rt::g_offloaded.fetch_add(1, std::memory_order_relaxed);
    counted_ = true;
    up_.switched_to_rdma(tcp_fd_, *this);
    note_switch_locked(tcp_fd_);
}

void Conn::note_switch_locked(int fd) const noexcept
{
    const long long us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - made_).count();
    rt::g_setup.record(us > 0 ? static_cast<unsigned long long>(us) : 0);
    if (!log::enabled(log::kInfo))
        return;
    char local[64] = "-", peer[64] = "-";
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int saved = errno;
    if (RS_REAL(getsockname)(fd, reinterpret_cast<sockaddr *>(&ss), &len) == 0)
        util::format_addr(ss, local, sizeof local);
    len = sizeof ss;
    if (RS_REAL(getpeername)(fd, reinterpret_cast<sockaddr *>(&ss), &len) == 0)
        util::format_addr(ss, peer, sizeof peer);
    errno = saved;
    log::write(log::kInfo, "event=switch fd=%d role=%s local=%s peer=%s setup_us=%lld tcp_bytes_sent=%llu tcp_bytes_received=%llu",
               shown_fd(), side_ == Side::client ? "client" : "server", local, peer, us,
               static_cast<unsigned long long>(sw_.tcp_sent()), static_cast<unsigned long long>(sw_.tcp_read()));
}

void Conn::enter_rdma_broken_locked(const char *why) noexcept
{
    sw_.on(Switchover::Event::server_switch);
    fail(why);
}

void Conn::release_shutdown_locked() noexcept
{
    if (shut_held_ && !closed_) {
        shut_held_ = false;
        const int saved = errno;
        RS_REAL(shutdown)(tcp_fd_, SHUT_WR);
        errno = saved;
    }
}

void Conn::decide_tcp_locked(Reason why) noexcept
{
    if (side_ == Side::client && sw_.phase() == Phase::maybe) {
        if (sw_.deferred_tcp() == Reason::none && link_.cm_id() != nullptr) {
            // The queue pair stops first, then the completion queue is read once more: a
            // PROOF_AT that got in before is seen (its PROOF may follow in the stream),
            // and none can get in, nor be acknowledged (so no PROOF can follow), after.
            up_.release_rdma(*this);
            if (cq_ready_)
                poll_cq_locked();
            if (sw_.phase() != Phase::maybe)
                return;  // (decided meanwhile)
        }
        if (sw_.proof_known() && !sw_.proof_taken()) {
            // The PROOF is (or will be) in the stream: the connection is on TCP for
            // every purpose but one: its bytes go through the library until the PROOF
            // is out of the stream (client_presw_locked).
            if (sw_.deferred_tcp() == Reason::none) {
                sw_.defer_tcp(why);
                if (sock_ != nullptr)
                    sock_->reason.store(why, std::memory_order_relaxed);
            }
            // (No CONFIRM will go before its FIN now; but a program that shut reading
            // too keeps its FIN until the PROOF is out: a kernel whose FIN is out and
            // which reads no more answers the PROOF with a reset.  The decision that
            // follows the PROOF's taking, or the close, lets it go.)
            if (!sw_.tcp_shut_rd())
                release_shutdown_locked();
            return;
        }
    }
    release_shutdown_locked();  // (a server's FIN waited for its PROOF)
    // The reason before the phase: a connect() waiting for the decision
    // (RDMASOCK_CONNECT_WAIT) reads the phase without the lock and returns at once, and
    // the program may ask RDMASOCK_INFO next (rdmasock check once read "pending").
    if (sock_ != nullptr)
        sock_->reason.store(why, std::memory_order_relaxed);
    sw_.on(Switchover::Event::decide_tcp);
    if (sw_.stop_verify_watch())
        refresh_watch();
    sw_.leave_pending();
    if (sock_ != nullptr)
        sock_->set_offloaded(false);
    up_.decided_tcp(tcp_fd_);
    if (link_.cm_id() != nullptr)
        up_.release_rdma(*this);
    release_shadows_locked();
}

}  // namespace rdmasock
