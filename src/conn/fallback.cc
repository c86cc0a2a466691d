// FallbackPath: the frames and the backlog of a fallback to TCP (fallback.hh).
#include "conn/fallback.hh"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/socket.h>
#include <sys/uio.h>

#include "base/real.hh"

namespace rdmasock {

void FallbackPath::begin(uint64_t count, uint64_t start, uint64_t end, bool shut,
                         const neg::Nonce &n, Staging staging) noexcept
{
    active_ = true;
    nonce_ = n;
    count_ = count;
    neg::Fallback f;
    f.count = count;
    f.start = start;
    f.flags = shut ? neg::kFbWrShut : 0;
    neg::encode_fallback(f, n, frame_);
    frame_out_ = 0;
    out_next_ = start;
    out_end_ = end;
    shut_pending_ = shut;
    staging_ = staging;
}

int FallbackPath::push(int fd) noexcept
{
    if (!active_)
        return 0;
    while (frame_out_ < neg::kFallbackSize || out_next_ < out_end_) {
        iovec v[3];
        int n = 0;
        if (frame_out_ < neg::kFallbackSize)
            v[n++] = {frame_ + frame_out_, neg::kFallbackSize - frame_out_};
        uint64_t left = out_end_ - out_next_;
        const uint64_t off = out_next_ & (staging_.size - 1);
        if (left > 0) {
            const uint64_t first = left < staging_.size - off ? left : staging_.size - off;
            v[n++] = {const_cast<uint8_t *>(staging_.mem) + off, static_cast<size_t>(first)};
            if (first < left)
                v[n++] = {const_cast<uint8_t *>(staging_.mem), static_cast<size_t>(left - first)};
        }
        msghdr m{};
        m.msg_iov = v;
        m.msg_iovlen = static_cast<size_t>(n);
        const ssize_t r = RS_REAL(sendmsg)(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
        size_t w = static_cast<size_t>(r);
        const size_t f = w < neg::kFallbackSize - frame_out_ ? w : neg::kFallbackSize - frame_out_;
        frame_out_ += f;
        out_next_ += w - f;
    }
    if (shut_pending_) {
        if (RS_REAL(shutdown)(fd, SHUT_WR) != 0 && errno != ENOTCONN)
            return -errno;
        shut_pending_ = false;
    }
    return 0;
}

namespace {

// What the socket holds now, up to n bytes: > 0 bytes, 0 none yet, -1 with *why (the
// stream's end: `ended`, or a failure: `failed`).
ssize_t recv_now(int fd, void *buf, size_t n, const char *ended, const char *failed, const char **why) noexcept
{
    const ssize_t r = RS_REAL(recv)(fd, buf, n, MSG_DONTWAIT);
    if (r > 0)
        return r;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    *why = r == 0 ? ended : failed;
    return -1;
}

}  // namespace

int FallbackPath::read_frame(int fd, const char **why) noexcept
{
    while (peer_got_ < neg::kFallbackSize) {
        const ssize_t r = recv_now(fd, peer_buf_ + peer_got_, neg::kFallbackSize - peer_got_,
                                   "the TCP stream ended before the peer's FALLBACK",
                                   "the TCP connection failed before the peer's FALLBACK", why);
        if (r <= 0)
            return static_cast<int>(r);
        peer_got_ += static_cast<size_t>(r);
        if (neg::match_fallback(peer_buf_, peer_got_, nonce_, &peer_) == neg::ConfirmMatch::no) {
            *why = "bytes other than a FALLBACK on the TCP stream after the switch";
            return -1;
        }
    }
    have_peer_ = true;
    return 1;
}

void FallbackPath::peer_head(char *buf, size_t n) const noexcept
{
    size_t o = 0;
    for (size_t i = 0; i < peer_got_ && o + 3 <= n; ++i)
        o += static_cast<size_t>(snprintf(buf + o, n - o, "%02x", peer_buf_[i]));
    if (n > 0)
        buf[o < n ? o : n - 1] = '\0';
}

int FallbackPath::read_peer_frame(int fd, const neg::Nonce &n, const char **why) noexcept
{
    nonce_ = n;
    return have_peer_ ? 1 : read_frame(fd, why);
}

int FallbackPath::take_peer(int fd, uint64_t acked, uint64_t posted, uint64_t ring, const char **why) noexcept
{
    if (in_done_)
        return 1;
    if (!have_peer_) {
        const int r = read_frame(fd, why);
        if (r <= 0)
            return r;
    }
    if (!checked_) {
        if (neg::check_fallback(peer_, acked, posted, count_, ring) != Reason::none) {
            *why = "the peer's FALLBACK does not fit the stream";
            return -1;
        }
        checked_ = true;
        skip_left_ = count_ - peer_.start;
    }
    uint8_t sink[4096];
    while (skip_left_ > 0) {
        const size_t want = skip_left_ < sizeof sink ? static_cast<size_t>(skip_left_) : sizeof sink;
        const ssize_t r = recv_now(fd, sink, want, "the TCP stream ended inside the peer's resent bytes",
                                   "the TCP connection failed inside the peer's resent bytes", why);
        if (r <= 0)
            return static_cast<int>(r);
        skip_left_ -= static_cast<uint64_t>(r);
    }
    in_done_ = true;
    return 1;
}

}  // namespace rdmasock
