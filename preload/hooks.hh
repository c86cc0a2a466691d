// The hooks behind the wrappers: rdmasock::hook::NAME for every RS_DATA, RS_HOOK and
// RS_LOAD symbol (and the hand-written variadic ones), called through the engine's entry
// points (preload/engine.cc); the RS_SHIM symbols have none (the shim handles them).
// Hooks set errno like the call they replace; nothing they call throws.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

namespace rdmasock::hook {

#define RS_DATA(ret, name, params, args, fd) ret name params noexcept;
#define RS_HOOK(ret, name, params, args) ret name params noexcept;
#define RS_SHIM(ret, name, params, args)
#include "base/symbols.def"

int fcntl(int fd, int cmd, void *arg) noexcept;
int ioctl(int fd, unsigned long request, void *arg) noexcept;

// What close(fd) does before the kernel closes the number (also for a number the C
// library closes itself: fclose).
void before_close(int fd) noexcept;

// The library's stdio streams (preload/stdio.cc): flushed at exit before the
// connections close (the C library flushes its streams only after that); the set's lock
// made anew in a fork child.
void flush_streams() noexcept;
void streams_after_fork_child() noexcept;

// At exit: close the connections whose close() was handed to calls still blocked.
void finish_deferred_at_exit() noexcept;
// At exit: the close line of every connection the program left open (the kernel closes
// it now), once per socket, under its lowest descriptor.
void close_lines_at_exit() noexcept;

}  // namespace rdmasock::hook
