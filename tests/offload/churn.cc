// churn: short connections at a descriptor limit (tests/offload, scale/short_connections).
// One process is both ends, as a proxy or a test client talking to its own server is:
//
//   churn --addr A [--conns N] [--nofile L]
//
// sets its soft RLIMIT_NOFILE to L (default 1024), listens on A (ephemeral port), then N
// times in turn (default 10000): connect, accept, a 100-byte request, a 100-byte reply
// (each checked byte for byte), close both ends.  Every 100 cycles it counts its open
// descriptors.  The first failed call ends the run.  Output, one line:
//
//   cycles=C errors=E fds_before=B fds_warm=W fds_max=M fds_after=A ms=T [first_error=...]
//
// fds_before: open descriptors once listening, before the first cycle.  fds_warm: after
// the first tenth of the cycles (at most 1000), once the count has settled (the same for
// 3 s, at most 20 s: what the library set up for the process, and the negotiations still
// running, are over).  fds_after: the same after the last cycle (or as soon as the count
// is back to fds_warm).  ms: the cycles' time, without the pauses.  Exit status 0 when
// all N cycles passed, 1 otherwise, 4 on usage errors.
#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <netinet/in.h>
#include <string>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/common/io.hh"
#include "tests/common/time.hh"

using namespace testcommon;

namespace {

void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; ++i)
        p[i] = static_cast<unsigned char>(seed * 131u + i * 7u);
}

// The descriptor count once it stops changing (3 s, at most 20 s), or once it is down to
// `target` (-1: none).
int settled_fds(int target)
{
    int n = open_fds();
    double same_since = now_ms();
    for (double end = now_ms() + 20000; now_ms() < end && n > target && now_ms() - same_since < 3000;) {
        usleep(100000);
        int m = open_fds();
        if (m != n)
            same_since = now_ms();
        n = m;
    }
    return n;
}

}  // namespace

int main(int argc, char **argv)
{
    const char *addr = nullptr;
    long conns = 10000, nofile = 1024;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string k = argv[i];
        if (k == "--addr")
            addr = argv[i + 1];
        else if (k == "--conns")
            conns = atol(argv[i + 1]);
        else if (k == "--nofile")
            nofile = atol(argv[i + 1]);
        else
            addr = nullptr, i = argc;
    }
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    if (addr == nullptr || conns <= 0 || nofile < 16 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
        fprintf(stderr, "usage: churn --addr IPv4 [--conns N] [--nofile L]\n");
        return 4;
    }
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = static_cast<rlim_t>(nofile);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_cur > rl.rlim_max)
        rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        perror("setrlimit");
        return 4;
    }
    int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t sl = sizeof sa;
    if (l < 0 || bind(l, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0 || listen(l, 128) != 0 ||
        getsockname(l, reinterpret_cast<sockaddr *>(&sa), &sl) != 0) {
        perror("listen");
        return 1;
    }
    const int fds_before = open_fds();
    int fds_max = fds_before;
    std::string first_error;
    long cycles = 0;
    const long warm_at = conns / 10 > 1000 ? 1000 : conns / 10;
    int fds_warm = -1;
    double t0 = now_ms();
    auto fail = [&](const char *what) {
        char b[128];
        snprintf(b, sizeof b, "cycle %ld: %s: %s", cycles, what, strerror(errno));
        first_error = b;
    };
    unsigned char req[100], rep[100], got[100];
    for (; cycles < conns; ++cycles) {
        fill(req, sizeof req, static_cast<unsigned>(cycles));
        fill(rep, sizeof rep, static_cast<unsigned>(cycles) ^ 0x5au);
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (c < 0) {
            fail("socket");
            break;
        }
        set_io_timeouts(c, 10);  // (a lost byte fails the run instead of hanging it)
        if (connect(c, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0) {
            fail("connect");
            close(c);
            break;
        }
        int s = accept(l, nullptr, nullptr);
        if (s < 0) {
            fail("accept");
            close(c);
            break;
        }
        set_io_timeouts(s, 10);
        bool ok = false;
        if (write(c, req, sizeof req) != sizeof req)
            fail("client write");
        else if (!read_all(s, got, sizeof got) || memcmp(got, req, sizeof req) != 0)
            fail("server read (or the request differs)");
        else if (write(s, rep, sizeof rep) != sizeof rep)
            fail("server write");
        else if (!read_all(c, got, sizeof got) || memcmp(got, rep, sizeof rep) != 0)
            fail("client read (or the reply differs)");
        else
            ok = true;
        close(c);
        close(s);
        if (!ok)
            break;
        if (cycles % 100 == 99) {
            int n = open_fds();
            if (n > fds_max)
                fds_max = n;
        }
        if (cycles + 1 == warm_at) {
            const double paused = now_ms();
            fds_warm = settled_fds(-1);
            t0 += now_ms() - paused;
        }
    }
    const long ms = static_cast<long>(now_ms() - t0);
    const int fds_after = settled_fds(fds_warm);
    printf("cycles=%ld errors=%d fds_before=%d fds_warm=%d fds_max=%d fds_after=%d ms=%ld%s%s\n", cycles,
           first_error.empty() ? 0 : 1, fds_before, fds_warm, fds_max, fds_after, ms,
           first_error.empty() ? "" : " first_error=", first_error.c_str());
    close(l);
    return cycles == conns && first_error.empty() ? 0 : 1;
}
