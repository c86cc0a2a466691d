// Kernel TCP: the connection's bytes stay on the kernel socket.
#include <cstddef>
#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>

#include "base/real.hh"
#include "process/transport.hh"

// struct tcp_info with tcpi_bytes_acked/received (glibc's netinet/tcp.h lacks them).
#include <linux/tcp.h>

namespace rdmasock {

namespace {

class KernelTcp final : public Transport {
public:
    const char *name() const noexcept override { return "tcp"; }

    ssize_t recvmsg(int fd, msghdr *msg, int flags) noexcept override
    {
        ssize_t r = RS_REAL(recvmsg)(fd, msg, flags);
        return r < 0 ? -errno : r;
    }

    ssize_t sendmsg(int fd, const msghdr *msg, int flags) noexcept override
    {
        ssize_t r = RS_REAL(sendmsg)(fd, msg, flags);
        return r < 0 ? -errno : r;
    }

    int shutdown(int fd, int how) noexcept override
    {
        return RS_REAL(shutdown)(fd, how) < 0 ? -errno : 0;
    }

    unsigned poll_mask(int fd) noexcept override
    {
        pollfd p{fd, POLLIN | POLLOUT | POLLRDHUP, 0};
        return RS_REAL(poll)(&p, 1, 0) > 0 ? static_cast<unsigned>(p.revents) : 0;
    }

    // What the application wrote and read, from the kernel's own counters, so the data
    // path pays nothing: data bytes transmitted (less retransmissions) plus bytes not
    // yet transmitted; data bytes received (the kernel counts a received FIN as one)
    // less bytes not yet read.
    Counters counters(int fd) noexcept override
    {
        Counters c;
        tcp_info ti{};
        socklen_t len = sizeof ti;
        int saved = errno;
        // The kernel may transmit between the two questions (bytes move from "not sent"
        // to "sent"): ask for the unsent count before and after TCP_INFO, until it did
        // not change.
        int unsent = 0, before = -1;
        bool got = false;
        for (int tries = 0; tries < 16 && unsent != before; ++tries) {
            if (RS_REAL(ioctl)(fd, SIOCOUTQNSD, &before) < 0)
                before = 0;
            len = sizeof ti;
            got = RS_REAL(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0;
            if (RS_REAL(ioctl)(fd, SIOCOUTQNSD, &unsent) < 0)
                unsent = 0;
        }
        if (got && len >= offsetof(tcp_info, tcpi_bytes_retrans) + sizeof ti.tcpi_bytes_retrans) {
            int unread = 0;
            if (RS_REAL(ioctl)(fd, SIOCINQ, &unread) < 0)
                unread = 0;
            // States of include/net/tcp_states.h.
            enum { kFinWait1 = 4, kTimeWait = 6, kClose = 7, kCloseWait = 8, kLastAck = 9,
                   kClosing = 11 };
            const int st = ti.tcpi_state;
            // SIOCOUTQNSD counts our own FIN while it waits behind unsent data.
            if (unsent > 0 && (st == kFinWait1 || st == kLastAck || st == kClosing))
                unsent -= 1;
            c.bytes_sent = ti.tcpi_bytes_sent - ti.tcpi_bytes_retrans + static_cast<uint64_t>(unsent);
            uint64_t rcvd = ti.tcpi_bytes_received;
            // The kernel counts the peer's FIN as one received byte.  States reached only
            // after it; in CLOSE (both FINs exchanged, or a reset) the read side says.
            bool fin_in = st == kCloseWait || st == kLastAck || st == kClosing || st == kTimeWait;
            if (st == kClose) {
                pollfd p{fd, POLLRDHUP, 0};
                fin_in = RS_REAL(poll)(&p, 1, 0) > 0 && (p.revents & POLLRDHUP) &&
                         !(p.revents & POLLERR);
            }
            if (fin_in && rcvd > 0)
                rcvd -= 1;
            c.bytes_received = rcvd > static_cast<uint64_t>(unread) ? rcvd - unread : 0;
        }
        errno = saved;
        return c;
    }

    void destroy() noexcept override {}
};

}  // namespace

// Never destroyed: a destroyed polymorphic object must not be reached by the library's
// threads at exit.
namespace {
// Made as the library loads, not on first use: a lazy local's guard, held by a thread
// of the parent when another thread forked, left the child waiting on it for ever (the
// parity fork storm, busy-poll mode, once in the full run of 45d3f3b: a child in
// FUTEX_WAIT on the guard of this object).  (Never destroyed: calls may come at exit.)
KernelTcp *const g_kernel_tcp = new KernelTcp();
}  // namespace

Transport &kernel_tcp() noexcept { return *g_kernel_tcp; }

}  // namespace rdmasock
