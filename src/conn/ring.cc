#include "conn/ring.hh"

#include <cerrno>
#include <cstring>

#include "conn/iov.hh"
#include "rdma/owners.hh"

namespace rdmasock {

neg::RingInfo RingPath::local_ring() const noexcept
{
    neg::RingInfo r;
    r.addr = reinterpret_cast<uint64_t>(rx_.mem);
    r.rkey = rx_.mr ? rx_.mr->rkey() : 0;
    r.log2 = 0;
    for (size_t s = rx_.size; s > 1; s >>= 1)
        ++r.log2;
    return r;
}

Reason RingPath::set_peer_ring(const neg::RingInfo &r) noexcept
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
    tx_.mr = rdma::Mr::reg(link_.pd(), tx_.mem, tx_.size, IBV_ACCESS_LOCAL_WRITE, &err);
    if (!tx_.mr)
        return rdma::memlock_too_small(tx_.mem, tx_.size) || err == ENOMEM ? Reason::memlock
                                                                           : Reason::resource;
    return Reason::none;
}

RingPath::Found RingPath::take_imm(uint32_t imm) noexcept
{
    using Kind = Found::Kind;
    const uint32_t v = neg::imm_value(imm);
    switch (neg::imm_type(imm)) {
    case neg::Imm::data: {
        const uint64_t free_space = rx_.size - (rx_prod_ - rx_cons_);
        if (v == 0 || v > free_space || st.peer_fin)
            return {Kind::fault, v, "peer wrote beyond the space it was granted"};
        rx_prod_ += v;
        return {Kind::data, v, nullptr};
    }
    case neg::Imm::credit:
        if (v > tx_posted_ - tx_acked_)
            return {Kind::fault, v, "peer credited bytes never sent"};
        tx_acked_ += v;
        return {Kind::credit, v, nullptr};
    case neg::Imm::fin:
        st.peer_fin.store(true, std::memory_order_release);
        if (v == neg::kFinClosed)
            st.peer_closed = true;
        return {Kind::fin, v, nullptr};
    case neg::Imm::reset:
        st.reset = true;
        return {Kind::reset, v, nullptr};
    case neg::Imm::prefix:
        return {Kind::prefix, v, nullptr};
    case neg::Imm::prefix_end:  // (the connection takes the end with it, once it accepts the PREFIX)
        return {Kind::prefix_end, v, nullptr};
    case neg::Imm::switch_at:
        return {Kind::switch_at, v, nullptr};
    case neg::Imm::proof_at:
        return {Kind::proof_at, v, nullptr};
    default:
        return {Kind::fault, v, "unknown message type"};
    }
}

size_t RingPath::take(msghdr *msg, size_t at, size_t room, bool peek) noexcept
{
    const uint64_t have = rx_prod_ - rx_cons_;
    const size_t n = room < have ? room : static_cast<size_t>(have);
    iov::copy_ring(rx_.mem, rx_.size, rx_cons_, msg, at, n, true);
    if (!peek) {
        rx_cons_ += n;
        maybe_credit();
    }
    return n;
}

void RingPath::maybe_credit() noexcept
{
    const uint64_t unreported = rx_cons_ - rx_credited_;
    if (unreported >= rx_.size / 4 && !st.failed && !st.reset && !frozen_) {
        if (post_ctrl(neg::Imm::credit, static_cast<uint32_t>(unreported)) == 0)
            rx_credited_ = rx_cons_;
    }
}

int RingPath::post(uint64_t off, const void *src, uint32_t len, uint32_t lkey, bool with_imm, uint32_t imm,
                   bool inline_data) noexcept
{
    if (frozen_)
        return -EPIPE;
    int r = link_.post_write(peer_ring_.addr + off, peer_ring_.rkey, src, len, lkey, with_imm, imm, inline_data);
    if (r != 0 && !link_.dead())
        st.failed = true;
    return r;
}

int RingPath::post_ctrl(neg::Imm t, uint32_t v) noexcept
{
    return post(0, nullptr, 0, 0, true, neg::make_imm(t, v), false);
}

ssize_t RingPath::send(const msghdr *msg, size_t skip, size_t n, bool hold) noexcept
{
    const uint64_t off = tx_prod_ & (tx_.size - 1);
    ++writes_;
    // Small and contiguous, nothing staged before it: inline, straight from the program's
    // buffer.  Staged as well (a copy of at most max_inline bytes): the staging ring holds
    // every byte the peer has not acknowledged, which a fallback to TCP resends
    // (docs/design/tcp-fallback.md).
    if (!hold && tx_posted_ == tx_prod_ && n <= link_.max_inline() && n <= tx_.size - off && msg->msg_iovlen >= 1) {
        size_t i = 0, s = skip;
        while (i < msg->msg_iovlen && s >= msg->msg_iov[i].iov_len)
            s -= msg->msg_iov[i++].iov_len;
        if (i < msg->msg_iovlen && msg->msg_iov[i].iov_len - s >= n) {
            const uint8_t *src = static_cast<const uint8_t *>(msg->msg_iov[i].iov_base) + s;
            memcpy(tx_.mem + off, src, n);
            const uint32_t imm = neg::make_imm(neg::Imm::data, static_cast<uint32_t>(n));
            if (post(off, src, static_cast<uint32_t>(n), 0, true, imm, true) != 0)
                return -EPIPE;
            tx_prod_ += n;
            tx_posted_ = tx_prod_;
            ++data_msgs_;
            return static_cast<ssize_t>(n);
        }
    }
    iov::copy_ring(tx_.mem, tx_.size, tx_prod_, msg, skip, n, false);
    tx_prod_ += n;
    if (hold && tx_prod_ - tx_posted_ < kCoalesceBelow)
        return static_cast<ssize_t>(n);  // staged: goes out with the next flush
    // Staged, the bytes are the program's no more: when the post fails (st.failed), a
    // fallback to TCP resends them; they are not to be written again.
    flush();
    return static_cast<ssize_t>(n);
}

int RingPath::flush() noexcept
{
    if (st.failed || st.reset || frozen_ || !tx_.mr)
        return -EPIPE;
    const uint64_t n = tx_prod_ - tx_posted_;
    if (n == 0)
        return 0;
    const uint64_t off = tx_posted_ & (tx_.size - 1);
    const uint64_t first = n < tx_.size - off ? n : tx_.size - off;
    const uint32_t imm = neg::make_imm(neg::Imm::data, static_cast<uint32_t>(n));
    const uint32_t lkey = tx_.mr->lkey();
    if (first < n) {
        if (post(off, tx_.mem + off, static_cast<uint32_t>(first), lkey, false, 0, false) != 0 ||
            post(0, tx_.mem, static_cast<uint32_t>(n - first), lkey, true, imm, false) != 0)
            return -EPIPE;
    } else if (post(off, tx_.mem + off, static_cast<uint32_t>(n), lkey, true, imm, n <= link_.max_inline()) != 0) {
        return -EPIPE;
    }
    tx_posted_ = tx_prod_;
    ++data_msgs_;
    return 0;
}

}  // namespace rdmasock
