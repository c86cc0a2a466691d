// peer: one end of an offload test connection (tests/offload).  Plain C++17, no Boost:
// this is the program that runs under librdmasock (or without it); offload_tests drives
// pairs of peers and asserts on what they print.
//
//   peer server --addr A [--port P] [options]   listen on A:P (P 0: ephemeral), print
//                                               "port=P", serve the connections in turn
//   peer client --addr A --port P [options]     connect once per connection, in turn
//
// Stream mode (--plan): one byte-verified connection per plan entry
// C2S:S2C[:API[:bidir|seq]] (sizes with K/M suffixes and "+N", e.g. 64K+1).  Each
// direction carries a running counter: the stream is a sequence of 32-bit little-endian
// words, word k being k * 2654435761 + salt (a bijection of the counter, so any lost,
// repeated, reordered or foreign byte shows), one salt per direction (client->server,
// server->client, banner).  seq: the client sends C2S bytes and shuts down its write
// side; the server reads them and the EOF, then sends S2C bytes and shuts down; the
// client reads them and the EOF.  bidir: both directions at once (a writer and a reader
// thread per peer).  API: write (read), writev (readv), send (recv MSG_WAITALL),
// sendmsg (recvmsg), sendfile (read); writev/readv/sendmsg/recvmsg split each call into
// up to 6 uneven iovecs, call sizes vary from 1 byte to --chunk.  --banner N: the server
// writes N bytes right after accept(), before reading; the client reads them first.
// --echo (server): send back what arrives, checking it is the client's stream from byte
// 0.  --close-listener (server): close the listening socket right after each accept(),
// as a one-shot server does, and listen anew on the same port for the next connection.
// --prefork N (server): listen, then fork N workers that accept and serve the
// connections (a pre-fork server: the master only waits); with --reuseport, the master
// makes one SO_REUSEPORT listener per worker (nginx `reuseport`), each worker accepts
// on its own.  --fork-per-conn (server):
// accept, fork a child that serves the connection, close the parent's copy (inetd
// style).  --fork-conns (client): make the first connection itself, each later one in a
// fork child (a child of a process that has used RDMA).  --fork-child MODE (client, seq
// plans): after sending its bytes, fork a child that does MODE to its copy of the
// connection while the parent waits, then goes on: close, closeall (every descriptor,
// as a daemon does), exit (exit(3): the library's exit step runs), exec (/bin/true,
// the descriptor inherited), use (a write and a read: both must fail, nothing is sent),
// maps (the child has none of the parent's device memory mapped but doorbell pages:
// the queues' memory a provider maps from /dev/infiniband, which the parent has, is
// not copied into a child, which never uses it).
// --exec-self after|before (client, seq plans with an --echo server): the process execs
// itself in the middle of its connection, the descriptor inherited, and the new image
// goes on with the stream where the old one stopped (--exec-continue FD:SENT:RECEIVED,
// added by the old image).  after: once the connection is on RDMA, half the bytes are
// sent and a quarter of the echo read (the rest of it arriving unread), then the exec;
// before: the exec right after connect() and the first 1000 bytes (the negotiation
// still under way).  The old image prints "exec_from transport=... sent=N received=N"
// first.  --exec-env-clean: the new image runs without LD_PRELOAD.  close: once on RDMA,
// the whole stream both ways, then an exec of /bin/true with the socket close-on-exec
// (the exec closes it; the server must read the EOF after every byte).  pass: as after,
// but instead of the exec the connection goes with SCM_RIGHTS to a new image of this
// program (forked and exec'd then: a process of its own, no fork copy of the
// connection), which goes on with the stream (--receive-from FD: the socketpair end
// the descriptor and "SENT:RECEIVED" come on); the first process closes its copy and
// exits with the receiver's status.  pass-mmsg: the same with sendmmsg(), the
// descriptor in its second message.  --pass-after N (an --echo server: a dispatcher
// that reads a request, then hands the connection to a worker): N bytes echoed, then the
// same pass to a new image, which echoes the rest.  --wait-rdma (client, seq plans):
// the stream starts once the connection is on RDMA (20 s at most; the default mode
// switches in the background).
// --wait-mode poll|select|epoll: nonblocking socket, every EAGAIN waits for
// readiness (10 s without it is a lost wake-up).
//
// Scenario mode (--scenario NAME,... on the tester, --helper --conns K on the other
// end): one connection per scenario; the tester drives the helper with small commands
// on the connection and checks socket semantics on its end (shutdown, linger, peek,
// nonblocking calls, FIONREAD, poll/select/epoll readiness, timeouts, a killed peer).
//
// Output, one line per connection, key=value, after the close:
//   conn=I role=client|server connect_us=N transport=rdma|tcp|none reason=CODE phase=P
//   info_sent=N info_received=N sent=N received=N eof=0|1 [values...] io_us=N close_us=N
// where transport/reason/phase/info_* come from getsockopt(SOL_RDMASOCK, RDMASOCK_INFO)
// taken just before close() (transport=none: the library is not loaded), sent/received
// are what the program moved, close_us is how long close() took.  Problems are printed
// as "error: ..." on stderr.  Exit status: 0 all verified, 1 data mismatch, 2 a call
// failed, 3 a scenario check failed, 4 usage.
#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <string>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "include/rdmasock.h"
#include "tests/common/io.hh"
#include "tests/common/proc.hh"

namespace {

enum Exit { kOk = 0, kMismatch = 1, kCallFailed = 2, kScenario = 3, kUsage = 4 };

constexpr uint32_t kSaltC2S = 0x01234567u;
constexpr uint32_t kSaltS2C = 0x89abcdefu;
constexpr uint32_t kSaltBanner = 0x5eed0b0bu;

// One connection of a stream run, from the client's point of view.
struct Entry {
    uint64_t c2s = 0, s2c = 0;
    std::string api = "write";
    bool bidir = false;
};

struct Options {
    bool server = false;
    std::string addr;
    int port = 0;
    std::vector<int> ports;  // client: connection i goes to ports[i % n]
    int conns = 1;
    size_t chunk = 256 * 1024;
    uint64_t banner = 0;
    bool echo = false;
    bool expect_echo = false;
    bool close_exit = false;
    bool nonblock_connect = false;
    bool helper = false;
    int hold_ms = 0;
    int pause_ms = 0;  // client, one-direction streams: sleep between the data and shutdown()
    bool fionread_banner = false;  // client: wait until FIONREAD counts the whole banner
    int accept_delay_ms = 0;  // server: sleep before each accept()
    int first_accept_delay_ms = 0;  // server: sleep before the first accept() only
    // server: close the listening socket right after each accept() (a one-shot server
    // such as nc -l), and listen anew on the same port for the next connection
    bool close_listener = false;
    int prefork = 0;            // server: workers that accept (0: this process accepts)
    bool reuseport = false;     // server, with prefork: one SO_REUSEPORT listener per worker
    bool fork_per_conn = false; // server: a child serves each connection
    bool fork_conns = false;    // client: connections after the first in fork children
    std::string fork_child;     // client: fork a child mid-connection that does this to its copy
    std::string exec_self;      // client: exec itself mid-connection (after|before the switch)
    bool exec_env_clean = false;  // ... into an environment without LD_PRELOAD
    int cont_fd = -1;             // --exec-continue: the inherited connection, and where it was
    int recv_from = -1;           // --receive-from: where the passed connection comes
    uint64_t pass_after = 0;      // --pass-after N (echo server): then to a new process
    uint64_t fork_after = 0;      // --fork-after N (echo server): then a fork child goes on
    std::string fork_mode = "close";  // --fork-mode: close|keep|exec (fork_after_child)
    bool wait_rdma = false;       // --wait-rdma (seq plans): the stream once on RDMA (a server waits for input meanwhile)
    uint64_t cont_sent = 0, cont_received = 0;
    bool push = false;        // server: write only, never read
    int stall_ms = 0;         // SO_RCVTIMEO/SO_SNDTIMEO on stream connections
    std::string warmup;       // client: ADDR:PORT to connect to (and close) first
    bool allow_tcp = false;  // scenarios on plain TCP: checks the checks against the kernel
    bool wait_decided = false;
    // server, bidir: shut down writing only once the connection is decided (a server
    // that shuts down before the RDMA request comes can no longer prove itself in its
    // stream, docs/protocol.md: the connection stays on TCP, closed_early)
    bool shutdown_decided = false;
    std::vector<Entry> plan;              // --plan: one entry per connection
    std::vector<std::string> scenarios;   // --scenario a,b,c: one per connection
};

Options opt;
std::string g_api = "write";  // the API of the current connection
std::string g_scenario;       // the scenario of the current connection
std::string g_wait;           // --wait-mode: poll|select|epoll ("" blocking calls)
std::atomic<unsigned> g_conn_gen{0};
int g_exit = kOk;
pthread_mutex_t g_out_mu = PTHREAD_MUTEX_INITIALIZER;

long long now_us()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<long long>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

void set_exit(int code)
{
    pthread_mutex_lock(&g_out_mu);
    if (g_exit == kOk || (code == kMismatch && g_exit != kMismatch))
        g_exit = code;
    pthread_mutex_unlock(&g_out_mu);
}

void errorf(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void errorf(int code, const char *fmt, ...)
{
    char b[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    dprintf(2, "error: %s\n", b);
    set_exit(code);
}

[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void die(const char *fmt, ...)
{
    char b[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    dprintf(2, "error: %s\n", b);
    _exit(kCallFailed);
}

// ---- the pattern ---------------------------------------------------------------------

inline uint8_t pattern_byte(uint64_t i, uint32_t salt)
{
    uint32_t w = static_cast<uint32_t>(i >> 2) * 2654435761u + salt;
    return static_cast<uint8_t>(w >> (8 * (i & 3)));
}

void fill(uint8_t *p, uint64_t off, size_t n, uint32_t salt)
{
    size_t i = 0;
    // Byte by byte up to a word boundary, then whole words.
    while (i < n && ((off + i) & 3) != 0) {
        p[i] = pattern_byte(off + i, salt);
        ++i;
    }
    uint32_t k = static_cast<uint32_t>((off + i) >> 2);
    while (i + 4 <= n) {
        uint32_t w = k * 2654435761u + salt;
        p[i] = static_cast<uint8_t>(w);
        p[i + 1] = static_cast<uint8_t>(w >> 8);
        p[i + 2] = static_cast<uint8_t>(w >> 16);
        p[i + 3] = static_cast<uint8_t>(w >> 24);
        ++k;
        i += 4;
    }
    while (i < n) {
        p[i] = pattern_byte(off + i, salt);
        ++i;
    }
}

// Returns -1 when p[0..n) is the pattern at off, else the index of the first bad byte.
long long check(const uint8_t *p, uint64_t off, size_t n, uint32_t salt)
{
    static thread_local std::vector<uint8_t> want;
    if (want.size() < n)
        want.resize(n);
    fill(want.data(), off, n, salt);
    if (memcmp(p, want.data(), n) == 0)
        return -1;
    for (size_t i = 0; i < n; ++i)
        if (p[i] != want[i])
            return static_cast<long long>(i);
    return -1;
}

// A deterministic sequence of call sizes (1 .. max), so calls end at odd places.
struct Sizes {
    uint64_t x;
    size_t max;
    Sizes(uint64_t seed, size_t m) : x(seed | 1), max(m) {}
    size_t next()  // 1 .. max
    {
        size_t n = pick();
        return n < max ? n : max;
    }
    size_t pick()
    {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        switch (x % 8) {
        case 0: return 1 + x % 17;
        case 1: return 1 + (x >> 8) % 4096;
        case 2: return max;
        case 3: return max / 2 + 3;
        default: return 1 + (x >> 8) % max;
        }
    }
};

// Split [p, p+n) into up to 6 iovecs of uneven sizes.
int split_iov(uint8_t *p, size_t n, iovec *iov)
{
    static const size_t parts[] = {1, 7, 4093, 0, 65536, 0};
    int k = 0;
    size_t left = n;
    for (size_t i = 0; i < 6 && left > 0; ++i) {
        size_t want = parts[i] != 0 ? parts[i] : (left + 1) / 2;
        if (i == 5 || want > left)
            want = left;
        iov[k].iov_base = p;
        iov[k].iov_len = want;
        p += want;
        left -= want;
        ++k;
    }
    if (left > 0)
        iov[k - 1].iov_len += left;
    return k;
}

// ---- socket helpers --------------------------------------------------------------------

struct Info {
    bool ok = false;
    rdmasock_info i{};
};

Info get_info(int fd)
{
    Info r;
    socklen_t len = sizeof r.i;
    r.ok = getsockopt(fd, SOL_RDMASOCK, RDMASOCK_INFO, &r.i, &len) == 0;
    return r;
}

std::string info_fields(int fd)
{
    Info in = get_info(fd);
    char b[256];
    if (!in.ok)
        snprintf(b, sizeof b, "transport=none reason=none phase=none info_sent=-1 info_received=-1");
    else
        snprintf(b, sizeof b, "transport=%s reason=%s phase=%s info_sent=%" PRIu64 " info_received=%" PRIu64,
                 in.i.transport == RDMASOCK_RDMA ? "rdma" : "tcp", in.i.reason_code, in.i.phase,
                 in.i.bytes_sent, in.i.bytes_received);
    return b;
}

bool is_rdma(int fd)
{
    Info in = get_info(fd);
    return in.ok && in.i.transport == RDMASOCK_RDMA;
}

sockaddr_in make_addr(const std::string &a, int port)
{
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, a.c_str(), &sa.sin_addr) != 1)
        die("bad address %s", a.c_str());
    return sa;
}

void out_line(const std::string &s)
{
    pthread_mutex_lock(&g_out_mu);
    fputs(s.c_str(), stdout);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&g_out_mu);
}

// Byte counts of one connection (both threads).
struct Counts {
    std::atomic<uint64_t> sent{0}, received{0};
    std::atomic<int> eof{0};
    std::atomic<long long> max_call_us{0};  // the longest single send/receive call
    std::atomic<long long> data_done_us{0}; // when the last expected byte was read (before the EOF)
    void call_took(long long us)
    {
        long long m = max_call_us.load();
        while (us > m && !max_call_us.compare_exchange_weak(m, us)) {
        }
    }
};

// ---- stream: send and receive with the chosen API ------------------------------------

// --wait-mode: the socket is nonblocking and every EAGAIN waits for readiness with poll,
// select or a (per thread, per connection) level-triggered epoll registration.  A wait
// that sees nothing for 10 s while bytes are still due is a lost wake-up.
bool wait_ready(int fd, bool for_write)
{
    const int ms = 10000;
    if (g_wait == "poll") {
        pollfd p{fd, static_cast<short>(for_write ? POLLOUT : POLLIN), 0};
        return poll(&p, 1, ms) == 1;
    }
    if (g_wait == "select") {
        fd_set set;
        FD_ZERO(&set);
        FD_SET(fd, &set);
        timeval tv{ms / 1000, 0};
        return select(fd + 1, for_write ? nullptr : &set, for_write ? &set : nullptr, nullptr, &tv) == 1;
    }
    // epoll: one registration per thread, connection and direction.
    thread_local int eps[2] = {-1, -1};
    thread_local unsigned gens[2] = {~0u, ~0u};
    int &ep = eps[for_write ? 1 : 0];
    if (gens[for_write ? 1 : 0] != g_conn_gen.load()) {
        if (ep >= 0)
            close(ep);
        ep = epoll_create1(EPOLL_CLOEXEC);
        epoll_event ev{};
        ev.events = for_write ? EPOLLOUT : EPOLLIN;
        ev.data.u64 = 0xfeedfacecafebeefull;
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0)
            die("epoll_ctl(ADD): %s", strerror(errno));
        gens[for_write ? 1 : 0] = g_conn_gen.load();
    }
    epoll_event out{};
    int n = epoll_wait(ep, &out, 1, ms);
    if (n == 1 && out.data.u64 != 0xfeedfacecafebeefull)
        die("epoll_wait returned foreign data 0x%" PRIx64, out.data.u64);
    return n == 1;
}

// Write n pattern bytes (stream offsets off..off+n) with the API; returns bytes written.
uint64_t send_stream(int fd, uint64_t off, uint64_t n, uint32_t salt, Counts &c)
{
    std::vector<uint8_t> buf(opt.chunk);
    Sizes sizes(0x9e3779b97f4a7c15ull ^ salt, opt.chunk);
    int file = -1;
    if (g_api == "sendfile") {
        char tmpl[] = "/tmp/offload-peer-XXXXXX";
        file = mkstemp(tmpl);
        if (file < 0)
            die("mkstemp: %s", strerror(errno));
        unlink(tmpl);
        for (uint64_t done = 0; done < n;) {
            size_t k = n - done < buf.size() ? static_cast<size_t>(n - done) : buf.size();
            fill(buf.data(), off + done, k, salt);
            if (write(file, buf.data(), k) != static_cast<ssize_t>(k))
                die("write temp file: %s", strerror(errno));
            done += k;
        }
    }
    uint64_t done = 0;
    while (done < n) {
        size_t want = sizes.next();
        if (want > n - done)
            want = static_cast<size_t>(n - done);
        ssize_t r;
        const long long t_call = now_us();
        if (g_api == "sendfile") {
            off_t pos = static_cast<off_t>(done);
            r = sendfile(fd, file, &pos, want);
        } else {
            fill(buf.data(), off + done, want, salt);
            if (g_api == "write") {
                r = write(fd, buf.data(), want);
            } else if (g_api == "send") {
                r = send(fd, buf.data(), want, MSG_NOSIGNAL);
            } else if (g_api == "writev" || g_api == "sendmsg") {
                iovec iov[8];
                int k = split_iov(buf.data(), want, iov);
                if (g_api == "writev") {
                    r = writev(fd, iov, k);
                } else {
                    msghdr m{};
                    m.msg_iov = iov;
                    m.msg_iovlen = static_cast<size_t>(k);
                    r = sendmsg(fd, &m, MSG_NOSIGNAL);
                }
            } else {
                die("unknown --api %s", g_api.c_str());
            }
        }
        c.call_took(now_us() - t_call);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN && !g_wait.empty()) {
            if (!wait_ready(fd, true)) {
                errorf(kCallFailed, "%s: no POLLOUT for 10 s after EAGAIN, %" PRIu64 " of %" PRIu64 " bytes sent",
                       g_wait.c_str(), done, n);
                break;
            }
            continue;
        }
        if (r < 0 && errno == EAGAIN) {
            errorf(kCallFailed, "%s: no progress for %d ms after %" PRIu64 " of %" PRIu64
                   " bytes sent (blocking socket, SO_SNDTIMEO): a lost wake-up?", g_api.c_str(), opt.stall_ms, done, n);
            break;
        }
        if (r <= 0) {
            errorf(kCallFailed, "%s after %" PRIu64 " bytes: %s", g_api.c_str(), done,
                   r == 0 ? "returned 0" : strerror(errno));
            break;
        }
        done += static_cast<uint64_t>(r);
        c.sent += static_cast<uint64_t>(r);
    }
    if (file >= 0)
        close(file);
    return done;
}

// Read exactly n bytes (stream offsets off..), verifying them; expect_eof: then read the
// EOF.  Returns bytes read.
uint64_t recv_stream(int fd, uint64_t off, uint64_t n, uint32_t salt, bool expect_eof, Counts &c,
                     const char *what = "stream")
{
    std::vector<uint8_t> buf(opt.chunk + 64);
    Sizes sizes(0x51ed2701ull ^ salt, opt.chunk);
    uint64_t done = 0;
    bool mismatch = false;
    while (done < n) {
        size_t want = sizes.next();
        if (want > n - done)
            want = static_cast<size_t>(n - done);
        ssize_t r;
        const long long t_call = now_us();
        if (g_api == "read" || g_api == "write" || g_api == "sendfile") {
            r = read(fd, buf.data(), want);
        } else if (g_api == "send") {
            r = recv(fd, buf.data(), want, MSG_WAITALL);
            if (r > 0 && static_cast<size_t>(r) != want && g_wait.empty()) {
                errorf(kCallFailed, "recv(MSG_WAITALL, %zu) returned %zd before EOF at %" PRIu64, want, r,
                       done);
            }
        } else {
            iovec iov[8];
            int k = split_iov(buf.data(), want, iov);
            if (g_api == "writev") {
                r = readv(fd, iov, k);
            } else {
                msghdr m{};
                m.msg_iov = iov;
                m.msg_iovlen = static_cast<size_t>(k);
                r = recvmsg(fd, &m, 0);
                if (r >= 0 && (m.msg_flags & MSG_TRUNC))
                    errorf(kCallFailed, "recvmsg set MSG_TRUNC");
            }
        }
        c.call_took(now_us() - t_call);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN && !g_wait.empty()) {
            if (!wait_ready(fd, false)) {
                errorf(kCallFailed, "%s: no POLLIN for 10 s, %" PRIu64 " of %" PRIu64 " %s bytes read", g_wait.c_str(),
                       done, n, what);
                return done;
            }
            continue;
        }
        if (r < 0 && errno == EAGAIN) {
            errorf(kCallFailed, "reading the %s: no progress for %d ms after %" PRIu64 " of %" PRIu64
                   " bytes (blocking socket, SO_RCVTIMEO): a lost wake-up?", what, opt.stall_ms, done, n);
            return done;
        }
        if (r < 0) {
            errorf(kCallFailed, "reading the %s after %" PRIu64 " of %" PRIu64 " bytes: %s", what, done, n,
                   strerror(errno));
            return done;
        }
        if (r == 0) {
            errorf(kMismatch, "early EOF in the %s after %" PRIu64 " of %" PRIu64 " bytes", what, done, n);
            c.eof = 1;
            return done;
        }
        if (!mismatch) {
            long long bad = check(buf.data(), off + done, static_cast<size_t>(r), salt);
            if (bad >= 0) {
                mismatch = true;
                errorf(kMismatch, "%s mismatch at byte %" PRIu64 ": got 0x%02x, want 0x%02x", what,
                       done + static_cast<uint64_t>(bad), buf[static_cast<size_t>(bad)],
                       pattern_byte(off + done + static_cast<uint64_t>(bad), salt));
            }
        }
        done += static_cast<uint64_t>(r);
        c.received += static_cast<uint64_t>(r);
    }
    c.data_done_us = now_us();
    if (expect_eof) {
        for (;;) {
            ssize_t r = read(fd, buf.data(), buf.size());
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0 && errno == EAGAIN && !g_wait.empty()) {
                if (!wait_ready(fd, false)) {
                    errorf(kCallFailed, "%s: no POLLIN for the EOF for 10 s", g_wait.c_str());
                    break;
                }
                continue;
            }
            if (r < 0) {
                errorf(kCallFailed, "reading the EOF after %" PRIu64 " bytes: %s", done, strerror(errno));
                break;
            }
            if (r > 0) {
                c.received += static_cast<uint64_t>(r);
                errorf(kMismatch, "%zd bytes more than the %" PRIu64 " expected in the %s", r, n, what);
                continue;
            }
            c.eof = 1;
            break;
        }
    }
    return done;
}

void do_shutdown_wr(int fd)
{
    if (shutdown(fd, SHUT_WR) != 0)
        errorf(kCallFailed, "shutdown(SHUT_WR): %s", strerror(errno));
}

// The server side of --echo: verify the client's pattern, send it back.
void echo(int fd, uint64_t expect, Counts &c, uint64_t start = 0, uint64_t stop = ~0ull)
{
    std::vector<uint8_t> buf(opt.chunk);
    uint64_t off = start;
    bool mismatch = false;
    while (off < stop) {
        ssize_t r = read(fd, buf.data(), static_cast<size_t>(std::min<uint64_t>(buf.size(), stop - off)));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            errorf(kCallFailed, "echo read after %" PRIu64 " bytes: %s", off, strerror(errno));
            return;
        }
        if (r == 0) {
            c.eof = 1;
            break;
        }
        c.received += static_cast<uint64_t>(r);
        if (!mismatch) {
            long long bad = check(buf.data(), off, static_cast<size_t>(r), kSaltC2S);
            if (bad >= 0) {
                mismatch = true;
                errorf(kMismatch, "echo: foreign byte at %" PRIu64 ": got 0x%02x, want 0x%02x",
                       off + static_cast<uint64_t>(bad), buf[static_cast<size_t>(bad)],
                       pattern_byte(off + static_cast<uint64_t>(bad), kSaltC2S));
            }
        }
        off += static_cast<uint64_t>(r);
        for (ssize_t w = 0; w < r;) {
            ssize_t k = write(fd, buf.data() + w, static_cast<size_t>(r - w));
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                errorf(kCallFailed, "echo write: %s", strerror(errno));
                return;
            }
            w += k;
            c.sent += static_cast<uint64_t>(k);
        }
    }
    if (off == stop)
        return;  // (--pass-after: the rest is the receiver's)
    if (off != expect)
        errorf(kMismatch, "echo: got %" PRIu64 " bytes, want %" PRIu64, off, expect);
    do_shutdown_wr(fd);
}

// Wait (at most 5 s) until the library has decided a server socket (phase neither
// "maybe" nor "verifying"), waiting for input on it meanwhile (the library binds RDMA to
// a server connection once the program reads it or waits for input on it); returns the
// microseconds waited.
long long wait_decided(int fd)
{
    long long t0 = now_us();
    for (;;) {
        Info in = get_info(fd);
        if (!in.ok || (strcmp(in.i.phase, "maybe") != 0 && strcmp(in.i.phase, "verifying") != 0) ||
            now_us() - t0 > 5000000)
            break;
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 10) > 0)
            usleep(1000);
    }
    return now_us() - t0;
}

// Mappings of /dev/infiniband files in this process, but those of device registers
// (VM_IO: smaps "io", doorbell pages, which madvise cannot keep from a child).
int device_memory_maps()
{
    FILE *f = fopen("/proc/self/smaps", "re");
    if (f == nullptr)
        return -1;
    char line[4096];
    bool dev = false;
    int n = 0;
    while (fgets(line, sizeof line, f) != nullptr) {
        unsigned long a = 0, b = 0;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, ':') != nullptr && b > a)
            dev = strstr(line, " /dev/infiniband/") != nullptr;
        else if (dev && strncmp(line, "VmFlags:", 8) == 0 && strstr(line, " io") == nullptr)
            ++n;
    }
    fclose(f);
    return n;
}

// One connection in stream mode.
// --fork-child: what a fork child does to its copy of a live connection (the parent
// waits for it).  Returns "MODE:ok", or "MODE:status" (the child's exit status).
std::string fork_child(int fd)
{
    // raw-exit, raw-exec: exit, exec, in a child made by _Fork() (no fork handlers: the
    // library's fork() does not run, and the child sees the parent's connections).
    const bool raw = opt.fork_child.rfind("raw-", 0) == 0;
    const std::string m = raw ? opt.fork_child.substr(4) : opt.fork_child;
    if (m == "maps" && device_memory_maps() <= 0)
        errorf(kScenario, "--fork-child maps: the parent has no device memory mapped (%d): nothing to test",
               device_memory_maps());
    fflush(stdout);
    pid_t p = raw ? _Fork() : fork();
    if (p < 0)
        die("fork: %s", strerror(errno));
    if (p == 0) {
        int rc = 0;
        if (m == "close") {
            rc = close(fd) == 0 ? 0 : 3;
        } else if (m == "closeall") {
            for (int i = 3; i < 1024; ++i)
                close(i);
        } else if (m == "exit") {
            exit(0);
        } else if (m == "exec") {
            fcntl(fd, F_SETFD, 0);  // inherited by the new program
            execl("/bin/true", "true", static_cast<char *>(nullptr));
            rc = 4;
        } else if (m == "maps") {
            rc = device_memory_maps() == 0 ? 0 : 7;
        } else if (m == "use") {
            // The copy is the parent's connection on RDMA: a wait for input on it asks the
            // parent for it, and it is a kernel socket from then on, in both processes
            // (reason forked here).  Nothing is sent: the parent's stream goes on.
            pollfd p{fd, POLLIN, 0};
            const int n = poll(&p, 1, 0);
            Info in = get_info(fd);
            if (n < 0 || (p.revents & (POLLERR | POLLNVAL)) || !in.ok || in.i.transport != RDMASOCK_TCP ||
                strcmp(in.i.reason_code, "forked") != 0)
                rc = 5;
        } else {
            rc = 6;
        }
        _exit(rc);
    }
    int st = 0;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return opt.fork_child + ":ok";
    errorf(kScenario, "--fork-child %s: the child ended with status 0x%x", opt.fork_child.c_str(), st);
    return opt.fork_child + ":" + std::to_string(st);
}

char **g_argv = nullptr;

// --exec-self pass: the receiver, a new image of this program started now, gets `fd`
// and `counts` over a socketpair; this process closes its copy and ends as it does.
// This program's own arguments (to exec itself with more).
std::vector<std::string> own_args()
{
    std::vector<std::string> args;
    for (char **a = g_argv; *a != nullptr; ++a)
        args.push_back(*a);
    return args;
}

// `args` as an argv for execv() (pointers into it).
std::vector<char *> argv_of(std::vector<std::string> &args)
{
    std::vector<char *> argv;
    for (auto &a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    return argv;
}

// Before an exec or a pass: the "exec_from" line (where the stream stands), and that
// place as "SENT:RECEIVED"; not with the stream broken.
std::string leaving_point(int fd, const Counts &c)
{
    out_line("exec_from " + info_fields(fd) + " sent=" + std::to_string(c.sent.load()) +
             " received=" + std::to_string(c.received.load()));
    if (g_exit != kOk)
        die("exec or pass: not with the stream broken (above)");
    return std::to_string(c.sent.load()) + ":" + std::to_string(c.received.load());
}

[[noreturn]] void pass_on(int fd, const std::string &counts)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        die("socketpair: %s", strerror(errno));
    std::vector<std::string> args = own_args();
    args.push_back("--receive-from");
    args.push_back(std::to_string(sv[1]));
    std::vector<char *> argv = argv_of(args);
    const pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        fcntl(sv[1], F_SETFD, 0);
        execv("/proc/self/exe", argv.data());
        _exit(kCallFailed);
    }
    close(sv[1]);
    char ctl[CMSG_SPACE(sizeof(int))] = {};
    iovec iov{const_cast<char *>(counts.data()), counts.size()};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    if (opt.exec_self == "pass-mmsg") {  // (sendmmsg: an empty message first)
        char none = 0;
        iovec iov0{&none, 1};
        mmsghdr v[2] = {};
        v[0].msg_hdr.msg_iov = &iov0;
        v[0].msg_hdr.msg_iovlen = 1;
        v[1].msg_hdr = m;
        if (sendmmsg(sv[0], v, 2, 0) != 2)
            die("sendmmsg SCM_RIGHTS: %s", strerror(errno));
    } else if (sendmsg(sv[0], &m, 0) != static_cast<ssize_t>(counts.size())) {
        die("sendmsg SCM_RIGHTS: %s", strerror(errno));
    }
    close(fd);
    close(sv[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : kCallFailed);
}

// --receive-from: the connection --exec-self pass sends, and where it was.
void receive_passed()
{
    char data[64] = {}, ctl[CMSG_SPACE(sizeof(int))] = {};
    iovec iov{data, sizeof data - 1};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    if (opt.exec_self == "pass-mmsg") {
        char none = 1;
        if (read(opt.recv_from, &none, 1) != 1 || none != 0)
            die("receive-from: no empty message first");
    }
    const ssize_t r = recvmsg(opt.recv_from, &m, MSG_CMSG_CLOEXEC);
    cmsghdr *cm = r > 0 ? CMSG_FIRSTHDR(&m) : nullptr;
    if (cm == nullptr || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(sizeof(int)))
        die("receive-from: no descriptor (%s)", r < 0 ? strerror(errno) : "none in the message");
    memcpy(&opt.cont_fd, CMSG_DATA(cm), sizeof(int));
    unsigned long long sent = 0, received = 0;
    if (sscanf(data, "%llu:%llu", &sent, &received) != 2)
        die("receive-from: counts [%s]", data);
    opt.cont_sent = sent;
    opt.cont_received = received;
    close(opt.recv_from);
}

// --exec-self: the first image's part of the connection, then the exec (which returns
// only when it failed), or the pass.
void exec_self(int fd, const Entry &e, Counts &c)
{
    const bool before = opt.exec_self == "before", close = opt.exec_self == "close",
               pass = opt.exec_self == "pass" || opt.exec_self == "pass-mmsg";
    if (!before) {
        for (long long t0 = now_us(); !is_rdma(fd) && now_us() - t0 < 20000000;)
            usleep(10000);
    }
    const uint64_t first = before ? std::min<uint64_t>(e.c2s, 1000) : close ? e.c2s : e.c2s / 2;
    send_stream(fd, 0, first, kSaltC2S, c);
    if (close) {
        recv_stream(fd, 0, e.s2c, kSaltC2S, false, c);
    } else if (!before) {
        recv_stream(fd, 0, std::min(first, e.s2c) / 4, kSaltC2S, false, c);
        usleep(300 * 1000);  // (the rest of the echo arrives meanwhile, unread)
    }
    const std::string counts = leaving_point(fd, c);
    if (close) {  // (the socket is close-on-exec: the exec closes it)
        execl("/bin/true", "true", static_cast<char *>(nullptr));
        die("exec /bin/true: %s", strerror(errno));
    }
    if (pass)
        pass_on(fd, counts);
    std::vector<std::string> args = own_args();
    args.push_back("--exec-continue");
    args.push_back(std::to_string(fd) + ":" + counts);
    std::vector<char *> argv = argv_of(args);
    fcntl(fd, F_SETFD, 0);  // (inherited by the new image)
    if (opt.exec_env_clean) {
        std::vector<char *> envp = testcommon::environ_without_preload();
        execve("/proc/self/exe", argv.data(), envp.data());
    } else {
        execv("/proc/self/exe", argv.data());
    }
    die("exec: %s", strerror(errno));
}

// --fork-after: the echo goes on in a fork child (this function returns there), with
// the parent's copy of the connection closed at once (close: a server that read a
// request, then forks a child to answer it), or kept open until the child ends (keep),
// or the child execs this program to go on (exec: inetd, CGI).  The parent ends as the
// child does, and prints nothing more.
void fork_after_child(int fd, const std::string &counts)
{
    fflush(stdout);
    const pid_t p = fork();
    if (p < 0)
        die("fork: %s", strerror(errno));
    if (p == 0) {
        if (opt.fork_mode != "exec")
            return;
        std::vector<std::string> args = own_args();
        args.push_back("--exec-continue");
        args.push_back(std::to_string(fd) + ":" + counts);
        std::vector<char *> argv = argv_of(args);
        fcntl(fd, F_SETFD, 0);  // (inherited by the new image)
        execv("/proc/self/exe", argv.data());
        die("exec: %s", strerror(errno));
    }
    if (opt.fork_mode == "close" && close(fd) != 0)
        errorf(kCallFailed, "close of the parent's copy: %s", strerror(errno));
    int st = 0;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {
    }
    if (opt.fork_mode != "close")
        close(fd);
    fflush(stdout);
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : kCallFailed);
}

// --exec-continue: the new image's part, from where the old one stopped, both
// directions at once (the echo of what it sends comes back meanwhile).
void exec_continue(int fd, const Entry &e, Counts &c)
{
    c.sent = opt.cont_sent;
    c.received = opt.cont_received;
    std::thread writer([&] {
        send_stream(fd, opt.cont_sent, e.c2s - opt.cont_sent, kSaltC2S, c);
        do_shutdown_wr(fd);
    });
    recv_stream(fd, opt.cont_received, e.s2c - opt.cont_received, kSaltC2S, true, c);
    writer.join();
}

void stream(int fd, const Entry &e, Counts &c, std::string &extra)
{
    const bool client = !opt.server;
    const uint64_t to_send = client ? e.c2s : e.s2c;
    const uint64_t to_recv = client ? e.s2c : e.c2s;
    const uint32_t out_salt = client ? kSaltC2S : kSaltS2C;
    const uint32_t in_salt = opt.expect_echo ? kSaltC2S : (client ? kSaltS2C : kSaltC2S);
    ++g_conn_gen;
    if (!g_wait.empty())
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    else if (opt.stall_ms > 0) {
        // A blocking call that makes no progress for this long fails with EAGAIN
        // (reported as a stall) instead of hanging the test.
        timeval tv{opt.stall_ms / 1000, (opt.stall_ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    if (opt.banner > 0) {
        if (client) {
            if (opt.fionread_banner) {  // FIONREAD must count the whole banner before it is read
                int n = 0;
                long long t0 = now_us();
                while ((ioctl(fd, FIONREAD, &n) != 0 || n < static_cast<int>(opt.banner)) && now_us() - t0 < 10000000)
                    usleep(1000);
                if (n < static_cast<int>(opt.banner))
                    errorf(kCallFailed, "FIONREAD said %d of the %d banner bytes for 10 s", n, static_cast<int>(opt.banner));
            }
            recv_stream(fd, 0, opt.banner, kSaltBanner, false, c, "banner");
        } else {
            send_stream(fd, 0, opt.banner, kSaltBanner, c);
        }
    }
    if (opt.echo) {
        if (opt.recv_from >= 0 || opt.cont_fd >= 0) {  // (--pass-after's receiver, --fork-mode exec's image)
            c.sent = opt.cont_sent;
            c.received = opt.cont_received;
            echo(fd, to_recv, c, opt.cont_received);
            extra += " exec_continued=1";
            return;
        }
        if (opt.pass_after > 0) {
            echo(fd, to_recv, c, 0, opt.pass_after);
            pass_on(fd, leaving_point(fd, c));
        }
        if (opt.fork_after > 0) {
            echo(fd, to_recv, c, 0, opt.fork_after);
            fork_after_child(fd, leaving_point(fd, c));
            echo(fd, to_recv, c, c.received);
            extra += " exec_continued=1";
            return;
        }
        echo(fd, to_recv, c);
        return;
    }
    if (opt.push && !client) {  // write only: never read, never wait for input
        send_stream(fd, 0, to_send, out_salt, c);
        do_shutdown_wr(fd);
        return;
    }
    if (e.bidir) {
        if (opt.wait_decided && !client)
            extra += " decided_after_us=" + std::to_string(wait_decided(fd));
        long long t0 = now_us();
        std::thread writer([&] {
            send_stream(fd, 0, to_send, out_salt, c);
            if (opt.shutdown_decided && !client)
                wait_decided(fd);
            if (!opt.close_exit)
                do_shutdown_wr(fd);
        });
        recv_stream(fd, 0, to_recv, in_salt, true, c);
        writer.join();
        extra += " data_ms=" + std::to_string((now_us() - t0) / 1000);
        return;
    }
    if (client && opt.cont_fd >= 0) {
        exec_continue(fd, e, c);
        extra += " exec_continued=1";
        return;
    }
    if (client && !opt.exec_self.empty())
        exec_self(fd, e, c);
    if (client) {
        for (long long t0 = now_us(); opt.wait_rdma && !is_rdma(fd) && now_us() - t0 < 20000000;)
            usleep(10000);
        long long t0 = now_us();
        send_stream(fd, 0, to_send, out_salt, c);
        extra += " send_ms=" + std::to_string((now_us() - t0) / 1000);
        if (!opt.fork_child.empty())
            extra += " child=" + fork_child(fd);
        if (opt.close_exit)
            return;
        if (opt.pause_ms > 0)  // no socket call at all meanwhile (usleep is not intercepted)
            usleep(static_cast<useconds_t>(opt.pause_ms) * 1000);
        do_shutdown_wr(fd);
        recv_stream(fd, 0, to_recv, in_salt, true, c);
    } else {
        if (opt.wait_rdma)
            extra += " decided_after_us=" + std::to_string(wait_decided(fd));
        long long t0 = now_us();
        recv_stream(fd, 0, to_recv, in_salt, true, c);
        extra += " recv_ms=" + std::to_string((now_us() - t0) / 1000) +
                 " data_in_ms=" + std::to_string((c.data_done_us - t0) / 1000);
        extra += std::string(" eof_before_send=") + (c.eof ? "1" : "0");
        t0 = now_us();
        send_stream(fd, 0, to_send, out_salt, c);
        extra += " send_ms=" + std::to_string((now_us() - t0) / 1000);
        if (!opt.close_exit)
            do_shutdown_wr(fd);
    }
}

// ---- scenarios ---------------------------------------------------------------------------
//
// Commands from the tester to the helper (one byte, then a 4-byte length where noted):
//   d L   send L pattern bytes (helper->tester stream)     r L   read and verify L bytes
//   R L   sleep 1 s, then read and verify L bytes          a     send the 1-byte ack 'A'
//   w     shutdown(SHUT_WR)                                 l     SO_LINGER {1,0}, close, exit
//   k     print "ready" and wait to be killed               (EOF) close and exit
//   P     print "ready", stop (SIGSTOP) until continued, then read and verify the
//         tester's bytes up to its EOF
//   X L   send L pattern bytes, then end without closing anything: _exit()
//   T L   the same, then die of SIGTERM (its default action)
//   Z L   the same, then execve() /bin/true, the socket close-on-exec
// The tester->helper data stream and the helper->tester stream each have their own
// running offset (commands are not part of the pattern stream).

struct Helper {
    int fd;
    Counts &c;
    uint64_t in_off = 0;   // tester->helper pattern offset
    uint64_t out_off = 0;  // helper->tester pattern offset
};

// Read all n bytes (false on EOF or an error), counted in c.received.
bool read_full(int fd, void *p, size_t n, Counts &c)
{
    size_t done = testcommon::read_n(fd, p, n);
    c.received += static_cast<uint64_t>(done);
    return done == n;
}

bool write_full(int fd, const void *p, size_t n, Counts &c)
{
    auto *b = static_cast<const uint8_t *>(p);
    size_t done = 0;
    while (done < n) {
        ssize_t r = send(fd, b + done, n - done, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            pollfd p1{fd, POLLOUT, 0};
            poll(&p1, 1, 5000);
            continue;
        }
        if (r <= 0)
            return false;
        done += static_cast<size_t>(r);
        c.sent += static_cast<uint64_t>(r);
    }
    return true;
}

void helper_loop(int fd, Counts &c, std::string &extra)
{
    Helper h{fd, c};
    std::vector<uint8_t> buf(opt.chunk);
    uint64_t after_eof = 0;
    for (;;) {
        uint8_t cmd;
        ssize_t r = read(fd, &cmd, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            extra += std::string(" helper_read_errno=") + strerrorname_np(errno);
            return;
        }
        if (r == 0) {
            c.eof = 1;
            if (after_eof > 0) {  // 'h': the other direction after our EOF
                extra += " sent_after_eof=" + std::to_string(after_eof);
                while (after_eof > 0) {
                    size_t k = after_eof < buf.size() ? after_eof : buf.size();
                    fill(buf.data(), h.out_off, k, kSaltS2C);
                    if (!write_full(fd, buf.data(), k, c)) {
                        errorf(kCallFailed, "helper: write after EOF: %s", strerror(errno));
                        return;
                    }
                    h.out_off += k;
                    after_eof -= k;
                }
                do_shutdown_wr(fd);
            }
            return;
        }
        c.received += 1;
        uint32_t len = 0;
        if (cmd == 'd' || cmd == 'r' || cmd == 'R' || cmd == 'h' || cmd == 'X' || cmd == 'T' || cmd == 'Z') {
            if (!read_full(fd, &len, 4, c)) {
                errorf(kCallFailed, "helper: short command");
                return;
            }
        }
        switch (cmd) {
        case 'X':
        case 'T':
        case 'Z':
        case 'd':
            while (len > 0) {
                size_t k = len < buf.size() ? len : buf.size();
                fill(buf.data(), h.out_off, k, kSaltS2C);
                if (!write_full(fd, buf.data(), k, c)) {
                    errorf(kCallFailed, "helper: write: %s", strerror(errno));
                    return;
                }
                h.out_off += k;
                len -= static_cast<uint32_t>(k);
            }
            if (cmd == 'X')
                _exit(0);
            if (cmd == 'T') {
                signal(SIGTERM, SIG_DFL);
                raise(SIGTERM);
            }
            if (cmd == 'Z') {
                fcntl(fd, F_SETFD, FD_CLOEXEC);
                execl("/bin/true", "true", static_cast<char *>(nullptr));
                errorf(kCallFailed, "helper: exec /bin/true: %s", strerror(errno));
                return;
            }
            break;
        case 'R':
            usleep(1000000);
            [[fallthrough]];
        case 'r': {
            Counts tmp;
            uint64_t got = recv_stream(fd, h.in_off, len, kSaltC2S, false, tmp, "tester data");
            c.received += tmp.received.load();
            h.in_off += got;
            if (got != len)
                return;
            break;
        }
        case 'h':
            after_eof = len;
            break;
        case 'a': {
            char a = 'A';
            if (!write_full(fd, &a, 1, c))
                errorf(kCallFailed, "helper: ack: %s", strerror(errno));
            break;
        }
        case 'w':
            do_shutdown_wr(fd);
            break;
        case 'l': {
            linger lg{1, 0};
            if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) != 0)
                errorf(kCallFailed, "SO_LINGER: %s", strerror(errno));
            extra += " helper=linger0";
            return;  // the caller prints the line and closes
        }
        case 'k':
            out_line("ready");
            for (;;)
                pause();
        case 'P': {
            out_line("ready");
            raise(SIGSTOP);
            uint64_t got = 0;
            for (;;) {
                ssize_t r = read(fd, buf.data(), buf.size());
                if (r < 0 && errno == EINTR)
                    continue;
                if (r < 0) {
                    extra += std::string(" after_stop_errno=") + strerrorname_np(errno);
                    break;
                }
                if (r == 0) {
                    c.eof = 1;
                    break;
                }
                long long bad = check(buf.data(), h.in_off, static_cast<size_t>(r), kSaltC2S);
                if (bad >= 0) {
                    errorf(kMismatch, "after the stop: mismatch at tester byte %" PRIu64,
                           h.in_off + static_cast<uint64_t>(bad));
                    break;
                }
                h.in_off += static_cast<uint64_t>(r);
                got += static_cast<uint64_t>(r);
                c.received += static_cast<uint64_t>(r);
            }
            extra += " after_stop=" + std::to_string(got);
            return;
        }
        default:
            errorf(kCallFailed, "helper: unknown command 0x%02x", cmd);
            return;
        }
    }
}

// The tester's side of the command protocol.
struct Tester {
    int fd;
    Counts &c;
    std::string &extra;
    uint64_t in_off = 0;   // helper->tester pattern offset
    uint64_t out_off = 0;  // tester->helper pattern offset
    bool failed = false;

    void cmd(char k, uint32_t len = 0, bool has_len = false)
    {
        uint8_t b[5] = {static_cast<uint8_t>(k)};
        memcpy(b + 1, &len, 4);
        if (!write_full(fd, b, has_len ? 5 : 1, c))
            die("tester: command '%c': %s", k, strerror(errno));
    }
    void ask_data(uint32_t len) { cmd('d', len, true); }
    // Send len pattern bytes the helper reads (command 'r' or 'R').
    void give_data(uint32_t len, char k = 'r')
    {
        cmd(k, len, true);
        std::vector<uint8_t> b(len);
        fill(b.data(), out_off, len, kSaltC2S);
        if (!write_full(fd, b.data(), len, c))
            die("tester: data: %s", strerror(errno));
        out_off += len;
    }
    void fail(const char *fmt, ...) __attribute__((format(printf, 2, 3)))
    {
        char b[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b, sizeof b, fmt, ap);
        va_end(ap);
        dprintf(2, "error: scenario %s: %s\n", g_scenario.c_str(), b);
        set_exit(kScenario);
        failed = true;
    }
    // Verify bytes the program got from the helper stream.
    void verify(const uint8_t *p, size_t n)
    {
        long long bad = check(p, in_off, n, kSaltS2C);
        if (bad >= 0)
            fail("data mismatch at helper byte %" PRIu64, in_off + static_cast<uint64_t>(bad));
        in_off += n;
        c.received += n;
    }
    // Blocking read of exactly n helper bytes (verified).
    void take(size_t n)
    {
        std::vector<uint8_t> b(n);
        size_t done = 0;
        while (done < n) {
            ssize_t r = read(fd, b.data() + done, n - done);
            if (r < 0 && (errno == EINTR))
                continue;
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                pollfd p{fd, POLLIN, 0};
                poll(&p, 1, 5000);
                continue;
            }
            if (r <= 0) {
                fail("read %zu helper bytes: got %zu then %s", n, done, r == 0 ? "EOF" : strerror(errno));
                return;
            }
            done += static_cast<size_t>(r);
        }
        verify(b.data(), n);
    }
    void note(const std::string &k, long long v) { extra += " " + k + "=" + std::to_string(v); }
    // 1000 bytes to the helper, then its ack: the connection is settled (on RDMA, both
    // ends past their switch) before a scenario ends it.
    bool settle()
    {
        give_data(1000);
        cmd('a');
        uint8_t a = 0;
        if (!read_full(fd, &a, 1, c) || a != 'A') {
            fail("no ack");
            return false;
        }
        return true;
    }
    // Finish: half-close, read the rest (must be EOF).
    void finish()
    {
        if (shutdown(fd, SHUT_WR) != 0)
            fail("final shutdown: %s", strerror(errno));
        uint8_t b[256];
        for (;;) {
            ssize_t r = read(fd, b, sizeof b);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                pollfd p{fd, POLLIN, 0};
                poll(&p, 1, 5000);
                continue;
            }
            if (r < 0) {
                fail("final read: %s", strerror(errno));
                return;
            }
            if (r == 0) {
                c.eof = 1;
                return;
            }
            fail("%zd unexpected bytes before the final EOF", r);
            c.received += static_cast<uint64_t>(r);
        }
    }
};

int poll1(int fd, short events, int ms, short *rev)
{
    pollfd p{fd, events, 0};
    int r = poll(&p, 1, ms);
    *rev = p.revents;
    return r;
}

std::string revents_str(unsigned e)
{
    std::string s;
    struct {
        unsigned bit;
        const char *name;
    } names[] = {{EPOLLIN, "IN"},       {EPOLLOUT, "OUT"}, {EPOLLRDHUP, "RDHUP"}, {EPOLLHUP, "HUP"},
                 {EPOLLERR, "ERR"},     {EPOLLPRI, "PRI"}};
    for (auto &n : names)
        if (e & n.bit)
            s += std::string(s.empty() ? "" : "|") + n.name;
    return s.empty() ? "0" : s;
}

void scenario(int fd, Counts &c, std::string &extra)
{
    Tester t{fd, c, extra};
    const std::string &s = g_scenario;
    // A server socket is undecided (phase maybe/verifying) until the client's CONFIRM
    // has been seen; the library switches it without the program reading.
    t.note("decided_after_us", wait_decided(fd));
    if (!is_rdma(fd) && !opt.allow_tcp) {
        t.fail("the connection is not on RDMA (%s)", info_fields(fd).c_str());
        return;
    }
    if (s == "halfclose") {
        // The helper sends 1 MiB only after it has read our EOF: a direction still works
        // after the other one is shut down.
        t.cmd('h', 1 << 20, true);
        t.give_data(1 << 20);
        if (shutdown(fd, SHUT_WR) != 0)
            return t.fail("shutdown(SHUT_WR): %s", strerror(errno));
        uint8_t b[8];
        if (send(fd, b, 1, MSG_NOSIGNAL) != -1 || errno != EPIPE)
            return t.fail("send after SHUT_WR: want EPIPE, got %s", strerror(errno));
        t.take(1 << 20);
        ssize_t r = read(fd, b, sizeof b);
        if (r != 0)
            return t.fail("read after the helper's 1 MiB: %zd (%s), want EOF", r, strerror(errno));
        c.eof = 1;
        return;
    } else if (s == "peek") {
        t.ask_data(1000);
        short rev;
        if (poll1(fd, POLLIN, 5000, &rev) != 1 || !(rev & POLLIN))
            return t.fail("no POLLIN for 1000 bytes");
        uint8_t b[2000];
        ssize_t r = recv(fd, b, 600, MSG_PEEK);
        if (r != 600)
            return t.fail("recv(600, MSG_PEEK) returned %zd (%s)", r, strerror(errno));
        if (check(b, 0, 600, kSaltS2C) >= 0)
            return t.fail("peeked bytes differ");
        r = recv(fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
        if (r != 1000)
            return t.fail("second recv(2000, MSG_PEEK) returned %zd, want 1000", r);
        if (check(b, 0, 1000, kSaltS2C) >= 0)
            return t.fail("peeked bytes differ (second peek)");
        int avail = -1;
        if (ioctl(fd, FIONREAD, &avail) != 0 || avail != 1000)
            return t.fail("FIONREAD after MSG_PEEK: %d, want 1000", avail);
        r = recv(fd, b, 300, 0);
        if (r != 300)
            return t.fail("recv(300) after peeking returned %zd", r);
        t.verify(b, 300);
        r = recv(fd, b, 100, MSG_PEEK);
        if (r != 100 || check(b, 300, 100, kSaltS2C) >= 0)
            return t.fail("peek after a partial read: %zd bytes or wrong data", r);
        r = recv(fd, b, sizeof b, 0);
        if (r != 700)
            return t.fail("recv after peeking returned %zd, want 700", r);
        t.verify(b, 700);
        r = recv(fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
        if (!(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)))
            return t.fail("MSG_PEEK|MSG_DONTWAIT on a drained socket: %zd (%s), want EAGAIN", r, strerror(errno));
    } else if (s == "dontwait") {
        uint8_t b[65536];
        ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (!(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)))
            return t.fail("recv(MSG_DONTWAIT) on an empty socket: %zd (%s), want EAGAIN", r, strerror(errno));
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        r = read(fd, b, sizeof b);
        if (!(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)))
            return t.fail("read on an empty O_NONBLOCK socket: %zd (%s), want EAGAIN", r, strerror(errno));
        fcntl(fd, F_SETFL, fl);
        t.ask_data(5000);
        size_t got = 0;
        long long t0 = now_us();
        while (got < 5000 && now_us() - t0 < 5000000) {
            short rev;
            poll1(fd, POLLIN, 1000, &rev);
            r = recv(fd, b + got, 5000 - got, MSG_DONTWAIT);
            if (r > 0)
                got += static_cast<size_t>(r);
            else if (!(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)))
                return t.fail("recv(MSG_DONTWAIT) with data: %zd (%s)", r, strerror(errno));
        }
        if (got != 5000)
            return t.fail("got %zu of 5000 bytes with MSG_DONTWAIT", got);
        t.verify(b, 5000);
        // The send side: the helper reads only after 1 s, so MSG_DONTWAIT sends must
        // fill the peer's ring and then fail with EAGAIN.
        const uint32_t total = 32u << 20;
        t.cmd('R', total, true);
        std::vector<uint8_t> big(1 << 20);
        uint64_t sent = 0;
        bool eagain = false;
        long long t1 = now_us();
        while (sent < total) {
            size_t k = total - sent < big.size() ? total - sent : big.size();
            fill(big.data(), t.out_off, k, kSaltC2S);
            r = send(fd, big.data(), k, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                eagain = true;
                break;
            }
            if (r <= 0)
                return t.fail("send(MSG_DONTWAIT): %s", strerror(errno));
            sent += static_cast<uint64_t>(r);
            t.out_off += static_cast<uint64_t>(r);
            c.sent += static_cast<uint64_t>(r);
        }
        t.note("dontwait_sent_before_eagain", static_cast<long long>(sent));
        t.note("dontwait_fill_ms", (now_us() - t1) / 1000);
        if (!eagain)
            return t.fail("send(MSG_DONTWAIT) never returned EAGAIN in %u bytes", total);
        short rev;
        if (poll1(fd, POLLOUT, 0, &rev) != 0)
            t.fail("POLLOUT right after EAGAIN (revents %s)", revents_str(static_cast<unsigned>(rev)).c_str());
        int outq = -1;
        if (ioctl(fd, TIOCOUTQ, &outq) == 0)
            t.note("outq_at_eagain", outq);
        // The rest, blocking (the helper starts reading after its 1 s pause).
        while (sent < total) {
            size_t k = total - sent < big.size() ? total - sent : big.size();
            fill(big.data(), t.out_off, k, kSaltC2S);
            if (!write_full(fd, big.data(), k, c))
                return t.fail("blocking send of the rest: %s", strerror(errno));
            sent += k;
            t.out_off += k;
        }
        t.cmd('a');
        uint8_t a = 0;
        if (!read_full(fd, &a, 1, c) || a != 'A')
            return t.fail("no ack after the DONTWAIT stream");
    } else if (s == "oobinline") {
        // SO_OOBINLINE once connected: urgent bytes would stand in the TCP stream, which
        // the ring cannot place among its own.  A connection still undecided stays on TCP
        // (urgent_data) and the option is set; one on RDMA refuses it (ENOPROTOOPT) and
        // goes on.  Either way the bytes that follow arrive whole.
        int on = 1;
        int r = setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &on, sizeof on);
        int e = errno;
        int v = -1;
        socklen_t vl = sizeof v;
        getsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &v, &vl);
        Info in = get_info(fd);
        const bool rdma = in.ok && in.i.transport == RDMASOCK_RDMA;
        if (r == 0 && (rdma || v != 1 || !in.ok || strcmp(in.i.reason_code, "urgent_data") != 0))
            return t.fail("SO_OOBINLINE set (option %d) on a connection now %s", v, info_fields(fd).c_str());
        if (r != 0 && (e != ENOPROTOOPT || !rdma || v != 0))
            return t.fail("SO_OOBINLINE refused with %s (option %d) on a connection now %s", strerror(e), v,
                          info_fields(fd).c_str());
        t.note("oobinline_refused", r != 0);
        t.ask_data(1000);
        t.take(1000);
    } else if (s == "fionread") {
        int avail = -1;
        if (ioctl(fd, FIONREAD, &avail) != 0 || avail != 0)
            return t.fail("FIONREAD on an empty socket: %d", avail);
        t.ask_data(1000);
        short rev;
        if (poll1(fd, POLLIN, 5000, &rev) != 1)
            return t.fail("no POLLIN");
        long long t0 = now_us();
        do {
            if (ioctl(fd, FIONREAD, &avail) != 0)
                return t.fail("FIONREAD: %s", strerror(errno));
        } while (avail < 1000 && now_us() - t0 < 2000000 && usleep(1000) == 0);
        if (avail != 1000)
            return t.fail("FIONREAD %d, want 1000", avail);
        uint8_t b[1000];
        if (read(fd, b, 400) != 400)
            return t.fail("read 400");
        t.verify(b, 400);
        if (ioctl(fd, FIONREAD, &avail) != 0 || avail != 600)
            return t.fail("FIONREAD %d after reading 400, want 600", avail);
        if (read(fd, b, 1000) != 600)
            return t.fail("read the remaining 600");
        t.verify(b, 600);
        if (ioctl(fd, FIONREAD, &avail) != 0 || avail != 0)
            return t.fail("FIONREAD %d after reading everything, want 0", avail);
    } else if (s == "nbconnect") {
        // The connect part is in client_main (--nonblock-connect); here: data both ways
        // on the nonblocking socket.
        if (!(fcntl(fd, F_GETFL) & O_NONBLOCK))
            return t.fail("the socket is not nonblocking");
        t.give_data(1 << 20);
        t.ask_data(1 << 20);
        t.take(1 << 20);
        t.cmd('a');
        uint8_t a = 0;
        short rev;
        if (poll1(fd, POLLIN, 5000, &rev) != 1 || read(fd, &a, 1) != 1 || a != 'A')
            return t.fail("no ack");
        c.received += 1;
    } else if (s == "poll") {
        short rev;
        int r = poll1(fd, POLLIN, 200, &rev);
        if (r != 0)
            return t.fail("poll(POLLIN) on an idle socket: %d revents %s", r, revents_str(static_cast<unsigned>(rev)).c_str());
        r = poll1(fd, POLLOUT, 1000, &rev);
        if (r != 1 || rev != POLLOUT)
            return t.fail("poll(POLLOUT): %d revents %s", r, revents_str(static_cast<unsigned>(rev)).c_str());
        t.ask_data(1000);
        long long t0 = now_us();
        r = poll1(fd, POLLIN | POLLOUT, 5000, &rev);
        while (r == 1 && !(rev & POLLIN) && now_us() - t0 < 5000000)
            r = poll1(fd, POLLIN, 5000, &rev);
        if (r != 1 || (rev & (POLLIN | POLLERR | POLLHUP)) != POLLIN)
            return t.fail("poll(POLLIN) with data: %d revents %s", r, revents_str(static_cast<unsigned>(rev)).c_str());
        t.note("poll_wake_us", now_us() - t0);
        t.take(1000);
        r = poll1(fd, POLLIN, 0, &rev);
        if (r != 0)
            return t.fail("poll(POLLIN) after draining: %d revents %s", r, revents_str(static_cast<unsigned>(rev)).c_str());
        t.cmd('w');
        r = poll1(fd, POLLIN | POLLRDHUP, 5000, &rev);
        if (r != 1 || !(rev & POLLIN) || !(rev & POLLRDHUP) || (rev & (POLLERR | POLLHUP)))
            return t.fail("poll after the peer's SHUT_WR: %d revents %s, want IN|RDHUP", r,
                          revents_str(static_cast<unsigned>(rev)).c_str());
        uint8_t b[16];
        if (read(fd, b, sizeof b) != 0)
            return t.fail("read after the peer's SHUT_WR is not EOF");
        c.eof = 1;
        // The other direction still works.
        t.give_data(70000);
        r = poll1(fd, POLLOUT, 1000, &rev);
        if (r != 1 || !(rev & POLLOUT))
            return t.fail("poll(POLLOUT) after the peer's SHUT_WR: %d %s", r, revents_str(static_cast<unsigned>(rev)).c_str());
    } else if (s == "select") {
        fd_set rs, ws;
        timeval tv{0, 200000};
        FD_ZERO(&rs);
        FD_SET(fd, &rs);
        int r = select(fd + 1, &rs, nullptr, nullptr, &tv);
        if (r != 0)
            return t.fail("select(read) on an idle socket: %d", r);
        FD_ZERO(&ws);
        FD_SET(fd, &ws);
        tv = {1, 0};
        r = select(fd + 1, nullptr, &ws, nullptr, &tv);
        if (r != 1 || !FD_ISSET(fd, &ws))
            return t.fail("select(write): %d", r);
        t.ask_data(1000);
        FD_ZERO(&rs);
        FD_SET(fd, &rs);
        tv = {5, 0};
        r = select(fd + 1, &rs, nullptr, nullptr, &tv);
        if (r != 1 || !FD_ISSET(fd, &rs))
            return t.fail("select(read) with data: %d", r);
        t.take(1000);
        FD_ZERO(&rs);
        FD_SET(fd, &rs);
        tv = {0, 0};
        r = select(fd + 1, &rs, nullptr, nullptr, &tv);
        if (r != 0)
            return t.fail("select(read) after draining: %d", r);
        t.cmd('w');
        FD_ZERO(&rs);
        FD_SET(fd, &rs);
        tv = {5, 0};
        r = select(fd + 1, &rs, nullptr, nullptr, &tv);
        if (r != 1 || !FD_ISSET(fd, &rs))
            return t.fail("select(read) after the peer's SHUT_WR: %d", r);
        uint8_t b[16];
        if (read(fd, b, sizeof b) != 0)
            return t.fail("read after the peer's SHUT_WR is not EOF");
        c.eof = 1;
    } else if (s.rfind("epoll_", 0) == 0) {
        int ep = epoll_create1(EPOLL_CLOEXEC);
        epoll_event ev{}, out[4];
        ev.data.u64 = 0x1234567890abcdefull;
        auto wait = [&](int ms) {
            int n = epoll_wait(ep, out, 4, ms);
            if (n > 0 && out[0].data.u64 != 0x1234567890abcdefull)
                t.fail("epoll_wait returned foreign epoll_data 0x%" PRIx64, out[0].data.u64);
            return n;
        };
        if (s == "epoll_lt") {
            ev.events = EPOLLIN;
            epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
            int n = wait(200);
            if (n != 0)
                return t.fail("LT: idle socket gave %d events (%s)", n, revents_str(out[0].events).c_str());
            t.ask_data(1000);
            n = wait(5000);
            if (n != 1 || out[0].events != EPOLLIN)
                return t.fail("LT: data gave %d events (%s)", n, revents_str(out[0].events).c_str());
            n = wait(0);
            if (n != 1 || out[0].events != EPOLLIN)
                return t.fail("LT: unread data, second wait gave %d events", n);
            t.take(500);
            n = wait(0);
            if (n != 1)
                return t.fail("LT: 500 bytes left, wait gave %d events", n);
            t.take(500);
            n = wait(100);
            if (n != 0)
                return t.fail("LT: drained socket gave %d events (%s)", n, revents_str(out[0].events).c_str());
            // EPOLLOUT, level-triggered: always there.
            ev.events = EPOLLIN | EPOLLOUT;
            epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
            n = wait(1000);
            if (n != 1 || out[0].events != EPOLLOUT)
                return t.fail("LT: EPOLLOUT: %d events (%s)", n, revents_str(out[0].events).c_str());
            n = wait(0);
            if (n != 1 || out[0].events != EPOLLOUT)
                return t.fail("LT: EPOLLOUT again: %d events", n);
        } else if (s == "epoll_et") {
            ev.events = EPOLLIN | EPOLLET;
            epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
            int n = wait(200);
            if (n != 0)
                return t.fail("ET: idle socket gave %d events (%s)", n, revents_str(out[0].events).c_str());
            t.ask_data(1000);
            n = wait(5000);
            if (n != 1 || !(out[0].events & EPOLLIN))
                return t.fail("ET: data gave %d events (%s)", n, revents_str(out[0].events).c_str());
            n = wait(300);
            if (n != 0)
                return t.fail("ET: no new data, unread bytes, yet %d events (%s)", n, revents_str(out[0].events).c_str());
            t.ask_data(1000);
            n = wait(5000);
            if (n != 1 || !(out[0].events & EPOLLIN))
                return t.fail("ET: a second arrival gave %d events", n);
            // Drain to EAGAIN, as ET programs do.
            uint8_t b[4096];
            size_t got = 0;
            for (;;) {
                ssize_t r = recv(fd, b + got, sizeof b - got, MSG_DONTWAIT);
                if (r > 0) {
                    got += static_cast<size_t>(r);
                    continue;
                }
                if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                    break;
                return t.fail("ET drain: %zd (%s)", r, strerror(errno));
            }
            if (got != 2000)
                return t.fail("ET: drained %zu bytes, want 2000", got);
            t.verify(b, 2000);
            n = wait(200);
            if (n != 0)
                return t.fail("ET: drained socket gave %d events", n);
            // EPOLLOUT edge: reported once after registration.
            ev.events = EPOLLIN | EPOLLOUT | EPOLLET;
            epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
            n = wait(1000);
            if (n != 1 || !(out[0].events & EPOLLOUT))
                return t.fail("ET: EPOLLOUT after MOD: %d events", n);
            n = wait(200);
            if (n != 0)
                return t.fail("ET: EPOLLOUT reported again without a new edge: %d events (%s)", n,
                              revents_str(out[0].events).c_str());
        } else if (s == "epoll_oneshot") {
            ev.events = EPOLLIN | EPOLLONESHOT;
            epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
            // No data yet: no event, and the registration must still be armed after
            // that wait.  (The switch, which scenario() waited for, wakes the
            // connection's eventfd with nothing to read: that wake-up once disarmed the
            // registration unseen, and the data below gave no event.)
            int n = wait(200);
            if (n != 0)
                return t.fail("ONESHOT: idle socket gave %d events (%s)", n, revents_str(out[0].events).c_str());
            t.ask_data(1000);
            n = wait(5000);
            if (n != 1 || !(out[0].events & EPOLLIN))
                return t.fail("ONESHOT: data gave %d events", n);
            t.ask_data(1000);
            short rev;
            long long t0 = now_us();
            while (now_us() - t0 < 5000000) {  // until the second 1000 bytes are there
                int avail = 0;
                ioctl(fd, FIONREAD, &avail);
                if (avail >= 2000)
                    break;
                poll1(-1, 0, 5, &rev);
            }
            n = wait(300);
            if (n != 0)
                return t.fail("ONESHOT: disarmed registration gave %d events", n);
            ev.events = EPOLLIN | EPOLLONESHOT;
            if (epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev) != 0)
                return t.fail("ONESHOT: MOD: %s", strerror(errno));
            n = wait(1000);
            if (n != 1 || !(out[0].events & EPOLLIN))
                return t.fail("ONESHOT: rearmed registration gave %d events", n);
            n = wait(200);
            if (n != 0)
                return t.fail("ONESHOT: fired twice after one rearm");
            t.take(2000);
        } else if (s == "epoll_rdhup") {
            ev.events = EPOLLIN | EPOLLRDHUP;
            epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
            t.ask_data(100);
            int n = wait(5000);
            if (n != 1 || out[0].events != EPOLLIN)
                return t.fail("RDHUP: data gave %d events (%s)", n, revents_str(out[0].events).c_str());
            t.take(100);
            t.cmd('w');
            n = wait(5000);
            if (n != 1 || (out[0].events & (EPOLLIN | EPOLLRDHUP)) != (EPOLLIN | EPOLLRDHUP) ||
                (out[0].events & (EPOLLERR | EPOLLHUP)))
                return t.fail("RDHUP: peer SHUT_WR gave %d events (%s), want IN|RDHUP", n,
                              revents_str(out[0].events).c_str());
            uint8_t b[16];
            if (read(fd, b, sizeof b) != 0)
                return t.fail("read after EPOLLRDHUP is not EOF");
            c.eof = 1;
            n = wait(0);
            if (n != 1 || !(out[0].events & EPOLLRDHUP))
                return t.fail("RDHUP: level-triggered RDHUP gone after reading EOF (%d events)", n);
            t.give_data(100000);  // the other direction still works
        } else {
            return t.fail("unknown scenario");
        }
        close(ep);
    } else if (s == "rcvtimeo") {
        timeval tv{0, 300000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        uint8_t b[100];
        long long t0 = now_us();
        ssize_t r = read(fd, b, sizeof b);
        int e = errno;
        long long ms = (now_us() - t0) / 1000;
        t.note("rcvtimeo_ms", ms);
        if (!(r < 0 && (e == EAGAIN || e == EWOULDBLOCK)))
            return t.fail("read with SO_RCVTIMEO on an idle socket: %zd (%s), want EAGAIN", r, strerror(e));
        if (ms < 290 || ms > 1500)
            return t.fail("SO_RCVTIMEO 300 ms: EAGAIN after %lld ms", ms);
        t.ask_data(100);
        short rev;
        poll1(fd, POLLIN, 5000, &rev);
        r = read(fd, b, sizeof b);
        if (r != 100)
            return t.fail("read with data and SO_RCVTIMEO: %zd (%s)", r, strerror(errno));
        t.verify(b, 100);
    } else if (s == "abrupt_exit" || s == "abrupt_signal" || s == "abrupt_exec") {
        // The helper writes 4 MiB and ends without closing (_exit, a fatal signal, exec
        // of a close-on-exec socket).  The kernel's TCP delivers every byte, then EOF;
        // rdmasock(7) allows bytes still in flight to be lost, but then the end is a
        // reset: an EOF after fewer bytes would pass a truncated stream off as whole.
        if (!t.settle())
            return;
        const uint32_t len = 4u << 20;
        t.cmd(s == "abrupt_exit" ? 'X' : s == "abrupt_signal" ? 'T' : 'Z', len, true);
        std::vector<uint8_t> b(64 * 1024);
        uint64_t got = 0;
        int end = 0;  // 0: EOF, else the errno
        for (;;) {
            ssize_t r = read(fd, b.data(), b.size());
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                end = errno;
                break;
            }
            if (r == 0)
                break;
            if (got + static_cast<uint64_t>(r) > len)
                return t.fail("%" PRIu64 " bytes from a helper that wrote %u", got + static_cast<uint64_t>(r), len);
            t.verify(b.data(), static_cast<size_t>(r));
            got += static_cast<uint64_t>(r);
        }
        t.note("abrupt_got", static_cast<long long>(got));
        t.extra += std::string(" abrupt_end=") + (end == 0 ? "EOF" : strerrorname_np(end));
        if (end == 0 && got != len)
            return t.fail("EOF after %" PRIu64 " of the %u bytes written: a truncated stream read as whole", got, len);
        if (end != 0 && end != ECONNRESET)
            return t.fail("the stream ended with %s after %" PRIu64 " bytes, want EOF or ECONNRESET", strerror(end), got);
        return;
    } else if (s == "stopped_close") {
        // The helper stops itself (SIGSTOP); we write until the connection takes no
        // more, then close: close() returns at once, as the kernel's does (the bytes
        // and the FIN go out later), and the helper, continued seconds later, gets
        // every byte, then EOF.  (Settled first: in the default mode a helper stopped
        // before its switch would keep the connection on TCP.)
        if (!t.settle())
            return;
        t.cmd('P');
        usleep(500000);
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        std::vector<uint8_t> b(1024);
        uint64_t sent = 0;
        while (sent < (16u << 20)) {
            fill(b.data(), t.out_off, b.size(), kSaltC2S);
            ssize_t r = send(fd, b.data(), b.size(), MSG_NOSIGNAL);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            if (r <= 0)
                return t.fail("write to a stopped peer: %zd (%s)", r, strerror(errno));
            t.out_off += static_cast<uint64_t>(r);
            c.sent += static_cast<uint64_t>(r);
            sent += static_cast<uint64_t>(r);
        }
        fcntl(fd, F_SETFL, fl);
        t.note("sent_while_stopped", static_cast<long long>(sent));
        return;  // the caller closes (close_us)
    } else if (s == "linger0") {
        if (!t.settle())
            return;
        t.cmd('l');
        long long t0 = now_us();
        uint8_t b[16];
        ssize_t r = read(fd, b, sizeof b);
        int e = errno;
        t.note("reset_after_ms", (now_us() - t0) / 1000);
        if (!(r < 0 && e == ECONNRESET))
            return t.fail("read after the peer's SO_LINGER{1,0} close: %zd (%s), want ECONNRESET", r,
                          r < 0 ? strerror(e) : (r == 0 ? "EOF" : "data"));
        r = send(fd, b, 1, MSG_NOSIGNAL);
        e = errno;
        t.note("send_after_reset_errno", r < 0 ? e : 0);
        if (!(r < 0 && (e == EPIPE || e == ECONNRESET)))
            return t.fail("send after a reset: %zd (%s), want EPIPE", r, strerror(e));
        c.eof = 1;
        return;  // no finish(): the connection is gone
    } else if (s == "sigkill" || s == "sigkill_write" || s == "sigkill_epoll" || s == "sigkill_idle") {
        // The helper is killed while we are blocked: in read() (sigkill), in write() on a
        // full ring, the helper reading nothing more (sigkill_write), or in epoll_wait()
        // (sigkill_epoll); or while we make no call at all (sigkill_idle: 3 s, then a
        // read).  ECONNRESET (EPIPE for a write), an error event.
        if (!t.settle())
            return;
        // (In the default mode the switch may still be under way: on RDMA first.)
        for (long long w0 = now_us(); !is_rdma(fd) && now_us() - w0 < 10000000;)
            usleep(10000);
        t.cmd('k');
        int ep = -1;
        if (s == "sigkill_epoll") {
            ep = epoll_create1(EPOLL_CLOEXEC);
            epoll_event ev{};
            ev.events = EPOLLIN | EPOLLRDHUP;
            if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0)
                return t.fail("epoll: %s", strerror(errno));
        }
        out_line("blocked");
        long long t0 = now_us();
        if (s == "sigkill_write") {
            std::vector<uint8_t> b(65536);
            uint64_t total = 0;
            ssize_t r;
            for (;;) {
                r = send(fd, b.data(), b.size(), MSG_NOSIGNAL);
                if (r < 0 && errno == EINTR)
                    continue;
                if (r <= 0)
                    break;
                total += static_cast<uint64_t>(r);
                c.sent += static_cast<uint64_t>(r);
                if (total > (1ull << 30))
                    return t.fail("1 GiB written to a peer that reads nothing");
            }
            const int e = errno;
            t.note("write_returned_after_ms", (now_us() - t0) / 1000);
            t.note("written_before_error", static_cast<long long>(total));
            extra += std::string(" write_result=") + (r < 0 ? strerrorname_np(e) : "0");
            if (!(r < 0 && (e == EPIPE || e == ECONNRESET)))
                return t.fail("write after the peer was killed: %zd (%s), want EPIPE or ECONNRESET", r,
                              r < 0 ? strerror(e) : "0");
            c.eof = 1;
            return;
        }
        if (ep >= 0) {
            epoll_event ev{};
            int n = epoll_wait(ep, &ev, 1, 20000);
            t.note("epoll_returned_after_ms", (now_us() - t0) / 1000);
            close(ep);
            if (n != 1 || !(ev.events & (EPOLLERR | EPOLLHUP)))
                return t.fail("epoll_wait after the peer was killed: %d, events 0x%x, want an error event", n,
                              n == 1 ? ev.events : 0u);
        }
        if (s == "sigkill_idle") {
            usleep(3000 * 1000);  // (not intercepted: no call into the library meanwhile)
            t0 = now_us();
        }
        uint8_t b[16];
        ssize_t r = read(fd, b, sizeof b);
        int e = errno;
        if (ep < 0)
            t.note("read_returned_after_ms", (now_us() - t0) / 1000);
        extra += std::string(" read_result=") + (r < 0 ? strerrorname_np(e) : r == 0 ? "EOF" : "data");
        if (!(r < 0 && e == ECONNRESET))
            return t.fail("read after the peer was killed: %zd (%s), want ECONNRESET", r,
                          r < 0 ? strerror(e) : (r == 0 ? "EOF" : "data"));
        c.eof = 1;
        return;
    } else {
        return t.fail("unknown scenario");
    }
    if (!t.failed)
        t.finish();
}

// ---- connection driver --------------------------------------------------------------------

void serve_connection(int fd, int index, long long connect_us, const std::string &note = "")
{
    Counts c;
    std::string extra = note;
    const long long t_start = now_us();
    Entry e = opt.plan.empty() ? Entry{} : opt.plan[static_cast<size_t>(index) % opt.plan.size()];
    g_api = e.api;
    g_scenario = opt.scenarios.empty() ? "" : opt.scenarios[static_cast<size_t>(index) % opt.scenarios.size()];
    if (opt.helper)
        helper_loop(fd, c, extra);
    else if (!g_scenario.empty())
        scenario(fd, c, extra);
    else
        stream(fd, e, c, extra);
    if (opt.hold_ms > 0)
        usleep(static_cast<useconds_t>(opt.hold_ms) * 1000);
    std::string line = "conn=" + std::to_string(index) + " role=" + (opt.server ? "server" : "client") +
                       " connect_us=" + std::to_string(connect_us) + " " + info_fields(fd) +
                       " sent=" + std::to_string(c.sent.load()) + " received=" +
                       std::to_string(c.received.load()) + " eof=" + std::to_string(c.eof.load()) +
                       (c.max_call_us.load() > 0 ? " max_call_ms=" + std::to_string(c.max_call_us.load() / 1000) : "") +
                       (g_scenario.empty() ? "" : " scenario=" + g_scenario) + extra;
    long long t_close = now_us();
    if (close(fd) != 0)
        errorf(kCallFailed, "close: %s", strerror(errno));
    long long t_end = now_us();
    line += " io_us=" + std::to_string(t_close - t_start) + " close_us=" + std::to_string(t_end - t_close);
    out_line(line);
    if (opt.close_exit)
        exit(g_exit);
}

int conn_count()
{
    if (!opt.scenarios.empty() && !opt.helper)
        return static_cast<int>(opt.scenarios.size());
    if (!opt.plan.empty())
        return static_cast<int>(opt.plan.size());
    return opt.conns;
}

int listen_on(sockaddr_in &sa)
{
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (ls < 0)
        die("socket: %s", strerror(errno));
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (opt.reuseport)
        setsockopt(ls, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (bind(ls, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0)
        die("bind %s:%d: %s", opt.addr.c_str(), ntohs(sa.sin_port), strerror(errno));
    if (listen(ls, 16) != 0)
        die("listen: %s", strerror(errno));
    socklen_t len = sizeof sa;
    getsockname(ls, reinterpret_cast<sockaddr *>(&sa), &len);
    return ls;
}

// Waits for every child; the worst exit status of them and this process.
int reap_children()
{
    int st = 0;
    pid_t p;
    while ((p = wait(&st)) > 0 || (p < 0 && errno == EINTR)) {
        if (p < 0)
            continue;
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : kCallFailed;
        if (!WIFEXITED(st))
            errorf(kCallFailed, "child %d ended by signal %d", p, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        else if (code != kOk && (g_exit == kOk || (code == kMismatch && g_exit != kMismatch)))
            g_exit = code;
    }
    return g_exit;
}

// --prefork N: the workers share a count of the connections still to accept.  With
// --reuseport each has its own listener (lss[w]), and takes what the kernel gives it
// until all n are served.
int prefork_main(const std::vector<int> &lss, int n)
{
    auto *next = static_cast<std::atomic<int> *>(
        mmap(nullptr, 2 * sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    if (next == MAP_FAILED)
        die("mmap: %s", strerror(errno));
    new (next) std::atomic<int>(0);
    std::atomic<int> *served = new (next + 1) std::atomic<int>(0);
    for (int w = 0; w < opt.prefork; ++w) {
        pid_t p = fork();
        if (p < 0)
            die("fork: %s", strerror(errno));
        if (p != 0)
            continue;
        if (!opt.reuseport) {
            for (int i; (i = next->fetch_add(1)) < n;) {
                int fd = accept4(lss[0], nullptr, nullptr, SOCK_CLOEXEC);
                if (fd < 0)
                    die("accept: %s", strerror(errno));
                serve_connection(fd, i, 0, " worker=" + std::to_string(w));
            }
        } else {
            const int ls = lss[static_cast<size_t>(w)];
            while (served->load() < n) {
                pollfd pf{ls, POLLIN, 0};
                if (poll(&pf, 1, 100) != 1)
                    continue;
                int fd = accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
                if (fd < 0)
                    die("accept: %s", strerror(errno));
                serve_connection(fd, next->fetch_add(1), 0, " worker=" + std::to_string(w));
                served->fetch_add(1);
            }
        }
        fflush(stdout);
        _exit(g_exit);
    }
    int rc = reap_children();
    for (int ls : lss)
        close(ls);
    return rc;
}

int server_main()
{
    sockaddr_in sa = make_addr(opt.addr, opt.port);
    int ls = listen_on(sa);
    out_line("port=" + std::to_string(ntohs(sa.sin_port)));
    if (opt.prefork > 0) {
        std::vector<int> lss{ls};
        for (int w = 1; opt.reuseport && w < opt.prefork; ++w)
            lss.push_back(listen_on(sa));  // (the same port: SO_REUSEPORT)
        return prefork_main(lss, conn_count());
    }
    for (int i = 0, n = conn_count(); i < n; ++i) {
        if (opt.accept_delay_ms > 0 || (i == 0 && opt.first_accept_delay_ms > 0))
            usleep(static_cast<useconds_t>(i == 0 && opt.first_accept_delay_ms > 0 ? opt.first_accept_delay_ms
                                                                                   : opt.accept_delay_ms) *
                   1000);
        int fd = accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0)
            die("accept: %s", strerror(errno));
        if (opt.close_listener) {
            close(ls);
            ls = i + 1 < n ? listen_on(sa) : -1;  // (before serving: the client comes back at once)
        }
        if (opt.fork_per_conn) {
            pid_t p = fork();
            if (p < 0)
                die("fork: %s", strerror(errno));
            if (p == 0) {
                if (ls >= 0)
                    close(ls);
                serve_connection(fd, i, 0, " forked=1");
                fflush(stdout);
                _exit(g_exit);
            }
            close(fd);  // the parent's copy
            continue;
        }
        serve_connection(fd, i, 0);
    }
    if (ls >= 0)
        close(ls);
    return opt.fork_per_conn ? reap_children() : g_exit;
}

int client_main()
{
    if (!opt.warmup.empty()) {
        // One connection (closed at once) before the measured ones: the library's
        // one-time set-up (its thread, rdma_cm and verbs initialisation) happens here.
        size_t colon = opt.warmup.rfind(':');
        sockaddr_in wa = make_addr(opt.warmup.substr(0, colon), atoi(opt.warmup.c_str() + colon + 1));
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        long long t0 = now_us();
        if (connect(fd, reinterpret_cast<sockaddr *>(&wa), sizeof wa) != 0)
            die("warm-up connect %s: %s", opt.warmup.c_str(), strerror(errno));
        long long dt = now_us() - t0;
        out_line("warmup connect_us=" + std::to_string(dt) + " " + info_fields(fd));
        close(fd);
        // Its negotiation may still run in the background (the default asynchronous
        // switch): let it end, so that the measured connects share the CPU with nothing.
        usleep(300 * 1000);
    }
    if (opt.cont_fd >= 0) {  // (--exec-continue, --receive-from: the connection the old image made)
        serve_connection(opt.cont_fd, 0, 0);
        return g_exit;
    }
    for (int i = 0, n = conn_count(); i < n; ++i) {
        if (opt.fork_conns && i > 0) {
            pid_t p = fork();
            if (p < 0)
                die("fork: %s", strerror(errno));
            if (p != 0) {  // the parent waits for the child that makes this connection
                int st = 0;
                while (waitpid(p, &st, 0) < 0 && errno == EINTR) {
                }
                if (!WIFEXITED(st) || WEXITSTATUS(st) != kOk)
                    errorf(kCallFailed, "connection %d's child: status 0x%x", i, st);
                continue;
            }
        }
        const std::string sc = opt.scenarios.empty() || opt.helper ? "" : opt.scenarios[static_cast<size_t>(i)];
        const bool nb = opt.nonblock_connect || sc == "nbconnect";
        int port = opt.ports.empty() ? opt.port : opt.ports[static_cast<size_t>(i) % opt.ports.size()];
        sockaddr_in sa = make_addr(opt.addr, port);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nb ? SOCK_NONBLOCK : 0), 0);
        if (fd < 0)
            die("socket: %s", strerror(errno));
        long long t0 = now_us();
        int r = connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa);
        int e = errno;
        long long dt = now_us() - t0;
        std::string note;
        if (nb) {
            if (!(r < 0 && e == EINPROGRESS)) {
                errorf(kScenario, "scenario nbconnect: connect returned %d (%s), want -1/EINPROGRESS", r,
                       r < 0 ? strerror(e) : "success");
                if (r < 0)
                    die("connect %s:%d: %s", opt.addr.c_str(), port, strerror(e));
            }
            pollfd p{fd, POLLOUT, 0};
            int pr = poll(&p, 1, 10000);
            long long dt2 = now_us() - t0;
            if (pr != 1 || !(p.revents & POLLOUT) || (p.revents & (POLLERR | POLLHUP)))
                die("scenario nbconnect: poll(POLLOUT) %d revents 0x%x", pr, p.revents);
            int soerr = -1;
            socklen_t sl = sizeof soerr;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
            if (soerr != 0)
                errorf(kScenario, "scenario nbconnect: SO_ERROR %d (%s), want 0", soerr, strerror(soerr));
            note = " writable_after_us=" + std::to_string(dt2);
        } else if (r != 0) {
            die("connect %s:%d: %s", opt.addr.c_str(), port, strerror(e));
        }
        serve_connection(fd, i, dt, note + (opt.fork_conns && i > 0 ? " forked=1" : ""));
        if (opt.fork_conns && i > 0) {
            fflush(stdout);
            exit(g_exit);  // (exit: the library sends the connection's FIN at exit)
        }
    }
    return g_exit;
}

std::vector<std::string> split(const std::string &s, char sep)
{
    std::vector<std::string> v;
    size_t a = 0;
    for (;;) {
        size_t b = s.find(sep, a);
        v.push_back(s.substr(a, b == std::string::npos ? std::string::npos : b - a));
        if (b == std::string::npos)
            break;
        a = b + 1;
    }
    return v;
}

void usage()
{
    dprintf(2,
            "usage: peer server|client --addr A [--port P] [--ports P1,P2,...] [--conns K]\n"
            "       [--plan C2S:S2C[:API[:bidir]],...] [--chunk N] [--banner N] [--echo] [--expect-echo]\n"
            "       [--close-exit] [--nonblock-connect] [--wait-decided] [--shutdown-decided]\n"
            "       [--hold-ms N] [--accept-delay-ms N] [--first-accept-delay-ms N]\n"
            "       [--close-listener] [--exec-self after|before|close|pass|pass-mmsg [--exec-env-clean]]\n"
            "       [--pass-after N] [--wait-rdma]\n"
            "       [--wait-mode poll|select|epoll] [--push] [--stall-ms N]\n"
            "       [--warmup ADDR:PORT] [--pause-ms N] [--fionread-banner]\n"
            "       [--scenario NAME,NAME,... | --helper] [--allow-tcp]\n"
            "  API: write (read) | writev (readv) | send (recv MSG_WAITALL) | sendmsg (recvmsg) | sendfile (read)\n");
    _exit(kUsage);
}

uint64_t parse_size(const std::string &str)
{
    const char *s = str.c_str();
    char *end = nullptr;
    unsigned long long v = strtoull(s, &end, 0);
    if (end == s)
        usage();
    switch (*end) {
    case 'K': v <<= 10; ++end; break;
    case 'M': v <<= 20; ++end; break;
    case 'G': v <<= 30; ++end; break;
    default: break;
    }
    if (*end == '+')  // "64K+1"
        v += strtoull(end + 1, &end, 0);
    if (*end != '\0')
        usage();
    return v;
}

std::vector<Entry> parse_plan(const std::string &s)
{
    std::vector<Entry> plan;
    for (const std::string &item : split(s, ',')) {
        std::vector<std::string> f = split(item, ':');
        if (f.size() < 2 || f.size() > 4)
            usage();
        Entry e;
        e.c2s = parse_size(f[0]);
        e.s2c = parse_size(f[1]);
        if (f.size() >= 3)
            e.api = f[2];
        if (f.size() == 4) {
            if (f[3] != "bidir" && f[3] != "seq")
                usage();
            e.bidir = f[3] == "bidir";
        }
        if (e.api != "write" && e.api != "writev" && e.api != "send" && e.api != "sendmsg" &&
            e.api != "sendfile")
            usage();
        plan.push_back(e);
    }
    return plan;
}

}  // namespace

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    g_argv = argv;
    if (argc < 2)
        usage();
    std::string mode = argv[1];
    if (mode == "server")
        opt.server = true;
    else if (mode != "client")
        usage();
    static const option longs[] = {
        {"addr", required_argument, nullptr, 'a'},     {"port", required_argument, nullptr, 'p'},
        {"ports", required_argument, nullptr, 'P'},    {"conns", required_argument, nullptr, 'n'},
        {"plan", required_argument, nullptr, 'L'},     {"chunk", required_argument, nullptr, 'c'},
        {"banner", required_argument, nullptr, 'B'},   {"echo", no_argument, nullptr, 'e'},
        {"expect-echo", no_argument, nullptr, 'E'},    {"close-exit", no_argument, nullptr, 'x'},
        {"nonblock-connect", no_argument, nullptr, 'N'}, {"wait-decided", no_argument, nullptr, 'W'},
        {"shutdown-decided", no_argument, nullptr, 'G'},
        {"scenario", required_argument, nullptr, 'S'}, {"helper", no_argument, nullptr, 'H'},
        {"hold-ms", required_argument, nullptr, 'h'},  {"pause-ms", required_argument, nullptr, 'Q'},  {"fionread-banner", no_argument, nullptr, 'F'},  {"allow-tcp", no_argument, nullptr, 'T'},
        {"accept-delay-ms", required_argument, nullptr, 'D'}, {"wait-mode", required_argument, nullptr, 'w'},
        {"first-accept-delay-ms", required_argument, nullptr, 'J'},
        {"push", no_argument, nullptr, 'u'},          {"stall-ms", required_argument, nullptr, 'z'},
        {"warmup", required_argument, nullptr, 'y'},   {"close-listener", no_argument, nullptr, 'C'},
        {"prefork", required_argument, nullptr, 'k'},  {"fork-per-conn", no_argument, nullptr, 'K'},
        {"fork-conns", no_argument, nullptr, 'f'},     {"fork-child", required_argument, nullptr, 'j'},
        {"reuseport", no_argument, nullptr, 'R'},
        {"exec-self", required_argument, nullptr, 'X'}, {"exec-env-clean", no_argument, nullptr, 'Y'},
        {"exec-continue", required_argument, nullptr, 'Z'},
        {"receive-from", required_argument, nullptr, 'V'}, {"pass-after", required_argument, nullptr, '1'},
        {"wait-rdma", no_argument, nullptr, '2'},
        {"fork-after", required_argument, nullptr, '3'}, {"fork-mode", required_argument, nullptr, '4'},
        {nullptr, 0, nullptr, 0}};
    optind = 2;
    int ch;
    while ((ch = getopt_long(argc, argv, "", longs, nullptr)) != -1) {
        switch (ch) {
        case 'a': opt.addr = optarg; break;
        case 'p': opt.port = atoi(optarg); break;
        case 'P':
            for (const std::string &p : split(optarg, ','))
                opt.ports.push_back(atoi(p.c_str()));
            break;
        case 'n': opt.conns = atoi(optarg); break;
        case 'L': opt.plan = parse_plan(optarg); break;
        case 'c': opt.chunk = static_cast<size_t>(parse_size(optarg)); break;
        case 'B': opt.banner = parse_size(optarg); break;
        case 'e': opt.echo = true; break;
        case 'E': opt.expect_echo = true; break;
        case 'x': opt.close_exit = true; break;
        case 'N': opt.nonblock_connect = true; break;
        case 'W': opt.wait_decided = true; break;
        case 'G': opt.shutdown_decided = true; break;
        case 'S': opt.scenarios = split(optarg, ','); break;
        case 'H': opt.helper = true; break;
        case 'h': opt.hold_ms = atoi(optarg); break;
        case 'Q': opt.pause_ms = atoi(optarg); break;
        case 'F': opt.fionread_banner = true; break;
        case 'T': opt.allow_tcp = true; break;
        case 'D': opt.accept_delay_ms = atoi(optarg); break;
        case 'J': opt.first_accept_delay_ms = atoi(optarg); break;
        case 'C': opt.close_listener = true; break;
        case 'k': opt.prefork = atoi(optarg); break;
        case 'K': opt.fork_per_conn = true; break;
        case 'f': opt.fork_conns = true; break;
        case 'j': opt.fork_child = optarg; break;
        case 'R': opt.reuseport = true; break;
        case 'X':
            opt.exec_self = optarg;
            if (opt.exec_self != "after" && opt.exec_self != "before" && opt.exec_self != "close" &&
                opt.exec_self != "pass" && opt.exec_self != "pass-mmsg")
                usage();
            break;
        case 'Y': opt.exec_env_clean = true; break;
        case 'Z': {
            std::vector<std::string> v = split(optarg, ':');
            if (v.size() != 3)
                usage();
            opt.cont_fd = atoi(v[0].c_str());
            opt.cont_sent = strtoull(v[1].c_str(), nullptr, 10);
            opt.cont_received = strtoull(v[2].c_str(), nullptr, 10);
            break;
        }
        case 'V': opt.recv_from = atoi(optarg); break;
        case '1': opt.pass_after = strtoull(optarg, nullptr, 10); break;
        case '2': opt.wait_rdma = true; break;
        case '3': opt.fork_after = strtoull(optarg, nullptr, 10); break;
        case '4':
            opt.fork_mode = optarg;
            if (opt.fork_mode != "close" && opt.fork_mode != "keep" && opt.fork_mode != "exec")
                usage();
            break;
        case 'u': opt.push = true; break;
        case 'z': opt.stall_ms = atoi(optarg); break;
        case 'y': opt.warmup = optarg; break;
        case 'w':
            g_wait = optarg;
            if (g_wait != "poll" && g_wait != "select" && g_wait != "epoll")
                usage();
            break;
        default: usage();
        }
    }
    if (opt.addr.empty() || (!opt.server && opt.port == 0 && opt.ports.empty()) || opt.chunk == 0 ||
        opt.conns < 1)
        usage();
    int rc = kOk;
    if (opt.recv_from >= 0) {  // (the receiver of --exec-self pass or --pass-after: its one connection)
        receive_passed();
        serve_connection(opt.cont_fd, 0, 0);
        rc = g_exit;
    } else if (opt.server && opt.cont_fd >= 0) {  // (--fork-mode exec: the child's new image)
        serve_connection(opt.cont_fd, 0, 0);
        rc = g_exit;
    } else {
        rc = opt.server ? server_main() : client_main();
    }
    fflush(stdout);
    return rc;
}
