#include "tests/common/io.hh"

#include <cerrno>
#include <cstdint>
#include <dirent.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace testcommon {

size_t read_n(int fd, void *p, size_t n)
{
    auto *c = static_cast<uint8_t *>(p);
    size_t done = 0;
    while (done < n) {
        ssize_t r = read(fd, c + done, n - done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        done += static_cast<size_t>(r);
    }
    return done;
}

bool read_all(int fd, void *p, size_t n)
{
    auto *c = static_cast<uint8_t *>(p);
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = ENODATA;
            return false;
        }
        c += r;
        n -= static_cast<size_t>(r);
    }
    return true;
}

bool send_all(int fd, const void *p, size_t n)
{
    const auto *c = static_cast<const uint8_t *>(p);
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        c += w;
        n -= static_cast<size_t>(w);
    }
    return true;
}

void set_io_timeouts(int fd, int secs)
{
    timeval tv{secs, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

int open_fds()
{
    int n = 0;
    if (DIR *d = opendir("/proc/self/fd")) {
        while (dirent *e = readdir(d))
            if (e->d_name[0] != '.')
                ++n;
        closedir(d);
        --n;  // the directory's own descriptor
    }
    return n;
}

}  // namespace testcommon
