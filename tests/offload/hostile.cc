// hostile: a peer that speaks rdmasock's protocol (docs/protocol.md) and breaks it on
// purpose, one misbehaviour per run (tests/offload/hostile_tests.cc).  Plain C++17 on
// librdmacm, libibverbs and sockets; it never runs under librdmasock.  Messages are
// built with the library's own encoders (src/wire/negotiate.cc), then corrupted.
//
//   hostile client --addr A --port P --case CASE [--bytes N] [--steal-port L]
//       TCP-connect to A:P (a victim server under librdmasock), then negotiate over
//       rdma_cm with the misbehaviour CASE.
//   hostile server --addr A --case CASE
//       listen on A (TCP, and rdma_cm on the same port: in impostor cases from another
//       process), print "port=P", serve one connection from a victim client with the
//       misbehaviour CASE.
//
// Version 3 (docs/protocol.md): a server that accepted the RDMA connection proves
// itself before the client's SWITCH: PROOF_AT(m) into the client's ring, then the PROOF
// frame at offset m of its TCP stream.
//
// Client cases.  Rejected HELLOs (the victim must answer with a DECLINE, after which
// the hostile talks plain TCP: N pattern bytes, shutdown, the echo read and compared):
//   hello_bad_magic hello_version hello_truncated hello_log2_high hello_log2_low
//   hello_zero_rkey hello_reserved hello_family hello_unaligned (ring address)
//   hello_addr_wrap (ring address + size wraps) hello_zero_nonce hello_zero_port
//   hello_third_party (a 4-tuple that does not exist)
//   hello_attach_existing (the 4-tuple of another live connection, --steal-port)
//   hello_late (not malformed: a valid HELLO 4 s after the TCP connection, when the
//   victim has stopped waiting for a request and is on TCP: DECLINE timeout, at once)
// Every other client case first does what an honest client does after the ACCEPT: it
// waits for the victim's PROOF_AT(m) and reads its TCP stream up to m and the PROOF
// there (none: exit 2), all but data_before_confirm, whose third party sees no TCP stream.
// After a valid HELLO and ACCEPT, SWITCH(0) and a bad CONFIRM on the TCP stream (then
// N pattern bytes on TCP; the victim must stay on TCP and deliver exactly the bytes
// sent):
//   confirm_wrong_nonce confirm_bad_version confirm_garbage
//   confirm_wrong_offset (SWITCH(100), a valid CONFIRM at offset 0: at 100 there is
//   none; the victim delivers every byte, the CONFIRM's included, as stream bytes)
// data_before_confirm: after the ACCEPT, 4 KiB of 0xEE as DATA into the victim's ring,
// then no SWITCH and no CONFIRM but N pattern bytes on TCP (the victim must deliver
// only those, once it gave up waiting for the SWITCH).
// switch_twice: SWITCH(0) twice, then a valid CONFIRM and N pattern bytes on TCP (the
// victim gives up at the second SWITCH and delivers every TCP byte).
// After a complete negotiation and the victim's PREFIX, one bad ring message:
//   data_overflow (4 KiB of 0xEE written into the ring, then DATA(ring size + 1))
//   data_zero (DATA(0)) credit_overflow (CREDIT(1), nothing was sent to us)
//   prefix_end_from_client (PREFIX_END(1), type 7: since protocol version 4 every type
//   has a meaning, this one the server never takes) prefix_from_client (PREFIX(0))
//   peer_reset (RESET: documented, not malformed: the victim must report ECONNRESET)
//   write_outside_ring (64 bytes WRITE_WITH_IMM DATA(64) at ring address + ring size:
//   the victim's NIC must refuse it, remote access error)
//   rdma_read, atomic (an RDMA READ of 4 KiB of the victim's ring, an atomic
//   fetch-and-add on its first 8 bytes, from a queue pair of our own that may issue
//   them, which rdma_cm would not give us: the victim's NIC must refuse both, nothing
//   lands in our buffer)
//   other_rkey (a second connection of ours, made and switched honestly by a fork
//   child, is the other connection: once both are switched, DATA(64) through our queue
//   pair into the child's ring, with its address and rkey: the victim's NIC must refuse
//   it, remote access error; the child then sends N pattern bytes and FIN on its ring and
//   checks the victim's echo: that connection untouched)
//   data_after_fin (FIN, then once the victim has closed, DATA(16) with 16 bytes)
//   tcp_after_confirm (100 bytes of 0xEE on TCP right after the CONFIRM, in the same
//   send: after the switch the TCP stream carries nothing but a FALLBACK frame, so the
//   victim must reset, delivering none of them; nothing is sent on the ring)
//   confirm_late (not a fault: the CONFIRM comes 4 s after the SWITCH, longer than the
//   victim waits for a SWITCH; then N honest pattern bytes on the ring and FIN: the
//   victim must switch, never deliver the CONFIRM as stream bytes, and its echo is
//   checked in our ring)
// then wait (bounded) for the victim to close the TCP connection, keeping ours open.
//   rdma_sent, ring_echo_ok  confirm_late, ring_holder: ring bytes sent, echo exact (1/0)
//   leaked      rdma_read, atomic: bytes landed in our buffer (1/0)
//   other_port, other_ok  other_rkey: the other connection's local port, and whether
//               its echo was exact (1/0)
//
// Server cases (the victim client writes N pattern bytes and shuts down; a fallen back
// connection is echoed on TCP):
//   accept_bad_magic accept_version accept_zero_rkey accept_log2_high accept_reserved
//   accept_wrong_nonce decline_none (a DECLINE claiming reason "none")
//   decline_unknown (reason 250) reject_plain (a reject with no private data)
// The next three prove themselves as an honest server does (PROOF_AT(0), the PROOF at
// TCP offset 0), then read the victim's CONFIRM:
//   second_prefix (PREFIX(0) twice) prefix_beyond_tcp (PREFIX(100) with no TCP byte
//   sent, FIN over RDMA, then the TCP write side shut down)
//   accept_ring_outside_mr (a well-formed ACCEPT naming a ring that is mostly outside our
//   registered memory: the victim's own writes fail with a remote access error)
// An impostor: a plain TCP server (this process, no RDMA at all) and, on the same port,
// an rdma_cm-only squatter (a fork child, under uid/gid 65534 when we run as root) that
// accepts the victim's HELLO with a valid ACCEPT (the nonce echoed) and counts whatever
// the victim then writes into its ring; the plain server echoes on TCP:
//   impostor (the squatter sends PROOF_AT(0), but cannot write the PROOF into the TCP
//   stream) impostor_silent (no PROOF_AT)
//
// Output: one line "result case=CASE key=value ..." (fields below), exit 0 when the
// hostile could play its part, 2 when something outside the victim's reaction failed
// (set-up, the victim not answering in time shows in the fields, not the status).
//   local_port  the TCP connection's local port
//   cm          the rdma_cm answer to our connect (ESTABLISHED, REJECTED, none)
//   decline     the DECLINE's reason code (when REJECTED with one), else "none"
//   cm_after    a later rdma_cm event on the connection (DISCONNECTED) or none
//   wc          status of our last send work request (success, REM_ACCESS_ERR ...)
//   tcp_sent, sent_hash         bytes we wrote on TCP and their FNV-1a 64 (a PROOF we
//                               wrote is not counted: it is not the stream's)
//   tcp_received, recv_hash     bytes we read on TCP before EOF and their hash (client:
//                               the victim's PROOF taken out, see proof)
//   echo_ok     1 when what we read equals what we wrote
//   first_confirm  server: the first TCP bytes were a CONFIRM frame (1/0)
//   tcp_end     how our TCP read ended: eof, ECONNRESET, timeout
//   proof       client: 1 when the victim sent one PROOF_AT and exactly one PROOF frame
//               (our nonce) stands in what we read, at the offset that PROOF_AT named (it
//               is taken out); 0 when neither came; 2 anything else; server: -1
//   proof_at    client: the offset the victim's first PROOF_AT named, else -1
//   impostor cases (cm, cm_after and wc are then the squatter's: wc its PROOF_AT's status;
//   -1 in other cases):
//   ring_msgs   immediates (ring messages of any type) the victim wrote to the squatter
//   ring_data, ring_switch      of which DATA, SWITCH
//   ring_bytes  bytes the victim put into the squatter's ring: the largest of the DATA
//               lengths announced, the bytes its writes with immediate carried, and the
//               ring bytes no longer zero at the end (a plain RDMA WRITE completes nothing
//               at the receiver)
//   squat_uid   the user the squatter ran under
#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <grp.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <string>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <vector>

#include "src/wire/negotiate.hh"
#include "tests/offload/hostile_common.hh"

namespace neg = rdmasock::neg;

namespace {

const char *const kReasonCodes[] = {
#define RS_REASON(id, code, doc) code,
#include "src/base/reason.def"
#undef RS_REASON
};

constexpr int kWaitMs = 15000;     // any single wait for the victim
// confirm_late: the CONFIRM's delay after the SWITCH, beyond the victims' wait for the
// SWITCH (2 x RDMASOCK_PROBE_TIMEOUT_MS of 1000 + 3 s, hostile_tests.cc); hello_late:
// the HELLO's delay after the TCP connection, beyond the victims' wait for a request
// (the same window).
constexpr int kLateConfirmMs = 6000;
constexpr unsigned kOurLog2 = 16;  // our receive ring: 64 KiB
constexpr int kDepth = 32;
// The impostor's squatter: the user it runs as (nobody), how long it goes on counting
// once the plain server has ended its side (the victim closes after that), and a bound
// for a plain server that never tells it (stuck in accept()).
constexpr uid_t kNobody = 65534;
constexpr int kSquatGraceMs = 2000;
constexpr int kSquatMaxMs = 4 * kWaitMs;

[[noreturn]] void die(const char *what)
{
    fprintf(stderr, "hostile: %s: %s\n", what, strerror(errno));
    fflush(stdout);
    exit(2);
}

long long now_ms()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

struct Out {
    std::string kase;
    int local_port = -1;
    std::string cm = "none", decline = "none", cm_after = "none", wc = "none";
    uint64_t tcp_sent = 0;
    hostile::Hash sent_hash;
    // What we wrote and read on TCP (the victim's PROOF taken out of what we read:
    // settle_proof).
    std::vector<uint8_t> sent_bytes, recv_bytes;
    int first_confirm = -1;
    std::string tcp_end = "none";
    uint64_t rdma_sent = 0;  // pattern bytes we wrote into the victim's ring
    int ring_echo_ok = -1;   // the victim's echo of them arrived exactly in our ring
    int leaked = -1;         // rdma_read, atomic: our landing buffer changed (1/0)
    int other_port = -1, other_ok = -1;  // other_rkey: the other connection's
    int proof = -1;
    int64_t proof_at = -1;
    int64_t ring_msgs = -1, ring_data = -1, ring_switch = -1, ring_bytes = -1;
    long squat_uid = -1;
    void print()
    {
        bool echo = sent_bytes == recv_bytes;
        hostile::Hash recv_hash;
        recv_hash.add(recv_bytes.data(), recv_bytes.size());
        printf("result case=%s local_port=%d cm=%s decline=%s cm_after=%s wc=%s tcp_sent=%" PRIu64
               " sent_hash=%016" PRIx64 " tcp_received=%zu recv_hash=%016" PRIx64
               " echo_ok=%d first_confirm=%d tcp_end=%s rdma_sent=%" PRIu64 " ring_echo_ok=%d proof=%d"
               " proof_at=%" PRId64 " ring_msgs=%" PRId64 " ring_data=%" PRId64 " ring_switch=%" PRId64
               " ring_bytes=%" PRId64 " squat_uid=%ld leaked=%d other_port=%d other_ok=%d\n",
               kase.c_str(), local_port, cm.c_str(), decline.c_str(), cm_after.c_str(), wc.c_str(),
               tcp_sent, sent_hash.h, recv_bytes.size(), recv_hash.h, echo ? 1 : 0, first_confirm,
               tcp_end.c_str(), rdma_sent, ring_echo_ok, proof, proof_at, ring_msgs, ring_data, ring_switch,
               ring_bytes, squat_uid, leaked, other_port, other_ok);
        fflush(stdout);
    }
};
Out out;

// ---- TCP -----------------------------------------------------------------------------------

void tcp_send(int fd, const uint8_t *p, size_t n)
{
    out.sent_hash.add(p, n);
    out.sent_bytes.insert(out.sent_bytes.end(), p, p + n);
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("tcp send");
        out.tcp_sent += static_cast<uint64_t>(w);
        p += w;
        n -= static_cast<size_t>(w);
    }
}

// Read until `upto` bytes have been read in all (true), or EOF/error/timeout (false,
// noted in tcp_end); with `echo`, send back what arrives (server cases).
bool tcp_read(int fd, bool echo, uint64_t upto)
{
    uint8_t buf[16384];
    long long deadline = now_ms() + kWaitMs;
    while (out.recv_bytes.size() < upto) {
        pollfd p{fd, POLLIN, 0};
        int left = static_cast<int>(deadline - now_ms());
        if (left <= 0 || poll(&p, 1, left) == 0) {
            out.tcp_end = "timeout";
            return false;
        }
        size_t want = static_cast<size_t>(std::min<uint64_t>(sizeof buf, upto - out.recv_bytes.size()));
        ssize_t n = recv(fd, buf, want, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            out.tcp_end = n == 0 ? "eof" : strerrorname_np(errno);
            return false;
        }
        out.recv_bytes.insert(out.recv_bytes.end(), buf, buf + n);
        if (echo)
            tcp_send(fd, buf, static_cast<size_t>(n));
    }
    return true;
}

// Read until EOF/error/timeout.
void tcp_drain(int fd, bool echo)
{
    tcp_read(fd, echo, UINT64_MAX);
}

void send_pattern(int fd, uint64_t n)
{
    std::vector<uint8_t> b(static_cast<size_t>(n));
    hostile::fill_pattern(b.data(), b.size(), 0, hostile::kSaltClient);
    tcp_send(fd, b.data(), b.size());
}

sockaddr_in ipv4(const std::string &addr, int port)
{
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, addr.c_str(), &a.sin_addr) != 1) {
        errno = EINVAL;
        die("address");
    }
    return a;
}

// ---- rdma_cm and verbs ----------------------------------------------------------------------

struct Cm {
    rdma_event_channel *ch = nullptr;
    // Next event for any id of the channel within timeout_ms; false on timeout.  The
    // private data is copied out before the event is acknowledged.
    bool next(int timeout_ms, rdma_cm_event_type *type, rdma_cm_id **id, std::vector<uint8_t> *pdata,
              rdma_cm_id **listen_id = nullptr)
    {
        pollfd p{ch->fd, POLLIN, 0};
        if (poll(&p, 1, timeout_ms) <= 0)
            return false;
        rdma_cm_event *ev = nullptr;
        if (rdma_get_cm_event(ch, &ev) != 0)
            die("rdma_get_cm_event");
        *type = ev->event;
        *id = ev->id;
        if (listen_id)
            *listen_id = ev->listen_id;
        if (pdata) {
            pdata->clear();
            const auto *d = static_cast<const uint8_t *>(ev->param.conn.private_data);
            if (d != nullptr)
                pdata->assign(d, d + ev->param.conn.private_data_len);
        }
        rdma_ack_cm_event(ev);
        return true;
    }
};

struct Qp {
    rdma_cm_id *id = nullptr;
    ibv_qp *qp = nullptr;  // id->qp, or our own (create(.., true))
    ibv_pd *pd = nullptr;
    ibv_cq *cq = nullptr;
    ibv_mr *mr = nullptr;   // our receive ring (remote write)
    ibv_mr *smr = nullptr;  // our staging buffer (local)
    uint8_t *ring = nullptr, *stage = nullptr;
    size_t size = 0;
    std::vector<uint32_t> imms;  // immediates received, in order
    uint64_t imm_bytes = 0;      // bytes the peer's writes with immediate carried
    bool repost = false;         // a receive posted again for each one consumed

    // own: a queue pair of ours that rdma_cm does not drive (connect_own(), then
    // establish_own() at the CONNECT_RESPONSE), so that we choose its attributes: it may
    // issue RDMA READs and atomics whatever the victim's answer says.
    void create(rdma_cm_id *cid, bool own = false)
    {
        id = cid;
        pd = ibv_alloc_pd(id->verbs);
        cq = pd ? ibv_create_cq(id->verbs, 4 * kDepth, nullptr, nullptr, 0) : nullptr;
        if (!cq)
            die("pd/cq");
        ibv_qp_init_attr a{};
        a.qp_type = IBV_QPT_RC;
        a.send_cq = a.recv_cq = cq;
        a.cap.max_send_wr = a.cap.max_recv_wr = kDepth;
        a.cap.max_send_sge = a.cap.max_recv_sge = 1;
        if (own) {
            qp = ibv_create_qp(pd, &a);
            if (!qp || !move_own(IBV_QPS_INIT, 0))
                die("ibv_create_qp, INIT");
        } else if (rdma_create_qp(id, pd, &a) != 0) {
            die("rdma_create_qp");
        } else {
            qp = id->qp;
        }
        size = size_t{1} << kOurLog2;
        ring = static_cast<uint8_t *>(aligned_alloc(4096, size));
        stage = static_cast<uint8_t *>(aligned_alloc(4096, size));
        if (!ring || !stage)
            die("alloc");
        memset(ring, 0, size);
        mr = ibv_reg_mr(pd, ring, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        smr = ibv_reg_mr(pd, stage, size, IBV_ACCESS_LOCAL_WRITE);
        if (!mr || !smr)
            die("ibv_reg_mr");
        for (int i = 0; i < kDepth; ++i)
            if (post_recv() != 0)
                die("ibv_post_recv");
    }
    int post_recv()
    {
        ibv_recv_wr wr{}, *bad = nullptr;
        return ibv_post_recv(qp, &wr, &bad);
    }
    // Our own queue pair to `state` with the attributes rdma_cm gives for it; at RTS,
    // rd_atomic outstanding RDMA READs and atomics (rdma_cm would give what the peer
    // offered, which is none for the victim).
    bool move_own(ibv_qp_state state, int rd_atomic)
    {
        ibv_qp_attr attr{};
        int mask = 0;
        attr.qp_state = state;
        if (rdma_init_qp_attr(id, &attr, &mask) != 0)
            return false;
        if (state == IBV_QPS_RTS) {
            attr.max_rd_atomic = static_cast<uint8_t>(rd_atomic);
            mask |= IBV_QP_MAX_QP_RD_ATOMIC;
        }
        return ibv_modify_qp(qp, &attr, mask) == 0;
    }
    // At the CONNECT_RESPONSE of our own queue pair: INIT again (the access flags the
    // connection gives, remote write among them: before it they were none), RTR, RTS,
    // then rdma_establish.
    bool establish_own()
    {
        return move_own(IBV_QPS_INIT, 0) && move_own(IBV_QPS_RTR, 0) && move_own(IBV_QPS_RTS, 1) &&
               rdma_establish(id) == 0;
    }
    // A receive completion (wr_id 0: the opcode of a failed completion is not defined).
    void take(const ibv_wc &wc)
    {
        if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM)
            return;
        imms.push_back(ntohl(wc.imm_data));
        imm_bytes += wc.byte_len;
        if (repost)
            post_recv();  // a failure (the queue pair in error) only leaves a peer waiting
    }
    // Every completion queued now taken in (sends dropped); how many there were.
    int drain_cq()
    {
        int all = 0;
        ibv_wc wc[8];
        for (int n; (n = ibv_poll_cq(cq, 8, wc)) > 0; all += n)
            for (int i = 0; i < n; ++i)
                if (wc[i].wr_id == 0)
                    take(wc[i]);
        return all;
    }
    neg::RingInfo info() const
    {
        neg::RingInfo r;
        r.addr = reinterpret_cast<uint64_t>(ring);
        r.rkey = mr->rkey;
        r.log2 = kOurLog2;
        return r;
    }
    // One signalled RDMA WRITE (with immediate when imm != nullptr) of len staged bytes
    // to raddr; returns the send completion's status (or -1 when none came in time).
    int write(uint64_t raddr, uint32_t rkey, uint32_t len, const uint32_t *imm)
    {
        ibv_send_wr wr{};
        wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
        if (imm)
            wr.imm_data = htonl(*imm);
        wr.wr.rdma.remote_addr = raddr;
        wr.wr.rdma.rkey = rkey;
        return post_wait(wr, len);
    }
    // One signalled RDMA READ of len bytes at raddr, or an 8-byte atomic fetch-and-add
    // there, landing in the staging buffer; returns the completion's status.
    int fetch(bool atomic, uint64_t raddr, uint32_t rkey, uint32_t len)
    {
        ibv_send_wr wr{};
        if (atomic) {
            wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
            wr.wr.atomic.remote_addr = raddr;
            wr.wr.atomic.rkey = rkey;
            wr.wr.atomic.compare_add = 1;
            len = 8;
        } else {
            wr.opcode = IBV_WR_RDMA_READ;
            wr.wr.rdma.remote_addr = raddr;
            wr.wr.rdma.rkey = rkey;
        }
        return post_wait(wr, len);
    }
    // Post wr (signalled, len bytes of the staging buffer) and wait for its completion;
    // returns its status (or -1 when none came in time).
    int post_wait(ibv_send_wr &wr, uint32_t len)
    {
        ibv_sge sge{reinterpret_cast<uint64_t>(stage), len, smr->lkey};
        ibv_send_wr *bad = nullptr;
        wr.wr_id = 1;
        wr.sg_list = len ? &sge : nullptr;
        wr.num_sge = len ? 1 : 0;
        wr.send_flags = IBV_SEND_SIGNALED;
        if (ibv_post_send(qp, &wr, &bad) != 0)
            die("ibv_post_send");
        long long deadline = now_ms() + kWaitMs;
        int status = -1;
        while (status < 0 && now_ms() < deadline) {
            ibv_wc wc[8];
            int n = ibv_poll_cq(cq, 8, wc);
            // Every completion of the batch is taken in: receives after the send's too.
            // Sends have wr_id 1, receives 0.
            for (int i = 0; i < n; ++i) {
                if (wc[i].wr_id == 0)
                    take(wc[i]);
                else
                    status = wc[i].status;
            }
            if (n == 0)
                usleep(1000);
        }
        return status;
    }
    // Wait for a received immediate of `type`; false on timeout.
    bool wait_imm(neg::Imm type, uint32_t *value)
    {
        long long deadline = now_ms() + kWaitMs;
        size_t seen = 0;
        while (now_ms() < deadline) {
            for (; seen < imms.size(); ++seen)
                if (neg::imm_type(imms[seen]) == type) {
                    *value = neg::imm_value(imms[seen]);
                    return true;
                }
            if (drain_cq() == 0)
                usleep(1000);
        }
        return false;
    }
};

std::string wc_name(int st)
{
    switch (st) {
    case -1: return "none";
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_REM_ACCESS_ERR: return "REM_ACCESS_ERR";
    case IBV_WC_WR_FLUSH_ERR: return "WR_FLUSH_ERR";
    case IBV_WC_REM_OP_ERR: return "REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR: return "RETRY_EXC_ERR";
    case IBV_WC_REM_INV_REQ_ERR: return "REM_INV_REQ_ERR";
    default: return "status" + std::to_string(st);
    }
}

std::string decline_of(const std::vector<uint8_t> &p)
{
    if (p.size() < neg::kDeclineSize || memcmp(p.data(), "RSKD", 4) != 0)
        return "none";
    if (p[4] != neg::kVersion)
        return "bad_version";
    size_t n = sizeof kReasonCodes / sizeof kReasonCodes[0];
    return p[5] < n ? kReasonCodes[p[5]] : "unknown" + std::to_string(p[5]);
}

void conn_param(rdma_conn_param *p, const uint8_t *pd, size_t len)
{
    *p = rdma_conn_param{};
    p->private_data = pd;
    p->private_data_len = static_cast<uint8_t>(len);
    p->retry_count = 7;
    p->rnr_retry_count = 7;
}

// "RDMA_CM_EVENT_REJECTED" -> "REJECTED".
std::string event_name(rdma_cm_event_type t)
{
    std::string s = rdma_event_str(t);
    return s.rfind("RDMA_CM_EVENT_", 0) == 0 ? s.substr(14) : s;
}

// A later event on the connection other than ESTABLISHED (DISCONNECTED after the
// victim gave up RDMA).
void note_cm_after(Cm &cm, int timeout_ms)
{
    rdma_cm_event_type t;
    rdma_cm_id *id;
    long long deadline = now_ms() + timeout_ms;
    while (now_ms() < deadline && cm.next(static_cast<int>(deadline - now_ms()), &t, &id, nullptr))
        if (t != RDMA_CM_EVENT_ESTABLISHED) {
            out.cm_after = event_name(t);
            return;
        }
}

bool known_case(const char *const *list, size_t n, const std::string &kase, const char *role)
{
    for (size_t i = 0; i < n; ++i)
        if (kase == list[i])
            return true;
    fprintf(stderr, "hostile: unknown %s case %s\n", role, kase.c_str());
    return false;
}

// ---- client ---------------------------------------------------------------------------------

// The victim's proof (the `proof` field): its PROOF_AT immediates, and the PROOF frames
// with our nonce in what we read on TCP.  The frame at the offset the PROOF_AT named is
// taken out of recv_bytes: it is not the victim program's stream, which the echo
// comparison is about.
void settle_proof(Qp &qp, const neg::Nonce &nonce)
{
    qp.drain_cq();  // the PROOF_AT may have come after our last wait
    std::vector<uint32_t> at;
    for (uint32_t x : qp.imms)
        if (neg::imm_type(x) == neg::Imm::proof_at)
            at.push_back(neg::imm_value(x));
    std::vector<uint8_t> &b = out.recv_bytes;
    bool taken = false;
    if (!at.empty())
        out.proof_at = at[0];
    if (at.size() == 1 && b.size() >= at[0] + neg::kProofSize &&
        neg::match_proof(b.data() + at[0], neg::kProofSize, nonce) == neg::ConfirmMatch::yes) {
        b.erase(b.begin() + at[0], b.begin() + at[0] + neg::kProofSize);
        taken = true;
    }
    bool stray = false;  // a frame anywhere else
    for (size_t i = 0; i + neg::kProofSize <= b.size() && !stray; ++i)
        stray = neg::match_proof(b.data() + i, neg::kProofSize, nonce) == neg::ConfirmMatch::yes;
    if (stray || at.size() > 1 || (at.size() == 1 && !taken))
        out.proof = 2;
    else
        out.proof = taken ? 1 : 0;
}

int run_client(const std::string &addr, int port, const std::string &kase, uint64_t bytes, int steal_port)
{
    const bool hello_case = kase.rfind("hello_", 0) == 0;
    const bool confirm_case = (kase.rfind("confirm_", 0) == 0 && kase != "confirm_late") ||
                              kase == "data_before_confirm" || kase == "switch_twice";
    const bool data_case = !hello_case && !confirm_case;
    static const char *const known[] = {"hello_bad_magic", "hello_version", "hello_truncated",
        "hello_log2_high", "hello_log2_low", "hello_ring_oversized", "hello_zero_rkey", "hello_reserved", "hello_third_party",
        "hello_attach_existing", "confirm_wrong_nonce", "confirm_bad_version", "confirm_garbage", "confirm_wrong_offset", "switch_twice",
        "data_before_confirm",
        "data_overflow", "data_zero", "credit_overflow", "prefix_end_from_client", "prefix_from_client",
        "write_outside_ring", "peer_reset", "hello_family", "hello_unaligned", "hello_addr_wrap",
        "hello_zero_nonce", "hello_zero_port", "tcp_after_confirm", "data_after_fin", "confirm_late", "hello_late",
        "rdma_read", "atomic", "other_rkey", "ring_holder"};
    if (!known_case(known, sizeof known / sizeof known[0], kase, "client"))
        return 4;

    // other_rkey: the other connection is ours too, in a fork child (ring_holder) that
    // negotiates it honestly, tells us its ring (address, rkey, its local port), waits
    // for our write into it, then streams on it and checks the echo.
    struct Holder {
        uint64_t addr = 0;
        uint32_t rkey = 0;
        int port = -1;
    };
    pid_t holder = -1;
    int to_holder = -1, from_holder = -1;
    static int holder_out = -1, holder_in = -1;  // ring_holder: to and from the parent
    if (kase == "other_rkey") {
        int up[2], down[2];
        if (pipe(up) != 0 || pipe(down) != 0)
            die("pipe");
        holder = fork();
        if (holder < 0)
            die("fork");
        if (holder == 0) {
            close(up[0]);
            close(down[1]);
            holder_out = up[1];
            holder_in = down[0];
            run_client(addr, port, "ring_holder", bytes, -1);
            _exit(out.ring_echo_ok == 1 ? 0 : 3);
        }
        close(up[1]);
        close(down[0]);
        from_holder = up[0];
        to_holder = down[1];
    }

    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in srv = ipv4(addr, port);
    if (connect(fd, reinterpret_cast<sockaddr *>(&srv), sizeof srv) != 0)
        die("connect");
    sockaddr_in local{};
    socklen_t ll = sizeof local;
    getsockname(fd, reinterpret_cast<sockaddr *>(&local), &ll);
    out.local_port = ntohs(local.sin_port);

    Cm cm;
    cm.ch = rdma_create_event_channel();
    rdma_cm_id *id = nullptr;
    if (!cm.ch || rdma_create_id(cm.ch, &id, nullptr, RDMA_PS_TCP) != 0)
        die("rdma_create_id");
    sockaddr_in src = local;
    src.sin_port = 0;
    rdma_cm_event_type t;
    rdma_cm_id *eid;
    std::vector<uint8_t> pdata;
    if (rdma_resolve_addr(id, reinterpret_cast<sockaddr *>(&src), reinterpret_cast<sockaddr *>(&srv), 2000) != 0 ||
        !cm.next(kWaitMs, &t, &eid, nullptr) || t != RDMA_CM_EVENT_ADDR_RESOLVED)
        die("resolve addr");
    if (rdma_resolve_route(id, 2000) != 0 || !cm.next(kWaitMs, &t, &eid, nullptr) ||
        t != RDMA_CM_EVENT_ROUTE_RESOLVED)
        die("resolve route");
    // rdma_read, atomic: a queue pair that may issue them (rdma_cm would not let it).
    const bool reads = kase == "rdma_read" || kase == "atomic";
    Qp qp;
    qp.create(id, reads);

    neg::Hello h;
    h.family = AF_INET;
    if (getrandom(h.nonce.b, sizeof h.nonce.b, 0) != sizeof h.nonce.b)
        die("getrandom");
    memcpy(&h.client_addr, &local.sin_addr, 4);
    h.client_port = out.local_port;
    h.server_port = static_cast<uint16_t>(port);
    h.ring = qp.info();
    if (kase == "hello_third_party")
        h.client_port = 1;  // no connection to the victim comes from port 1
    if (kase == "hello_attach_existing")
        h.client_port = static_cast<uint16_t>(steal_port);
    uint8_t hello[neg::kHelloSize];
    neg::encode(h, hello);
    size_t hello_len = sizeof hello;
    if (kase == "hello_bad_magic")
        hello[0] = 'X';
    else if (kase == "hello_version")
        hello[4] = neg::kVersion + 1;
    else if (kase == "hello_truncated")
        hello_len = 40;  // up to the ports: rdma_cm pads the rest with zeros
    else if (kase == "hello_log2_high")
        hello[6] = neg::kMaxRingLog2 + 1;
    else if (kase == "hello_log2_low")
        hello[6] = neg::kMinRingLog2 - 1;
    else if (kase == "hello_ring_oversized")
        hello[6] = neg::kMaxRingLog2;  // valid, but a 64 MiB ring the victim would mirror
    else if (kase == "hello_zero_rkey")
        memset(hello + 44, 0, 4);
    else if (kase == "hello_reserved")
        hello[7] = 0x5a;
    else if (kase == "hello_family")
        hello[5] = 5;
    else if (kase == "hello_unaligned")
        hello[55] |= 8;  // ring address not 64-byte aligned
    else if (kase == "hello_addr_wrap")
        memset(hello + 48, 0xff, 6);  // address + ring size wraps around 2^64
    else if (kase == "hello_zero_nonce")
        memset(hello + 8, 0, neg::kNonceSize);
    else if (kase == "hello_zero_port")
        memset(hello + 40, 0, 2);

    auto finish = [&](int rc) {
        settle_proof(qp, h.nonce);
        if (holder > 0) {
            close(to_holder);  // (a holder still waiting goes on)
            int status = 0;
            out.other_ok = waitpid(holder, &status, 0) == holder && WIFEXITED(status) && WEXITSTATUS(status) == 0;
            holder = -1;
        }
        if (kase != "ring_holder")  // (its parent reports)
            out.print();
        return rc;
    };
    if (kase == "hello_late")
        usleep(static_cast<useconds_t>(kLateConfirmMs) * 1000);  // past the victim's wait for a request
    rdma_conn_param param;
    conn_param(&param, hello, hello_len);
    if (reads) {
        param.qp_num = qp.qp->qp_num;
        param.initiator_depth = 1;
    }
    if (rdma_connect(id, &param) != 0)
        die("rdma_connect");
    // The parked-request deadline of a victim is 2 x its probe timeout: wait longer.
    if (!cm.next(2 * kWaitMs, &t, &eid, &pdata)) {
        out.cm = "none";
        return finish(0);
    }
    if (reads && t == RDMA_CM_EVENT_CONNECT_RESPONSE) {
        // (our own queue pair: the victim's acceptance, the connection is then ours to
        // establish; reported as ESTABLISHED, as rdma_cm reports it for the others)
        if (!qp.establish_own())
            die("RTR/RTS/rdma_establish");
        t = RDMA_CM_EVENT_ESTABLISHED;
    }
    out.cm = event_name(t);
    out.decline = decline_of(pdata);
    if (hello_case) {
        send_pattern(fd, bytes);
        shutdown(fd, SHUT_WR);
        tcp_drain(fd, false);
        return finish(0);
    }
    if (t != RDMA_CM_EVENT_ESTABLISHED)
        return finish(0);
    neg::Accept acc;
    if (neg::decode(pdata.data(), pdata.size(), &acc) != rdmasock::Reason::none || !(acc.nonce == h.nonce)) {
        fprintf(stderr, "hostile: the victim's ACCEPT does not decode\n");
        return finish(2);
    }
    // As an honest client, before the SWITCH: the victim's PROOF_AT(m), then its TCP
    // stream read up to m and the PROOF there (settle_proof takes it out).  Not in
    // data_before_confirm: its ring writes come at once, as from a third party bound to a
    // connection whose TCP stream it cannot see.
    uint32_t proof_at = 0;
    if (kase != "data_before_confirm" &&
        (!qp.wait_imm(neg::Imm::proof_at, &proof_at) ||
         !tcp_read(fd, false, uint64_t{proof_at} + neg::kProofSize) ||
         neg::match_proof(out.recv_bytes.data() + proof_at, neg::kProofSize, h.nonce) != neg::ConfirmMatch::yes)) {
        fprintf(stderr, "hostile: no PROOF_AT, or no PROOF at its offset, from the victim\n");
        return finish(2);
    }
    uint8_t confirm[neg::kConfirmSize];
    neg::encode_confirm(h.nonce, confirm);
    // SWITCH(n): the victim delivers n TCP bytes, then expects the CONFIRM.
    auto send_switch = [&](uint32_t n) {
        uint32_t imm = neg::make_imm(neg::Imm::switch_at, n);
        return qp.write(acc.ring.addr, acc.ring.rkey, 0, &imm);
    };
    if (confirm_case) {
        if (kase == "confirm_wrong_offset") {
            out.wc = wc_name(send_switch(100));
            tcp_send(fd, confirm, sizeof confirm);
        } else if (kase == "switch_twice") {
            send_switch(0);
            out.wc = wc_name(send_switch(0));
            tcp_send(fd, confirm, sizeof confirm);
        } else if (kase == "data_before_confirm") {
            // The accepted RDMA connection writes into the victim's ring before any
            // CONFIRM (as a third party whose request was bound to a connection it
            // cannot write to could), then the TCP connection carries plain bytes: none
            // of the ring bytes may reach the program.
            memset(qp.stage, 0xEE, 4096);
            uint32_t imm = neg::make_imm(neg::Imm::data, 4096);
            out.wc = wc_name(qp.write(acc.ring.addr, acc.ring.rkey, 4096, &imm));
        } else {
            out.wc = wc_name(send_switch(0));
            if (kase == "confirm_wrong_nonce")
                confirm[8] ^= 1;
            else if (kase == "confirm_bad_version")
                confirm[4] = neg::kVersion + 1;
            else
                for (size_t i = 0; i < sizeof confirm; ++i)
                    confirm[i] = static_cast<uint8_t>(0xA5 ^ (i * 37));
            tcp_send(fd, confirm, sizeof confirm);
        }
        send_pattern(fd, bytes);
        shutdown(fd, SHUT_WR);
        tcp_drain(fd, false);
        note_cm_after(cm, kWaitMs);
        return finish(0);
    }
    // Data path: SWITCH(0), a correct CONFIRM, the victim's PREFIX, then one bad ring
    // message.
    if (data_case) {
        if (send_switch(0) != IBV_WC_SUCCESS)
            die("SWITCH");
        if (kase == "tcp_after_confirm") {
            // Bytes after the CONFIRM on TCP are never the stream's (all later client
            // bytes go to the ring), and no FALLBACK frame: a reset.
            uint8_t b[sizeof confirm + 100];
            memcpy(b, confirm, sizeof confirm);
            memset(b + sizeof confirm, 0xEE, 100);
            tcp_send(fd, b, sizeof b);
        } else if (kase == "confirm_late") {
            // An honest client whose CONFIRM is slow to follow its SWITCH (a loaded
            // host): longer than the victim's wait for the SWITCH itself.
            usleep(static_cast<useconds_t>(kLateConfirmMs) * 1000);
            tcp_send(fd, confirm, sizeof confirm);
        } else if (send(fd, confirm, sizeof confirm, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof confirm)) {
            die("send CONFIRM");
        }
        uint32_t pfx = 0;
        if (!qp.wait_imm(neg::Imm::prefix, &pfx)) {
            fprintf(stderr, "hostile: no PREFIX from the victim\n");
            return finish(2);
        }
        const uint64_t vsize = uint64_t{1} << acc.ring.log2;
        uint32_t imm = 0;
        int st = -1;
        if (kase == "ring_holder") {
            // Switched: the parent learns our ring, and we wait until it has written.
            Holder me{acc.ring.addr, acc.ring.rkey, out.local_port};
            char go = 0;
            if (write(holder_out, &me, sizeof me) != static_cast<ssize_t>(sizeof me))
                die("write to the parent");
            (void)!read(holder_in, &go, 1);
        }
        if (kase == "data_overflow") {
            memset(qp.stage, 0xEE, 4096);
            st = qp.write(acc.ring.addr, acc.ring.rkey, 4096, nullptr);
            if (st == IBV_WC_SUCCESS) {
                imm = neg::make_imm(neg::Imm::data, static_cast<uint32_t>(vsize + 1));
                st = qp.write(acc.ring.addr, acc.ring.rkey, 0, &imm);
            }
        } else if (kase == "data_zero") {
            imm = neg::make_imm(neg::Imm::data, 0);
            st = qp.write(acc.ring.addr, acc.ring.rkey, 0, &imm);
        } else if (kase == "credit_overflow") {
            imm = neg::make_imm(neg::Imm::credit, 1);
            st = qp.write(acc.ring.addr, acc.ring.rkey, 0, &imm);
        } else if (kase == "prefix_end_from_client") {
            imm = neg::make_imm(neg::Imm::prefix_end, 1);
            st = qp.write(acc.ring.addr, acc.ring.rkey, 0, &imm);
        } else if (kase == "data_after_fin") {
            imm = neg::make_imm(neg::Imm::fin, 0);
            st = qp.write(acc.ring.addr, acc.ring.rkey, 0, &imm);
        } else if (kase == "peer_reset") {
            imm = neg::make_imm(neg::Imm::reset, 0);
            st = qp.write(acc.ring.addr, acc.ring.rkey, 0, &imm);
        } else if (kase == "prefix_from_client") {
            imm = neg::make_imm(neg::Imm::prefix, 0);
            st = qp.write(acc.ring.addr, acc.ring.rkey, 0, &imm);
        } else if (kase == "other_rkey") {
            // The other connection's ring, through our queue pair: another protection
            // domain's key (or a memory window bound to another queue pair) at the
            // victim's NIC.
            Holder other;
            if (read(from_holder, &other, sizeof other) != static_cast<ssize_t>(sizeof other))
                die("the ring holder did not switch");
            out.other_port = other.port;
            memset(qp.stage, 0xEE, 64);
            imm = neg::make_imm(neg::Imm::data, 64);
            st = qp.write(other.addr, other.rkey, 64, &imm);
            char go = 'g';
            (void)!write(to_holder, &go, 1);
        } else if (kase == "tcp_after_confirm") {
            st = IBV_WC_SUCCESS;  // (nothing on the ring: the TCP bytes alone must reset)
        } else if (kase == "confirm_late" || kase == "ring_holder") {
            // An honest stream on the ring (bytes <= both rings: no credit needed), FIN,
            // and the victim's echo checked in our ring.
            bytes = std::min<uint64_t>(bytes, std::min<uint64_t>(vsize, qp.size));
            hostile::fill_pattern(qp.stage, static_cast<size_t>(bytes), 0, hostile::kSaltClient);
            imm = neg::make_imm(neg::Imm::data, static_cast<uint32_t>(bytes));
            st = qp.write(acc.ring.addr, acc.ring.rkey, static_cast<uint32_t>(bytes), &imm);
            out.rdma_sent = st == IBV_WC_SUCCESS ? bytes : 0;
            imm = neg::make_imm(neg::Imm::fin, 0);
            if (st == IBV_WC_SUCCESS)
                st = qp.write(acc.ring.addr, acc.ring.rkey, 0, &imm);
            uint64_t echoed = 0;
            uint32_t v = 0;
            while (echoed < bytes && qp.wait_imm(neg::Imm::data, &v)) {
                echoed += v;
                qp.imms.erase(std::find_if(qp.imms.begin(), qp.imms.end(), [](uint32_t x) {
                    return neg::imm_type(x) == neg::Imm::data;
                }));
            }
            std::vector<uint8_t> want(static_cast<size_t>(bytes));
            hostile::fill_pattern(want.data(), want.size(), 0, hostile::kSaltClient);
            out.ring_echo_ok = echoed == bytes && memcmp(qp.ring, want.data(), want.size()) == 0;
            if (!out.ring_echo_ok) {
                fprintf(stderr, "hostile: echo %" PRIu64 " of %" PRIu64 " bytes announced; immediates left:",
                        echoed, bytes);
                for (uint32_t x : qp.imms)
                    fprintf(stderr, " %u:%u", static_cast<unsigned>(neg::imm_type(x)), neg::imm_value(x));
                size_t same = 0;
                while (same < want.size() && qp.ring[same] == want[same])
                    ++same;
                fprintf(stderr, "; ring matches for %zu bytes\n", same);
            }
        } else if (kase == "write_outside_ring") {
            memset(qp.stage, 0xEE, 64);
            imm = neg::make_imm(neg::Imm::data, 64);
            st = qp.write(acc.ring.addr + vsize, acc.ring.rkey, 64, &imm);
        } else if (kase == "rdma_read" || kase == "atomic") {
            // Read the victim's ring (the good client's bytes could be there) or add to
            // it: a remote-write-only region must refuse both; our landing bytes stay.
            memset(qp.stage, 0xEE, 4096);
            st = qp.fetch(kase == "atomic", acc.ring.addr, acc.ring.rkey, 4096);
            out.leaked = std::any_of(qp.stage, qp.stage + 4096, [](uint8_t b) { return b != 0xEE; }) ? 1 : 0;
        }
        out.wc = wc_name(st);
        // The victim resets the connection and closes it: its TCP socket closes.  Our
        // side of the TCP connection stays open (a TCP EOF without an RDMA FIN would be
        // a reset of its own and hide a missing check).
        tcp_drain(fd, false);
        if (kase == "data_after_fin") {
            // The victim read EOF and closed: its connection waits in the graveyard (or
            // is gone).  DATA now: 16 bytes of 0xEE with DATA(16); our send status is
            // whatever the victim's state gives (not checked), then a moment for the
            // victim to process it.
            memset(qp.stage, 0xEE, 16);
            imm = neg::make_imm(neg::Imm::data, 16);
            out.wc = wc_name(qp.write(acc.ring.addr, acc.ring.rkey, 16, &imm));
            usleep(500 * 1000);
        }
        return finish(0);
    }
    return finish(0);
}

// ---- server ---------------------------------------------------------------------------------

// An honest version 3 server's first step once established: PROOF_AT(m) into the
// client's ring, m the bytes we wrote on TCP so far, and once that write completed the
// PROOF at offset m of our TCP stream (not counted in tcp_sent: the client takes it out).
// The PROOF_AT's send status.
int send_proof(Qp &qp, const neg::Hello &h, int fd)
{
    uint32_t imm = neg::make_imm(neg::Imm::proof_at, static_cast<uint32_t>(out.tcp_sent));
    int st = qp.write(h.ring.addr, h.ring.rkey, 0, &imm);
    if (st != IBV_WC_SUCCESS)
        return st;
    uint8_t p[neg::kProofSize];
    neg::encode_proof(h.nonce, p);
    if (send(fd, p, sizeof p, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof p))
        die("send PROOF");
    return st;
}

// ---- impostor ---------------------------------------------------------------------------------

// What the squatter saw, sent to the plain server through a pipe once it stops.
struct SquatReport {
    char cm[32], cm_after[32], wc[32];
    long uid;
    uint64_t msgs, data, switches, bytes;
};

void set_name(char (&dst)[32], const std::string &s)
{
    snprintf(dst, sizeof dst, "%s", s.c_str());
}

// Read n bytes from a pipe within timeout_ms (false on EOF or timeout).
bool read_within(int fd, void *p, size_t n, int timeout_ms)
{
    auto *c = static_cast<char *>(p);
    long long deadline = now_ms() + timeout_ms;
    while (n > 0) {
        pollfd q{fd, POLLIN, 0};
        int left = static_cast<int>(deadline - now_ms());
        if (left <= 0 || poll(&q, 1, left) == 0)
            return false;
        ssize_t k = read(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        c += k;
        n -= static_cast<size_t>(k);
    }
    return true;
}

// The squatter: a process that answers rdma_cm on the plain server's port, which any
// local user can do (the port is not privileged), and owns nothing of the TCP
// connection.  It accepts the victim's HELLO with a valid ACCEPT (echoing the nonce it
// read there), sends PROOF_AT(0) when `proof_at` (it knows the protocol; the PROOF
// itself would have to be in a TCP stream it cannot write), and counts whatever the
// victim writes into its ring until the plain server tells it to stop (a byte on
// stop_fd, or its end) and kSquatGraceMs more.  Ready (one byte), then its report, on
// report_fd.
[[noreturn]] void squat(const sockaddr_in &a, bool proof_at, int stop_fd, int report_fd)
{
    if (geteuid() == 0) {
        // The memory lock limit first, while we may raise it: without CAP_IPC_LOCK our
        // rings count against it.  Root without CAP_SYS_RESOURCE (a container) may only
        // raise the soft limit to the hard one; a limit still too low fails at ibv_reg_mr.
        rlimit ml{RLIM_INFINITY, RLIM_INFINITY};
        if (setrlimit(RLIMIT_MEMLOCK, &ml) != 0 && getrlimit(RLIMIT_MEMLOCK, &ml) == 0) {
            ml.rlim_cur = ml.rlim_max;
            setrlimit(RLIMIT_MEMLOCK, &ml);
        }
        if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0)
            die("squatter: drop privileges");
    }
    SquatReport r{};
    set_name(r.cm, "none");
    set_name(r.cm_after, "none");
    set_name(r.wc, "none");
    r.uid = static_cast<long>(getuid());
    Cm cm;
    cm.ch = rdma_create_event_channel();
    rdma_cm_id *lid = nullptr;
    sockaddr_in la = a;
    if (!cm.ch || rdma_create_id(cm.ch, &lid, nullptr, RDMA_PS_TCP) != 0 ||
        rdma_bind_addr(lid, reinterpret_cast<sockaddr *>(&la)) != 0 || rdma_listen(lid, 4) != 0)
        die("squatter: rdma listen");
    if (write(report_fd, "r", 1) != 1)
        die("squatter: ready");

    Qp qp;
    qp.repost = true;
    neg::Hello h;
    long long end = now_ms() + kSquatMaxMs;
    bool stopping = false;
    while (now_ms() < end) {
        // The stop pipe stays readable (or hung up) once it spoke: no longer watched.
        pollfd p[2] = {{cm.ch->fd, POLLIN, 0}, {stopping ? -1 : stop_fd, POLLIN, 0}};
        if (poll(p, 2, 1) < 0 && errno != EINTR)
            die("squatter: poll");
        if (!stopping && p[1].revents != 0) {
            stopping = true;
            end = std::min(end, now_ms() + kSquatGraceMs);
        }
        rdma_cm_event_type t;
        rdma_cm_id *id;
        std::vector<uint8_t> pdata;
        if (p[0].revents != 0 && cm.next(0, &t, &id, &pdata)) {
            if (t == RDMA_CM_EVENT_CONNECT_REQUEST && qp.id == nullptr &&
                neg::decode(pdata.data(), pdata.size(), &h) == rdmasock::Reason::none) {
                qp.create(id);
                neg::Accept acc;
                acc.ring = qp.info();
                acc.nonce = h.nonce;
                uint8_t pd[neg::kAcceptSize];
                neg::encode(acc, pd);
                rdma_conn_param param;
                conn_param(&param, pd, sizeof pd);
                if (rdma_accept(id, &param) != 0)
                    die("squatter: rdma_accept");
                set_name(r.cm, event_name(t));
            } else if (t == RDMA_CM_EVENT_CONNECT_REQUEST) {
                rdma_reject(id, nullptr, 0);  // not the connection under test
            } else if (t == RDMA_CM_EVENT_ESTABLISHED && strcmp(r.cm, "CONNECT_REQUEST") == 0) {
                set_name(r.cm, event_name(t));
                if (proof_at) {
                    uint32_t imm = neg::make_imm(neg::Imm::proof_at, 0);
                    set_name(r.wc, wc_name(qp.write(h.ring.addr, h.ring.rkey, 0, &imm)));
                }
            } else if (strcmp(r.cm_after, "none") == 0) {
                set_name(r.cm_after, event_name(t));
            }
        }
        if (qp.id != nullptr)
            qp.drain_cq();
    }

    uint64_t announced = 0, touched = 0;
    for (uint32_t x : qp.imms) {
        ++r.msgs;
        if (neg::imm_type(x) == neg::Imm::data) {
            ++r.data;
            announced += neg::imm_value(x);
        } else if (neg::imm_type(x) == neg::Imm::switch_at) {
            ++r.switches;
        }
    }
    for (size_t i = 0; qp.ring != nullptr && i < qp.size; ++i)
        touched += qp.ring[i] != 0;
    r.bytes = std::max({announced, qp.imm_bytes, touched});
    if (write(report_fd, &r, sizeof r) != static_cast<ssize_t>(sizeof r))
        die("squatter: report");
    _exit(0);
}

// The victim's TCP connection, on our listener; its port (ours) goes in the result.
int accept_victim(int ls)
{
    int fd = accept(ls, nullptr, nullptr);
    if (fd < 0)
        die("accept");
    sockaddr_in local{};
    socklen_t ll = sizeof local;
    getsockname(fd, reinterpret_cast<sockaddr *>(&local), &ll);
    out.local_port = ntohs(local.sin_port);
    return fd;
}

// A plain TCP echo server (no RDMA in this process) and, on its port, the squatter in a
// child process (another user's when we are root: what the real server's user cannot
// prevent).  The victim must give the squatter nothing and the plain server its exact
// stream.
int run_impostor(const std::string &addr, const std::string &kase)
{
    signal(SIGPIPE, SIG_IGN);  // a squatter gone: our pipe writes fail, we go on
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = ipv4(addr, 0);
    if (bind(ls, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 || listen(ls, 4) != 0)
        die("listen");
    socklen_t al = sizeof a;
    getsockname(ls, reinterpret_cast<sockaddr *>(&a), &al);
    int stop[2], report[2];
    if (pipe2(stop, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0)
        die("pipe");
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        close(ls);
        close(stop[1]);
        close(report[0]);
        squat(a, kase == "impostor", stop[0], report[1]);
    }
    close(stop[0]);
    close(report[1]);
    auto reap = [&](bool kill_it) {
        if (kill_it)
            kill(pid, SIGKILL);
        close(stop[1]);
        waitpid(pid, nullptr, 0);
    };
    char ready;
    if (!read_within(report[0], &ready, 1, kWaitMs)) {
        fprintf(stderr, "hostile: the squatter did not start\n");
        reap(true);
        return 2;
    }
    // The port goes out only now: the victim's request must find the squatter.
    printf("port=%d\n", ntohs(a.sin_port));
    fflush(stdout);

    int fd = accept_victim(ls);
    tcp_drain(fd, true);
    // Any CONFIRM frame, whatever its nonce: this process never saw the HELLO.
    out.first_confirm = out.recv_bytes.size() >= neg::kConfirmSize &&
                        neg::match_confirm(out.recv_bytes.data(), neg::kConfirmSize, nullptr) != neg::ConfirmMatch::no;
    shutdown(fd, SHUT_WR);
    // The victim closes once it read our EOF: the squatter goes on counting a while.
    if (write(stop[1], "s", 1) != 1)
        fprintf(stderr, "hostile: the squatter is gone before its report\n");
    SquatReport r{};
    bool got = read_within(report[0], &r, sizeof r, kSquatGraceMs + kWaitMs);
    reap(!got);
    if (!got) {
        fprintf(stderr, "hostile: no report from the squatter\n");
        out.print();
        return 2;
    }
    out.cm = r.cm;
    out.cm_after = r.cm_after;
    out.wc = r.wc;
    out.ring_msgs = static_cast<int64_t>(r.msgs);
    out.ring_data = static_cast<int64_t>(r.data);
    out.ring_switch = static_cast<int64_t>(r.switches);
    out.ring_bytes = static_cast<int64_t>(r.bytes);
    out.squat_uid = r.uid;
    out.print();
    return 0;
}

int run_server(const std::string &addr, const std::string &kase)
{
    static const char *const known[] = {"accept_bad_magic", "accept_version", "accept_zero_rkey",
        "accept_log2_high", "accept_ring_oversized", "accept_reserved", "accept_wrong_nonce", "decline_none", "decline_unknown",
        "reject_plain", "second_prefix", "prefix_beyond_tcp", "accept_ring_outside_mr", "impostor", "impostor_silent"};
    if (!known_case(known, sizeof known / sizeof known[0], kase, "server"))
        return 4;
    if (kase.rfind("impostor", 0) == 0)
        return run_impostor(addr, kase);
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = ipv4(addr, 0);
    if (bind(ls, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 || listen(ls, 4) != 0)
        die("listen");
    socklen_t al = sizeof a;
    getsockname(ls, reinterpret_cast<sockaddr *>(&a), &al);
    Cm cm;
    cm.ch = rdma_create_event_channel();
    rdma_cm_id *lid = nullptr;
    if (!cm.ch || rdma_create_id(cm.ch, &lid, nullptr, RDMA_PS_TCP) != 0 ||
        rdma_bind_addr(lid, reinterpret_cast<sockaddr *>(&a)) != 0 || rdma_listen(lid, 4) != 0)
        die("rdma listen");
    printf("port=%d\n", ntohs(a.sin_port));
    fflush(stdout);

    int fd = accept_victim(ls);

    rdma_cm_event_type t;
    rdma_cm_id *id = nullptr;
    std::vector<uint8_t> pdata;
    neg::Hello h;
    if (!cm.next(kWaitMs, &t, &id, &pdata) || t != RDMA_CM_EVENT_CONNECT_REQUEST ||
        neg::decode(pdata.data(), pdata.size(), &h) != rdmasock::Reason::none) {
        fprintf(stderr, "hostile: no valid HELLO from the victim\n");
        out.print();
        return 2;
    }
    out.cm = event_name(t);
    if (kase == "decline_none" || kase == "decline_unknown") {
        uint8_t d[neg::kDeclineSize];
        neg::encode_decline(rdmasock::Reason::none, d);
        if (kase == "decline_unknown")
            d[5] = 250;
        rdma_reject(id, d, sizeof d);
    } else if (kase == "reject_plain") {
        rdma_reject(id, nullptr, 0);  // no DECLINE: a consumer's reject, not "no listener"
    } else {
        Qp qp;
        qp.create(id);
        neg::Accept acc;
        acc.ring = qp.info();
        acc.nonce = h.nonce;
        uint8_t pd[neg::kAcceptSize];
        neg::encode(acc, pd);
        if (kase == "accept_bad_magic")
            pd[0] = 'X';
        else if (kase == "accept_version")
            pd[4] = neg::kVersion + 1;
        else if (kase == "accept_zero_rkey")
            memset(pd + 8, 0, 4);
        else if (kase == "accept_log2_high")
            pd[5] = neg::kMaxRingLog2 + 1;
        else if (kase == "accept_ring_oversized")
            pd[5] = neg::kMaxRingLog2;  // valid, but a 64 MiB ring the victim would mirror
        else if (kase == "accept_reserved")
            pd[6] = 0x5a;
        else if (kase == "accept_wrong_nonce")
            pd[20] ^= 1;
        if (kase == "accept_ring_outside_mr") {
            // A well-formed ACCEPT whose ring lies mostly outside our registered memory:
            // the victim's writes beyond the first 4 KiB are refused by our NIC.
            neg::Accept lie = acc;
            lie.ring.addr += qp.size - 4096;
            neg::encode(lie, pd);
        }
        rdma_conn_param param;
        conn_param(&param, pd, sizeof pd);
        if (rdma_accept(id, &param) != 0)
            die("rdma_accept");
        if (kase == "second_prefix" || kase == "prefix_beyond_tcp" || kase == "accept_ring_outside_mr") {
            rdma_cm_id *eid;
            if (!cm.next(kWaitMs, &t, &eid, nullptr) || t != RDMA_CM_EVENT_ESTABLISHED) {
                fprintf(stderr, "hostile: not established\n");
                out.print();
                return 2;
            }
            out.cm = event_name(t);
            // The victim's ring is its own registered memory (accept_ring_outside_mr lies
            // about ours only): the proof goes in.
            if (send_proof(qp, h, fd) != IBV_WC_SUCCESS) {
                fprintf(stderr, "hostile: our PROOF_AT failed\n");
                out.print();
                return 2;
            }
            uint8_t c[neg::kConfirmSize];
            size_t got = 0;
            while (got < sizeof c) {
                ssize_t n = recv(fd, c + got, sizeof c - got, 0);
                if (n <= 0)
                    die("read CONFIRM");
                got += static_cast<size_t>(n);
            }
            out.first_confirm = neg::match_confirm(c, sizeof c, &h.nonce) == neg::ConfirmMatch::yes;
            if (kase == "accept_ring_outside_mr") {
                tcp_drain(fd, false);  // the victim's writes fail: it must reset and close
            } else if (kase == "second_prefix") {
                uint32_t imm = neg::make_imm(neg::Imm::prefix, 0);
                int st = qp.write(h.ring.addr, h.ring.rkey, 0, &imm);
                if (st == IBV_WC_SUCCESS)
                    st = qp.write(h.ring.addr, h.ring.rkey, 0, &imm);
                out.wc = wc_name(st);
                tcp_drain(fd, false);  // TCP left open: the victim must close on its own
            } else {
                // PREFIX(100) but no byte on TCP, an orderly FIN over RDMA and the end of
                // our TCP stream: the announced prefix can never arrive.
                uint32_t imm = neg::make_imm(neg::Imm::prefix, 100);
                int st = qp.write(h.ring.addr, h.ring.rkey, 0, &imm);
                imm = neg::make_imm(neg::Imm::fin, 0);
                if (st == IBV_WC_SUCCESS)
                    st = qp.write(h.ring.addr, h.ring.rkey, 0, &imm);
                out.wc = wc_name(st);
                shutdown(fd, SHUT_WR);
                tcp_drain(fd, false);
            }
            out.print();
            return 0;
        }
    }
    // The victim must stay on TCP: its first bytes are its data, never a CONFIRM.
    tcp_drain(fd, true);
    if (out.recv_bytes.size() >= neg::kConfirmSize)
        out.first_confirm = neg::match_confirm(out.recv_bytes.data(), neg::kConfirmSize, &h.nonce) ==
                            neg::ConfirmMatch::yes;
    else
        out.first_confirm = 0;
    shutdown(fd, SHUT_WR);
    if (kase.rfind("decline_", 0) != 0)
        note_cm_after(cm, kWaitMs);
    out.print();
    return 0;
}

}  // namespace

int main(int argc, char **argv)
{
    std::string mode = argc > 1 ? argv[1] : "", addr, kase;
    int port = 0, steal = 0;
    uint64_t bytes = 4096;
    for (int i = 2; i + 1 < argc; i += 2) {
        std::string k = argv[i], v = argv[i + 1];
        if (k == "--addr")
            addr = v;
        else if (k == "--port")
            port = atoi(v.c_str());
        else if (k == "--case")
            kase = v;
        else if (k == "--bytes")
            bytes = strtoull(v.c_str(), nullptr, 10);
        else if (k == "--steal-port")
            steal = atoi(v.c_str());
        else {
            fprintf(stderr, "hostile: unknown option %s\n", k.c_str());
            return 4;
        }
    }
    out.kase = kase;
    if (mode == "client" && !addr.empty() && port > 0 && !kase.empty())
        return run_client(addr, port, kase, bytes, steal);
    if (mode == "server" && !addr.empty() && !kase.empty())
        return run_server(addr, kase);
    fprintf(stderr, "usage: hostile client --addr A --port P --case CASE [--bytes N] [--steal-port L]\n"
                    "       hostile server --addr A --case CASE\n");
    return 4;
}
