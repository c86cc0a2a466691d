// The one runtime object of the process, owned by the preload layer.
//
// Nothing starts at load (process/secure.hh is all the preload shim runs).  The engine
// is loaded, and configuration, the log file and the RDMA device probe start, at the
// first eligible socket (an AF_INET/AF_INET6 stream socket).
#pragma once

#include <atomic>

#include "base/reason.hh"
#include "config/config.hh"
#include "config/rules.hh"
#include "process/secure.hh"

namespace rdmasock::rt {

// Start the runtime if needed (idempotent, thread-safe).  Returns true when sockets
// are to be tracked; false when inert, disabled, or called re-entrantly while starting.
bool ensure_started() noexcept;

// Valid after ensure_started() returned true.
const Config &config() noexcept;

// Why a new connection is not on RDMA before any negotiation: no_device, disabled, or
// pending when an RDMA device is present (the connection may still be offloaded).
Reason default_reason() noexcept;
// The offload rules (rdmasock.conf(5)) keep a connection of this program on `side`,
// whose server end is `server_addr`, on kernel TCP.  False while no rule is loaded.
bool excluded(rules::Side side, const sockaddr *server_addr) noexcept;
// The rules file read at start ("" when none), and its rules (the rules tester).
const rules::File &rules_file() noexcept;
// In a fork child of a process whose engine had started: no new connection is offloaded
// (librdmacm keeps the parent's device contexts, whose use the kernel refuses the child:
// posting on them fails with EACCES), reason forked_child.
void no_rdma_in_fork_child() noexcept;

// Number of offloaded sockets alive: zero means every wait primitive passes through.
extern std::atomic<unsigned> g_offloaded;
// Accepted server sockets still deciding between RDMA and TCP.
extern std::atomic<unsigned> g_pending;

// The connections of this process that moved to RDMA and how long each took from its
// connect() or accept() (rdmasock stat; a fork child counts from zero).
struct SetupTimes {
    std::atomic<unsigned long long> switches{0}, us_sum{0}, us_max{0};
    void record(unsigned long long us) noexcept;
};
extern SetupTimes g_setup;

void after_fork_child() noexcept;

}  // namespace rdmasock::rt
