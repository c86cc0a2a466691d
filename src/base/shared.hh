// What the preload shim (librdmasock.so) shares with the engine it loads
// (librdmasock_engine.so): the table of real functions, the secure-mode flag, the
// signal bookkeeping and the fd table's slots are defined once, in the shim, and the
// engine's references resolve to them when it is loaded.  Marked here, exported by the shim's version script
// (Makefile.am), and nowhere else.
#pragma once

#define RS_SHARED __attribute__((visibility("default")))
