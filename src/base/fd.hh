// The library's own descriptors live on high numbers, away from the ones a program
// expects (it gets the same numbers as without the library, and a dup2() onto a number
// it believes free cannot replace one of ours).
#pragma once

namespace rdmasock::util {

// Moves `fd` to the lowest free number at or above the floor (half the soft
// RLIMIT_NOFILE, at most 4096; none when that leaves less than 64), close-on-exec, and
// closes the original.  Returns the new number, or `fd` unchanged when it cannot move.
// Only for descriptors no other thread can be using yet.
int move_high(int fd) noexcept;

// A close-on-exec duplicate of `fd` at or above the same floor (or wherever the kernel
// puts it when there is no floor); -1 with errno on failure.  `fd` stays open.
int dup_high(int fd) noexcept;

// A TCP socket's peer has ended its stream (its FIN came), or the connection is over: a
// read that gives 0 means the end of the peer's bytes.  After the program's own
// shutdown(SHUT_RD) a read gives 0 (and poll() says POLLRDHUP) with the peer's bytes
// still to come: only the TCP state tells the two apart.  errno is kept.
bool tcp_peer_ended(int fd) noexcept;

}  // namespace rdmasock::util
