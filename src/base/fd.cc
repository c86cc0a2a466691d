#include "base/fd.hh"

#include <cerrno>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>

#include "base/real.hh"

namespace rdmasock::util {

namespace {
int floor_fd() noexcept
{
    static const int floor = [] {
        rlimit rl{};
        if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
            return 4096;
        rlim_t half = rl.rlim_cur / 2;
        if (half < 64)
            return -1;
        return half > 4096 ? 4096 : static_cast<int>(half);
    }();
    return floor;
}
}  // namespace

int move_high(int fd) noexcept
{
    const int floor = floor_fd();
    if (fd < 0 || floor < 0 || fd >= floor)
        return fd;
    int saved = errno;
    int high = dup_high(fd);
    if (high >= 0)
        RS_REAL(close)(fd);
    errno = saved;
    return high >= 0 ? high : fd;
}

int dup_high(int fd) noexcept
{
    const int floor = floor_fd();
    return RS_REAL(fcntl)(fd, F_DUPFD_CLOEXEC, floor < 0 ? 0 : floor);
}

bool tcp_peer_ended(int fd) noexcept
{
    tcp_info ti{};
    socklen_t len = sizeof ti;
    const int saved = errno;
    const bool known = RS_REAL(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0;
    errno = saved;
    // (ESTABLISHED, and FIN_WAIT1/2 once our FIN is out, last until the peer's FIN.)
    return !known ||
           !(ti.tcpi_state == TCP_ESTABLISHED || ti.tcpi_state == TCP_FIN_WAIT1 || ti.tcpi_state == TCP_FIN_WAIT2);
}

}  // namespace rdmasock::util
