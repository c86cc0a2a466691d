#include "preload/report.hh"

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/addr.hh"
#include "base/credmsg.hh"
#include "base/fd.hh"
#include "base/log.hh"
#include "base/real.hh"
#include "config.h"
#include "preload/describe.hh"
#include "process/fd_table.hh"
#include "process/runtime.hh"

namespace rdmasock::report {

namespace {

struct Totals {
    std::atomic<unsigned long long> rdma{0}, tcp{0}, sent{0}, received{0};
    std::atomic<unsigned long long> by_reason[kReasonCount] = {};
};
Totals g_closed;

socklen_t name_of(pid_t pid, sockaddr_un *a) noexcept
{
    *a = sockaddr_un{};
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "%s%d", kNamePrefix, static_cast<int>(pid));
    return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + static_cast<size_t>(n));
}

// Sends `text` to `to` in datagrams of whole lines (at most kChunk bytes each).  The
// progress thread waits at most kSendBudgetMs in all for a reader that does not keep up;
// then the rest of that answer is dropped.
constexpr size_t kChunk = 16384;
constexpr int kSendBudgetMs = 100;

bool send_chunk(int fd, const char *p, size_t n, const sockaddr_un &to, socklen_t tolen, int &budget_ms) noexcept
{
    for (;;) {
        if (RS_REAL(sendto)(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<const sockaddr *>(&to), tolen) >= 0)
            return true;
        if ((errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS) || budget_ms <= 0)
            return false;
        usleep(1000);
        --budget_ms;
    }
}

void send_text(int fd, const std::string &text, const sockaddr_un &to, socklen_t tolen) noexcept
{
    int budget_ms = kSendBudgetMs;
    size_t at = 0;
    while (at < text.size()) {
        size_t n = text.size() - at;
        if (n > kChunk) {
            n = kChunk;
            const size_t nl = text.rfind('\n', at + kChunk - 1);
            if (nl != std::string::npos && nl >= at)
                n = nl + 1 - at;
        }
        if (!send_chunk(fd, text.data() + at, n, to, tolen, budget_ms))
            return;
        at += n;
    }
    send_chunk(fd, "end\n", 4, to, tolen, budget_ms);
}

void append(std::string &out, const char *fmt, ...) noexcept __attribute__((format(printf, 2, 3)));
void append(std::string &out, const char *fmt, ...) noexcept
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0)
        out.append(line, static_cast<size_t>(n) < sizeof line ? static_cast<size_t>(n) : sizeof line - 1);
}

// The totals of the connections this process closed: "closed_rdma=N closed_tcp=N
// closed_bytes_sent=N closed_bytes_received=N" and closed_reason_CODE=N for each code seen.
void append_totals(std::string &out) noexcept
{
    append(out, "closed_rdma=%llu closed_tcp=%llu closed_bytes_sent=%llu closed_bytes_received=%llu",
           g_closed.rdma.load(), g_closed.tcp.load(), g_closed.sent.load(), g_closed.received.load());
    for (unsigned r = 0; r < kReasonCount; ++r)
        if (unsigned long long n = g_closed.by_reason[r].load())
            append(out, " closed_reason_%s=%llu", reason_code(static_cast<Reason>(r)), n);
}

// The process's lines: one for the process, one per socket (under its lowest number).
std::string describe_process() noexcept
{
    std::string out;
    try {
        out.reserve(4096);
        append(out, "process pid=%d uid=%u program=%s version=%s offloaded=%u switches=%llu setup_us_sum=%llu "
                    "setup_us_max=%llu ",
               static_cast<int>(getpid()), static_cast<unsigned>(geteuid()), program_invocation_short_name,
               PACKAGE_VERSION, rt::g_offloaded.load(std::memory_order_relaxed), rt::g_setup.switches.load(),
               rt::g_setup.us_sum.load(), rt::g_setup.us_max.load());
        append_totals(out);
        out += '\n';
        std::set<const Socket *> seen;
        fdt::for_each([&](int fd, const SocketRef &s) {
            if (!seen.insert(s.get()).second)
                return;
            if (s->role == Role::listener) {
                char local[64] = "-";
                sockaddr_storage ss{};
                socklen_t len = sizeof ss;
                if (RS_REAL(getsockname)(fd, reinterpret_cast<sockaddr *>(&ss), &len) == 0)
                    util::format_addr(ss, local, sizeof local);
                append(out, "socket fd=%d role=listener local=%s peer=- transport=%s reason=%s phase=listen "
                            "bytes_sent=0 bytes_received=0 link=-\n",
                       fd, local, s->listener ? "rdma" : "tcp",
                       s->listener ? "-" : reason_code(s->rule_tcp ? Reason::rule : Reason::no_listener));
                return;
            }
            describe::Info ci = describe::capture(fd, *s);
            if (!ci.connection)
                return;
            if (s->transport != nullptr && s->transport.load()->handed_off())
                return;  // (another process serves it)
            const bool rdma = describe::on_rdma(*s);
            char link[80] = "-";
            if (rdma)
                s->transport.load()->link_name(link, sizeof link);
            append(out, "socket fd=%d role=%s local=%s peer=%s transport=%s reason=%s phase=%s bytes_sent=%llu "
                        "bytes_received=%llu link=%s\n",
                   fd, role_name(s->role), ci.local, ci.peer, rdma ? "rdma" : "tcp",
                   rdma ? "-" : reason_code(describe::reason(*s, ci)),
                   s->transport != nullptr ? s->transport.load()->phase_name() : "tcp",
                   static_cast<unsigned long long>(ci.counters.bytes_sent),
                   static_cast<unsigned long long>(ci.counters.bytes_received), link);
        });
    } catch (...) {  // out of memory: what was gathered
    }
    return out;
}

}  // namespace

int open() noexcept
{
    int fd = util::make_high([] { return RS_REAL(socket)(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0); });
    if (fd < 0)
        return -1;
    int one = 1;
    sockaddr_un a;
    socklen_t len = name_of(getpid(), &a);
    if (setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0 ||
        RS_REAL(bind)(fd, reinterpret_cast<sockaddr *>(&a), len) != 0) {
        util::close_own(fd);
        return -1;
    }
    return fd;
}

void answer(int fd) noexcept
{
    const int saved = errno;
    // A few requests per wake-up: the progress thread has connections to serve (the
    // socket stays readable, so the loop comes back for the rest).
    for (int i = 0; i < 4; ++i) {
        char req[64];
        util::CredMsg q(req, sizeof req);
        if (RS_REAL(recvmsg)(fd, &q.m, MSG_DONTWAIT) < 0)
            break;
        const ucred *cred = q.cred();
        // Only the process's own user, or root; and only to an address to answer to.
        if (cred == nullptr || (cred->uid != 0 && cred->uid != geteuid() && cred->uid != getuid()) ||
            q.m.msg_namelen <= offsetof(sockaddr_un, sun_path))
            continue;
        send_text(fd, describe_process(), q.from, q.m.msg_namelen);
    }
    errno = saved;
}

void count_closed(bool rdma, Reason why, unsigned long long sent, unsigned long long received) noexcept
{
    (rdma ? g_closed.rdma : g_closed.tcp).fetch_add(1, std::memory_order_relaxed);
    if (!rdma && static_cast<unsigned>(why) < kReasonCount)
        g_closed.by_reason[static_cast<unsigned>(why)].fetch_add(1, std::memory_order_relaxed);
    g_closed.sent.fetch_add(sent, std::memory_order_relaxed);
    g_closed.received.fetch_add(received, std::memory_order_relaxed);
}

void log_exit() noexcept
{
    if (!log::enabled(log::kInfo) || g_closed.rdma.load() + g_closed.tcp.load() == 0)
        return;
    try {
        std::string fields;
        append_totals(fields);
        log::write(log::kInfo, "event=exit program=%s %s", program_invocation_short_name, fields.c_str());
    } catch (...) {  // out of memory at exit: no line
    }
}

void after_fork_child() noexcept
{
    g_closed.rdma = 0;
    g_closed.tcp = 0;
    g_closed.sent = 0;
    g_closed.received = 0;
    for (auto &n : g_closed.by_reason)
        n = 0;
}

}  // namespace rdmasock::report
