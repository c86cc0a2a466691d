// The transport interface: how the bytes of one connected socket move.
//
// Every read-style call funnels into recvmsg(), every write-style call into sendmsg().
// Methods return a count or -errno; only the preload wrappers touch errno.
// The kernel-TCP transport is the default (a socket with transport == nullptr uses it);
// the RDMA transport implements the same interface.
#pragma once

#include <cstdint>
#include <sys/socket.h>
#include <sys/types.h>

namespace rdmasock {

struct Counters {
    uint64_t bytes_sent = 0;      // bytes the application handed to the connection
    uint64_t bytes_received = 0;  // bytes the application took from the connection
};

class Transport {
public:
    virtual const char *name() const noexcept = 0;  // "tcp" or "rdma"
    virtual ssize_t recvmsg(int fd, msghdr *msg, int flags) noexcept = 0;
    virtual ssize_t sendmsg(int fd, const msghdr *msg, int flags) noexcept = 0;
    virtual int shutdown(int fd, int how) noexcept = 0;
    // Readiness as poll(2) bits (POLLIN, POLLOUT, POLLHUP, POLLRDHUP, POLLERR).
    virtual unsigned poll_mask(int fd) noexcept = 0;
    virtual Counters counters(int fd) noexcept = 0;
    // Called when the owning socket object is recycled; frees the transport.
    virtual void destroy() noexcept = 0;

    // What the hooks ask of a socket's transport beyond moving bytes.  The defaults are
    // kernel TCP's; the RDMA transport overrides them.
    // Where the connection is ("maybe", "verifying", "rdma", "tcp": RDMASOCK_INFO).
    virtual const char *phase_name() const noexcept { return "tcp"; }
    // Its bytes move over RDMA now.
    virtual bool on_rdma() const noexcept { return false; }
    // The RDMA link it moves them on, "DEVICE:PORT/QPN", into buf (of n bytes); "-" when
    // it has none (rdmasock ss).
    virtual void link_name(char *buf, size_t n) const noexcept
    {
        if (n > 1) {
            buf[0] = '-';
            buf[1] = '\0';
        }
    }
    // The number the transport reaches the kernel socket through (-1: it keeps none).
    virtual int kernel_fd() const noexcept { return -1; }
    // The program closed number `from` but still holds the socket as `to`.
    virtual void renumber(int, int) noexcept {}
    // close() while other calls are in progress: go on through `keep`, a duplicate the
    // library owns (true), or not (false: the kernel close decides).
    virtual bool continue_on(int) noexcept { return false; }
    // The program set O_NONBLOCK (F_SETFL, FIONBIO) or SO_RCVLOWAT through the library.
    virtual void note_nonblocking(bool) noexcept {}
    virtual void set_rcvlowat(int) noexcept {}
    // The program is about to set SO_OOBINLINE: 0 go ahead (a connection not yet on RDMA
    // stays on TCP), or -errno to refuse (on RDMA, the urgent byte could not be placed
    // in the stream).
    virtual int urgent_inline() noexcept { return 0; }
    // FIONREAD / SIOCINQ and SIOCOUTQ where the kernel socket does not know them (only
    // asked while on_rdma()).
    virtual int bytes_readable() noexcept { return 0; }
    virtual int bytes_unacked() noexcept { return 0; }
    // fork(): before it, in the parent; after it, in the child.
    virtual void before_fork() noexcept {}
    virtual void after_fork_child() noexcept {}
    // In the parent after a fork: `child` (-1 when the fork failed).
    virtual void after_fork_parent(pid_t) noexcept {}
    // A fork child's copy of a connection with RDMA bound, about to be used here: true
    // once its owner handed the connection back to its TCP socket, which is from then on
    // a plain kernel socket in this process too (process/copies.hh).  False: not such a
    // copy, or the owner could not (the copy reports a reset).
    virtual bool claim_copy() noexcept { return false; }
    // Another process's connection (logged there): this process's copy logs nothing at
    // its close.  A fork child's copy of a connection with RDMA bound; an accepted
    // connection unused at a fork (a fork child may serve it).
    virtual bool handed_off() const noexcept { return false; }

    // The RDMA transport (a Conn: Conn::of in conn/rdma_conn.hh turns it into one).
    bool is_rdma() const noexcept { return rdma_; }

protected:
    explicit Transport(bool rdma = false) noexcept : rdma_(rdma) {}
    ~Transport() = default;

private:
    const bool rdma_;
};

// The kernel TCP transport (a stateless singleton).
Transport &kernel_tcp() noexcept;

}  // namespace rdmasock
