#include "conn/iov.hh"

#include "base/copy.hh"
#include "base/real.hh"

namespace rdmasock::iov {

size_t total(const msghdr *m) noexcept
{
    size_t t = 0;
    for (size_t i = 0; i < m->msg_iovlen; ++i)
        t += m->msg_iov[i].iov_len;
    return t;
}

namespace {

// `m`'s iovecs from `skip` bytes on, at most `limit` bytes, into `sub` (over `v`, up to
// 64 of them); false when nothing is left.
bool sub_msg(const msghdr *m, size_t skip, uint64_t limit, iovec (&v)[64], msghdr &sub) noexcept
{
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
    sub = msghdr{};
    sub.msg_iov = v;
    sub.msg_iovlen = n;
    return n > 0;
}

}  // namespace

ssize_t tcp_recv_at(int fd, const msghdr *m, size_t skip, uint64_t limit, int flags) noexcept
{
    iovec v[64];
    msghdr sub;
    return sub_msg(m, skip, limit, v, sub) ? RS_REAL(recvmsg)(fd, &sub, flags) : 0;
}

ssize_t tcp_send_at(int fd, const msghdr *m, size_t skip, int flags) noexcept
{
    iovec v[64];
    msghdr sub;
    return sub_msg(m, skip, UINT64_MAX, v, sub) ? RS_REAL(sendmsg)(fd, &sub, flags) : 0;
}

void copy_ring(uint8_t *ring, size_t size, uint64_t pos, const msghdr *m, size_t skip, size_t n,
               bool to_iov) noexcept
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

}  // namespace rdmasock::iov
