// What a connection asks of the engine that owns it.  The engine gives one Upcalls to
// every Conn it makes (Conn's constructor), so the connection's floor never includes
// the engine's headers (docs/architecture.md).
#pragma once

namespace rdmasock {

class Conn;

class Upcalls {
public:
    // The program starts reading (or waiting for input) on server connection `c` that
    // is still undecided: an RDMA request parked for it may now be accepted.
    virtual void interest(Conn &c) noexcept = 0;
    // `c` decided on TCP: disconnect and free its RDMA side.
    virtual void release_rdma(Conn &c) noexcept = 0;
    // The socket owning `c` is gone: keep its rings until the peer is done (or a
    // timeout), then free everything.
    virtual void retire(Conn &c) noexcept = 0;
    // The progress thread starts (on) or stops (off) handling `c`'s completions.
    virtual void set_comp_watch(Conn &c, bool on) noexcept = 0;
    // The progress thread also watches (on) `c`'s TCP socket for POLLOUT.
    virtual void watch_tcp_out(Conn &c, bool on) noexcept = 0;
    // `c`'s calls move from number `from` to `to` (both open now, `from` about to
    // close): the progress thread's watch of the TCP socket moves with them.
    virtual void move_tcp_watch(Conn &c, int from, int to) noexcept = 0;
    // `c` (the program's `fd`) switched to RDMA: its readiness moves to its eventfds.
    virtual void switched_to_rdma(int fd, Conn &c) noexcept = 0;
    // `fd` decided on TCP: its readiness stays with the kernel.
    virtual void decided_tcp(int fd) noexcept = 0;
    // `c` has a deadline now (Conn::on_timer): the progress thread, which may be asleep
    // with none, looks at its timers again.
    virtual void timer_set(Conn &c) noexcept = 0;

protected:
    ~Upcalls() = default;
};

}  // namespace rdmasock
