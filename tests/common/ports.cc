#include "tests/common/ports.hh"

#include <arpa/inet.h>
#include <cstdio>
#include <netinet/in.h>
#include <poll.h>
#include <sstream>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/common/files.hh"
#include "tests/common/text.hh"
#include "tests/common/time.hh"

namespace testcommon {

int free_port(const std::string &addr)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
    socklen_t len = sizeof sa;
    int port = -1;
    if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr *>(&sa), &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

bool tcp_listening(int port)
{
    char want[16];
    snprintf(want, sizeof want, ":%04X", port);
    for (const char *f : {"/proc/net/tcp", "/proc/net/tcp6"}) {
        for (auto &line : split_lines(read_file(f))) {
            // sl local_address rem_address st ...; st 0A = LISTEN
            std::istringstream is(line);
            std::string sl, local, remote, st;
            if (!(is >> sl >> local >> remote >> st))
                continue;
            if (st == "0A" && local.size() > 5 && local.compare(local.size() - 5, 5, want) == 0)
                return true;
        }
    }
    return false;
}

bool wait_listening(int port, int timeout_ms)
{
    double deadline = now_ms() + timeout_ms;
    for (;;) {
        if (tcp_listening(port))
            return true;
        if (now_ms() >= deadline)
            return false;
        poll(nullptr, 0, 10);
    }
}

}  // namespace testcommon
