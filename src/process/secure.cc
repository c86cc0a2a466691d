#include "process/secure.hh"

#include <sys/auxv.h>

namespace rdmasock::rt {

namespace {
int g_secure = -1;  // not known yet (a call before the constructor)
}

void on_load() noexcept { (void)secure(); }

bool secure() noexcept
{
    if (__builtin_expect(g_secure < 0, 0))
        g_secure = getauxval(AT_SECURE) != 0;
    return g_secure != 0;
}

}  // namespace rdmasock::rt
