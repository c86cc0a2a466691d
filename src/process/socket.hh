// The socket object: what rdmasock knows about one TCP socket (shared by every fd that
// refers to it through dup/dup2/fcntl(F_DUPFD)).
//
// Socket objects live in type-stable memory: blocks are allocated from mmap'd chunks,
// recycled through a lock-free free list and never unmapped.  That is what lets the fd
// table read a slot without a lock: a stale pointer still points at *a* Socket, whose
// reference count says whether it is alive (try_acquire) and whose slot re-check says
// whether it is still the one for that fd.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <sys/types.h>
#include <sys/socket.h>

#include "base/fd_slots.hh"
#include "base/reason.hh"
#include "process/registry.hh"

namespace rdmasock {

class Transport;
class SocketRef;

enum class Role : uint8_t { none, client, server, listener };
const char *role_name(Role r) noexcept;

class Socket : public fdt::Entry {
public:
    // A fresh socket object with one reference (held by the returned SocketRef).
    // Null only when memory for a new chunk could not be mapped.
    static SocketRef create(int domain, int type) noexcept;

    bool try_acquire() noexcept
    {
        uint32_t n = refs_.load(std::memory_order_relaxed);
        while (n != 0)
            if (refs_.compare_exchange_weak(n, n + 1, std::memory_order_acquire))
                return true;
        return false;
    }
    void acquire() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
    void release() noexcept
    {
        if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1)
            recycle();
    }
    uint32_t refs() const noexcept { return refs_.load(std::memory_order_relaxed); }

    // fds that refer to this object (dup/dup2/F_DUPFD add, close removes).
    void add_fd() noexcept { fds_.fetch_add(1, std::memory_order_relaxed); }
    // Returns true when the last fd went away.
    bool drop_fd() noexcept { return fds_.fetch_sub(1, std::memory_order_acq_rel) == 1; }
    int fds() const noexcept { return fds_.load(std::memory_order_relaxed); }

    int domain = 0;
    int type = 0;
    Role role = Role::none;
    std::atomic<Reason> reason{Reason::not_connected};
    sockaddr_storage local{};
    sockaddr_storage peer{};
    bool has_peer = false;
    // null: kernel TCP (the default transport).  Set by a connect() while other threads
    // may look (a fork() in another thread: hook::fork).
    std::atomic<Transport *> transport{nullptr};
    std::shared_ptr<void> listener;  // the RDMA listener of a listening socket
    pid_t listener_pid = 0;          // the process that opened it
    // A listener's table of which process serves which connection, shared with every
    // process that inherits the listener (process/registry.hh); null without RDMA listener.
    std::shared_ptr<Registry> registry;
    std::atomic<int64_t> last_accept_ms{0};  // a listener's last accept() (steady clock, ms)
    bool rule_tcp = false;           // a listener the offload rules keep on TCP
    // SO_OOBINLINE set before connect(): urgent bytes in the stream, which the rings
    // cannot place (the connection stays on TCP).  (An accepted socket inherits its
    // listener's in the kernel: the server checks the socket itself.)
    bool oobinline = false;
    uint64_t id = 0;                 // process-unique connection id

    // The program's calls inside the transport (the receive and send families), plus
    // kCloseDeferred once close() left the connection to the last of them: as the
    // kernel's file reference does, a thread blocked in read() keeps the connection
    // open after another thread closed its descriptor.
    static constexpr uint32_t kCloseDeferred = 1u << 31;
    std::atomic<uint32_t> calls{0};
    int deferred_fd = -1;  // while deferred: the library's duplicate of the TCP socket
    int closed_fd = -1;    // while deferred: the number the program closed
    // The kernel socket's inode once looked up (0 before): how a descriptor received
    // with SCM_RIGHTS is recognised as this socket under a new number.
    std::atomic<uint64_t> inode{0};

private:
    Socket() = default;
    void recycle() noexcept;
    friend class SocketPool;

    std::atomic<uint32_t> refs_{0};
    std::atomic<int> fds_{0};
    uint32_t index_ = 0;
    std::atomic<uint32_t> next_free_{0};
};

// An owning, counted reference to a Socket.
class SocketRef {
public:
    SocketRef() noexcept = default;
    SocketRef(const SocketRef &o) noexcept : p_(o.p_)
    {
        if (p_)
            p_->acquire();
    }
    SocketRef(SocketRef &&o) noexcept : p_(o.p_) { o.p_ = nullptr; }
    SocketRef &operator=(SocketRef o) noexcept
    {
        Socket *t = p_;
        p_ = o.p_;
        o.p_ = t;
        return *this;
    }
    ~SocketRef()
    {
        if (p_)
            p_->release();
    }
    static SocketRef adopt(Socket *p) noexcept
    {
        SocketRef r;
        r.p_ = p;
        return r;
    }
    Socket *get() const noexcept { return p_; }
    Socket *operator->() const noexcept { return p_; }
    Socket &operator*() const noexcept { return *p_; }
    explicit operator bool() const noexcept { return p_ != nullptr; }

private:
    Socket *p_ = nullptr;
};

// Live socket objects in the process (tests and stats).
unsigned live_sockets() noexcept;

}  // namespace rdmasock
