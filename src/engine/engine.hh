// The engine: the progress thread and the state it shares with the program's calls
// (connections, negotiations in flight, parked requests, listeners).  Internal to
// src/engine: offload.cc (the progress thread, the server side, the program's calls),
// client.cc (the client side of the negotiation).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <netinet/in.h>
#include <unistd.h>
#include <vector>

#include "base/real.hh"
#include "conn/rdma_conn.hh"
#include "conn/windows.hh"
#include "engine/peers.hh"
#include "process/copies.hh"
#include "process/registry.hh"
#include "process/socket.hh"
#include "rdma/owners.hh"
#include "wire/negotiate.hh"

namespace rdmasock::offload {

// What connections ask of the engine (conn/upcalls.hh), defined in offload.cc.
void interest(Conn &c) noexcept;
void release_rdma(Conn &c) noexcept;
void retire(Conn &c) noexcept;
void set_comp_watch(Conn &c, bool on) noexcept;
void watch_tcp_out(Conn &c, bool on) noexcept;
void move_tcp_watch(Conn &c, int from, int to) noexcept;
// The Upcalls every Conn the engine makes is given.
Upcalls &upcalls() noexcept;

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;
using windows::answer_window;
using windows::switch_margin;
using windows::switch_window;

// A TCP connection's 4-tuple, as the client sees it: family, client address and port,
// server address and port.  IPv4-mapped IPv6 addresses are folded to IPv4.
using Key = std::array<uint8_t, 1 + 16 + 2 + 16 + 2>;

Key make_key(const sockaddr *client, const sockaddr *server) noexcept;

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
    // Orphaned while another probe of the host was under way, which learns the same:
    // ended at once (closed_early) rather than run on (queue pair, kit, the peer's time).
    bool abandoned = false;
    bool watched = false;  // the progress thread watches the TCP socket
    bool answered = false; // the peer's rdmasock answered (even if too late to switch)
    bool backoff = false;  // the host's last probe went unanswered: wait twice as long
    bool redirected = false;  // sent on to another port once already (a pre-fork server's worker)
};

struct Parked {  // a connection request no accept() has claimed yet
    std::shared_ptr<rdma::CmId> id;
    neg::Hello hello;
    Clock::time_point deadline;
    // Not accepted by this process: another process of the listener's group (a pre-fork
    // worker) may record it in the listener's table under this name.
    std::shared_ptr<Registry> reg;
    uint64_t name = 0;
};

// An RDMA listener: the port's own (made at listen(), with the table it shares with the
// processes that inherit the listener), or this process's own port, where requests sent
// on by the port's holder arrive (reg null).
struct Listener {
    std::shared_ptr<rdma::CmId> id;
    std::shared_ptr<Registry> reg;
};

// Milliseconds of the steady clock (the registry's time: every process of the host
// reads the same clock).
inline int64_t steady_ms(Clock::time_point t) noexcept
{
    return std::chrono::duration_cast<Ms>(t.time_since_epoch()).count();
}

class Engine {
public:
    bool start() noexcept;
    bool running() const noexcept { return started_.load(std::memory_order_acquire); }
    std::shared_ptr<rdma::CmChannel> channel() const noexcept { return cm_; }
    // On the program's thread, in a call that sets up a connection: make the
    // descriptors its set-up will need later on the progress thread (completion
    // channels, kits::prepare_channels).
    void prepare() noexcept;
    // The process the engine started in.  A child made without the library's fork()
    // (_Fork, a raw clone or fork system call) still sees the parent's engine and
    // connections: it must leave them alone (offload::ours()).
    const pid_t pid = getpid();

    std::mutex mu;  // guards everything below
    std::map<Conn *, std::shared_ptr<Conn>> conns;   // live connections with an id
    std::map<Conn *, ClientNeg> clients;             // client negotiations in flight
    std::map<Key, std::shared_ptr<Conn>> maybe;      // accepted, not decided
    std::map<Conn *, Key> keys;                      // the 4-tuple of each `maybe` entry
    std::map<Key, Parked> parked;                    // requests, not accepted yet
    std::map<rdma_cm_id *, Listener> listeners;
    // This process's own RDMA listeners, one per local address, on a port rdma_cm chose:
    // where the holder of a listener this process inherited sends requests on.
    struct Own {
        sockaddr_storage addr;
        std::shared_ptr<rdma::CmId> id;
        uint16_t port;
        int reserve_fd;  // a kernel TCP socket bound to the port: no TCP listener gets it
    };
    std::vector<Own> own;
    // The connections this process recorded in an inherited listener's table (a
    // worker's), forgotten there when they close.
    std::map<Conn *, std::pair<std::shared_ptr<Registry>, uint64_t>> recorded;
    // Listening sockets inherited from a process that still held their RDMA listener when
    // this one first used them: taken over once it is gone (timers()).
    std::vector<SocketRef> inherited;
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
    // Closed connections whose last messages are still going out (Conn::draining).
    std::vector<std::shared_ptr<Conn>> drains;
    bool draining(const Conn *c) const noexcept
    {
        for (const auto &d : drains)
            if (d.get() == c)
                return true;
        return false;
    }
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
    // The port of this process's own RDMA listener on `local`'s address (made on first
    // use); 0 when it cannot be made.  Takes mu.
    uint16_t own_listener(const sockaddr_storage &local) noexcept;
    // A REJECTED that names a port to go on to (mu held): the negotiation starts again
    // there, on a new id; Reason::none, or why not.
    Reason redirect_client(ClientNeg &n, uint16_t port, std::shared_ptr<rdma::CmId> &drop) noexcept;
    // Connections of this process whose copies fork children hold (process/copies.hh):
    // looked at in timers() while some may still be asked for, every 250 ms at least.
    std::atomic<bool> copies_watch{false};
    Clock::time_point copies_look{};
    uint64_t copies_asks_seen = 0;
    unsigned copies_looks = 0;
    // What a fork child writes to wake this engine (a copy's holder asking for it).
    int wake_fd() const noexcept { return cmd_efd_; }
    // timers(): the connections some holder wants (mu held), then handed back on a
    // thread of their own.
    void wanted_copies(Clock::time_point now, std::vector<std::shared_ptr<Conn>> &handing) noexcept;
    void hand_to_copies(std::vector<std::shared_ptr<Conn>> conns_wanted) noexcept;
    // In a fork child: close this process's copies of the parent's engine descriptors.
    void close_inherited() noexcept;
    // Wake timers() when process `p` (the holder of an inherited listener) exits (mu held).
    void watch_holder(pid_t p) noexcept;

private:
    void loop() noexcept;
    void on_cm_events() noexcept;
    void handle(rdma_cm_event *ev) noexcept;
    // RDMA_CM_EVENT_DEVICE_REMOVAL for an id on `ctx` (once its event is acknowledged).
    void device_gone(ibv_context *ctx) noexcept;
    int timers() noexcept;  // returns the epoll timeout until the next deadline (-1: none)
    void reject(rdma_cm_id *id, Reason why) noexcept;
    // A parked request whose connection another process of the group recorded: on to it.
    bool send_on(Parked &p, Clock::time_point now) noexcept;

    std::map<pid_t, int> holder_fds_;  // pidfds of the holders watch_holder() watches
    bool holder_exited_ = false;       // one of them fired (the loop sets it)
    bool holder_poll_ = false;         // no pidfd: look every second
    Clock::time_point next_holder_poll_{};
    std::atomic<bool> started_{false};
    int ep_ = -1;
    int cmd_efd_ = -1;
    int report_fd_ = -1;  // the operator's view (offload::set_report), tagged kCm with its address
    std::shared_ptr<rdma::CmChannel> cm_;
    std::vector<std::shared_ptr<rdma::Context>> devices_;  // librdmacm's, pinned for the engine's life
};

// The queue pair's local ACK timeout: 4.096 us * 2^18 ~ 1 s per try, 7 tries.  Under a
// loaded machine (or software RoCE under emulation) the default (~67 ms) lets a slow
// The queue pair's local ACK timeout (see offload.cc).
void set_ack_timeout(rdma_cm_id *id) noexcept;
// The engine of this process (null before the first connection that may be offloaded).
extern std::atomic<Engine *> g_engine;
// The engine, started if need be; null when it cannot run (rdma-core cannot be loaded).
Engine *engine() noexcept;
unsigned ring_log2() noexcept;
// The largest receive ring of a peer we accept to mirror.
unsigned max_peer_ring_log2() noexcept;
bool loopback(const sockaddr_storage &a) noexcept;
long us_since(std::chrono::steady_clock::time_point t0) noexcept;

}  // namespace rdmasock::offload
