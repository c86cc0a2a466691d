// RAII owners of rdma-core objects.
//
// Every owner is held through a std::shared_ptr, and every child holds a shared_ptr to
// each object it depends on, so the rdma-core teardown order (QP before its CQs and PD,
// CQ before its completion channel, MR and PD before the device context, QP before its
// rdma_cm id, id before its event channel) holds whatever order the handles are dropped
// in:
//
//     Context <- Pd <- Mr
//     Context <- CompChannel <- Cq (channel optional)
//     Pd, Cq (send), Cq (recv), CmId (optional) <- Qp
//     CmChannel (optional) <- CmId
//
// Nothing here throws or logs: factories return a null pointer on failure and store
// the positive errno in *err (err may be null; it is set to 0 on success); errno
// itself is not meaningful afterwards.  Destructors never fail.  The last reference
// may be dropped on any thread, but not while another thread still uses the raw object
// through get().  None of these classes is copyable or movable: share the shared_ptr.
// A borrowed Context (CmId::context()) belongs to librdmacm and is never closed by us.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "rdma/dl.hh"

namespace rdmasock::rdma {

class Cq;

// Non-copyable, non-movable base.  An object made before a fork is, in the child, the
// parent's (made by the parent's copy of rdma-core, on descriptors the child closed):
// its destructor leaves it alone (dl::generation()).
class Owner {
public:
    Owner(const Owner &) = delete;
    Owner &operator=(const Owner &) = delete;

protected:
    Owner() noexcept : gen_(dl::generation()) {}
    ~Owner() = default;
    bool inherited() const noexcept { return gen_ != dl::generation(); }

private:
    unsigned gen_;
};

// A device context (ibv_context).  Either opened and owned by us (closed on
// destruction), or borrowed: the context librdmacm opened behind an rdma_cm_id, which
// we never close.
class Context : Owner {
public:
    // ibv_open_device(dev).
    static std::shared_ptr<Context> open(ibv_device *dev, int *err) noexcept;
    // Opens the device named `name` (e.g. "rxe0"), or the first device with an active
    // port when name is null or empty.  ENODEV when there is none.
    static std::shared_ptr<Context> open_by_name(const char *name, int *err) noexcept;
    // Wraps a context someone else owns.  Never closed by us; `keeper`, if given, is held
    // as long as this object (use it to keep the real owner alive).
    static std::shared_ptr<Context> borrow(ibv_context *ctx) noexcept;
    static std::shared_ptr<Context> borrow(ibv_context *ctx,
                                           std::shared_ptr<void> keeper) noexcept;
    // Every device librdmacm has open, borrowed with one pin on all of them (as
    // CmId::context() pins).  Whoever holds one keeps the pin, so a later
    // CmId::context() finds it and need not list the devices again (which opens a
    // netlink socket for a moment).
    static std::vector<std::shared_ptr<Context>> borrow_all() noexcept;
    ~Context();

    ibv_context *get() const noexcept { return ctx_; }
    bool owned() const noexcept { return owned_; }

    // The device is being removed: nothing new is made on this context (CompChannel,
    // Pd), which librdmacm closes once the last object on it is gone.
    void mark_gone() noexcept { gone_.store(true, std::memory_order_relaxed); }
    bool gone() const noexcept { return gone_.load(std::memory_order_relaxed); }

private:
    Context() = default;
    ibv_context *ctx_ = nullptr;
    bool owned_ = false;
    std::atomic<bool> gone_{false};
    std::shared_ptr<void> keeper_;
};

// A device went (RDMA_CM_EVENT_DEVICE_REMOVAL), and every object of ours on it is gone:
// the references librdmacm's device list held for the borrowed contexts are dropped, and
// a new list is taken.  That lists the devices still there (librdmacm then marks the
// removed one, and closes its context once its last id is destroyed).  Contexts borrowed
// before stay valid for the devices still there, which the new list holds.
void renew_device_pin() noexcept;

// A protection domain (ibv_alloc_pd / ibv_dealloc_pd).
class Pd : Owner {
public:
    static std::shared_ptr<Pd> create(std::shared_ptr<Context> ctx, int *err) noexcept;
    ~Pd();

    ibv_pd *get() const noexcept { return pd_; }
    const std::shared_ptr<Context> &context() const noexcept { return ctx_; }

private:
    Pd() = default;
    std::shared_ptr<Context> ctx_;
    ibv_pd *pd_ = nullptr;
};

// A completion channel (ibv_create_comp_channel): the fd that becomes readable when an
// armed CQ attached to it gets a completion.
class CompChannel : Owner {
public:
    static std::shared_ptr<CompChannel> create(std::shared_ptr<Context> ctx,
                                               int *err) noexcept;
    ~CompChannel();

    ibv_comp_channel *get() const noexcept { return ch_; }
    int fd() const noexcept { return ch_->fd; }
    const std::shared_ptr<Context> &context() const noexcept { return ctx_; }
    // Sets O_NONBLOCK on fd(): get_event()/Cq::ack_event() then return -EAGAIN instead of
    // blocking.  0 or -errno.
    int set_nonblocking() noexcept;
    // Reads one event (ibv_get_cq_event) and counts it as unacknowledged on the Cq it is
    // for, which is returned (a CQ is only destroyed after its events are acknowledged,
    // so the pointer is valid while the caller holds that Cq).  Null on failure with
    // *err = EAGAIN (non-blocking, no event), EPROTO (an event for a CQ not made by
    // Cq::create: acknowledged and dropped) or another errno.
    Cq *get_event(int *err) noexcept;

private:
    CompChannel() = default;
    std::shared_ptr<Context> ctx_;
    ibv_comp_channel *ch_ = nullptr;
};

// A completion queue (ibv_create_cq), optionally attached to a completion channel.
// Events read from the channel are acknowledged in batches (ibv_ack_cq_events takes a
// lock); whatever is still unacknowledged is acknowledged before ibv_destroy_cq, which
// would otherwise block forever.
class Cq : Owner {
public:
    // channel may be null (no events; poll only).  cqe: minimum number of entries.
    static std::shared_ptr<Cq> create(std::shared_ptr<Context> ctx,
                                      std::shared_ptr<CompChannel> channel, int cqe,
                                      int *err) noexcept;
    ~Cq();

    ibv_cq *get() const noexcept { return cq_; }
    const std::shared_ptr<Context> &context() const noexcept { return ctx_; }
    const std::shared_ptr<CompChannel> &channel() const noexcept { return ch_; }
    // Requests a completion event for the next completion (ibv_req_notify_cq).
    // 0 or -errno.
    int arm(bool solicited_only = false) noexcept;
    // Reads one event from this CQ's channel and records it for acknowledgement.
    // Returns 0 when the event was for this CQ, 1 when it was for another CQ sharing
    // the channel (counted on that one), -EAGAIN when the channel is non-blocking and
    // empty, -EINVAL without a channel, or -errno.  The usual loop on a readable
    // channel fd: ack_event(), arm(), then ibv_poll_cq() until empty.
    int ack_event() noexcept;
    // Acknowledges every event read so far (also done automatically every
    // kAckBatch events and before destruction).
    void ack_pending() noexcept;
    // Events read but not yet acknowledged.
    unsigned unacked() const noexcept { return unacked_.load(std::memory_order_relaxed); }

    static constexpr unsigned kAckBatch = 64;

private:
    friend class CompChannel;
    Cq() = default;
    void count_event() noexcept;

    std::shared_ptr<Context> ctx_;
    std::shared_ptr<CompChannel> ch_;
    ibv_cq *cq_ = nullptr;
    std::atomic<unsigned> unacked_{0};
};

// A memory region (ibv_reg_mr / ibv_dereg_mr).  A failure is reported with ibv_reg_mr's
// errno as is: ENOMEM or EPERM typically mean RLIMIT_MEMLOCK is too small (see
// memlock_too_small()).
class Mr : Owner {
public:
    static std::shared_ptr<Mr> reg(std::shared_ptr<Pd> pd, void *addr, size_t len,
                                   int access, int *err) noexcept;
    ~Mr();

    ibv_mr *get() const noexcept { return mr_; }
    uint32_t lkey() const noexcept { return mr_->lkey; }
    uint32_t rkey() const noexcept { return mr_->rkey; }
    void *addr() const noexcept { return mr_->addr; }
    size_t length() const noexcept { return mr_->length; }
    const std::shared_ptr<Pd> &pd() const noexcept { return pd_; }

private:
    Mr() = default;
    std::shared_ptr<Pd> pd_;
    ibv_mr *mr_ = nullptr;
};

// True when registering `len` more bytes (at `addr`, when known: the page span counts)
// would exceed RLIMIT_MEMLOCK, counting the memory this process already has pinned
// (VmPin in /proc/self/status, which the kernel charges registrations to; VmLck when
// VmPin is absent).  False when the limit is unlimited or the process has
// CAP_IPC_LOCK (the limit does not apply then).  For explaining a failed Mr::reg.
bool memlock_too_small(size_t len) noexcept;
bool memlock_too_small(const void *addr, size_t len) noexcept;

// An rdma_cm event channel (rdma_create_event_channel).
class CmChannel : Owner {
public:
    static std::shared_ptr<CmChannel> create(int *err) noexcept;
    ~CmChannel();

    rdma_event_channel *get() const noexcept { return ch_; }
    int fd() const noexcept { return ch_->fd; }
    // Sets O_NONBLOCK on fd() (rdma_get_cm_event then fails with EAGAIN). 0 or -errno.
    int set_nonblocking() noexcept;

private:
    CmChannel() = default;
    rdma_event_channel *ch_ = nullptr;
};

// An rdma_cm id.  Destruction destroys the QP the id carries, if any (rdma_destroy_qp),
// then the id (rdma_destroy_id, which waits until every event reported for the id has
// been acknowledged with rdma_ack_cm_event: ack before dropping the last reference).
class CmId : Owner {
public:
    // rdma_create_id.  channel null: a synchronous id (librdmacm's own channel; calls
    // such as rdma_resolve_addr block until done).
    static std::shared_ptr<CmId> create(std::shared_ptr<CmChannel> channel, void *user_ctx,
                                        rdma_port_space ps, int *err) noexcept;
    // Takes ownership of an id librdmacm created (event->id of
    // RDMA_CM_EVENT_CONNECT_REQUEST); channel is the channel its events arrive on (the
    // listener's).  On failure (null, only when out of memory; *err = ENOMEM) the id
    // stays the caller's, e.g. to rdma_reject and rdma_destroy_id it.
    static std::shared_ptr<CmId> adopt(rdma_cm_id *id, std::shared_ptr<CmChannel> channel,
                                       int *err = nullptr) noexcept;
    ~CmId();
    // The id goes now (its device is being removed), whoever else holds this object:
    // get() is null from here.  Only where every user of get() is serialised with the
    // caller (the engine's lock), and after the id's events are acknowledged.
    void destroy_now() noexcept;

    rdma_cm_id *get() const noexcept { return id_; }
    const std::shared_ptr<CmChannel> &channel() const noexcept { return ch_; }
    // The device context behind the id (borrowed from librdmacm), once the id is bound
    // to a device (rdma_bind_addr to a device address, rdma_resolve_addr, or a
    // connection request); null before.  The returned Context keeps librdmacm's device
    // entry referenced, so the ibv_context stays open as long as it is held, even after
    // this id is gone.  Repeated calls return the same object while it is alive.
    std::shared_ptr<Context> context() noexcept;

private:
    CmId() = default;
    std::shared_ptr<CmChannel> ch_;
    rdma_cm_id *id_ = nullptr;
    std::mutex ctx_mu_;
    std::weak_ptr<Context> ctx_;
};

// A queue pair.  Holds its Pd, both Cqs (which may be the same) and, when made on an
// rdma_cm id, the CmId; it is destroyed before all of them.
class Qp : Owner {
public:
    // rdma_create_qp on the id (the Pd must be on the id's context).  attr.send_cq and
    // attr.recv_cq are filled in from the Cqs.
    static std::shared_ptr<Qp> create_on(std::shared_ptr<CmId> id, std::shared_ptr<Pd> pd,
                                         std::shared_ptr<Cq> send_cq,
                                         std::shared_ptr<Cq> recv_cq, ibv_qp_init_attr attr,
                                         int *err) noexcept;
    // ibv_create_qp, for a QP the caller connects by hand with ibv_modify_qp.
    static std::shared_ptr<Qp> create(std::shared_ptr<Pd> pd, std::shared_ptr<Cq> send_cq,
                                      std::shared_ptr<Cq> recv_cq, ibv_qp_init_attr attr,
                                      int *err) noexcept;
    ~Qp();

    ibv_qp *get() const noexcept { return qp_; }
    uint32_t qpn() const noexcept { return qp_->qp_num; }
    // The capabilities the QP was created with (the provider may round them up).
    const ibv_qp_cap &cap() const noexcept { return cap_; }
    const std::shared_ptr<Pd> &pd() const noexcept { return pd_; }
    const std::shared_ptr<Cq> &send_cq() const noexcept { return send_cq_; }
    const std::shared_ptr<Cq> &recv_cq() const noexcept { return recv_cq_; }
    const std::shared_ptr<CmId> &cm_id() const noexcept { return id_; }

private:
    Qp() = default;
    std::shared_ptr<Pd> pd_;
    std::shared_ptr<Cq> send_cq_;
    std::shared_ptr<Cq> recv_cq_;
    std::shared_ptr<CmId> id_;
    ibv_qp *qp_ = nullptr;
    ibv_qp_cap cap_{};
};

}  // namespace rdmasock::rdma
