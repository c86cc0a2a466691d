// Tunables (RDMASOCK_* environment variables), declared once in tunables.def.
#pragma once

#include <string>

namespace rdmasock {

struct Config {
#define RS_FIELD_Bool bool
#define RS_FIELD_Int long
#define RS_FIELD_Level int
#define RS_FIELD_String std::string
#define RS_TUNABLE(field, env, kind, def, min, max, doc) RS_FIELD_##kind field = Config::default_##kind(def);
    static constexpr bool default_Bool(long v) { return v != 0; }
    static constexpr long default_Int(long v) { return v; }
    static constexpr int default_Level(long v) { return static_cast<int>(v); }
    static std::string default_String(long) { return {}; }
#include "config/tunables.def"
#undef RS_TUNABLE
};

struct TunableInfo {
    const char *env;
    const char *kind;   // "bool", "int", "level", "string"
    const char *def;    // default, as text
    long min, max;
    const char *doc;
};

// Every tunable, in declaration order (for --help and the man page).
const TunableInfo *tunables(unsigned *count) noexcept;

// Read the configuration through `get` (secure_getenv in the library; a map in tests).
// A malformed or out-of-range value gives one warning through `warn` and the default.
using EnvGetter = const char *(*)(const char *name, void *ctx);
using Warner = void (*)(const char *line, void *ctx);
Config load_config(EnvGetter get, void *get_ctx, Warner warn, void *warn_ctx);

// The receive ring's size in bytes for RDMASOCK_RING_KB = `ring_kb` (0: from the
// locked-memory limit: 4 MiB when unlimited or root, else a eighth of it, 64 KiB to 4 MiB).
unsigned long ring_bytes(long ring_kb) noexcept;

}  // namespace rdmasock
