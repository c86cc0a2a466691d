#include "conn/link.hh"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/log.hh"

namespace rdmasock {

namespace {

constexpr uint32_t kWantInline = 128;

}  // namespace

Link::~Link() { release_queues(); }

void Link::release_queues() noexcept
{
    comp_fd_.store(-1, std::memory_order_relaxed);
    qp_.reset();
    cq_.reset();
    chan_.reset();
    id_.reset();
}

void Link::describe(char *buf, size_t n) const noexcept
{
    const rdma_cm_id *id = id_ ? id_->get() : nullptr;
    if (qp_ && !dead_ && id != nullptr && id->verbs != nullptr)
        snprintf(buf, n, "%s:%u/%u", ibv_get_device_name(id->verbs->device), static_cast<unsigned>(id->port_num),
                 qp_->qpn());
    else
        snprintf(buf, n, "-");
}

Reason Link::create(kits::Kit &kit) noexcept
{
    // A new queue pair (a client's request sent on to another port makes a second one):
    // nothing posted on it yet.
    wr_posted_ = wr_completed_ = last_signaled_ = 0;
    unsignaled_ = recv_posted_ = 0;
    dead_ = false;  // (a fork child's copy of a connection nobody had set up: ours now)
    pd_ = std::move(kit.pd);
    chan_ = std::move(kit.chan);
    cq_ = std::move(kit.cq);
    comp_fd_.store(chan_ ? chan_->fd() : -1, std::memory_order_relaxed);
    ibv_qp_init_attr attr{};
    attr.qp_type = IBV_QPT_RC;
    attr.sq_sig_all = 0;
    attr.cap.max_send_wr = kSendDepth;
    attr.cap.max_recv_wr = kRecvDepth;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    attr.cap.max_inline_data = kWantInline;
    int err = 0;
    qp_ = rdma::Qp::create_on(id_, pd_, cq_, cq_, attr, &err);
    if (!qp_) {
        attr.cap.max_inline_data = 0;
        qp_ = rdma::Qp::create_on(id_, pd_, cq_, cq_, attr, &err);
    }
    if (!qp_) {
        RS_DEBUG("rdma_create_qp failed: %s", strerror(err));
        return Reason::resource;
    }
    max_inline_ = qp_->cap().max_inline_data;
    sq_depth_ = qp_->cap().max_send_wr;
    return Reason::none;
}

int Link::post_write(uint64_t remote_addr, uint32_t rkey, const void *src, uint32_t len, uint32_t lkey,
                     bool with_imm, uint32_t imm, bool inline_data) noexcept
{
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uint64_t>(src);
    sge.length = len;
    sge.lkey = lkey;
    if (dead_ || !qp_)
        return -EPIPE;
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_posted_ + 1;
    wr.sg_list = len > 0 ? &sge : nullptr;
    wr.num_sge = len > 0 ? 1 : 0;
    wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    if (inline_data)
        wr.send_flags |= IBV_SEND_INLINE;
    if (++unsignaled_ >= kSignalEvery || wr_posted_ + 4 - wr_completed_ >= sq_depth_) {
        wr.send_flags |= IBV_SEND_SIGNALED;
        unsignaled_ = 0;
        last_signaled_ = wr.wr_id;
    }
    int r = ibv_post_send(qp_->get(), &wr, &bad);
    if (r != 0)
        return -r;
    ++wr_posted_;
    return 0;
}

int Link::post_recvs(unsigned n) noexcept
{
    if (dead_ || !qp_)
        return -1;
    for (unsigned i = 0; i < n; ++i) {
        ibv_recv_wr wr{}, *bad = nullptr;
        wr.wr_id = 0;
        wr.sg_list = nullptr;
        wr.num_sge = 0;
        if (ibv_post_recv(qp_->get(), &wr, &bad) != 0)
            return -1;
        ++recv_posted_;
    }
    return 0;
}

}  // namespace rdmasock
