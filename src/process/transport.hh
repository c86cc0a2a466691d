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

protected:
    ~Transport() = default;
};

// The kernel TCP transport (a stateless singleton).
Transport &kernel_tcp() noexcept;

}  // namespace rdmasock
