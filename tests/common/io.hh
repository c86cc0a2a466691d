// Descriptor I/O helpers shared by the programs the suites run under the library
// (tests/preload/sockprobe, tests/offload/peer, churn, soak).  Plain libc calls, no
// Boost.
#pragma once

#include <cstddef>

namespace testcommon {

// read() until n bytes, EOF or an error (EINTR is retried); the count read.
size_t read_n(int fd, void *p, size_t n);
// read() exactly n bytes (EINTR is retried): false at EOF (errno ENODATA: the stream
// ended early) or on an error (its errno).
bool read_all(int fd, void *p, size_t n);
// send(MSG_NOSIGNAL) all n bytes (EINTR is retried): false on an error (its errno).
bool send_all(int fd, const void *p, size_t n);
// SO_RCVTIMEO and SO_SNDTIMEO of `secs` seconds: a blocking call on a connection that
// lost a byte fails the run instead of hanging it.
void set_io_timeouts(int fd, int secs);
// The process's open descriptors (/proc/self/fd, without the one that lists them).
int open_fds();

}  // namespace testcommon
