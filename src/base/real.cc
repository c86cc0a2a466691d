#include "base/real.hh"

#include <dlfcn.h>
#include <errno.h>

namespace rdmasock::real {

Table g;

namespace {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
// Stubs for symbols the C library does not have (e.g. epoll_pwait2 on an old glibc).
#define RS_DATA(ret, name, params, args, fd)                                   \
    ret missing_##name params { errno = ENOSYS; return (ret)-1; }
#define RS_HOOK(ret, name, params, args)                                       \
    ret missing_##name params { errno = ENOSYS; return (ret)-1; }
#define RS_VA(ret, name, params)                                               \
    ret missing_##name params { errno = ENOSYS; return (ret)-1; }
#include "base/symbols.def"
#pragma GCC diagnostic pop

void *next(const char *name) noexcept
{
    // dlsym may set dlerror state; keep the caller's errno intact.
    int saved = errno;
    void *p = dlsym(RTLD_NEXT, name);
    errno = saved;
    return p;
}
}  // namespace

#define RS_RESOLVER(ret, name, params)                                         \
    ret (*resolve_##name() noexcept) params                                    \
    {                                                                          \
        using fn = ret(*) params;                                              \
        auto p = reinterpret_cast<fn>(next(#name));                            \
        if (p == nullptr)                                                      \
            p = missing_##name;                                                \
        __atomic_store_n(&g.name, p, __ATOMIC_RELEASE);                        \
        return p;                                                              \
    }
#define RS_DATA(ret, name, params, args, fd) RS_RESOLVER(ret, name, params)
#define RS_HOOK(ret, name, params, args) RS_RESOLVER(ret, name, params)
#define RS_VA(ret, name, params) RS_RESOLVER(ret, name, params)
#include "base/symbols.def"

void resolve_all() noexcept
{
#define RS_DATA(ret, name, params, args, fd) if (!g.name) resolve_##name();
#define RS_HOOK(ret, name, params, args) if (!g.name) resolve_##name();
#define RS_VA(ret, name, params) if (!g.name) resolve_##name();
#include "base/symbols.def"
}

}  // namespace rdmasock::real
