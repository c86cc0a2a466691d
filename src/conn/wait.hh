// How a call on a connection waits, in three generic steps a connection's wait puts
// together (as rsocket's one wait over a predicate does): a bounded busy-poll spin over
// a readiness predicate, the socket's timeout as a deadline for the whole call, and a
// sleep in poll() that ends on a signal as the kernel's blocking calls do.  No
// connection state here.
#pragma once

#include <chrono>
#include <climits>
#include <poll.h>
#include <sched.h>

#include "base/mutex.hh"

namespace rdmasock::waits {

using Clock = std::chrono::steady_clock;

// Milliseconds from now until `deadline`, at most `cap`: never negative (a poll() given a
// negative timeout would wait for ever once the deadline has passed).
inline int ms_until(Clock::time_point deadline, int cap = INT_MAX) noexcept
{
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left <= 0 ? 0 : left < cap ? static_cast<int>(left) : cap;
}

// One call's deadline: SO_RCVTIMEO/SO_SNDTIMEO counted from the call's first wait, as
// the kernel counts it, however many times the call waits.
struct Deadline {
    bool set = false;
    Clock::time_point at{};
};

// Spin (busy-poll mode): `ready()` with `lk` held, again and again, for `budget_us`
// microseconds; `lk` is released between two, and given up to any thread waiting for
// it (which takes it before the spin goes on).  True as soon as it returns true.  The
// clock is read once in 16 polls, the first time after 16 (where it is no vDSO read,
// e.g. an HPET clock source, each read is a system call that would delay seeing the
// data; the spin is longer than the budget by those 16 polls); *from is that first
// reading (the epoch when the spin ended before it).
template <class Ready>
bool spin(std::unique_lock<util::WaitedMutex> &lk, long budget_us, Ready ready, Clock::time_point *from) noexcept
{
    Clock::time_point end{};
    // (Until the waiter has it, which may need this CPU to run, a bounded number of
    // yields: a waiter of a lower real-time priority than this thread on its CPU never
    // gets it from a yield.  Then lock() queues behind it.)
    auto give_way = [&lk] {
        lk.unlock();
        __builtin_ia32_pause();
        for (int i = 0; i < 64 && lk.mutex()->wanted(); ++i)
            sched_yield();
        lk.lock();
    };
    for (unsigned i = 1;; ++i) {
        if (ready()) {
            // (Found at once, the caller may come back at once: it never keeps a
            // waiter out either.)
            if (lk.mutex()->wanted())
                give_way();
            return true;
        }
        give_way();
        if (i % 16 == 0) {
            const auto now = Clock::now();
            if (i == 16) {
                *from = now;
                end = now + std::chrono::microseconds(budget_us);
            } else if (now >= end) {
                return false;
            }
        }
    }
}

// The adaptive spin (RDMASOCK_SPIN_US, 50 by default, without RDMASOCK_BUSY_POLL_US):
// whether a connection's next blocking wait spins before it sleeps.  Two moving
// averages: how long each wait's data took (after a spin or a sleep; the last one a
// quarter, each clipped to 8 spins), and how many spins found
// their data (the last one an eighth).  A wait spins when the last spin found its data,
// or when the data has been coming within 4 spins and at least one spin in 4 has found
// it; otherwise one wait in 16 spins, to look again (a sleep's time includes its
// wake-up, which where that is slow would keep a connection whose data does come soon
// from ever spinning again).  So a request/response loop whose answers come soon spins;
// a connection whose data comes just too late for the spin (a paced stream: about 11
// spins, then 1 wait in 16), late, or never (idle) sleeps at once but for one wait in
// 16.  The connection's lock guards it.
class AdaptiveSpin {
public:
    // This wait's spin, in us (0: sleep at once).
    long budget_us(long spin_us) noexcept
    {
        const bool soon = avg_ns_ <= spin_us * 4000 && found_256_ >= 64;
        return last_found_ || soon || ++skipped_ % 16 == 0 ? spin_us : 0;
    }
    // The spin budget_us() asked for found the data, or not.
    void spun(bool found) noexcept
    {
        last_found_ = found;
        found_256_ = (7 * found_256_ + (found ? 256 : 0)) / 8;
    }
    // The wait's data came `ns` after the wait began (its spin included).
    void came_after(int64_t ns, long spin_us) noexcept
    {
        const int64_t clip = spin_us * 8000;
        avg_ns_ = (3 * avg_ns_ + (ns < clip ? ns : clip)) / 4;
    }

private:
    int64_t avg_ns_ = 0;       // (a connection's first wait spins)
    unsigned found_256_ = 256; // spins that found their data, in 256ths
    bool last_found_ = false;
    unsigned skipped_ = 0;
};

// The time the call may still sleep, in ms, from socket `fd`'s SO_SNDTIMEO (for_send)
// or SO_RCVTIMEO: -1 no limit; -EAGAIN the deadline has passed.  The deadline is set
// at the first wait, from `from` (a spin's start) when set, else from now.
// *has_timeout: the socket has a timeout.
int sleep_limit(int fd, bool for_send, Deadline &dl, Clock::time_point from, bool *has_timeout) noexcept;

// Sleep in poll() on `fds` for up to `tmo` ms (-1: no limit) with `lk` released.  A
// signal handler that has run since the call began (sig::last) or that interrupts the
// poll ends the sleep as the kernel's would end the call: kRestart (SA_RESTART, and no
// socket timeout) or -EINTR.  Otherwise poll()'s count (0: timed out) or -errno.
constexpr int kRestart = INT_MIN;
int sleep(std::unique_lock<util::WaitedMutex> &lk, pollfd *fds, nfds_t n, int tmo, bool has_timeout) noexcept;

}  // namespace rdmasock::waits
