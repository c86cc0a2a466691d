// The library's own descriptors live on high numbers, away from the ones a program
// expects (it gets the same numbers as without the library, and a dup2() onto a number
// it believes free cannot replace one of ours).
#pragma once

namespace rdmasock::util {

// Moves `fd` to the lowest free number at or above the floor (half the soft
// RLIMIT_NOFILE, at most 4096; none when that leaves less than 64), close-on-exec, and
// closes the original.  Returns the new number, or `fd` unchanged when it cannot move.
// Only for descriptors no other thread can be using yet, made under an FdGate (below).
int move_high(int fd) noexcept;

// The library's descriptors and the numbers the program chooses.  The kernel gives a new
// descriptor the lowest free number, which may be one the program has just closed; if a
// program thread then put a descriptor of its own there (dup2, dup3), it would replace
// ours without a word, and move_high() would go on to close the program's.  So making
// descriptors (from their creation to their move high, or to the close of a short-lived
// one) and placing one on a chosen number exclude each other.  Each side is shared: any
// number of threads make at once, or place at once.  A thread already inside either side
// passes (a signal handler never waits for the thread it interrupted).  A wait longer
// than 2 s gives up, with a warning, and goes on (a hang would be worse than the race it
// closes).
class FdGate {
public:
    enum Side : int { making = 1, placing = -1 };
    explicit FdGate(Side side) noexcept;
    ~FdGate();
    FdGate(const FdGate &) = delete;
    FdGate &operator=(const FdGate &) = delete;

private:
    int held_;  // the side taken, 0 when it passed without taking one
};

// `make()` returns a new descriptor: made under the gate and moved high.
template <class Make>
int make_high(Make make) noexcept
{
    FdGate g(FdGate::making);
    return move_high(make());
}

// `place()` puts a descriptor on a number of the program's choice (dup2, dup3).
template <class Place>
int placed(Place place) noexcept
{
    FdGate g(FdGate::placing);
    return place();
}

// A fork's child has no other thread: no side is held there.
void fd_gate_after_fork_child() noexcept;

// A close-on-exec duplicate of `fd` at or above the same floor (or wherever the kernel
// puts it when there is no floor); -1 with errno on failure.  `fd` stays open.
int dup_high(int fd) noexcept;

// A TCP socket's peer has ended its stream (its FIN came), or the connection is over: a
// read that gives 0 means the end of the peer's bytes.  After the program's own
// shutdown(SHUT_RD) a read gives 0 (and poll() says POLLRDHUP) with the peer's bytes
// still to come: only the TCP state tells the two apart.  errno is kept.
bool tcp_peer_ended(int fd) noexcept;

}  // namespace rdmasock::util
