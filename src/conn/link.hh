// The queue pair side of one connection: its rdma_cm id, protection domain, completion
// channel and queue, and reliable-connected queue pair; posting work requests and
// counting them.  It knows nothing of what the rings hold, of TCP or of phases (the
// ring path and the switchover do): it is what the connection-scale work shares between
// connections.
//
// Thread safety: the connection's lock guards it.
#pragma once

#include <arpa/inet.h>
#include <atomic>
#include <cstdint>
#include <memory>

#include "base/reason.hh"
#include "rdma/kit.hh"
#include "rdma/owners.hh"

namespace rdmasock {

class Link {
public:
    static constexpr uint32_t kSendDepth = 256;
    static constexpr uint32_t kRecvDepth = 512;
    static constexpr unsigned kSignalEvery = 16;  // one send in this many is signalled

    Link() = default;
    Link(const Link &) = delete;
    Link &operator=(const Link &) = delete;
    ~Link();

    // The connection's rdma_cm id (first: it stays the link's whatever comes next).
    void set_id(std::shared_ptr<rdma::CmId> id) noexcept { id_ = std::move(id); }
    // Take the kit's protection domain, channel and completion queue, and create the
    // queue pair on the id.  Reason::none, or why not.
    Reason create(kits::Kit &kit) noexcept;
    // Completion queue entries a kit for a link needs.
    static int cq_entries() noexcept { return static_cast<int>(kSendDepth + kRecvDepth + 16); }

    rdma::CmId *cm_id() const noexcept { return id_.get(); }
    std::shared_ptr<rdma::CmId> cm_id_ref() const noexcept { return id_; }
    const std::shared_ptr<rdma::Pd> &pd() const noexcept { return pd_; }
    // The queue pair goes; the rdma_cm id is handed back (to be destroyed once its events
    // are acknowledged).
    std::shared_ptr<rdma::CmId> release() noexcept
    {
        qp_.reset();
        return std::move(id_);
    }
    // The queue pair, queues and id go (the protection domain stays until the end: the
    // rings registered on it are freed first).
    void release_queues() noexcept;
    // The device is being removed: every verbs object goes now (the protection domain
    // once the rings' registrations on it are gone: RingPath::deregister), the id is
    // handed back to be destroyed.  From then on posting fails and polling, arming and
    // acknowledging do nothing.
    std::shared_ptr<rdma::CmId> release_device() noexcept
    {
        std::shared_ptr<rdma::CmId> id = std::move(id_);
        release_queues();
        pd_.reset();
        return id;
    }

    // A completion queue to poll (and not a fork child's copy of the parent's).
    bool usable() const noexcept { return cq_ != nullptr && !dead_; }
    bool has_cq() const noexcept { return cq_ != nullptr && !dead_; }
    // (Read without the connection's lock, by poll() and the engine's watch: a number,
    // -1 once the channel is gone; a stale one only wakes a sleeper for nothing.)
    int comp_fd() const noexcept { return comp_fd_.load(std::memory_order_relaxed); }
    int arm() noexcept { return cq_ ? cq_->arm() : -1; }
    // Acknowledge the channel's pending events (-1 when there was none).
    int ack_event() noexcept { return cq_ ? cq_->ack_event() : -1; }
    void ack_events() noexcept
    {
        while (cq_ && cq_->ack_event() >= 0) {
        }
    }
    uint32_t max_inline() const noexcept { return max_inline_; }
    // "DEVICE:PORT/QPN" into buf (of n bytes), or "-" without a queue pair.
    void describe(char *buf, size_t n) const noexcept;

    // In a fork child: the verbs objects are the parent's, never touched again (their
    // owners skip the parent's objects when dropped: rdma/owners.hh).
    void mark_dead() noexcept
    {
        dead_ = true;
        comp_fd_.store(-1, std::memory_order_relaxed);
        qp_.reset();
        cq_.reset();
        chan_.reset();
        id_.reset();
    }
    bool dead() const noexcept { return dead_; }

    // An RDMA WRITE (WITH IMM) of [src, src + len) to remote_addr; selectively
    // signalled.  0, or -errno (-EPIPE: a fork child's copy, nothing posted).
    int post_write(uint64_t remote_addr, uint32_t rkey, const void *src, uint32_t len, uint32_t lkey,
                   bool with_imm, uint32_t imm, bool inline_data) noexcept;
    // The next send is signalled.
    void signal_next() noexcept { unsignaled_ = kSignalEvery; }
    // Post `n` receives (zero-length: a WRITE WITH IMM consumes one).  0 or -1.
    int post_recvs(unsigned n) noexcept;
    // Top the receives up when half are used.
    void refill_recvs() noexcept
    {
        if (recv_posted_ < kRecvDepth / 2)
            post_recvs(kRecvDepth - recv_posted_);
    }

    // Work requests posted, known complete (a signalled one covers every earlier one),
    // and the last signalled.
    uint64_t posted() const noexcept { return wr_posted_; }
    uint64_t completed() const noexcept { return wr_completed_; }
    bool signalled_in_flight() const noexcept { return last_signaled_ > wr_completed_; }
    // Room in the send queue for one more message (of up to two requests and a credit).
    bool send_room() const noexcept { return wr_posted_ - wr_completed_ + 3 < sq_depth_; }

    // Poll the completion queue until it is empty: on_imm(imm) for each receive, in
    // order; on_error(status, was_recv) for each failed request.  Send completions are
    // counted here.
    template <class OnImm, class OnError>
    void poll(OnImm on_imm, OnError on_error) noexcept
    {
        ibv_wc wc[32];
        while (cq_) {
            int n = ibv_poll_cq(cq_->get(), 32, wc);
            if (n <= 0)
                break;
            for (int i = 0; i < n; ++i) {
                const ibv_wc &w = wc[i];
                if (w.status != IBV_WC_SUCCESS) {
                    if (w.opcode & IBV_WC_RECV)
                        --recv_posted_;
                    on_error(w.status);
                    continue;
                }
                if (w.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
                    --recv_posted_;
                    on_imm(ntohl(w.imm_data));
                } else if (w.wr_id > wr_completed_) {
                    wr_completed_ = w.wr_id;  // signalled: covers every earlier request
                }
            }
            if (n < 32)
                break;  // the queue had no more (one poll less on every call that found one)
        }
    }

private:
    std::shared_ptr<rdma::CmId> id_;
    std::shared_ptr<rdma::Pd> pd_;
    std::shared_ptr<rdma::CompChannel> chan_;
    std::shared_ptr<rdma::Cq> cq_;
    std::shared_ptr<rdma::Qp> qp_;
    std::atomic<int> comp_fd_{-1};
    uint32_t max_inline_ = 0;
    uint32_t sq_depth_ = 0;
    uint64_t wr_posted_ = 0;
    uint64_t wr_completed_ = 0;
    uint64_t last_signaled_ = 0;  // wr_id of the last signalled request
    unsigned unsignaled_ = 0;
    unsigned recv_posted_ = 0;
    bool dead_ = false;
};

}  // namespace rdmasock
