// soak: a bounded soak of one long-lived server under random clients (tests/offload,
// soak/*; issue 17, point 7).
//
//   soak server --addr A
//   soak client --addr A --port P --secs S [--seed N]
//
// server: listens on A (ephemeral port), prints "port=P pid=X", then serves every
// connection in a thread of its own: it reads 16-byte requests (length, seed), checks
// the `length` pattern bytes that follow (fill(seed)), and answers each with the same
// bytes; a connection that ends (EOF, reset) ends its thread.  A request whose length has
// its top bit set is the last: the server answers, shuts the connection down (SHUT_RDWR)
// and closes it, as a server that ends a connection after its answer does.  It runs until SIGTERM
// and prints "served=N bad=B" (B: connections whose bytes did not match; 0 or a
// failure).
//
// client: for S seconds, random operations against the server (seeded: a run can be
// replayed):
//   exchange   connect, 1..3 verified request/answer rounds of 1 B .. 1 MiB, close
//   kill9      fork; the child connects and streams 8 MiB; the parent SIGKILLs it after
//              0..50 ms (the server sees a peer die mid-stream)
//   fork_close connect, one round, fork; the child closes its copy and exits; the
//              parent goes on with another round on the connection
//   dup2       connect, dup2 onto another number, a round on the copy, close the
//              original, a round on the copy, close it
//   shut_read  connect, a thread blocks reading it; shutdown(SHUT_RDWR) wakes it with
//              EOF; close
//   server_end connect, a round, then a last round the server answers and ends with
//              shutdown(SHUT_RDWR) and close: the next read is EOF; close
// and prints "ops=N exchange=.. kill9=.. fork_close=.. dup2=.. shut_read=.. server_end=..
// errors=E"
// [first_error=...].  Exit status 0 when E is 0.
#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <netinet/in.h>
#include <random>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "tests/common/io.hh"
#include "tests/common/time.hh"

using namespace testcommon;

namespace {

void fill(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    for (size_t i = 0; i < n; ++i) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        p[i] = static_cast<unsigned char>(x >> 56);
    }
}

void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; ++i)
        p[i] = static_cast<unsigned char>(v >> (56 - 8 * i));
}

uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
        v = v << 8 | p[i];
    return v;
}

// ---- server ----------------------------------------------------------------------------

volatile sig_atomic_t g_stop = 0;
std::atomic<long> g_served{0}, g_bad{0};

void serve(int fd)
{
    std::vector<unsigned char> got, want;
    unsigned char hdr[16];
    bool bad = false;
    while (read_all(fd, hdr, sizeof hdr)) {
        const uint64_t seed = get64(hdr + 8);
        const bool last = get64(hdr) >> 63;
        const uint64_t len = get64(hdr) & ~(uint64_t{1} << 63);
        if (len > (64u << 20)) {
            bad = true;
            break;
        }
        got.resize(len);
        want.resize(len);
        if (!read_all(fd, got.data(), len))
            break;  // (a client killed mid-stream)
        fill(want.data(), len, seed);
        if (got != want) {
            bad = true;
            break;
        }
        if (!send_all(fd, got.data(), len))
            break;
        if (last) {
            shutdown(fd, SHUT_RDWR);
            break;
        }
    }
    g_bad += bad ? 1 : 0;
    ++g_served;
    close(fd);
}

int run_server(const sockaddr_in &at)
{
    struct sigaction sa_term {};
    sa_term.sa_handler = [](int) { g_stop = 1; };  // no SA_RESTART: accept() returns EINTR
    sigaction(SIGTERM, &sa_term, nullptr);
    signal(SIGPIPE, SIG_IGN);
    sockaddr_in sa = at;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t sl = sizeof sa;
    if (l < 0 || bind(l, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0 || listen(l, 128) != 0 ||
        getsockname(l, reinterpret_cast<sockaddr *>(&sa), &sl) != 0) {
        perror("listen");
        return 1;
    }
    printf("port=%d pid=%d\n", ntohs(sa.sin_port), static_cast<int>(getpid()));
    fflush(stdout);
    while (!g_stop) {
        int c = accept(l, nullptr, nullptr);
        if (c < 0) {
            if (errno == EINTR)
                continue;
            perror("accept");
            return 1;
        }
        set_io_timeouts(c, 20);  // (a lost byte fails the run instead of hanging it)
        std::thread(serve, c).detach();
    }
    printf("served=%ld bad=%ld\n", g_served.load(), g_bad.load());
    fflush(stdout);
    return g_bad.load() == 0 ? 0 : 1;
}

// ---- client ----------------------------------------------------------------------------

// The connection's local port (a failure names it: the library's logs name connections
// by their addresses).
int local_port(int fd)
{
    sockaddr_in me{};
    socklen_t ml = sizeof me;
    return getsockname(fd, reinterpret_cast<sockaddr *>(&me), &ml) == 0 ? ntohs(me.sin_port) : 0;
}

struct Client {
    sockaddr_in srv{};
    std::mt19937_64 rng;
    long errors = 0;
    std::string first_error;
    const char *op = "";
    uint64_t last_seed_ = 0;
    std::string only;  // --only NAME: that operation alone

    void fail(const std::string &what)
    {
        if (errors++ == 0)
            first_error = std::string(op) + ":" + what + ":" + strerror(errno);
        fprintf(stderr, "soak: %s: %s: %s\n", op, what.c_str(), strerror(errno));
    }
    int dial()
    {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, reinterpret_cast<const sockaddr *>(&srv), sizeof srv) != 0) {
            fail("connect");
            if (fd >= 0)
                close(fd);
            return -1;
        }
        set_io_timeouts(fd, 20);  // (a lost byte fails the run instead of hanging it)
        return fd;
    }
    size_t size()
    {
        // Mostly small, sometimes up to 1 MiB (past the inline path, around the ring).
        const unsigned bits = static_cast<unsigned>(rng() % 21);
        return 1 + static_cast<size_t>(rng() % (size_t{1} << bits));
    }
    // One request of len pattern bytes and its answer, checked (last: the server ends
    // the connection after it).
    bool round(int fd, size_t len, bool last = false)
    {
        std::vector<unsigned char> out(16 + len), back(len), want(len);
        const uint64_t seed = rng();
        put64(out.data(), len | (last ? uint64_t{1} << 63 : 0));
        put64(out.data() + 8, seed);
        fill(out.data() + 16, len, seed);
        if (!send_all(fd, out.data(), out.size())) {
            fail("write");
            return false;
        }
        if (!read_all(fd, back.data(), len)) {
            fail("read the answer");
            return false;
        }
        fill(want.data(), len, seed);
        const uint64_t prev_seed = last_seed_;
        last_seed_ = seed;
        if (back != want) {
            size_t at = 0;
            while (back[at] == want[at])
                ++at;
            std::vector<unsigned char> prev(len);
            fill(prev.data(), len, prev_seed);
            fprintf(stderr, "soak: got %02x%02x%02x%02x want %02x%02x%02x%02x; the previous round's pattern: %s\n",
                    back[0], len > 1 ? back[1] : 0, len > 2 ? back[2] : 0, len > 3 ? back[3] : 0, want[0],
                    len > 1 ? want[1] : 0, len > 2 ? want[2] : 0, len > 3 ? want[3] : 0,
                    back == prev ? "yes" : "no");
            errno = EBADMSG;
            fail("the answer of " + std::to_string(len) + " bytes differs from byte " + std::to_string(at));
            return false;
        }
        return true;
    }

    void exchange()
    {
        int fd = dial();
        if (fd < 0)
            return;
        for (int n = 1 + static_cast<int>(rng() % 3); n > 0 && round(fd, size()); --n) {
        }
        close(fd);
    }
    void kill9()
    {
        const long ms = static_cast<long>(rng() % 51);
        pid_t pid = fork();
        if (pid == 0) {
            int fd = dial();
            if (fd >= 0) {
                std::vector<unsigned char> b(16 + (8u << 20));
                put64(b.data(), 8u << 20);
                put64(b.data() + 8, 1);
                fill(b.data() + 16, 8u << 20, 1);
                send_all(fd, b.data(), b.size());
            }
            _exit(0);
        }
        if (pid < 0) {
            fail("fork");
            return;
        }
        usleep(static_cast<useconds_t>(ms) * 1000);
        kill(pid, SIGKILL);
        int st = 0;
        waitpid(pid, &st, 0);
    }
    void fork_close()
    {
        int fd = dial();
        if (fd < 0)
            return;
        if (round(fd, size())) {
            pid_t pid = fork();
            if (pid == 0) {
                close(fd);
                _exit(0);
            }
            int st = 0;
            if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
                fail("fork child");
            round(fd, size());
        }
        close(fd);
    }
    void dup2_op()
    {
        int fd = dial();
        if (fd < 0)
            return;
        int spare = socket(AF_INET, SOCK_STREAM, 0);  // a number to land on
        if (spare < 0 || dup2(fd, spare) != spare) {
            fail("dup2");
            close(fd);
            return;
        }
        if (round(spare, size())) {
            close(fd);
            fd = -1;
            round(spare, size());
        }
        if (fd >= 0)
            close(fd);
        close(spare);
    }
    // A read that must have seen EOF (got 0); else a failure naming what it returned,
    // its first bytes and the connection's local port.
    void expect_eof(int fd, ssize_t got, int read_errno, const unsigned char *b, const char *which)
    {
        if (got == 0)
            return;
        char what[240];
        snprintf(what, sizeof what, "%s returned %zd, not EOF (first bytes %02x%02x%02x%02x; local port %d)", which,
                 got, b[0], b[1], b[2], b[3], local_port(fd));
        errno = got < 0 ? read_errno : EBADMSG;
        fail(what);
    }
    void shut_read()
    {
        int fd = dial();
        if (fd < 0)
            return;
        if (!round(fd, size())) {
            close(fd);
            return;
        }
        ssize_t got = -2;
        int read_errno = 0;
        unsigned char b[64] = {};
        std::thread t([&] {
            got = read(fd, b, sizeof b);
            read_errno = errno;
        });
        usleep(static_cast<useconds_t>(rng() % 20) * 1000);
        shutdown(fd, SHUT_RDWR);
        t.join();
        expect_eof(fd, got, read_errno, b, "a read woken by shutdown");
        close(fd);
    }
    void server_end()
    {
        int fd = dial();
        if (fd < 0)
            return;
        if (round(fd, size()) && round(fd, size(), true)) {
            unsigned char b[64] = {};
            const ssize_t got = read(fd, b, sizeof b);
            expect_eof(fd, got, errno, b, "the read after the server's shutdown and close");
        }
        close(fd);
    }
};

int run_client(const sockaddr_in &srv, long secs, uint64_t seed, const std::string &only)
{
    signal(SIGPIPE, SIG_IGN);
    Client c;
    c.only = only;
    c.srv = srv;
    c.rng.seed(seed);
    long counts[6] = {};
    const double end = now_ms() + static_cast<double>(secs) * 1000;
    long ops = 0;
    for (; now_ms() < end; ++ops) {
        unsigned op = static_cast<unsigned>(c.rng() % 11);
        if (!c.only.empty())  // (--only NAME: the first value of op that names it)
            op = c.only == "exchange" ? 0 : c.only == "kill9" ? 5 : c.only == "fork_close" ? 6 : c.only == "dup2" ? 7
               : c.only == "shut_read" ? 9 : 10;
        c.op = op < 5 ? "exchange" : op < 6 ? "kill9" : op < 7 ? "fork_close" : op < 9 ? "dup2" : op < 10 ? "shut_read"
             : "server_end";
        if (op < 5) {
            c.exchange();
            ++counts[0];
        } else if (op < 6) {
            c.kill9();
            ++counts[1];
        } else if (op < 7) {
            c.fork_close();
            ++counts[2];
        } else if (op < 9) {
            c.dup2_op();
            ++counts[3];
        } else if (op < 10) {
            c.shut_read();
            ++counts[4];
        } else {
            c.server_end();
            ++counts[5];
        }
    }
    printf("ops=%ld exchange=%ld kill9=%ld fork_close=%ld dup2=%ld shut_read=%ld server_end=%ld errors=%ld%s%s\n", ops,
           counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], c.errors,
           c.errors ? " first_error=" : "", c.first_error.c_str());
    fflush(stdout);
    return c.errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv)
{
    std::string mode = argc > 1 ? argv[1] : "";
    const char *addr = nullptr;
    long port = 0, secs = 0;
    uint64_t seed = 1;
    std::string only;
    for (int i = 2; i + 1 < argc; i += 2) {
        std::string k = argv[i];
        if (k == "--addr")
            addr = argv[i + 1];
        else if (k == "--port")
            port = atol(argv[i + 1]);
        else if (k == "--secs")
            secs = atol(argv[i + 1]);
        else if (k == "--seed")
            seed = strtoull(argv[i + 1], nullptr, 10);
        else if (k == "--only")
            only = argv[i + 1];
        else
            addr = nullptr, i = argc;
    }
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    if (addr == nullptr || inet_pton(AF_INET, addr, &sa.sin_addr) != 1 ||
        (mode == "client" && (port <= 0 || port > 65535 || secs <= 0)) || (mode != "client" && mode != "server")) {
        fprintf(stderr, "usage: soak server --addr IPv4 | soak client --addr IPv4 --port P --secs S [--seed N]\n");
        return 4;
    }
    if (mode == "server")
        return run_server(sa);
    sa.sin_port = htons(static_cast<uint16_t>(port));
    return run_client(sa, secs, seed, only);
}
