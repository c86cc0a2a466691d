// The receive path's message handling (issue 17, point 7): RingPath::take_imm (what a
// receive completion's immediate carries: DATA, CREDIT, FIN, RESET, PREFIX, SWITCH,
// PROOF_AT, or a type that does not exist) and RingPath::take (the program's reads from
// the receive ring, across its wrap), with the switchover's acceptance of the peer's
// control values (Switchover::accept_proof_at, accept_prefix, accept_switch) and the TCP
// reads they bound.  The RDMA peer may be hostile or broken: any immediate, in any order,
// interleaved with any reads of the program's.  The ring is real memory (kits::map_ring);
// the link is dead (mark_dead: the credits the reads would post fail with EPIPE), so no
// device is needed.
//
// A model written from docs/protocol.md ("Data path", "Switch") is the oracle: a DATA
// message is taken only when it fits the space the ring has free and no FIN came before
// it, and only then does the ring hold more; a CREDIT only for bytes sent (none here);
// the program reads exactly the stream's bytes, in order, never more than there are;
// PROOF_AT, PREFIX and SWITCH are taken once, never behind what the program has read from
// TCP, and the TCP bytes the program may read stop at the PROOF, the PREFIX's end and the
// SWITCH's offset.
//
// Input: byte 0: bits 0-3 the ring size (64 B << (b % 11): 64 B .. 64 KiB), bit 4 the
// side (server), bit 5 its phase (client: switched to RDMA, else negotiating; server:
// verifying, else maybe).  Then steps of 5 bytes, an op and a u32 x (host order):
//   op % 4 == 0  an immediate from the peer: x as it is (for a DATA message taken, the
//                peer's bytes are in the ring where its cursor says)
//   op % 4 == 1  the program reads: x % (2 * size + 1) bytes into up to 3 iovecs (cut
//                at x >> 20), MSG_PEEK when op & 4
//   op % 4 == 2  a control message from the peer: type x & 7, value x >> 3
//   op % 4 == 3  the program reads x % 65536 TCP bytes, as far as the switchover allows
#include "fuzz.hh"

#include <sys/uio.h>

#include "conn/link.hh"
#include "conn/ring.hh"
#include "conn/switchover.hh"
#include "rdma/kit.hh"

using namespace rsfuzz;
using rdmasock::Link;
using rdmasock::RingPath;
using rdmasock::Switchover;
using Kind = RingPath::Found::Kind;
using Phase = Switchover::Phase;

namespace {

// The stream's byte at offset i (what an honest peer wrote there).
uint8_t stream_byte(uint64_t i)
{
    return static_cast<uint8_t>((i * 131) ^ (i >> 8));
}

struct Model {
    uint8_t *mem = nullptr;  // the ring's memory (the peer's RDMA writes land there)
    uint64_t size = 0;
    uint64_t prod = 0, cons = 0;  // the ring's stream bytes: placed by the peer, read
    bool fin = false, closed = false, reset = false;
    // The switchover's side: the program's TCP bytes, and the peer's values taken.
    uint64_t tcp_taken = 0, tcp_read = 0;
    bool proof_at_seen = false, prefix_seen = false, switch_seen = false;
    uint64_t proof_at = 0, prefix_left = 0, switch_at = 0;
};

// The peer's immediate, against the model.  Returns what the ring said.
RingPath::Found peer_imm(RingPath &ring, Model &m, uint32_t imm)
{
    const uint32_t v = neg::imm_value(imm);
    const uint64_t before = ring.avail();
    const RingPath::Found f = ring.take_imm(imm);
    switch (neg::imm_type(imm)) {
    case neg::Imm::data: {
        const bool fits = v != 0 && v <= m.size - (m.prod - m.cons) && !m.fin;
        FUZZ_CHECK(fits ? f.kind == Kind::data && f.value == v : f.kind == Kind::fault && f.fault != nullptr);
        if (fits) {
            for (uint64_t i = m.prod; i < m.prod + v; ++i)  // (the bytes came before their immediate)
                m.mem[i & (m.size - 1)] = stream_byte(i);
            m.prod += v;
        }
        FUZZ_CHECK(ring.avail() == m.prod - m.cons);
        FUZZ_CHECK(ring.avail() <= m.size);
        break;
    }
    case neg::Imm::credit:
        FUZZ_CHECK(v == 0 ? f.kind == Kind::credit : f.kind == Kind::fault);  // (nothing was sent)
        FUZZ_CHECK(ring.avail() == before);
        break;
    case neg::Imm::fin:
        FUZZ_CHECK(f.kind == Kind::fin && ring.st.peer_fin.load());
        m.fin = true;
        m.closed = m.closed || v == neg::kFinClosed;
        FUZZ_CHECK(ring.st.peer_closed == m.closed);
        break;
    case neg::Imm::reset:
        FUZZ_CHECK(f.kind == Kind::reset && ring.st.reset);
        m.reset = true;
        break;
    case neg::Imm::prefix:
        FUZZ_CHECK(f.kind == Kind::prefix && f.value == v);
        break;
    case neg::Imm::prefix_end:  // (a PREFIX and a FIN 0: the end is the connection's to take)
        FUZZ_CHECK(f.kind == Kind::prefix_end && f.value == v);
        break;
    case neg::Imm::switch_at:
        FUZZ_CHECK(f.kind == Kind::switch_at && f.value == v);
        break;
    case neg::Imm::proof_at:
        FUZZ_CHECK(f.kind == Kind::proof_at && f.value == v);
        break;
    default:
        FUZZ_CHECK(f.kind == Kind::fault && f.fault != nullptr);
        break;
    }
    FUZZ_CHECK(ring.st.reset == m.reset);
    if (f.kind != Kind::data)
        FUZZ_CHECK(ring.avail() == before);
    return f;
}

// What a connection does with a PROOF_AT, PREFIX or SWITCH (Conn::take_imm_locked), the
// switchover checked against the model.
void dispatch(Switchover &sw, RingPath &ring, Model &m, bool server, const RingPath::Found &f)
{
    if (!server && sw.phase() == Phase::maybe && f.kind == Kind::proof_at) {
        const bool ok = !m.proof_at_seen && f.value >= m.tcp_taken;
        FUZZ_CHECK(sw.accept_proof_at(f.value) == ok);
        if (ok) {
            m.proof_at_seen = true;
            m.proof_at = f.value;
        }
    } else if (!server && sw.phase() == Phase::rdma && (f.kind == Kind::prefix || f.kind == Kind::prefix_end)) {
        const bool ok = !m.prefix_seen && f.value >= m.tcp_read;
        FUZZ_CHECK(sw.accept_prefix(f.value) == ok);
        if (ok) {
            m.prefix_seen = true;
            m.prefix_left = f.value - m.tcp_read;
            if (f.kind == Kind::prefix_end) {  // (Conn::take_imm_locked: the end of the stream with it)
                ring.st.peer_fin.store(true);
                m.fin = true;
            }
        }
    } else if (server && f.kind == Kind::switch_at) {
        const bool ok = sw.phase() == Phase::verifying && !m.switch_seen && f.value >= m.tcp_read;
        FUZZ_CHECK(sw.accept_switch(f.value) == ok);
        if (ok) {
            m.switch_seen = true;
            m.switch_at = f.value;
        }
    }
    FUZZ_CHECK(sw.proof_known() == m.proof_at_seen);
    FUZZ_CHECK(sw.prefix_known() == m.prefix_seen && sw.prefix_left() == m.prefix_left);
    FUZZ_CHECK(sw.switch_known() == m.switch_seen);
}

// The program reads up to `want` TCP bytes: as many as the connection's read path lets
// through (recv_presw_locked, recv_prefix_locked).
void tcp_read(Switchover &sw, Model &m, bool server, uint64_t want)
{
    uint64_t n = want;
    if (server || sw.phase() == Phase::maybe)
        n = std::min(n, sw.tcp_limit());
    else
        n = sw.proof_cap(sw.prefix_cap(n));
    if (!server)
        n = sw.proof_cap(n);
    // Never past the PROOF, the PREFIX's end or the SWITCH's offset.
    if (m.proof_at_seen)
        FUZZ_CHECK(m.tcp_taken + n <= m.proof_at);
    if (m.switch_seen)
        FUZZ_CHECK(m.tcp_read + n <= m.switch_at);
    if (server && sw.phase() == Phase::verifying && !m.switch_seen)
        FUZZ_CHECK(n == 0);  // (nothing before the SWITCH names how far)
    if (m.prefix_seen)
        FUZZ_CHECK(n <= m.prefix_left);
    sw.took_from_tcp(n);
    m.tcp_taken += n;
    if (m.prefix_seen)
        m.prefix_left -= n;
    else
        m.tcp_read += n;
    FUZZ_CHECK(sw.tcp_taken() == m.tcp_taken && sw.tcp_read() == m.tcp_read && sw.prefix_left() == m.prefix_left);
}

}  // namespace

FUZZ_TARGET(ring)
{
    if (size == 0)
        return;
    Reader in(data, size);
    const uint8_t head = in.get<uint8_t>();
    const bool server = head & 0x10;
    Model m;
    m.size = uint64_t{64} << ((head & 0x0f) % 11);

    Link link;
    link.mark_dead();
    RingPath ring(link);
    rdmasock::kits::RingMem rx;
    rx.mem = rdmasock::kits::map_ring(m.size);
    FUZZ_CHECK(rx.mem != nullptr);
    rx.size = m.size;
    m.mem = rx.mem;
    ring.attach(std::move(rx), rdmasock::kits::RingMem{});
    Switchover sw;
    if (head & 0x20)
        FUZZ_CHECK(sw.on(server ? Switchover::Event::server_verify : Switchover::Event::client_switch));

    std::vector<uint8_t> buf(2 * m.size + 1);
    for (size_t steps = (size - 1) / 5; steps > 0; --steps) {
        const uint8_t op = in.u8();
        const uint32_t x = in.u32();
        switch (op % 4) {
        case 0:
            dispatch(sw, ring, m, server, peer_imm(ring, m, x));
            break;
        case 1: {
            const size_t room = x % (2 * m.size + 1);
            const bool peek = op & 4;
            // Up to 3 iovecs over buf[0, room): cut at two points taken from x.
            const size_t c1 = room ? (x >> 20) % (room + 1) : 0, c2 = room ? (x >> 10) % (room + 1) : 0;
            const size_t a = std::min(c1, c2), b = std::max(c1, c2);
            iovec iov[3] = {{buf.data(), a}, {buf.data() + a, b - a}, {buf.data() + b, room - b}};
            msghdr msg{};
            msg.msg_iov = iov;
            msg.msg_iovlen = 3;
            const uint64_t have = m.prod - m.cons;
            const size_t n = ring.take(&msg, 0, room, peek);
            FUZZ_CHECK(n == std::min<uint64_t>(room, have));
            for (size_t i = 0; i < n; ++i)
                FUZZ_CHECK(buf[i] == stream_byte(m.cons + i));
            if (!peek)
                m.cons += n;
            FUZZ_CHECK(ring.avail() == m.prod - m.cons);
            break;
        }
        case 2:
            dispatch(sw, ring, m, server, peer_imm(ring, m, neg::make_imm(static_cast<neg::Imm>(x & 7), x >> 3)));
            break;
        default:
            tcp_read(sw, m, server, x % 65536);
            break;
        }
    }
}
