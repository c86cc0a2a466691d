#include "base/fd.hh"
#include "rdma/owners.hh"

#include "base/real.hh"
#include "rdma/device_maps.hh"
#include "rdma/dl.hh"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <linux/capability.h>
#include <new>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <utility>
#include <vector>

// Raw system calls on purpose: inside the preload library, read/fcntl/close resolve to
// rdmasock's own interposed wrappers.

namespace rdmasock::rdma {

namespace {

void set_err(int *err, int value) noexcept
{
    if (err != nullptr)
        *err = value;
}

// errno after a failed rdma-core call, never 0 (a provider may forget to set it).
int last_errno(int fallback = EIO) noexcept
{
    return errno != 0 ? errno : fallback;
}

// Hands a fully built owner to a shared_ptr.  If the control block cannot be
// allocated, shared_ptr deletes the owner (releasing the resource) and we report ENOMEM.
template <class T>
std::shared_ptr<T> share(T *raw, int *err) noexcept
{
    try {
        std::shared_ptr<T> p(raw);
        set_err(err, 0);
        return p;
    } catch (...) {
        set_err(err, ENOMEM);
        return nullptr;
    }
}

int set_fd_nonblocking(int fd) noexcept
{
    long flags = syscall(SYS_fcntl, fd, F_GETFL);
    if (flags < 0)
        return -errno;
    if ((flags & O_NONBLOCK) == 0 && syscall(SYS_fcntl, fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return -errno;
    return 0;
}

// A reference on librdmacm's entry for every device (rdma_get_devices), so the
// ibv_context librdmacm opened stays open while a borrowed Context uses it.  One per
// process, shared by every borrowed Context; renewed when a device appears that the
// current one does not cover.
struct DevicePin {
    ibv_context **list = nullptr;
    ~DevicePin()
    {
        if (list != nullptr)
            rdma_free_devices(list);
    }
    bool covers(ibv_context *ctx) const noexcept
    {
        for (ibv_context **p = list; p != nullptr && *p != nullptr; ++p)
            if (*p == ctx)
                return true;
        return false;
    }
};

// Never destroyed: borrowed contexts may outlive static destruction at exit.
std::mutex *g_pin_mu = new (std::nothrow) std::mutex;
std::weak_ptr<DevicePin> *g_pin = new (std::nothrow) std::weak_ptr<DevicePin>;
// Every pin made (the current one, and older ones still held by Contexts borrowed under
// them): a device's removal renews each one's list.
std::vector<std::weak_ptr<DevicePin>> *g_pins = new (std::nothrow) std::vector<std::weak_ptr<DevicePin>>();

// ctx null: a new pin on every device (the engine's, at its start: in a fork child the
// current one may be the parent's, on its copy of rdma-core).
std::shared_ptr<DevicePin> pin_devices(ibv_context *ctx) noexcept
{
    if (g_pin_mu == nullptr || g_pin == nullptr)
        return nullptr;
    std::lock_guard<std::mutex> lock(*g_pin_mu);
    std::shared_ptr<DevicePin> pin = g_pin->lock();
    if (pin && ctx != nullptr && pin->covers(ctx))
        return pin;
    DevicePin *raw = new (std::nothrow) DevicePin;
    if (raw == nullptr)
        return nullptr;
    raw->list = rdma_get_devices(nullptr);
    pin = share(raw, nullptr);
    if (!pin || raw->list == nullptr || (ctx != nullptr && !pin->covers(ctx)))
        return nullptr;
    *g_pin = pin;
    if (g_pins != nullptr)
        try {
            g_pins->erase(std::remove_if(g_pins->begin(), g_pins->end(),
                                         [](const std::weak_ptr<DevicePin> &w) { return w.expired(); }),
                          g_pins->end());
            g_pins->push_back(pin);
        } catch (...) {
        }
    return pin;
}

}  // namespace

void renew_device_pin() noexcept
{
    if (g_pin_mu == nullptr || g_pins == nullptr)
        return;
    std::lock_guard<std::mutex> lock(*g_pin_mu);
    // (Each new list taken before the old one is freed: the devices still there are
    // never left without a reference.  The first listing lets librdmacm mark the removed
    // device; with no device left it lists none and marks none: the removed one's
    // context then stays open until the process ends, rdma-core 44.)
    if (ibv_context **l = rdma_get_devices(nullptr))
        rdma_free_devices(l);
    for (const std::weak_ptr<DevicePin> &w : *g_pins)
        if (std::shared_ptr<DevicePin> pin = w.lock()) {
            ibv_context **fresh = rdma_get_devices(nullptr);
            if (pin->list != nullptr)
                rdma_free_devices(pin->list);
            pin->list = fresh;  // (the same pin: every Context borrowed under it keeps it)
        }
}

namespace {

// A "Name:   1234 kB" field of /proc/self/status, in bytes; -1 if absent.
long long status_kb_field(const char *buf, const char *name) noexcept
{
    size_t n = std::strlen(name);
    for (const char *p = buf; p != nullptr && *p != '\0';) {
        if (std::strncmp(p, name, n) == 0 && p[n] == ':') {
            long long v = 0;
            const char *q = p + n + 1;
            while (*q == ' ' || *q == '\t')
                ++q;
            if (*q < '0' || *q > '9')
                return -1;
            while (*q >= '0' && *q <= '9')
                v = v * 10 + (*q++ - '0');
            return v * 1024;
        }
        p = std::strchr(p, '\n');
        if (p != nullptr)
            ++p;
    }
    return -1;
}

// Bytes this process has pinned (the kernel charges verbs registrations to pinned_vm,
// shown as VmPin), or locked (VmLck) when VmPin is not shown; 0 if unreadable.
long long pinned_bytes() noexcept
{
    char buf[4096];
    long fd = syscall(SYS_openat, AT_FDCWD, "/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t len = 0;
    while (len < sizeof buf - 1) {
        long r = syscall(SYS_read, static_cast<int>(fd), buf + len, sizeof buf - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += static_cast<size_t>(r);
    }
    util::close_own(static_cast<int>(fd));  // (not syscall(): the shim hooks SYS_close)
    buf[len] = '\0';
    long long v = status_kb_field(buf, "VmPin");
    if (v < 0)
        v = status_kb_field(buf, "VmLck");
    return v < 0 ? 0 : v;
}

bool has_cap_ipc_lock() noexcept
{
    __user_cap_header_struct hdr{};
    hdr.version = _LINUX_CAPABILITY_VERSION_3;
    hdr.pid = 0;
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
    if (syscall(SYS_capget, &hdr, data) != 0)
        return false;
    return (data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective & CAP_TO_MASK(CAP_IPC_LOCK)) != 0;
}

}  // namespace

// ------------------------------------------------------------------- Context

std::shared_ptr<Context> Context::open(ibv_device *dev, int *err) noexcept
{
    if (dev == nullptr) {
        set_err(err, EINVAL);
        return nullptr;
    }
    Context *c = new (std::nothrow) Context;
    if (c == nullptr) {
        set_err(err, ENOMEM);
        return nullptr;
    }
    errno = 0;
    c->ctx_ = ibv_open_device(dev);
    if (c->ctx_ == nullptr) {
        set_err(err, last_errno(ENODEV));
        delete c;
        return nullptr;
    }
    c->owned_ = true;
    device_maps::note_made();
    dl::own_fd(c->ctx_->cmd_fd);
    dl::own_fd(c->ctx_->async_fd);
    return share(c, err);
}

std::shared_ptr<Context> Context::open_by_name(const char *name, int *err) noexcept
{
    int n = 0;
    errno = 0;
    ibv_device **list = ibv_get_device_list(&n);
    if (list == nullptr) {
        set_err(err, last_errno(ENODEV));
        return nullptr;
    }
    std::shared_ptr<Context> found;
    int e = ENODEV;
    for (int i = 0; i < n && !found; ++i) {
        if (name != nullptr && *name != '\0') {
            if (std::strcmp(ibv_get_device_name(list[i]), name) == 0)
                found = open(list[i], &e);
            continue;
        }
        std::shared_ptr<Context> c = open(list[i], &e);
        if (!c)
            continue;
        ibv_device_attr attr{};
        if (ibv_query_device(c->get(), &attr) != 0)
            continue;
        for (uint8_t port = 1; port <= attr.phys_port_cnt && !found; ++port) {
            ibv_port_attr pa{};
            if (ibv_query_port(c->get(), port, &pa) == 0 && pa.state == IBV_PORT_ACTIVE)
                found = c;
        }
        if (!found)
            e = ENODEV;
    }
    ibv_free_device_list(list);
    set_err(err, found ? 0 : e);
    return found;
}

std::vector<std::shared_ptr<Context>> Context::borrow_all() noexcept
{
    std::vector<std::shared_ptr<Context>> out;
    std::shared_ptr<DevicePin> pin = pin_devices(nullptr);
    if (!pin)
        return out;
    try {
        for (ibv_context **p = pin->list; *p != nullptr; ++p)
            if (auto c = borrow(*p, pin))
                out.push_back(std::move(c));
    } catch (...) {
        out.clear();
    }
    return out;
}

std::shared_ptr<Context> Context::borrow(ibv_context *ctx) noexcept
{
    return borrow(ctx, nullptr);
}

std::shared_ptr<Context> Context::borrow(ibv_context *ctx,
                                         std::shared_ptr<void> keeper) noexcept
{
    if (ctx == nullptr)
        return nullptr;
    Context *c = new (std::nothrow) Context;
    if (c == nullptr)
        return nullptr;
    c->ctx_ = ctx;
    c->owned_ = false;
    c->keeper_ = std::move(keeper);
    return share(c, nullptr);
}

Context::~Context()
{
    if (inherited())
        return;
    if (owned_ && ctx_ != nullptr) {
        util::FdGate making(util::FdGate::making, util::FdGate::high_only);  // (disowned and closed, nothing between)
        dl::disown_fd(ctx_->cmd_fd);
        dl::disown_fd(ctx_->async_fd);
        device_maps::Unmapping unmapping;
        ibv_close_device(ctx_);
    }
}

// ------------------------------------------------------------------------ Pd

std::shared_ptr<Pd> Pd::create(std::shared_ptr<Context> ctx, int *err) noexcept
{
    if (!ctx) {
        set_err(err, EINVAL);
        return nullptr;
    }
    if (ctx->gone()) {
        set_err(err, ENODEV);
        return nullptr;
    }
    Pd *p = new (std::nothrow) Pd;
    if (p == nullptr) {
        set_err(err, ENOMEM);
        return nullptr;
    }
    errno = 0;
    p->pd_ = ibv_alloc_pd(ctx->get());
    if (p->pd_ == nullptr) {
        set_err(err, last_errno(ENOMEM));
        delete p;
        return nullptr;
    }
    p->ctx_ = std::move(ctx);
    return share(p, err);
}

Pd::~Pd()
{
    if (inherited())
        return;
    if (pd_ != nullptr)
        ibv_dealloc_pd(pd_);
}

// --------------------------------------------------------------- CompChannel

std::shared_ptr<CompChannel> CompChannel::create(std::shared_ptr<Context> ctx,
                                                 int *err) noexcept
{
    if (!ctx) {
        set_err(err, EINVAL);
        return nullptr;
    }
    if (ctx->gone()) {
        set_err(err, ENODEV);
        return nullptr;
    }
    CompChannel *c = new (std::nothrow) CompChannel;
    if (c == nullptr) {
        set_err(err, ENOMEM);
        return nullptr;
    }
    util::FdGate making(util::FdGate::making);
    errno = 0;
    c->ch_ = ibv_create_comp_channel(ctx->get());
    if (c->ch_ == nullptr) {
        set_err(err, last_errno(ENOMEM));
        delete c;
        return nullptr;
    }
    c->ch_->fd = util::move_high(c->ch_->fd);  // nobody else has seen it yet
    dl::own_fd(c->ch_->fd);
    c->ctx_ = std::move(ctx);
    return share(c, err);
}

CompChannel::~CompChannel()
{
    if (inherited())
        return;
    if (ch_ != nullptr) {
        util::FdGate making(util::FdGate::making, util::FdGate::high_only);  // (disowned and closed, nothing between)
        dl::disown_fd(ch_->fd);
        ibv_destroy_comp_channel(ch_);
    }
}

int CompChannel::set_nonblocking() noexcept
{
    return set_fd_nonblocking(ch_->fd);
}

Cq *CompChannel::get_event(int *err) noexcept
{
    ibv_cq *cq = nullptr;
    void *cq_ctx = nullptr;
    errno = 0;
    if (ibv_get_cq_event(ch_, &cq, &cq_ctx) != 0) {
        set_err(err, last_errno(EIO));
        return nullptr;
    }
    // Every CQ made by Cq::create carries its owner as cq_context.
    Cq *owner = static_cast<Cq *>(cq_ctx);
    if (owner == nullptr || owner->cq_ != cq) {
        ibv_ack_cq_events(cq, 1);  // not ours: acknowledge at once
        set_err(err, EPROTO);
        return nullptr;
    }
    owner->count_event();
    set_err(err, 0);
    return owner;
}

// ------------------------------------------------------------------------ Cq

std::shared_ptr<Cq> Cq::create(std::shared_ptr<Context> ctx,
                               std::shared_ptr<CompChannel> channel, int cqe,
                               int *err) noexcept
{
    if (!ctx || cqe <= 0 || (channel && channel->context()->get() != ctx->get())) {
        set_err(err, EINVAL);
        return nullptr;
    }
    Cq *c = new (std::nothrow) Cq;
    if (c == nullptr) {
        set_err(err, ENOMEM);
        return nullptr;
    }
    errno = 0;
    c->cq_ = ibv_create_cq(ctx->get(), cqe, c, channel ? channel->get() : nullptr, 0);
    if (c->cq_ == nullptr) {
        set_err(err, last_errno(ENOMEM));
        delete c;
        return nullptr;
    }
    device_maps::note_made();
    c->ctx_ = std::move(ctx);
    c->ch_ = std::move(channel);
    return share(c, err);
}

Cq::~Cq()
{
    if (inherited())
        return;
    if (cq_ != nullptr) {
        ack_pending();
        device_maps::Unmapping unmapping;
        ibv_destroy_cq(cq_);
    }
}

int Cq::arm(bool solicited_only) noexcept
{
    int rc = ibv_req_notify_cq(cq_, solicited_only ? 1 : 0);
    return rc == 0 ? 0 : -(rc > 0 ? rc : EIO);
}

int Cq::ack_event() noexcept
{
    if (!ch_)
        return -EINVAL;
    int e = 0;
    Cq *owner = ch_->get_event(&e);
    if (owner == nullptr)
        return -e;
    return owner == this ? 0 : 1;
}

void Cq::count_event() noexcept
{
    if (unacked_.fetch_add(1, std::memory_order_relaxed) + 1 >= kAckBatch)
        ack_pending();
}

void Cq::ack_pending() noexcept
{
    unsigned n = unacked_.exchange(0, std::memory_order_relaxed);
    if (n != 0)
        ibv_ack_cq_events(cq_, n);
}

// ------------------------------------------------------------------------ Mr

std::shared_ptr<Mr> Mr::reg(std::shared_ptr<Pd> pd, void *addr, size_t len, int access,
                            int *err) noexcept
{
    if (!pd) {
        set_err(err, EINVAL);
        return nullptr;
    }
    Mr *m = new (std::nothrow) Mr;
    if (m == nullptr) {
        set_err(err, ENOMEM);
        return nullptr;
    }
    errno = 0;
    m->mr_ = ibv_reg_mr(pd->get(), addr, len, access);
    if (m->mr_ == nullptr) {
        set_err(err, last_errno(ENOMEM));
        delete m;
        return nullptr;
    }
    m->pd_ = std::move(pd);
    return share(m, err);
}

Mr::~Mr()
{
    if (inherited())
        return;
    if (mr_ != nullptr)
        ibv_dereg_mr(mr_);
}

bool memlock_too_small(const void *addr, size_t len) noexcept
{
    rlimit rl{};
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return false;
    if (has_cap_ipc_lock())
        return false;
    long ps = sysconf(_SC_PAGESIZE);
    unsigned long long page = ps > 0 ? static_cast<unsigned long long>(ps) : 4096;
    unsigned long long start = reinterpret_cast<uintptr_t>(addr) % page;
    unsigned long long span = (start + len + page - 1) / page * page;
    unsigned long long pinned = static_cast<unsigned long long>(pinned_bytes());
    return pinned + span > static_cast<unsigned long long>(rl.rlim_cur);
}

bool memlock_too_small(size_t len) noexcept
{
    return memlock_too_small(nullptr, len);
}

// ----------------------------------------------------------------- CmChannel

std::shared_ptr<CmChannel> CmChannel::create(int *err) noexcept
{
    CmChannel *c = new (std::nothrow) CmChannel;
    if (c == nullptr) {
        set_err(err, ENOMEM);
        return nullptr;
    }
    util::FdGate making(util::FdGate::making);
    errno = 0;
    c->ch_ = rdma_create_event_channel();
    if (c->ch_ == nullptr) {
        set_err(err, last_errno(ENODEV));
        delete c;
        return nullptr;
    }
    c->ch_->fd = util::move_high(c->ch_->fd);  // nobody else has seen it yet
    dl::own_fd(c->ch_->fd);
    return share(c, err);
}

CmChannel::~CmChannel()
{
    if (inherited())
        return;
    if (ch_ != nullptr) {
        util::FdGate making(util::FdGate::making, util::FdGate::high_only);  // (disowned and closed, nothing between)
        dl::disown_fd(ch_->fd);
        rdma_destroy_event_channel(ch_);
    }
}

int CmChannel::set_nonblocking() noexcept
{
    return set_fd_nonblocking(ch_->fd);
}

// ---------------------------------------------------------------------- CmId

std::shared_ptr<CmId> CmId::create(std::shared_ptr<CmChannel> channel, void *user_ctx,
                                   rdma_port_space ps, int *err) noexcept
{
    CmId *c = new (std::nothrow) CmId;
    if (c == nullptr) {
        set_err(err, ENOMEM);
        return nullptr;
    }
    errno = 0;
    if (rdma_create_id(channel ? channel->get() : nullptr, &c->id_, user_ctx, ps) != 0) {
        set_err(err, last_errno(ENODEV));
        c->id_ = nullptr;
        delete c;
        return nullptr;
    }
    c->ch_ = std::move(channel);
    return share(c, err);
}

std::shared_ptr<CmId> CmId::adopt(rdma_cm_id *id, std::shared_ptr<CmChannel> channel,
                                  int *err) noexcept
{
    if (id == nullptr) {
        set_err(err, EINVAL);
        return nullptr;
    }
    CmId *c = new (std::nothrow) CmId;
    if (c == nullptr) {
        set_err(err, ENOMEM);
        return nullptr;
    }
    try {
        std::shared_ptr<CmId> p(c);
        // Only now is the id ours: had the control block failed, ~CmId would have run
        // with id_ still null.
        c->id_ = id;
        c->ch_ = std::move(channel);
        set_err(err, 0);
        return p;
    } catch (...) {
        set_err(err, ENOMEM);
        return nullptr;
    }
}

CmId::~CmId() { destroy_now(); }

void CmId::destroy_now() noexcept
{
    if (inherited() || id_ == nullptr)
        return;
    rdma_cm_id *id = id_;
    id_ = nullptr;
    if (id->qp != nullptr) {
        device_maps::Unmapping unmapping;
        rdma_destroy_qp(id);
    }
    rdma_destroy_id(id);
}

std::shared_ptr<Context> CmId::context() noexcept
{
    ibv_context *verbs = id_->verbs;
    if (verbs == nullptr)
        return nullptr;
    std::lock_guard<std::mutex> lock(ctx_mu_);
    std::shared_ptr<Context> c = ctx_.lock();
    if (c && c->get() == verbs)
        return c;
    // Without a pin (out of memory) the context is still valid as long as the device
    // is not hot-removed: librdmacm keeps it open for the life of the process.
    c = Context::borrow(verbs, pin_devices(verbs));
    if (c)
        ctx_ = c;
    return c;
}

// ------------------------------------------------------------------------ Qp

std::shared_ptr<Qp> Qp::create_on(std::shared_ptr<CmId> id, std::shared_ptr<Pd> pd,
                                  std::shared_ptr<Cq> send_cq, std::shared_ptr<Cq> recv_cq,
                                  ibv_qp_init_attr attr, int *err) noexcept
{
    if (!id || !pd || !send_cq || !recv_cq) {
        set_err(err, EINVAL);
        return nullptr;
    }
    if (id->get()->qp != nullptr) {
        set_err(err, EEXIST);
        return nullptr;
    }
    Qp *q = new (std::nothrow) Qp;
    if (q == nullptr) {
        set_err(err, ENOMEM);
        return nullptr;
    }
    attr.send_cq = send_cq->get();
    attr.recv_cq = recv_cq->get();
    errno = 0;
    if (rdma_create_qp(id->get(), pd->get(), &attr) != 0) {
        set_err(err, last_errno(EINVAL));
        delete q;
        return nullptr;
    }
    device_maps::note_made();
    q->qp_ = id->get()->qp;
    q->cap_ = attr.cap;
    q->pd_ = std::move(pd);
    q->send_cq_ = std::move(send_cq);
    q->recv_cq_ = std::move(recv_cq);
    q->id_ = std::move(id);
    return share(q, err);
}

std::shared_ptr<Qp> Qp::create(std::shared_ptr<Pd> pd, std::shared_ptr<Cq> send_cq,
                               std::shared_ptr<Cq> recv_cq, ibv_qp_init_attr attr,
                               int *err) noexcept
{
    if (!pd || !send_cq || !recv_cq) {
        set_err(err, EINVAL);
        return nullptr;
    }
    Qp *q = new (std::nothrow) Qp;
    if (q == nullptr) {
        set_err(err, ENOMEM);
        return nullptr;
    }
    attr.send_cq = send_cq->get();
    attr.recv_cq = recv_cq->get();
    errno = 0;
    q->qp_ = ibv_create_qp(pd->get(), &attr);
    if (q->qp_ == nullptr) {
        set_err(err, last_errno(EINVAL));
        delete q;
        return nullptr;
    }
    device_maps::note_made();
    q->cap_ = attr.cap;
    q->pd_ = std::move(pd);
    q->send_cq_ = std::move(send_cq);
    q->recv_cq_ = std::move(recv_cq);
    return share(q, err);
}

Qp::~Qp()
{
    if (inherited())
        return;
    if (qp_ == nullptr)
        return;
    device_maps::Unmapping unmapping;
    if (id_)
        rdma_destroy_qp(id_->get());  // ibv_destroy_qp, and clears id->qp
    else
        ibv_destroy_qp(qp_);
}

}  // namespace rdmasock::rdma
