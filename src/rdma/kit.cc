#include "rdma/kit.hh"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <sys/mman.h>
#include <vector>

#include "base/log.hh"

namespace rdmasock::kits {

namespace {
std::mutex g_mu;
// Leaked on purpose: never destroyed by a static destructor while the library's thread
// may still run at exit; the process's end frees it.
std::vector<Kit> *g_reserve = new std::vector<Kit>();
// The background builder: at most one.  g_building and the key it builds for change
// under g_mu; g_built is signalled when it ends.
bool g_building = false;
ibv_context *g_building_ctx = nullptr;
unsigned g_building_log2 = 0;
pid_t g_builder_tid = 0;  // 0 until the builder thread has started
// Leaked like g_reserve: a detached builder may still signal it while the process runs
// its static destructors at exit (found by ThreadSanitizer).
std::condition_variable &g_built = *new std::condition_variable();
constexpr int kBuilderNice = 10;  // added to the nice value of the thread that starts it
// Completion channels made ahead on the program's threads (prepare_channels), for the
// kits built later on the builder or the progress thread.  Leaked like g_reserve.
std::vector<std::shared_ptr<rdma::CompChannel>> *g_channels = new std::vector<std::shared_ptr<rdma::CompChannel>>();
// Devices being removed (forget): no kit is kept for them.  Leaked like g_reserve.
std::vector<ibv_context *> *g_gone = new std::vector<ibv_context *>();
bool gone_locked(ibv_context *ctx) noexcept
{
    return g_gone != nullptr && std::find(g_gone->begin(), g_gone->end(), ctx) != g_gone->end();
}
constexpr size_t kChannelsMin = 2;  // kept at least (a reserve kit and a kit built on the spot)
constexpr size_t kChannelsMax = 8;  // per device: connections set up in a burst add two each up to this

// The calling thread's nice value (Linux: per thread).
int own_nice() noexcept
{
    errno = 0;
    int n = getpriority(PRIO_PROCESS, 0);
    return errno != 0 ? 0 : n;
}
}  // namespace

uint8_t *map_ring(size_t size) noexcept
{
    constexpr size_t kHuge = size_t{2} << 20;
    if (size < kHuge) {
        void *m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return nullptr;
        madvise(m, size, MADV_DONTFORK);
        return static_cast<uint8_t *>(m);
    }
    void *m = mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return nullptr;
    auto base = reinterpret_cast<uintptr_t>(m);
    uintptr_t aligned = (base + kHuge - 1) & ~(kHuge - 1);
    if (aligned > base)
        munmap(m, aligned - base);
    uintptr_t end = base + size + kHuge, used = aligned + size;
    if (end > used)
        munmap(reinterpret_cast<void *>(used), end - used);
    auto *p = reinterpret_cast<uint8_t *>(aligned);
    madvise(p, size, MADV_HUGEPAGE);
    madvise(p, size, MADV_DONTFORK);
    return p;
}

void RingMem::release() noexcept
{
    mr.reset();
    if (mem != nullptr)
        munmap(mem, size);
    mem = nullptr;
    size = 0;
}

namespace {
Reason map_and_register(const std::shared_ptr<rdma::Pd> &pd, size_t size, int access, RingMem &r) noexcept
{
    r.mem = map_ring(size);
    if (r.mem == nullptr)
        return Reason::resource;
    r.size = size;
    int err = 0;
    r.mr = rdma::Mr::reg(pd, r.mem, size, access, &err);
    if (r.mr)
        return Reason::none;
    RS_DEBUG("ibv_reg_mr of %zu bytes failed: %s", size, strerror(err));
    Reason why = rdma::memlock_too_small(r.mem, size) || err == ENOMEM ? Reason::memlock : Reason::resource;
    r.release();
    return why;
}
}  // namespace

namespace {
std::shared_ptr<rdma::CompChannel> make_channel(const std::shared_ptr<rdma::Context> &ctx, int *err) noexcept
{
    auto c = rdma::CompChannel::create(ctx, err);
    if (c && c->set_nonblocking() != 0)
        c.reset();
    return c;
}
}  // namespace

void prepare_channels(const std::shared_ptr<rdma::Context> &ctx) noexcept
{
    size_t have = 0;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (g_channels == nullptr)
            return;
        for (const auto &c : *g_channels)
            have += c->context()->get() == ctx->get();
    }
    // (A connection may use two: a kit built on the spot, when the builder's cannot be
    // waited for, and the builder's refill; or a kit per request when it is sent on.)
    // (Calls on two threads at once may both add: `have` can exceed the cap.)
    const size_t target = std::max(kChannelsMin, std::min(have + 2, kChannelsMax));
    for (size_t want = target > have ? target - have : 0; want > 0; --want) {
        int err = 0;
        auto c = make_channel(ctx, &err);
        if (!c)
            return;
        std::lock_guard<std::mutex> lk(g_mu);
        if (gone_locked(ctx->get()))
            return;  // (its device went meanwhile: closed here, not kept)
        try {
            g_channels->push_back(std::move(c));
        } catch (...) {
            return;
        }
    }
}

namespace {
// One made ahead, else one made here (a descriptor made off the program's threads).
std::shared_ptr<rdma::CompChannel> take_channel(const std::shared_ptr<rdma::Context> &ctx, int *err) noexcept
{
    if (std::lock_guard<std::mutex> lk(g_mu); g_channels != nullptr) {
        for (auto it = g_channels->begin(); it != g_channels->end(); ++it)
            if ((*it)->context()->get() == ctx->get()) {
                auto c = std::move(*it);
                g_channels->erase(it);
                return c;
            }
    }
    RS_DEBUG("connection kit: no completion channel made ahead; making one here");
    return make_channel(ctx, err);
}
}  // namespace

Reason build(const std::shared_ptr<rdma::Context> &ctx, unsigned log2, int cqe, Kit &k) noexcept
{
    int err = 0;
    k.ctx = ctx->get();
    k.log2 = log2;
    k.pd = rdma::Pd::create(ctx, &err);
    if (!k.pd) {
        RS_DEBUG("ibv_alloc_pd failed: %s", strerror(err));
        return Reason::resource;
    }
    k.chan = take_channel(ctx, &err);
    if (!k.chan) {
        RS_DEBUG("ibv_create_comp_channel failed: %s", strerror(err));
        return Reason::resource;
    }
    k.cq = rdma::Cq::create(ctx, k.chan, cqe, &err);
    if (!k.cq) {
        RS_DEBUG("ibv_create_cq failed: %s", strerror(err));
        return Reason::resource;
    }
    const size_t size = size_t{1} << log2;
    // The only memory a peer can write: the receive ring, remote write only.
    if (Reason r = map_and_register(k.pd, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, k.rx);
        r != Reason::none)
        return r;
    return map_and_register(k.pd, size, IBV_ACCESS_LOCAL_WRITE, k.tx);
}

bool take(ibv_context *ctx, unsigned log2, Kit &out) noexcept
{
    std::lock_guard<std::mutex> lk(g_mu);
    if (g_reserve == nullptr)
        return false;
    for (auto it = g_reserve->begin(); it != g_reserve->end(); ++it)
        if (it->ctx == ctx && it->log2 == log2) {
            out = std::move(*it);
            g_reserve->erase(it);
            return true;
        }
    return false;
}

void refill(const std::shared_ptr<rdma::Context> &ctx, unsigned log2, int cqe) noexcept
{
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (g_reserve == nullptr)
            return;
        for (const Kit &k : *g_reserve)
            if (k.ctx == ctx->get() && k.log2 == log2)
                return;
    }
    Kit k;
    if (build(ctx, log2, cqe, k) != Reason::none) {
        k.rx.release();
        k.tx.release();
        return;
    }
    std::lock_guard<std::mutex> lk(g_mu);
    if (gone_locked(k.ctx))
        return;  // (its device is going: `k` is freed as this returns, after the lock)
    try {
        if (g_reserve != nullptr)
            g_reserve->push_back(std::move(k));
    } catch (...) {
    }
}

void refill_async(const std::shared_ptr<rdma::Context> &ctx, unsigned log2, int cqe) noexcept
{
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (g_building)
            return;  // one builder at a time: the next obtain asks again
        g_building = true;
        g_building_ctx = ctx->get();
        g_building_log2 = log2;
        g_builder_tid = 0;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    try {
        std::thread t([ctx, log2, cqe] {
            // Background work: the program's own threads come first (under emulation,
            // registering two rings takes tens of ms of CPU, which a connection that has
            // just started moving data would otherwise share).  Nice 10, not 19: at 19
            // a builder beside a busy connection got about 1.5% of a CPU and was still
            // at work a second later, when the next connection wanted its kit.  A
            // connection that needs this kit before it is done raises it (obtain).
            pthread_setname_np(pthread_self(), "rdmasock-kit");  // (from another thread: a file opened)
            const auto tid = static_cast<pid_t>(syscall(SYS_gettid));
            {
                std::lock_guard<std::mutex> lk(g_mu);
                setpriority(PRIO_PROCESS, static_cast<id_t>(tid), std::min(19, own_nice() + kBuilderNice));
                g_builder_tid = tid;
            }
            refill(ctx, log2, cqe);
            std::lock_guard<std::mutex> lk(g_mu);
            g_building = false;
            g_builder_tid = 0;
            g_built.notify_all();
        });
        t.detach();
    } catch (...) {
        std::lock_guard<std::mutex> lk(g_mu);
        g_building = false;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

namespace {
// Wait for the builder making (ctx, log2), raised to the caller's priority; then take.
// Raising a thread's priority back takes CAP_SYS_NICE (or RLIMIT_NICE): without it the
// builder would still be slow, and the kit is built here instead (the builder's then
// becomes the next reserve).
bool take_from_builder(ibv_context *ctx, unsigned log2, Kit &out) noexcept
{
    std::unique_lock<std::mutex> lk(g_mu);
    if (!g_building || g_building_ctx != ctx || g_building_log2 != log2 || g_builder_tid == 0)
        return false;
    if (setpriority(PRIO_PROCESS, static_cast<id_t>(g_builder_tid), own_nice()) != 0)
        return false;
    // Bounded: a server's set-up waits here under the engine's lock, and a builder stuck
    // in the driver must not hold it (the build here that follows then reports what is
    // wrong).  Under load in the VM the wait took 18 ms where a build took 115-246 ms.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (g_building)
        if (g_built.wait_until(lk, until) == std::cv_status::timeout)
            break;
    lk.unlock();
    return take(ctx, log2, out);
}
}  // namespace

void forget(ibv_context *ctx) noexcept
{
    // (Taken out, freed as this returns: outside the lock.)
    std::vector<Kit> kits;
    std::vector<std::shared_ptr<rdma::CompChannel>> channels;
    auto take_if = [](auto &from, auto &to, auto pred) {
        for (auto it = from.begin(); it != from.end();)
            if (pred(*it)) {
                to.push_back(std::move(*it));
                it = from.erase(it);
            } else {
                ++it;
            }
    };
    {
        std::unique_lock<std::mutex> lk(g_mu);
        // A builder at work on the device finishes first (its kit is then dropped): its
        // objects are on the context librdmacm may close once this returns.
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (g_building && g_building_ctx == ctx)
            if (g_built.wait_until(lk, until) == std::cv_status::timeout)
                break;
        try {
            if (g_gone != nullptr && !gone_locked(ctx))
                g_gone->push_back(ctx);
            if (g_reserve != nullptr)
                take_if(*g_reserve, kits, [ctx](const Kit &k) { return k.ctx == ctx; });
            if (g_channels != nullptr)
                take_if(*g_channels, channels,
                        [ctx](const std::shared_ptr<rdma::CompChannel> &c) { return c->context()->get() == ctx; });
        } catch (...) {
        }
    }
}

Reason obtain(const std::shared_ptr<rdma::Context> &ctx, unsigned log2, int cqe, Kit &out) noexcept
{
    const auto t0 = std::chrono::steady_clock::now();
    auto us = [t0] {
        return static_cast<long>(
            std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count());
    };
    if (take(ctx->get(), log2, out)) {
        // (the common case: no line)
    } else if (take_from_builder(ctx->get(), log2, out)) {
        RS_DEBUG("connection kit: waited %ld us for the background builder", us());
    } else {
        Reason r = build(ctx, log2, cqe, out);
        RS_DEBUG("connection kit: built for this connection in %ld us", us());
        if (r != Reason::none)
            return r;
    }
    refill_async(ctx, log2, cqe);
    return Reason::none;
}

void after_fork_child() noexcept
{
    new (&g_mu) std::mutex();
    new (&g_built) std::condition_variable();
    g_building = false;
    g_builder_tid = 0;
    // The parent's kits are leaked here (their rings are not even mapped in the child);
    // without memory for a new list there is simply no reserve in this process.
    g_reserve = new (std::nothrow) std::vector<Kit>();
    g_channels = new (std::nothrow) std::vector<std::shared_ptr<rdma::CompChannel>>();
    g_gone = new (std::nothrow) std::vector<ibv_context *>();
}

}  // namespace rdmasock::kits
