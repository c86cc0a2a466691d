#include "conn/wait.hh"

#include <cerrno>
#include <sys/socket.h>
#include <sys/time.h>

#include "base/real.hh"
#include "process/signals.hh"

namespace rdmasock::waits {

namespace {

int timeout_ms(int fd, bool for_send) noexcept
{
    timeval tv{};
    socklen_t len = sizeof tv;
    if (RS_REAL(getsockopt)(fd, SOL_SOCKET, for_send ? SO_SNDTIMEO : SO_RCVTIMEO, &tv, &len) != 0)
        return -1;
    if (tv.tv_sec == 0 && tv.tv_usec == 0)
        return -1;
    long ms = tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000;
    return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

}  // namespace

int sleep_limit(int fd, bool for_send, Deadline &dl, Clock::time_point from, bool *has_timeout) noexcept
{
    int tmo = timeout_ms(fd, for_send);
    *has_timeout = tmo >= 0;
    if (tmo < 0)
        return -1;
    const auto now = Clock::now();
    if (!dl.set) {
        dl.set = true;
        dl.at = (from.time_since_epoch().count() != 0 ? from : now) + std::chrono::milliseconds(tmo);
    }
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(dl.at - now).count();
    if (left <= 0)
        return -EAGAIN;
    return static_cast<int>((left + 999) / 1000);
}

int sleep(std::unique_lock<util::WaitedMutex> &lk, pollfd *fds, nfds_t n, int tmo, bool has_timeout) noexcept
{
    lk.unlock();
    // A handler that ran since the call began (between two waits, outside any poll)
    // interrupts it as the kernel's signal_pending check before sleeping would.
    if (int sl = sig::last()) {
        sig::clear_last();
        lk.lock();
        return sig::restart_after(sl, has_timeout) ? kRestart : -EINTR;
    }
    int r = RS_REAL(poll)(fds, n, tmo);
    int e = errno;
    lk.lock();
    if (r < 0 && e == EINTR) {
        const int sl = sig::last();
        sig::clear_last();
        return sig::restart_after(sl, has_timeout) ? kRestart : -EINTR;
    }
    return r < 0 ? -e : r;
}

}  // namespace rdmasock::waits
