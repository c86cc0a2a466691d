// The real (next) implementations of every interposed symbol, resolved with
// dlsym(RTLD_NEXT).  Generated from src/base/symbols.def.  Defined in the preload shim,
// shared with the engine (base/shared.hh).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/shared.hh"

namespace rdmasock::real {

struct Table {
#define RS_DATA(ret, name, params, args, fd) ret(*name) params;
#define RS_HOOK(ret, name, params, args) ret(*name) params;
#define RS_VA(ret, name, params) ret(*name) params;
#include "base/symbols.def"
};

extern RS_SHARED Table g;

// Resolvers, called when a pointer is still null (a call before our constructor).
// They never return null: a symbol the C library lacks resolves to a stub that fails
// with ENOSYS.
#define RS_DATA(ret, name, params, args, fd) RS_SHARED ret (*resolve_##name() noexcept) params;
#define RS_HOOK(ret, name, params, args) RS_SHARED ret (*resolve_##name() noexcept) params;
#define RS_VA(ret, name, params) RS_SHARED ret (*resolve_##name() noexcept) params;
#include "base/symbols.def"

// Resolve the whole table (the library constructor calls this).
RS_SHARED void resolve_all() noexcept;

}  // namespace rdmasock::real

// RS_REAL(read)(fd, buf, n): the next `read`, resolving it on first use.
#define RS_REAL(name)                                                          \
    (__builtin_expect(::rdmasock::real::g.name != nullptr, 1)                  \
         ? ::rdmasock::real::g.name                                            \
         : ::rdmasock::real::resolve_##name())
