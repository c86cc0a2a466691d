#include "base/addr.hh"

#include <arpa/inet.h>
#include <cstdio>
#include <netinet/in.h>

namespace rdmasock::util {

void format_addr(const sockaddr_storage &ss, char *out, size_t n) noexcept
{
    char host[INET6_ADDRSTRLEN] = "-";
    if (ss.ss_family == AF_INET) {
        auto *a = reinterpret_cast<const sockaddr_in *>(&ss);
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        snprintf(out, n, "%s:%u", host, static_cast<unsigned>(ntohs(a->sin_port)));
    } else if (ss.ss_family == AF_INET6) {
        auto *a = reinterpret_cast<const sockaddr_in6 *>(&ss);
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        snprintf(out, n, "[%s]:%u", host, static_cast<unsigned>(ntohs(a->sin6_port)));
    } else {
        snprintf(out, n, "-");
    }
}

}  // namespace rdmasock::util
