#include "base/fd.hh"

#include <cerrno>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <atomic>
#include <climits>
#include <cstdint>
#include <mutex>
#include <new>
#include <linux/close_range.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#ifndef SYS_close_range
#define SYS_close_range 436  // (Linux 5.9, every architecture)
#endif
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/log.hh"
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

// > 0: that many threads are making descriptors; < 0: that many are placing one.
std::atomic<int> g_gate{0};
// Placers waiting: no maker enters meanwhile (a dup2 is one system call; the progress
// thread, making, would otherwise keep a busy program's dup2 out for long).
std::atomic<int> g_placers_waiting{0};
std::atomic<int> g_sleepers{0};  // threads asleep on g_gate (a futex)
// Making sides that may hold a low number (FdGate::low), nested ones too, and
// LowestFree's own moves: entered ever (high 32 bits) and open now (low 32 bits), in
// one word, so that LowestFree reads both at once.  Counted once the side is taken (a
// maker waiting for the gate makes nothing yet).
std::atomic<uint64_t> g_makers{0};
constexpr uint64_t kMakerTaken = uint64_t{1} << 32;
__thread unsigned t_makers __attribute__((tls_model("initial-exec"))) = 0;  // this thread's, open
// One LowestFree move at a time: a move holds a number for a moment too.
std::mutex *g_moving = new std::mutex();  // (leaked: a detached thread may move at exit)

void maker_opens() noexcept
{
    g_makers.fetch_add(kMakerTaken + 1, std::memory_order_seq_cst);
    ++t_makers;
}

void maker_closes() noexcept
{
    --t_makers;
    g_makers.fetch_sub(1, std::memory_order_seq_cst);
}
// How deep this thread is in gates (nested ones, a signal handler's).  Counted before the
// shared count is taken and after it is given back, so a handler that interrupts in
// between passes instead of waiting for its own thread.
__thread int t_depth __attribute__((tls_model("initial-exec"))) = 0;

// A wait that long is a lock cycle through the program (a dup2() in a constructor that
// dlopen() runs, while the engine's start waits for the loader's lock): it gives up.  The
// longest wait measured (parity dup2-race under ASan in the emulated VM) was 0.3 s.
constexpr long kGateGiveUpNs = 2'000'000'000L;
constexpr long kGateNapNs = 1'000'000;  // (a waking placer lets a maker in without a wake-up)

long futex(std::atomic<int> *word, int op, int val, const timespec *t) noexcept
{
    return RS_REAL(syscall)(SYS_futex, reinterpret_cast<int *>(word), op, val, t, nullptr, 0);
}

long ns_since(const timespec &t0) noexcept
{
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - t0.tv_sec) * 1'000'000'000L + (now.tv_nsec - t0.tv_nsec);
}

bool gate_enter(int side) noexcept
{
    const int saved = errno;
    timespec t0{};
    bool timed = false;
    for (;;) {
        int v = g_gate.load(std::memory_order_relaxed);
        while (v * side >= 0 && (side < 0 || g_placers_waiting.load(std::memory_order_relaxed) == 0))
            if (g_gate.compare_exchange_weak(v, v + side, std::memory_order_acquire, std::memory_order_relaxed)) {
                errno = saved;
                return true;
            }
        if (!timed) {
            clock_gettime(CLOCK_MONOTONIC, &t0);
            timed = true;
        } else if (ns_since(t0) > kGateGiveUpNs) {
            RS_WARN("gave up waiting for the library's descriptors (%s side): a dup2() may race them",
                    side < 0 ? "placing" : "making");
            errno = saved;
            return false;
        }
        // Asleep until the last one out wakes us (the count back at 0), or for at most
        // a nap (a placer that stops waiting wakes no maker).
        const timespec nap{0, kGateNapNs};
        g_sleepers.fetch_add(1, std::memory_order_seq_cst);
        futex(&g_gate, FUTEX_WAIT_PRIVATE, v, &nap);
        g_sleepers.fetch_sub(1, std::memory_order_relaxed);
    }
}

}  // namespace

FdGate::FdGate(Side side, Numbers numbers) noexcept : held_(0), counted_(side == making && numbers == low)
{
    if (t_depth++ == 0) {  // (else this thread holds a side already)
        if (side == placing)
            g_placers_waiting.fetch_add(1, std::memory_order_relaxed);
        if (gate_enter(side))
            held_ = side;
        if (side == placing)
            g_placers_waiting.fetch_sub(1, std::memory_order_relaxed);
    }
    if (counted_)
        maker_opens();
}

FdGate::~FdGate()
{
    if (counted_)
        maker_closes();
    if (held_ != 0 && g_gate.fetch_sub(held_, std::memory_order_seq_cst) == held_ &&
        g_sleepers.load(std::memory_order_seq_cst) != 0)
        futex(&g_gate, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr);
    if (t_depth > 0)
        --t_depth;
}

LowestFree::LowestFree() noexcept : seen_(g_makers.load(std::memory_order_seq_cst)) {}

bool LowestFree::disturbed() const noexcept
{
    return (seen_ & (kMakerTaken - 1)) != 0 || (g_makers.load(std::memory_order_seq_cst) >> 32) != (seen_ >> 32);
}

namespace {
// fd at the lowest free number at or above floor, if that is lower (the gate and the
// move lock held).
int move_lowest(int fd, int floor) noexcept
{
    maker_opens();  // (the duplicate, or fd, holds a number for a moment)
    const int flags = RS_REAL(fcntl)(fd, F_GETFD);
    const int low = RS_REAL(fcntl)(fd, flags > 0 && (flags & FD_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, floor);
    if (low >= 0)
        RS_REAL(close)(low < fd ? fd : low);
    maker_closes();
    return low >= 0 && low < fd ? low : fd;
}
}  // namespace

void LowestFree::fix_all(int *fds, int count, int floor) const noexcept
{
    if (!disturbed() || t_depth != 0)
        return;
    const int saved = errno;
    FdGate placing(FdGate::placing);  // (no maker holds a low number meanwhile)
    {
        std::lock_guard<std::mutex> one(*g_moving);
        for (int i = 0; i < count; ++i)  // (in order: the kernel numbered them so)
            if (fds[i] >= 0)
                fds[i] = move_lowest(fds[i], floor);
    }
    errno = saved;
}

void fd_gate_after_fork_child() noexcept
{
    g_gate.store(0, std::memory_order_relaxed);
    g_placers_waiting.store(0, std::memory_order_relaxed);
    // (This thread's making sides still open end here: their destructors count them out.)
    g_makers.store((g_makers.load(std::memory_order_relaxed) & ~(kMakerTaken - 1)) | t_makers,
                   std::memory_order_relaxed);
    new (g_moving) std::mutex();
    t_depth = 0;
}

namespace {
constexpr unsigned kOwnedMax = 1u << 20;
constexpr unsigned kWordBits = 64;
std::atomic<uint64_t> g_owned[kOwnedMax / kWordBits];  // (zero pages until used)
std::atomic<unsigned> g_owned_words{0};                // words that ever held a bit

void own(int fd) noexcept
{
    if (fd < 0 || static_cast<unsigned>(fd) >= kOwnedMax)
        return;
    const unsigned w = static_cast<unsigned>(fd) / kWordBits;
    g_owned[w].fetch_or(uint64_t{1} << (static_cast<unsigned>(fd) % kWordBits), std::memory_order_relaxed);
    unsigned top = g_owned_words.load(std::memory_order_relaxed);
    while (top <= w && !g_owned_words.compare_exchange_weak(top, w + 1, std::memory_order_relaxed)) {
    }
}
}  // namespace

bool owned(int fd) noexcept
{
    if (fd < 0 || static_cast<unsigned>(fd) >= kOwnedMax)
        return false;
    return (g_owned[static_cast<unsigned>(fd) / kWordBits].load(std::memory_order_relaxed) >>
            (static_cast<unsigned>(fd) % kWordBits)) &
           1u;
}

void disown(int fd) noexcept
{
    if (owned(fd))
        g_owned[static_cast<unsigned>(fd) / kWordBits].fetch_and(
            ~(uint64_t{1} << (static_cast<unsigned>(fd) % kWordBits)), std::memory_order_relaxed);
}

int close_own(int fd) noexcept
{
    FdGate making(FdGate::making, FdGate::high_only);  // (a range close between the two would leave it closed, unowned)
    disown(fd);
    return RS_REAL(close)(fd);
}

void disown_from(unsigned first) noexcept
{
    unsigned n = 0;
    for (unsigned from = first; next_owned(from, ~0u, &n); from = n + 1)  // (n < kOwnedMax)
        disown(static_cast<int>(n));
}

bool next_owned(unsigned from, unsigned last, unsigned *n) noexcept
{
    const unsigned words = g_owned_words.load(std::memory_order_relaxed);
    for (unsigned w = from / kWordBits; w < words && w * kWordBits <= last; ++w) {
        uint64_t bits = g_owned[w].load(std::memory_order_relaxed);
        if (w == from / kWordBits)
            bits &= ~uint64_t{0} << (from % kWordBits);
        if (bits != 0) {
            const unsigned v = w * kWordBits + static_cast<unsigned>(__builtin_ctzll(bits));
            if (v > last)
                return false;
            *n = v;
            return true;
        }
    }
    return false;
}

int close_range_but_own(unsigned first, unsigned last, int flags) noexcept
{
    // (The system call: the C library's function may be a stub where it is older than the kernel.)
    auto close_range = [](unsigned lo, unsigned hi, int f) {
        return static_cast<int>(
            RS_REAL(syscall)(SYS_close_range, static_cast<long>(lo), static_cast<long>(hi), static_cast<long>(f), 0L, 0L, 0L));
    };
    if ((flags & CLOSE_RANGE_CLOEXEC) != 0 || first > last)
        return close_range(first, last, flags);
    FdGate placing(FdGate::placing);  // (no descriptor of ours made high meanwhile)
    if ((flags & CLOSE_RANGE_UNSHARE) != 0) {  // a table of our own first, then the closes in it
        if (close_range(~0u, ~0u, CLOSE_RANGE_UNSHARE) != 0)
            return -1;
        flags &= ~CLOSE_RANGE_UNSHARE;
    }
    return for_each_run_but_own(first, last, [&close_range, flags](unsigned lo, unsigned hi) {
               return close_range(lo, hi, flags) == 0;
           })
               ? 0
               : -1;
}

int move_high(int fd) noexcept
{
    const int floor = floor_fd();
    if (fd < 0 || floor < 0)
        return fd;
    if (fd >= floor) {
        own(fd);  // (the kernel gave it a high number already)
        return fd;
    }
    int saved = errno;
    int high = dup_high(fd);
    if (high >= 0)
        RS_REAL(close)(fd);
    errno = saved;
    return high >= 0 ? high : fd;
}

int dup_high(int fd) noexcept
{
    FdGate making(FdGate::making, FdGate::high_only);  // (a range close would not know it yet)
    const int floor = floor_fd();
    const int d = RS_REAL(fcntl)(fd, F_DUPFD_CLOEXEC, floor < 0 ? 0 : floor);
    if (floor >= 0)
        own(d);
    return d;
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
