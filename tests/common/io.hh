// Descriptor I/O helpers shared by the programs the suites run under the library
// (tests/preload/sockprobe, tests/offload/peer).  Plain libc calls, no Boost.
#pragma once

#include <cstddef>

namespace testcommon {

// read() until n bytes, EOF or an error (EINTR is retried); the count read.
size_t read_n(int fd, void *p, size_t n);

}  // namespace testcommon
