// A connection's shadow eventfds: the readiness of an offloaded connection, carried to
// poll, select and epoll in place of its TCP socket's (the readiness layer waits on
// them).  Two level flags: the readable eventfd holds 1 while readable; the writable one
// holds the counter's maximum while not writable (so it shows no POLLOUT).  No verbs and
// no connection state here: the connection says what the levels are; this keeps the
// eventfds matching, and counts who watches them.
//
// Thread safety: the connection's lock guards everything but users(), which is atomic.
#pragma once

#include <atomic>

namespace rdmasock {

class Shadows {
public:
    Shadows() noexcept;  // both eventfds (nonblocking, close-on-exec, at high numbers)
    ~Shadows();
    Shadows(const Shadows &) = delete;
    Shadows &operator=(const Shadows &) = delete;

    // Both eventfds were made (and maybe closed since by close_fds()).
    bool ok() const noexcept { return made_; }
    // Close both eventfds now (a connection closed or decided for TCP that nobody
    // watches: they would otherwise outlive the program's close by the connection's
    // linger or negotiation, and count against its descriptor limit).  Every call after
    // this is a no-op, and the numbers are -1.
    void close_fds() noexcept;
    int rd_fd() const noexcept { return rd_.load(std::memory_order_relaxed); }
    int wr_fd() const noexcept { return wr_.load(std::memory_order_relaxed); }

    // Make the eventfds match the levels (two system calls at most, none when they
    // already match).
    void set(bool readable, bool writable) noexcept;
    // Wake whoever sleeps on the readable eventfd, whatever the level (the next set()
    // drains it if not readable).
    void wake() noexcept;
    // Wake, and count the readable level as set (the connection has just switched: its
    // waiters start over with the eventfds).
    void wake_set() noexcept
    {
        wake();
        rd_set_ = true;
    }
    // A new arrival while readable: edge-triggered waiters see an edge.
    void edge() noexcept
    {
        if (rd_set_)
            wake();
    }
    bool readable_set() const noexcept { return rd_set_; }
    // A wake-up of the readable eventfd that the level does not hold: take it out.
    void drain_stale() noexcept;
    // Drain the readable eventfd's wake-up (a pre-switch waiter consumed it).
    void drain() noexcept;

    // Who watches: epoll registrations and poll/select calls (users, atomic), threads
    // asleep in the connection's own waits (sleepers, under the connection's lock).
    // Returns the count before.
    int add_users(int delta) noexcept { return users_.fetch_add(delta, std::memory_order_acq_rel); }
    bool has_users() const noexcept { return users_.load() > 0; }
    bool watched() const noexcept { return has_users() || sleepers_ > 0; }
    void sleep_begin() noexcept { ++sleepers_; }
    void sleep_end() noexcept { --sleepers_; }

private:
    // (Atomic: read without the connection's lock by the readiness layer, which only
    // polls them, while close_fds() may run.)
    std::atomic<int> rd_{-1};
    std::atomic<int> wr_{-1};
    bool made_ = false;
    bool rd_set_ = false;      // rd_ holds the "readable" value
    bool wr_blocked_ = false;  // wr_ holds the "not writable" value
    std::atomic<int> users_{0};
    int sleepers_ = 0;
};

}  // namespace rdmasock
