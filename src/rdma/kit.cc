#include "rdma/kit.hh"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <atomic>
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
std::atomic<bool> g_building{false};
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
    k.chan = rdma::CompChannel::create(ctx, &err);
    if (!k.chan || k.chan->set_nonblocking() != 0) {
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
    try {
        if (g_reserve != nullptr)
            g_reserve->push_back(std::move(k));
    } catch (...) {
    }
}

void refill_async(const std::shared_ptr<rdma::Context> &ctx, unsigned log2, int cqe) noexcept
{
    if (g_building.exchange(true))
        return;  // one builder at a time: the next take asks again
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    try {
        std::thread t([ctx, log2, cqe] {
            // Background work: the program's own threads come first (under emulation,
            // registering two rings takes tens of ms of CPU, which a connection that has
            // just started moving data would otherwise share).
            setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
            refill(ctx, log2, cqe);
            g_building.store(false);
        });
        pthread_setname_np(t.native_handle(), "rdmasock-kit");
        t.detach();
    } catch (...) {
        g_building.store(false);
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void after_fork_child() noexcept
{
    g_building.store(false);
    new (&g_mu) std::mutex();
    // The parent's kits are leaked here (their rings are not even mapped in the child);
    // without memory for a new list there is simply no reserve in this process.
    g_reserve = new (std::nothrow) std::vector<Kit>();
}

}  // namespace rdmasock::kits
