// rdma-core, loaded when the first connection that may be offloaded needs it, not when
// the library is: a process that never makes such a connection (the shell, coreutils,
// everything under a system-wide /etc/ld.so.preload) maps neither libibverbs nor
// librdmacm nor their dependencies.
//
// The library does not link them.  dl_forward.cc defines, hidden (the version script exports
// only the socket API), each rdma-core function the library calls, under its own name:
// the calls in the rest of the code stay plain ibv_* and rdma_* calls, and bind to these
// definitions at link time; each forwards to the real function, looked up once by
// load().  A program's own uses of rdma-core are untouched (nothing is exported).
#pragma once

namespace rdmasock::rdma::dl {

// dlopen libibverbs and librdmacm and look up every function the library calls; true
// once all are there.  Idempotent and thread-safe; the engine calls it before any other
// rdma-core call.  False (logged once): the connection stays on TCP.
bool load() noexcept;

// Whether load() succeeded (tests: nothing is loaded before the first eligible socket).
bool loaded() noexcept;

// Whether the program had loaded rdma-core itself (then the library shares its copy, and
// the device descriptors are not only ours).
bool program_has_it() noexcept;

// Descriptors of rdma-core objects made for the library (recorded when made, forgotten
// when destroyed): a fork child closes its copies (after_fork_child).
void own_fd(int fd) noexcept;
void disown_fd(int fd) noexcept;  // (also util::disown: rdma-core is about to close it)

// In a fork child: if rdma-core was loaded, its state (device handles opened by the
// parent, whose use the kernel refuses the child; rdma_cm ids; the library's own
// locks) is the parent's: the child closes the descriptors recorded by own_fd().  The next load() then loads a fresh copy in a link-map
// namespace of its own (dlmopen), with its own C library: the forwarders copy that
// library's errno into ours.  True if it was loaded.
bool after_fork_child() noexcept;

// Which copy of rdma-core this process uses: 0, one more at each fork child's
// after_fork_child() that dropped a loaded copy.
unsigned generation() noexcept;

// The errno of the namespace's C library (null: rdma-core shares ours).
extern int *(*g_ns_errno)();

}  // namespace rdmasock::rdma::dl
