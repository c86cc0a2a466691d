// The client side of the negotiation (docs/protocol.md, Connection setup): resolve,
// build the queue pair, send the HELLO, handle the answer; what it learns about the
// peer goes to Peers.
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <poll.h>
#include <sys/random.h>

#include "base/log.hh"
#include "base/real.hh"
#include "engine/engine.hh"
#include "engine/offload.hh"

namespace rdmasock::offload {

namespace {

// The IB CM's reject reason for a request to a service ID nobody listens on
// (IB_CM_REJ_INVALID_SERVICE_ID).
constexpr int kRejectNoListener = 8;

// The rdma_cm event that ended a step, as a reason.
Reason failure_reason(const rdma_cm_event *ev) noexcept
{
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_ERROR:
        return Reason::not_rdma_addr;
    case RDMA_CM_EVENT_ROUTE_ERROR:
        return Reason::no_route;
    case RDMA_CM_EVENT_REJECTED: {
        // No DECLINE: rejected by the peer's RDMA stack.  With the reject reason of no
        // listener on that port (IB and RoCE: 8, invalid service ID; iWARP:
        // ECONNREFUSED) the peer runs no rdmasock there, which the engine remembers for
        // the next connections; any other reason (the peer's stack out of resources,
        // a consumer's own reject) is about this request only.
        const void *pd = ev->param.conn.private_data;
        size_t len = pd ? ev->param.conn.private_data_len : 0;
        if (!neg::is_decline(pd, len))
            return ev->status == kRejectNoListener || ev->status == -ECONNREFUSED ? Reason::peer_no_rdmasock
                                                                                  : Reason::rejected;
        // (A redirect not followed: a second one, or the program closed the socket.)
        const Reason r = neg::decode_decline(pd, len);
        return r == Reason::redirected ? Reason::rejected : r;
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
        RS_DEBUG("negotiation fd=%d: route %ld us, resources %ld us, connect %ld us", n.conn->shown_fd(), n.t_route,
                 n.t_res - n.t_route, us_since(n.t0) - n.t_res);
        return;
    }
    if (n.connecting)
        RS_DEBUG("negotiation fd=%d: route %ld us, resources %ld us, no answer after %ld us: %s", n.conn->shown_fd(),
                 n.t_route, n.t_res - n.t_route, us_since(n.t0) - n.t_res, reason_code(r));
    else
        RS_DEBUG("negotiation fd=%d: %s after %ld us", n.conn->shown_fd(), reason_code(r), us_since(n.t0));
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
        if (it->second.abandoned) {  // (before its kit: the next ones wait behind this step)
            finish_client(c, Reason::closed_early, drop);
            return true;
        }
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
    if (r == Reason::none && n.abandoned)
        r = Reason::closed_early;  // (closed meanwhile, another probe of the host learns)
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
        if (n.abandoned)
            r = Reason::closed_early;
        else if (rdma_resolve_route(n.id->get(), static_cast<int>(switch_window().count())) != 0)
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
        // Whoever accepted knows the nonce: the PROOF in the TCP stream, next, tells
        // whether it is the TCP peer; then SWITCH, and (once it completed) the CONFIRM.
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
                     c->shown_fd(), static_cast<long>(std::chrono::duration_cast<std::chrono::microseconds>(
                                      Clock::now() - n.t_connect).count()));
            r = Reason::timeout;
        }
        if (r == Reason::none)
            r = c->client_established(n.t_connect + switch_window() - switch_margin());
        if (r == Reason::none) {
            sockaddr_storage peer = n.peer;
            finish_client(c, Reason::none, drop);
            peers.remember(reinterpret_cast<sockaddr *>(&peer), Reason::none);
            return;
        }
        break;
    }
    default:
        RS_DEBUG("negotiation fd=%d: %s (status %d)", c->shown_fd(), rdma_event_str(ev->event), ev->status);
        if (ev->event == RDMA_CM_EVENT_REJECTED && !n.redirected && !n.orphaned && ev->param.conn.private_data) {
            // The port's holder sends us on to the process that accepted the connection.
            const uint16_t port = neg::decode_redirect(ev->param.conn.private_data, ev->param.conn.private_data_len);
            if (port != 0) {
                r = redirect_client(n, port, drop);
                if (r == Reason::none)
                    return;
                break;
            }
        }
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

Reason Engine::redirect_client(ClientNeg &n, uint16_t port, std::shared_ptr<rdma::CmId> &drop) noexcept
{
    // mu held.  The request's queue pair and rings go with its id, which is destroyed
    // only once the REJECTED is acknowledged (in `drop`, or in n.id when this fails:
    // finish_client() hands it to `drop` then); the new id gets new ones at its
    // ROUTE_RESOLVED.
    n.redirected = true;
    n.answered = true;  // rdmasock runs there
    n.connecting = false;
    if (!n.conn->restart_client_rdma())
        return Reason::closed_early;  // (the connection was decided meanwhile)
    int err = 0;
    auto id = rdma::CmId::create(cm_, n.conn.get(), RDMA_PS_TCP, &err);
    if (!id)
        return Reason::resource;
    sockaddr_storage dst = n.peer, src = n.local;
    if (dst.ss_family == AF_INET) {
        reinterpret_cast<sockaddr_in *>(&dst)->sin_port = htons(port);
        reinterpret_cast<sockaddr_in *>(&src)->sin_port = 0;
    } else {
        reinterpret_cast<sockaddr_in6 *>(&dst)->sin6_port = htons(port);
        reinterpret_cast<sockaddr_in6 *>(&src)->sin6_port = 0;
    }
    // (A failure here leaves no event of the new id to acknowledge: it goes at once.)
    if (rdma_resolve_addr(id->get(), reinterpret_cast<sockaddr *>(&src), reinterpret_cast<sockaddr *>(&dst),
                          static_cast<int>(switch_window().count())) != 0)
        return Reason::not_rdma_addr;
    drop = std::move(n.id);
    n.id = std::move(id);
    n.deadline = Clock::now() + (n.wait ? answer_window() : switch_window());
    RS_DEBUG("negotiation fd=%d: sent on to port %u (the process that accepted the connection)", n.conn->shown_fd(),
             port);
    return Reason::none;
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
    if (r == Reason::none && e == nullptr)  // (forked_child: a fork child without rdma-core of its own)
        r = rt::default_reason() == Reason::pending ? Reason::resource : rt::default_reason();
    if (r == Reason::none) {  // what earlier probes learnt of the peer
        std::lock_guard<std::mutex> lk(e->mu);
        r = e->peers.admit(reinterpret_cast<sockaddr *>(&n.peer), &n.backoff);
    }
    std::shared_ptr<Conn> conn;
    if (r == Reason::none) {
        e->prepare();  // (here, in the program's connect(), not on the progress thread)
        try {
            conn = std::make_shared<Conn>(Conn::Side::client, fd, upcalls());
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
    // negotiation's deadline: Peers::answer_wait() after the request), or when the
    // server's PROOF waits behind bytes of its own the program has to read first (the
    // connection then switches as the program reads them).
    while (!conn->decided() && !conn->proof_behind_bytes(std::chrono::milliseconds(100))) {
        pollfd p{conn->rd_fd(), POLLIN, 0};
        RS_REAL(poll)(&p, 1, 5);
    }
    RS_DEBUG("connect fd=%d: %s", fd, conn->phase() == Conn::Phase::rdma ? "on RDMA" : "stays on TCP");
}
}  // namespace rdmasock::offload
