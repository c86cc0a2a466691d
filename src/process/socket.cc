#include "process/socket.hh"

#include <new>
#include <sys/mman.h>
#include <unistd.h>

#include "process/transport.hh"

namespace rdmasock {

const char *role_name(Role r) noexcept
{
    switch (r) {
    case Role::client:
        return "client";
    case Role::server:
        return "server";
    case Role::listener:
        return "listener";
    case Role::none:
        break;
    }
    return "none";
}

// Type-stable storage for Socket blocks: chunks of kPerChunk blocks, indexed by a
// 32-bit block index; a Treiber free list whose head carries an ABA tag.
class SocketPool {
public:
    static constexpr uint32_t kPerChunk = 256;
    static constexpr uint32_t kMaxChunks = 1u << 14;  // 4M sockets
    static constexpr uint32_t kNil = 0xffffffffu;

    Socket *alloc() noexcept
    {
        for (;;) {
            uint64_t head = head_.load(std::memory_order_acquire);
            uint32_t idx = static_cast<uint32_t>(head);
            if (idx == kNil) {
                if (!grow())
                    return nullptr;
                continue;
            }
            Socket *s = at(idx);
            uint32_t next = s->next_free_.load(std::memory_order_relaxed);
            uint64_t fresh = ((head >> 32) + 1) << 32 | next;
            if (head_.compare_exchange_weak(head, fresh, std::memory_order_acq_rel)) {
                live_.fetch_add(1, std::memory_order_relaxed);
                return s;
            }
        }
    }

    void free(Socket *s) noexcept
    {
        live_.fetch_sub(1, std::memory_order_relaxed);
        uint64_t head = head_.load(std::memory_order_acquire);
        for (;;) {
            s->next_free_.store(static_cast<uint32_t>(head), std::memory_order_relaxed);
            uint64_t fresh = ((head >> 32) + 1) << 32 | s->index_;
            if (head_.compare_exchange_weak(head, fresh, std::memory_order_acq_rel))
                return;
        }
    }

    unsigned live() const noexcept { return live_.load(std::memory_order_relaxed); }

private:
    Socket *at(uint32_t idx) noexcept
    {
        return chunks_[idx / kPerChunk].load(std::memory_order_acquire) + idx % kPerChunk;
    }

    bool grow() noexcept
    {
        uint32_t c = nchunks_.fetch_add(1, std::memory_order_acq_rel);
        if (c >= kMaxChunks)
            return false;
        void *mem = mmap(nullptr, sizeof(Socket) * kPerChunk, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED)
            return false;
        Socket *blocks = static_cast<Socket *>(mem);
        for (uint32_t i = 0; i < kPerChunk; ++i) {
            new (&blocks[i]) Socket();
            blocks[i].index_ = c * kPerChunk + i;
        }
        chunks_[c].store(blocks, std::memory_order_release);
        // Push the new blocks onto the free list (live_ is compensated).
        for (uint32_t i = 0; i < kPerChunk; ++i) {
            live_.fetch_add(1, std::memory_order_relaxed);
            free(&blocks[i]);
        }
        return true;
    }

    std::atomic<uint64_t> head_{kNil};
    std::atomic<uint32_t> nchunks_{0};
    std::atomic<unsigned> live_{0};
    std::atomic<Socket *> chunks_[kMaxChunks]{};
};

namespace {
SocketPool g_pool;
std::atomic<uint64_t> g_next_id{1};
}  // namespace

SocketRef Socket::create(int domain, int type) noexcept
{
    Socket *s = g_pool.alloc();
    if (s == nullptr)
        return {};
    s->domain = domain;
    s->type = type;
    s->role = Role::none;
    s->reason.store(Reason::not_connected, std::memory_order_relaxed);
    s->local = {};
    s->peer = {};
    s->has_peer = false;
    s->transport = nullptr;
    s->listener.reset();
    s->listener_pid = 0;
    s->registry.reset();
    s->last_accept_ms.store(0, std::memory_order_relaxed);
    s->rule_tcp = false;
    s->oobinline = false;
    s->id = g_next_id.fetch_add(1, std::memory_order_relaxed);
    s->fds_.store(0, std::memory_order_relaxed);
    s->clear_offloaded();
    s->refs_.store(1, std::memory_order_release);
    return SocketRef::adopt(s);
}

void Socket::recycle() noexcept
{
    if (transport != nullptr) {
        Transport *t = transport;
        transport = nullptr;
        t->destroy();
    }
    if (listener && listener_pid != getpid())
        new (&listener) std::shared_ptr<void>();  // a fork child's copy: the parent's id
    else
        listener.reset();
    registry.reset();  // (this process's view of the shared table)
    clear_offloaded();
    calls.store(0, std::memory_order_relaxed);
    deferred_fd = -1;
    closed_fd = -1;
    inode.store(0, std::memory_order_relaxed);
    g_pool.free(this);
}

unsigned live_sockets() noexcept { return g_pool.live(); }

}  // namespace rdmasock
