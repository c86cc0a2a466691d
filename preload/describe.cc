#include "preload/describe.hh"

#include <cerrno>
#include <cstdio>

#include "base/addr.hh"
#include "base/real.hh"

namespace rdmasock::describe {

Info capture(int fd, Socket &s) noexcept
{
    const int saved = errno;
    Info ci;
    if (!s.has_peer)
        return ci;
    ci.connection = true;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (RS_REAL(getsockname)(fd, reinterpret_cast<sockaddr *>(&local), &len) == 0)
        util::format_addr(local, ci.local, sizeof ci.local);
    util::format_addr(s.peer, ci.peer, sizeof ci.peer);
    ci.counters = s.transport != nullptr ? s.transport.load()->counters(fd) : kernel_tcp().counters(fd);
    sockaddr_storage peer{};
    socklen_t pl = sizeof peer;
    ci.never_connected = s.role == Role::client && !s.offloaded() &&
                         RS_REAL(getpeername)(fd, reinterpret_cast<sockaddr *>(&peer), &pl) != 0 &&
                         ci.counters.bytes_sent == 0 && ci.counters.bytes_received == 0;
    errno = saved;
    return ci;
}

// Offloaded means on RDMA only once switched (an undecided server socket also takes the
// hooked path).
bool on_rdma(const Socket &s) noexcept
{
    // (A connection that fell back to TCP mid-stream keeps its calls' path: reported on TCP.)
    return s.offloaded() && s.transport != nullptr && s.transport.load()->on_rdma() &&
           s.reason.load(std::memory_order_relaxed) != Reason::fell_back;
}

Reason reason(const Socket &s, const Info &ci) noexcept
{
    const Reason r = ci.never_connected ? Reason::not_connected : s.reason.load(std::memory_order_relaxed);
    return r == Reason::none ? Reason::pending : r;
}

}  // namespace rdmasock::describe
