// idle: what open connections that carry nothing cost (tests/offload, scale/idle_cpu;
// issue 18, point 1).  Two processes, an event-loop server and a client:
//
//   idle --addr A [--conns N] [--idle-ms T]
//
// listens on A (ephemeral port), then starts the client, a new image of this program
// (posix_spawn: a process of its own, not a fork copy), which makes N connections
// (default 100).  The server serves them from one epoll set (nonblocking sockets, level
// triggered), echoing what each sends.  The client:
//   1. waits until each connection is on RDMA (getsockopt RDMASOCK_INFO; 60 s at most;
//      without the library it waits for nothing);
//   2. sends a 100-byte request on each and reads its echo (checked byte for byte);
//   3. idles: one epoll_wait() over all N for T ms (default 10000) that nothing ends;
//   4. does step 2 once more on each, closes them all and exits.
// Each side measures the CPU its whole process (every thread: the library's too) used
// while it waited with nothing to do: the client over its epoll_wait() of step 3, the
// server over its longest epoll_wait() (the same idle time, from the last echo of step
// 2 to the first request of step 4).  getrusage(RUSAGE_SELF): microseconds.  Output,
// one line from each process:
//
//   client conns=N rdma=R idle_ms=T cpu_us=C threads_us=NAME/TID:US,... errors=E [first_error=...]
//   server conns=N idle_ms=T cpu_us=C threads_us=... errors=E [first_error=...]
//
// threads_us: how the idle time's CPU went by thread, those still there at its end
// (/proc/self/task/*/schedstat; "-" none that ran a millisecond).
// rdma: connections the library reported on RDMA before the idle time.  Exit status 0
// when every request was answered byte for byte (and the client's status is 0), 1
// otherwise, 4 on usage errors.
#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <map>
#include <netinet/in.h>
#include <spawn.h>
#include <string>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "include/rdmasock.h"
#include "tests/common/io.hh"
#include "tests/common/time.hh"

using namespace testcommon;

namespace {

constexpr size_t kMsg = 100;

long cpu_us()
{
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000L + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

// Each live thread's CPU time so far (ns, /proc/self/task/T/schedstat), by thread
// name and id.
std::map<std::string, long long> thread_cpu()
{
    std::map<std::string, long long> m;
    DIR *d = opendir("/proc/self/task");
    if (d == nullptr)
        return m;
    while (dirent *e = readdir(d)) {
        if (e->d_name[0] == '.')
            continue;
        const std::string t = std::string("/proc/self/task/") + e->d_name;
        char comm[64] = "?";
        if (FILE *f = fopen((t + "/comm").c_str(), "r")) {
            if (fgets(comm, sizeof comm, f) != nullptr)
                comm[strcspn(comm, "\n")] = 0;
            fclose(f);
        }
        long long ns = 0;
        if (FILE *f = fopen((t + "/schedstat").c_str(), "r")) {
            if (fscanf(f, "%lld", &ns) != 1)
                ns = 0;
            fclose(f);
        }
        m[std::string(comm) + "/" + e->d_name] = ns;
    }
    closedir(d);
    return m;
}

// "name/tid:us,..." of the threads that ran between two thread_cpu() readings (a thread
// gone by the second one is in none: the process's total counts it).
std::string thread_delta(const std::map<std::string, long long> &a, const std::map<std::string, long long> &b)
{
    std::string s;
    for (const auto &kv : b) {
        auto it = a.find(kv.first);
        const long long d = kv.second - (it == a.end() ? 0 : it->second);
        if (d >= 1000)
            s += (s.empty() ? "" : ",") + kv.first + ":" + std::to_string(d / 1000);
    }
    return s.empty() ? "-" : s;
}

void fill(unsigned char *p, unsigned seed)
{
    for (size_t i = 0; i < kMsg; ++i)
        p[i] = static_cast<unsigned char>(seed * 131u + i * 7u);
}

struct Errors {
    int count = 0;
    std::string first;
    void add(const std::string &what)
    {
        if (count++ == 0)
            first = what + ": " + strerror(errno);
    }
    std::string text() const
    {
        std::string s = " errors=" + std::to_string(count);
        if (count != 0) {
            std::string f = first;
            for (char &ch : f)
                ch = ch == ' ' ? '_' : ch;
            s += " first_error=" + f;
        }
        return s;
    }
};

// The connection's transport as the library reports it (RDMASOCK_TCP, RDMASOCK_RDMA);
// -1 without the library.
int transport(int fd)
{
    rdmasock_info info{};
    socklen_t len = sizeof info;
    return getsockopt(fd, SOL_RDMASOCK, RDMASOCK_INFO, &info, &len) == 0 ? static_cast<int>(info.transport) : -1;
}

bool on_rdma(int fd) { return transport(fd) == RDMASOCK_RDMA; }

// Step 2 on every connection; `round` varies the bytes.
void requests(const std::vector<int> &fds, unsigned round, Errors &err)
{
    unsigned char req[kMsg], got[kMsg];
    for (size_t i = 0; i < fds.size(); ++i) {
        fill(req, static_cast<unsigned>(i) * 2 + round);
        if (!send_all(fds[i], req, kMsg))
            err.add("request " + std::to_string(i));
        else if (!read_all(fds[i], got, kMsg) || memcmp(got, req, kMsg) != 0)
            err.add("echo " + std::to_string(i) + " (or it differs)");
    }
}

int client(const sockaddr_in &sa, int conns, int idle_ms)
{
    Errors err;
    std::vector<int> fds;
    for (int i = 0; i < conns; ++i) {
        int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c < 0 || connect(c, reinterpret_cast<const sockaddr *>(&sa), sizeof sa) != 0) {
            err.add("connect " + std::to_string(i));
            if (c >= 0)
                close(c);
            break;
        }
        set_io_timeouts(c, 30);
        fds.push_back(c);
    }
    int rdma = 0;
    if (!fds.empty() && transport(fds[0]) >= 0) {
        const double end = now_ms() + 60000;
        for (size_t i = 0; i < fds.size() && now_ms() < end;)
            if (on_rdma(fds[i]))
                ++i;
            else
                usleep(10000);
    }
    requests(fds, 0, err);
    for (int fd : fds)
        rdma += on_rdma(fd) ? 1 : 0;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    for (int fd : fds) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = fd;
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }
    epoll_event evs[16];
    const auto th0 = thread_cpu();
    const long c0 = cpu_us();
    const double t0 = now_ms();
    int n = 0;
    for (double end = t0 + idle_ms; (n == 0 || (n < 0 && errno == EINTR)) && ms_left(end) > 0;)
        n = epoll_wait(ep, evs, 16, ms_left(end));
    const long cpu = cpu_us() - c0;
    const double idle = now_ms() - t0;
    const std::string threads = thread_delta(th0, thread_cpu());
    if (n != 0) {
        errno = n < 0 ? errno : 0;
        err.add("the idle epoll_wait returned " + std::to_string(n));
    }
    close(ep);
    requests(fds, 1, err);
    for (int fd : fds)
        close(fd);
    printf("client conns=%zu rdma=%d idle_ms=%ld cpu_us=%ld threads_us=%s%s\n", fds.size(), rdma,
           static_cast<long>(idle), cpu, threads.c_str(), err.text().c_str());
    fflush(stdout);
    return err.count == 0 && static_cast<int>(fds.size()) == conns ? 0 : 1;
}

int server(int l, int conns, pid_t child)
{
    Errors err;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    std::vector<int> fds;
    for (int i = 0; i < conns; ++i) {
        int s = accept4(l, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (s < 0) {
            err.add("accept " + std::to_string(i));
            break;
        }
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = s;
        epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
        fds.push_back(s);
    }
    // (The listener stays open, as a server's does: its close would start work of the
    // library's in the idle time, the RDMA listener's end once its last connection's
    // negotiation window has passed.)
    // The longest wait, and the CPU the process used over it.
    double longest = 0;
    long longest_cpu = 0;
    std::string longest_threads = "-";
    unsigned char buf[4096];
    epoll_event evs[64];
    for (size_t open = fds.size(); open > 0;) {
        const auto th0 = thread_cpu();
        const long c0 = cpu_us();
        const double t0 = now_ms();
        int n = epoll_wait(ep, evs, 64, 120000);
        const double waited = now_ms() - t0;
        const long cpu = cpu_us() - c0;
        // (Read only after a long wait: /proc costs more than the rest of the loop.)
        const std::string threads = waited > longest && waited > 1000 ? thread_delta(th0, thread_cpu()) : "-";
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            err.add(n == 0 ? "no event for 120 s" : "epoll_wait");
            break;
        }
        if (waited > longest)
            longest = waited, longest_cpu = cpu, longest_threads = threads;
        for (int i = 0; i < n; ++i) {
            const int fd = evs[i].data.fd;
            ssize_t r = read(fd, buf, sizeof buf);
            if (r > 0) {
                // Nonblocking: an echo of 100 bytes fits the socket's buffer (the
                // client reads each before it sends the next).
                if (!send_all(fd, buf, static_cast<size_t>(r)))
                    err.add("echo");
                continue;
            }
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (r < 0)
                err.add("read");
            epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
            close(fd);
            --open;
        }
    }
    int st = 0;
    while (waitpid(child, &st, 0) < 0 && errno == EINTR) {
    }
    close(l);
    printf("server conns=%zu idle_ms=%ld cpu_us=%ld threads_us=%s%s\n", fds.size(), static_cast<long>(longest),
           longest_cpu, longest_threads.c_str(), err.text().c_str());
    fflush(stdout);
    return err.count == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv)
{
    const char *addr = nullptr;
    int conns = 100, idle_ms = 10000, port = -1;
    bool is_client = false;
    for (int i = 1; i < argc; ++i) {
        std::string k = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
        if (k == "--client") {
            is_client = true;
            continue;
        }
        if (v == nullptr) {
            addr = nullptr;
            break;
        }
        ++i;
        if (k == "--addr")
            addr = v;
        else if (k == "--conns")
            conns = atoi(v);
        else if (k == "--idle-ms")
            idle_ms = atoi(v);
        else if (k == "--port")
            port = atoi(v);
        else
            addr = nullptr, i = argc;
    }
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    if (addr == nullptr || conns <= 0 || idle_ms <= 0 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1 ||
        (is_client && port <= 0)) {
        fprintf(stderr, "usage: idle --addr IPv4 [--conns N] [--idle-ms T]\n");
        return 4;
    }
    if (is_client) {
        sa.sin_port = htons(static_cast<uint16_t>(port));
        return client(sa, conns, idle_ms);
    }
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t sl = sizeof sa;
    if (l < 0 || bind(l, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0 || listen(l, 1024) != 0 ||
        getsockname(l, reinterpret_cast<sockaddr *>(&sa), &sl) != 0) {
        perror("listen");
        return 1;
    }
    const std::string p = std::to_string(ntohs(sa.sin_port)), n = std::to_string(conns), t = std::to_string(idle_ms);
    const char *args[] = {argv[0], "--client", "--addr", addr, "--port", p.c_str(), "--conns", n.c_str(),
                          "--idle-ms", t.c_str(), nullptr};
    pid_t child = -1;
    if (posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, const_cast<char **>(args), environ) != 0) {
        perror("posix_spawn");
        return 1;
    }
    return server(l, conns, child);
}
