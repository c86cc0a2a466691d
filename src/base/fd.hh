// The library's own descriptors live on high numbers, away from the ones a program
// expects (it gets the same numbers as without the library, and a dup2() onto a number
// it believes free cannot replace one of ours).
#pragma once

#include <cstdint>

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
    // A making side whose descriptors are made at the lowest free number (most: the
    // kernel's rule) holds one there until it moves it high or closes it: LowestFree
    // (below) watches those.  One that only makes high numbers or closes its own does not.
    enum Numbers : bool { low = true, high_only = false };
    explicit FdGate(Side side, Numbers numbers = low) noexcept;
    ~FdGate();
    FdGate(const FdGate &) = delete;
    FdGate &operator=(const FdGate &) = delete;

private:
    int held_;     // the side taken, 0 when it passed without taking one
    bool counted_;  // a making side that may hold a low number (LowestFree)
};

// A descriptor the program makes (socket, accept, ...) gets the lowest free number; one
// the library makes on another thread at that moment holds a low number until it moves
// high, so the program's could land higher than it would without the library.  Taken
// before such a call that the library does not hold the gate around (one that may block,
// or should not wait for the library's makers in the common case): if no making side
// that may hold a low number was open meanwhile (two atomic loads), fix() gives the
// number back as it is; else it waits for those makers and moves the new descriptor
// down to the lowest free number at or above `floor`, as if the kernel alone had
// numbered it.  Only for a descriptor nothing else knows yet whose extra close has no
// effect: a new socket or epoll set, not a duplicate of a file (its close would drop the
// process's POSIX locks on that file: a dup() holds the gate instead, placed()).  In a
// thread that holds a side already (a signal handler's call) it leaves the number.
class LowestFree {
public:
    LowestFree() noexcept;
    // fd, or its new number; errno kept.
    int fix(int fd, int floor = 0) const noexcept
    {
        fix_all(&fd, 1, floor);
        return fd;
    }
    void fix_pair(int fds[2]) const noexcept { fix_all(fds, 2, 0); }  // socketpair()

private:
    bool disturbed() const noexcept;
    void fix_all(int *fds, int count, int floor) const noexcept;
    uint64_t seen_;
};

// `make()` returns a new descriptor: made under the gate and moved high.
template <class Make>
int make_high(Make make) noexcept
{
    FdGate g(FdGate::making);
    return move_high(make());
}

// `place()` puts a descriptor on a number of the program's choice (dup2, dup3), or makes
// a duplicate at the lowest free number (dup, fcntl F_DUPFD) while no library
// descriptor holds a low one.
template <class Place>
int placed(Place place) noexcept
{
    FdGate g(FdGate::placing);
    return place();
}

// The library's own descriptors: each one moved high (move_high, dup_high) until the
// library closes it with close_own(), or the program closes or replaces that number
// (disown).  The program does not know them: its close_range() and closefrom() close
// the numbers it may hold and leave these open (in its view those numbers are free), so
// the library's log, devices and connections' eventfds outlive a daemon's or a fork
// child's closefrom(3).  Numbers up to 2^20; none when there is no floor (above).
bool owned(int fd) noexcept;
void disown(int fd) noexcept;
int close_own(int fd) noexcept;  // disown(fd), then close it (no range close in between)
void disown_from(unsigned first) noexcept;  // every number from `first` up (they are closed)
// The lowest of the library's own numbers in [from, last]; false if none.
bool next_owned(unsigned from, unsigned last, unsigned *n) noexcept;
// fn(lo, hi) for each run [lo, hi] of numbers in [first, last] between the library's
// own, in order, until fn returns false (then false).
template <class Fn>
bool for_each_run_but_own(unsigned first, unsigned last, Fn fn) noexcept
{
    const uint64_t end = uint64_t{last} + 1;
    for (uint64_t lo = first; lo < end;) {
        unsigned n = 0;
        const uint64_t stop = next_owned(static_cast<unsigned>(lo), last, &n) ? n : end;
        if (stop > lo && !fn(static_cast<unsigned>(lo), static_cast<unsigned>(stop - 1)))
            return false;
        lo = stop + 1;
    }
    return true;
}
// close_range(first, last, flags) of every number there but the library's own: a run of
// close_range() system calls around them, no descriptor of ours made or closed meanwhile
// (FdGate: a close that blocks, a socket's SO_LINGER, keeps the library's makers out
// that long, 2 s at most).  With CLOSE_RANGE_CLOEXEC (nothing closed) it is the plain
// call.  0, or -1 with errno (ENOSYS before Linux 5.9).
int close_range_but_own(unsigned first, unsigned last, int flags) noexcept;

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
