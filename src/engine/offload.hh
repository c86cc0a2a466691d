// Connection offload: the client and server sides of the negotiation
// (docs/protocol.md) and the progress thread that serves rdma_cm events, completion
// channels and the liveness of offloaded connections' TCP sockets.
//
// The progress thread starts at the first socket that could be offloaded (a listen()
// or a connect() while an RDMA device is present), never at load.
#pragma once

#include "process/runtime.hh"
#include "process/socket.hh"

namespace rdmasock::offload {

// connect() made (or, nonblocking, started) the TCP connection `fd`: start negotiating
// RDMA in the background (the program uses the TCP connection meanwhile), or record
// why not.  `wait` (RDMASOCK_CONNECT_WAIT): return only once it is decided.
void client_negotiate(int fd, Socket &s, bool wait) noexcept;

// listen() succeeded on a tracked socket: open the RDMA listener on the same address
// and port, in the RDMA port space.
void on_listen(int fd, Socket &s) noexcept;

// listen() failed after on_listen(): close the RDMA listener again.
void drop_listener(Socket &s) noexcept;

// A listening socket this process uses (accepts on, or waits on with epoll): if it was
// inherited from a process that is gone, this one takes over its RDMA listener.
void listener_used(Socket &ls) noexcept;

// accept() on listener `ls` returned `fd`, tracked as `s`.
void on_accept(Socket &ls, int fd, Socket &s) noexcept;

// The program passes `s` on with SCM_RIGHTS (before the message is sent): the receiver
// may be another process, which uses the kernel socket.  A server connection still being
// decided stays on TCP (Conn::note_passed), and an RDMA request parked for it is
// declined at once; any other goes back to its TCP socket first, as at exec
// (Conn::leave), bounded by RDMASOCK_FALLBACK_WAIT_MS.
// The connections of one sendmsg() or sendmmsg() (`n` sockets, a dup's twice) are seen
// to together, as at exec.
void on_passed(const SocketRef *socks, size_t n) noexcept;

// The operator's view (preload/report.hh): `open` makes its socket when the engine
// starts, `answer` runs on the progress thread when it is readable.
void set_report(int (*open)() noexcept, void (*answer)(int fd) noexcept) noexcept;

// close() of the last fd of `s` (before the kernel close): orderly or abortive
// teardown of an offloaded connection; a listener's RDMA side is closed.
void on_close(int fd, Socket &s) noexcept;

// Process exit (library destructor, run by exit()): every offloaded connection still
// open sends its FIN and waits (bounded) until its written bytes reached the peer, so
// a program that writes and then exits loses nothing.  _exit() skips this.
void at_exit() noexcept;

// execve() and its family, before the call: the new program uses the inherited sockets
// through the kernel alone.  Each connection of this process goes back to its TCP
// socket first (Conn::leave: a negotiation ends, a connection on RDMA falls back,
// one that cannot is reset), bounded by RDMASOCK_FALLBACK_WAIT_MS in all; the closed
// ones still sending their last bytes are waited for as at exit.  A fork child's copies
// of its parent's connections that the new program inherits are asked for first
// (Conn::claim_copy: the parent hands them back to TCP); those the exec closes are let go.
void before_exec() noexcept;

// A child the library's fork() did not make (_Fork, a raw clone or fork system call):
// the engine and its connections are the parent's, which the child's exit and exec
// must not end or hand back.
bool foreign_child() noexcept;

// Before fork(), before anything is held: the device memory of this process's queues,
// which a child never uses, is not copied into it (rdma/device_maps.hh).
void before_fork() noexcept;
// Held across fork() (by the thread that forks, released in parent and child): what
// the child inherits is consistent.
void lock_for_fork() noexcept;
void unlock_after_fork() noexcept;
// In a fork child: the parent's RDMA resources and thread are not ours.
void after_fork_child() noexcept;
// In the parent after fork() made `child` (-1: it failed).
void after_fork_parent(pid_t child) noexcept;

// Forget cached negative results (tests).
void clear_cache() noexcept;

}  // namespace rdmasock::offload
