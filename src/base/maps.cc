#include "base/maps.hh"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/fd.hh"

namespace rdmasock::util {

bool each_map(bool (*fn)(const char *line, size_t len, void *arg), void *arg) noexcept
{
    char buf[16384];
    FdGate making(FdGate::making);
    const long fd = syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    size_t have = 0;
    bool skipping = false;  // (the rest of a line longer than the buffer)
    bool more = true;
    while (more) {
        const long r = syscall(SYS_read, static_cast<int>(fd), buf + have, sizeof buf - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (have > 0 && !skipping)
                fn(buf, have, arg);  // (a last line with no newline)
            break;
        }
        have += static_cast<size_t>(r);
        size_t at = 0;
        while (more) {
            const char *nl = static_cast<const char *>(memchr(buf + at, '\n', have - at));
            if (nl == nullptr)
                break;
            const size_t len = static_cast<size_t>(nl - (buf + at));
            if (!skipping)
                more = fn(buf + at, len, arg);
            skipping = false;
            at += len + 1;
        }
        if (more && at == 0 && have == sizeof buf) {  // one line fills the buffer
            if (!skipping)
                more = fn(buf, have, arg);
            skipping = true;
            at = have;
        }
        memmove(buf, buf + at, have - at);
        have -= at;
    }
    close_own(static_cast<int>(fd));  // (not syscall(): the shim hooks SYS_close)
    return true;
}

}  // namespace rdmasock::util
