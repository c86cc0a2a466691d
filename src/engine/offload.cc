#include "engine/offload.hh"

#include <arpa/inet.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "base/copy.hh"
#include "base/fd.hh"
#include "base/log.hh"
#include "base/real.hh"
#include "conn/rdma_conn.hh"
#include "conn/windows.hh"
#include "engine/peers.hh"
#include "engine/readiness.hh"
#include "process/fd_table.hh"
#include "process/runtime.hh"
#include "rdma/dl.hh"
#include "rdma/kit.hh"
#include "rdma/owners.hh"
#include "wire/negotiate.hh"

namespace rdmasock::offload {

// What connections ask of the engine (conn/upcalls.hh), defined further down.
void interest(Conn &c) noexcept;
void release_rdma(Conn &c) noexcept;
void retire(Conn &c) noexcept;
void set_comp_watch(Conn &c, bool on) noexcept;
void watch_tcp_out(Conn &c, bool on) noexcept;

namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;
using windows::answer_window;
using windows::switch_margin;
using windows::switch_window;

// The Upcalls every Conn the engine makes is given.
class EngineUpcalls final : public Upcalls {
public:
    void interest(Conn &c) noexcept override { offload::interest(c); }
    void release_rdma(Conn &c) noexcept override { offload::release_rdma(c); }
    void retire(Conn &c) noexcept override { offload::retire(c); }
    void set_comp_watch(Conn &c, bool on) noexcept override { offload::set_comp_watch(c, on); }
    void watch_tcp_out(Conn &c, bool on) noexcept override { offload::watch_tcp_out(c, on); }
    void switched_to_rdma(int fd, Conn &c) noexcept override { readiness::on_switch_to_rdma(fd, c); }
    void decided_tcp(int fd) noexcept override { readiness::on_decided_tcp(fd); }
};
EngineUpcalls g_upcalls;

// A TCP connection's 4-tuple, as the client sees it: family, client address and port,
// server address and port.  IPv4-mapped IPv6 addresses are folded to IPv4.
using Key = std::array<uint8_t, 1 + 16 + 2 + 16 + 2>;

Key make_key(const sockaddr *client, const sockaddr *server) noexcept
{
    Key k{};
    uint8_t f1 = 0, f2 = 0;
    put_addr(k.data() + 1, client, &f1);
    put_addr(k.data() + 19, server, &f2);
    k[0] = f1;
    return k;
}

// Tag in epoll data: pointer | kind.
enum Kind : uint64_t { kCm = 1, kCmd = 2, kComp = 3, kTcp = 0 };

// A client negotiation in flight, driven by rdma_cm events on the progress thread
// while the program already uses the TCP connection.
struct ClientNeg {
    std::shared_ptr<Conn> conn;
    std::shared_ptr<rdma::CmId> id;
    sockaddr_storage local{};
    sockaddr_storage peer{};
    neg::Hello hello;
    Clock::time_point t0{};
    Clock::time_point deadline{};  // of the current step
    long t_route = 0, t_res = 0;   // microseconds since t0 (debug log)
    Clock::time_point t_connect{}; // rdma_connect sent
    bool connecting = false;       // rdma_connect sent
    bool wait = false;             // connect() waits for the outcome (RDMASOCK_CONNECT_WAIT)
    // The program closed the socket first (reason closed_early): the negotiation runs on
    // only so that its outcome about the peer is cached; tcp_ok: the TCP connection had
    // been made (a refused connect says nothing about RDMA).
    bool orphaned = false;
    bool tcp_ok = false;
    bool watched = false;  // the progress thread watches the TCP socket
    bool answered = false; // the peer's rdmasock answered (even if too late to switch)
    bool backoff = false;  // the host's last probe went unanswered: wait twice as long
};

struct Parked {  // a connection request no accept() has claimed yet
    std::shared_ptr<rdma::CmId> id;
    neg::Hello hello;
    Clock::time_point deadline;
};

class Engine {
public:
    bool start() noexcept;
    bool running() const noexcept { return started_; }
    std::shared_ptr<rdma::CmChannel> channel() const noexcept { return cm_; }

    std::mutex mu;  // guards everything below
    std::map<Conn *, std::shared_ptr<Conn>> conns;   // live connections with an id
    std::map<Conn *, ClientNeg> clients;             // client negotiations in flight
    std::map<Key, std::shared_ptr<Conn>> maybe;      // accepted, not decided
    std::map<Conn *, Key> keys;                      // the 4-tuple of each `maybe` entry
    std::map<Key, Parked> parked;                    // requests, not accepted yet
    std::map<rdma_cm_id *, std::shared_ptr<rdma::CmId>> listeners;
    // RDMA listeners whose TCP listener was closed while connections it accepted were
    // still undecided (a server that accepts one connection and closes its listener):
    // they go on receiving those connections' requests until the connections' windows
    // have passed; a new listener of this process on the same address takes one back.
    struct Lingering {
        std::shared_ptr<rdma::CmId> id;
        sockaddr_storage addr;
        Clock::time_point until;
    };
    std::vector<Lingering> lingering;
    Peers peers;  // what probes learnt of the peers
    std::vector<std::pair<std::shared_ptr<Conn>, Clock::time_point>> graveyard;
    std::vector<Conn *> retiring;
    // Requests claimed by an accept(): accepted by the progress thread, so accept()
    // itself never waits for queue pairs and rings to be created.
    std::vector<std::pair<std::shared_ptr<Conn>, Parked>> claimed;

    void watch(Conn &c) noexcept;
    void unwatch(Conn &c) noexcept;      // both fds (the TCP fd must still be open)
    void unwatch_tcp(Conn &c) noexcept;  // before the program's close of the TCP fd
    void unwatch_comp(Conn &c) noexcept;
    void watch_comp(Conn &c) noexcept;
    void wake() noexcept
    {
        uint64_t one = 1;
        ssize_t r = RS_REAL(write)(cmd_efd_, &one, sizeof one);
        (void)r;
    }
    void accept_request(const std::shared_ptr<Conn> &c, Parked &&p) noexcept;
    // A client negotiation step (mu held); ends it (finish_client) on failure.
    void client_event(ClientNeg &n, rdma_cm_event *ev, std::shared_ptr<rdma::CmId> &drop) noexcept;
    // ROUTE_RESOLVED of a client negotiation (takes mu itself); false: not a client's.
    bool client_route(rdma_cm_event *ev, std::shared_ptr<rdma::CmId> &drop) noexcept;
    void finish_client(Conn *c, Reason r, std::shared_ptr<rdma::CmId> &drop) noexcept;
    int ep() const noexcept { return ep_; }

private:
    void loop() noexcept;
    void on_cm_events() noexcept;
    void handle(rdma_cm_event *ev) noexcept;
    int timers() noexcept;  // returns the epoll timeout until the next deadline (-1: none)
    void reject(rdma_cm_id *id, Reason why) noexcept;

    bool started_ = false;
    int ep_ = -1;
    int cmd_efd_ = -1;
    std::shared_ptr<rdma::CmChannel> cm_;
};

// The queue pair's local ACK timeout: 4.096 us * 2^18 ~ 1 s per try, 7 tries.  Under a
// loaded machine (or software RoCE under emulation) the default (~67 ms) lets a slow
// but alive peer look dead; a dead peer is detected through its TCP connection anyway.
void set_ack_timeout(rdma_cm_id *id) noexcept
{
    uint8_t t = 18;
    rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof t);
}

Engine *g_engine = nullptr;
std::mutex g_start_mu;
unsigned ring_log2() noexcept;
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
    if (g_engine != nullptr && g_engine->running())
        return g_engine;
    std::lock_guard<std::mutex> lk(g_start_mu);
    if (g_engine == nullptr)
        g_engine = new (std::nothrow) Engine();
    if (g_engine == nullptr || (!g_engine->running() && !g_engine->start()))
        return nullptr;
    return g_engine;
}

bool Engine::start() noexcept
{
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
    // yet, so they can move to high numbers too.
    int ndev = 0;
    if (ibv_context **devs = rdma_get_devices(&ndev)) {
        for (int i = 0; i < ndev; ++i) {
            devs[i]->cmd_fd = util::move_high(devs[i]->cmd_fd);
            devs[i]->async_fd = util::move_high(devs[i]->async_fd);
        }
        rdma_free_devices(devs);
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kCm;
    RS_REAL(epoll_ctl)(ep_, EPOLL_CTL_ADD, cm_->fd(), &ev);
    ev.data.u64 = kCmd;
    RS_REAL(epoll_ctl)(ep_, EPOLL_CTL_ADD, cmd_efd_, &ev);
    // The thread must not take the program's signals.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    try {
        std::thread t([this] { loop(); });
        pthread_setname_np(t.native_handle(), "rdmasock");
        t.detach();
    } catch (...) {
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        return false;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    started_ = true;
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
    RS_REAL(epoll_ctl)(ep_, EPOLL_CTL_ADD, c.tcp_fd(), &ev);
}

void Engine::unwatch(Conn &c) noexcept
{
    unwatch_comp(c);
    unwatch_tcp(c);
}

void Engine::unwatch_tcp(Conn &c) noexcept
{
    RS_REAL(epoll_ctl)(ep_, EPOLL_CTL_DEL, c.tcp_fd(), nullptr);
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
                break;
            case kCmd:
                if (c == nullptr) {
                    uint64_t v;
                    ssize_t r = RS_REAL(read)(cmd_efd_, &v, sizeof v);
                    (void)r;
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
    std::vector<std::shared_ptr<Conn>> drop;
    std::vector<std::shared_ptr<rdma::CmId>> expired;
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
            watch_comp(*it->second);  // the peer's FIN frees it early
            conns.erase(it);
        }
        retiring.clear();
        for (auto it = graveyard.begin(); it != graveyard.end();) {
            if (it->first->peer_finished() || now >= it->second) {
                unwatch_comp(*it->first);
                drop.push_back(std::move(it->first));
                it = graveyard.erase(it);
            } else {
                next = std::min(next, it->second);
                ++it;
            }
        }
        for (auto it = parked.begin(); it != parked.end();) {
            if (now >= it->second.deadline) {
                reject(it->second.id->get(), Reason::rejected);
                expired.push_back(std::move(it->second.id));
                it = parked.erase(it);
            } else {
                next = std::min(next, it->second.deadline);
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
        std::vector<Conn *> late;
        for (auto &kv : clients) {
            if (now >= kv.second.deadline) {
                late.push_back(kv.first);
                continue;
            }
            next = std::min(next, kv.second.deadline);
        }
        for (Conn *c : late) {
            std::shared_ptr<rdma::CmId> drop;
            finish_client(c, Reason::timeout, drop);
            expired.push_back(std::move(drop));
        }
    }
    // Destruction (rdma_destroy_id, dereg) outside the lock.
    for (auto &c : drop)
        if (c->cm_id())
            rdma_disconnect(c->cm_id()->get());
    drop.clear();
    expired.clear();
    if (next == Clock::time_point::max())
        return -1;
    auto ms = std::chrono::duration_cast<Ms>(next - Clock::now()).count() + 1;
    return ms < 0 ? 0 : static_cast<int>(std::min<long long>(ms, 60000));
}

void Engine::reject(rdma_cm_id *id, Reason why) noexcept
{
    uint8_t d[neg::kDeclineSize];
    neg::encode_decline(why, d);
    rdma_reject(id, d, sizeof d);
}

void Engine::on_cm_events() noexcept
{
    for (;;) {
        rdma_cm_event *ev = nullptr;
        if (rdma_get_cm_event(cm_->get(), &ev) != 0)
            return;
        handle(ev);
    }
}

void Engine::accept_request(const std::shared_ptr<Conn> &c, Parked &&p) noexcept
{
    // mu held.
    Reason r = p.hello.ring.log2 > max_peer_ring_log2() ? Reason::limit : Reason::none;
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
        if (r == Reason::memlock || r == Reason::limit)
            c->note_declined(r);
        reject(p.id->get(), r);
        RS_DEBUG("declined an RDMA request: %s", reason_code(r));
        return;
    }
    // From here the connection's TCP bytes are delivered only up to the client's SWITCH.
    if (!c->begin_verify(p.hello.nonce)) {
        reject(p.id->get(), Reason::rejected);
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
            Parked p{owned, h, Clock::now() + answer_window()};
            auto mit = maybe.find(k);
            // Accepted only for a connection this process accepted and has started to
            // read from (or wait for input on): a process that accepts and forks a
            // child to serve the connection never binds RDMA to it behind the child.
            if (mit != maybe.end() && mit->second->phase() == Conn::Phase::maybe &&
                mit->second->interested()) {
                RS_DEBUG("RDMA request from port %u: its connection is being read (fd=%d)",
                         h.client_port, mit->second->tcp_fd());
                auto conn = mit->second;
                keys.erase(conn.get());
                maybe.erase(mit);
                accept_request(conn, std::move(p));
            } else if (mit != maybe.end() && mit->second->phase() == Conn::Phase::tcp) {
                // Its connection stopped waiting for a request (switch_window() after its
                // accept: the client was slow, e.g. setting up many connections at once)
                // and is on TCP: too late.  Both ends say so (timeout), at once.
                RS_DEBUG("RDMA request from port %u: its connection (fd=%d) is on TCP already: declined",
                         h.client_port, mit->second->tcp_fd());
                mit->second->note_late_request();
                reject(id, Reason::timeout);
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
            if (c != nullptr && conns.count(c)) {
                c->on_completion_event();  // take in what arrived before the disconnect
                c->abandon_rdma();
                rdma_disconnect(id);
            }
            break;
        default:
            break;
        }
    }
    rdma_ack_cm_event(ev);
    drop_after_ack.reset();
    if (destroy_after_ack != nullptr)
        rdma_destroy_id(destroy_after_ack);
}

unsigned long ring_bytes() noexcept
{
    unsigned long kb = static_cast<unsigned long>(rt::config().ring_kb);
    if (kb != 0)
        return kb * 1024ul;
    rlimit rl{};
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || geteuid() == 0)
        return 4ul << 20;
    unsigned long b = static_cast<unsigned long>(rl.rlim_cur) / 8;
    return b < (64ul << 10) ? (64ul << 10) : (b > (4ul << 20) ? (4ul << 20) : b);
}

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

// The rdma_cm event that ended a step, as a reason.
Reason failure_reason(const rdma_cm_event *ev) noexcept
{
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_ERROR:
        return Reason::not_rdma_addr;
    case RDMA_CM_EVENT_ROUTE_ERROR:
        return Reason::no_route;
    case RDMA_CM_EVENT_REJECTED: {
        // No DECLINE: rejected by rdma_cm itself (no RDMA listener on that port).
        const void *pd = ev->param.conn.private_data;
        size_t len = pd ? ev->param.conn.private_data_len : 0;
        if (!neg::is_decline(pd, len))
            return Reason::peer_no_rdmasock;
        return neg::decode_decline(pd, len);
    }
    case RDMA_CM_EVENT_UNREACHABLE:
        return Reason::timeout;
    default:
        return Reason::rejected;
    }
}

}  // namespace

void Engine::finish_client(Conn *c, Reason r, std::shared_ptr<rdma::CmId> &drop) noexcept
{
    // mu held.
    auto it = clients.find(c);
    if (it == clients.end())
        return;
    ClientNeg n = std::move(it->second);
    clients.erase(it);
    peers.ended(reinterpret_cast<sockaddr *>(&n.peer));
    // On RDMA the TCP socket stays watched (liveness, urgent data); a closed socket's fd
    // number may be another's now.
    if (n.watched && !n.orphaned && r != Reason::none)
        unwatch_tcp(*n.conn);
    if (r == Reason::none) {
        RS_DEBUG("negotiation fd=%d: route %ld us, resources %ld us, connect %ld us", n.conn->tcp_fd(), n.t_route,
                 n.t_res - n.t_route, us_since(n.t0) - n.t_res);
        return;
    }
    if (n.connecting)
        RS_DEBUG("negotiation fd=%d: route %ld us, resources %ld us, no answer after %ld us: %s", n.conn->tcp_fd(),
                 n.t_route, n.t_res - n.t_route, us_since(n.t0) - n.t_res, reason_code(r));
    else
        RS_DEBUG("negotiation fd=%d: %s after %ld us", n.conn->tcp_fd(), reason_code(r), us_since(n.t0));
    if (!n.orphaned)
        n.conn->client_failed(r);
    // The id (the conn's reference included) is destroyed once the event is
    // acknowledged: the peer's rdma_cm sees the request withdrawn.
    if (auto own = n.conn->release_client_rdma())
        n.id = std::move(own);
    drop = std::move(n.id);
    // Remembered (so the next connections skip the probe) only what says something
    // about the peer host or port, and only about a connection that was really made.  A
    // server's DECLINE (rejected) is about one connection (it was closed, or not read
    // in time), not about the port.
    if (!n.orphaned) {
        sockaddr_storage pa{};
        socklen_t pl = sizeof pa;
        n.tcp_ok = RS_REAL(getpeername)(n.conn->tcp_fd(), reinterpret_cast<sockaddr *>(&pa), &pl) == 0;
    }
    if ((r == Reason::peer_no_rdmasock || r == Reason::timeout || r == Reason::peer_no_device) && n.tcp_ok &&
        !n.answered)
        peers.remember(reinterpret_cast<sockaddr *>(&n.peer), r);
}

bool Engine::client_route(rdma_cm_event *ev, std::shared_ptr<rdma::CmId> &drop) noexcept
{
    // The queue pair and the registration take milliseconds: built without the engine's
    // lock, which connect(), close() and accept() take (only this thread handles the
    // id's events, and only it erases a negotiation).
    auto *c = Conn::of_cm_context(ev->id->context);
    std::shared_ptr<Conn> conn;
    std::shared_ptr<rdma::CmId> id;
    neg::Hello hello;
    Clock::time_point t0;
    {
        std::lock_guard<std::mutex> lk(mu);
        auto it = clients.find(c);
        if (it == clients.end())
            return false;
        conn = it->second.conn;
        id = it->second.id;
        hello = it->second.hello;
        t0 = it->second.t0;
        it->second.t_route = us_since(t0);
    }
    Reason r = conn->create_resources(id, ring_log2());
    if (r == Reason::none)
        r = conn->post_initial_receives();
    const long t_res = us_since(t0);
    uint8_t pd[neg::kHelloSize];
    if (r == Reason::none) {
        hello.ring = conn->local_ring();
        neg::encode(hello, pd);
        set_ack_timeout(id->get());
    }
    std::lock_guard<std::mutex> lk(mu);
    auto it = clients.find(c);
    if (it == clients.end())
        return true;
    ClientNeg &n = it->second;
    n.t_res = t_res;
    n.hello = hello;
    if (r == Reason::none) {
        rdma_conn_param param{};
        param.private_data = pd;
        param.private_data_len = sizeof pd;
        param.retry_count = 7;
        param.rnr_retry_count = 7;
        if (!n.orphaned) {
            watch(*c);  // liveness, and the CONFIRM's POLLOUT
            n.watched = true;
        }
        n.connecting = true;
        n.t_connect = Clock::now();
        if (rdma_connect(id->get(), &param) != 0) {
            r = Reason::rejected;
        } else {
            // A server parks a request until its program reads the connection, and
            // answers within 2 x probe timeout + 100 ms (declining it then): wait longer
            // than that, so a late answer is never an accepted connection we gave up on.
            // Nothing waits for this: the program uses the TCP connection meanwhile.  A
            // connect() that waits (RDMASOCK_CONNECT_WAIT) waits answer_wait(): as long as
            // answers have been taking, at least the probe timeout; then the connection
            // is TCP (timeout), and the request is withdrawn.
            n.deadline = Clock::now() + (n.wait ? peers.answer_wait(n.backoff) : Clock::duration(switch_window()));
        }
    }
    if (r != Reason::none)
        finish_client(c, r, drop);
    return true;
}

void Engine::client_event(ClientNeg &n, rdma_cm_event *ev, std::shared_ptr<rdma::CmId> &drop) noexcept
{
    // mu held.
    Conn *c = n.conn.get();
    Reason r = Reason::none;
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        // (The negotiation's deadline, set at its start, bounds this step too.)
        if (rdma_resolve_route(n.id->get(), static_cast<int>(switch_window().count())) != 0)
            r = Reason::no_route;
        break;
    case RDMA_CM_EVENT_ESTABLISHED: {
        n.answered = true;
        neg::Accept a;
        const void *pd = ev->param.conn.private_data;
        r = neg::decode(pd, pd ? ev->param.conn.private_data_len : 0, &a);
        if (r == Reason::none && !(a.nonce == n.hello.nonce))
            r = Reason::bad_message;
        if (r == Reason::none)  // from the request to the answer
            peers.answered_in(std::chrono::duration_cast<Estimate::us>(Clock::now() - n.t_connect));
        if (r == Reason::none && a.ring.log2 > max_peer_ring_log2())
            r = Reason::limit;
        if (r == Reason::none)
            r = c->set_peer_ring(a.ring);
        // The server runs rdmasock and accepted: SWITCH, then (once it completed) the
        // CONFIRM in the TCP stream.
        if (r == Reason::none && n.orphaned) {
            // The peer runs rdmasock: worth remembering; the connection itself is gone.
            peers.remember(reinterpret_cast<sockaddr *>(&n.peer), Reason::none);
            r = Reason::closed_early;
        }
        // The server waits for the SWITCH for switch_window() from its accept, which
        // came after our rdma_connect.  An answer handled late (this thread was busy with
        // other connections' set-up) could make our SWITCH arrive after the server gave
        // up, and its CONFIRM would then be bytes of the server program's stream: too
        // late, the connection stays on TCP, untouched.
        if (r == Reason::none && Clock::now() > n.t_connect + switch_window() - switch_margin()) {
            peers.remember(reinterpret_cast<sockaddr *>(&n.peer), Reason::none);  // it runs rdmasock
            RS_DEBUG("negotiation fd=%d: the answer was handled %ld us after the request: too late to switch",
                     c->tcp_fd(), static_cast<long>(std::chrono::duration_cast<std::chrono::microseconds>(
                                      Clock::now() - n.t_connect).count()));
            r = Reason::timeout;
        }
        if (r == Reason::none)
            r = c->client_established();
        if (r == Reason::none) {
            c->refresh_watch();  // the progress thread writes the CONFIRM at the SWITCH's completion
            sockaddr_storage peer = n.peer;
            finish_client(c, Reason::none, drop);
            peers.remember(reinterpret_cast<sockaddr *>(&peer), Reason::none);
            return;
        }
        break;
    }
    default:
        RS_DEBUG("negotiation fd=%d: %s (status %d)", c->tcp_fd(), rdma_event_str(ev->event), ev->status);
        r = failure_reason(ev);
        // A DECLINE comes from rdmasock on the peer: whatever it says is about this
        // connection (a timeout included), not a reason to skip the next probes.
        if (ev->event == RDMA_CM_EVENT_REJECTED && ev->param.conn.private_data != nullptr &&
            neg::is_decline(ev->param.conn.private_data, ev->param.conn.private_data_len)) {
            n.answered = true;
            peers.remember(reinterpret_cast<sockaddr *>(&n.peer), Reason::none);
        }
        break;
    }
    if (r != Reason::none)
        finish_client(c, r, drop);
}

void client_negotiate(int fd, Socket &s, bool wait) noexcept
{
    Reason base = rt::default_reason();
    if (base != Reason::pending) {  // no device, disabled
        s.reason.store(base, std::memory_order_relaxed);
        return;
    }
    ClientNeg n;
    socklen_t ll = sizeof n.local;
    if (RS_REAL(getsockname)(fd, reinterpret_cast<sockaddr *>(&n.local), &ll) != 0) {
        s.reason.store(Reason::not_connected, std::memory_order_relaxed);
        return;
    }
    memcpy(&n.peer, &s.peer, sizeof n.peer);
    // A loopback connection never leaves the host: no RDMA device carries it, and it is
    // not worth a probe.
    Reason r = loopback(n.local) ? Reason::not_rdma_addr : Reason::none;
    Engine *e = r == Reason::none ? engine() : nullptr;  // started only for a connection that may be offloaded
    if (r == Reason::none && e == nullptr)
        r = Reason::resource;
    if (r == Reason::none) {  // what earlier probes learnt of the peer
        std::lock_guard<std::mutex> lk(e->mu);
        r = e->peers.admit(reinterpret_cast<sockaddr *>(&n.peer), &n.backoff);
    }
    std::shared_ptr<Conn> conn;
    if (r == Reason::none) {
        try {
            conn = std::make_shared<Conn>(Conn::Side::client, fd, g_upcalls);
        } catch (...) {
            r = Reason::resource;
        }
    }
    int err = 0;
    if (r == Reason::none) {
        conn->set_self(conn);
        conn->set_socket(&s);
        n.id = rdma::CmId::create(e->channel(), conn.get(), RDMA_PS_TCP, &err);
        if (!n.id)
            r = Reason::resource;
    }
    neg::Hello &h = n.hello;
    if (r == Reason::none) {
        const auto &local = n.local;
        const auto &peer = n.peer;
        h.family = local.ss_family == AF_INET6 &&
                           !IN6_IS_ADDR_V4MAPPED(&reinterpret_cast<const sockaddr_in6 *>(&local)->sin6_addr)
                       ? AF_INET6
                       : AF_INET;
        if (getrandom(h.nonce.b, sizeof h.nonce.b, 0) != sizeof h.nonce.b)
            r = Reason::resource;
        if (local.ss_family == AF_INET) {
            memcpy(&h.client_addr, &reinterpret_cast<const sockaddr_in *>(&local)->sin_addr, 4);
            h.client_port = ntohs(reinterpret_cast<const sockaddr_in *>(&local)->sin_port);
            h.server_port = ntohs(reinterpret_cast<const sockaddr_in *>(&peer)->sin_port);
        } else {
            auto *l6 = reinterpret_cast<const sockaddr_in6 *>(&local);
            if (h.family == AF_INET)
                memcpy(&h.client_addr, l6->sin6_addr.s6_addr + 12, 4);
            else
                h.client_addr = l6->sin6_addr;
            h.client_port = ntohs(l6->sin6_port);
            h.server_port = ntohs(reinterpret_cast<const sockaddr_in6 *>(&peer)->sin6_port);
        }
        conn->set_nonce(h.nonce);
    }
    if (r != Reason::none) {
        s.reason.store(r, std::memory_order_relaxed);
        RS_DEBUG("connect fd=%d stays on TCP: %s", fd, reason_code(r));
        return;
    }
    // From here the socket takes the hooked path (its TCP bytes are counted) until the
    // negotiation ends, on the progress thread.
    s.transport = conn.get();
    s.reason.store(Reason::pending, std::memory_order_relaxed);
    conn->enter_pending();
    s.set_offloaded(true);
    // The request leaves from the TCP connection's own address and port (in the RDMA
    // port space).  A port rdma_cm picked at random could be one that a TCP listener of
    // this host is given later (while this id lingers after the close): that listener
    // would then get no RDMA listener.  The TCP connection's port is the kernel's to
    // give out, and it does not give it to a listener while the connection holds it.
    sockaddr_storage src = n.local;
    // rdma_cm's resolution steps: only an address that does not resolve takes that long,
    // and nothing waits for it (the negotiation's deadline bounds it too).
    const int tmo = static_cast<int>(switch_window().count());
    n.conn = conn;
    n.wait = wait;
    n.t0 = Clock::now();
    // Resolution and set-up (slow on a loaded machine): bounded by the switch window, or,
    // when connect() waits for them, by the answer window.
    n.deadline = n.t0 + (wait ? answer_window() : switch_window());
    rdma_cm_id *id = n.id->get();
    {
        std::shared_ptr<rdma::CmId> drop;  // destroyed after the lock is released
        std::lock_guard<std::mutex> lk(e->mu);
        e->peers.started(reinterpret_cast<sockaddr *>(&n.peer));
        e->conns.emplace(conn.get(), conn);
        e->clients.emplace(conn.get(), std::move(n));
        // Under the lock: the events it produces are handled once the entry exists.
        int rr = rdma_resolve_addr(id, reinterpret_cast<sockaddr *>(&src), reinterpret_cast<sockaddr *>(&s.peer), tmo);
        if (rr != 0 && errno == EADDRINUSE) {
            // (An id of an earlier connection on that port still lingers: any port.)
            if (src.ss_family == AF_INET)
                reinterpret_cast<sockaddr_in *>(&src)->sin_port = 0;
            else
                reinterpret_cast<sockaddr_in6 *>(&src)->sin6_port = 0;
            rr = rdma_resolve_addr(id, reinterpret_cast<sockaddr *>(&src), reinterpret_cast<sockaddr *>(&s.peer), tmo);
        }
        if (rr != 0)
            e->finish_client(conn.get(), Reason::not_rdma_addr, drop);
        else
            e->wake();  // the progress thread's next deadline
    }
    if (!wait)
        return;
    // RDMASOCK_CONNECT_WAIT: connect() returns once the connection is decided (the
    // negotiation's deadline: Peers::answer_wait() after the request).
    while (conn->phase() == Conn::Phase::maybe) {
        pollfd p{conn->rd_fd(), POLLIN, 0};
        RS_REAL(poll)(&p, 1, 5);
    }
    RS_DEBUG("connect fd=%d: %s", fd, conn->phase() == Conn::Phase::rdma ? "on RDMA" : "stays on TCP");
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
            RS_DEBUG("listen fd=%d: no RDMA listener (%s)", fd, strerror(bind_err));
            return;
        }
        id = std::move(it->id);
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
        std::lock_guard<std::mutex> lk(e->mu);
        e->listeners[id->get()] = id;
    }
    s.listener = id;
    s.listener_pid = getpid();
    RS_DEBUG("listen fd=%d: RDMA listener ready", fd);
}

void on_accept(Socket &ls, int fd, Socket &s) noexcept
{
    if (!ls.listener || ls.listener_pid != getpid() || g_engine == nullptr) {
        Reason r = rt::default_reason();
        if (ls.listener && ls.listener_pid != getpid())
            r = Reason::forked_listener;  // (the more precise of it and forked_child)
        else if (r == Reason::pending && ls.listener)
            r = Reason::forked_listener;
        else if (r == Reason::pending)  // (the listener's address, from on_listen)
            r = loopback(ls.local) ? Reason::not_rdma_addr : Reason::no_listener;
        s.reason.store(r, std::memory_order_relaxed);
        return;
    }
    Engine *e = g_engine;
    sockaddr_storage local{};
    socklen_t ll = sizeof local;
    if (RS_REAL(getsockname)(fd, reinterpret_cast<sockaddr *>(&local), &ll) != 0)
        return;
    ls.last_accept_ms.store(std::chrono::duration_cast<Ms>(Clock::now().time_since_epoch()).count(),
                            std::memory_order_relaxed);
    Key k = make_key(reinterpret_cast<sockaddr *>(&s.peer), reinterpret_cast<sockaddr *>(&local));
    auto conn = std::make_shared<Conn>(Conn::Side::server, fd, g_upcalls);
    conn->set_self(conn);
    conn->set_socket(&s);
    conn->set_maybe_deadline(Clock::now() + switch_window());
    s.transport = conn.get();
    s.reason.store(Reason::pending, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lk(e->mu);
        e->maybe[k] = conn;
        e->keys[conn.get()] = k;
        e->conns.emplace(conn.get(), conn);
    }
    // Until the first inbound bytes say otherwise, calls take the hooked path.
    conn->enter_pending();
    s.set_offloaded(true);
}

void interest(Conn &c) noexcept
{
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

// A server connection that never bound RDMA goes away: answer a request parked for it
// at once (the client falls back to TCP instead of waiting for its probe timeout).
void forget_undecided(Engine *e, Conn &c) noexcept
{
    std::shared_ptr<rdma::CmId> drop;
    {
        std::lock_guard<std::mutex> lk(e->mu);
        auto kit = e->keys.find(&c);
        if (kit == e->keys.end())
            return;
        auto pit = e->parked.find(kit->second);
        if (pit != e->parked.end()) {
            uint8_t d[neg::kDeclineSize];
            neg::encode_decline(Reason::rejected, d);
            rdma_reject(pit->second.id->get(), d, sizeof d);
            drop = std::move(pit->second.id);
            e->parked.erase(pit);
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
        // Connections it accepted within a switch window may still get their requests.
        const int64_t last = s.last_accept_ms.load(std::memory_order_relaxed);
        const auto until = Clock::time_point(Ms(last)) + switch_window();
        std::lock_guard<std::mutex> lk(g_engine->mu);
        if (last != 0 && Clock::now() < until) {
            g_engine->lingering.push_back(Engine::Lingering{id, s.local, until});
            g_engine->wake();  // its deadline
            RS_DEBUG("a listener closed: its RDMA listener stays for the connections it just accepted");
        } else {
            g_engine->listeners.erase(id->get());
        }
    }
    s.listener.reset();
}

void on_close(int fd, Socket &s) noexcept
{
    drop_listener(s);
    if (s.transport == nullptr)
        return;
    auto *c = Conn::of(s.transport);
    if (c->side() == Conn::Side::client && c->phase() == Conn::Phase::maybe && g_engine != nullptr) {
        // Closed while negotiating: all its bytes went over TCP.  The negotiation runs on
        // (without the socket) only to learn, for the cache, whether the peer has
        // rdmasock: short connections must not each pay a probe.
        c->client_failed(Reason::closed_early);
        sockaddr_storage pa{};
        socklen_t pl = sizeof pa;
        const bool tcp_ok = RS_REAL(getpeername)(fd, reinterpret_cast<sockaddr *>(&pa), &pl) == 0;
        std::lock_guard<std::mutex> lk(g_engine->mu);
        if (auto it = g_engine->clients.find(c); it != g_engine->clients.end()) {
            it->second.orphaned = true;
            it->second.tcp_ok = tcp_ok;
        }
    }
    // A server socket in verifying switches first (close_connection takes the CONFIRM).
    if (c->phase() == Conn::Phase::rdma ||
        (c->side() == Conn::Side::server && c->phase() == Conn::Phase::verifying)) {
        linger lg{};
        socklen_t len = sizeof lg;
        bool abortive = RS_REAL(getsockopt)(fd, SOL_SOCKET, SO_LINGER, &lg, &len) == 0 &&
                        lg.l_onoff && lg.l_linger == 0;
        c->close_connection(abortive);
    }
    if (g_engine != nullptr && c->side() == Conn::Side::server)
        forget_undecided(g_engine, *c);
    c->note_closing();  // a server still undecided: no request came (or one was declined)
    // From here on the fd number may be reused: nothing may touch it through `c`.
    c->mark_closed();
    if (g_engine != nullptr) {
        std::lock_guard<std::mutex> lk(g_engine->mu);
        g_engine->unwatch_tcp(*c);
    }
}

void at_exit() noexcept
{
    if (g_engine == nullptr)
        return;
    fdt::for_each([](int fd, const SocketRef &s) {
        if (s->transport == nullptr || !s->offloaded())
            return;
        auto *c = Conn::of(s->transport);
        if (c->phase() != Conn::Phase::rdma)
            return;
        linger lg{};
        socklen_t len = sizeof lg;
        bool abortive = RS_REAL(getsockopt)(fd, SOL_SOCKET, SO_LINGER, &lg, &len) == 0 &&
                        lg.l_onoff && lg.l_linger == 0;
        c->close_connection(abortive);
    });
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
    if (c.phase() == Conn::Phase::rdma)
        rt::g_offloaded.fetch_sub(1, std::memory_order_relaxed);
    e->retiring.push_back(&c);
    e->wake();
}

void after_fork_child() noexcept
{
    kits::after_fork_child();
    // The parent's thread does not exist here and its RDMA objects are not usable: drop
    // our view without destroying anything (the parent still owns them).
    if (g_engine != nullptr) {
        new (&g_start_mu) std::mutex();
        g_engine = nullptr;  // leaked on purpose: its members refer to the parent's resources
        rt::no_rdma_in_fork_child();
    }
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
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLET | (on ? EPOLLOUT : 0u);
    ev.data.u64 = reinterpret_cast<uint64_t>(&c) | kTcp;
    RS_REAL(epoll_ctl)(e->ep(), EPOLL_CTL_MOD, c.tcp_fd(), &ev);
}

void clear_cache() noexcept
{
    if (g_engine == nullptr)
        return;
    std::lock_guard<std::mutex> lk(g_engine->mu);
    g_engine->peers.clear();
}

}  // namespace rdmasock::offload
