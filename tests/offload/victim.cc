// victim: the process under attack in the hostile-peer tests (tests/offload/hostile_tests.cc).
// It runs under librdmasock (built with AddressSanitizer) and is an ordinary sockets
// program; plain C++17, no Boost.
//
//   victim server --addr A --conns N
//       listen on A (ephemeral port), print "port=P", accept N connections and serve each
//       in its own thread: echo every byte back until EOF or an error, then print one line
//       per connection (below) and close it.  Exit 0 once all N are done.
//   victim client --addr A --good-port G [--bad-port B] [--phase-file F] [--bytes N]
//                 [--bad-bytes M] [--hold-ms H]
//       connection "good" to G: N pattern bytes echoed in chunks and verified (phase 1);
//       then, with --phase-file, print "phase1 ..." and wait until F exists; with
//       --bad-port, connection "bad" to B: write M pattern bytes, shut down the write side,
//       read until EOF or an error, print its line; then phase 2 on "good" (N more bytes),
//       shut down, read EOF, print its line.  With --hold-ms (the default mode, where
//       connect() returns before the library decides): "good" waits H ms after its
//       connect, so it switches before its bytes, and "bad" writes half its bytes, waits
//       H ms (its request meets the hostile end meanwhile), then writes the rest.  Exit 0
//       when every good byte was verified,
//       1 on a mismatch, 2 when a call on the good connection failed.
//
// Connection line (key=value):
//   conn=NAME local_port=L peer_port=P transport=rdma|tcp|none reason=CODE phase=PHASE
//   received=N hash=H match=M sent=K end=eof|ERRNO-NAME wend=ok|ERRNO-NAME err=ok|ERRNO-NAME
// received/hash: the bytes read (FNV-1a 64 in hex); match: how many leading bytes read
// equal the client pattern; end: how the reading ended; wend: the first write error;
// err: the first error of any call (a reset is reported once: ECONNRESET, then EOF on
// reads and EPIPE on writes).
// Every socket has SO_RCVTIMEO/SO_SNDTIMEO of 20 s, so a lost wake-up shows as
// end=EAGAIN instead of a hang.
#include <arpa/inet.h>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "include/rdmasock.h"
#include "tests/offload/hostile_common.hh"

namespace {

struct Result {
    uint64_t received = 0, sent = 0, match = 0;
    bool matching = true;
    hostile::Hash hash;
    int end = 0;   // 0: EOF
    int wend = 0;  // first write error
    int first = 0; // the first error of any call on the connection
    void error(int e)
    {
        if (first == 0)
            first = e;
    }
    void take(const uint8_t *p, size_t n)
    {
        hash.add(p, n);
        for (size_t k = 0; k < n && matching; ++k) {
            if (p[k] != hostile::pattern_byte(received + k, hostile::kSaltClient))
                matching = false;
            else
                ++match;
        }
        received += n;
    }
};

std::string errname(int e)
{
    if (e == 0)
        return "ok";
    const char *n = strerrorname_np(e);
    return n ? n : std::to_string(e);
}

int port_of(int fd, bool peer)
{
    sockaddr_in a{};
    socklen_t l = sizeof a;
    int r = peer ? getpeername(fd, reinterpret_cast<sockaddr *>(&a), &l)
                 : getsockname(fd, reinterpret_cast<sockaddr *>(&a), &l);
    return r == 0 ? ntohs(a.sin_port) : -1;
}

void print_line(const char *name, int fd, int lport, int pport, const Result &r)
{
    rdmasock_info in{};
    socklen_t len = sizeof in;
    bool ok = getsockopt(fd, SOL_RDMASOCK, RDMASOCK_INFO, &in, &len) == 0;
    printf("conn=%s local_port=%d peer_port=%d transport=%s reason=%s phase=%s received=%" PRIu64
           " hash=%016" PRIx64 " match=%" PRIu64 " sent=%" PRIu64 " end=%s wend=%s err=%s\n",
           name, lport, pport, !ok ? "none" : in.transport == RDMASOCK_RDMA ? "rdma" : "tcp",
           ok ? in.reason_code : "none", ok ? in.phase : "none", r.received, r.hash.h, r.match, r.sent,
           r.end == 0 ? "eof" : errname(r.end).c_str(), errname(r.wend).c_str(), errname(r.first).c_str());
    fflush(stdout);
}

void timeouts(int fd)
{
    timeval tv{20, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// Write all of p (false on an error, recorded in r.wend).
bool write_all(int fd, const uint8_t *p, size_t n, Result &r)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (r.wend == 0)
                r.wend = w < 0 ? errno : EIO;
            r.error(r.wend);
            return false;
        }
        r.sent += static_cast<uint64_t>(w);
        p += w;
        n -= static_cast<size_t>(w);
    }
    return true;
}

// Read until EOF or an error (recorded in r.end); with `echo`, write back what arrives
// until a write fails.
void read_all(int fd, Result &r, bool echo)
{
    std::vector<uint8_t> buf(64 * 1024);
    for (;;) {
        ssize_t n = recv(fd, buf.data(), buf.size(), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            r.end = n == 0 ? 0 : errno;
            r.error(r.end);
            return;
        }
        r.take(buf.data(), static_cast<size_t>(n));
        if (echo && r.wend == 0)
            write_all(fd, buf.data(), static_cast<size_t>(n), r);
    }
}

void serve(int fd, int idx)
{
    timeouts(fd);
    const int lport = port_of(fd, false), pport = port_of(fd, true);  // while connected
    Result r;
    read_all(fd, r, true);
    if (r.wend == 0)
        shutdown(fd, SHUT_WR);
    std::string name = "s" + std::to_string(idx);
    print_line(name.c_str(), fd, lport, pport, r);
    close(fd);
}

int listen_on(const std::string &addr)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, addr.c_str(), &a.sin_addr);
    if (bind(ls, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 || listen(ls, 16) != 0) {
        perror("victim: bind/listen");
        exit(2);
    }
    return ls;
}

int run_server(const std::string &addr, int conns)
{
    int ls = listen_on(addr);
    printf("port=%d\n", port_of(ls, false));
    fflush(stdout);
    std::vector<std::thread> th;
    for (int i = 0; i < conns; ++i) {
        int fd = accept(ls, nullptr, nullptr);
        if (fd < 0) {
            perror("victim: accept");
            exit(2);
        }
        th.emplace_back(serve, fd, i);
    }
    for (auto &t : th)
        t.join();
    close(ls);
    return 0;
}

int connect_to(const std::string &addr, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, addr.c_str(), &a.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
        fprintf(stderr, "victim: connect to %s:%d: %s\n", addr.c_str(), port, strerror(errno));
        exit(2);
    }
    timeouts(fd);
    return fd;
}

// N more pattern bytes through the echo, verified.  0, 1 mismatch, 2 a call failed.
int echo_phase(int fd, uint64_t n, Result &r)
{
    std::vector<uint8_t> out(16 * 1024), in(16 * 1024);
    uint64_t end = r.sent + n;
    while (r.sent < end) {
        size_t c = static_cast<size_t>(std::min<uint64_t>(out.size(), end - r.sent));
        uint64_t off = r.sent;
        hostile::fill_pattern(out.data(), c, off, hostile::kSaltClient);
        if (!write_all(fd, out.data(), c, r))
            return 2;
        size_t got = 0;
        while (got < c) {
            ssize_t k = recv(fd, in.data() + got, c - got, 0);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                r.end = k == 0 ? EPIPE : errno;
                r.error(r.end);
                return 2;
            }
            got += static_cast<size_t>(k);
        }
        r.take(in.data(), c);
        if (!r.matching)
            return 1;
    }
    return 0;
}

int run_client(const std::string &addr, int good_port, int bad_port, const std::string &phase_file,
               uint64_t bytes, uint64_t bad_bytes, int hold_ms)
{
    int g = connect_to(addr, good_port);
    if (hold_ms > 0)
        usleep(static_cast<useconds_t>(hold_ms) * 1000);
    Result gr;
    int rc = echo_phase(g, bytes, gr);
    if (rc == 0 && !phase_file.empty()) {
        rdmasock_info in{};
        socklen_t len = sizeof in;
        bool ok = getsockopt(g, SOL_RDMASOCK, RDMASOCK_INFO, &in, &len) == 0;
        printf("phase1 local_port=%d transport=%s\n", port_of(g, false),
               !ok ? "none" : in.transport == RDMASOCK_RDMA ? "rdma" : "tcp");
        fflush(stdout);
        struct stat st;
        while (stat(phase_file.c_str(), &st) != 0)
            usleep(10000);
    }
    if (bad_port > 0) {
        int b = connect_to(addr, bad_port);
        Result br;
        std::vector<uint8_t> out(static_cast<size_t>(bad_bytes));
        hostile::fill_pattern(out.data(), out.size(), 0, hostile::kSaltClient);
        const size_t first = hold_ms > 0 ? out.size() / 2 : out.size();
        if (write_all(b, out.data(), first, br) && hold_ms > 0) {
            usleep(static_cast<useconds_t>(hold_ms) * 1000);
            write_all(b, out.data() + first, out.size() - first, br);
        }
        shutdown(b, SHUT_WR);
        read_all(b, br, false);
        print_line("bad", b, port_of(b, false), bad_port, br);
        close(b);
    }
    if (rc == 0)
        rc = echo_phase(g, bytes, gr);
    if (rc == 0) {
        shutdown(g, SHUT_WR);
        uint8_t x;
        ssize_t k = recv(g, &x, 1, 0);
        gr.end = k == 0 ? 0 : k < 0 ? errno : EPROTO;
        if (k != 0)
            rc = 2;
    }
    print_line("good", g, port_of(g, false), good_port, gr);
    close(g);
    return rc;
}

}  // namespace

int main(int argc, char **argv)
{
    std::string mode = argc > 1 ? argv[1] : "", addr, phase_file;
    int conns = 1, good = 0, bad = 0, hold_ms = 0;
    uint64_t bytes = 64 * 1024, bad_bytes = 16 * 1024;
    for (int i = 2; i + 1 < argc; i += 2) {
        std::string k = argv[i], v = argv[i + 1];
        if (k == "--addr")
            addr = v;
        else if (k == "--conns")
            conns = atoi(v.c_str());
        else if (k == "--good-port")
            good = atoi(v.c_str());
        else if (k == "--bad-port")
            bad = atoi(v.c_str());
        else if (k == "--phase-file")
            phase_file = v;
        else if (k == "--bytes")
            bytes = strtoull(v.c_str(), nullptr, 10);
        else if (k == "--bad-bytes")
            bad_bytes = strtoull(v.c_str(), nullptr, 10);
        else if (k == "--hold-ms")
            hold_ms = atoi(v.c_str());
        else {
            fprintf(stderr, "victim: unknown option %s\n", k.c_str());
            return 4;
        }
    }
    if (mode == "server" && !addr.empty())
        return run_server(addr, conns);
    if (mode == "client" && !addr.empty() && good > 0)
        return run_client(addr, good, bad, phase_file, bytes, bad_bytes, hold_ms);
    fprintf(stderr, "usage: victim server --addr A --conns N | client --addr A --good-port G "
                    "[--bad-port B] [--phase-file F] [--bytes N] [--bad-bytes M] [--hold-ms H]\n");
    return 4;
}
