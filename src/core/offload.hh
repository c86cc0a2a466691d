// Connection offload: the client and server sides of the negotiation
// (docs/protocol.md) and the progress thread that serves rdma_cm events, completion
// channels and the liveness of offloaded connections' TCP sockets.
//
// The progress thread starts at the first socket that could be offloaded (a listen()
// or a connect() while an RDMA device is present), never at load.
#pragma once

#include <chrono>

#include "core/runtime.hh"
#include "core/socket.hh"

namespace rdmasock {
class Conn;
}

namespace rdmasock::offload {

// The negotiation's time windows (docs/protocol.md), from RDMASOCK_PROBE_TIMEOUT_MS:
// a server answers an RDMA request within answer_window() (it parks one until the
// connection is read, and declines it then); it holds an undecided connection, and
// waits for a SWITCH and its CONFIRM, for switch_window() (longer, so that no answer
// within the first can come after the second).
inline std::chrono::milliseconds answer_window() noexcept
{
    return std::chrono::milliseconds(2 * rt::config().probe_timeout_ms + 100);
}
inline std::chrono::milliseconds switch_window() noexcept
{
    return std::chrono::milliseconds(2 * rt::config().probe_timeout_ms + 1000);
}
// A client switches only when it handles the server's answer at least this long before
// switch_window() has passed since its request: the SWITCH's way to the server's
// completion queue must fit in it.
inline std::chrono::milliseconds switch_margin() noexcept
{
    return std::chrono::milliseconds(500);
}

// connect() made (or, nonblocking, started) the TCP connection `fd`: start negotiating
// RDMA in the background (the program uses the TCP connection meanwhile), or record
// why not.  `wait` (RDMASOCK_CONNECT_WAIT): return only once it is decided.
void client_negotiate(int fd, Socket &s, bool wait) noexcept;

// listen() succeeded on a tracked socket: open the RDMA listener on the same address
// and port, in the RDMA port space.
void on_listen(int fd, Socket &s) noexcept;

// listen() failed after on_listen(): close the RDMA listener again.
void drop_listener(Socket &s) noexcept;

// accept() on listener `ls` returned `fd`, tracked as `s`.
void on_accept(Socket &ls, int fd, Socket &s) noexcept;

// close() of the last fd of `s` (before the kernel close): orderly or abortive
// teardown of an offloaded connection; a listener's RDMA side is closed.
void on_close(int fd, Socket &s) noexcept;

// The program starts reading (or waiting for input) on server connection `c` that is
// still undecided: an RDMA request parked for it may now be accepted.
void interest(Conn &c) noexcept;

// A Conn decided on TCP: disconnect and free its RDMA side.
void release_rdma(Conn &c) noexcept;

// The socket owning `c` is gone: keep its rings until the peer is done (or a timeout),
// then free everything.
void retire(Conn &c) noexcept;

// Process exit (library destructor, run by exit()): every offloaded connection still
// open sends its FIN and waits (bounded) until its written bytes reached the peer, so
// a program that writes and then exits loses nothing.  _exit() skips this.
void at_exit() noexcept;

// In a fork child: the parent's RDMA resources and thread are not ours.
void after_fork_child() noexcept;

// The progress thread starts (on) or stops (off) handling `c`'s completions
// (Conn::refresh_watch decides).  Level-triggered: an event that arrived meanwhile is
// seen when it starts.
void set_comp_watch(Conn &c, bool on) noexcept;

// The progress thread also watches (on) `c`'s TCP socket for POLLOUT: the rest of a
// CONFIRM waits for room in the send buffer.
void watch_tcp_out(Conn &c, bool on) noexcept;

// Forget cached negative results (tests).
void clear_cache() noexcept;

}  // namespace rdmasock::offload
