// The preload shim: the part of the library every process maps (librdmasock.so).  It
// resolves the real functions and checks for secure-execution mode at load, and nothing
// else: its wrappers pass every call through until the first call that may make an
// eligible socket loads the engine (librdmasock_engine.so, from the shim's directory,
// or linked into the same library), whose entry points (preload/entry.hh) handle every
// call from then on.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include "preload/entry.hh"

namespace rdmasock::shim {

// An AF_INET or AF_INET6 stream (TCP) socket: the only kind the library may offload.
inline bool eligible(int domain, int type, int protocol) noexcept
{
    return (domain == AF_INET || domain == AF_INET6) && (type & 0xf) == SOCK_STREAM &&
           (protocol == 0 || protocol == IPPROTO_TCP);
}

// The engine's entry points; null until the engine is loaded.
extern const entry::Table *g_engine;
inline const entry::Table *engine() noexcept
{
    return __atomic_load_n(&g_engine, __ATOMIC_ACQUIRE);
}

// Load the engine (once, thread-safe, errno kept).  Null when inert (secure mode), when
// it cannot be loaded (one line on stderr, as the dynamic loader prints for a preload it
// cannot load: connections stay on kernel TCP), or when called again while loading.
const entry::Table *load() noexcept;

// sendmmsg(): does a message carry control data (it may pass descriptors)?
inline bool has_control(const struct mmsghdr *vec, unsigned int vlen) noexcept
{
    for (unsigned int i = 0; vec != nullptr && i < vlen; ++i)
        if (vec[i].msg_hdr.msg_controllen != 0)
            return true;
    return false;
}

// RS_LOAD symbols: does this call load the engine first?
inline bool loads_engine_socket(int domain, int type, int protocol) noexcept
{
    return eligible(domain, type, protocol);
}

}  // namespace rdmasock::shim
