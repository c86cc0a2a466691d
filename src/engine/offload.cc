#include "engine/offload.hh"

#include "engine/engine.hh"

#include <arpa/inet.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <memory>
#include <mutex>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <string>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "config.h"
#include "base/copy.hh"
#include "base/fd.hh"
#include "base/log.hh"
#include "base/real.hh"
#include "base/uring.hh"
#include "conn/rdma_conn.hh"
#include "conn/windows.hh"
#include "engine/peers.hh"
#include "engine/readiness.hh"
#include "process/fd_table.hh"
#include "process/runtime.hh"
#include "rdma/device_maps.hh"
#include "rdma/dl.hh"
#include "rdma/kit.hh"
#include "rdma/owners.hh"
#include "wire/negotiate.hh"

namespace rdmasock::offload {


namespace {

// The Upcalls every Conn the engine makes is given.
class EngineUpcalls final : public Upcalls {
public:
    void interest(Conn &c) noexcept override { offload::interest(c); }
    void release_rdma(Conn &c) noexcept override { offload::release_rdma(c); }
    void retire(Conn &c) noexcept override { offload::retire(c); }
    void set_comp_watch(Conn &c, bool on) noexcept override { offload::set_comp_watch(c, on); }
    void watch_tcp_out(Conn &c, bool on) noexcept override { offload::watch_tcp_out(c, on); }
    void move_tcp_watch(Conn &c, int from, int to) noexcept override { offload::move_tcp_watch(c, from, to); }
    void switched_to_rdma(int fd, Conn &c) noexcept override { readiness::on_switch_to_rdma(fd, c); }
    void decided_tcp(int fd) noexcept override { readiness::on_decided_tcp(fd); }
    void timer_set(Conn &) noexcept override
    {
        if (Engine *e = g_engine)
            e->wake();
    }
};
EngineUpcalls g_upcalls;

}  // namespace

Upcalls &upcalls() noexcept { return g_upcalls; }

Key make_key(const sockaddr *client, const sockaddr *server) noexcept
{
    Key k{};
    uint8_t f1 = 0, f2 = 0;
    put_addr(k.data() + 1, client, &f1);
    put_addr(k.data() + 19, server, &f2);
    k[0] = f1;
    return k;
}


// The queue pair's local ACK timeout: 4.096 us * 2^18 ~ 1 s per try, 7 tries.  Under a
// loaded machine (or software RoCE under emulation) the default (~67 ms) lets a slow
// but alive peer look dead; a dead peer is detected through its TCP connection anyway.
void set_ack_timeout(rdma_cm_id *id) noexcept
{
    uint8_t t = 18;
    rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof t);
}

std::atomic<Engine *> g_engine{nullptr};
std::mutex g_start_mu;
bool g_fork_reloads = false;  // a fork child of a process that had loaded rdma-core

namespace {
bool take_over(Socket &ls, bool now = false) noexcept;  // (below, with on_accept)
}  // namespace

// How often the engine looks for a parked request's connection in its listener's table
// (another process of the group accepting it) while the request waits.
constexpr int kRegistryPollMs = 5;
// The largest receive ring of a peer we accept to mirror with a send staging ring of the
// same size: our own ring size, at least 4 MiB.  A bigger one (a peer configured very
// differently, or a third party making us pin memory) is declined with `limit`.
unsigned max_peer_ring_log2() noexcept
{
    unsigned own = ring_log2();
    return own > 22 ? own : 22;
}

Engine *engine() noexcept
{
    Engine *e = g_engine.load(std::memory_order_acquire);
    if (e != nullptr && e->running())
        return e;
    std::lock_guard<std::mutex> lk(g_start_mu);
    e = g_engine.load(std::memory_order_relaxed);
    if (e == nullptr) {
        e = new (std::nothrow) Engine();
        g_engine.store(e, std::memory_order_release);
    }
    if (e == nullptr || (!e->running() && !e->start())) {
        // A fork child that cannot load a copy of rdma-core of its own (dlmopen): its
        // connections stay on TCP, and say why.
        if (g_fork_reloads && !rdma::dl::loaded())
            rt::no_rdma_in_fork_child();
        return nullptr;
    }
    return e;
}

void Engine::watch_holder(pid_t p) noexcept
{
    // mu held.
    if (holder_fds_.count(p) != 0)
        return;
    const int fd = util::make_high([p] { return static_cast<int>(syscall(SYS_pidfd_open, p, 0)); });
    if (fd < 0) {
        holder_poll_ = true;  // (before Linux 5.3, or not allowed: look every second)
        next_holder_poll_ = Clock::now() + Ms(1000);
        wake();
        return;
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLONESHOT;
    ev.data.u64 = reinterpret_cast<uint64_t>(&holder_fds_) | kCmd;
    RS_REAL(epoll_ctl)(ep_, EPOLL_CTL_ADD, fd, &ev);
    holder_fds_[p] = fd;
}

namespace {
// librdmacm's once-per-process set-up of route resolution (ibacm): a query for nothing
// that needs no route.
void prime_route_resolution() noexcept
{
    rdma_addrinfo hints{}, *res = nullptr;
    sockaddr_in lo{};
    lo.sin_family = AF_INET;
    lo.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    hints.ai_flags = RAI_NOROUTE | RAI_NUMERICHOST;
    hints.ai_family = AF_INET;
    hints.ai_port_space = RDMA_PS_TCP;
    hints.ai_dst_addr = reinterpret_cast<sockaddr *>(&lo);
    hints.ai_dst_len = sizeof lo;
    if (rdma_getaddrinfo(nullptr, nullptr, &hints, &res) == 0)
        rdma_freeaddrinfo(res);
}
}  // namespace

void Engine::prepare() noexcept
{
    for (const auto &d : devices_)
        kits::prepare_channels(d);
}

namespace {
int (*g_report_open)() noexcept = nullptr;
void (*g_report_answer)(int) noexcept = nullptr;
}  // namespace

void set_report(int (*open)() noexcept, void (*answer)(int fd) noexcept) noexcept
{
    g_report_open = open;
    g_report_answer = answer;
}

void Engine::close_inherited() noexcept
{
    util::close_own(ep_);
    util::close_own(cmd_efd_);
    if (report_fd_ >= 0)
        util::close_own(report_fd_);
    ep_ = cmd_efd_ = report_fd_ = -1;
    for (const Own &o : own)  // (the ports of the parent's own listeners)
        util::close_own(o.reserve_fd);
    for (const auto &kv : holder_fds_)
        util::close_own(kv.second);
}

namespace {
// The info-level start line (rdmasock(7), LOGGING): what this process's engine found.
void log_start(const std::vector<std::shared_ptr<rdma::Context>> &devices) noexcept
{
    std::string ports;
    try {
        for (const auto &d : devices) {
            ibv_device_attr attr{};
            if (ibv_query_device(d->get(), &attr) != 0)
                continue;
            for (uint8_t port = 1; port <= attr.phys_port_cnt; ++port) {
                ibv_port_attr pa{};
                const bool up = ibv_query_port(d->get(), port, &pa) == 0 && pa.state == IBV_PORT_ACTIVE;
                ports += (ports.empty() ? "" : ",") + std::string(ibv_get_device_name(d->get()->device)) + ":" +
                         std::to_string(port) + (up ? ":active" : ":down");
            }
        }
    } catch (...) {
    }
    rlimit rl{};
    char memlock[32] = "unknown";
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY)
            snprintf(memlock, sizeof memlock, "unlimited");
        else
            snprintf(memlock, sizeof memlock, "%llu", static_cast<unsigned long long>(rl.rlim_cur / 1024));
    }
    log::write(log::kInfo, "event=start version=%s program=%s ports=%s ring_kb=%lu memlock_kb=%s connect_wait=%d",
               PACKAGE_VERSION, program_invocation_short_name, ports.empty() ? "none" : ports.c_str(),
               (1ul << ring_log2()) / 1024, memlock, rt::config().connect_wait ? 1 : 0);
}
}  // namespace

bool Engine::start() noexcept
{
    // Loading rdma-core and opening the devices make descriptors of their own, some only
    // for a moment (util::FdGate).
    util::FdGate making(util::FdGate::making);
    if (!rdma::dl::load())  // rdma-core, from the first connection that may be offloaded
        return false;
    int err = 0;
    cm_ = rdma::CmChannel::create(&err);
    if (!cm_ || cm_->set_nonblocking() != 0)
        return false;
    ep_ = util::move_high(RS_REAL(epoll_create1)(EPOLL_CLOEXEC));
    cmd_efd_ = util::move_high(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (ep_ < 0 || cmd_efd_ < 0)
        return false;
    // The devices librdmacm opened (two descriptors each): no thread of ours uses them
    // yet, so they can move to high numbers too.  Held (pinned) for the engine's life:
    // the progress thread then never lists the devices again (a netlink socket).
    devices_ = rdma::Context::borrow_all();
    for (const auto &d : devices_) {
        ibv_context *c = d->get();
        c->cmd_fd = util::move_high(c->cmd_fd);
        c->async_fd = util::move_high(c->async_fd);
        if (!rdma::dl::program_has_it()) {  // (else they are the program's too)
            rdma::dl::own_fd(c->cmd_fd);
            rdma::dl::own_fd(c->async_fd);
        }
    }
    // librdmacm opens (and closes) a descriptor or two the first time it resolves a
    // route (its ibacm client, rdma_getaddrinfo): that first time is here, not on the
    // progress thread, where the descriptor would hold the lowest free number for a
    // moment, the number the program's next socket or file is due to get.  Not when an
    // ibacm daemon runs: librdmacm then keeps its socket to it open for good, and asks it
    // without a timeout; that stays where it was, at the first route a client resolves.
    if (access("/run/ibacm.sock", F_OK) != 0 && access("/run/ibacm.port", F_OK) != 0)
        prime_route_resolution();
    prepare();
    if (log::enabled(log::kInfo))
        log_start(devices_);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kCm;
    RS_REAL(epoll_ctl)(ep_, EPOLL_CTL_ADD, cm_->fd(), &ev);
    ev.data.u64 = kCmd;
    RS_REAL(epoll_ctl)(ep_, EPOLL_CTL_ADD, cmd_efd_, &ev);
    if (g_report_open != nullptr && (report_fd_ = g_report_open()) >= 0) {
        ev.data.u64 = reinterpret_cast<uint64_t>(&report_fd_) | kCm;
        RS_REAL(epoll_ctl)(ep_, EPOLL_CTL_ADD, report_fd_, &ev);
    }
    // The thread must not take the program's signals.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    try {
        std::thread t([this] {
            pthread_setname_np(pthread_self(), "rdmasock");  // (from another thread: a file opened)
            loop();
        });
        t.detach();
    } catch (...) {
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        return false;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    started_.store(true, std::memory_order_release);
    RS_DEBUG("progress thread started");
    return true;
}

// The TCP socket is always watched (liveness, CONFIRM).  The completion channel is
// watched only while someone depends on the progress thread for completions: epoll
// registrations on the shadow eventfds (Conn::shadow_users) and retired connections
// waiting for the peer's FIN.  Threads in our own calls handle completions themselves.
void Engine::watch(Conn &c) noexcept
{
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLET;
    ev.data.u64 = reinterpret_cast<uint64_t>(&c) | kTcp;
    const int fd = c.tcp_fd();
    if (fd >= 0 && RS_REAL(epoll_ctl)(ep_, EPOLL_CTL_ADD, fd, &ev) == 0)
        c.set_watched_as(fd);
}

void Engine::unwatch(Conn &c) noexcept
{
    unwatch_comp(c);
    unwatch_tcp(c);
}

void Engine::unwatch_tcp(Conn &c) noexcept
{
    // (By the number it was registered under: the connection's may have moved since.)
    const int fd = c.watched_as();
    if (fd >= 0)
        RS_REAL(epoll_ctl)(ep_, EPOLL_CTL_DEL, fd, nullptr);
    c.set_watched_as(-1);
}

void Engine::watch_comp(Conn &c) noexcept
{
    if (c.comp_fd() < 0)
        return;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = reinterpret_cast<uint64_t>(&c) | kComp;
    RS_REAL(epoll_ctl)(ep_, EPOLL_CTL_ADD, c.comp_fd(), &ev);
}

void Engine::unwatch_comp(Conn &c) noexcept
{
    if (c.comp_fd() >= 0)
        RS_REAL(epoll_ctl)(ep_, EPOLL_CTL_DEL, c.comp_fd(), nullptr);
}

void Engine::loop() noexcept
{
    epoll_event evs[64];
    int timeout = -1;
    util::calibrate_copy();  // here, not in a program's call: it takes a few copies' time
    for (;;) {
        // No deadline pending: sleep until an event (an idle process uses no CPU).
        int n = RS_REAL(epoll_wait)(ep_, evs, 64, timeout);
        for (int i = 0; i < n; ++i) {
            uint64_t tag = evs[i].data.u64;
            auto *c = reinterpret_cast<Conn *>(tag & ~uint64_t{3});
            switch (tag & 3) {
            case kCm:
                if (c == nullptr)
                    on_cm_events();
                else if (g_report_answer != nullptr)
                    g_report_answer(report_fd_);  // (tagged with &report_fd_)
                break;
            case kCmd:
                if (c == nullptr) {
                    uint64_t v;
                    ssize_t r = RS_REAL(read)(cmd_efd_, &v, sizeof v);
                    (void)r;
                } else {
                    holder_exited_ = true;  // a pidfd (watch_holder): timers() looks again
                }
                break;
            case kComp:
                c->on_completion_event();
                break;
            case kTcp:
                c->on_tcp_event(evs[i].events);
                break;
            }
        }
        timeout = timers();
    }
}

int Engine::timers() noexcept
{
    auto now = Clock::now();
    Clock::time_point next = Clock::time_point::max();
    std::vector<std::shared_ptr<Conn>> drop, drained;
    std::vector<int> drained_fds;
    std::vector<std::shared_ptr<rdma::CmId>> expired;
    std::vector<std::shared_ptr<Conn>> handing;
    {
        std::lock_guard<std::mutex> lk(mu);
        for (auto &cp : claimed)
            accept_request(cp.first, std::move(cp.second));
        claimed.clear();
        for (Conn *c : retiring) {
            auto it = conns.find(c);
            if (it == conns.end())
                continue;
            graveyard.emplace_back(it->second, now + Ms(rt::config().linger_ms));
            it->second->release_shadows();  // (its number's epoll registrations are gone by now)
            watch_comp(*it->second);  // the peer's FIN frees it early
            conns.erase(it);
        }
        retiring.clear();
        for (auto it = drains.begin(); it != drains.end();) {
            int d = -1;
            if ((*it)->draining(now, d)) {
                next = std::min(next, now + Ms(10));
                ++it;
            } else {
                if (d >= 0)
                    drained_fds.push_back(d);
                drained.push_back(std::move(*it));
                it = drains.erase(it);
            }
        }
        for (auto it = graveyard.begin(); it != graveyard.end();) {
            if (it->first->drain_pending()) {
                ++it;  // (the drains' timer looks again)
            } else if (it->first->peer_finished() || now >= it->second) {
                unwatch_comp(*it->first);
                drop.push_back(std::move(it->first));
                it = graveyard.erase(it);
            } else {
                next = std::min(next, it->second);
                ++it;
            }
        }
        for (auto it = parked.begin(); it != parked.end();) {
            auto mit = maybe.find(it->first);
            if ((mit == maybe.end() || mit->second->handed_off()) && send_on(it->second, now)) {
                expired.push_back(std::move(it->second.id));
                it = parked.erase(it);
            } else if (now >= it->second.deadline) {
                reject(it->second.id->get(), Reason::rejected);
                expired.push_back(std::move(it->second.id));
                it = parked.erase(it);
            } else {
                next = std::min(next, it->second.deadline);
                if (it->second.reg)  // its process may record it: look again soon
                    next = std::min(next, now + Ms(kRegistryPollMs));
                ++it;
            }
        }
        peers.expire(now);
        for (auto it = lingering.begin(); it != lingering.end();) {
            if (now >= it->until) {
                RS_DEBUG("a closed listener's RDMA listener goes: its connections' windows have passed");
                listeners.erase(it->id->get());
                expired.push_back(std::move(it->id));
                it = lingering.erase(it);
            } else {
                next = std::min(next, it->until);
                ++it;
            }
        }
        for (auto &kv : conns)
            if (kv.second->on_timer(now))  // a grace period is running: check again soon
                next = std::min(next, now + Ms(10));
        wanted_copies(now, handing);
        if (copies_watch.load(std::memory_order_relaxed))
            next = std::min(next, copies_look);
        std::vector<std::pair<Conn *, Reason>> late;
        for (auto &kv : clients) {
            if (now >= kv.second.deadline) {
                late.emplace_back(kv.first, kv.second.abandoned ? Reason::closed_early : Reason::timeout);
                continue;
            }
            next = std::min(next, kv.second.deadline);
        }
        for (auto &l : late) {
            std::shared_ptr<rdma::CmId> drop;
            finish_client(l.first, l.second, drop);
            expired.push_back(std::move(drop));
        }
    }
    // Inherited listeners whose RDMA listener's process lived: taken over once it is gone
    // (outside the lock: take_over() takes it).
    std::vector<SocketRef> watch;
    {
        std::lock_guard<std::mutex> lk(mu);
        // (On a holder's exit (its pidfd), or every second where pidfds are not to be had.)
        if (holder_exited_ || (holder_poll_ && now >= next_holder_poll_)) {
            watch = inherited;
            holder_exited_ = false;
            next_holder_poll_ = now + Ms(1000);
        }
    }
    if (!watch.empty()) {
        for (SocketRef &r : watch)
            if (r->fds() == 0 || take_over(*r, true)) {
                std::lock_guard<std::mutex> lk(mu);
                inherited.erase(std::remove_if(inherited.begin(), inherited.end(),
                                               [&](const SocketRef &x) { return x.get() == r.get(); }),
                                inherited.end());
            }
    }
    {
        std::lock_guard<std::mutex> lk(mu);
        if (!inherited.empty() && holder_poll_)
            next = std::min(next, next_holder_poll_);
    }
    if (!handing.empty())
        hand_to_copies(std::move(handing));
    // Destruction (rdma_destroy_id, dereg) outside the lock.
    for (auto &c : drop)
        if (c->cm_id())
            rdma_disconnect(c->cm_id()->get());
    drop.clear();
    for (int d : drained_fds)
        Conn::close_drained(d);
    drained.clear();
    expired.clear();
    if (next == Clock::time_point::max())
        return -1;
    auto ms = std::chrono::duration_cast<Ms>(next - Clock::now()).count() + 1;
    return ms < 0 ? 0 : static_cast<int>(std::min<long long>(ms, 60000));
}

namespace {
// Connections taken for their copies (Conn::take_for_copies), back to their TCP sockets
// together, bounded by RDMASOCK_FALLBACK_WAIT_MS in all (as hand_back).
void hand_over_to_copies(const std::vector<std::shared_ptr<Conn>> &conns) noexcept
{
    for (const auto &c : conns)
        c->leave_start(Conn::Leaving::fork);
    const auto until = Clock::now() + Ms(rt::config().fallback_wait_ms);
    for (const auto &c : conns)
        c->hand_to_copies(until, true);
}
}  // namespace

void Engine::wanted_copies(Clock::time_point now, std::vector<std::shared_ptr<Conn>> &handing) noexcept
{
    // mu held.  (A holder's ask is counted in the table: looked for when the count
    // changed, or at the next look, every 250 ms while some holder lives.)
    if (!copies_watch.load(std::memory_order_relaxed))
        return;
    const uint64_t asks = copies::asks();
    if (asks == copies_asks_seen && now < copies_look)
        return;
    copies_asks_seen = asks;
    copies::Ref refs[32];
    const size_t n = copies::wanted(refs, 32);
    for (size_t i = 0; i < n; ++i) {
        auto it = std::find_if(conns.begin(), conns.end(),
                               [&](const auto &kv) { return kv.second->copies_id() == refs[i].id; });
        if (it == conns.end())
            copies::move(refs[i], copies::State::wanted, copies::State::ended);  // (gone meanwhile)
        else if (copies::move(refs[i], copies::State::wanted, copies::State::handing))
            handing.push_back(it->second);
    }
    if (now >= copies_look) {
        // (Whether a holder lives, by pidfd: once a second.)
        if (++copies_looks % 4 == 0)
            copies_watch.store(n > 0 || copies::watching(), std::memory_order_relaxed);
        copies_look = now + Ms(250);
    }
}

void Engine::hand_to_copies(std::vector<std::shared_ptr<Conn>> conns_wanted) noexcept
{
    // Each may take a round trip or more (the peer's frame): not on this thread.
    try {
        std::thread([v = conns_wanted] { hand_over_to_copies(v); }).detach();
    } catch (...) {
        for (const auto &c : conns_wanted)
            c->copies_failed();
    }
}

void Engine::reject(rdma_cm_id *id, Reason why) noexcept
{
    uint8_t d[neg::kDeclineSize];
    neg::encode_decline(why, d);
    rdma_reject(id, d, sizeof d);
}

bool Engine::send_on(Parked &p, Clock::time_point now) noexcept
{
    // mu held.
    Registry::Entry re;
    if (!p.reg || !p.reg->used() || !p.reg->find(p.name, steady_ms(now), &re) || re.pid == getpid())
        return false;
    if (kill(re.pid, 0) != 0 && errno == ESRCH) {
        // The worker is gone (and its port may be anyone's now): the request waits out
        // its time and is declined.
        p.reg->erase(p.name, re.pid);
        return false;
    }
    uint8_t d[neg::kDeclineSize];
    neg::encode_redirect(re.port, d);
    rdma_reject(p.id->get(), d, sizeof d);
    p.reg->erase(p.name, re.pid);
    RS_DEBUG("RDMA request from port %u: accepted by process %d, sent on to its port %u", p.hello.client_port,
             static_cast<int>(re.pid), re.port);
    return true;
}

uint16_t Engine::own_listener(const sockaddr_storage &local) noexcept
{
    const auto want = endpoint_key(reinterpret_cast<const sockaddr *>(&local), false);
    std::lock_guard<std::mutex> lk(mu);
    for (const Own &o : own)
        if (endpoint_key(reinterpret_cast<const sockaddr *>(&o.addr), false) == want)
            return o.port;
    // The port: one the kernel gives a TCP socket bound to it and kept (not listening),
    // so that no TCP listener of this host gets that number while our RDMA listener has
    // it (its clients' requests would come here).
    sockaddr_storage a = local;
    if (a.ss_family == AF_INET)
        reinterpret_cast<sockaddr_in *>(&a)->sin_port = 0;
    else
        reinterpret_cast<sockaddr_in6 *>(&a)->sin6_port = 0;
    const socklen_t alen = a.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    const int reserve = util::make_high([&a] { return RS_REAL(socket)(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0); });
    socklen_t got_len = alen;
    int err = 0;
    std::shared_ptr<rdma::CmId> id;
    if (reserve < 0 || RS_REAL(bind)(reserve, reinterpret_cast<sockaddr *>(&a), alen) != 0 ||
        RS_REAL(getsockname)(reserve, reinterpret_cast<sockaddr *>(&a), &got_len) != 0 ||
        !(id = rdma::CmId::create(cm_, nullptr, RDMA_PS_TCP, &err)) ||
        rdma_bind_addr(id->get(), reinterpret_cast<sockaddr *>(&a)) != 0 || rdma_listen(id->get(), 128) != 0) {
        RS_DEBUG("no RDMA listener of this process's own: %s", strerror(err != 0 ? err : errno));
        if (reserve >= 0)
            util::close_own(reserve);
        return 0;
    }
    const uint16_t port = ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6 *>(&a)->sin6_port
                                                         : reinterpret_cast<const sockaddr_in *>(&a)->sin_port);
    listeners[id->get()] = Listener{id, nullptr};
    own.push_back(Own{local, std::move(id), port, reserve});
    RS_DEBUG("RDMA listener of this process's own on port %u", port);
    return port;
}

void Engine::on_cm_events() noexcept
{
    for (;;) {
        rdma_cm_event *ev = nullptr;
        errno = 0;
        if (rdma_get_cm_event(cm_->get(), &ev) != 0)
            return;
        // Status -1: librdmacm itself failed the step it does on the event (a client's
        // queue pair moved to RTR and RTS on the server's answer); errno says why.
        if (ev->status == -1)
            RS_DEBUG("rdma_cm event %s: librdmacm failed: %s", rdma_event_str(ev->event), strerror(errno));
        handle(ev);
    }
}

void Engine::accept_request(const std::shared_ptr<Conn> &c, Parked &&p) noexcept
{
    // mu held.
    c->note_asked();
    if (c->refusing()) {  // (the process exits: no resources built for nothing)
        reject(p.id->get(), Reason::rejected);
        return;
    }
    Reason r = p.hello.ring.log2 > max_peer_ring_log2() ? Reason::limit : Reason::none;
    if (r == Reason::none && c->urgent_inline_set())
        r = Reason::urgent_data;  // SO_OOBINLINE, set on the listener it came from
    if (r == Reason::none && uring::in_use())
        r = Reason::io_uring;  // (base/uring.hh)
    if (r == Reason::none)
        r = c->create_resources(p.id, ring_log2());
    if (r == Reason::none)
        r = c->set_peer_ring(p.hello.ring);
    if (r == Reason::none)
        r = c->post_initial_receives();
    if (r != Reason::none) {
        // The operator must see a lack of locked memory or a limit; other failures here
        // can be artefacts of a client that gave up meanwhile (its id is gone).  Decided
        // before the DECLINE leaves: the client, once it has it, sends its bytes, and
        // the program may read them and ask the socket's state at once.
        if (r == Reason::memlock || r == Reason::limit || r == Reason::urgent_data || r == Reason::io_uring)
            c->note_declined(r);
        reject(p.id->get(), r);
        RS_DEBUG("declined an RDMA request: %s", reason_code(r));
        return;
    }
    // From here the connection's TCP bytes are delivered only up to the client's SWITCH.
    if (!c->begin_verify(p.hello.nonce)) {
        // Decided or closed meanwhile, or its program shut down writing: no PROOF can go
        // into the stream any more (closed_early, both ends).
        const Reason why = c->write_shut() ? Reason::closed_early : Reason::rejected;
        if (why == Reason::closed_early)
            c->note_declined(why);
        reject(p.id->get(), why);
        return;
    }
    p.id->get()->context = c.get();
    neg::Accept a;
    a.ring = c->local_ring();
    a.nonce = p.hello.nonce;
    uint8_t pd[neg::kAcceptSize];
    neg::encode(a, pd);
    rdma_conn_param param{};
    param.private_data = pd;
    param.private_data_len = sizeof pd;
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    conns[c.get()] = c;
    watch(*c);
    set_ack_timeout(p.id->get());
    if (rdma_accept(p.id->get(), &param) != 0) {
        // (The client withdrew its request meanwhile.)  The connection goes on undecided.
        RS_DEBUG("rdma_accept: %s", strerror(errno));
        unwatch(*c);
        c->abandon_rdma();
    }
}

void Engine::handle(rdma_cm_event *ev) noexcept
{
    RS_DEBUG("rdma_cm event %s (status %d) for id %p", rdma_event_str(ev->event), ev->status,
             static_cast<void *>(ev->id));
    // rdma_destroy_id waits until the id's events are acknowledged: ids are destroyed
    // only after the rdma_ack_cm_event below.
    std::shared_ptr<rdma::CmId> drop_after_ack;
    rdma_cm_id *destroy_after_ack = nullptr;
    ibv_context *gone = nullptr;  // RDMA_CM_EVENT_DEVICE_REMOVAL: its device
    if (ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED && client_route(ev, drop_after_ack)) {
        rdma_ack_cm_event(ev);
        return;
    }
    {
        std::lock_guard<std::mutex> lk(mu);
        rdma_cm_id *id = ev->id;
        auto *c = Conn::of_cm_context(id->context);
        switch (ev->event) {
        case RDMA_CM_EVENT_CONNECT_REQUEST: {
            auto lit = listeners.find(ev->listen_id);
            neg::Hello h;
            Reason r = lit == listeners.end()
                           ? Reason::rejected
                           : neg::decode(ev->param.conn.private_data, ev->param.conn.private_data_len, &h);
            if (r != Reason::none) {
                RS_DEBUG("RDMA request declined: %s", reason_code(r));
                reject(id, r);
                destroy_after_ack = id;
                break;
            }
            // The 4-tuple the request claims, as the client sees it.
            sockaddr_storage cl{}, sv{};
            if (h.family == AF_INET) {
                auto *a = reinterpret_cast<sockaddr_in *>(&cl);
                a->sin_family = AF_INET;
                memcpy(&a->sin_addr, &h.client_addr, 4);
                a->sin_port = htons(h.client_port);
            } else {
                auto *a = reinterpret_cast<sockaddr_in6 *>(&cl);
                a->sin6_family = AF_INET6;
                a->sin6_addr = h.client_addr;
                a->sin6_port = htons(h.client_port);
            }
            sockaddr *local = rdma_get_local_addr(id);
            memcpy(&sv, local, local->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
            if (sv.ss_family == AF_INET)
                reinterpret_cast<sockaddr_in *>(&sv)->sin_port = htons(h.server_port);
            else
                reinterpret_cast<sockaddr_in6 *>(&sv)->sin6_port = htons(h.server_port);
            Key k = make_key(reinterpret_cast<sockaddr *>(&cl), reinterpret_cast<sockaddr *>(&sv));
            int err = 0;
            auto owned = rdma::CmId::adopt(id, cm_, &err);
            if (!owned) {
                reject(id, Reason::resource);
                destroy_after_ack = id;
                break;
            }
            id->context = nullptr;
            Parked p{owned, h, Clock::now() + answer_window(), nullptr, 0};
            auto mit = maybe.find(k);
            if (lit->second.reg) {
                // Not accepted here, or a fork child may serve it: perhaps another
                // process of the listener's group has it.
                p.reg = lit->second.reg;
                p.name = registry_key(k.data(), static_cast<unsigned>(k.size()));
                if ((mit == maybe.end() || mit->second->handed_off()) && send_on(p, Clock::now())) {
                    drop_after_ack = std::move(owned);
                    break;
                }
            }
            // Accepted only for a connection this process accepted and has started to
            // read from (or wait for input on): a process that accepts and forks a
            // child to serve the connection never binds RDMA to it behind the child.
            if (mit != maybe.end() && mit->second->phase() == Conn::Phase::maybe &&
                mit->second->interested()) {
                RS_DEBUG("RDMA request from port %u: its connection is being read (fd=%d)",
                         h.client_port, mit->second->shown_fd());
                auto conn = mit->second;
                keys.erase(conn.get());
                maybe.erase(mit);
                accept_request(conn, std::move(p));
            } else if (mit != maybe.end() && mit->second->phase() == Conn::Phase::tcp &&
                       mit->second->socket_reason() == Reason::passed) {
                // Its program passed it on (SCM_RIGHTS) before the request came: as
                // on_passed() declines a request that had come.
                reject(id, Reason::rejected);
                drop_after_ack = std::move(owned);
            } else if (mit != maybe.end() && mit->second->phase() == Conn::Phase::tcp) {
                // Its connection stopped waiting for a request (switch_window() after its
                // accept: the client was slow, e.g. setting up many connections at once)
                // and is on TCP: too late.  Both ends say so (timeout), at once.
                RS_DEBUG("RDMA request from port %u: its connection (fd=%d) is on TCP already: declined",
                         h.client_port, mit->second->shown_fd());
                const bool ring = mit->second->socket_reason() == Reason::io_uring;
                if (!ring)
                    mit->second->note_late_request();
                reject(id, ring ? Reason::io_uring : Reason::timeout);
                drop_after_ack = std::move(owned);
            } else if (parked.size() < 4096 && !parked.count(k)) {
                RS_DEBUG("RDMA request from port %u: parked until its connection is read%s",
                         h.client_port, mit != maybe.end() ? "" : " (not accepted yet)");
                parked.emplace(k, std::move(p));
            } else {
                reject(id, Reason::limit);
                drop_after_ack = std::move(owned);
            }
            break;
        }
        case RDMA_CM_EVENT_ADDR_RESOLVED:
        case RDMA_CM_EVENT_ROUTE_RESOLVED:
        case RDMA_CM_EVENT_ESTABLISHED:
        case RDMA_CM_EVENT_ADDR_ERROR:
        case RDMA_CM_EVENT_ROUTE_ERROR:
        case RDMA_CM_EVENT_REJECTED:
        case RDMA_CM_EVENT_UNREACHABLE:
        case RDMA_CM_EVENT_CONNECT_ERROR:
            if (c == nullptr)
                break;
            if (auto cit = clients.find(c); cit != clients.end()) {
                client_event(cit->second, ev, drop_after_ack);
            } else if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
                if (c->side() == Conn::Side::server)
                    c->server_established();
            } else if (conns.count(c)) {
                c->abandon_rdma();
            }
            break;
        case RDMA_CM_EVENT_DISCONNECTED:
            if (c != nullptr && (conns.count(c) || draining(c))) {
                c->on_completion_event();  // take in what arrived before the disconnect
                c->abandon_rdma();
                rdma_disconnect(id);
            }
            break;
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            gone = id->verbs;
            break;
        default:
            break;
        }
    }
    rdma_ack_cm_event(ev);
    drop_after_ack.reset();
    if (destroy_after_ack != nullptr)
        rdma_destroy_id(destroy_after_ack);
    if (gone != nullptr)
        device_gone(gone);
}

// Every id on the device gets the event; the first one's does the work, the others find
// nothing left.  The device's removal waits for the process (rxe cannot take the objects
// away from it), so everything of ours on it goes now, the connections on it falling back
// to TCP (docs/design/tcp-fallback.md, risk 4).
void Engine::device_gone(ibv_context *ctx) noexcept
{
    std::vector<std::shared_ptr<rdma::CmId>> ids;  // destroyed last, outside the locks
    std::vector<std::shared_ptr<Conn>> hit;
    std::vector<SocketRef> socks;
    fdt::for_each([&](int, const SocketRef &s) {
        try {
            socks.push_back(s);
        } catch (...) {
        }
    });
    auto on_ctx = [ctx](const std::shared_ptr<rdma::CmId> &id) {
        return id && id->get() != nullptr && id->get()->verbs == ctx;
    };
    char name[64] = "?";
    snprintf(name, sizeof name, "%s", ibv_get_device_name(ctx->device));
    try {
        std::lock_guard<std::mutex> lk(mu);
        // Negotiations on it end (the connection stays on TCP: no_device).
        std::vector<std::shared_ptr<Conn>> negotiating;
        for (auto &kv : clients)
            if (on_ctx(kv.second.id) || kv.second.conn->on_device(ctx))
                negotiating.push_back(kv.second.conn);
        for (auto &c : negotiating) {
            std::shared_ptr<rdma::CmId> drop;
            finish_client(c.get(), Reason::no_device, drop);
            ids.push_back(std::move(drop));
            hit.push_back(c);
        }
        for (auto &kv : conns)
            hit.push_back(kv.second);
        for (auto &g : graveyard)
            hit.push_back(g.first);
        for (auto &d : drains)
            hit.push_back(d);
        // Each entry of `v` whose id (id_of) is on the device: done(entry), then erased.
        auto sweep = [&](auto &v, auto id_of, auto done) {
            for (auto it = v.begin(); it != v.end();)
                if (on_ctx(id_of(*it))) {
                    done(*it);
                    it = v.erase(it);
                } else {
                    ++it;
                }
        };
        auto second_id = [](auto &kv) -> std::shared_ptr<rdma::CmId> & { return kv.second.id; };
        auto keep_id = [&](auto &kv) { ids.push_back(std::move(kv.second.id)); };
        sweep(parked, second_id, keep_id);
        sweep(claimed, second_id, keep_id);
        // Listeners: destroyed in place (a listening socket holds its id too; each user
        // of a listener's id takes mu).  Every one of this process's is in `listeners`,
        // own ports and lingering ones too: those first (on_ctx needs the id alive).
        sweep(own, [](Own &o) -> std::shared_ptr<rdma::CmId> & { return o.id; }, [](Own &o) {
            o.id->destroy_now();
            util::close_own(o.reserve_fd);
        });
        sweep(lingering, [](Lingering &l) -> std::shared_ptr<rdma::CmId> & { return l.id; },
              [](Lingering &l) { l.id->destroy_now(); });
        sweep(listeners, second_id, [](auto &kv) { kv.second.id->destroy_now(); });
    } catch (...) {
    }
    // Connections: the engine's, and the sockets' (a client's that stayed on TCP keeps
    // its domain until its close).
    for (const SocketRef &s : socks)
        if (Transport *t = s->transport.load())
            try {
                hit.push_back(Conn::of(t)->self());
            } catch (...) {
            }
    size_t fell = 0;
    for (auto &c : hit) {
        if (!c || !c->on_device(ctx))
            continue;
        unwatch_comp(*c);
        const bool was_rdma = c->phase() == Conn::Phase::rdma;
        ids.push_back(c->on_device_removal());
        fell += was_rdma;
    }
    ids.clear();
    hit.clear();
    for (const auto &d : devices_)
        if (d->get() == ctx)
            d->mark_gone();  // (first: a program's call may be preparing channels on it)
    kits::forget(ctx);
    rdma::renew_device_pin();
    log::write(log::kInfo, "event=device_gone device=%s connections=%zu", name, fell);
}

unsigned long ring_bytes() noexcept { return rdmasock::ring_bytes(rt::config().ring_kb); }

unsigned ring_log2() noexcept
{
    unsigned long bytes = ring_bytes();
    unsigned l = 0;
    while ((2ul << l) <= bytes)
        ++l;
    if (l < neg::kMinRingLog2)
        l = neg::kMinRingLog2;
    if (l > neg::kMaxRingLog2)
        l = neg::kMaxRingLog2;
    return l;
}

bool loopback(const sockaddr_storage &a) noexcept
{
    if (a.ss_family == AF_INET)
        return (ntohl(reinterpret_cast<const sockaddr_in *>(&a)->sin_addr.s_addr) >> 24) == 127;
    const in6_addr &x = reinterpret_cast<const sockaddr_in6 *>(&a)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&x) || (IN6_IS_ADDR_V4MAPPED(&x) && x.s6_addr[12] == 127);
}

long us_since(Clock::time_point t0) noexcept
{
    return static_cast<long>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
}



void on_listen(int fd, Socket &s) noexcept
{
    if (rt::default_reason() != Reason::pending)
        return;
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (RS_REAL(getsockname)(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0)
        return;
    s.local = addr;
    // A loopback listener's connections never leave the host: no RDMA listener (and no
    // engine, no rdma-core) for it.
    if (loopback(addr))
        return;
    Engine *e = engine();
    if (e == nullptr)
        return;
    int err = 0;
    auto id = rdma::CmId::create(e->channel(), nullptr, RDMA_PS_TCP, &err);
    if (!id)
        return;
    if (rdma_bind_addr(id->get(), reinterpret_cast<sockaddr *>(&addr)) != 0) {
        // The address may be held by this process's closed listener, lingering: take it.
        const int bind_err = errno;
        const auto want = endpoint_key(reinterpret_cast<sockaddr *>(&addr), true);
        std::lock_guard<std::mutex> lk(e->mu);
        auto it = std::find_if(e->lingering.begin(), e->lingering.end(), [&](const Engine::Lingering &l) {
            return endpoint_key(reinterpret_cast<const sockaddr *>(&l.addr), true) == want;
        });
        if (it == e->lingering.end()) {
            // Another listening socket of this process on the same address and port
            // (SO_REUSEPORT: nginx `reuseport` makes one per worker, all in the master):
            // they share its RDMA listener and table.
            for (auto &kv : e->listeners) {
                const Listener &l = kv.second;
                if (!l.reg || endpoint_key(rdma_get_local_addr(l.id->get()), true) != want)
                    continue;
                s.listener = l.id;
                s.listener_pid = getpid();
                s.registry = l.reg;
                RS_DEBUG("listen fd=%d: shares the RDMA listener of another socket on its address", fd);
                return;
            }
            RS_DEBUG("listen fd=%d: no RDMA listener (%s)", fd, strerror(bind_err));
            return;
        }
        id = std::move(it->id);
        s.registry = e->listeners[id->get()].reg;
        // Its connections' windows still run: a failed listen() (drop_listener) or a
        // close puts it back to linger that long at least.
        s.last_accept_ms.store(std::chrono::duration_cast<Ms>((it->until - switch_window()).time_since_epoch()).count(),
                               std::memory_order_relaxed);
        e->lingering.erase(it);
        RS_DEBUG("listen fd=%d: takes back the RDMA listener of its closed predecessor", fd);
    } else if (rdma_listen(id->get(), 128) != 0) {
        RS_DEBUG("listen fd=%d: no RDMA listener (%s)", fd, strerror(errno));
        return;
    } else {
        // The table the processes that will inherit this listener (pre-fork workers)
        // share with it: mapped now, before any fork.
        s.registry = std::shared_ptr<Registry>(Registry::create(), Registry::destroy);
        if (s.registry)
            s.registry->set_holder(getpid());
        std::lock_guard<std::mutex> lk(e->mu);
        e->listeners[id->get()] = Listener{id, s.registry};
    }
    s.listener = id;
    s.listener_pid = getpid();
    RS_DEBUG("listen fd=%d: RDMA listener ready", fd);
}

namespace {

std::mutex g_takeover_mu;
std::atomic<int64_t> g_next_holder_check_ms{0};

// Whether process `p` has ended (a zombie not reaped yet has: its descriptors are closed).
bool holder_gone(pid_t p) noexcept
{
    if (p == 0 || (kill(p, 0) != 0 && errno == ESRCH))
        return true;
    char path[40], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(p));
    ssize_t n = -1;
    {
        util::FdGate making(util::FdGate::making);
        const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return false;
        n = RS_REAL(read)(fd, buf, sizeof buf - 1);
        util::close_own(fd);
    }
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char *st = strrchr(buf, ')');  // "pid (comm) S ..."
    return st != nullptr && st[1] == ' ' && (st[2] == 'Z' || st[2] == 'X');
}

// A listener inherited from a process that is gone (a server that daemonizes: it
// listened, forked and exited, and its RDMA listener went with it): the first process
// of the group to use the listener takes the port over and becomes its holder.  While
// the holder lives, the engine watches it (a pidfd: woken at its exit; the exit of a
// daemonizing server's first process comes just after its fork).  True when this
// process holds it.
// `now`: from the engine's timers (else at most every 100 ms per process).
bool take_over(Socket &ls, bool now) noexcept
{
    std::lock_guard<std::mutex> tl(g_takeover_mu);
    if (ls.listener_pid == getpid())
        return true;
    Registry *reg = ls.registry.get();
    if (reg == nullptr || rt::default_reason() != Reason::pending)
        return false;
    const int64_t t = steady_ms(Clock::now());
    if (!now && t < g_next_holder_check_ms.load(std::memory_order_relaxed))
        return false;
    g_next_holder_check_ms.store(t + 100, std::memory_order_relaxed);
    Engine *e = engine();
    if (e == nullptr)
        return false;
    const pid_t was = reg->holder();
    if (!holder_gone(was)) {
        std::lock_guard<std::mutex> lk(e->mu);
        if (std::none_of(e->inherited.begin(), e->inherited.end(),
                         [&](const SocketRef &r) { return r.get() == &ls; })) {
            ls.acquire();
            e->inherited.push_back(SocketRef::adopt(&ls));
        }
        e->watch_holder(was);
        return false;
    }
    int err = 0;
    auto id = rdma::CmId::create(e->channel(), nullptr, RDMA_PS_TCP, &err);
    sockaddr_storage addr = ls.local;
    if (!id || rdma_bind_addr(id->get(), reinterpret_cast<sockaddr *>(&addr)) != 0 ||
        rdma_listen(id->get(), 128) != 0 || !reg->claim_holder(was, getpid()))
        return false;
    {
        std::lock_guard<std::mutex> lk(e->mu);
        e->listeners[id->get()] = Listener{id, ls.registry};
    }
    ls.listener = id;  // (the gone process's copy is never destroyed here: rdma/owners.hh)
    ls.listener_pid = getpid();
    RS_DEBUG("the RDMA listener's process (%d) is gone: this process takes the port over", static_cast<int>(was));
    return true;
}

}  // namespace

void listener_used(Socket &ls) noexcept
{
    if (!ls.listener || ls.listener_pid == getpid())
        return;
    // First use in this process (the fork made the listener's calls take the hooked path
    // to see it): from here the engine watches it, and its calls go the fast path again.
    if (ls.offloaded()) {
        ls.set_offloaded(false);
        if (!take_over(ls, true) && ls.registry && rt::default_reason() == Reason::pending)
            if (Engine *e = engine())
                e->own_listener(ls.local);  // (ready before the first connection)
    } else {
        take_over(ls);
    }
}

void on_accept(Socket &ls, int fd, Socket &s) noexcept
{
    listener_used(ls);
    Engine *e = g_engine;
    // A listener another process opened (a pre-fork server's master): its RDMA listener
    // is that process's.  This process gets requests for the connections it accepts on
    // an RDMA listener of its own, where the holder sends them on (process/registry.hh).
    uint16_t own_port = 0;
    if (ls.listener && ls.listener_pid != getpid()) {
        e = ls.registry && rt::default_reason() == Reason::pending ? engine() : nullptr;
        own_port = e != nullptr ? e->own_listener(ls.local) : 0;
        if (own_port == 0)
            e = nullptr;
    }
    if (!ls.listener || e == nullptr) {
        Reason r = rt::default_reason();
        if (ls.listener && ls.listener_pid != getpid())
            r = r == Reason::pending ? Reason::forked_listener : r;  // (forked_child: no rdma-core of its own)
        else if (r == Reason::pending && ls.listener)
            r = Reason::forked_listener;
        else if (r == Reason::pending)  // (the listener's address, from on_listen)
            r = loopback(ls.local) ? Reason::not_rdma_addr : Reason::no_listener;
        s.reason.store(r, std::memory_order_relaxed);
        return;
    }
    sockaddr_storage local{};
    socklen_t ll = sizeof local;
    if (RS_REAL(getsockname)(fd, reinterpret_cast<sockaddr *>(&local), &ll) != 0)
        return;
    ls.last_accept_ms.store(std::chrono::duration_cast<Ms>(Clock::now().time_since_epoch()).count(),
                            std::memory_order_relaxed);
    Key k = make_key(reinterpret_cast<sockaddr *>(&s.peer), reinterpret_cast<sockaddr *>(&local));
    e->prepare();  // (here, in the program's accept(), not on the progress thread)
    auto conn = std::make_shared<Conn>(Conn::Side::server, fd, g_upcalls);
    conn->set_self(conn);
    conn->set_socket(&s);
    conn->set_maybe_deadline(Clock::now() + switch_window());
    s.registry = ls.registry;  // (a fork child that serves the connection records it there)
    s.transport = conn.get();
    s.reason.store(Reason::pending, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lk(e->mu);
        e->maybe[k] = conn;
        e->keys[conn.get()] = k;
        e->conns.emplace(conn.get(), conn);
    }
    if (own_port != 0) {  // the holder sends the client's request on to our own port
        const int64_t now = steady_ms(Clock::now());
        const int64_t until = now + static_cast<int64_t>(switch_window().count());
        const uint64_t name = registry_key(k.data(), static_cast<unsigned>(k.size()));
        if (ls.registry->put(name, {getpid(), own_port}, until, now)) {
            std::lock_guard<std::mutex> lk(e->mu);
            e->recorded[conn.get()] = {ls.registry, name};
        } else {
            RS_WARN("accept fd=%d: the listener's table of connections is full: this one stays on TCP", fd);
        }
    }
    // Until the first inbound bytes say otherwise, calls take the hooked path.
    conn->enter_pending();
    s.set_offloaded(true);
    // A process that uses io_uring: on TCP now, its client's request declined when it
    // comes (base/uring.hh).
    if (uring::in_use())
        conn->note_declined(Reason::io_uring);
}

namespace {

// A fork child's first use of a connection its parent accepted and had not used (a
// fork-per-connection server): the child negotiates it as a pre-fork worker does, on an
// RDMA listener of its own, recorded in the listener's table.  False: it stays on TCP.
bool adopt(Conn &c) noexcept
{
    Socket *s = c.socket();
    std::shared_ptr<Registry> reg = s != nullptr ? s->registry : nullptr;
    Engine *e = reg && rt::default_reason() == Reason::pending ? engine() : nullptr;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    uint16_t port = 0;
    if (e != nullptr && RS_REAL(getsockname)(c.tcp_fd(), reinterpret_cast<sockaddr *>(&local), &ll) == 0 &&
        RS_REAL(getpeername)(c.tcp_fd(), reinterpret_cast<sockaddr *>(&peer), &pl) == 0)
        port = e->own_listener(local);
    std::shared_ptr<Conn> self = c.self();
    if (port == 0 || !self) {
        c.note_declined(rt::default_reason() == Reason::pending ? Reason::forked : rt::default_reason());
        return false;
    }
    const Key k = make_key(reinterpret_cast<sockaddr *>(&peer), reinterpret_cast<sockaddr *>(&local));
    const uint64_t name = registry_key(k.data(), static_cast<unsigned>(k.size()));
    const int64_t now = steady_ms(Clock::now());
    std::lock_guard<std::mutex> lk(e->mu);
    e->maybe[k] = self;
    e->keys[&c] = k;
    e->conns.emplace(&c, self);
    if (reg->put(name, {getpid(), port}, now + static_cast<int64_t>(switch_window().count()), now))
        e->recorded[&c] = {reg, name};
    RS_DEBUG("fd=%d: a connection the parent accepted, used here first: negotiated by this process", c.tcp_fd());
    return true;
}

}  // namespace

void interest(Conn &c) noexcept
{
    if (c.take_adoptable() && !adopt(c))
        return;
    Engine *e = g_engine;
    if (e == nullptr)
        return;
    std::lock_guard<std::mutex> lk(e->mu);
    auto kit = e->keys.find(&c);
    if (kit == e->keys.end())
        return;
    auto pit = e->parked.find(kit->second);
    if (pit == e->parked.end())
        return;  // the request, when it comes, finds the connection being read
    auto mit = e->maybe.find(kit->second);
    if (mit == e->maybe.end())
        return;
    RS_DEBUG("fd=%d is being read: accepting its parked RDMA request", c.tcp_fd());
    e->claimed.emplace_back(mit->second, std::move(pit->second));
    e->parked.erase(pit);
    e->maybe.erase(mit);
    e->keys.erase(kit);
    e->wake();
}

// Under e->mu: the request parked for `pit` is declined (the client falls back to TCP
// at once instead of waiting for its probe timeout); its id is handed back, to be
// dropped once the lock is released.
std::shared_ptr<rdma::CmId> decline_parked_locked(Engine *e, decltype(Engine::parked)::iterator pit) noexcept
{
    uint8_t d[neg::kDeclineSize];
    neg::encode_decline(Reason::rejected, d);
    rdma_reject(pit->second.id->get(), d, sizeof d);
    auto id = std::move(pit->second.id);
    e->parked.erase(pit);
    return id;
}

// A server connection that never bound RDMA goes away: answer a request parked for it
// at once.
void forget_undecided(Engine *e, Conn &c) noexcept
{
    std::shared_ptr<rdma::CmId> drop;
    {
        std::lock_guard<std::mutex> lk(e->mu);
        if (auto rit = e->recorded.find(&c); rit != e->recorded.end()) {
            rit->second.first->erase(rit->second.second, getpid());
            e->recorded.erase(rit);
        }
        auto kit = e->keys.find(&c);
        if (kit == e->keys.end())
            return;
        auto pit = e->parked.find(kit->second);
        if (pit != e->parked.end() && pit->second.reg && c.handed_off()) {
            // A fork child may serve it (fork per connection): its request waits for the
            // child to record it (timers()), declined only when its time is out.
        } else if (pit != e->parked.end()) {
            drop = decline_parked_locked(e, pit);
        }
        e->maybe.erase(kit->second);
        e->keys.erase(kit);
    }
}

void drop_listener(Socket &s) noexcept
{
    if (!s.listener)
        return;
    if (s.listener_pid != getpid()) {
        // A fork child's copy: the rdma_cm id is the parent's (destroying it here would
        // destroy the parent's listener through the shared rdma_cm file): forget it.
        new (&s.listener) std::shared_ptr<void>();
        return;
    }
    if (g_engine != nullptr) {
        auto id = std::static_pointer_cast<rdma::CmId>(s.listener);
        std::lock_guard<std::mutex> lk(g_engine.load()->mu);
        // (Shared with another socket of this process, SO_REUSEPORT: it stays theirs.
        // References: the engine's map, this socket's, `id`, and any other socket's.)
        if (id.use_count() > 3) {
            s.listener.reset();
            return;
        }
        // Connections it accepted within a switch window may still get their requests.
        const int64_t last = s.last_accept_ms.load(std::memory_order_relaxed);
        const auto until = Clock::time_point(Ms(last)) + switch_window();
        if (last != 0 && Clock::now() < until) {
            g_engine.load()->lingering.push_back(Engine::Lingering{id, s.local, until});
            g_engine.load()->wake();  // its deadline
            RS_DEBUG("a listener closed: its RDMA listener stays for the connections it just accepted");
        } else {
            g_engine.load()->listeners.erase(id->get());
        }
    }
    s.listener.reset();
}

// Its close goes through close_orderly: on RDMA, a server verifying (it switches first:
// close_connection takes the CONFIRM), a client negotiating (it takes a PROOF out of the
// stream: unread, the kernel would answer its close with a reset).  The same at exit.
bool closes_orderly(const Conn &c) noexcept
{
    const Conn::Phase p = c.phase();
    return p == Conn::Phase::rdma || p == Conn::Phase::verifying ||
           (c.side() == Conn::Side::client && p == Conn::Phase::maybe);
}

// close() of a connection on RDMA (or about to be): its FIN or RESET, per SO_LINGER.
// Last messages the peer does not take yet (a stopped process) are left to the progress
// thread, with a duplicate of the TCP socket that keeps the TCP connection open until
// they went (the peer counts a TCP end with no FIN as a reset).
void close_orderly(int fd, Conn &c, bool exiting = false) noexcept
{
    if (c.drain_pending())
        return;  // (at exit: another number of the same socket)
    linger lg{};
    socklen_t len = sizeof lg;
    const bool set = RS_REAL(getsockopt)(fd, SOL_SOCKET, SO_LINGER, &lg, &len) == 0 && lg.l_onoff;
    if (!c.close_connection(set && lg.l_linger == 0, set ? lg.l_linger : 0, exiting) || g_engine == nullptr)
        return;
    std::shared_ptr<Conn> self = c.self();
    if (!self || !self->start_drain(fd))
        return;
    RS_DEBUG("connection fd=%d: closed with its last messages still to go (the peer takes none now)", fd);
    std::lock_guard<std::mutex> lk(g_engine.load()->mu);
    g_engine.load()->drains.push_back(std::move(self));
    g_engine.load()->wake();
}

void on_close(int fd, Socket &s) noexcept
{
    drop_listener(s);
    if (s.transport == nullptr)
        return;
    auto *c = Conn::of(s.transport);
    if (c->side() == Conn::Side::client && g_engine != nullptr) {
        // Closed while negotiating: all its bytes went over TCP.  The negotiation runs on
        // (without the socket) only to learn, for the cache, whether the peer has
        // rdmasock: short connections must not each pay a probe.  (Also a connection a
        // close handed to calls still blocked, decided for TCP then: its negotiation may
        // still run, and must not touch the number, the library's duplicate, either.)
        const bool negotiating = c->phase() == Conn::Phase::maybe;
        if (negotiating)
            c->client_failed(Reason::closed_early);
        bool in_clients = negotiating;
        if (!negotiating) {
            std::lock_guard<std::mutex> lk(g_engine.load()->mu);
            in_clients = g_engine.load()->clients.count(c) != 0;
        }
        if (in_clients) {
            sockaddr_storage pa{};
            socklen_t pl = sizeof pa;
            const bool tcp_ok = RS_REAL(getpeername)(fd, reinterpret_cast<sockaddr *>(&pa), &pl) == 0;
            std::lock_guard<std::mutex> lk(g_engine.load()->mu);
            if (auto it = g_engine.load()->clients.find(c); it != g_engine.load()->clients.end()) {
                it->second.orphaned = true;
                it->second.tcp_ok = tcp_ok;
                // One orphan per host is enough to learn about it: a process making short
                // connections would otherwise run a whole negotiation in the background
                // for each, a kit (rings registered and pinned) included.
                if (g_engine.load()->peers.in_flight(reinterpret_cast<sockaddr *>(&it->second.peer)) > 1) {
                    it->second.abandoned = true;
                    it->second.deadline = Clock::now();  // the progress thread ends it next
                    g_engine.load()->wake();
                }
            }
        }
    }
    if (closes_orderly(*c))
        close_orderly(fd, *c);
    if (g_engine != nullptr && c->side() == Conn::Side::server)
        forget_undecided(g_engine, *c);
    c->note_closing();  // a server still undecided: no request came (or one was declined)
    // From here on the fd number may be reused: nothing may touch it through `c`.  Both
    // under the engine's lock, so the progress thread's accept of a request claimed
    // meanwhile (accept_request) either ran before, and its registration goes here, or
    // finds the connection closed, never registering the number's next file.
    std::unique_lock<std::mutex> lk;
    if (g_engine != nullptr) {
        lk = std::unique_lock<std::mutex>(g_engine.load()->mu);
        g_engine.load()->unwatch_tcp(*c);
    }
    c->mark_closed();
}

bool foreign_child() noexcept { return g_engine != nullptr && g_engine.load()->pid != getpid(); }

namespace {
// An engine, and this process's (foreign_child).
bool ours() noexcept { return g_engine != nullptr && g_engine.load()->pid == getpid(); }

// `c`'s connection into `conns`, once (a dup's numbers share it).
void add_once(std::vector<std::shared_ptr<Conn>> &conns, Conn *c) noexcept
{
    std::shared_ptr<Conn> p = c != nullptr ? c->self() : nullptr;
    if (p && std::find(conns.begin(), conns.end(), p) == conns.end())
        conns.push_back(std::move(p));
}

// Every connection of `conns` back to its TCP socket (Conn::leave), bounded by
// RDMASOCK_FALLBACK_WAIT_MS in all: every fallback that can start does first, so that
// the peers answer together.
void hand_back(const std::vector<std::shared_ptr<Conn>> &conns, Conn::Leaving how) noexcept
{
    for (const auto &c : conns)
        c->leave_start(how);
    const auto until = Clock::now() + Ms(rt::config().fallback_wait_ms);
    for (const auto &c : conns) {
        c->leave(until, how);
        c->settle_copies();  // (a fork child's copy is the kernel socket's now too)
    }
}

// A server connection passed while still being decided: an RDMA request parked for it
// is declined at once (it stays known: one that comes later is declined as late).
void decline_passed(Conn *c) noexcept
{
    std::shared_ptr<rdma::CmId> drop;
    std::lock_guard<std::mutex> lk(g_engine.load()->mu);
    auto kit = g_engine.load()->keys.find(c);
    if (kit == g_engine.load()->keys.end())
        return;
    if (auto pit = g_engine.load()->parked.find(kit->second); pit != g_engine.load()->parked.end())
        drop = decline_parked_locked(g_engine, pit);
}
}  // namespace

void on_passed(const SocketRef *socks, size_t n) noexcept
{
    // A fork child's copies are asked for first (the receiver uses the kernel socket).
    for (size_t i = 0; i < n; ++i)
        if (Conn *c = Conn::of(socks[i]->transport))
            c->ask_copy();
    for (size_t i = 0; i < n; ++i)
        if (Conn *c = Conn::of(socks[i]->transport))
            c->claim_copy();
    if (!ours())
        return;
    // (A pass to this process itself cannot be told from one to another.)
    std::vector<std::shared_ptr<Conn>> back;
    for (size_t i = 0; i < n; ++i) {
        Conn *c = Conn::of(socks[i]->transport);
        if (c != nullptr && c->note_passed())
            decline_passed(c);
        else
            add_once(back, c);
    }
    if (!back.empty())
        hand_back(back, Conn::Leaving::pass);
}

namespace {
// The progress thread sends what the closed connections still have to send (a stopped
// peer's): the process waits for it (exit, exec), in the same bounds (Conn::draining).
void wait_for_drains() noexcept
{
    const auto until = Clock::now() + Ms(rt::config().linger_ms);
    while (g_engine.load()->running()) {
        {
            std::lock_guard<std::mutex> lk(g_engine.load()->mu);
            if (g_engine.load()->drains.empty() || Clock::now() >= until)
                break;
            g_engine.load()->wake();
        }
        usleep(10000);
    }
}
}  // namespace

void at_exit() noexcept
{
    if (!ours())
        return;
    // Connections a fork child that lives still holds a copy of go on for it over TCP
    // (each close below would hand its own back, one after another).
    std::vector<std::shared_ptr<Conn>> shared;
    fdt::for_each([&shared](int, const SocketRef &s) {
        Conn *c = s->offloaded() ? Conn::of(s->transport) : nullptr;
        if (c != nullptr && c->copies_held() && c->take_for_copies())
            add_once(shared, c);
    });
    hand_over_to_copies(shared);
    // First every server socket takes no RDMA request from now on (the closes below may
    // each wait a while): one still in maybe stays on TCP.  (Under TSan's timing a
    // client's request came after this step, and the progress thread switched the
    // connection the exit then cut: the client read ECONNRESET, parity
    // exit_with_connection_open.)
    fdt::for_each([](int, const SocketRef &s) {
        if (s->transport == nullptr || !s->offloaded())
            return;
        auto *c = Conn::of(s->transport);
        if (c->side() == Conn::Side::server)
            c->refuse_requests();
    });
    fdt::for_each([](int fd, const SocketRef &s) {
        if (s->transport == nullptr || !s->offloaded())
            return;
        auto *c = Conn::of(s->transport);
        // (A client still negotiating too: a PROOF left unread in its stream would make
        // the kernel's close at exit a reset; parity case stdio_flushed_at_exit under
        // TSan's timing, where the server's PROOF came before the child's exit.  A
        // server verifying too, the same way for its client's CONFIRM: its wait at exit
        // is short, Conn::close_connection.)
        if (closes_orderly(*c))
            close_orderly(fd, *c, true);
    });
    wait_for_drains();
}

void before_exec() noexcept
{
    // A fork child's copies of its parent's connections: each the new program inherits
    // (a descriptor without close-on-exec) is asked for and becomes a kernel socket; the
    // others the exec closes.
    std::vector<std::shared_ptr<Conn>> kept;
    fdt::for_each([&kept](int fd, const SocketRef &s) {
        Conn *c = Conn::of(s->transport);
        const int fl = c != nullptr && c->is_copy() ? RS_REAL(fcntl)(fd, F_GETFD) : -1;
        if (fl >= 0 && !(fl & FD_CLOEXEC) && c->ask_copy())
            add_once(kept, c);
    });
    for (const auto &c : kept)  // (asked all first: the owners answer together)
        c->claim_copy();
    fdt::for_each([](int, const SocketRef &s) {
        Conn *c = Conn::of(s->transport);
        if (c != nullptr && c->is_copy())
            c->drop_copy();  // (one claimed above: already)
    });
    if (!ours())
        return;  // (nothing of ours in any stream; also a fork child's copies: the parent's)
    // Each connection once, whatever its numbers (a dup shares it), close-on-exec or not:
    // one the exec closes then ends as the kernel's close ends it (every byte, then the
    // FIN), and if the exec fails the program goes on with it over TCP.
    std::vector<std::shared_ptr<Conn>> conns;
    fdt::for_each([&conns](int, const SocketRef &s) { add_once(conns, Conn::of(s->transport)); });
    hand_back(conns, Conn::Leaving::exec);
    for (const auto &c : conns)
        c->let_copies_go();  // (the new image knows nothing of the table)
    wait_for_drains();
}

void release_rdma(Conn &c) noexcept
{
    if (c.cm_id() != nullptr)
        rdma_disconnect(c.cm_id()->get());
}

void retire(Conn &c) noexcept
{
    c.mark_closed();  // idempotent; also leaves the pending count
    Engine *e = g_engine;
    if (e == nullptr)
        return;
    if (c.side() == Conn::Side::server)
        forget_undecided(e, c);
    std::lock_guard<std::mutex> lk(e->mu);
    if (c.take_counted())
        rt::g_offloaded.fetch_sub(1, std::memory_order_relaxed);
    e->retiring.push_back(&c);
    e->wake();
}

void before_fork() noexcept { rdma::device_maps::before_fork(); }
void lock_for_fork() noexcept { Conn::lock_drains(); }
void unlock_after_fork() noexcept { Conn::unlock_drains(); }

void after_fork_parent(pid_t child) noexcept
{
    // A connection shared with the child (process/copies.hh): the child may ask for it.
    if (child > 0 && g_engine != nullptr && g_engine.load()->running() && copies::mapped()) {
        g_engine.load()->copies_watch.store(true, std::memory_order_relaxed);
        g_engine.load()->wake();
    }
}

void after_fork_child() noexcept
{
    kits::after_fork_child();
    rdma::device_maps::after_fork_child();
    // How this child wakes the parent's engine when it wants a connection of the
    // parent's it holds a copy of.
    if (g_engine != nullptr && g_engine.load()->running() && copies::fork_shares())
        copies::keep_wake(g_engine.load()->pid, util::dup_high(g_engine.load()->wake_fd()));
    copies::note_fork_shares(false);
    new (&g_start_mu) std::mutex();
    new (&g_takeover_mu) std::mutex();
    // The parent's thread does not exist here and its RDMA objects are not ours: drop
    // our view without destroying anything (the parent still owns them), closing our
    // copies of its descriptors.  rdma-core's own state is the parent's too: the next
    // connection that may be offloaded starts an engine of this process's own, on a
    // fresh copy of rdma-core (rdma/dl.hh).
    if (g_engine != nullptr) {
        Conn::drop_drains_in_child();
        g_engine.load()->close_inherited();
        g_engine = nullptr;  // leaked on purpose: its members refer to the parent's resources
    }
    if (rdma::dl::after_fork_child())
        g_fork_reloads = true;
}

void set_comp_watch(Conn &c, bool on) noexcept
{
    Engine *e = g_engine;
    if (e == nullptr || !e->running())
        return;
    // No engine lock here: a connection's lock may be held (a switch to RDMA adds the
    // shadow registrations), and the engine's lock comes first.
    if (on)
        e->watch_comp(c);
    else
        e->unwatch_comp(c);
}

void watch_tcp_out(Conn &c, bool on) noexcept
{
    Engine *e = g_engine;
    if (e == nullptr || !e->running())
        return;
    const int fd = c.watched_as();
    if (fd < 0)
        return;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLET | (on ? EPOLLOUT : 0u);
    ev.data.u64 = reinterpret_cast<uint64_t>(&c) | kTcp;
    RS_REAL(epoll_ctl)(e->ep(), EPOLL_CTL_MOD, fd, &ev);
}

void move_tcp_watch(Conn &c, int from, int to) noexcept
{
    Engine *e = g_engine;
    if (e == nullptr || !e->running())
        return;
    std::lock_guard<std::mutex> lk(e->mu);
    if (c.watched_as() != from)
        return;
    // The registration belongs to the number it was made with: deleted while `from`
    // still names the socket, made again under `to` (else it would outlive the
    // program's close, reporting to `c` for as long as the socket lives).
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLET | (c.tcp_out_watched() ? EPOLLOUT : 0u);
    ev.data.u64 = reinterpret_cast<uint64_t>(&c) | kTcp;
    RS_REAL(epoll_ctl)(e->ep(), EPOLL_CTL_DEL, from, nullptr);
    c.set_watched_as(RS_REAL(epoll_ctl)(e->ep(), EPOLL_CTL_ADD, to, &ev) == 0 ? to : -1);
}

void clear_cache() noexcept
{
    if (g_engine == nullptr)
        return;
    std::lock_guard<std::mutex> lk(g_engine.load()->mu);
    g_engine.load()->peers.clear();
}

}  // namespace rdmasock::offload
