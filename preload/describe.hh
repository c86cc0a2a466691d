// What the library says about one connection: its close-time log line (preload/hooks.cc)
// and the live list an operator asks for (preload/report.cc).
#pragma once

#include <cstddef>
#include <sys/socket.h>

#include "base/reason.hh"
#include "process/socket.hh"
#include "process/transport.hh"

namespace rdmasock::describe {

// A connection as it stands; gathered while its fd is open.
struct Info {
    bool connection = false;       // it has a peer (listeners and unconnected sockets not)
    bool never_connected = false;  // e.g. a refused nonblocking connect
    char local[64] = "-";
    char peer[64] = "-";
    Counters counters;
};

Info capture(int fd, Socket &s) noexcept;

// Whether the connection is on RDMA now, and if not why (the reason it shows now: a
// server's close settles its reason, so a close line asks after the close).
bool on_rdma(const Socket &s) noexcept;
Reason reason(const Socket &s, const Info &ci) noexcept;

}  // namespace rdmasock::describe
