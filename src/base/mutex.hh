// A mutex that knows whether another thread is waiting for it, so that a holder that
// spins with it (waits::spin: busy-poll mode and the adaptive spin) gives it up to them.
// A std::mutex's unlock wakes a waiter but lets the unlocking thread take the lock back
// before the waiter runs: a thread that unlocks and locks again in a loop kept a fork's
// handler, or the progress thread, out for as long as it spun.
#pragma once

#include <atomic>
#include <mutex>

namespace rdmasock::util {

class WaitedMutex {
public:
    // The uncontended path is std::mutex's (one compare-and-swap); only a thread that
    // finds the lock held counts itself, around its wait.
    void lock() noexcept
    {
        if (mu_.try_lock())
            return;
        waiting_.fetch_add(1, std::memory_order_relaxed);
        mu_.lock();
        waiting_.fetch_sub(1, std::memory_order_relaxed);
    }
    bool try_lock() noexcept { return mu_.try_lock(); }
    void unlock() noexcept { mu_.unlock(); }
    // Another thread waits for the lock (or is about to).
    bool wanted() const noexcept { return waiting_.load(std::memory_order_relaxed) != 0; }

private:
    std::mutex mu_;
    std::atomic<int> waiting_{0};
};

}  // namespace rdmasock::util
