// Hook implementations: socket lifecycle (socket, accept, connect, close, dup*), the
// data-path funnel for offloaded sockets, and process lifecycle.
#include "preload/hooks.hh"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <linux/close_range.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <mutex>
#include <new>
#include <vector>

#include "base/fd.hh"
#include "base/log.hh"
#include "base/real.hh"
#include "base/uring.hh"
#include "engine/offload.hh"
#include "engine/readiness.hh"
#include "include/rdmasock.h"
#include "preload/describe.hh"
#include "preload/report.hh"
#include "preload/shim.hh"
#include "process/copies.hh"
#include "process/fd_table.hh"
#include "process/runtime.hh"
#include "process/transport.hh"

extern "C" void __chk_fail(void) __attribute__((noreturn));

namespace rdmasock::hook {

namespace {

// errno is the caller's business: every hook leaves it as the real call would.
struct ErrnoGuard {
    int saved = errno;
    ~ErrnoGuard() { errno = saved; }
};

// The program closed these numbers: a descriptor of the library's there is gone.
void library_fds_closed(unsigned first, unsigned last) noexcept
{
    log::on_fds_closed(first, last);
    copies::on_fds_closed(first, last);
}

Transport &transport_of(const Socket &s) noexcept
{
    return s.transport != nullptr ? *s.transport : kernel_tcp();
}

// Put a (new) socket object in fd's slot.  An occupant left there means the fd was
// closed behind our back (raw syscall, fclose, close_range): drop it silently.
void bind_fd(int fd, const SocketRef &s) noexcept
{
    s->add_fd();
    bool ok = false;
    SocketRef old = fdt::install(fd, s, &ok);
    if (!ok)
        s->drop_fd();
    if (old)
        old->drop_fd();
}

uint64_t socket_inode(int fd, Socket &s) noexcept;  // (below, with SCM_RIGHTS)

SocketRef track(int fd, int domain, int type, Role role) noexcept
{
    SocketRef s = Socket::create(domain, type & 0xf);
    if (!s)
        return s;
    s->role = role;
    bind_fd(fd, s);
    return s;
}

using CloseInfo = describe::Info;
using describe::capture;

// The documented, stable close-time line (see rdmasock(7), LOGGING).
void log_close(int fd, const Socket &s, const CloseInfo &ci) noexcept
{
    if (!ci.connection)
        return;
    if (s.transport != nullptr && s.transport.load()->handed_off())
        return;  // (the fork child that serves it logs it)
    const bool rdma = describe::on_rdma(s);
    const Reason why = rdma ? Reason::none : describe::reason(s, ci);
    report::count_closed(rdma, why, ci.counters.bytes_sent, ci.counters.bytes_received);
    if (!log::enabled(log::kInfo))
        return;
    char reason[48] = "";
    if (!rdma)
        snprintf(reason, sizeof reason, " reason=%s", reason_code(why));
    log::write(log::kInfo,
               "event=close fd=%d role=%s local=%s peer=%s transport=%s%s bytes_sent=%llu "
               "bytes_received=%llu",
               fd, role_name(s.role), ci.local, ci.peer, rdma ? "rdma" : "tcp", reason,
               static_cast<unsigned long long>(ci.counters.bytes_sent),
               static_cast<unsigned long long>(ci.counters.bytes_received));
}

// fd2 is about to be replaced (dup2/dup3 onto it): if it is the last fd of a tracked
// socket, gather what its close line needs now, while it is still open.
struct Victim {
    SocketRef s;
    CloseInfo ci;
    bool deferred = false;  // handed to the calls in progress (defer_close)
    bool stale = false;     // fd2 no longer named it (names_socket): nothing logged
};

bool names_socket(int fd, const Socket &s) noexcept;  // (below, with SCM_RIGHTS)

bool defer_close(int fd, Socket &s) noexcept;

// dup2/dup3 onto fd2 close fd2's socket when fd2 was its last descriptor: capture what
// the close log needs and, when oldfd is valid (the dup will happen), close the
// connection as close() does (orderly FIN over RDMA, epoll shadows dropped) while fd2
// still names it.
Victim prepare_victim(int oldfd, int fd2) noexcept
{
    ErrnoGuard g;
    Victim v;
    v.s = fdt::get(fd2);
    if (v.s && v.s->fds() == 1 && !names_socket(fd2, *v.s)) {
        v.stale = true;
    } else if (v.s && v.s->fds() == 1) {
        v.ci = capture(fd2, *v.s);
        if (RS_REAL(fcntl)(oldfd, F_GETFD) >= 0) {
            readiness::on_close(fd2);  // first: see before_close()
            // Another thread in a call on fd2's connection keeps it, as close() does.
            v.deferred = defer_close(fd2, *v.s);
            if (!v.deferred)
                offload::on_close(fd2, *v.s);
        }
    }
    return v;
}

// The library's own calls on a connection's TCP socket (flags, timeouts, polls) use the
// number the connection was made with.  When the program closes that number (or dup2()s
// over it) while another of its numbers stays open, they move to that one: the old
// number may be reused at once by an unrelated file.
void move_conn_fd(int gone, Socket &s) noexcept
{
    if (s.transport == nullptr)
        return;
    Transport *t = s.transport;
    if (t->kernel_fd() != gone)
        return;
    int other = -1;
    fdt::for_each([&](int fd, const SocketRef &r) {
        if (other < 0 && fd != gone && r.get() == &s)
            other = fd;
    });
    if (other >= 0)
        t->renumber(gone, other);
}

// After a successful dup onto newfd: newfd now refers to oldfd's socket (if tracked).
void after_dup(int oldfd, int newfd, const Victim *victim) noexcept
{
    SocketRef s = fdt::get(oldfd);
    SocketRef old;
    if (s) {
        s->add_fd();
        bool ok = false;
        old = fdt::install(newfd, s, &ok);
        if (!ok)
            s->drop_fd();
    } else {
        old = fdt::remove(newfd);
    }
    if (old) {
        if (!old->drop_fd())
            move_conn_fd(newfd, *old);  // newfd was one of several numbers of `old`
        else if (victim != nullptr && victim->s.get() == old.get() && !victim->deferred && !victim->stale)
            log_close(newfd, *old, victim->ci);  // (a deferred close logs when it ends)
    }
    library_fds_closed(static_cast<unsigned>(newfd), static_cast<unsigned>(newfd));
    if (victim != nullptr)  // dup2, dup3: the program may have replaced one of ours
        util::disown(newfd);
}

ssize_t ret(ssize_t r) noexcept
{
    if (r < 0) {
        errno = static_cast<int>(-r);
        return -1;
    }
    return r;
}

// The data-path funnel: every read-style call on an offloaded socket becomes rx(),
// every write-style call tx().  A null result means "not offloaded (any more)": the
// caller then makes the original real call.
SocketRef offloaded_socket(int fd) noexcept
{
    SocketRef s = fdt::get(fd);
    // (A fork child's copy its owner has handed back is a kernel socket now.)
    if (s && s->offloaded() && s->transport != nullptr && !s->transport.load()->claim_copy())
        return s;
    return {};
}

// Connections whose close() was deferred, each with a reference: exit() finishes those
// whose calls are still blocked (finish_deferred_at_exit).  Never freed (static
// destructors run before the library's exit-time code).
std::mutex g_deferred_mu;
std::vector<SocketRef> *g_deferred = nullptr;

// Whoever clears the deferred mark finishes the close: the last call, or exit().
bool take_deferred(Socket &s) noexcept
{
    return (s.calls.fetch_and(~Socket::kCloseDeferred, std::memory_order_acq_rel) & Socket::kCloseDeferred) != 0;
}

// The last call of a connection whose close() was deferred finishes it: the orderly
// close over RDMA (or the reset SO_LINGER 0 asks for), the close line under the number
// the program closed, and the library's duplicate of the TCP socket.
void finish_deferred_close(Socket &s) noexcept
{
    ErrnoGuard g;
    const int keep = s.deferred_fd;
    CloseInfo ci = capture(keep, s);
    offload::on_close(keep, s);
    log_close(s.closed_fd, s, ci);
    s.deferred_fd = -1;
    util::close_own(keep);
    SocketRef drop;  // released after the lock
    std::lock_guard<std::mutex> lk(g_deferred_mu);
    if (g_deferred != nullptr)
        for (auto it = g_deferred->begin(); it != g_deferred->end(); ++it)
            if (it->get() == &s) {
                drop = std::move(*it);
                g_deferred->erase(it);
                break;
            }
}

// Counts a call of the program inside the transport (Socket::calls).
class InCall {
public:
    explicit InCall(Socket &s) noexcept : s_(s) { s_.calls.fetch_add(1, std::memory_order_acq_rel); }
    ~InCall()
    {
        if (s_.calls.fetch_sub(1, std::memory_order_acq_rel) == (Socket::kCloseDeferred | 1) && take_deferred(s_))
            finish_deferred_close(s_);
    }
    InCall(const InCall &) = delete;
    InCall &operator=(const InCall &) = delete;

private:
    Socket &s_;
};

// close() of the last descriptor while other threads are in calls on the connection:
// true when the connection was handed to those calls (the last one closes it).
bool defer_close(int fd, Socket &s) noexcept
{
    if ((s.calls.load(std::memory_order_acquire) & ~Socket::kCloseDeferred) == 0 || !s.offloaded() ||
        s.transport == nullptr)
        return false;
    const int keep = util::dup_high(fd);
    if (keep < 0)
        return false;
    if (!s.transport.load()->continue_on(keep)) {
        util::close_own(keep);
        return false;
    }
    s.deferred_fd = keep;
    s.closed_fd = fd;
    {
        std::lock_guard<std::mutex> lk(g_deferred_mu);
        if (g_deferred == nullptr)
            g_deferred = new (std::nothrow) std::vector<SocketRef>();
        if (g_deferred != nullptr) {
            s.acquire();
            try {
                g_deferred->push_back(SocketRef::adopt(&s));
            } catch (...) {  // (the reference went with the failed element)
            }
        }
    }
    if ((s.calls.fetch_or(Socket::kCloseDeferred, std::memory_order_acq_rel) & ~Socket::kCloseDeferred) == 0 &&
        take_deferred(s)) {
        // Every call returned meanwhile: close now (through the duplicate).
        finish_deferred_close(s);
    }
    return true;
}

ssize_t rx(Socket &s, int fd, iovec *iov, int iovcnt, int flags) noexcept
{
    InCall in(s);
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(iovcnt);
    return ret(s.transport.load()->recvmsg(fd, &m, flags));
}

ssize_t tx(Socket &s, int fd, const iovec *iov, int iovcnt, int flags) noexcept
{
    InCall in(s);
    msghdr m{};
    m.msg_iov = const_cast<iovec *>(iov);
    m.msg_iovlen = static_cast<size_t>(iovcnt);
    return ret(s.transport.load()->sendmsg(fd, &m, flags));
}

}  // namespace

/* ---- socket creation and connection setup ------------------------------------------ */

int socket(int domain, int type, int protocol) noexcept
{
    util::LowestFree low;
    int fd = low.fix(RS_REAL(socket)(domain, type, protocol));
    if (fd < 0 || !shim::eligible(domain, type, protocol))
        return fd;
    ErrnoGuard g;
    if (rt::ensure_started())
        track(fd, domain, type, Role::none);
    return fd;
}

int socketpair(int domain, int type, int protocol, int sv[2]) noexcept
{
    // Only AF_UNIX supports socketpair: never a TCP connection, never tracked.
    util::LowestFree low;
    int r = RS_REAL(socketpair)(domain, type, protocol, sv);
    if (r == 0)
        low.fix_pair(sv);
    return r;
}

namespace {
// The offload rules keep listening socket `fd` (its bound address and port) on TCP.
bool excluded_listener(int fd) noexcept
{
    sockaddr_storage a{};
    socklen_t al = sizeof a;
    return RS_REAL(getsockname)(fd, reinterpret_cast<sockaddr *>(&a), &al) == 0 &&
           rt::excluded(rules::server, reinterpret_cast<sockaddr *>(&a));
}
}  // namespace

int listen(int fd, int backlog) noexcept
{
    // The RDMA listener must be ready before the TCP listener: a client that connects
    // at once must find it, or it concludes (and caches) that we do not run rdmasock.
    SocketRef s = fdt::get(fd);
    bool early = false;
    if (s && !s->listener && !s->rule_tcp) {
        ErrnoGuard g;
        sockaddr_storage a{};
        socklen_t al = sizeof a;
        bool bound = RS_REAL(getsockname)(fd, reinterpret_cast<sockaddr *>(&a), &al) == 0 &&
                     ((a.ss_family == AF_INET && reinterpret_cast<sockaddr_in *>(&a)->sin_port) ||
                      (a.ss_family == AF_INET6 && reinterpret_cast<sockaddr_in6 *>(&a)->sin6_port));
        if (bound) {  // else the kernel picks the port in listen(): afterwards
            s->rule_tcp = excluded_listener(fd);
            if (!s->rule_tcp) {
                offload::on_listen(fd, *s);
                early = true;
            }
        }
    }
    int r = RS_REAL(listen)(fd, backlog);
    if (!s)
        return r;
    ErrnoGuard g;
    if (r != 0) {
        if (early)
            offload::drop_listener(*s);
        g.saved = errno;
        return r;
    }
    s->role = Role::listener;
    if (!s->listener && !s->rule_tcp && !(s->rule_tcp = excluded_listener(fd)))
        offload::on_listen(fd, *s);
    return r;
}

namespace {
int accepted(int lfd, int fd) noexcept
{
    if (fd < 0)
        return fd;
    SocketRef ls = fdt::get(lfd);
    if (!ls)
        return fd;
    ErrnoGuard g;
    SocketRef s = track(fd, ls->domain, ls->type, Role::server);
    if (!s)
        return fd;
    socklen_t len = sizeof s->peer;
    s->has_peer = RS_REAL(getpeername)(fd, reinterpret_cast<sockaddr *>(&s->peer), &len) == 0;
    s->reason.store(rt::default_reason(), std::memory_order_relaxed);
    if (ls->rule_tcp && rt::default_reason() != Reason::disabled)
        s->reason.store(Reason::rule, std::memory_order_relaxed);
    else if (s->has_peer) {
        if (rt::default_reason() == Reason::pending)
            socket_inode(fd, *s);  // (see connect)
        offload::on_accept(*ls, fd, *s);
    }
    return fd;
}
}  // namespace

namespace {
// A fork child's first accept() on a listener inherited with another process's RDMA
// listener: this process gets ready (its engine, its own RDMA listener) before it blocks,
// not once the first connection came (offload::listener_used).
void before_accept(int lfd) noexcept
{
    SocketRef ls = fdt::get(lfd);
    if (ls && ls->role == Role::listener && ls->offloaded()) {
        ErrnoGuard g;
        offload::listener_used(*ls);
    }
}
}  // namespace

int accept(int fd, sockaddr *addr, socklen_t *len) noexcept
{
    before_accept(fd);
    util::LowestFree low;
    return accepted(fd, low.fix(RS_REAL(accept)(fd, addr, len)));
}

int accept4(int fd, sockaddr *addr, socklen_t *len, int flags) noexcept
{
    before_accept(fd);
    util::LowestFree low;
    return accepted(fd, low.fix(RS_REAL(accept4)(fd, addr, len, flags)));
}

int connect(int fd, const sockaddr *addr, socklen_t len) noexcept
{
    int r = RS_REAL(connect)(fd, addr, len);
    if (r < 0 && errno != EINPROGRESS)
        return r;
    SocketRef s = fdt::get(fd);
    if (!s || addr == nullptr)
        return r;
    // A second connect() on a socket whose nonblocking connect is under way returns 0
    // once the handshake is done (hiredis checks completion that way): the connection
    // was set up, and its negotiation started, by the first call.
    if (s->has_peer)
        return r;
    ErrnoGuard g;
    s->role = Role::client;
    size_t n = len < sizeof s->peer ? len : sizeof s->peer;
    memcpy(&s->peer, addr, n);
    s->has_peer = true;
    Reason base = rt::default_reason();
    if (base != Reason::disabled && rt::excluded(rules::client, addr))
        base = Reason::rule;
    else if (base == Reason::pending && s->oobinline)
        base = Reason::urgent_data;
    else if (base == Reason::pending && uring::in_use())
        base = Reason::io_uring;  // (no request: the ring's calls would miss the switch)
    s->reason.store(base, std::memory_order_relaxed);
    if (base != Reason::pending)
        return r;  // no device, disabled, or a rule: nothing to negotiate
    socket_inode(fd, *s);  // (its close tells a reused number from it: names_socket)
    if (!rt::config().connect_wait) {
        // The default: connect() is the kernel's; RDMA is negotiated in the background
        // while the program uses the TCP connection (its bytes are counted), and the
        // connection switches once both ends are ready.
        offload::client_negotiate(fd, *s, false);
        return r;
    }
    bool connected = r == 0;
    if (!connected) {
        // Nonblocking connect: give the handshake up to the probe timeout, so the
        // negotiation can run before the program sees the socket writable.  Nothing
        // here reads SO_ERROR (that would clear a pending error).
        pollfd p{fd, POLLOUT, 0};
        int pr = RS_REAL(poll)(&p, 1, static_cast<int>(rt::config().probe_timeout_ms));
        sockaddr_storage peer{};
        socklen_t pl = sizeof peer;
        connected = pr == 1 && !(p.revents & (POLLERR | POLLHUP)) &&
                    RS_REAL(getpeername)(fd, reinterpret_cast<sockaddr *>(&peer), &pl) == 0;
        if (pr == 0)
            s->reason.store(Reason::timeout, std::memory_order_relaxed);
        else if (!connected)
            s->reason.store(Reason::not_connected, std::memory_order_relaxed);
    }
    if (connected)
        offload::client_negotiate(fd, *s, true);
    return r;
}

int bind(int fd, const sockaddr *addr, socklen_t len) noexcept
{
    return RS_REAL(bind)(fd, addr, len);
}

/* ---- receive ----------------------------------------------------------------------- */

ssize_t read(int fd, void *buf, size_t count) noexcept
{
    SocketRef s = offloaded_socket(fd);
    if (!s)
        return RS_REAL(read)(fd, buf, count);
    iovec iov{buf, count};
    return rx(*s, fd, &iov, 1, 0);
}

ssize_t __read_chk(int fd, void *buf, size_t count, size_t buflen) noexcept
{
    if (count > buflen)
        __chk_fail();
    return hook::read(fd, buf, count);
}

ssize_t readv(int fd, const iovec *iov, int iovcnt) noexcept
{
    SocketRef s = offloaded_socket(fd);
    if (!s)
        return RS_REAL(readv)(fd, iov, iovcnt);
    return rx(*s, fd, const_cast<iovec *>(iov), iovcnt, 0);
}

ssize_t recv(int fd, void *buf, size_t len, int flags) noexcept
{
    SocketRef s = offloaded_socket(fd);
    if (!s)
        return RS_REAL(recv)(fd, buf, len, flags);
    iovec iov{buf, len};
    return rx(*s, fd, &iov, 1, flags);
}

ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags) noexcept
{
    if (len > buflen)
        __chk_fail();
    return hook::recv(fd, buf, len, flags);
}

ssize_t recvfrom(int fd, void *buf, size_t len, int flags, sockaddr *addr, socklen_t *alen) noexcept
{
    SocketRef s = offloaded_socket(fd);
    if (!s)
        return RS_REAL(recvfrom)(fd, buf, len, flags, addr, alen);
    if (alen != nullptr)
        *alen = 0;  // a connected TCP socket reports no source address
    iovec iov{buf, len};
    return rx(*s, fd, &iov, 1, flags);
}

ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags, sockaddr *addr,
                       socklen_t *alen) noexcept
{
    if (len > buflen)
        __chk_fail();
    return hook::recvfrom(fd, buf, len, flags, addr, alen);
}

namespace {

// Each descriptor the SCM_RIGHTS messages of `msg`'s control data carry.
template <class F> void for_each_passed_fd(const msghdr *msg, F &&f) noexcept
{
    auto *m = const_cast<msghdr *>(msg);
    if (m->msg_control == nullptr || m->msg_controllen < sizeof(cmsghdr))
        return;
    for (cmsghdr *cm = CMSG_FIRSTHDR(m); cm != nullptr; cm = CMSG_NXTHDR(m, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len < CMSG_LEN(0))
            continue;
        const size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; ++i) {
            int fd = -1;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
            f(fd);
        }
    }
}

// The inode of the kernel socket behind `s` (fd is one of its numbers), looked up once.
uint64_t socket_inode(int fd, Socket &s) noexcept
{
    uint64_t ino = s.inode.load(std::memory_order_relaxed);
    struct stat st{};
    if (ino == 0 && fstat(fd, &st) == 0) {
        ino = st.st_ino;
        s.inode.store(ino, std::memory_order_relaxed);
    }
    return ino;
}

// Does fd still name the kernel socket the table holds for it?  Not when it was closed
// behind the library's back (an io_uring close, an inline system call) and maybe reused
// by a file or another socket: then nothing of that socket's close may touch the number.
// (A socket whose inode was never looked up is only checked to be a socket.)
bool names_socket(int fd, const Socket &s) noexcept
{
    struct stat st {};
    const uint64_t ino = s.inode.load(std::memory_order_relaxed);
    return ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && (ino == 0 || ino == st.st_ino);
}

// A descriptor this process has just received with SCM_RIGHTS.  When it is a
// connection the library holds under another number (the program passed it to itself),
// the new number joins that connection as a dup() would: its calls must reach the
// connection, not the kernel socket that no longer carries its bytes.  A number the
// table still maps is stale (closed behind the library's back): forgotten.
void adopt_received(int fd) noexcept
{
    struct stat st{};
    int same = -1;
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) {
        // (Not a fork's copy of the parent's connection: the parent handed it over, and
        // it reaches us as the kernel socket it is now.)
        fdt::for_each([&](int other, const SocketRef &s) {
            Transport *t = s->transport.load();
            if (same < 0 && other != fd && t != nullptr && !t->handed_off() && socket_inode(other, *s) == st.st_ino)
                same = other;
        });
    }
    if (same >= 0 || fdt::peek(fd) != nullptr)
        after_dup(same, fd, nullptr);
}

}  // namespace

ssize_t recvmsg(int fd, msghdr *msg, int flags) noexcept
{
    SocketRef s = offloaded_socket(fd);
    if (!s) {
        // Here for a message with control data (preload/wrappers.cc, RS_CTL).
        ssize_t r = RS_REAL(recvmsg)(fd, msg, flags);
        if (r >= 0 && msg != nullptr) {
            ErrnoGuard g;
            for_each_passed_fd(msg, adopt_received);
        }
        return r;
    }
    InCall in(*s);
    return ret(s->transport.load()->recvmsg(fd, msg, flags));
}

int recvmmsg(int fd, mmsghdr *vec, unsigned int vlen, int flags, timespec *timeout) noexcept
{
    SocketRef s = offloaded_socket(fd);
    if (!s)
        return RS_REAL(recvmmsg)(fd, vec, vlen, flags, timeout);
    InCall in(*s);
    unsigned i = 0;
    for (; i < vlen; ++i) {
        ssize_t r = s->transport.load()->recvmsg(fd, &vec[i].msg_hdr, flags & ~MSG_WAITFORONE);
        if (r < 0) {
            if (i == 0)
                return static_cast<int>(ret(r));
            break;
        }
        vec[i].msg_len = static_cast<unsigned>(r);
        if (r == 0)
            return static_cast<int>(i + 1);
        if (flags & MSG_WAITFORONE)
            flags |= MSG_DONTWAIT;
    }
    return static_cast<int>(i);
}

/* ---- send -------------------------------------------------------------------------- */

ssize_t write(int fd, const void *buf, size_t count) noexcept
{
    SocketRef s = offloaded_socket(fd);
    if (!s)
        return RS_REAL(write)(fd, buf, count);
    iovec iov{const_cast<void *>(buf), count};
    return tx(*s, fd, &iov, 1, 0);
}

ssize_t writev(int fd, const iovec *iov, int iovcnt) noexcept
{
    SocketRef s = offloaded_socket(fd);
    if (!s)
        return RS_REAL(writev)(fd, iov, iovcnt);
    return tx(*s, fd, iov, iovcnt, 0);
}

ssize_t send(int fd, const void *buf, size_t len, int flags) noexcept
{
    SocketRef s = offloaded_socket(fd);
    if (!s)
        return RS_REAL(send)(fd, buf, len, flags);
    iovec iov{const_cast<void *>(buf), len};
    return tx(*s, fd, &iov, 1, flags);
}

ssize_t sendto(int fd, const void *buf, size_t len, int flags, const sockaddr *addr,
               socklen_t alen) noexcept
{
    SocketRef s = offloaded_socket(fd);
    if (!s)
        return RS_REAL(sendto)(fd, buf, len, flags, addr, alen);
    iovec iov{const_cast<void *>(buf), len};
    return tx(*s, fd, &iov, 1, flags);  // a connected TCP socket ignores the address
}

namespace {
// A connection passed on (SCM_RIGHTS) goes back to its TCP socket first: its receiver,
// maybe another process, can only use the kernel socket.  (Also to this process itself:
// nothing tells reliably where the message goes.  SO_PEERCRED names the process that
// made a socketpair, a fork's parent.)
// The sockets `msg` passes, into `refs` (held: they stay while they are seen to).
void passed_sockets(const msghdr *msg, std::vector<SocketRef> &refs) noexcept
{
    if (msg != nullptr)
        for_each_passed_fd(msg, [&refs](int passed) {
            if (SocketRef p = fdt::get(passed); p && p->transport != nullptr)
                refs.push_back(std::move(p));
        });
}
void before_pass(const std::vector<SocketRef> &refs) noexcept
{
    if (!refs.empty())
        offload::on_passed(refs.data(), refs.size());
}
}  // namespace

ssize_t sendmsg(int fd, const msghdr *msg, int flags) noexcept
{
    SocketRef s = offloaded_socket(fd);
    if (!s) {
        {
            ErrnoGuard g;
            std::vector<SocketRef> refs;
            passed_sockets(msg, refs);
            before_pass(refs);
        }
        return RS_REAL(sendmsg)(fd, msg, flags);
    }
    InCall in(*s);
    return ret(s->transport.load()->sendmsg(fd, msg, flags));
}

int sendmmsg(int fd, mmsghdr *vec, unsigned int vlen, int flags) noexcept
{
    SocketRef s = offloaded_socket(fd);
    if (!s) {
        {
            ErrnoGuard g;
            std::vector<SocketRef> refs;  // (every message's: seen to together)
            for (unsigned i = 0; vec != nullptr && i < vlen; ++i)
                passed_sockets(&vec[i].msg_hdr, refs);
            before_pass(refs);
        }
        return RS_REAL(sendmmsg)(fd, vec, vlen, flags);
    }
    InCall in(*s);
    unsigned i = 0;
    for (; i < vlen; ++i) {
        ssize_t r = s->transport.load()->sendmsg(fd, &vec[i].msg_hdr, flags);
        if (r < 0) {
            if (i == 0)
                return static_cast<int>(ret(r));
            break;
        }
        vec[i].msg_len = static_cast<unsigned>(r);
    }
    return static_cast<int>(i);
}

namespace {
// sendfile onto an offloaded socket: read the file in chunks and send them.
template <class Off>
ssize_t sendfile_copy(Socket &s, int out_fd, int in_fd, Off *offset, size_t count) noexcept
{
    char buf[16384];
    size_t done = 0;
    off_t pos = offset != nullptr ? static_cast<off_t>(*offset) : 0;
    while (done < count) {
        size_t want = count - done < sizeof buf ? count - done : sizeof buf;
        ssize_t n = offset != nullptr ? pread(in_fd, buf, want, pos + static_cast<off_t>(done))
                                      : RS_REAL(read)(in_fd, buf, want);
        if (n <= 0) {
            if (n < 0 && done == 0)
                return -1;
            break;
        }
        iovec iov{buf, static_cast<size_t>(n)};
        ssize_t w = tx(s, out_fd, &iov, 1, 0);
        if (w < 0) {
            if (offset == nullptr)  // give back what we read but could not send
                lseek(in_fd, -static_cast<off_t>(n), SEEK_CUR);
            if (done == 0)
                return -1;
            break;
        }
        done += static_cast<size_t>(w);
        if (w < n) {
            if (offset == nullptr)
                lseek(in_fd, -static_cast<off_t>(n - w), SEEK_CUR);
            break;
        }
    }
    if (offset != nullptr)
        *offset = static_cast<Off>(pos + static_cast<off_t>(done));
    return static_cast<ssize_t>(done);
}
}  // namespace

ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count) noexcept
{
    SocketRef s = offloaded_socket(out_fd);
    if (!s)
        return RS_REAL(sendfile)(out_fd, in_fd, offset, count);
    return sendfile_copy(*s, out_fd, in_fd, offset, count);
}

ssize_t sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count) noexcept
{
    SocketRef s = offloaded_socket(out_fd);
    if (!s)
        return RS_REAL(sendfile64)(out_fd, in_fd, offset, count);
    return sendfile_copy(*s, out_fd, in_fd, offset, count);
}

/* ---- splice(2) with an offloaded socket at one end: the kernel's would read or write
   the TCP socket, which the connection no longer uses; the bytes are copied instead,
   and never taken from where they come from before they are where they go. ---------- */

namespace {
constexpr size_t kSpliceChunk = 65536;

// Room left in pipe `fd` (its capacity less what it holds); -1 with errno when `fd` is
// not a pipe (EINVAL, as splice says when neither end is one).
long pipe_room(int fd) noexcept
{
    const int cap = ::fcntl(fd, F_GETPIPE_SZ);
    int held = 0;
    if (cap < 0 || ::ioctl(fd, FIONREAD, &held) != 0) {
        errno = EINVAL;
        return -1;
    }
    return cap > held ? cap - held : 0;
}

// Socket to pipe: peek what fits in the pipe, write it there, then take as many bytes
// from the connection as the pipe took.  SPLICE_F_NONBLOCK is about the pipe, as in the
// kernel: the socket's own O_NONBLOCK decides whether the read waits.
ssize_t splice_from(Socket &s, int sock, int pipe_w, size_t len, unsigned flags) noexcept
{
    const bool nonblock = (flags & SPLICE_F_NONBLOCK) != 0;
    char buf[kSpliceChunk];
    long room;
    while ((room = pipe_room(pipe_w)) == 0) {  // a full pipe: wait as the kernel would
        if (nonblock || (::fcntl(pipe_w, F_GETFL) & O_NONBLOCK) != 0) {
            errno = EAGAIN;
            return -1;
        }
        pollfd p{pipe_w, POLLOUT, 0};
        if (RS_REAL(poll)(&p, 1, -1) < 0)
            return -1;
    }
    if (room < 0)
        return -1;
    size_t want = len < static_cast<size_t>(room) ? len : static_cast<size_t>(room);
    if (want > sizeof buf)
        want = sizeof buf;
    iovec iov{buf, want};
    const ssize_t n = rx(s, sock, &iov, 1, MSG_PEEK);
    if (n <= 0)
        return n;
    const ssize_t w = RS_REAL(write)(pipe_w, buf, static_cast<size_t>(n));
    if (w <= 0)
        return w;
    iovec take{buf, static_cast<size_t>(w)};
    rx(s, sock, &take, 1, MSG_WAITALL);  // (peeked: there)
    return w;
}

// Pipe to socket: copy the pipe's bytes without taking them (tee into a pipe of our
// own), send them, then take from the pipe as many as were sent.  SPLICE_F_NONBLOCK:
// an empty pipe is EAGAIN; the send waits as the socket's O_NONBLOCK says.
ssize_t splice_to(Socket &s, int pipe_r, int sock, size_t len, unsigned flags) noexcept
{
    const bool nonblock = (flags & SPLICE_F_NONBLOCK) != 0;
    int t[2];
    {
        util::FdGate making(util::FdGate::making);
        if (pipe2(t, O_CLOEXEC) != 0)
            return -1;
        t[0] = util::move_high(t[0]);
        t[1] = util::move_high(t[1]);
    }
    char buf[kSpliceChunk];
    ssize_t r = tee(pipe_r, t[1], len < sizeof buf ? len : sizeof buf, nonblock ? SPLICE_F_NONBLOCK : 0);
    if (r > 0) {
        const ssize_t got = RS_REAL(read)(t[0], buf, static_cast<size_t>(r));
        iovec iov{buf, got > 0 ? static_cast<size_t>(got) : 0};
        r = got > 0 ? tx(s, sock, &iov, 1, 0) : got;
        for (ssize_t left = r; left > 0;) {  // take what was sent
            const ssize_t k = RS_REAL(read)(pipe_r, buf, static_cast<size_t>(left));
            if (k <= 0 && errno != EINTR)
                break;
            left -= k > 0 ? k : 0;
        }
    }
    ErrnoGuard g;
    util::close_own(t[0]);
    util::close_own(t[1]);
    return r;
}
}  // namespace

ssize_t splice(int fd_in, off64_t *off_in, int fd_out, off64_t *off_out, size_t len, unsigned int flags) noexcept
{
    SocketRef in = offloaded_socket(fd_in);
    SocketRef out = in ? SocketRef() : offloaded_socket(fd_out);
    if (!in && !out)
        return RS_REAL(splice)(fd_in, off_in, fd_out, off_out, len, flags);
    // The kernel's checks, in its order: one end must be a pipe (EINVAL), which takes no
    // offset (ESPIPE), nor does a socket (EINVAL).
    if (pipe_room(in ? fd_out : fd_in) < 0)
        return -1;
    if ((in ? off_out : off_in) != nullptr || (in ? off_in : off_out) != nullptr) {
        errno = (in ? off_out : off_in) != nullptr ? ESPIPE : EINVAL;
        return -1;
    }
    if (len == 0)
        return 0;
    return in ? splice_from(*in, fd_in, fd_out, len, flags) : splice_to(*out, fd_in, fd_out, len, flags);
}

/* ---- teardown and descriptor management -------------------------------------------- */

namespace {
// What closing fd does to its socket, before the kernel closes the number: the last
// number of a connection closes it (its close line), another moves it to a number left.
void forget_socket(int fd) noexcept
{
    SocketRef s = fdt::remove(fd);
    if (s && s->drop_fd()) {
        ErrnoGuard g;
        if (!names_socket(fd, *s))
            return;  // (its close was never seen: no close line, and nothing done to the number)
        if (defer_close(fd, *s))
            return;
        CloseInfo ci = capture(fd, *s);
        offload::on_close(fd, *s);
        log_close(fd, *s, ci);
    } else if (s) {
        ErrnoGuard g;
        move_conn_fd(fd, *s);
    }
}

// Every number in [first, last] but the library's own closed at once
// (util::close_range_but_own): each socket there as close() closes it.
void forget_range(unsigned first, unsigned last) noexcept
{
    ErrnoGuard g;
    std::vector<int> fds;
    try {
        fdt::for_each([&fds, first, last](int fd, const SocketRef &) {
            if (static_cast<unsigned>(fd) >= first && static_cast<unsigned>(fd) <= last && !util::owned(fd))
                fds.push_back(fd);
        });
    } catch (...) {  // out of memory: the sockets left are dropped when their numbers are reused
    }
    readiness::on_close_range(first, last);  // first: see before_close()
    for (int fd : fds)
        forget_socket(fd);
    util::for_each_run_but_own(first, last, [](unsigned lo, unsigned hi) {
        library_fds_closed(lo, hi);
        return true;
    });
}
}  // namespace

void before_close(int fd) noexcept
{
    // The number's epoll registrations go first, as the kernel drops them at close: the
    // connection then knows nobody watches its eventfds, and closes them with the
    // socket rather than when the connection's linger or negotiation ends.
    readiness::on_close(fd);
    forget_socket(fd);
    library_fds_closed(static_cast<unsigned>(fd), static_cast<unsigned>(fd));
    util::disown(fd);  // (the program closes one of ours: from now on the number is free)
}

int close(int fd) noexcept
{
    before_close(fd);
    return RS_REAL(close)(fd);
}

// close_range() and closefrom() close numbers the program may reuse at once: a number
// still mapped to a closed connection would send a file's bytes to the peer.  They
// leave the library's own descriptors open (util::close_range_but_own): a daemon's
// closefrom(3) would otherwise take its log, its devices and its connections' eventfds.
// (With CLOSE_RANGE_CLOEXEC nothing is closed; CLOSE_RANGE_UNSHARE closes in a copy of
// the table, which is this process's from then on.)
int close_range(unsigned int first, unsigned int last, int flags) noexcept
{
    if (first > last || (flags & ~(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC)) != 0)
        return RS_REAL(close_range)(first, last, flags);  // (EINVAL)
    if (!(flags & CLOSE_RANGE_CLOEXEC))
        forget_range(first, last);
    return util::close_range_but_own(first, last, flags);
}

void closefrom(int lowfd) noexcept
{
    const unsigned first = lowfd < 0 ? 0 : static_cast<unsigned>(lowfd);  // (as the C library's)
    forget_range(first, ~0U);
    if (util::close_range_but_own(first, ~0U, 0) != 0) {
        // No close_range (before Linux 5.9, or a seccomp filter): the C library's way,
        // which closes ours too.
        ErrnoGuard g;
        library_fds_closed(first, ~0U);
        util::disown_from(first);
        RS_REAL(closefrom)(lowfd);
    }
}

int shutdown(int fd, int how) noexcept
{
    SocketRef s = offloaded_socket(fd);
    if (!s)
        return RS_REAL(shutdown)(fd, how);
    return static_cast<int>(ret(s->transport.load()->shutdown(fd, how)));
}

int dup(int fd) noexcept
{
    int r = util::placed([=] { return RS_REAL(dup)(fd); });
    if (r >= 0) {
        ErrnoGuard g;
        after_dup(fd, r, nullptr);
    }
    return r;
}

int dup2(int fd, int fd2) noexcept
{
    if (fd == fd2)
        return RS_REAL(dup2)(fd, fd2);
    Victim v = prepare_victim(fd, fd2);
    int r = util::placed([=] { return RS_REAL(dup2)(fd, fd2); });
    if (r >= 0) {
        ErrnoGuard g;
        after_dup(fd, r, &v);
    }
    return r;
}

int dup3(int fd, int fd2, int flags) noexcept
{
    if (fd == fd2)
        return RS_REAL(dup3)(fd, fd2, flags);  // EINVAL, as the kernel says
    Victim v = prepare_victim(fd, fd2);
    int r = util::placed([=] { return RS_REAL(dup3)(fd, fd2, flags); });
    if (r >= 0) {
        ErrnoGuard g;
        after_dup(fd, r, &v);
    }
    return r;
}

int fcntl(int fd, int cmd, void *arg) noexcept
{
    const bool dups = cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC;
    int r = dups ? util::placed([=] { return RS_REAL(fcntl)(fd, cmd, arg); }) : RS_REAL(fcntl)(fd, cmd, arg);
    if (r >= 0 && dups) {
        ErrnoGuard g;
        after_dup(fd, r, nullptr);
    } else if (r >= 0 && cmd == F_SETFL && fdt::offloaded(fd)) {
        if (SocketRef s = offloaded_socket(fd))
            transport_of(*s).note_nonblocking(reinterpret_cast<intptr_t>(arg) & O_NONBLOCK);
    }
    return r;
}

int ioctl(int fd, unsigned long request, void *arg) noexcept
{
    SocketRef s = offloaded_socket(fd);
    Transport *c = s ? s->transport.load() : nullptr;
    if (c != nullptr && request == FIONBIO && arg != nullptr) {
        int r = RS_REAL(ioctl)(fd, request, arg);
        if (r == 0)
            c->note_nonblocking(*static_cast<const int *>(arg) != 0);
        return r;
    }
    if (c == nullptr || !c->on_rdma() || arg == nullptr)
        return RS_REAL(ioctl)(fd, request, arg);
    if (request == FIONREAD) {  // == SIOCINQ
        *static_cast<int *>(arg) = c->bytes_readable();
        return 0;
    }
    if (request == TIOCOUTQ) {  // == SIOCOUTQ
        *static_cast<int *>(arg) = c->bytes_unacked();
        return 0;
    }
    return RS_REAL(ioctl)(fd, request, arg);
}

/* ---- options and names: the kernel TCP socket is the connection's identity ---------- */

int getsockopt(int fd, int level, int name, void *val, socklen_t *len) noexcept
{
    if (__builtin_expect(level != static_cast<int>(SOL_RDMASOCK), 1))
        return RS_REAL(getsockopt)(fd, level, name, val, len);
    SocketRef s = fdt::get(fd);
    if (!s || name != RDMASOCK_INFO || val == nullptr || len == nullptr)
        return RS_REAL(getsockopt)(fd, level, name, val, len);  // the kernel's answer
    rdmasock_info info{};
    Reason r = s->reason.load(std::memory_order_relaxed);
    Transport &t = transport_of(*s);
    const bool rdma = describe::on_rdma(*s);
    info.transport = rdma ? RDMASOCK_RDMA : RDMASOCK_TCP;
    info.reason = static_cast<uint32_t>(rdma ? Reason::none : r);
    snprintf(info.reason_code, sizeof info.reason_code, "%s", reason_code(rdma ? Reason::none : r));
    snprintf(info.phase, sizeof info.phase, "%s", t.phase_name());
    Counters cn = t.counters(fd);
    info.bytes_sent = cn.bytes_sent;
    info.bytes_received = cn.bytes_received;
    info.connection_id = s->id;
    socklen_t n = *len < sizeof info ? *len : static_cast<socklen_t>(sizeof info);
    memcpy(val, &info, n);
    *len = n;
    return 0;
}

int setsockopt(int fd, int level, int name, const void *val, socklen_t len) noexcept
{
    if (level == SOL_SOCKET && name == SO_OOBINLINE && val != nullptr && len >= sizeof(int) &&
        *static_cast<const int *>(val) != 0) {
        if (SocketRef s = fdt::get(fd)) {
            if (s->offloaded() && s->transport != nullptr) {
                if (int e = s->transport.load()->urgent_inline()) {
                    errno = -e;
                    return -1;
                }
            } else if (s->role != Role::server) {
                s->oobinline = true;
            }
        }
    }
    int r = RS_REAL(setsockopt)(fd, level, name, val, len);
    if (r == 0 && level == SOL_SOCKET && name == SO_RCVLOWAT && val != nullptr && len >= sizeof(int)) {
        if (SocketRef s = offloaded_socket(fd))
            transport_of(*s).set_rcvlowat(*static_cast<const int *>(val));
    }
    return r;
}

int getsockname(int fd, sockaddr *addr, socklen_t *len) noexcept
{
    return RS_REAL(getsockname)(fd, addr, len);
}

int getpeername(int fd, sockaddr *addr, socklen_t *len) noexcept
{
    return RS_REAL(getpeername)(fd, addr, len);
}

/* ---- wait primitives: the readiness layer ------------------------------------------ */

int poll(pollfd *fds, nfds_t nfds, int timeout) noexcept
{
    return readiness::poll(fds, nfds, timeout);
}

int __poll_chk(pollfd *fds, nfds_t nfds, int timeout, size_t fdslen) noexcept
{
    if (fdslen / sizeof *fds < nfds)
        __chk_fail();
    return readiness::poll(fds, nfds, timeout);
}

int ppoll(pollfd *fds, nfds_t nfds, const timespec *tmo, const sigset_t *mask) noexcept
{
    return readiness::ppoll(fds, nfds, tmo, mask);
}

int __ppoll_chk(pollfd *fds, nfds_t nfds, const timespec *tmo, const sigset_t *mask,
                size_t fdslen) noexcept
{
    if (fdslen / sizeof *fds < nfds)
        __chk_fail();
    return readiness::ppoll(fds, nfds, tmo, mask);
}

int select(int nfds, fd_set *r, fd_set *w, fd_set *e, timeval *tmo) noexcept
{
    return readiness::select(nfds, r, w, e, tmo);
}

int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const timespec *tmo,
            const sigset_t *mask) noexcept
{
    return readiness::pselect(nfds, r, w, e, tmo, mask);
}

int epoll_create(int size) noexcept
{
    util::LowestFree low;
    return low.fix(RS_REAL(epoll_create)(size));
}

int epoll_create1(int flags) noexcept
{
    util::LowestFree low;
    return low.fix(RS_REAL(epoll_create1)(flags));
}

int epoll_ctl(int epfd, int op, int fd, epoll_event *ev) noexcept
{
    return readiness::epoll_ctl(epfd, op, fd, ev);
}

int epoll_wait(int epfd, epoll_event *ev, int maxev, int timeout) noexcept
{
    return readiness::epoll_wait(epfd, ev, maxev, timeout);
}

int epoll_pwait(int epfd, epoll_event *ev, int maxev, int timeout, const sigset_t *mask) noexcept
{
    return readiness::epoll_pwait(epfd, ev, maxev, timeout, mask);
}

int epoll_pwait2(int epfd, epoll_event *ev, int maxev, const timespec *tmo,
                 const sigset_t *mask) noexcept
{
    return readiness::epoll_pwait2(epfd, ev, maxev, tmo, mask);
}

/* ---- process lifecycle ------------------------------------------------------------- */

pid_t fork() noexcept
{
    // A client negotiating in the background counts its TCP bytes; the child would
    // write behind that count: such connections stay on TCP.  One with RDMA bound gets a
    // slot its child's copy can ask for it by (process/copies.hh).
    const bool conns = rt::g_pending.load(std::memory_order_relaxed) != 0 ||
                       rt::g_offloaded.load(std::memory_order_relaxed) != 0;
    if (conns) {
        ErrnoGuard g;
        fdt::for_each([](int, const SocketRef &s) {
            if (s->transport != nullptr)
                s->transport.load()->before_fork();
        });
    }
    offload::before_fork();
    pid_t r;
    int fork_errno;
    {
        // The fork copies the numbers as they are: not while a library descriptor passes
        // through a low one (util::FdGate; the child would keep it there).
        util::FdGate placing(util::FdGate::placing);
        // The locks a child's first close, or its exit, takes are held across the fork:
        // the child never inherits one held by another thread, which does not exist
        // there to release it.
        readiness::lock_for_fork();
        g_deferred_mu.lock();
        offload::lock_for_fork();
        r = RS_REAL(fork)();
        fork_errno = errno;
        offload::unlock_after_fork();
        g_deferred_mu.unlock();
        readiness::unlock_after_fork();
    }
    errno = fork_errno;
    if (r != 0 && conns) {
        // Accepted connections not used yet: the child may serve them.  The child holds a
        // copy of those with RDMA bound.
        ErrnoGuard g;
        fdt::for_each([r](int, const SocketRef &s) {
            if (s->transport != nullptr)
                s->transport.load()->after_fork_parent(r);
        });
        offload::after_fork_parent(r);
    }
    if (r != 0)
        copies::note_fork_shares(false);  // (the child's: offload::after_fork_child)
    if (r == 0) {
        ErrnoGuard g;
        util::fd_gate_after_fork_child();
        rt::after_fork_child();
        offload::after_fork_child();
        streams_after_fork_child();
        report::after_fork_child();
        readiness::after_fork_child();
        // Offloaded connections belong to the process that made them: the child's
        // copies are asked for at their first use (Conn::claim_copy; rdmasock(7), FORK).
        fdt::for_each([](int, const SocketRef &s) {
            if (s->transport != nullptr)
                s->transport.load()->after_fork_child();
            // A listener whose RDMA listener is another process's: its first use here
            // (epoll_ctl, accept) takes the hooked path (offload::listener_used).
            if (s->role == Role::listener && s->listener && s->registry)
                s->set_offloaded(true);
        });
        copies::forget_placeholder();
        // The kernel copies the descriptor table before the memory: a socket another
        // thread opened (accept, socket) in between is in the child's table of sockets
        // but not among its descriptors, and one it closed may have left its number to
        // another file (under TSan's timing, parity fork_exec_storm_with_connections
        // logged a close line whose number was no socket: "local=-").  Such entries
        // are dropped silently (a child that closed its descriptors logged close lines
        // of sockets it never had); after the pass above, which gave each connection
        // copy fresh locks.
        fdt::for_each([](int fd, const SocketRef &s) {
            if (!names_socket(fd, *s))
                if (SocketRef gone = fdt::remove(fd))
                    gone->drop_fd();
        });
    }
    return r;
}

/* ---- exec -------------------------------------------------------------------------- */

// The new program reads and writes the sockets it inherits through the kernel alone (the
// library, if it runs there too, knows nothing of them): each connection of this
// process goes back to its TCP socket first (offload::before_exec).  If the exec fails,
// they go on over TCP.
namespace {
void before_exec() noexcept
{
    ErrnoGuard g;
    offload::before_exec();
}
}  // namespace

int execve(const char *path, char *const argv[], char *const envp[]) noexcept
{
    before_exec();
    return RS_REAL(execve)(path, argv, envp);
}

int execv(const char *path, char *const argv[]) noexcept
{
    before_exec();
    return RS_REAL(execv)(path, argv);
}

int execvp(const char *file, char *const argv[]) noexcept
{
    before_exec();
    return RS_REAL(execvp)(file, argv);
}

int execvpe(const char *file, char *const argv[], char *const envp[]) noexcept
{
    before_exec();
    return RS_REAL(execvpe)(file, argv, envp);
}

int fexecve(int fd, char *const argv[], char *const envp[]) noexcept
{
    before_exec();
    return RS_REAL(fexecve)(fd, argv, envp);
}

int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags) noexcept
{
    before_exec();
    return RS_REAL(execveat)(dirfd, path, argv, envp, flags);
}

// exit() while calls on a connection whose close() was deferred are still blocked (they
// never return): the connection closes as close() would have closed it (orderly FIN,
// every byte written reaching the peer first, and the close line).
void finish_deferred_at_exit() noexcept
{
    std::vector<SocketRef> v;
    {
        std::lock_guard<std::mutex> lk(g_deferred_mu);
        if (g_deferred == nullptr)
            return;
        try {
            v = *g_deferred;
        } catch (...) {
            return;
        }
    }
    for (SocketRef &s : v)
        if (take_deferred(*s))
            finish_deferred_close(*s);
}

void close_lines_at_exit() noexcept
{
    if (!log::enabled(log::kInfo))
        return;
    ErrnoGuard g;
    std::vector<const Socket *> seen;
    try {
        fdt::for_each([&seen](int fd, const SocketRef &s) {
            for (const Socket *p : seen)
                if (p == s.get())
                    return;  // a duplicate: its socket has its line
            seen.push_back(s.get());
            CloseInfo ci = capture(fd, *s);
            log_close(fd, *s, ci);
        });
    } catch (...) {  // out of memory at exit: the lines not written yet are lost
    }
}

}  // namespace rdmasock::hook
