// Device test: two RC queue pairs exchange data with RDMA WRITE WITH IMMEDIATE into a
// registered receive buffer (remote write access only), completions taken through the
// completion channel fd (poll, ibv_get_cq_event, arm, drain), never by spinning.
//
// Protocol: the receiver's buffer has kWindow slots of kSlot bytes.  The sender writes
// message i (size sz(i), bytes pat(i, k)) into slot i % kWindow with the immediate
// carrying the size, kWindow messages at a time; the receiver checks each message at
// its completion and, after each window, answers with an 8-byte WRITE WITH IMMEDIATE
// (window number) into the sender's ack buffer, which opens the next window.
//
// Two ways to connect: rdma_cm (listener thread + client, the listener's request id
// adopted as a CmId), and by hand (ibv_modify_qp INIT/RTR/RTS with RoCE v2 GIDs).
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_MODULE rdma write with immediate
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <deque>
#include <future>
#include <poll.h>
#include <sstream>
#include <thread>

#include "common.hh"

using namespace rdmasock::rdma;
using namespace rdmasock::test;

RDMA_DEVICE_TEST_MAIN

namespace {

constexpr uint32_t kSlot = 65536;
constexpr uint32_t kWindow = 16;
constexpr uint32_t kRecvDepth = 2 * kWindow;
constexpr int kTimeoutMs = 15000;

uint32_t sz(uint32_t i)
{
    static const uint32_t edges[] = {1, kSlot, 4096, 4097, 4095, 2, 1024, kSlot - 1};
    if (i < sizeof edges / sizeof edges[0])
        return edges[i];
    uint32_t h = i * 2654435761u;
    h ^= h >> 15;
    switch (i % 4) {
    case 0: return 1 + h % 64;
    case 1: return 1 + h % 4096;
    default: return 1 + h % kSlot;
    }
}

inline uint8_t pat(uint32_t i, uint32_t k)
{
    return static_cast<uint8_t>(i * 131u + k * 7u + (k >> 8) * 13u + 0x5a);
}

// What each side tells the other: where to write.
struct Remote {
    uint64_t addr = 0;
    uint32_t rkey = 0;
    uint32_t len = 0;
};

struct Stats {
    uint64_t completions = 0;
    uint64_t events = 0;    // completion events read from the channel
    uint64_t wakeups = 0;   // poll() returns
    uint64_t bytes = 0;
};

// One side of a connection.  Buffers first: freed after the MRs.
struct Endpoint {
    Buffer rbuf;  // remote-writable: receiver's slots, sender's ack word
    Buffer sbuf;  // local staging for outgoing writes
    std::shared_ptr<CmId> id;
    std::shared_ptr<Context> ctx;
    std::shared_ptr<Pd> pd;
    std::shared_ptr<CompChannel> ch;
    std::shared_ptr<Cq> cq;
    std::shared_ptr<Qp> qp;
    std::shared_ptr<Mr> rmr, smr;
    std::deque<ibv_wc> pending;
    Stats st;
    Remote peer;

    Endpoint(size_t rlen, size_t slen) : rbuf(rlen), sbuf(slen) {}
    Remote local() const { return {reinterpret_cast<uintptr_t>(rmr->addr()), rmr->rkey(),
                                   static_cast<uint32_t>(rmr->length())}; }
};

std::string errstr(const char *what, int err)
{
    return std::string(what) + ": " + std::strerror(err);
}

// PD, channel (non-blocking), one CQ for both directions (armed), QP, MRs.
std::string setup(Endpoint &e, std::shared_ptr<Context> ctx, std::shared_ptr<CmId> id)
{
    int err = 0;
    e.ctx = std::move(ctx);
    e.id = std::move(id);
    if (!(e.pd = Pd::create(e.ctx, &err)))
        return errstr("Pd::create", err);
    if (!(e.ch = CompChannel::create(e.ctx, &err)))
        return errstr("CompChannel::create", err);
    if (int rc = e.ch->set_nonblocking(); rc != 0)
        return errstr("set_nonblocking", -rc);
    if (!(e.cq = Cq::create(e.ctx, e.ch, 4 * kRecvDepth, &err)))
        return errstr("Cq::create", err);
    ibv_qp_init_attr a{};
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 2 * kWindow;
    a.cap.max_recv_wr = kRecvDepth;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    e.qp = e.id ? Qp::create_on(e.id, e.pd, e.cq, e.cq, a, &err)
                : Qp::create(e.pd, e.cq, e.cq, a, &err);
    if (!e.qp)
        return errstr(e.id ? "Qp::create_on" : "Qp::create", err);
    // The remotely writable buffer: REMOTE_WRITE (which verbs requires to come with
    // LOCAL_WRITE), no remote read, no atomics.
    if (!(e.rmr = Mr::reg(e.pd, e.rbuf.data, e.rbuf.size,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &err)))
        return errstr("Mr::reg (receive buffer)", err);
    if (!(e.smr = Mr::reg(e.pd, e.sbuf.data, e.sbuf.size, 0, &err)))
        return errstr("Mr::reg (send buffer)", err);
    if (int rc = e.cq->arm(); rc != 0)
        return errstr("Cq::arm", -rc);
    return "";
}

// WRITE WITH IMMEDIATE consumes a receive WR; it needs no scatter entry.
int post_recv(Endpoint &e, uint64_t wr_id)
{
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id;
    return ibv_post_recv(e.qp->get(), &wr, &bad);
}

int post_write_imm(Endpoint &e, size_t src_off, uint32_t len, uint64_t dst_off,
                   uint32_t imm, uint64_t wr_id)
{
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(e.sbuf.data) + src_off;
    sge.length = len;
    sge.lkey = e.smr->lkey();
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = e.peer.addr + dst_off;
    wr.wr.rdma.rkey = e.peer.rkey;
    return ibv_post_send(e.qp->get(), &wr, &bad);
}

// The next work completion: drain the CQ; when empty, sleep in poll() on the channel
// fd, then read the event, re-arm and drain again.  0, -ETIMEDOUT or -errno.
int next_wc(Endpoint &e, ibv_wc *out)
{
    double deadline = now_ms() + kTimeoutMs;
    for (;;) {
        if (!e.pending.empty()) {
            *out = e.pending.front();
            e.pending.pop_front();
            ++e.st.completions;
            return 0;
        }
        ibv_wc wc[16];
        int n = ibv_poll_cq(e.cq->get(), 16, wc);
        if (n < 0)
            return -EIO;
        if (n > 0) {
            e.pending.insert(e.pending.end(), wc, wc + n);
            continue;
        }
        int left = static_cast<int>(deadline - now_ms());
        if (left <= 0)
            return -ETIMEDOUT;
        pollfd pfd{e.ch->fd(), POLLIN, 0};
        int r = poll(&pfd, 1, left);
        if (r < 0 && errno != EINTR)
            return -errno;
        if (r <= 0)
            continue;
        ++e.st.wakeups;
        r = e.cq->ack_event();
        if (r == -EAGAIN)
            continue;
        if (r != 0)
            return r < 0 ? r : -EPROTO;
        ++e.st.events;
        if ((r = e.cq->arm()) != 0)
            return r;
    }
}

std::string wc_str(const ibv_wc &wc)
{
    std::ostringstream s;
    s << "wr_id " << wc.wr_id << " opcode " << wc.opcode << " status "
      << ibv_wc_status_str(wc.status) << " byte_len " << wc.byte_len;
    return s.str();
}

// Receives are posted before the connection is up, so no write meets an empty
// receive queue (that would be an RNR NAK and a retry).
std::string prepost(Endpoint &e)
{
    for (uint32_t r = 0; r < kRecvDepth; ++r)
        if (int rc = post_recv(e, r); rc != 0)
            return errstr("ibv_post_recv", rc);
    return "";
}

// The sending side: n messages, a window at a time, waiting for each window's ack.
std::string run_sender(Endpoint &e, uint32_t n)
{
    uint32_t windows = (n + kWindow - 1) / kWindow;
    for (uint32_t w = 0; w < windows; ++w) {
        uint32_t first = w * kWindow, count = std::min(kWindow, n - first);
        for (uint32_t j = 0; j < count; ++j) {
            uint32_t i = first + j, len = sz(i);
            uint8_t *p = e.sbuf.data + size_t(j) * kSlot;
            for (uint32_t k = 0; k < len; ++k)
                p[k] = pat(i, k);
            if (int rc = post_write_imm(e, size_t(j) * kSlot, len, uint64_t(j) * kSlot, len, i);
                rc != 0)
                return errstr("ibv_post_send (write with immediate)", rc);
            e.st.bytes += len;
        }
        uint32_t sent = 0;
        bool acked = false;
        while (sent < count || !acked) {
            ibv_wc wc{};
            if (int rc = next_wc(e, &wc); rc != 0)
                return errstr("sender: waiting for a completion", -rc) + " (window " +
                       std::to_string(w) + ")";
            if (wc.status != IBV_WC_SUCCESS)
                return "sender: failed completion: " + wc_str(wc);
            if (wc.opcode == IBV_WC_RDMA_WRITE) {
                if (wc.wr_id != first + sent)
                    return "sender: completions out of order: " + wc_str(wc);
                ++sent;
            } else if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
                uint64_t word;
                std::memcpy(&word, e.rbuf.data, sizeof word);
                if (ntohl(wc.imm_data) != w || word != w)
                    return "sender: ack for window " + std::to_string(ntohl(wc.imm_data)) +
                           " (word " + std::to_string(word) + "), expected " +
                           std::to_string(w);
                if (post_recv(e, w) != 0)
                    return "post_recv (ack)";
                acked = true;
            } else {
                return "sender: unexpected completion: " + wc_str(wc);
            }
        }
    }
    return "";
}

// The receiving side: checks n messages, acks each window.
std::string run_receiver(Endpoint &e, uint32_t n)
{
    uint32_t got = 0, acks_posted = 0, acks_done = 0;
    while (got < n || acks_done < acks_posted) {
        ibv_wc wc{};
        if (int rc = next_wc(e, &wc); rc != 0)
            return errstr("receiver: waiting for a completion", -rc) + " (after " +
                   std::to_string(got) + " messages)";
        if (wc.status != IBV_WC_SUCCESS)
            return "receiver: failed completion: " + wc_str(wc);
        if (wc.opcode == IBV_WC_RDMA_WRITE) {
            ++acks_done;
            continue;
        }
        if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM))
            return "receiver: unexpected completion: " + wc_str(wc);
        uint32_t i = got, len = sz(i), imm = ntohl(wc.imm_data);
        if (imm != len || wc.byte_len != len)
            return "receiver: message " + std::to_string(i) + ": immediate " +
                   std::to_string(imm) + ", byte_len " + std::to_string(wc.byte_len) +
                   ", expected " + std::to_string(len);
        const uint8_t *p = e.rbuf.data + size_t(i % kWindow) * kSlot;
        for (uint32_t k = 0; k < len; ++k)
            if (p[k] != pat(i, k))
                return "receiver: message " + std::to_string(i) + " byte " +
                       std::to_string(k) + " is " + std::to_string(p[k]) + ", expected " +
                       std::to_string(pat(i, k));
        e.st.bytes += len;
        ++got;
        if (post_recv(e, i) != 0)
            return "post_recv";
        if (got % kWindow == 0 || got == n) {
            uint64_t w = (got - 1) / kWindow;
            std::memcpy(e.sbuf.data, &w, sizeof w);
            if (int rc = post_write_imm(e, 0, sizeof w, 0, static_cast<uint32_t>(w), w); rc != 0)
                return errstr("ibv_post_send (ack)", rc);
            ++acks_posted;
        }
    }
    return "";
}

// ---------------------------------------------------------------- rdma_cm plumbing

// Waits (poll on the non-blocking channel fd) for the next event, which must be
// `want`.  The caller acks it.
rdma_cm_event *wait_cm(CmChannel &ch, rdma_cm_event_type want, std::string *why)
{
    double deadline = now_ms() + kTimeoutMs;
    for (;;) {
        rdma_cm_event *ev = nullptr;
        if (rdma_get_cm_event(ch.get(), &ev) == 0) {
            if (ev->event == want && ev->status == 0)
                return ev;
            *why = std::string("expected ") + rdma_event_str(want) + ", got " +
                   rdma_event_str(ev->event) + " status " + std::to_string(ev->status);
            rdma_ack_cm_event(ev);
            return nullptr;
        }
        if (errno != EAGAIN) {
            *why = errstr("rdma_get_cm_event", errno);
            return nullptr;
        }
        int left = static_cast<int>(deadline - now_ms());
        pollfd pfd{ch.fd(), POLLIN, 0};
        if (left <= 0 || poll(&pfd, 1, left) == 0) {
            *why = std::string("timed out waiting for ") + rdma_event_str(want);
            return nullptr;
        }
    }
}

Remote remote_from(const rdma_conn_param &p)
{
    Remote r;
    if (p.private_data != nullptr && p.private_data_len >= sizeof r)
        std::memcpy(&r, p.private_data, sizeof r);
    return r;
}

rdma_conn_param conn_param(const Remote *mine)
{
    rdma_conn_param p{};
    p.private_data = mine;
    p.private_data_len = sizeof *mine;
    p.responder_resources = 1;
    p.initiator_depth = 1;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    return p;
}

struct ServerResult {
    std::string error;
    Stats st;
};

void server(const std::string &addr, uint32_t n, std::promise<uint16_t> port,
            ServerResult *res)
{
    bool port_set = false;
    auto fail = [&](const std::string &why) {
        res->error = "server: " + why;
        if (!port_set)
            port.set_value(0);
    };
    int err = 0;
    auto cmch = CmChannel::create(&err);
    if (!cmch)
        return fail(errstr("CmChannel::create", err));
    cmch->set_nonblocking();
    auto lid = CmId::create(cmch, nullptr, RDMA_PS_TCP, &err);
    if (!lid)
        return fail(errstr("CmId::create", err));
    sockaddr_in sin = make_sockaddr(addr, 0);
    if (rdma_bind_addr(lid->get(), reinterpret_cast<sockaddr *>(&sin)) != 0)
        return fail(errstr("rdma_bind_addr", errno));
    if (rdma_listen(lid->get(), 4) != 0)
        return fail(errstr("rdma_listen", errno));
    port.set_value(ntohs(rdma_get_src_port(lid->get())));
    port_set = true;

    std::string why;
    rdma_cm_event *ev = wait_cm(*cmch, RDMA_CM_EVENT_CONNECT_REQUEST, &why);
    if (ev == nullptr)
        return fail(why);
    Endpoint e(kWindow * kSlot, 4096);
    e.peer = remote_from(ev->param.conn);
    auto id = CmId::adopt(ev->id, cmch, &err);
    rdma_cm_id *raw = ev->id;
    rdma_ack_cm_event(ev);
    if (!id) {
        rdma_reject(raw, nullptr, 0);
        rdma_destroy_id(raw);
        return fail(errstr("CmId::adopt", err));
    }
    if (e.peer.rkey == 0 || e.peer.len < sizeof(uint64_t))
        return fail("no ack buffer in the connect request's private data");
    if (std::string s = setup(e, id->context(), id); !s.empty())
        return fail(s);
    if (std::string s = prepost(e); !s.empty())
        return fail(s);
    Remote mine = e.local();
    rdma_conn_param p = conn_param(&mine);
    if (rdma_accept(id->get(), &p) != 0)
        return fail(errstr("rdma_accept", errno));
    if (!(ev = wait_cm(*cmch, RDMA_CM_EVENT_ESTABLISHED, &why)))
        return fail(why);
    rdma_ack_cm_event(ev);
    if (std::string s = run_receiver(e, n); !s.empty())
        return fail(s);
    if (!(ev = wait_cm(*cmch, RDMA_CM_EVENT_DISCONNECTED, &why)))
        return fail(why);
    rdma_ack_cm_event(ev);
    res->st = e.st;
}

// Gids: the RoCE v2 IPv4-mapped entry of port 1.
int roce_v2_gid_index(ibv_context *ctx, ibv_gid *gid)
{
    ibv_port_attr pa{};
    if (ibv_query_port(ctx, 1, &pa) != 0)
        return -1;
    for (int i = 0; i < pa.gid_tbl_len; ++i) {
        ibv_gid_entry e{};
        if (ibv_query_gid_ex(ctx, 1, i, &e, 0) != 0 || e.gid_type != IBV_GID_TYPE_ROCE_V2)
            continue;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (std::memcmp(e.gid.raw, mapped, sizeof mapped) == 0) {
            *gid = e.gid;
            return i;
        }
    }
    return -1;
}

std::string connect_by_hand(Qp &qp, uint32_t my_psn, uint32_t dest_qpn, uint32_t dest_psn,
                            const ibv_gid &dgid, int sgid_index, ibv_mtu mtu)
{
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (int rc = ibv_modify_qp(qp.get(), &a,
                               IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        return errstr("modify to INIT", rc);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = dest_psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = dgid;
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(sgid_index);
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = 1;
    if (int rc = ibv_modify_qp(qp.get(), &a,
                               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                   IBV_QP_MIN_RNR_TIMER))
        return errstr("modify to RTR", rc);
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = my_psn;
    a.max_rd_atomic = 1;
    if (int rc = ibv_modify_qp(qp.get(), &a,
                               IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
        return errstr("modify to RTS", rc);
    return "";
}

void report(const char *label, uint32_t n, const Stats &snd, const Stats &rcv, double ms)
{
    BOOST_TEST_MESSAGE(label << ": " << n << " writes, " << rcv.bytes << " bytes checked in "
                             << ms << " ms (" << (rcv.bytes / 1e3 / ms) << " MB/s); sender "
                             << snd.completions << " completions/" << snd.events
                             << " events/" << snd.wakeups << " wakeups, receiver "
                             << rcv.completions << "/" << rcv.events << "/" << rcv.wakeups);
}

}  // namespace

BOOST_AUTO_TEST_CASE(rdma_cm_write_with_immediate)
{
    const uint32_t n = 1000;
    std::string dev = device_name(), addr = test_addr();
    BOOST_REQUIRE_MESSAGE(!addr.empty(), "no IPv4 address on " << dev);
    settle_rdmacm(addr);
    ResCounts base = resource_counts(dev);
    BOOST_REQUIRE(!base.empty());

    double t0 = now_ms();
    ServerResult sres;
    Stats cst;
    {
        std::promise<uint16_t> port_p;
        std::future<uint16_t> port_f = port_p.get_future();
        std::thread srv(server, addr, n, std::move(port_p), &sres);
        struct Join {
            std::thread &t;
            ~Join() { t.join(); }
        } join{srv};

        uint16_t port = port_f.get();
        BOOST_REQUIRE_MESSAGE(port != 0, sres.error);
        int err = 0;
        auto cmch = CmChannel::create(&err);
        BOOST_REQUIRE(cmch);
        BOOST_REQUIRE_EQUAL(cmch->set_nonblocking(), 0);
        auto id = CmId::create(cmch, nullptr, RDMA_PS_TCP, &err);
        BOOST_REQUIRE(id);
        sockaddr_in dst = make_sockaddr(addr, port);
        BOOST_REQUIRE_EQUAL(
            rdma_resolve_addr(id->get(), nullptr, reinterpret_cast<sockaddr *>(&dst), 2000), 0);
        std::string why;
        rdma_cm_event *ev = wait_cm(*cmch, RDMA_CM_EVENT_ADDR_RESOLVED, &why);
        BOOST_REQUIRE_MESSAGE(ev, why);
        rdma_ack_cm_event(ev);
        BOOST_REQUIRE_EQUAL(rdma_resolve_route(id->get(), 2000), 0);
        ev = wait_cm(*cmch, RDMA_CM_EVENT_ROUTE_RESOLVED, &why);
        BOOST_REQUIRE_MESSAGE(ev, why);
        rdma_ack_cm_event(ev);

        Endpoint e(4096, kWindow * kSlot);
        std::string s = setup(e, id->context(), id);
        BOOST_REQUIRE_MESSAGE(s.empty(), s);
        s = prepost(e);
        BOOST_REQUIRE_MESSAGE(s.empty(), s);
        Remote mine = e.local();
        rdma_conn_param p = conn_param(&mine);
        BOOST_REQUIRE_EQUAL(rdma_connect(id->get(), &p), 0);
        ev = wait_cm(*cmch, RDMA_CM_EVENT_ESTABLISHED, &why);
        BOOST_REQUIRE_MESSAGE(ev, why);
        e.peer = remote_from(ev->param.conn);
        rdma_ack_cm_event(ev);
        BOOST_REQUIRE_MESSAGE(e.peer.rkey != 0 && e.peer.len >= kWindow * kSlot,
                              "bad accept private data");

        s = run_sender(e, n);
        BOOST_CHECK_MESSAGE(s.empty(), s);
        cst = e.st;
        BOOST_CHECK_EQUAL(rdma_disconnect(id->get()), 0);
        ev = wait_cm(*cmch, RDMA_CM_EVENT_DISCONNECTED, &why);
        BOOST_CHECK_MESSAGE(ev, why);
        if (ev)
            rdma_ack_cm_event(ev);
        // Drop the id before the QP and the channel before both: the Qp holds them.
        id.reset();
        cmch.reset();
    }
    double ms = now_ms() - t0;
    BOOST_CHECK_MESSAGE(sres.error.empty(), sres.error);
    BOOST_CHECK_EQUAL(sres.st.completions >= n, true);
    BOOST_CHECK_GT(cst.events, 0u);
    report("rdma_cm", n, cst, sres.st, ms);
    double t1 = now_ms();
    settle_rdmacm(addr);
    ResCounts now = wait_for_counts(dev, base, 3000);
    BOOST_TEST_MESSAGE("rdma_cm: counters back in " << (now_ms() - t1) << " ms");
    BOOST_CHECK_MESSAGE(now == base, "after the connection: " << format_counts(now)
                                                               << ", baseline "
                                                               << format_counts(base));
}

BOOST_AUTO_TEST_CASE(hand_connected_write_with_immediate)
{
    const uint32_t n = 300;
    std::string dev = device_name();
    ResCounts base = resource_counts(dev);
    BOOST_REQUIRE(!base.empty());
    double t0 = now_ms();
    Stats snd, rcv;
    {
        int err = 0;
        auto ctx = Context::open_by_name(dev.c_str(), &err);
        BOOST_REQUIRE_MESSAGE(ctx, errstr("Context::open_by_name", err));
        ibv_gid gid{};
        int gidx = roce_v2_gid_index(ctx->get(), &gid);
        BOOST_REQUIRE_MESSAGE(gidx >= 0, "no RoCE v2 IPv4 GID on " << dev);
        ibv_port_attr pa{};
        BOOST_REQUIRE_EQUAL(ibv_query_port(ctx->get(), 1, &pa), 0);

        Endpoint a(4096, kWindow * kSlot), b(kWindow * kSlot, 4096);
        std::string s = setup(a, ctx, nullptr);
        BOOST_REQUIRE_MESSAGE(s.empty(), s);
        s = setup(b, ctx, nullptr);
        BOOST_REQUIRE_MESSAGE(s.empty(), s);
        a.peer = b.local();
        b.peer = a.local();
        s = connect_by_hand(*a.qp, 1000, b.qp->qpn(), 2000, gid, gidx, pa.active_mtu);
        BOOST_REQUIRE_MESSAGE(s.empty(), "QP a: " << s);
        s = connect_by_hand(*b.qp, 2000, a.qp->qpn(), 1000, gid, gidx, pa.active_mtu);
        BOOST_REQUIRE_MESSAGE(s.empty(), "QP b: " << s);
        // Receives need INIT or later; no write is in flight before run_sender.
        s = prepost(a);
        BOOST_REQUIRE_MESSAGE(s.empty(), s);
        s = prepost(b);
        BOOST_REQUIRE_MESSAGE(s.empty(), s);

        std::string rerr;
        std::thread rt([&] { rerr = run_receiver(b, n); });
        s = run_sender(a, n);
        rt.join();
        BOOST_CHECK_MESSAGE(s.empty(), s);
        BOOST_CHECK_MESSAGE(rerr.empty(), rerr);
        snd = a.st;
        rcv = b.st;
        ctx.reset();  // the endpoints' objects keep it open
    }
    report("by hand", n, snd, rcv, now_ms() - t0);
    double t1 = now_ms();
    ResCounts now = wait_for_counts(dev, base, 3000);
    BOOST_TEST_MESSAGE("by hand: counters back in " << (now_ms() - t1) << " ms");
    BOOST_CHECK_MESSAGE(now == base, "after the QPs: " << format_counts(now) << ", baseline "
                                                       << format_counts(base));
}
