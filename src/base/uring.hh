// io_uring: a process's calls through it are system calls the library never sees (the
// ring is set up, submitted and reaped with inline system calls: liburing makes no C
// library call for them).  A connection switched to RDMA and then read, written or
// closed through the ring would go to a TCP socket that no longer carries its bytes (and
// the server's PROOF in the client's stream would reach the program).  So a process
// seen to use io_uring keeps its new connections on TCP (reason io_uring): the client
// sends no request, the server declines one (docs/protocol.md, "io_uring").
#pragma once

namespace rdmasock::uring {

// True once a ring of this process has been seen (sticky); no system call.
bool seen() noexcept;

// seen(), else a look at the process's mappings (a ring's memory is mapped from its
// io_uring file: "anon_inode:[io_uring]"), at most once per kLookEveryMs; the result
// of a look is kept when it finds one.  Any thread; makes a short-lived descriptor
// under util::FdGate.
bool in_use() noexcept;

constexpr int kLookEveryMs = 1;

}  // namespace rdmasock::uring
