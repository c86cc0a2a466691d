#include "engine/readiness.hh"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sched.h>
#include <unordered_map>
#include <vector>

#include "base/real.hh"
#include "conn/rdma_conn.hh"
#include "conn/wait.hh"
#include "engine/offload.hh"
#include "process/fd_table.hh"
#include "process/runtime.hh"
#include "process/signals.hh"

namespace rdmasock::readiness {

namespace {

using Clock = std::chrono::steady_clock;

// An epoll registration of an fd that is (or may become) offloaded.
struct Reg {
    uint32_t events = 0;
    epoll_data_t data{};
    bool on_shadows = false;  // registered as the connection's two eventfds
    int rd = -1, wr = -1;
    // While on_shadows: the connection whose eventfds they are (it counts the
    // registration as a user; the number fd may name another socket by its end).
    std::weak_ptr<Conn> conn;
    // Made before a fork, by the parent: the set is the parent's too, and the parent
    // still holds the socket (a close here leaves the registration, as the kernel does).
    bool inherited = false;
    // Edge-triggered, on the TCP socket of a connection deciding, and an edge of it not
    // shown to the program (fixup_deciding): made again if the connection stays on TCP.
    bool held = false;
};

struct Set {
    std::map<int, Reg> regs;                       // fd -> registration
    std::unordered_map<uint64_t, int> by_data;     // data of a shadow registration -> fd
    // fixup_deciding's index (index_reg): how many registrations have each data, and the
    // fd of one on its TCP socket (a connection deciding) that has it.
    std::unordered_map<uint64_t, int> data_uses;
    std::unordered_map<uint64_t, int> tcp_by_data;
    int direct = 0;  // threads in an epoll_wait's direct sleep on it (epoll_loop)
};

// Registration `r` of `fd` enters (+1) or leaves (-1) the set's index; a change of its
// data or of its place (TCP socket, shadows) is a leave, then an enter (g_mu held).
void index_reg(Set &set, int fd, const Reg &r, int delta) noexcept
{
    const uint64_t d = r.data.u64;
    try {
        if ((set.data_uses[d] += delta) <= 0)
            set.data_uses.erase(d);
        if (!r.on_shadows && delta > 0)
            set.tcp_by_data[d] = fd;
    } catch (...) {  // (no memory: the index says less, and fixup_deciding leaves such events)
    }
    auto t = set.tcp_by_data.find(d);
    if (!r.on_shadows && delta < 0 && t != set.tcp_by_data.end() && t->second == fd)
        set.tcp_by_data.erase(t);
}

std::mutex g_mu;
// epfd -> registrations of offloaded fds.  Never destroyed: the library's threads may
// still close descriptors (through the close hook) while the process runs its static
// destructors at exit.
std::map<int, Set> &sets() noexcept
{
    static auto *m = new std::map<int, Set>();
    return *m;
}
std::atomic<int> g_shadow_regs{0};    // registrations currently on shadows, all sets
std::atomic<int> g_sets_count{0};
// Numbers below kMarked that may have something here, one bit each: an epoll descriptor
// with a set, or a descriptor registered in one (set under g_mu at the registration,
// cleared only by a close's pass under g_mu).  A close() of any other number needs no
// lock: one held across a fork would otherwise stop every thread's close of a file until
// the fork is done, and TSan's report machinery closes a file while it holds a lock the
// fork waits for (a deadlock in the TSan run's fork storm).
constexpr unsigned kMarked = 1u << 16;
std::atomic<uint64_t> g_marks[kMarked / 64];
void mark(int fd) noexcept
{
    if (fd < 0 || static_cast<unsigned>(fd) >= kMarked)
        return;
    const uint64_t bit = uint64_t{1} << (fd % 64);
    if ((g_marks[fd / 64].load(std::memory_order_relaxed) & bit) == 0)  // (no store on a shared word each time)
        g_marks[fd / 64].fetch_or(bit, std::memory_order_relaxed);
}
void unmark_range(int lo, int hi) noexcept
{
    for (unsigned w = static_cast<unsigned>(lo) / 64; w < kMarked / 64 && w * 64 <= static_cast<unsigned>(hi); ++w) {
        const unsigned first = std::max(w * 64, static_cast<unsigned>(lo)), last = std::min(w * 64 + 63, static_cast<unsigned>(hi));
        const uint64_t bits = (last - first == 63 ? ~uint64_t{0} : ((uint64_t{1} << (last - first + 1)) - 1)) << (first % 64);
        g_marks[w].fetch_and(~bits, std::memory_order_relaxed);
    }
}
bool marked(int fd) noexcept
{
    return static_cast<unsigned>(fd) >= kMarked || (g_marks[fd / 64].load(std::memory_order_relaxed) >> (fd % 64) & 1) != 0;
}

constexpr uint32_t kFlags = EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE | EPOLLWAKEUP;

Conn *conn_of(const SocketRef &s) noexcept
{
    return s ? Conn::of(s->transport) : nullptr;
}

// Null for a fork child's copy its owner has just handed back (a kernel socket now).
Conn *claimed_copy(Conn *c) noexcept { return c != nullptr && c->claim_copy() ? nullptr : c; }

// Register (EPOLL_CTL_ADD) or re-arm (EPOLL_CTL_MOD) the connection's eventfds for a
// registration of `events` carrying `data`.
int arm_shadows(int epfd, int op, uint32_t events, epoll_data_t data, Conn &c) noexcept
{
    uint32_t flags = events & kFlags;
    epoll_event ev{};
    ev.data = data;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLPRI)) {
        ev.events = EPOLLIN | flags;
        if (RS_REAL(epoll_ctl)(epfd, op, c.rd_fd(), &ev) != 0 && errno != EEXIST)
            return -errno;
    }
    if (events & EPOLLOUT) {
        ev.events = EPOLLOUT | (flags & ~EPOLLEXCLUSIVE);
        if (RS_REAL(epoll_ctl)(epfd, op, c.wr_fd(), &ev) != 0 && errno != EEXIST)
            return -errno;
    }
    return 0;
}

// Put a registration onto the connection's shadows (g_mu held).
int add_shadows(int epfd, Set &set, int fd, Reg &r, Conn &c) noexcept
{
    r.rd = c.rd_fd();
    r.wr = c.wr_fd();
    if (int e = arm_shadows(epfd, EPOLL_CTL_ADD, r.events, r.data, c))
        return e;
    r.on_shadows = true;
    r.conn = c.self();
    c.shadow_users(+1);
    set.by_data[r.data.u64] = fd;
    g_shadow_regs.fetch_add(1, std::memory_order_relaxed);
    return 0;
}

// Take a registration off its connection's shadows (g_mu held).  The eventfds leave the
// epoll set (unless in_kernel is false: the epoll fd itself is being closed, and the
// set may be a fork parent's too, which keeps its registrations) before the connection
// stops counting the registration (it may then close them, and the numbers be reused).
void del_shadows(int epfd, Set &set, Reg &r, bool in_kernel = true) noexcept
{
    if (!r.on_shadows)
        return;
    if (in_kernel) {
        RS_REAL(epoll_ctl)(epfd, EPOLL_CTL_DEL, r.rd, nullptr);
        RS_REAL(epoll_ctl)(epfd, EPOLL_CTL_DEL, r.wr, nullptr);
    }
    if (std::shared_ptr<Conn> c = r.conn.lock())
        c->shadow_users(-1);
    r.conn.reset();
    set.by_data.erase(r.data.u64);
    r.on_shadows = false;
    g_shadow_regs.fetch_sub(1, std::memory_order_relaxed);
}

int ms_left(Clock::time_point deadline, bool infinite) noexcept
{
    return infinite ? -1 : waits::ms_until(deadline);
}

// The events of ev[0..n) but the dropped ones, in order; their count.
int compact(epoll_event *ev, int n, const std::vector<bool> &drop) noexcept
{
    int out = 0;
    for (int i = 0; i < n; ++i)
        if (!drop[static_cast<size_t>(i)])
            ev[out++] = ev[i];
    return out;
}

// Fix up what the kernel returned for an epoll set that holds shadow registrations:
// the program's own data, one event per registration, exact masks.  Returns the new
// count.
int fixup(int epfd, epoll_event *ev, int n) noexcept
{
    struct Hit {
        int idx;
        int fd;
        uint32_t interest;
    };
    std::vector<Hit> hits;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        auto it = sets().find(epfd);
        if (it == sets().end() || it->second.by_data.empty())
            return n;
        for (int i = 0; i < n; ++i) {
            auto d = it->second.by_data.find(ev[i].data.u64);
            if (d == it->second.by_data.end())
                continue;
            const Reg &r = it->second.regs[d->second];
            hits.push_back({i, d->second, r.events});
        }
    }
    if (hits.empty())
        return n;
    std::vector<bool> drop(static_cast<size_t>(n), false);
    for (size_t h = 0; h < hits.size(); ++h) {
        // Two events for one registration (its rd and wr eventfds): keep the first.
        bool dup = false;
        for (size_t k = 0; k < h; ++k)
            if (hits[k].fd == hits[h].fd)
                dup = true;
        if (dup) {
            drop[static_cast<size_t>(hits[h].idx)] = true;
            continue;
        }
        SocketRef s = fdt::get(hits[h].fd);
        Conn *c = conn_of(s);
        unsigned m = c ? c->poll_mask(hits[h].fd) : 0;
        uint32_t want = (hits[h].interest & ~kFlags) | EPOLLERR | EPOLLHUP;
        uint32_t got = static_cast<uint32_t>(m) & want;
        if (got == 0)
            drop[static_cast<size_t>(hits[h].idx)] = true;
        else
            ev[hits[h].idx].events = got;
        if ((hits[h].interest & EPOLLONESHOT) && c) {
            if (got == 0) {
                // The kernel disarmed the eventfd that fired, but the program saw no
                // event (a wake-up the levels did not hold, e.g. the one written at the
                // switch; poll_mask has drained it): arm the registration again.
                arm_shadows(epfd, EPOLL_CTL_MOD, hits[h].interest, ev[hits[h].idx].data, *c);
            } else {
                // One event disables the whole registration, as the kernel does.
                epoll_event off{};
                RS_REAL(epoll_ctl)(epfd, EPOLL_CTL_MOD, c->rd_fd(), &off);
                RS_REAL(epoll_ctl)(epfd, EPOLL_CTL_MOD, c->wr_fd(), &off);
            }
        }
    }
    return compact(ev, n, drop);
}

// Registrations of sockets still deciding (maybe/verifying, on their TCP socket with the
// program's own data): the bytes that make such a socket readable may be the library's
// (the server's PROOF in its client's stream) rather than the program's.  An EPOLLIN
// whose data is one such registration's alone (no other registration of the set has
// it) is asked of its connection, as poll() asks (presw_gated, which takes the PROOF out
// if it is next): held back, the EPOLLIN goes; switched meanwhile, the event is the
// connection's mask (fixup then treats it as a shadow registration's).  An event the
// program does not see is given back: a one-shot registration armed again, an edge-
// triggered one marked, so that its TCP registration is made again (a new edge if
// readable) once the connection stays on TCP (on_decided_tcp).  Returns the new count.
int fixup_deciding(int epfd, epoll_event *ev, int n) noexcept
{
    if (rt::g_pending.load(std::memory_order_relaxed) == 0)
        return n;
    struct Hit {
        int idx, fd;
        epoll_event reg;  // the registration's events and data
        SocketRef s;
    };
    std::vector<Hit> hits;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        auto it = sets().find(epfd);
        if (it == sets().end() || it->second.tcp_by_data.empty())
            return n;
        const Set &set = it->second;
        for (int i = 0; i < n; ++i) {
            if (!(ev[i].events & EPOLLIN))
                continue;
            auto t = set.tcp_by_data.find(ev[i].data.u64);
            auto u = set.data_uses.find(ev[i].data.u64);
            if (t == set.tcp_by_data.end() || u == set.data_uses.end() || u->second != 1)
                continue;
            auto r = set.regs.find(t->second);
            if (r != set.regs.end() && !r->second.on_shadows)
                hits.push_back({i, t->second, {r->second.events, r->second.data}, fdt::get(t->second)});
        }
    }
    if (hits.empty())
        return n;
    std::vector<bool> drop(static_cast<size_t>(n), false);
    for (const Hit &h : hits) {
        Conn *c = conn_of(h.s);
        if (c == nullptr)
            continue;
        epoll_event &e = ev[h.idx];
        const int g = c->presw_gated(true);
        if (g > 0)
            e.events &= ~static_cast<uint32_t>(EPOLLIN | EPOLLRDNORM);
        else if (g < 0)
            e.events = c->poll_mask(h.fd) & ((h.reg.events & ~kFlags) | EPOLLERR | EPOLLHUP);
        if (e.events != 0)
            continue;
        drop[static_cast<size_t>(h.idx)] = true;
        if (!(h.reg.events & (EPOLLONESHOT | EPOLLET)))
            continue;  // (level-triggered: the kernel reports it again while it holds)
        std::lock_guard<std::mutex> lk(g_mu);
        auto it = sets().find(epfd);
        if (it == sets().end())
            continue;
        auto r = it->second.regs.find(h.fd);
        epoll_event again = h.reg;
        if (r != it->second.regs.end() && !r->second.on_shadows) {
            if (h.reg.events & EPOLLONESHOT)  // (the kernel disarmed it)
                RS_REAL(epoll_ctl)(epfd, EPOLL_CTL_MOD, h.fd, &again);
            else
                r->second.held = true;
        } else if (r == it->second.regs.end() && fdt::get(h.fd).get() == h.s.get()) {
            // On TCP for good meanwhile (presw_gated decided it): the kernel's
            // registration is the program's again, made again as it was.
            RS_REAL(epoll_ctl)(epfd, EPOLL_CTL_MOD, h.fd, &again);
        }
    }
    return compact(ev, n, drop);
}

// What the kernel returned for a set, fixed up: the deciding registrations' events first
// (one that switches there is a shadow registration's for fixup).
int settle(int epfd, epoll_event *ev, int n) noexcept { return fixup(epfd, ev, fixup_deciding(epfd, ev, n)); }

/* ---- the spin of poll, select and epoll ------------------------------------------------ */

// Busy-poll mode (RDMASOCK_BUSY_POLL_US): before a poll/select/epoll call that waits
// sleeps, it spins over its connections on RDMA (poll_mask polls a connection's
// completion queue), as a blocking call on one connection does (Conn::wait).  (The
// default mode's adaptive spin, RDMASOCK_SPIN_US, is a blocking call's only: measured
// with sockperf's epoll and poll ping-pongs in the VM it gained nothing, see
// docs/protocol.md, "Readiness".)
struct CallSpin {
    long budget_us = 0;  // 0: the call sleeps at once

    // (Not for a call with a signal mask, ppoll's or epoll_pwait's: the mask is only in
    // force during the kernel's wait, and a spin under the thread's own one would run
    // handlers the call's blocks, or hold back those it lets through.)
    explicit CallSpin(bool masked) noexcept : budget_us(masked ? 0 : rt::config().busy_poll_us) {}
    // `round()` again and again (it polls the call's connections once: > 0 something for
    // the call, 0 nothing, -1 an error with errno) for the budget, or until the call's
    // `deadline` (if `finite`), reading the clock once in 16 connections polled (as
    // waits::spin: a clock without a vDSO read costs a system call).  A signal handler
    // that runs meanwhile ends it with EINTR, as it would have ended the kernel's wait.
    // Returns the last round's result.
    template <class Round>
    int run(size_t conns, Clock::time_point deadline, bool finite, Round round) const noexcept
    {
        auto end = Clock::now() + std::chrono::microseconds(budget_us);
        if (finite && deadline < end)
            end = deadline;
        sig::clear_last();
        for (size_t polled = 0;; polled += conns) {
            if (int r = round())
                return r;
            if (sig::last() != 0) {
                sig::clear_last();
                errno = EINTR;
                return -1;
            }
            if (polled >= 16) {
                polled = 0;
                if (Clock::now() >= end)
                    return 0;
            }
        }
    }
};

// A spin over connections gives a connection's lock up to the threads waiting for it
// (the progress thread, another thread's call): a bounded number of yields, as
// waits::spin.
void give_way(const Conn &c) noexcept
{
    for (int i = 0; i < 64 && c.lock_wanted(); ++i)
        sched_yield();
}

// An epoll set's connections on RDMA, that its wait spins over and sleeps on: a
// registration on shadows, what it waits for, and what the spin has seen give no event
// (an edge-triggered registration's level, a one-shot one not armed again: the spin
// looks at the set for it only once it changes).  (Weak: a connection another thread
// closes meanwhile goes, whatever this thread's wait.)
struct SpinTarget {
    std::weak_ptr<Conn> c;
    int fd;
    unsigned want, now = 0, quiet = 0;
};
// (More connections than this make each round of a spin, and each sleep's poll(), too
// long: a bigger set sleeps on itself alone, woken through the progress thread.)
constexpr size_t kSpinConns = 32;
thread_local std::vector<SpinTarget> t_targets;
thread_local bool t_in_epoll = false;  // (a signal handler's epoll_wait does not use t_targets)

// The registrations of set `epfd` on the shadows of connections on RDMA, into
// t_targets, and this thread counted as the set's direct sleeper (false: none, too many,
// or another thread sleeps on the set directly: poll() on an epoll descriptor wakes
// every thread that polls it, where the kernel's epoll_wait wakes one, so a pool of
// threads that share a set keeps the kernel's wait).
bool spin_targets(int epfd) noexcept
{
    t_targets.clear();
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = sets().find(epfd);
    if (it == sets().end() || it->second.direct > 0 || it->second.by_data.empty() ||
        it->second.by_data.size() > kSpinConns)
        return false;
    // (Weak references: nothing is destroyed under g_mu.  A connection that has left
    // RDMA meanwhile is polled as any (poll_mask), and its channel is -1 once it has
    // none.)
    for (auto &kv : it->second.regs)
        if (kv.second.on_shadows)
            t_targets.push_back({kv.second.conn, kv.first, (kv.second.events & ~kFlags) | EPOLLERR | EPOLLHUP});
    if (t_targets.empty())
        return false;
    ++it->second.direct;
    return true;
}

// This thread's direct sleep on set `epfd` ends.
void end_direct(int epfd) noexcept
{
    t_targets.clear();
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = sets().find(epfd);  // (gone if the set was closed meanwhile)
    if (it != sets().end() && it->second.direct > 0)
        --it->second.direct;
}

// One round of an epoll set's spin: its connections polled (which brings their eventfds
// up to date); when one has something new for its registration, and every 64 rounds for
// the set's kernel descriptors, the set itself (the kernel's wait without a timeout).
template <class Wait>
int epoll_round(int epfd, epoll_event *ev, Wait &wait, unsigned round) noexcept
{
    bool fresh = false;
    for (auto &t : t_targets) {
        std::shared_ptr<Conn> c = t.c.lock();
        t.now = c != nullptr ? c->poll_mask(t.fd) & t.want : 0;
        t.quiet &= t.now;
        fresh = fresh || (t.now & ~t.quiet) != 0;
        if (c != nullptr)
            give_way(*c);
    }
    if (fresh || round % 64 == 0) {
        int n = wait(0);
        if (n > 0)
            n = settle(epfd, ev, n);
        if (n != 0)
            return n;
        for (auto &t : t_targets)
            t.quiet = t.now;
    }
    return 0;
}

// Sleep on set `epfd` (poll() says when it has events) and on the completion channels of
// its connections in t_targets: a completion wakes this thread, which takes it in (that
// brings the connection's eventfds up to date, and the set's events with them), rather
// than waking the progress thread first, which would wake this one (poll() and a
// blocking call on one connection sleep on the channel as well).  The channel numbers
// are read again at each sleep (-1 once a channel is gone).  1: woken; 0: timed out;
// -1 with errno (EINTR: a signal).
int sleep_direct(int epfd, int tmo, const sigset_t *mask) noexcept
{
    static thread_local std::vector<pollfd> p;
    p.clear();
    p.push_back({epfd, POLLIN, 0});
    for (auto &t : t_targets) {
        std::shared_ptr<Conn> c = t.c.lock();
        p.push_back({c != nullptr ? c->comp_fd() : -1, POLLIN, 0});
    }
    int r;
    if (mask != nullptr) {
        timespec ts{tmo / 1000, (tmo % 1000) * 1000000L};
        r = RS_REAL(ppoll)(p.data(), p.size(), tmo < 0 ? nullptr : &ts, mask);
    } else {
        r = RS_REAL(poll)(p.data(), p.size(), tmo);
    }
    if (r <= 0)
        return r;
    for (size_t i = 1; i < p.size(); ++i)
        if (p[i].revents & POLLIN)
            if (std::shared_ptr<Conn> c = t_targets[i - 1].c.lock())
                c->on_completion_event();
    return 1;
}

// epoll_wait and its variants, for a set that may hold registrations on shadows.  A set
// with at most kSpinConns connections on RDMA among them spins (CallSpin) and sleeps on
// their completion channels too (sleep_direct); a bigger one sleeps on the set alone, its
// eventfds kept current by the progress thread.  `mask`: epoll_pwait's.
// The kernel's wait (`call`, with a timeout of `timeout_ns`, < 0 for none), for a time no
// registration is on shadows.  Its events need the fix-up if a connection of the set is
// deciding (fixup_deciding), or has switched meanwhile (on_switch_to_rdma: its
// registration is then on its shadows, and the wake-up the switch writes only says
// "look").  True with the count to give back in *n; false when the fix-up left no event
// and time is left: the call waits on for *left_ms (-1: no timeout).  (The clock only
// for a set that holds registrations of ours: another one drops no event but after a
// registration made during the wait, and then waits its whole time again.)
template <class Call>
bool kernel_wait(int epfd, epoll_event *ev, long long timeout_ns, Call call, int *n, int *left_ms) noexcept
{
    const bool timed = timeout_ns > 0 && marked(epfd);
    const auto t0 = timed ? Clock::now() : Clock::time_point{};
    *n = call();
    if (*n <= 0 || !marked(epfd) ||
        (g_shadow_regs.load(std::memory_order_acquire) == 0 && rt::g_pending.load(std::memory_order_relaxed) == 0))
        return true;
    if ((*n = settle(epfd, ev, *n)) != 0 || timeout_ns == 0)
        return true;
    const long long whole_ms = timeout_ns < 0 ? -1 : std::min<long long>((timeout_ns + 999'999) / 1'000'000, INT_MAX);
    *left_ms = timed ? waits::ms_until(t0 + std::chrono::nanoseconds(timeout_ns) + std::chrono::microseconds(999))
                     : static_cast<int>(whole_ms);
    return *left_ms == 0;  // (*n is 0)
}

template <class Wait>
int epoll_loop(int epfd, epoll_event *ev, int timeout_ms, const sigset_t *mask, Wait &&wait) noexcept
{
    if (g_shadow_regs.load(std::memory_order_relaxed) == 0) {
        int n = 0;
        if (kernel_wait(epfd, ev, timeout_ms < 0 ? -1 : timeout_ms * 1'000'000LL, [&] { return wait(timeout_ms); }, &n,
                        &timeout_ms))
            return n;
    }
    const bool infinite = timeout_ms < 0;
    const auto deadline = Clock::now() + std::chrono::milliseconds(infinite ? 0 : timeout_ms);
    const bool direct = timeout_ms != 0 && !t_in_epoll && spin_targets(epfd);
    struct Direct {
        int epfd;
        bool on;
        ~Direct()
        {
            if (on) {
                end_direct(epfd);
                t_in_epoll = false;
            }
        }
    } guard{epfd, direct};
    if (direct)
        t_in_epoll = true;
    const CallSpin spin(mask != nullptr);
    if (direct) {
        // What the set has already comes back at once (a busy loop's every call);
        // otherwise the spin, then the sleep.
        int n = wait(0);
        if (n > 0)
            n = settle(epfd, ev, n);
        if (n != 0)
            return n;
        if (spin.budget_us > 0) {
            unsigned round = 0;
            n = spin.run(t_targets.size(), deadline, !infinite, [&] { return epoll_round(epfd, ev, wait, ++round); });
            if (n != 0)
                return n;
        }
    }
    for (;;) {
        int n;
        if (direct) {
            // (The time left rounded up: poll's timeout never ends before the call's.)
            n = sleep_direct(epfd, infinite ? -1 : waits::ms_until(deadline + std::chrono::microseconds(999)), mask);
            if (n > 0)
                n = wait(0);
            else if (n == 0)
                return 0;
        } else {
            n = wait(ms_left(deadline, infinite));
            if (n == 0)
                return 0;
        }
        if (n < 0)
            return n;
        n = settle(epfd, ev, n);
        if (n > 0 || (!infinite && Clock::now() >= deadline))
            return n;
    }
}

// poll() over a mix of kernel fds and offloaded sockets.
int poll_mixed(pollfd *fds, nfds_t nfds, int timeout_ms, const sigset_t *mask, bool use_mask) noexcept
{
    struct Map {
        int kind;  // 0 kernel, 1 offloaded
        size_t first, count;
        SocketRef s;
        long comp = -1;  // index of the connection's completion channel in k
    };
    std::vector<Map> map(nfds);
    std::vector<pollfd> k;
    k.reserve(nfds * 2 + 1);
    bool any = false;
    bool rdma = false;  // an offloaded socket on RDMA among them (kind 1)
    bool asked = false;  // (a fork child's copies: every one asked for before any is waited for)
    for (nfds_t i = 0; i < nfds; ++i) {
        SocketRef s = fds[i].fd >= 0 && fdt::offloaded(fds[i].fd) ? fdt::get(fds[i].fd) : SocketRef();
        if (!asked && conn_of(s) != nullptr && conn_of(s)->is_copy()) {
            asked = true;
            for (nfds_t j = i; j < nfds; ++j)
                if (Conn *o = fds[j].fd >= 0 ? conn_of(fdt::get(fds[j].fd)) : nullptr)
                    o->ask_copy();
        }
        Conn *c = claimed_copy(conn_of(s));
        if (c && c->phase() == Conn::Phase::rdma) {
            c->begin_wait();  // the eventfds we sleep on must be current, and stay so
            map[i] = {1, k.size(), 0, s};
            if (fds[i].events & (POLLIN | POLLRDHUP | POLLPRI)) {
                k.push_back({c->rd_fd(), POLLIN, 0});
                k.push_back({c->tcp_fd(), POLLIN, 0});  // pre-switch bytes, TCP EOF
            }
            if (fds[i].events & POLLOUT)
                k.push_back({c->wr_fd(), POLLOUT, 0});
            // Wake on the completion itself rather than through the progress thread.
            if (c->comp_fd() >= 0) {
                map[i].comp = static_cast<long>(k.size());
                k.push_back({c->comp_fd(), POLLIN, 0});
            }
            map[i].count = k.size() - map[i].first;
            any = rdma = true;
        } else if (c) {
            // A server socket still deciding (maybe/verifying): the kernel's TCP
            // readiness for now, plus its eventfd, written when it switches to RDMA.
            if (fds[i].events & (POLLIN | POLLRDHUP | POLLPRI | POLLOUT))
                c->note_interest();
            map[i] = {2, k.size(), 2, s};
            k.push_back(fds[i]);
            k.push_back({c->rd_fd(), POLLIN, 0});
            any = true;
        } else {
            map[i] = {0, k.size(), 1, SocketRef()};
            k.push_back(fds[i]);
        }
    }
    if (!any) {
        if (use_mask) {
            timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
            return RS_REAL(ppoll)(fds, nfds, timeout_ms < 0 ? nullptr : &ts, mask);
        }
        return RS_REAL(poll)(fds, nfds, timeout_ms);
    }
    struct EndWait {
        std::vector<Map> &m;
        ~EndWait()
        {
            for (auto &x : m)
                if (x.kind == 1)
                    conn_of(x.s)->end_wait();
        }
    } end_wait{map};
    const bool infinite = timeout_ms < 0;
    const auto deadline = Clock::now() + std::chrono::milliseconds(infinite ? 0 : timeout_ms);
    bool first = true;
    const CallSpin spin(use_mask);
    for (;;) {
        // Offloaded sockets first: if one is ready, the kernel part is only sampled.
        int ready = 0;
        for (nfds_t i = 0; i < nfds; ++i) {
            fds[i].revents = 0;
            if (map[i].kind != 1)
                continue;
            unsigned m = conn_of(map[i].s)->poll_mask(fds[i].fd);
            fds[i].revents = static_cast<short>(m & (static_cast<unsigned>(fds[i].events) | POLLERR | POLLHUP));
            if (fds[i].revents)
                ++ready;
        }
        // Sockets still deciding: a server holding TCP bytes back until the client's
        // SWITCH is not readable (its TCP socket may be: those bytes are not ours to
        // deliver yet); one that switched meanwhile starts over with its eventfds.
        bool deciding = false;
        for (nfds_t i = 0; i < nfds; ++i) {
            if (map[i].kind != 2)
                continue;
            deciding = true;
            int g = conn_of(map[i].s)->presw_gated();
            if (g < 0)
                return poll_mixed(fds, nfds, ms_left(deadline, infinite), mask, use_mask);
            // (-1 once it is on TCP for good and its eventfds are closed: poll skips it.)
            k[map[i].first + 1].fd = conn_of(map[i].s)->rd_fd();
            k[map[i].first].events = g ? static_cast<short>(fds[i].events & ~POLLIN) : fds[i].events;
        }
        int tmo = ready ? 0 : ms_left(deadline, infinite);
        // A socket may switch to RDMA while we sleep: look again at least every 50 ms.
        if (deciding && (tmo < 0 || tmo > 50))
            tmo = 50;
        // The spin (CallSpin) on the offloaded sockets on RDMA before a sleep (sockets
        // still deciding have no queue to poll); the kernel's descriptors are looked at
        // after it.
        if (!ready && tmo != 0 && rdma && spin.budget_us > 0) {
            const size_t on_rdma = static_cast<size_t>(
                std::count_if(map.begin(), map.end(), [](const Map &x) { return x.kind == 1; }));
            const int r = spin.run(on_rdma, deadline, !infinite, [&] {
                for (nfds_t i = 0; i < nfds; ++i) {
                    if (map[i].kind != 1)
                        continue;
                    Conn *c = conn_of(map[i].s);
                    unsigned m = c->poll_mask(fds[i].fd);
                    fds[i].revents = static_cast<short>(m & (static_cast<unsigned>(fds[i].events) | POLLERR | POLLHUP));
                    if (fds[i].revents)
                        ++ready;
                    give_way(*c);
                }
                return ready;
            });
            if (r < 0)
                return r;
            if (ready)
                tmo = 0;
        }
        for (auto &p : k)
            p.revents = 0;
        int r;
        if (use_mask && first) {
            timespec ts{tmo / 1000, (tmo % 1000) * 1000000L};
            r = RS_REAL(ppoll)(k.data(), k.size(), tmo < 0 ? nullptr : &ts, mask);
        } else {
            r = RS_REAL(poll)(k.data(), k.size(), tmo);
        }
        first = false;
        if (r < 0)
            return r;
        for (nfds_t i = 0; i < nfds; ++i)
            if (map[i].kind == 1 && map[i].comp >= 0 && (k[static_cast<size_t>(map[i].comp)].revents & POLLIN))
                conn_of(map[i].s)->on_completion_event();
        for (nfds_t i = 0; i < nfds; ++i) {
            if (map[i].kind != 2)
                continue;
            // It switched, or its TCP input is (now) only the CONFIRM or bytes held back:
            // start over with its eventfds, or it is not readable.
            int g = (k[map[i].first].revents & POLLIN) ? conn_of(map[i].s)->presw_gated(true) : 0;
            if (g < 0 || conn_of(map[i].s)->phase() == Conn::Phase::rdma) {
                int left = ms_left(deadline, infinite);
                return poll_mixed(fds, nfds, left, mask, use_mask);
            }
            if (g > 0)
                k[map[i].first].revents = static_cast<short>(k[map[i].first].revents & ~POLLIN);
        }
        for (nfds_t i = 0; i < nfds; ++i) {
            if (map[i].kind == 0 || map[i].kind == 2) {
                fds[i].revents = k[map[i].first].revents;
                if (fds[i].revents)
                    ++ready;
            } else if (!fds[i].revents) {
                unsigned m = conn_of(map[i].s)->poll_mask(fds[i].fd);
                fds[i].revents = static_cast<short>(m & (static_cast<unsigned>(fds[i].events) | POLLERR | POLLHUP));
                if (fds[i].revents)
                    ++ready;
            }
        }
        if (ready > 0 || (!infinite && Clock::now() >= deadline))
            return ready;
    }
}

bool any_offloaded() noexcept
{
    return rt::g_offloaded.load(std::memory_order_relaxed) != 0 ||
           rt::g_pending.load(std::memory_order_relaxed) != 0;
}

int select_mixed(int nfds, fd_set *r, fd_set *w, fd_set *e, int timeout_ms, const sigset_t *mask,
                 bool use_mask) noexcept
{
    if (nfds < 0 || nfds > FD_SETSIZE) {
        errno = EINVAL;
        return -1;
    }
    std::vector<pollfd> p;
    for (int fd = 0; fd < nfds; ++fd) {
        short ev = 0;
        if (r && FD_ISSET(fd, r))
            ev |= POLLIN;
        if (w && FD_ISSET(fd, w))
            ev |= POLLOUT;
        if (e && FD_ISSET(fd, e))
            ev |= POLLPRI;
        if (ev)
            p.push_back({fd, ev, 0});
    }
    int n = poll_mixed(p.data(), p.size(), timeout_ms, mask, use_mask);
    if (n < 0)
        return n;
    for (auto &x : p)
        if (x.revents & POLLNVAL) {
            errno = EBADF;
            return -1;
        }
    if (r)
        FD_ZERO(r);
    if (w)
        FD_ZERO(w);
    if (e)
        FD_ZERO(e);
    int count = 0;
    for (auto &x : p) {
        if (r && (x.revents & (POLLIN | POLLHUP | POLLERR)) && (x.events & POLLIN)) {
            FD_SET(x.fd, r);
            ++count;
        }
        if (w && (x.revents & (POLLOUT | POLLERR)) && (x.events & POLLOUT)) {
            FD_SET(x.fd, w);
            ++count;
        }
        if (e && (x.revents & POLLPRI) && (x.events & POLLPRI)) {
            FD_SET(x.fd, e);
            ++count;
        }
    }
    return count;
}

int to_ms(const timespec *ts) noexcept
{
    if (ts == nullptr)
        return -1;
    long long ms = ts->tv_sec * 1000LL + (ts->tv_nsec + 999999) / 1000000;
    return ms > 0x7fffffff ? 0x7fffffff : static_cast<int>(ms);
}

}  // namespace

int poll(pollfd *fds, nfds_t nfds, int timeout_ms) noexcept
{
    if (!any_offloaded())
        return RS_REAL(poll)(fds, nfds, timeout_ms);
    return poll_mixed(fds, nfds, timeout_ms, nullptr, false);
}

int ppoll(pollfd *fds, nfds_t nfds, const timespec *tmo, const sigset_t *mask) noexcept
{
    if (!any_offloaded())
        return RS_REAL(ppoll)(fds, nfds, tmo, mask);
    return poll_mixed(fds, nfds, to_ms(tmo), mask, true);
}

int select(int nfds, fd_set *r, fd_set *w, fd_set *e, timeval *tmo) noexcept
{
    if (!any_offloaded())
        return RS_REAL(select)(nfds, r, w, e, tmo);
    int ms = tmo ? static_cast<int>(tmo->tv_sec * 1000 + (tmo->tv_usec + 999) / 1000) : -1;
    auto start = Clock::now();
    int n = select_mixed(nfds, r, w, e, ms, nullptr, false);
    if (tmo) {  // Linux updates the timeout with the time not slept
        long long used = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
        long long left = tmo->tv_sec * 1000000LL + tmo->tv_usec - used;
        if (left < 0)
            left = 0;
        tmo->tv_sec = left / 1000000;
        tmo->tv_usec = left % 1000000;
    }
    return n;
}

int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const timespec *tmo, const sigset_t *mask) noexcept
{
    if (!any_offloaded())
        return RS_REAL(pselect)(nfds, r, w, e, tmo, mask);
    return select_mixed(nfds, r, w, e, to_ms(tmo), mask, true);
}

namespace {
// A maybe-phase server socket registered for input: noted after g_mu is released.
thread_local Conn *pending_interest = nullptr;
int epoll_ctl_locked(int epfd, int op, int fd, epoll_event *ev, Conn *c) noexcept;
}

int epoll_ctl(int epfd, int op, int fd, epoll_event *ev) noexcept
{
    SocketRef s = fdt::get(fd);
    Conn *c = op != EPOLL_CTL_DEL ? claimed_copy(conn_of(s)) : conn_of(s);
    if (s && s->role == Role::listener && s->offloaded() && op != EPOLL_CTL_DEL) {
        const int e = errno;
        offload::listener_used(*s);  // (a fork child's first use of an inherited listener: offload.hh)
        errno = e;
    }
    if (c == nullptr || !s->offloaded())
        return RS_REAL(epoll_ctl)(epfd, op, fd, ev);
    int r;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        r = epoll_ctl_locked(epfd, op, fd, ev, c);
    }
    int e = errno;
    if (r == 0 && op != EPOLL_CTL_DEL && c->phase() == Conn::Phase::rdma)
        c->sync_shadows();  // the new registration sees the current state
    if (pending_interest != nullptr) {
        pending_interest = nullptr;
        if (r == 0)
            c->note_interest();
    }
    errno = e;
    return r;
}

namespace {
int epoll_ctl_locked(int epfd, int op, int fd, epoll_event *ev, Conn *c) noexcept
{
    Set &set = sets()[epfd];
    if (set.regs.empty() && set.by_data.empty())
        g_sets_count.fetch_add(1, std::memory_order_relaxed);
    mark(epfd);
    mark(fd);
    auto it = set.regs.find(fd);
    const bool shadows = c->phase() == Conn::Phase::rdma;
    int r = 0;
    switch (op) {
    case EPOLL_CTL_ADD: {
        if (it != set.regs.end()) {
            errno = EEXIST;
            return -1;
        }
        if (ev == nullptr) {
            errno = EFAULT;
            return -1;
        }
        Reg reg;
        reg.events = ev->events;
        reg.data = ev->data;
        if (ev->events & (EPOLLIN | EPOLLRDHUP | EPOLLPRI | EPOLLOUT))
            pending_interest = c;
        if (!shadows) {
            if (RS_REAL(epoll_ctl)(epfd, op, fd, ev) != 0)
                return -1;
        } else {
            // Validate epfd and the operation against the kernel with the TCP fd first,
            // then move the registration onto the shadows.
            if (RS_REAL(epoll_ctl)(epfd, EPOLL_CTL_ADD, fd, ev) != 0)
                return -1;
            RS_REAL(epoll_ctl)(epfd, EPOLL_CTL_DEL, fd, nullptr);
            if ((r = add_shadows(epfd, set, fd, reg, *c)) != 0) {
                errno = -r;
                return -1;
            }
        }
        set.regs[fd] = reg;
        index_reg(set, fd, reg, +1);
        return 0;
    }
    case EPOLL_CTL_MOD:
        if (it == set.regs.end()) {
            errno = ENOENT;
            return -1;
        }
        if (ev == nullptr) {
            errno = EFAULT;
            return -1;
        }
        if (!it->second.on_shadows) {
            if (RS_REAL(epoll_ctl)(epfd, op, fd, ev) != 0)
                return -1;
            if (ev->events & (EPOLLIN | EPOLLRDHUP | EPOLLPRI | EPOLLOUT))
                pending_interest = c;
            index_reg(set, fd, it->second, -1);
            it->second.events = ev->events;
            it->second.data = ev->data;
            it->second.held = false;
            index_reg(set, fd, it->second, +1);
            return 0;
        }
        // As the kernel: an EPOLLEXCLUSIVE registration cannot be modified, nor can
        // EPOLLEXCLUSIVE be set by a MOD (EINVAL).
        if ((it->second.events | ev->events) & EPOLLEXCLUSIVE) {
            errno = EINVAL;
            return -1;
        }
        index_reg(set, fd, it->second, -1);
        del_shadows(epfd, set, it->second);
        it->second.events = ev->events;
        it->second.data = ev->data;
        r = add_shadows(epfd, set, fd, it->second, *c);
        index_reg(set, fd, it->second, +1);
        if (r != 0) {
            errno = -r;
            return -1;
        }
        return 0;
    case EPOLL_CTL_DEL:
        if (it == set.regs.end()) {
            errno = ENOENT;
            return -1;
        }
        index_reg(set, fd, it->second, -1);
        if (it->second.on_shadows)
            del_shadows(epfd, set, it->second);
        else
            RS_REAL(epoll_ctl)(epfd, op, fd, ev);
        set.regs.erase(it);
        return 0;
    default:
        errno = EINVAL;
        return -1;
    }
}
}  // namespace

int epoll_wait(int epfd, epoll_event *ev, int maxev, int timeout_ms) noexcept
{
    return epoll_loop(epfd, ev, timeout_ms, nullptr, [&](int t) { return RS_REAL(epoll_wait)(epfd, ev, maxev, t); });
}

int epoll_pwait(int epfd, epoll_event *ev, int maxev, int timeout_ms, const sigset_t *mask) noexcept
{
    return epoll_loop(epfd, ev, timeout_ms, mask,
                      [&](int t) { return RS_REAL(epoll_pwait)(epfd, ev, maxev, t, mask); });
}

int epoll_pwait2(int epfd, epoll_event *ev, int maxev, const timespec *tmo, const sigset_t *mask) noexcept
{
    auto wait = [&](int t) {
        timespec ts{t / 1000, (t % 1000) * 1000000L};
        return RS_REAL(epoll_pwait2)(epfd, ev, maxev, t < 0 ? nullptr : &ts, mask);
    };
    if (g_shadow_regs.load(std::memory_order_relaxed) != 0)
        return epoll_loop(epfd, ev, to_ms(tmo), mask, wait);
    // The kernel's wait, with its own timeout's precision.
    const long long ns = tmo == nullptr ? -1 : tmo->tv_sec * 1'000'000'000LL + tmo->tv_nsec;
    int n = 0, left = -1;
    if (kernel_wait(epfd, ev, ns, [&] { return RS_REAL(epoll_pwait2)(epfd, ev, maxev, tmo, mask); }, &n, &left))
        return n;
    return epoll_loop(epfd, ev, left, mask, wait);
}

void on_switch_to_rdma(int fd, Conn &c) noexcept
{
    std::lock_guard<std::mutex> lk(g_mu);
    for (auto &kv : sets()) {
        auto it = kv.second.regs.find(fd);
        if (it == kv.second.regs.end() || it->second.on_shadows)
            continue;
        RS_REAL(epoll_ctl)(kv.first, EPOLL_CTL_DEL, fd, nullptr);
        index_reg(kv.second, fd, it->second, -1);
        add_shadows(kv.first, kv.second, fd, it->second, c);
        index_reg(kv.second, fd, it->second, +1);
    }
}

void on_decided_tcp(int fd) noexcept
{
    // The registrations stay with the kernel on the TCP fd; we only forget them (one
    // whose edge was held back made again: the kernel reports it anew if it holds).
    std::lock_guard<std::mutex> lk(g_mu);
    for (auto &kv : sets()) {
        auto it = kv.second.regs.find(fd);
        if (it == kv.second.regs.end())
            continue;
        if (it->second.held && !it->second.on_shadows) {
            epoll_event again{it->second.events, it->second.data};
            RS_REAL(epoll_ctl)(kv.first, EPOLL_CTL_MOD, fd, &again);
        }
        index_reg(kv.second, fd, it->second, -1);
        kv.second.regs.erase(it);
    }
}

void lock_for_fork() noexcept { g_mu.lock(); }
void unlock_after_fork() noexcept { g_mu.unlock(); }

void after_fork_child() noexcept
{
    std::lock_guard<std::mutex> lk(g_mu);
    for (auto &kv : sets())
        for (auto &r : kv.second.regs)
            r.second.inherited = true;
}

void on_close(int fd) noexcept
{
    if (fd < 0 || !marked(fd))
        return;
    on_close_range(static_cast<unsigned>(fd), static_cast<unsigned>(fd));
}

void on_close_range(unsigned first, unsigned last) noexcept
{
    if (g_sets_count.load(std::memory_order_relaxed) == 0 || first > static_cast<unsigned>(INT_MAX))
        return;
    const int lo = static_cast<int>(first);
    const int hi = last > static_cast<unsigned>(INT_MAX) ? INT_MAX : static_cast<int>(last);
    std::lock_guard<std::mutex> lk(g_mu);
    auto &all = sets();
    // epoll fds holding registrations: their registrations are forgotten, not deleted
    // (a fork child's close leaves its parent's set as it is, as the kernel does)
    for (auto own = all.lower_bound(lo); own != all.end() && own->first <= hi;) {
        for (auto &kv : own->second.regs)
            del_shadows(own->first, own->second, kv.second, false);
        own = all.erase(own);
        g_sets_count.fetch_sub(1, std::memory_order_relaxed);
    }
    // Registrations of closed sockets: the kernel drops one when the socket's last
    // descriptor goes; a fork child's close leaves its parent's (the parent holds it).
    // One on the socket itself is deleted here too when this is its last number: the
    // library may hold a duplicate of it a while (a closed connection's last bytes),
    // which would keep the registration reporting, under a number since reused.
    for (auto &kv : all) {
        auto &regs = kv.second.regs;
        for (auto it = regs.lower_bound(lo); it != regs.end() && it->first <= hi;) {
            if (!it->second.on_shadows && !it->second.inherited) {
                SocketRef s = fdt::get(it->first);
                if (conn_of(s) != nullptr && s->fds() == 1)
                    RS_REAL(epoll_ctl)(kv.first, EPOLL_CTL_DEL, it->first, nullptr);
            }
            index_reg(kv.second, it->first, it->second, -1);
            del_shadows(kv.first, kv.second, it->second, !it->second.inherited);
            it = regs.erase(it);
        }
    }
    unmark_range(lo, hi);  // (nothing of these numbers is left here)
}

}  // namespace rdmasock::readiness
