// The program's iovecs, as the connection moves bytes between them, the TCP socket and
// the rings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/socket.h>
#include <sys/types.h>

namespace rdmasock::iov {

// Bytes the iovecs of `m` hold.
size_t total(const msghdr *m) noexcept;

// recvmsg on the TCP socket into `m`'s buffers from `skip` bytes on, at most `limit`
// bytes (what is left of the iovecs when limit is larger), as one call: MSG_PEEK sees
// the stream from its start whatever the layout of the buffers.  -1 with errno.
ssize_t tcp_recv_at(int fd, const msghdr *m, size_t skip, uint64_t limit, int flags) noexcept;

// sendmsg on the TCP socket of `m`'s buffers from `skip` bytes on (the rest of a call's
// bytes).  -1 with errno.
ssize_t tcp_send_at(int fd, const msghdr *m, size_t skip, int flags) noexcept;

// Copy `n` bytes between a ring of `size` bytes (a power of two; at byte cursor `pos`,
// with wrap) and the iovecs of `m`, starting `skip` bytes into them.  `to_iov`: ring ->
// iovecs, else iovecs -> ring.
void copy_ring(uint8_t *ring, size_t size, uint64_t pos, const msghdr *m, size_t skip, size_t n,
               bool to_iov) noexcept;

}  // namespace rdmasock::iov
