#include "tests/common/io.hh"

#include <cerrno>
#include <cstdint>
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

}  // namespace testcommon
