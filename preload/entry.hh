// The engine's entry points, as the shim calls them: one per interposed symbol the
// engine handles (generated from src/base/symbols.def), and the variadic ones with their
// argument passed as a pointer-sized value.  preload/engine.cc fills the table,
// preload/wrappers.cc calls through it once the engine is loaded (preload/shim.hh).
#pragma once

#include "base/real.hh"

namespace rdmasock::entry {

struct Table {
#define RS_DATA(ret, name, params, args, fd) ret(*name) params;
#define RS_HOOK(ret, name, params, args) ret(*name) params;
#define RS_SHIM(ret, name, params, args)
#include "base/symbols.def"
    int (*fcntl)(int fd, int cmd, void *arg);
    int (*fcntl64)(int fd, int cmd, void *arg);
    int (*ioctl)(int fd, unsigned long request, void *arg);
};

}  // namespace rdmasock::entry

// The engine's one exported symbol: its table of entry points (never null).
#define RDMASOCK_ENGINE_START "rdmasock_engine_start"
extern "C" const rdmasock::entry::Table *rdmasock_engine_start() noexcept;
