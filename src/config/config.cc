#include "config/config.hh"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/log.hh"

namespace rdmasock {

namespace {


const TunableInfo kTunables[] = {
#define RS_KIND_Bool "bool"
#define RS_KIND_Int "int"
#define RS_KIND_Level "level"
#define RS_KIND_String "string"
#define RS_TUNABLE(field, env, kind, def, min, max, doc) {env, RS_KIND_##kind, #def, min, max, doc},
#include "config/tunables.def"
#undef RS_TUNABLE
};

bool parse_long(const char *s, long *out)
{
    if (*s == '\0')
        return false;
    errno = 0;
    char *end = nullptr;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

void warn_bad(Warner warn, void *ctx, const char *env, const char *value, const char *expected,
              const char *def)
{
    char line[512];
    snprintf(line, sizeof line, "ignoring %s=\"%.200s\": expected %s; using the default (%s)", env,
             value, expected, def);
    warn(line, ctx);
}

bool set(bool &field, const char *env, const char *v, long, long, Warner warn, void *ctx)
{
    if (!strcmp(v, "1") || !strcasecmp(v, "yes") || !strcasecmp(v, "on") || !strcasecmp(v, "true"))
        field = true;
    else if (!strcmp(v, "0") || !strcasecmp(v, "no") || !strcasecmp(v, "off") ||
             !strcasecmp(v, "false"))
        field = false;
    else {
        warn_bad(warn, ctx, env, v, "0 or 1", field ? "1" : "0");
        return false;
    }
    return true;
}

bool set(long &field, const char *env, const char *v, long min, long max, Warner warn, void *ctx)
{
    long x;
    if (!parse_long(v, &x) || x < min || x > max) {
        char expected[96], def[32];
        snprintf(expected, sizeof expected, "an integer from %ld to %ld", min, max);
        snprintf(def, sizeof def, "%ld", field);
        warn_bad(warn, ctx, env, v, expected, def);
        return false;
    }
    field = x;
    return true;
}

bool set(int &field, const char *env, const char *v, long, long, Warner warn, void *ctx)
{
    int l = log::parse_level(v);
    if (l < 0) {
        warn_bad(warn, ctx, env, v, "error, warn, info, debug or trace", log::level_name(field));
        return false;
    }
    field = l;
    return true;
}

bool set(std::string &field, const char *, const char *v, long, long, Warner, void *)
{
    field = v;
    return true;
}

}  // namespace

const TunableInfo *tunables(unsigned *count) noexcept
{
    *count = sizeof kTunables / sizeof kTunables[0];
    return kTunables;
}

Config load_config(EnvGetter get, void *get_ctx, Warner warn, void *warn_ctx)
{
    Config c;
#define RS_TUNABLE(field, env, kind, def, min, max, doc)                                          \
    if (const char *v = get(env, get_ctx))                                                        \
        set(c.field, env, v, min, max, warn, warn_ctx);
#include "config/tunables.def"
#undef RS_TUNABLE
    return c;
}

unsigned long ring_bytes(long ring_kb) noexcept
{
    if (ring_kb > 0)
        return static_cast<unsigned long>(ring_kb) * 1024ul;
    rlimit rl{};
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || geteuid() == 0)
        return 4ul << 20;
    unsigned long b = static_cast<unsigned long>(rl.rlim_cur) / 8;
    return b < (64ul << 10) ? (64ul << 10) : (b > (4ul << 20) ? (4ul << 20) : b);
}

}  // namespace rdmasock
