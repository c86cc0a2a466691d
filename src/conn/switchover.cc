#include "conn/switchover.hh"

#include <cerrno>
#include <memory>
#include <new>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "base/fd.hh"
#include "base/real.hh"
#include "process/runtime.hh"

namespace rdmasock {

namespace {

using Phase = Switchover::Phase;

constexpr unsigned bit(Phase p) noexcept { return 1u << static_cast<unsigned>(p); }

// The machine's edges, one per event (in Event's order): the phases it leaves, the one
// it enters.
struct Edge {
    unsigned from;
    Phase to;
};
constexpr Edge kEdges[] = {
    {bit(Phase::maybe), Phase::rdma},                           // client_switch
    {bit(Phase::maybe), Phase::verifying},                      // server_verify
    {bit(Phase::verifying), Phase::maybe},                      // server_unverify
    {bit(Phase::verifying), Phase::rdma},                       // server_switch
    {bit(Phase::maybe) | bit(Phase::verifying), Phase::tcp},    // decide_tcp
};
static_assert(sizeof kEdges / sizeof kEdges[0] == static_cast<unsigned>(Switchover::Event::decide_tcp) + 1,
              "one edge per event");

}  // namespace

bool Switchover::on(Event e) noexcept
{
    const Edge &edge = kEdges[static_cast<unsigned>(e)];
    if (!(edge.from & bit(phase())))
        return false;
    phase_.store(edge.to, std::memory_order_release);
    if (edge.to == Phase::verifying)
        verify_watch_.store(true);  // the progress thread takes the SWITCH in as it arrives
    return true;
}

void Switchover::enter_pending() noexcept
{
    const Phase p = phase();
    if (!pending_counted_ && p != Phase::rdma && p != Phase::tcp) {
        pending_counted_ = true;
        rt::g_pending.fetch_add(1, std::memory_order_relaxed);
    }
}

void Switchover::leave_pending() noexcept
{
    if (pending_counted_) {
        pending_counted_ = false;
        rt::g_pending.fetch_sub(1, std::memory_order_relaxed);
    }
}

uint64_t Switchover::tcp_limit() const noexcept
{
    const Phase p = phase();
    if (p == Phase::maybe)
        return proof_ahead() ? proof_at_ - tcp_taken_ : UINT64_MAX;
    if (p == Phase::verifying && switch_known_)
        return switch_at_ - tcp_read_;
    return 0;
}

bool Switchover::accept_prefix(uint32_t v) noexcept
{
    if (prefix_known_ || v < tcp_read_)
        return false;
    prefix_known_ = true;
    prefix_left_ = v - tcp_read_;
    return true;
}

bool Switchover::accept_proof_at(uint32_t v) noexcept
{
    if (proof_at_seen_ || v < tcp_taken_)
        return false;
    proof_at_seen_ = true;
    proof_known_ = true;
    proof_at_ = v;
    proof_came_ = Clock::now();
    return true;
}

uint64_t Switchover::without_proof(uint64_t queued) const noexcept
{
    if (!proof_ahead() || queued <= proof_at_ - tcp_taken_)
        return queued;
    const uint64_t in = queued - (proof_at_ - tcp_taken_);
    return queued - (in < neg::kProofSize ? in : neg::kProofSize);
}

int Switchover::look_for_proof(int fd) noexcept
{
    if (!proof_ahead())
        return 0;
    const uint64_t before = proof_at_ - tcp_taken_;
    const size_t want = static_cast<size_t>(before) + neg::kProofSize;
    if (!proof_verified_ && before > 0) {
        // Peeked (a copy of everything before it) only once the bytes queued reach it.
        int queued = 0;
        if (RS_REAL(ioctl)(fd, FIONREAD, &queued) != 0 || static_cast<uint64_t>(queued) <= before ||
            before > kMaxLookahead)
            return 0;
    }
    uint8_t small[256];
    std::unique_ptr<uint8_t[]> big;
    uint8_t *buf = small;
    if (want > sizeof small && !proof_verified_) {
        big.reset(new (std::nothrow) uint8_t[want]);
        if (!big)
            return 0;
        buf = big.get();
    }
    if (!proof_verified_ || before == 0) {
        // The end of the stream is sampled before the bytes: a partial PROOF is given up
        // only when nothing more can come after what was peeked.  A pending error (a
        // reset) is left for the program's call to report: a peek would consume it.
        // (After the program's shutdown(SHUT_RD) the socket reads as ended: only the
        // peer's FIN ends it.)
        pollfd pf{fd, POLLRDHUP, 0};
        const bool ended = RS_REAL(poll)(&pf, 1, 0) > 0 && (!tcp_shut_rd_ || util::tcp_peer_ended(fd));
        if (pf.revents & POLLERR)
            return -1;
        ssize_t n = RS_REAL(recv)(fd, buf, proof_verified_ ? neg::kProofSize : want, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        if (n == 0 && before == 0 && tcp_shut_rd_ && !ended)
            return 0;
        if (n < 0 || (n == 0 && before == 0))
            return -1;
        if (static_cast<uint64_t>(n) <= before)
            return 0;
        auto m = neg::match_proof(buf + before, static_cast<size_t>(n) - before, nonce_);
        if (m == neg::ConfirmMatch::no)
            return -2;
        if (m == neg::ConfirmMatch::partial)
            return ended ? -2 : 0;  // (the rest may come, unless the stream had ended)
        proof_verified_ = true;
    }
    if (before > 0)
        return 1;
    ssize_t n = RS_REAL(recv)(fd, buf, neg::kProofSize, MSG_DONTWAIT);
    if (n != static_cast<ssize_t>(neg::kProofSize))
        return -1;
    proof_taken_ = true;
    return 1;
}

int Switchover::write_frame(int fd) noexcept
{
    static_assert(neg::kProofSize == neg::kConfirmSize, "one buffer for both frames");
    uint8_t c[neg::kConfirmSize];
    if (frame_ == Frame::proof)
        neg::encode_proof(nonce_, c);
    else
        neg::encode_confirm(nonce_, c);
    while (frame_done_ < sizeof c) {
        ssize_t w = RS_REAL(send)(fd, c + frame_done_, sizeof c - frame_done_, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            frame_done_ += static_cast<unsigned>(w);
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (w < 0 && errno == EINTR)
            continue;
        return -1;
    }
    return 1;
}

void Switchover::start_verify(const neg::Nonce &n, Clock::time_point gate_deadline) noexcept
{
    nonce_ = n;
    switch_known_ = false;
    gate_deadline_ = gate_deadline;
}

bool Switchover::accept_switch(uint32_t v) noexcept
{
    // Only a server that is verifying expects it, once, and never behind what it has
    // already delivered from the TCP stream.
    if (phase() != Phase::verifying || switch_known_ || v < tcp_read_)
        return false;
    switch_known_ = true;
    switch_at_ = v;
    return true;
}

int Switchover::take_confirm(int fd) noexcept
{
    uint8_t buf[neg::kConfirmSize];
    ssize_t n = RS_REAL(recv)(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;  // the bytes at the SWITCH's offset decide, whenever they come
    if (n == 0 && tcp_shut_rd_ && !util::tcp_peer_ended(fd))
        return 0;  // (the end of the program's reading, not of the peer's stream)
    if (n <= 0)
        return -1;
    auto m = neg::match_confirm(buf, static_cast<size_t>(n), &nonce_);
    if (m == neg::ConfirmMatch::no)
        return -2;
    if (m == neg::ConfirmMatch::partial)
        return 0;
    n = RS_REAL(recv)(fd, buf, sizeof buf, MSG_DONTWAIT);
    return n == static_cast<ssize_t>(sizeof buf) ? 1 : -1;
}

}  // namespace rdmasock
