#include "core/readiness.hh"

#include "core/real.hh"
#include "core/runtime.hh"

namespace rdmasock::readiness {

// No transport offloads yet (rt::g_offloaded stays 0), so every call below is the
// kernel's; the offloaded branches come with the RDMA transport's shadow eventfds.

int poll(pollfd *fds, nfds_t nfds, int timeout_ms) noexcept
{
    return RS_REAL(poll)(fds, nfds, timeout_ms);
}

int ppoll(pollfd *fds, nfds_t nfds, const timespec *tmo, const sigset_t *mask) noexcept
{
    return RS_REAL(ppoll)(fds, nfds, tmo, mask);
}

int select(int nfds, fd_set *r, fd_set *w, fd_set *e, timeval *tmo) noexcept
{
    return RS_REAL(select)(nfds, r, w, e, tmo);
}

int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const timespec *tmo,
            const sigset_t *mask) noexcept
{
    return RS_REAL(pselect)(nfds, r, w, e, tmo, mask);
}

int epoll_ctl(int epfd, int op, int fd, epoll_event *ev) noexcept
{
    return RS_REAL(epoll_ctl)(epfd, op, fd, ev);
}

int epoll_wait(int epfd, epoll_event *ev, int maxev, int timeout_ms) noexcept
{
    return RS_REAL(epoll_wait)(epfd, ev, maxev, timeout_ms);
}

int epoll_pwait(int epfd, epoll_event *ev, int maxev, int timeout_ms, const sigset_t *mask) noexcept
{
    return RS_REAL(epoll_pwait)(epfd, ev, maxev, timeout_ms, mask);
}

int epoll_pwait2(int epfd, epoll_event *ev, int maxev, const timespec *tmo,
                 const sigset_t *mask) noexcept
{
    return RS_REAL(epoll_pwait2)(epfd, ev, maxev, tmo, mask);
}

}  // namespace rdmasock::readiness
