#include "conn/rdma_conn.hh"

#include <arpa/inet.h>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/copy.hh"
#include "base/fd.hh"
#include "base/log.hh"
#include "base/real.hh"
#include "conn/windows.hh"
#include "process/runtime.hh"
#include "process/signals.hh"
#include "process/socket.hh"

namespace rdmasock {

namespace {

constexpr uint32_t kSendDepth = 256;
constexpr uint32_t kRecvDepth = 512;
constexpr unsigned kSignalEvery = 16;
constexpr uint32_t kWantInline = 128;
// Coalescing (like the kernel's TCP autocorking): a write smaller than kCoalesceBelow is
// only staged, not posted, while a signalled work request (one in kSignalEvery) is in
// flight, so a completion is sure to come; the staged bytes go out as one message at
// that completion, before any wait, FIN or close, or as soon as kCoalesceBelow bytes are
// staged.  Signalling stays selective: a ping-pong pays no completion per message, and
// rarely has a signalled request in flight.
constexpr uint64_t kCoalesceBelow = 16384;

size_t iov_total(const msghdr *m) noexcept
{
    size_t t = 0;
    for (size_t i = 0; i < m->msg_iovlen; ++i)
        t += m->msg_iov[i].iov_len;
    return t;
}

// recvmsg on the TCP socket into `m`'s buffers from `skip` bytes on, at most `limit`
// bytes (what is left of the iovecs when limit is larger), as one call: MSG_PEEK sees
// the stream from its start whatever the layout of the buffers.
ssize_t tcp_recv_at(int fd, const msghdr *m, size_t skip, uint64_t limit, int flags) noexcept
{
    iovec v[64];
    size_t i = 0, n = 0;
    while (i < m->msg_iovlen && skip >= m->msg_iov[i].iov_len)
        skip -= m->msg_iov[i++].iov_len;
    for (; i < m->msg_iovlen && n < 64 && limit > 0; ++i) {
        size_t len = m->msg_iov[i].iov_len - skip;
        if (len > limit)
            len = static_cast<size_t>(limit);
        v[n++] = {static_cast<uint8_t *>(m->msg_iov[i].iov_base) + skip, len};
        limit -= len;
        skip = 0;
    }
    if (n == 0)
        return 0;
    msghdr sub{};
    sub.msg_iov = v;
    sub.msg_iovlen = n;
    return RS_REAL(recvmsg)(fd, &sub, flags);
}

// Copy between a ring (with wrap) and an iovec array, starting `skip` bytes into the
// iovecs.  `to_iov`: ring -> iovecs, else iovecs -> ring.
void copy_ring_iov(uint8_t *ring, size_t size, uint64_t pos, const msghdr *m, size_t skip,
                   size_t n, bool to_iov) noexcept
{
    size_t i = 0;
    while (i < m->msg_iovlen && skip >= m->msg_iov[i].iov_len)
        skip -= m->msg_iov[i++].iov_len;
    while (n > 0 && i < m->msg_iovlen) {
        auto *base = static_cast<uint8_t *>(m->msg_iov[i].iov_base) + skip;
        size_t chunk = m->msg_iov[i].iov_len - skip;
        if (chunk > n)
            chunk = n;
        size_t off = static_cast<size_t>(pos & (size - 1));
        size_t first = chunk < size - off ? chunk : size - off;
        if (to_iov) {
            util::bulk_copy(base, ring + off, first);
            if (chunk > first)
                util::bulk_copy(base + first, ring, chunk - first);
        } else {
            util::bulk_copy(ring + off, base, first);
            if (chunk > first)
                util::bulk_copy(ring, base + first, chunk - first);
        }
        pos += chunk;
        n -= chunk;
        skip = 0;
        ++i;
    }
}

int timeout_ms(int fd, bool for_send) noexcept
{
    timeval tv{};
    socklen_t len = sizeof tv;
    if (RS_REAL(getsockopt)(fd, SOL_SOCKET, for_send ? SO_SNDTIMEO : SO_RCVTIMEO, &tv, &len) != 0)
        return -1;
    if (tv.tv_sec == 0 && tv.tv_usec == 0)
        return -1;
    long ms = tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000;
    return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

}  // namespace

Conn::Conn(Side side, int tcp_fd, Upcalls &up) noexcept
    : Transport(true), side_(side), up_(up), tcp_fd_(tcp_fd), phase_(Phase::maybe)
{
}

Conn::~Conn()
{
    qp_.reset();
    cq_.reset();
    chan_.reset();
    id_.reset();
    rx_.release();
    tx_.release();
    pd_.reset();
}

int Conn::comp_fd() const noexcept { return chan_ ? chan_->fd() : -1; }

namespace {
Reason fail_setup(const char *what, int err) noexcept
{
    RS_DEBUG("%s failed: %s", what, strerror(err));
    return Reason::resource;
}
}  // namespace

Reason Conn::create_resources(std::shared_ptr<rdma::CmId> id, unsigned ring_log2) noexcept
{
    if (!sh_.ok())
        return Reason::resource;
    int err = 0;
    id_ = std::move(id);
    auto ctx = id_->context();
    if (!ctx)
        return Reason::not_rdma_addr;
    // The reserve kit if there is one (then the progress thread makes the next), else
    // built here.
    kits::Kit k;
    const int cqe = static_cast<int>(kSendDepth + kRecvDepth + 16);
    if (!kits::take(ctx->get(), ring_log2, k)) {
        Reason r = kits::build(ctx, ring_log2, cqe, k);
        if (r != Reason::none)
            return r;
    }
    kits::refill_async(ctx, ring_log2, cqe);
    pd_ = std::move(k.pd);
    chan_ = std::move(k.chan);
    cq_ = std::move(k.cq);
    rx_ = std::move(k.rx);
    spare_tx_ = std::move(k.tx);
    ibv_qp_init_attr attr{};
    attr.qp_type = IBV_QPT_RC;
    attr.sq_sig_all = 0;
    attr.cap.max_send_wr = kSendDepth;
    attr.cap.max_recv_wr = kRecvDepth;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    attr.cap.max_inline_data = kWantInline;
    qp_ = rdma::Qp::create_on(id_, pd_, cq_, cq_, attr, &err);
    if (!qp_) {
        attr.cap.max_inline_data = 0;
        qp_ = rdma::Qp::create_on(id_, pd_, cq_, cq_, attr, &err);
    }
    if (!qp_)
        return fail_setup("rdma_create_qp", err);
    max_inline_ = qp_->cap().max_inline_data;
    sq_depth_ = qp_->cap().max_send_wr;
    return Reason::none;
}

neg::RingInfo Conn::local_ring() const noexcept
{
    neg::RingInfo r;
    r.addr = reinterpret_cast<uint64_t>(rx_.mem);
    r.rkey = rx_.mr ? rx_.mr->rkey() : 0;
    r.log2 = 0;
    for (size_t s = rx_.size; s > 1; s >>= 1)
        ++r.log2;
    return r;
}

Reason Conn::set_peer_ring(const neg::RingInfo &r) noexcept
{
    if (!neg::valid_ring(r))
        return Reason::bad_message;
    peer_ring_ = r;
    const size_t size = size_t{1} << r.log2;
    if (spare_tx_.size == size) {  // the kit's staging ring fits (the usual case)
        tx_ = std::move(spare_tx_);
        return Reason::none;
    }
    spare_tx_.release();
    tx_.mem = kits::map_ring(size);
    if (tx_.mem == nullptr)
        return Reason::resource;
    tx_.size = size;
    int err = 0;
    tx_.mr = rdma::Mr::reg(pd_, tx_.mem, tx_.size, IBV_ACCESS_LOCAL_WRITE, &err);
    if (!tx_.mr)
        return rdma::memlock_too_small(tx_.mem, tx_.size) || err == ENOMEM ? Reason::memlock
                                                                           : Reason::resource;
    return Reason::none;
}

Reason Conn::post_initial_receives() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (repost_recv_locked(kRecvDepth) != 0 || cq_->arm() != 0)
        return Reason::resource;
    return Reason::none;
}

int Conn::repost_recv_locked(unsigned n) noexcept
{
    if (dead_)
        return -1;
    for (unsigned i = 0; i < n; ++i) {
        ibv_recv_wr wr{}, *bad = nullptr;
        wr.wr_id = 0;
        wr.sg_list = nullptr;
        wr.num_sge = 0;
        if (ibv_post_recv(qp_->get(), &wr, &bad) != 0)
            return -1;
        ++recv_posted_;
    }
    return 0;
}

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

Reason Conn::client_established() noexcept
{
    const int lowat = socket_rcvlowat(tcp_fd_);
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_ || phase_.load() != Phase::maybe)
        return Reason::not_connected;
    // SWITCH(n): the server delivers n TCP bytes, then expects the CONFIRM.  Signalled:
    // the CONFIRM goes into the TCP stream only once the SWITCH has reached the server,
    // so a server that has not seen it (and gives up) never finds a CONFIRM in its
    // stream.
    if (tcp_sent_ > neg::kImmValueMask) {
        decide_tcp_locked(Reason::limit);
        return Reason::limit;
    }
    unsignaled_ = kSignalEvery;
    if (post_ctrl_locked(neg::Imm::switch_at, static_cast<uint32_t>(tcp_sent_)) != 0) {
        decide_tcp_locked(Reason::resource);
        return Reason::resource;
    }
    switch_wr_ = wr_posted_;
    confirm_pending_.store(true);
    enter_rdma_locked(lowat);
    RS_DEBUG("connection fd=%d: client switched to RDMA after %llu TCP bytes", tcp_fd_,
             static_cast<unsigned long long>(tcp_sent_));
    return Reason::none;
}

void Conn::client_failed(Reason why) noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (phase_.load() != Phase::maybe)
        return;
    if (!closed_) {
        decide_tcp_locked(why);
    } else {  // the fd number may be reused: touch nothing through it
        phase_.store(Phase::tcp, std::memory_order_release);
        leave_pending_locked();
    }
}

std::shared_ptr<rdma::CmId> Conn::release_client_rdma() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (phase_.load() == Phase::rdma)
        return {};
    qp_.reset();
    return std::move(id_);
}

void Conn::before_fork() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (side_ == Side::client && phase_.load() == Phase::maybe && !closed_)
        decide_tcp_locked(Reason::forked);
}

bool Conn::begin_verify(const neg::Nonce &n) noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_ || phase_.load() != Phase::maybe)
        return false;
    nonce_ = n;
    switch_known_ = false;
    // From here on no TCP byte is delivered beyond what the SWITCH will name; a peer
    // that never sends it (a third party that knew the 4-tuple) holds the stream only
    // this long.
    gate_deadline_ = std::chrono::steady_clock::now() + windows::switch_window();
    phase_.store(Phase::verifying, std::memory_order_release);
    // The progress thread takes the SWITCH in as it arrives and wakes whoever waits.
    verify_watch_.store(true);
    refresh_watch();
    return true;
}

void Conn::server_established() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    sh_.wake();  // wake waiters: the SWITCH can now arrive
}

void Conn::abandon_rdma() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    Phase p = phase_.load();
    if (p == Phase::verifying && side_ == Side::server) {
        // Whatever arrived before the end counts: a SWITCH that completed at the client
        // may have a CONFIRM behind it in the TCP stream.
        poll_cq_locked();
        if (!switch_known_) {
            phase_.store(Phase::maybe, std::memory_order_release);
            sh_.wake();
            if (verify_watch_.exchange(false))
                refresh_watch();
        }
    } else if (p == Phase::rdma && !peer_fin_) {
        reset_ = true;
        update_shadows_locked(true);
    }
}

bool Conn::nonblocking() const noexcept
{
    int fl = RS_REAL(fcntl)(tcp_fd_, F_GETFL, nullptr);
    const bool nb = fl >= 0 && (fl & O_NONBLOCK);
    nb_seen_.store(nb ? 1 : 0, std::memory_order_relaxed);
    return nb;
}

bool Conn::spin_before_flag_check(int flags) const noexcept
{
    return !(flags & MSG_DONTWAIT) && rt::config().busy_poll_us > 0 &&
           nb_seen_.load(std::memory_order_relaxed) == 0;
}

/* ---- completions ---------------------------------------------------------------------- */

void Conn::after_fork_child() noexcept
{
    // The parent's queue pair and rings are not usable here; another thread may have
    // held the lock at fork time.
    new (&mu_) std::mutex();
    new (&cv_) std::condition_variable();
    if (side_ == Side::server && phase_.load() == Phase::maybe && !interested_.load()) {
        // Accepted, not yet read, no RDMA bound (a request is only accepted once the
        // connection is read): the child serves it on TCP; the parent's copy, once
        // closed, declines any request for it.
        phase_.store(Phase::tcp, std::memory_order_release);
        pending_counted_ = false;
        if (sock_ != nullptr) {
            sock_->reason.store(Reason::forked, std::memory_order_relaxed);
            sock_->set_offloaded(false);
        }
        dead_ = true;  // the verbs objects are still the parent's
        return;
    }
    dead_ = true;
    reset_ = true;
    failed_ = true;
}

void Conn::poll_cq_locked() noexcept
{
    if (!cq_ || dead_)
        return;
    ibv_wc wc[32];
    unsigned consumed = 0;
    for (;;) {
        int n = ibv_poll_cq(cq_->get(), 32, wc);
        if (n <= 0)
            break;
        for (int i = 0; i < n; ++i) {
            const ibv_wc &w = wc[i];
            if (w.status != IBV_WC_SUCCESS) {
                if (!failed_ && !reset_ && w.status != IBV_WC_WR_FLUSH_ERR)
                    RS_DEBUG("connection fd=%d: completion error %s", tcp_fd_,
                             ibv_wc_status_str(w.status));
                if (!peer_fin_)
                    failed_ = true;
                if (w.opcode & IBV_WC_RECV)
                    --recv_posted_;
                continue;
            }
            if (w.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
                --recv_posted_;
                ++consumed;
                handle_recv_locked(ntohl(w.imm_data));
            } else if (w.wr_id > wr_completed_) {
                wr_completed_ = w.wr_id;  // signalled: covers every earlier request
            }
        }
        if (n < 32)
            break;  // the queue had no more (one poll less on every call that found one)
    }
    if (!failed_ && recv_posted_ < kRecvDepth / 2)
        repost_recv_locked(kRecvDepth - recv_posted_);
    (void)consumed;
    if (tx_posted_ != tx_prod_ && last_signaled_ <= wr_completed_)
        flush_locked();  // what the coalesced writes were waiting for has completed
    if (confirm_pending_.load(std::memory_order_relaxed))
        push_confirm_locked();
}

void Conn::push_confirm_locked() noexcept
{
    if (failed_ || reset_ || closed_) {
        // The SWITCH failed (the connection is reset) or the fd is gone.
        confirm_pending_.store(false);
        refresh_watch();
        return;
    }
    if (wr_completed_ < switch_wr_)
        return;  // the SWITCH has not reached the server yet
    uint8_t c[neg::kConfirmSize];
    neg::encode_confirm(nonce_, c);
    while (confirm_done_ < sizeof c) {
        ssize_t w = RS_REAL(send)(tcp_fd_, c + confirm_done_, sizeof c - confirm_done_, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            confirm_done_ += static_cast<unsigned>(w);
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            // The TCP send buffer is full of the bytes before the switch: the progress
            // thread writes the rest when it drains.
            if (!confirm_out_watch_) {
                confirm_out_watch_ = true;
                up_.watch_tcp_out(*this, true);
            }
            return;
        }
        if (w < 0 && errno == EINTR)
            continue;
        fail("cannot write the CONFIRM");
        confirm_pending_.store(false);
        refresh_watch();
        return;
    }
    confirm_pending_.store(false);
    if (confirm_out_watch_) {
        confirm_out_watch_ = false;
        up_.watch_tcp_out(*this, false);
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

void Conn::handle_recv_locked(uint32_t imm) noexcept
{
    uint32_t v = neg::imm_value(imm);
    switch (neg::imm_type(imm)) {
    case neg::Imm::data: {
        uint64_t free_space = rx_.size - (rx_prod_ - rx_cons_);
        if (v == 0 || v > free_space || peer_fin_) {
            fail("peer wrote beyond the space it was granted");
            return;
        }
        rx_prod_ += v;
        if (sh_.has_users())
            sh_.edge();  // a new arrival: edge-triggered waiters see an edge
        break;
    }
    case neg::Imm::credit:
        if (v > tx_posted_ - tx_acked_) {
            fail("peer credited bytes never sent");
            return;
        }
        tx_acked_ += v;
        break;
    case neg::Imm::fin:
        peer_fin_.store(true, std::memory_order_release);
        if (v == neg::kFinClosed)
            peer_closed_ = true;
        break;
    case neg::Imm::reset:
        reset_ = true;
        break;
    case neg::Imm::prefix:
        if (side_ != Side::client || prefix_known_ || v < tcp_read_) {
            fail("unexpected PREFIX");
            return;
        }
        prefix_known_ = true;
        prefix_left_ = v - tcp_read_;
        break;
    case neg::Imm::switch_at:
        // Only a server that is verifying expects it, once, and never behind what it
        // has already delivered from the TCP stream.
        if (side_ != Side::server || phase_.load() != Phase::verifying || switch_known_ || v < tcp_read_) {
            if (side_ == Side::server && phase_.load() == Phase::verifying)
                give_up_verify_locked(Reason::bad_message);
            else
                fail("unexpected SWITCH");
            return;
        }
        switch_known_ = true;
        switch_at_ = v;
        RS_DEBUG("connection fd=%d: SWITCH(%u) with %llu TCP bytes read", tcp_fd_, v,
                 static_cast<unsigned long long>(tcp_read_));
        // No deadline from here: the bytes at offset n decide (the CONFIRM, or anything
        // else: TCP), and a third party cannot write into the stream.  Giving up before
        // they came could deliver a late CONFIRM as the program's bytes.
        sh_.wake();
        break;
    default:
        fail("unknown message type");
        return;
    }
}

void Conn::fail(const char *why) noexcept
{
    if (!reset_ && !failed_)
        RS_DEBUG("connection fd=%d reset: %s", tcp_fd_, why);
    reset_ = true;
    update_shadows_locked(true);
}

void Conn::on_completion_event() noexcept
{
    if (!cq_ || dead_)
        return;
    while (cq_->ack_event() >= 0) {
    }
    bool unwatch = false;
    {
        std::lock_guard<std::mutex> lk(mu_);
        poll_cq_locked();
        cq_->arm();
        poll_cq_locked();
        update_shadows_locked();
        cv_.notify_all();
        // Nothing held back any more: the watch for it ends (a retired connection's
        // watch is the engine's, for the peer's FIN).
        if (!closed_ && tx_posted_ == tx_prod_ && coalescing_watched_.load(std::memory_order_relaxed)) {
            coalescing_watched_.store(false);
            unwatch = true;
        }
    }
    if (unwatch)
        refresh_watch();  // outside the connection's lock, as every caller
}

void Conn::on_tcp_event(unsigned events) noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_)
        return;
    Phase p = phase_.load();
    if ((events & POLLOUT) && confirm_pending_.load(std::memory_order_relaxed))
        push_confirm_locked();  // the TCP socket drained: the rest of the CONFIRM
    if (side_ == Side::server && p == Phase::verifying && (events & (POLLIN | POLLRDHUP | POLLHUP))) {
        poll_cq_locked();
        try_confirm_locked();  // switch even if the program never reads (nothing before it)
        return;
    }
    if (p != Phase::rdma)
        return;
    if ((events & POLLPRI) && !urgent_) {
        urgent_ = true;
        update_shadows_locked(true);
    }
    if (events & (POLLRDHUP | POLLHUP | POLLERR)) {
        if (!tcp_eof_) {
            tcp_eof_ = true;
            grace_deadline_ = std::chrono::steady_clock::now() +
                              std::chrono::milliseconds(rt::config().peer_grace_ms);
        }
        if ((events & (POLLHUP | POLLERR)) && !peer_fin_)
            fail("the TCP connection was reset");
        else if ((events & (POLLHUP | POLLERR)) && peer_closed_ && !tcp_error_) {
            tcp_error_ = true;  // the RST our writes after the peer's close provoked
            update_shadows_locked(true);
        }
    }
    if (side_ == Side::client && !(prefix_known_ && prefix_left_ == 0) && (events & (POLLIN | POLLRDHUP))) {
        // The server's pre-switch bytes (or its EOF) arrived on the TCP socket.
        sh_.edge();  // a new arrival: edge-triggered waiters see an edge
        update_shadows_locked(true);
    }
}

bool Conn::on_timer(std::chrono::steady_clock::time_point now) noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (!tcp_eof_ || peer_fin_ || reset_)
        return false;
    if (now < grace_deadline_)
        return true;
    // The peer's TCP connection closed and no FIN came over RDMA: the peer died.
    fail("peer closed its TCP connection without an RDMA FIN");
    return false;
}

/* ---- readiness -------------------------------------------------------------------------- */

bool Conn::readable_locked() const noexcept
{
    if (reset_ || failed_ || shut_rd_ || tcp_error_)
        return true;
    if (side_ == Side::client && !(prefix_known_ && prefix_left_ == 0))
        // The server's bytes from before its switch come first, from the TCP socket
        // (its EOF too): the eventfd follows them, so that it never stays readable with
        // nothing to read (an epoll waiter would spin on it).
        return tcp_eof_ || tcp_prefix_bytes_locked() > 0;
    const uint64_t lowat = static_cast<uint64_t>(rcvlowat_.load(std::memory_order_relaxed));
    return rx_prod_ - rx_cons_ >= lowat || peer_fin_;
}

bool Conn::writable_locked() const noexcept
{
    if (reset_ || failed_ || shut_wr_ || peer_closed_)
        return true;  // after the peer's close, writes go to the TCP socket
    uint64_t space = tx_.size - (tx_prod_ - tx_acked_);
    uint64_t sq_used = wr_posted_ - wr_completed_;
    return space > 0 && sq_used + 3 < sq_depth_;
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
    std::lock_guard<std::mutex> lk(mu_);
    poll_cq_locked();
    update_shadows_locked(true);
}

void Conn::update_shadows_locked(bool force) noexcept
{
    // Nobody watches the eventfds (no epoll registration): skip the two syscalls; the
    // first watcher brings them up to date.  Threads blocked in a call or in
    // poll/select wake on the completion channel; state changes that come from
    // elsewhere (a reset seen on the TCP socket) force the update.
    if (phase_.load() != Phase::rdma || dead_ ||
        (!force && !sh_.watched()))
        return;
    // (Urgent data wakes POLLPRI waiters: they recompute.)
    sh_.set(readable_locked() || urgent_, writable_locked());
}

unsigned Conn::poll_mask(int) noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    Phase p = phase_.load();
    if (p != Phase::rdma) {
        pollfd pf{tcp_fd_, POLLIN | POLLOUT | POLLRDHUP, 0};
        return RS_REAL(poll)(&pf, 1, 0) > 0 ? static_cast<unsigned>(pf.revents) : 0;
    }
    poll_cq_locked();
    update_shadows_locked();
    if (reset_ || failed_)
        return POLLIN | POLLOUT | POLLERR | POLLHUP | POLLRDHUP;
    unsigned m = 0;
    if (side_ == Side::client && !(prefix_known_ && prefix_left_ == 0)) {
        // The server's bytes from before its switch come first, from the TCP socket:
        // readable at its EOF, or once SO_RCVLOWAT bytes are there to read.
        pollfd pf{tcp_fd_, POLLIN | POLLRDHUP, 0};
        const bool tcp_eof = RS_REAL(poll)(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
        const uint64_t n = tcp_prefix_bytes_locked() + (prefix_known_ ? rx_prod_ - rx_cons_ : 0);
        if (tcp_eof || shut_rd_ || n >= static_cast<uint64_t>(rcvlowat_.load(std::memory_order_relaxed)))
            m |= POLLIN;
    } else if (readable_locked()) {
        m |= POLLIN;
    }
    if (writable_locked())
        m |= POLLOUT;
    if (peer_fin_) {
        m |= POLLRDHUP | POLLIN;
        if (shut_wr_)
            m |= POLLHUP;
    }
    if (shut_rd_)
        m |= POLLRDHUP | POLLIN;  // SHUT_RD: reads return EOF at once
    if (urgent_) {
        pollfd pf{tcp_fd_, POLLPRI, 0};
        if (RS_REAL(poll)(&pf, 1, 0) > 0 && (pf.revents & POLLPRI))
            m |= POLLPRI;
        else
            urgent_ = false;  // read (MSG_OOB) meanwhile
    }
    if (peer_closed_) {  // what the TCP socket says once the peer's RST came
        pollfd pf{tcp_fd_, POLLOUT, 0};
        if (RS_REAL(poll)(&pf, 1, 0) > 0)
            m |= static_cast<unsigned>(pf.revents) & (POLLERR | POLLHUP);
    }
    return m;
}

int Conn::wait(int efd, short events, short tcp_events, bool for_send,
               std::unique_lock<std::mutex> &lk, Deadline &dl, bool check_nonblocking) noexcept
{
    // A server waiting for the client's SWITCH sleeps on its completions too.
    const Phase ph = phase_.load();
    const bool have_cq = (ph == Phase::rdma || (ph == Phase::verifying && side_ == Side::server)) && cq_ && !dead_;
    // Busy-poll mode (RDMASOCK_BUSY_POLL_US): spin on the completion queue for a bounded
    // time before sleeping.  Off by default: an idle process uses no CPU.  The spin comes
    // before the socket's timeout is read (a system call the data often makes needless);
    // a timeout counts from the spin's start.
    long spin_us = rt::config().busy_poll_us;
    std::chrono::steady_clock::time_point spun_from{};
    if (spin_us > 0 && have_cq && tcp_events == 0) {
        // (The clock is read once in 16 polls, the first time after 16: where it is no
        // vDSO read, e.g. an HPET clock source, each read is a system call that would
        // delay seeing the data.  The spin is longer than the tunable by those 16 polls.)
        std::chrono::steady_clock::time_point end{};
        for (unsigned i = 1;; ++i) {
            poll_cq_locked();
            update_shadows_locked();
            if (efd == sh_.rd_fd() ? readable_locked() : writable_locked())
                return 1;  // (the completion queue was just polled)
            lk.unlock();
            __builtin_ia32_pause();
            lk.lock();
            if (i % 16 == 0) {
                const auto now = std::chrono::steady_clock::now();
                if (i == 16) {
                    spun_from = now;
                    end = now + std::chrono::microseconds(spin_us);
                } else if (now >= end) {
                    break;
                }
            }
        }
    }
    // The spin came before the O_NONBLOCK check (spin_before_flag_check): a socket that
    // is nonblocking after all (another process changed the flag) does not sleep.
    if (check_nonblocking && nonblocking())
        return -EAGAIN;
    int tmo = timeout_ms(tcp_fd_, for_send);
    const bool has_timeout = tmo >= 0;
    if (has_timeout) {
        auto now = std::chrono::steady_clock::now();
        if (!dl.set) {
            dl.set = true;
            dl.at = (spun_from.time_since_epoch().count() != 0 ? spun_from : now) + std::chrono::milliseconds(tmo);
        }
        auto left = std::chrono::duration_cast<std::chrono::microseconds>(dl.at - now).count();
        if (left <= 0)
            return -EAGAIN;
        tmo = static_cast<int>((left + 999) / 1000);
    }
    // Before the switch, look again at least every 50 ms: the switch happens on another
    // thread and its wake-up is an eventfd that a later update may drain.
    bool sliced = false;
    if (phase_.load() != Phase::rdma && (tmo < 0 || tmo > 50)) {
        tmo = 50;
        sliced = true;
    }
    update_shadows_locked(true);  // no stale "readable" left to wake us for nothing
    // While a thread sleeps here, whoever handles a completion (another thread of the
    // program, the progress thread) keeps the eventfds current: a credit taken in by a
    // reader must wake a writer sleeping on the writable eventfd.
    sh_.sleep_begin();
    lk.unlock();
    // The waiting thread also watches the completion channel itself, so a wake-up does
    // not have to go through the progress thread (whichever reads the event first
    // handles it; both re-arm and re-poll, so none is lost).
    pollfd p[3] = {{efd, events, 0}, {have_cq ? comp_fd() : -1, POLLIN, 0}, {tcp_fd_, tcp_events, 0}};
    // A handler that ran since the call began (between two waits, outside any poll)
    // interrupts it as the kernel's signal_pending check before sleeping would.
    if (int sl = sig::last()) {
        sig::clear_last();
        lk.lock();
        sh_.sleep_end();
        return sig::restart_after(sl, has_timeout) ? 0 : -EINTR;
    }
    int r = RS_REAL(poll)(p, tcp_events ? 3 : 2, tmo);
    int e = errno;
    lk.lock();
    sh_.sleep_end();
    if (r == 0)
        return sliced ? 0 : -EAGAIN;  // a slice ended: the caller looks again
    if (r < 0 && e == EINTR) {
        const int sl = sig::last();
        sig::clear_last();
        return sig::restart_after(sl, has_timeout) ? 0 : -EINTR;
    }
    if (r < 0)
        return -e;
    if (have_cq && (p[1].revents & POLLIN)) {
        // One event per arming: one read (another one pending keeps the fd readable).
        cq_->ack_event();
        poll_cq_locked();
        cq_->arm();
        poll_cq_locked();
        update_shadows_locked();
        cv_.notify_all();
        if (!(efd == sh_.rd_fd() && (p[0].revents & POLLIN) && !sh_.readable_set()))
            return 1;  // (the completion queue was just polled)
    }
    // A stale wake-up of a level flag we are about to recompute: drain it.
    if (efd == sh_.rd_fd() && (p[0].revents & POLLIN))
        sh_.drain_stale();
    return 0;
}

/* ---- server: CONFIRM --------------------------------------------------------------------- */

void Conn::note_declined(Reason why) noexcept
{
    declined_.store(why, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lk(mu_);
    if (side_ == Side::server && phase_.load() == Phase::maybe && !closed_)
        decide_tcp_locked(why);
}

void Conn::note_late_request() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (side_ == Side::server && phase_.load() == Phase::tcp && !closed_ && sock_ != nullptr &&
        sock_->reason.load(std::memory_order_relaxed) == Reason::peer_no_rdmasock)
        sock_->reason.store(Reason::timeout, std::memory_order_relaxed);
}

void Conn::note_closing() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (side_ != Side::server || sock_ == nullptr)
        return;
    // (A connection that moved no byte stays pending: nothing was decided about it.)
    if (phase_.load() == Phase::maybe && interested_.load() && (tcp_read_ > 0 || tcp_sent_ > 0)) {
        sock_->reason.store(undecided_reason(), std::memory_order_relaxed);
    } else if (phase_.load() == Phase::verifying) {
        sock_->reason.store(Reason::closed_early, std::memory_order_relaxed);  // the switch never completed
    }
}

bool Conn::continue_on(int keep) noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    // Only on RDMA: from there on no path reads or writes through the program's number
    // (the server's bytes from before its switch are read through tcp_fd_).
    if (closed_ || phase_.load() != Phase::rdma || failed_ || reset_ || peer_closed_ || urgent_)
        return false;
    tcp_fd_ = keep;
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
    leave_pending_locked();
}

int Conn::presw_step_locked() noexcept
{
    const Phase p = phase_.load();
    if (p == Phase::maybe) {
        // A server's connection that no RDMA request claimed in time is plain TCP.
        if (side_ == Side::server && maybe_deadline_.time_since_epoch().count() != 0 &&
            std::chrono::steady_clock::now() > maybe_deadline_) {
            decide_tcp_locked(undecided_reason());
            return -1;
        }
        return 0;
    }
    if (p != Phase::verifying)
        return p == Phase::rdma ? 1 : -1;
    poll_cq_locked();  // the SWITCH
    if (phase_.load() != Phase::verifying)
        return phase_.load() == Phase::rdma ? 1 : -1;
    if (!switch_known_)
        return gate_expired_locked();
    if (tcp_read_ < switch_at_)
        return 0;
    return try_confirm_locked();
}

int Conn::presw_gated() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (phase_.load() == Phase::rdma || presw_step_locked() > 0)
        return -1;
    return phase_.load() == Phase::verifying && tcp_limit_locked() == 0 ? 1 : 0;
}

uint64_t Conn::tcp_limit_locked() const noexcept
{
    if (phase_.load() == Phase::maybe)
        return UINT64_MAX;
    if (phase_.load() == Phase::verifying && switch_known_)
        return switch_at_ - tcp_read_;
    return 0;
}

ssize_t Conn::presw_recv_locked(msghdr *msg, size_t done, size_t total, uint64_t limit, int flags) noexcept
{
    const int fl = (flags & ~MSG_WAITALL) | MSG_DONTWAIT;
    ssize_t r;
    if (done == 0 && limit >= total)
        r = RS_REAL(recvmsg)(tcp_fd_, msg, fl);
    else
        r = tcp_recv_at(tcp_fd_, msg, done, limit, fl);
    if (r < 0)
        return -errno;
    if (r > 0 && !(flags & MSG_PEEK)) {
        tcp_read_ += static_cast<uint64_t>(r);
        bytes_received_ += static_cast<uint64_t>(r);
    }
    return r;
}

int Conn::gate_expired_locked() noexcept
{
    if (std::chrono::steady_clock::now() <= gate_deadline_)
        return 0;
    // No SWITCH in time.  The queue pair stops first (rdma_disconnect moves it to the
    // error state), then the completion queue is read once more: a SWITCH that got in
    // before is honoured, and none can get in (nor be acknowledged, so no CONFIRM can
    // follow) after.  Giving up without that could race a SWITCH arriving this moment.
    up_.release_rdma(*this);
    poll_cq_locked();
    if (switch_known_) {
        // Its CONFIRM may follow (if the acknowledgement left before the stop): it must
        // be taken out of the stream, but the queue pair is gone (try_confirm_locked).
        qp_stopped_ = true;
        return 0;
    }
    give_up_verify_locked(Reason::timeout);
    return -1;
}

void Conn::give_up_verify_locked(Reason why) noexcept
{
    RS_DEBUG("connection fd=%d: no valid SWITCH/CONFIRM from the RDMA peer (%s): TCP", tcp_fd_,
             reason_code(why));
    decide_tcp_locked(why);
}

int Conn::try_confirm_locked() noexcept
{
    // Only a server looks for a CONFIRM, and only at the offset the client's SWITCH
    // named: a client's inbound bytes are the server's own (a banner), never ours.
    if (closed_ || side_ != Side::server || phase_.load() != Phase::verifying || !switch_known_ ||
        tcp_read_ != switch_at_)
        return 0;
    uint8_t buf[neg::kConfirmSize];
    ssize_t n = RS_REAL(recv)(tcp_fd_, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;  // the bytes at the SWITCH's offset decide, whenever they come
    if (n <= 0) {
        give_up_verify_locked(Reason::bad_message);
        return -1;
    }
    auto m = neg::match_confirm(buf, static_cast<size_t>(n), &nonce_);
    if (m == neg::ConfirmMatch::no) {
        give_up_verify_locked(qp_stopped_ ? Reason::timeout : Reason::bad_message);
        return -1;
    }
    if (m == neg::ConfirmMatch::partial)
        return 0;
    n = RS_REAL(recv)(tcp_fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n != static_cast<ssize_t>(sizeof buf)) {
        give_up_verify_locked(Reason::bad_message);
        return -1;
    }
    if (qp_stopped_) {
        // The client switched, but this side had stopped the queue pair: the CONFIRM is
        // out of the stream, and the connection cannot go on.
        phase_.store(Phase::rdma, std::memory_order_release);
        fail("the SWITCH came as the wait for it ended");
        return 1;
    }
    if (tcp_sent_ > neg::kImmValueMask || post_ctrl_locked(neg::Imm::prefix, static_cast<uint32_t>(tcp_sent_)) != 0) {
        // Bytes went into the TCP stream and the client is committed to RDMA: nothing
        // else can be done than reset this connection.
        phase_.store(Phase::rdma, std::memory_order_release);
        fail("cannot announce the TCP prefix");
        return 1;
    }
    enter_rdma_locked(socket_rcvlowat(tcp_fd_));
    if (verify_watch_.exchange(false))
        refresh_watch();
    // No eventfd update here: it could drain the wake-up just written before the
    // thread waiting for the switch has run.
    RS_DEBUG("connection fd=%d: server switched to RDMA after %llu TCP bytes", tcp_fd_,
             static_cast<unsigned long long>(tcp_sent_));
    return 1;
}

void Conn::enter_rdma_locked(int lowat) noexcept
{
    set_rcvlowat(lowat);
    phase_.store(Phase::rdma, std::memory_order_release);
    // Wake a poll/select sleeping on the pre-switch readiness (it starts over with the
    // eventfds); the first update by a watcher drains it if not readable.
    sh_.wake_set();
    leave_pending_locked();
    if (sock_ != nullptr)
        sock_->reason.store(Reason::none, std::memory_order_relaxed);
    rt::g_offloaded.fetch_add(1, std::memory_order_relaxed);
    up_.switched_to_rdma(tcp_fd_, *this);
}

void Conn::leave_pending_locked() noexcept
{
    if (pending_counted_) {
        pending_counted_ = false;
        rt::g_pending.fetch_sub(1, std::memory_order_relaxed);
    }
}

void Conn::enter_pending() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    if (!pending_counted_ && phase_.load() != Phase::rdma && phase_.load() != Phase::tcp) {
        pending_counted_ = true;
        rt::g_pending.fetch_add(1, std::memory_order_relaxed);
    }
}

void Conn::decide_tcp_locked(Reason why) noexcept
{
    phase_.store(Phase::tcp, std::memory_order_release);
    if (verify_watch_.exchange(false))
        refresh_watch();
    leave_pending_locked();
    if (sock_ != nullptr) {
        sock_->reason.store(why, std::memory_order_relaxed);
        sock_->set_offloaded(false);
    }
    up_.decided_tcp(tcp_fd_);
    if (id_)
        up_.release_rdma(*this);
}

/* ---- posting -------------------------------------------------------------------------- */

int Conn::post_write_locked(uint64_t off, const void *src, uint32_t len, uint32_t lkey,
                            bool with_imm, uint32_t imm, bool inline_data) noexcept
{
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uint64_t>(src);
    sge.length = len;
    sge.lkey = lkey;
    if (dead_)
        return -EPIPE;
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_posted_ + 1;
    wr.sg_list = len > 0 ? &sge : nullptr;
    wr.num_sge = len > 0 ? 1 : 0;
    wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = peer_ring_.addr + off;
    wr.wr.rdma.rkey = peer_ring_.rkey;
    if (inline_data)
        wr.send_flags |= IBV_SEND_INLINE;
    if (++unsignaled_ >= kSignalEvery || wr_posted_ + 4 - wr_completed_ >= sq_depth_) {
        wr.send_flags |= IBV_SEND_SIGNALED;
        unsignaled_ = 0;
        last_signaled_ = wr.wr_id;
    }
    int r = ibv_post_send(qp_->get(), &wr, &bad);
    if (r != 0) {
        failed_ = true;
        return -r;
    }
    ++wr_posted_;
    return 0;
}

int Conn::post_ctrl_locked(neg::Imm t, uint32_t v) noexcept
{
    return post_write_locked(0, nullptr, 0, 0, true, neg::make_imm(t, v), false);
}

void Conn::maybe_credit_locked() noexcept
{
    uint64_t unreported = rx_cons_ - rx_credited_;
    if (unreported >= rx_.size / 4 && !failed_ && !reset_) {
        if (post_ctrl_locked(neg::Imm::credit, static_cast<uint32_t>(unreported)) == 0)
            rx_credited_ = rx_cons_;
    }
}

/* ---- receive --------------------------------------------------------------------------- */

size_t Conn::take_ring_locked(msghdr *msg, size_t at, size_t room, bool peek) noexcept
{
    const uint64_t avail = rx_prod_ - rx_cons_;
    const size_t n = room < avail ? room : static_cast<size_t>(avail);
    copy_ring_iov(rx_.mem, rx_.size, rx_cons_, msg, at, n, true);
    if (!peek) {
        rx_cons_ += n;
        bytes_received_ += n;
        maybe_credit_locked();
    }
    return n;
}

ssize_t Conn::recvmsg(int fd, msghdr *msg, int flags) noexcept
{
    sig::clear_last();  // a handler that runs from here on interrupts the call's waits
    std::unique_lock<std::mutex> lk(mu_);
    Deadline dl;
    bool lowat_gave_up = false;
    bool just_polled = false;  // wait() polled the completion queue as it returned
    const size_t total = iov_total(msg);
    size_t done = 0;
    const bool peek = flags & MSG_PEEK;
    const bool waitall = (flags & MSG_WAITALL) && !peek;
    msg->msg_flags = 0;
    msg->msg_controllen = 0;
    if (msg->msg_name)
        msg->msg_namelen = 0;
    for (;;) {
        Phase p = phase_.load();
        if (p == Phase::tcp) {
            lk.unlock();
            ssize_t r = RS_REAL(recvmsg)(fd, msg, flags);
            return r < 0 ? -errno : r;
        }
        if (p == Phase::rdma && (flags & MSG_OOB)) {  // urgent data: on the TCP socket
            lk.unlock();
            ssize_t r = RS_REAL(recvmsg)(fd, msg, flags);
            return r < 0 ? -errno : r;
        }
        if (p != Phase::rdma) {  // before the switch: the TCP socket, counted
            if (side_ == Side::server && !interested_.load(std::memory_order_relaxed)) {
                lk.unlock();
                note_interest();
                lk.lock();
                continue;
            }
            if (flags & MSG_OOB) {  // the urgent byte is not part of the counted stream
                lk.unlock();
                ssize_t r = RS_REAL(recvmsg)(fd, msg, flags);
                return r < 0 ? -errno : r;
            }
            if (presw_step_locked() != 0)
                continue;
            const uint64_t limit = tcp_limit_locked();
            const bool block = !((flags & MSG_DONTWAIT) || nonblocking());
            if (limit > 0) {
                // A blocking call reads once poll() says readable, which honours
                // SO_RCVLOWAT as the kernel's own blocking read does.
                bool ready = true;
                if (block && done == 0 && total > 0) {
                    pollfd pf{tcp_fd_, POLLIN, 0};
                    ready = RS_REAL(poll)(&pf, 1, 0) > 0;
                }
                if (ready) {
                    ssize_t r = presw_recv_locked(msg, done, total, limit, flags);
                    if (r > 0) {
                        done += static_cast<size_t>(r);
                        if (!waitall || done == total)
                            return static_cast<ssize_t>(done);
                        continue;
                    }
                    if (r == 0)
                        return static_cast<ssize_t>(done);  // EOF (or an empty buffer)
                    if (r != -EAGAIN && r != -EWOULDBLOCK && r != -EINTR)
                        return done > 0 ? static_cast<ssize_t>(done) : r;
                }
            }
            if (!block)
                return done > 0 ? static_cast<ssize_t>(done) : -EAGAIN;
            // Gated (a server waiting for the SWITCH): the TCP socket may be readable
            // with bytes not ours to deliver yet; sleep on the eventfd and completions.
            const bool tcp_input = limit > 0 || (p == Phase::verifying && switch_known_);
            int w = wait(sh_.rd_fd(), POLLIN, tcp_input ? POLLIN : 0, false, lk, dl);
            if (w < 0)
                return done > 0 ? static_cast<ssize_t>(done) : w;
            sh_.drain();
            continue;
        }
        if (!just_polled)
            poll_cq_locked();
        just_polled = false;
        if (total == 0)
            return 0;
        if (side_ == Side::client && !(prefix_known_ && prefix_left_ == 0)) {
            // Bytes the server sent on TCP before it switched come first, into the
            // program's buffer at `done` (MSG_WAITALL fills it across both sources).
            size_t want = total - done;
            if (prefix_known_ && want > prefix_left_)
                want = static_cast<size_t>(prefix_left_);
            int fl = MSG_DONTWAIT | (flags & MSG_PEEK);
            ssize_t r = want ? tcp_recv_at(tcp_fd_, msg, done, want, fl) : 0;
            int e = errno;
            if (r > 0) {
                if (!peek) {
                    if (prefix_known_)
                        prefix_left_ -= static_cast<uint64_t>(r);
                    else
                        tcp_read_ += static_cast<uint64_t>(r);
                    bytes_received_ += static_cast<uint64_t>(r);
                }
                done += static_cast<size_t>(r);
                const bool prefix_done = prefix_known_ && (peek ? static_cast<uint64_t>(r) == prefix_left_ : prefix_left_ == 0);
                if (!waitall && done < total && prefix_done && !shut_rd_ && rx_prod_ != rx_cons_) {
                    // The prefix ends inside this call: what the ring already holds comes
                    // with it, as one kernel read returns everything queued (a poll that
                    // counted both for SO_RCVLOWAT must not get a shorter read).
                    done += take_ring_locked(msg, done, total - done, peek);
                }
                update_shadows_locked();
                if (!waitall || done == total)
                    return static_cast<ssize_t>(done);
                continue;
            }
            if (r == 0 && want > 0 && !prefix_known_) {
                // The server closes its TCP socket only after its RDMA FIN completed, so a
                // PREFIX it sent is in our completion queue by now: look once more (the
                // TCP EOF may have arrived after this call's first look).
                poll_cq_locked();
                if (prefix_known_)
                    continue;
                return static_cast<ssize_t>(done);  // the server closed before it ever switched: plain EOF
            }
            if (r == 0 && want > 0)
                // The server announced more TCP bytes than its stream holds: they can
                // never come (and waiting for the readable TCP fd would spin).
                fail("the TCP stream ended inside the announced prefix");
            if (r < 0 && e != EAGAIN && e != EINTR)
                return done > 0 ? static_cast<ssize_t>(done) : -e;
            if (!prefix_known_ || prefix_left_ > 0) {
                if (reset_ || failed_)
                    return done > 0 ? static_cast<ssize_t>(done) : -ECONNRESET;
                if ((flags & MSG_DONTWAIT) || nonblocking())
                    return done > 0 ? static_cast<ssize_t>(done) : -EAGAIN;
                flush_locked();
                int w = wait(sh_.rd_fd(), POLLIN, POLLIN, false, lk, dl);
                if (w < 0)
                    return done > 0 ? static_cast<ssize_t>(done) : w;
                continue;
            }
        }
        uint64_t avail = rx_prod_ - rx_cons_;
        // SO_RCVLOWAT: a blocking call waits for that many bytes (or all it asked for).
        const uint64_t lowat = static_cast<uint64_t>(rcvlowat_.load(std::memory_order_relaxed));
        if (avail > 0 && done == 0 && !waitall && !lowat_gave_up && avail < lowat && avail < total && !shut_rd_ &&
            !peer_fin_ && !reset_ && !failed_ && !(flags & MSG_DONTWAIT) && !nonblocking()) {
            flush_locked();
            if (wait(sh_.rd_fd(), POLLIN, 0, false, lk, dl) < 0)
                lowat_gave_up = true;  // timeout or signal: what there is, as the kernel
            continue;
        }
        if (avail > 0 && !shut_rd_) {
            done += take_ring_locked(msg, done, total - done, peek);
            update_shadows_locked();
            if (!waitall || done == total)
                return static_cast<ssize_t>(done);
            continue;
        }
        if (done > 0 && (peer_fin_ || reset_ || failed_ || shut_rd_))
            return static_cast<ssize_t>(done);
        if (peer_fin_ || shut_rd_)
            return 0;
        if (reset_ || failed_) {
            if (!reset_reported_) {
                reset_reported_ = true;
                return -ECONNRESET;
            }
            return 0;
        }
        // (Busy-poll mode: a socket last seen blocking spins first; wait() reads the flag
        // before it sleeps.)
        const bool spin_first = spin_before_flag_check(flags);
        if (!spin_first && ((flags & MSG_DONTWAIT) || nonblocking()))
            return done > 0 ? static_cast<ssize_t>(done) : -EAGAIN;
        flush_locked();  // about to sleep for input: what we coalesced goes out first
        int w = wait(sh_.rd_fd(), POLLIN, 0, false, lk, dl, spin_first);
        if (w < 0)
            return done > 0 ? static_cast<ssize_t>(done) : w;
        just_polled = w > 0;
    }
}

/* ---- send ------------------------------------------------------------------------------ */

ssize_t Conn::tx_ring_locked(const msghdr *msg, size_t skip, size_t n, bool hold) noexcept
{
    const uint64_t off = tx_prod_ & (tx_.size - 1);
    ++writes_;
    // Small and contiguous, nothing staged before it: inline, straight from the program's
    // buffer.
    if (!hold && tx_posted_ == tx_prod_ && n <= max_inline_ && n <= tx_.size - off && msg->msg_iovlen >= 1) {
        size_t i = 0, s = skip;
        while (i < msg->msg_iovlen && s >= msg->msg_iov[i].iov_len)
            s -= msg->msg_iov[i++].iov_len;
        if (i < msg->msg_iovlen && msg->msg_iov[i].iov_len - s >= n) {
            const uint8_t *src = static_cast<const uint8_t *>(msg->msg_iov[i].iov_base) + s;
            const uint32_t imm = neg::make_imm(neg::Imm::data, static_cast<uint32_t>(n));
            if (post_write_locked(off, src, static_cast<uint32_t>(n), 0, true, imm, true) != 0)
                return -EPIPE;
            tx_prod_ += n;
            tx_posted_ = tx_prod_;
            ++data_msgs_;
            return static_cast<ssize_t>(n);
        }
    }
    copy_ring_iov(tx_.mem, tx_.size, tx_prod_, msg, skip, n, false);
    tx_prod_ += n;
    if (hold && tx_prod_ - tx_posted_ < kCoalesceBelow)
        return static_cast<ssize_t>(n);  // staged: goes out with the next flush
    if (flush_locked() != 0)
        return -EPIPE;
    return static_cast<ssize_t>(n);
}

int Conn::flush_locked() noexcept
{
    if (failed_ || reset_)
        return -EPIPE;
    const uint64_t n = tx_prod_ - tx_posted_;
    if (n == 0)
        return 0;
    const uint64_t off = tx_posted_ & (tx_.size - 1);
    const uint64_t first = n < tx_.size - off ? n : tx_.size - off;
    const uint32_t imm = neg::make_imm(neg::Imm::data, static_cast<uint32_t>(n));
    const uint32_t lkey = tx_.mr->lkey();
    if (first < n) {
        if (post_write_locked(off, tx_.mem + off, static_cast<uint32_t>(first), lkey, false, 0, false) != 0 ||
            post_write_locked(0, tx_.mem, static_cast<uint32_t>(n - first), lkey, true, imm, false) != 0)
            return -EPIPE;
    } else if (post_write_locked(off, tx_.mem + off, static_cast<uint32_t>(n), lkey, true, imm,
                                 n <= max_inline_) != 0) {
        return -EPIPE;
    }
    tx_posted_ = tx_prod_;
    ++data_msgs_;
    return 0;
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
    std::unique_lock<std::mutex> lk(mu_);
    Deadline dl;
    const size_t total = iov_total(msg);
    size_t done = 0;
    for (;;) {
        Phase p = phase_.load();
        if (p == Phase::tcp) {
            lk.unlock();
            ssize_t r = RS_REAL(sendmsg)(fd, msg, flags);
            return r < 0 ? -errno : r;
        }
        if (p != Phase::rdma) {  // before the switch: TCP, counted
            if ((flags & MSG_OOB) && p == Phase::maybe) {
                // Several urgent bytes make the receiver's in-band count ambiguous:
                // the connection stays on TCP.
                decide_tcp_locked(Reason::urgent_data);
                continue;
            }
            ssize_t r = RS_REAL(sendmsg)(fd, msg, flags | MSG_DONTWAIT);
            if (r >= 0) {
                // The urgent byte is not in the peer's in-band stream (one per send;
                // SO_OOBINLINE is not supported).
                tcp_sent_ += static_cast<uint64_t>(r) - ((flags & MSG_OOB) && r > 0 ? 1 : 0);
                bytes_sent_ += static_cast<uint64_t>(r);
                return r;
            }
            if (errno != EAGAIN || (flags & MSG_DONTWAIT) || nonblocking())
                return -errno;
            // Wait for room in the TCP send buffer (in slices, and woken by the switch:
            // then the bytes go to the ring).
            int w = wait(sh_.rd_fd(), POLLIN, POLLOUT, true, lk, dl);
            if (w < 0)
                return w;
            continue;
        }
        poll_cq_locked();
        if ((flags & MSG_OOB) && total > 0 && done == 0 && !reset_ && !failed_ && !shut_wr_ && !peer_closed_) {
            // Urgent data goes on the TCP socket (the peer's kernel shows POLLPRI and
            // keeps it for recv(MSG_OOB)); the bytes before the last are ordinary data.
            lk.unlock();
            return send_urgent(fd, msg, total, flags);
        }
        // (Also in a fork child, whose copy is otherwise dead: the TCP socket is shared.)
        if (peer_closed_ && (dead_ || (!reset_ && !failed_)) && !shut_wr_ && done == 0) {
            // The peer closed: as with the kernel's TCP, the bytes go to a socket nobody
            // reads, and its kernel answers with an RST (then EPIPE and SIGPIPE here).
            lk.unlock();
            ssize_t r = RS_REAL(sendmsg)(fd, msg, flags);
            int e = errno;
            lk.lock();
            if (r > 0)
                bytes_sent_ += static_cast<uint64_t>(r);
            return r < 0 ? -e : r;
        }
        if (reset_ || failed_ || shut_wr_) {
            if (done > 0)
                return static_cast<ssize_t>(done);
            if (!shut_wr_ && !reset_reported_ && reset_) {
                reset_reported_ = true;
                return -ECONNRESET;
            }
            if (!(flags & MSG_NOSIGNAL))
                raise(SIGPIPE);
            return -EPIPE;
        }
        if (total == 0)
            return 0;
        uint64_t space = tx_.size - (tx_prod_ - tx_acked_);
        uint64_t sq_used = wr_posted_ - wr_completed_;
        if (space > 0 && sq_used + 3 < sq_depth_) {
            size_t n = total - done < space ? total - done : static_cast<size_t>(space);
            if (n > neg::kImmValueMask)
                n = neg::kImmValueMask;
            // Coalesce a small write while a signalled one is in flight.
            const bool hold = n < kCoalesceBelow && last_signaled_ > wr_completed_;
            ssize_t r = tx_ring_locked(msg, done, n, hold);
            if (hold && tx_posted_ != tx_prod_ && !coalescing_watched_.exchange(true))
                watch_after.c = this;
            if (r < 0)
                return done > 0 ? static_cast<ssize_t>(done) : r;
            done += static_cast<size_t>(r);
            bytes_sent_ += static_cast<uint64_t>(r);
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
        flush_locked();
        int w = wait(sh_.wr_fd(), POLLOUT, 0, true, lk, dl);
        if (w < 0)
            return done > 0 ? static_cast<ssize_t>(done) : w;
    }
}

ssize_t Conn::send_urgent(int fd, const msghdr *msg, size_t total, int flags) noexcept
{
    ssize_t head = 0;
    if (total > 1) {
        iovec iov[64];
        msghdr m{};
        m.msg_iov = iov;
        size_t left = total - 1;
        for (size_t i = 0; i < msg->msg_iovlen && left > 0 && m.msg_iovlen < 64; ++i) {
            size_t n = msg->msg_iov[i].iov_len < left ? msg->msg_iov[i].iov_len : left;
            if (n == 0)
                continue;
            iov[m.msg_iovlen++] = {msg->msg_iov[i].iov_base, n};
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
    std::lock_guard<std::mutex> lk(mu_);
    bytes_sent_ += 1;
    return head + 1;
}

int Conn::shutdown(int fd, int how) noexcept
{
    std::unique_lock<std::mutex> lk(mu_);
    if (side_ == Side::client && phase_.load() == Phase::maybe)
        decide_tcp_locked(Reason::closed_early);  // a switch could not send its CONFIRM
    if (phase_.load() != Phase::rdma) {
        lk.unlock();
        return RS_REAL(shutdown)(fd, how) < 0 ? -errno : 0;
    }
    if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
        return -EINVAL;
    // Both FINs exchanged: the kernel's socket would be closed (TIME_WAIT or CLOSE).
    if (fin_sent_ && peer_fin_)
        return -ENOTCONN;
    if (how != SHUT_WR)
        shut_rd_ = true;
    if (how != SHUT_RD && !shut_wr_) {
        shut_wr_ = true;
        flush_locked();  // every byte before the FIN
        if (!fin_sent_ && !reset_ && !failed_ && post_ctrl_locked(neg::Imm::fin, 0) == 0)
            fin_sent_ = true;
    }
    update_shadows_locked();
    return 0;
}

uint64_t Conn::tcp_prefix_bytes_locked() const noexcept
{
    if (side_ != Side::client || (prefix_known_ && prefix_left_ == 0))
        return 0;
    int tcp = 0;
    if (RS_REAL(ioctl)(tcp_fd_, FIONREAD, &tcp) != 0 || tcp <= 0)
        return 0;
    return prefix_known_ && static_cast<uint64_t>(tcp) > prefix_left_ ? prefix_left_ : static_cast<uint64_t>(tcp);
}

int Conn::bytes_readable() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    poll_cq_locked();
    // The server's bytes from before its switch, still on the TCP socket, come first.
    uint64_t n = rx_prod_ - rx_cons_ + tcp_prefix_bytes_locked();
    return n > INT_MAX ? INT_MAX : static_cast<int>(n);
}

int Conn::bytes_unacked() noexcept
{
    std::lock_guard<std::mutex> lk(mu_);
    poll_cq_locked();
    uint64_t n = tx_prod_ - tx_acked_;
    return n > INT_MAX ? INT_MAX : static_cast<int>(n);
}

Counters Conn::counters(int fd) noexcept
{
    if (phase_.load() == Phase::tcp)
        return kernel_tcp().counters(fd);
    std::lock_guard<std::mutex> lk(mu_);
    Counters c;
    c.bytes_sent = bytes_sent_;
    c.bytes_received = bytes_received_;
    return c;
}

void Conn::close_connection(bool abortive) noexcept
{
    std::unique_lock<std::mutex> lk(mu_);
    if (side_ == Side::server && phase_.load() == Phase::verifying && !closed_) {
        // The client is switched (or about to): its SWITCH and CONFIRM are on their
        // way.  Take them and switch before closing, so that the client reads an
        // orderly EOF (our FIN) and no unread CONFIRM makes our kernel send an RST.
        // (Unread bytes before the CONFIRM make the kernel reset the connection at
        // close, as it does for any socket closed with unread input.)
        auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(rt::config().probe_timeout_ms);
        while (phase_.load() == Phase::verifying && presw_step_locked() == 0 &&
               !(switch_known_ && tcp_read_ < switch_at_) && std::chrono::steady_clock::now() < deadline) {
            lk.unlock();
            pollfd pf[2] = {{tcp_fd_, POLLIN, 0}, {comp_fd(), POLLIN, 0}};
            RS_REAL(poll)(pf, 2, 10);
            lk.lock();
            while (cq_ && cq_->ack_event() >= 0) {
            }
            if (cq_)
                cq_->arm();
        }
    }
    if (phase_.load() != Phase::rdma)
        return;
    poll_cq_locked();
    if (reset_ || failed_)
        return;
    if (abortive) {
        post_ctrl_locked(neg::Imm::reset, 0);
        return;
    }
    if (data_msgs_ > 0)
        RS_DEBUG("connection fd=%d: %llu writes went out in %llu data messages", tcp_fd_,
                 static_cast<unsigned long long>(writes_), static_cast<unsigned long long>(data_msgs_));
    if (flush_locked() != 0)  // every byte before the FIN
        return;
    // FIN "closed" (after a FIN of shutdown(), a second one): the peer learns that this
    // side reads nothing more; signalled, so its completion tells that every byte
    // before it has arrived.
    unsignaled_ = kSignalEvery;
    if (post_ctrl_locked(neg::Imm::fin, neg::kFinClosed) != 0)
        return;
    fin_sent_ = true;
    shut_wr_ = true;
    // Every byte written must reach the peer before the TCP connection closes: wait
    // (bounded) until the FIN, the last request, has completed.
    const uint64_t last = wr_posted_;
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(rt::config().linger_ms);
    while (wr_completed_ < last && !failed_ && !reset_) {
        poll_cq_locked();
        if (wr_completed_ >= last)
            break;
        cq_->arm();
        poll_cq_locked();
        if (wr_completed_ >= last)
            break;
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0)
            break;
        // A peer that has sent its FIN and closed its TCP connection is gone (or going):
        // its queue pair may no longer answer, and it reads nothing more.
        pollfd t{tcp_fd_, POLLRDHUP, 0};
        if (peer_fin_ && RS_REAL(poll)(&t, 1, 0) > 0 && (t.revents & (POLLRDHUP | POLLHUP | POLLERR)))
            break;
        lk.unlock();
        pollfd p{comp_fd(), POLLIN, 0};
        RS_REAL(poll)(&p, 1, static_cast<int>(left < 50 ? left : 50));
        lk.lock();
        while (cq_->ack_event() >= 0) {
        }
    }
    // A client's CONFIRM must be whole in the TCP stream before the socket closes: the
    // server delivers nothing of ours without it.
    while (confirm_pending_.load() && !failed_ && !reset_) {
        push_confirm_locked();
        if (!confirm_pending_.load())
            break;
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0)
            break;
        lk.unlock();
        pollfd p[2] = {{tcp_fd_, POLLOUT, 0}, {comp_fd(), POLLIN, 0}};
        RS_REAL(poll)(p, 2, static_cast<int>(left < 50 ? left : 50));
        lk.lock();
        while (cq_->ack_event() >= 0) {
        }
        cq_->arm();
        poll_cq_locked();
    }
}

void Conn::destroy() noexcept { up_.retire(*this); }

const char *Conn::phase_name() const noexcept
{
    static const char *const kPhases[] = {"maybe", "verifying", "rdma", "tcp"};
    return kPhases[static_cast<int>(phase())];
}

}  // namespace rdmasock
