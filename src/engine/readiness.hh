// The readiness layer: every wait primitive (poll, ppoll, select, pselect, epoll_*)
// goes through here.  While no socket in the process is offloaded (rt::g_offloaded
// == 0), each call is the kernel's own.  An offloaded socket's readiness is carried
// by its shadow eventfd (the RDMA transport) and merged here with the kernel's answer
// for every other fd, so unmodified event loops see exactly what the kernel would show.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>

namespace rdmasock {
class Conn;
}

namespace rdmasock::readiness {

int poll(pollfd *fds, nfds_t nfds, int timeout_ms) noexcept;
int ppoll(pollfd *fds, nfds_t nfds, const timespec *tmo, const sigset_t *mask) noexcept;
int select(int nfds, fd_set *r, fd_set *w, fd_set *e, timeval *tmo) noexcept;
int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const timespec *tmo,
            const sigset_t *mask) noexcept;
int epoll_ctl(int epfd, int op, int fd, epoll_event *ev) noexcept;
int epoll_wait(int epfd, epoll_event *ev, int maxev, int timeout_ms) noexcept;
int epoll_pwait(int epfd, epoll_event *ev, int maxev, int timeout_ms, const sigset_t *mask) noexcept;
int epoll_pwait2(int epfd, epoll_event *ev, int maxev, const timespec *tmo,
                 const sigset_t *mask) noexcept;

// A server connection switched to RDMA: move its epoll registrations from the TCP fd
// onto its shadow eventfds.
void on_switch_to_rdma(int fd, Conn &c) noexcept;
// A connection decided on TCP: its registrations stay with the kernel; forget them.
void on_decided_tcp(int fd) noexcept;
// close(fd), for every fd: drop what the readiness layer holds for it.
void on_close(int fd) noexcept;
// Every number in [first, last] closed at once (close_range, closefrom).
void on_close_range(unsigned first, unsigned last) noexcept;
// fork(): held across it, so that the child never inherits the registrations' lock
// held by a thread that does not exist there (its first close would wait forever).
void lock_for_fork() noexcept;
void unlock_after_fork() noexcept;
// In a fork child: the registrations so far are the parent's too.
void after_fork_child() noexcept;

}  // namespace rdmasock::readiness
