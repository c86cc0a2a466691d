// Connections with RDMA bound whose sockets fork children hold copies of.
//
// Such a connection belongs to the process that made it (its owner): the queue pair and
// the rings are usable only there.  The kernel, though, shares a socket between the
// processes that hold it, and a program may go on with it in the child (a server that
// read a request, then forks a child to answer it and closes its own copy).  So each
// such connection gets a slot, at the fork, in a table the owner shares with its fork
// children (anonymous shared memory, mapped by the first fork that needs it):
//
//   owned    the owner drives it over RDMA; a copy that is used asks for it (wanted);
//   wanted   a holder of a copy asked: the owner hands the connection back to its TCP
//   handing  socket (a fallback that leaves the ring's residue to the peer to resend);
//   tcp      done: the kernel socket carries the stream, for every process;
//   ended    it ended on RDMA (reset, or closed): a copy reports a reset.
//
// The owner also hands it back when it closes its copy while a child that still lives
// holds one (as the kernel's close of a shared socket does not end the connection).
//
// Lock-free, like the listeners' table (process/registry.hh): no process may leave a
// lock held by dying.  A slot is claimed by one compare-and-swap on its id and freed by
// its owner once no holder lives; a copy whose slot has another id reads it as ended.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <sys/types.h>

namespace rdmasock::copies {

enum class State : uint32_t { free = 0, owned = 1, wanted = 2, handing = 3, tcp = 4, ended = 5 };

// A connection's slot: its index and the id it was given.
struct Ref {
    uint32_t index = 0;
    uint64_t id = 0;
    explicit operator bool() const noexcept { return id != 0; }
};

// A slot for a connection of this process (owned), mapping the table first.  Called
// before a fork, so that the child shares the table.  Empty when the table cannot be
// mapped or is full (the connection's copies then report a reset, as before).
Ref add() noexcept;
// Before a fork, in the parent: a holder not known yet, named by the forking thread
// (fork_placeholder()); after it, the parent names the child in its place, or the child
// itself, whichever comes first (the child may be through with its copy, exec'd or
// closed, before the parent's fork() returns: it never counts as a holder then).  A
// failed fork takes it back (`to` 0).  A placeholder counts as a living holder.
void add_holder(Ref r, pid_t pid) noexcept;
void rename_holder(Ref r, pid_t from, pid_t to) noexcept;
pid_t fork_placeholder() noexcept;
// In a fork child once its copies are named (its own thread is another).
void forget_placeholder() noexcept;
// This process holds its copy no more (closed it, exited, exec'd with it close-on-exec,
// or took it as a kernel socket).
void drop_holder(Ref r) noexcept;
// A process other than this one that still lives holds a copy.
bool held(Ref r) noexcept;
State state(Ref r) noexcept;  // ended once the slot is not (or no longer) r's
// From `from` to `to` (false: it was not `from`, or the slot is not r's).
bool move(Ref r, State from, State to) noexcept;
// A holder asks for it (owned -> wanted, counted in asks()).  (The moves and the id are
// one word: a slot freed and taken by another connection meanwhile is never moved.)
bool ask(Ref r) noexcept;
// How many asks there have been in the table (the owner's engine looks when it changes).
uint64_t asks() noexcept;
// Whether this thread's fork() shares a connection with the child (set before the fork,
// read in the child, cleared in the parent after it).
void note_fork_shares(bool on) noexcept;
bool fork_shares() noexcept;
// The owner is done with it: free once no holder lives (it may still look), else later.
void release(Ref r) noexcept;
// Up to `max` of this process's connections a holder wants.
size_t wanted(Ref *refs, size_t max) noexcept;
// The table is mapped in this process (some fork shared a connection).
bool mapped() noexcept;
// This process owns a slot a living holder may still ask for (the engine then looks
// now and then, in case the holder's wake-up could not reach it), or one it released
// that a living holder still keeps; those whose holders are all gone are freed.
bool watching() noexcept;
// The owner of `r` (0 when the slot is not r's).
pid_t owner(Ref r) noexcept;
// Process `pid` lives (an exited one waiting to be reaped does not).
bool alive(pid_t pid) noexcept;

// How a holder wakes an owner's engine at once: in a fork child, a duplicate of its
// parent's wake-up eventfd (kept close-on-exec; the engine looks every 250 ms anyway,
// for a holder whose duplicate the program closed).
void keep_wake(pid_t owner, int fd) noexcept;
void wake(pid_t owner) noexcept;
// The program closed numbers `first`..`last` (close, close_range, dup2 over one): a
// duplicate there is gone (the number may be another file's already).
void on_fds_closed(unsigned first, unsigned last) noexcept;

}  // namespace rdmasock::copies
