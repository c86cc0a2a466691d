// Round trips: structs built from fuzz bytes are encoded, decoded and compared; the
// decoders accept exactly the encodings of valid structs.  Also valid_ring against the
// rules of docs/protocol.md, and the immediate-data helpers of the ring protocol (the
// immediate of every WRITE_WITH_IMM is peer input).
//
// Input, read field by field (missing bytes read as zero): a mode byte (bit 0: make the
// HELLO valid, bit 1: make the ACCEPT valid, bits 2..7: how many zero bytes of rdma_cm
// padding to append), then the HELLO, ACCEPT, DECLINE, CONFIRM, immediate and ring fields.
#include "fuzz.hh"

#include <netinet/in.h>

using namespace rsfuzz;
using neg::ConfirmMatch;

namespace {

// Forces a ring to be one a peer may name (still fuzz-chosen).
void make_valid(neg::RingInfo &r) noexcept
{
    r.log2 = neg::kMinRingLog2 + r.log2 % (neg::kMaxRingLog2 - neg::kMinRingLog2 + 1);
    r.rkey |= 1;
    r.addr &= 0x0000ffffffffffc0ULL;  // user space, 64-byte aligned
    if (r.addr == 0)
        r.addr = 0x10000;
}

void read_ring(Reader &rd, neg::RingInfo &r) noexcept
{
    r.addr = rd.u64();
    r.rkey = rd.u32();
    r.log2 = rd.u8();  // encode stores one byte: larger values are not representable
}

void hello_round_trip(Reader &rd, bool force_valid, size_t pad)
{
    neg::Hello h;
    h.family = (rd.u8() & 1) != 0 ? AF_INET6 : AF_INET;
    rd.bytes(h.nonce.b, sizeof h.nonce.b);
    rd.bytes(&h.client_addr, sizeof h.client_addr);
    h.client_port = rd.u16();
    h.server_port = rd.u16();
    read_ring(rd, h.ring);
    if (force_valid) {
        make_valid(h.ring);
        h.client_port |= 1;
        h.server_port |= 0x8000;
        h.nonce.b[15] |= 0x80;
    }
    FUZZ_CHECK(neg::valid_ring(h.ring) == ring_ok(h.ring));

    // What the peer must see: an IPv4 address is 4 bytes on the wire.
    neg::Hello want = h;
    if (want.family == AF_INET)
        memset(reinterpret_cast<uint8_t *>(&want.client_addr) + 4, 0, 12);
    const bool valid = ring_ok(h.ring) && h.client_port != 0 && h.server_port != 0 &&
                       !zero(h.nonce.b, neg::kNonceSize);
    if (force_valid)
        FUZZ_CHECK(valid);

    Buf enc(neg::kHelloSize);  // encode writes exactly kHelloSize bytes
    neg::encode(h, enc.data());
    neg::Hello got = sentinel_hello();
    Reason r = neg::decode(enc.data(), enc.size(), &got);
    FUZZ_CHECK(r == (valid ? Reason::none : Reason::bad_message));
    FUZZ_CHECK(same(got, valid ? want : sentinel_hello()));

    // The encoding of the decoded struct is the same bytes.
    if (valid) {
        Buf again(neg::kHelloSize);
        neg::encode(got, again.data());
        FUZZ_CHECK(memcmp(again.data(), enc.data(), neg::kHelloSize) == 0);
    }
    // rdma_cm padding does not change the result; a truncation is always rejected.
    Buf padded(enc.data(), enc.size(), enc.size() + pad);
    neg::Hello gp = sentinel_hello();
    FUZZ_CHECK(neg::decode(padded.data(), padded.size(), &gp) == r);
    FUZZ_CHECK(same(gp, got));
    for (size_t k = 0; k < neg::kHelloSize; ++k) {
        Buf t(enc.data(), k);
        neg::Hello gt = sentinel_hello();
        FUZZ_CHECK(neg::decode(t.data(), t.size(), &gt) == Reason::bad_message);
    }
}

void accept_round_trip(Reader &rd, bool force_valid, size_t pad)
{
    neg::Accept a;
    read_ring(rd, a.ring);
    rd.bytes(a.nonce.b, sizeof a.nonce.b);
    if (force_valid)
        make_valid(a.ring);
    FUZZ_CHECK(neg::valid_ring(a.ring) == ring_ok(a.ring));
    const bool valid = ring_ok(a.ring);
    if (force_valid)
        FUZZ_CHECK(valid);

    Buf enc(neg::kAcceptSize);
    neg::encode(a, enc.data());
    neg::Accept got = sentinel_accept();
    Reason r = neg::decode(enc.data(), enc.size(), &got);
    FUZZ_CHECK(r == (valid ? Reason::none : Reason::bad_message));
    FUZZ_CHECK(same(got, valid ? a : sentinel_accept()));

    Buf padded(enc.data(), enc.size(), enc.size() + pad);
    neg::Accept gp = sentinel_accept();
    FUZZ_CHECK(neg::decode(padded.data(), padded.size(), &gp) == r);
    FUZZ_CHECK(same(gp, got));
    for (size_t k = 0; k < neg::kAcceptSize; ++k) {
        Buf t(enc.data(), k);
        neg::Accept gt = sentinel_accept();
        FUZZ_CHECK(neg::decode(t.data(), t.size(), &gt) == Reason::bad_message);
    }
}

void decline_round_trip(Reader &rd, size_t pad)
{
    uint8_t b = rd.u8();
    Buf enc(neg::kDeclineSize);
    neg::encode_decline(static_cast<Reason>(b), enc.data());
    FUZZ_CHECK(neg::decode_decline(enc.data(), enc.size()) == decline_reason(b));
    Buf padded(enc.data(), enc.size(), enc.size() + pad);
    FUZZ_CHECK(neg::decode_decline(padded.data(), padded.size()) == decline_reason(b));
    for (size_t k = 0; k < neg::kDeclineSize; ++k) {
        Buf t(enc.data(), k);
        FUZZ_CHECK(neg::decode_decline(t.data(), t.size()) == Reason::bad_message);
    }
}

void confirm_round_trip(Reader &rd)
{
    neg::Nonce nonce;
    rd.bytes(nonce.b, sizeof nonce.b);
    unsigned flip = rd.u8() % (neg::kConfirmSize * 8);
    Buf enc(neg::kConfirmSize);
    neg::encode_confirm(nonce, enc.data());
    FUZZ_CHECK(neg::match_confirm(enc.data(), enc.size(), &nonce) == ConfirmMatch::yes);
    FUZZ_CHECK(neg::match_confirm(enc.data(), enc.size(), nullptr) == ConfirmMatch::partial);
    for (size_t k = 0; k < neg::kConfirmSize; ++k) {
        Buf t(enc.data(), k);
        FUZZ_CHECK(neg::match_confirm(t.data(), t.size(), &nonce) == ConfirmMatch::partial);
        FUZZ_CHECK(neg::match_confirm(t.data(), t.size(), nullptr) == ConfirmMatch::partial);
    }
    // One bit off: never accepted.  In the header it is not a CONFIRM at all; in the
    // nonce it is someone else's (or, unbound, still a frame to wait on).
    Buf bad(enc.data(), enc.size());
    bad.data()[flip / 8] ^= static_cast<uint8_t>(1u << (flip % 8));
    FUZZ_CHECK(neg::match_confirm(bad.data(), bad.size(), &nonce) == ConfirmMatch::no);
    FUZZ_CHECK(neg::match_confirm(bad.data(), bad.size(), nullptr) ==
               (flip / 8 < 8 ? ConfirmMatch::no : ConfirmMatch::partial));
    // Another nonce does not accept this CONFIRM.
    neg::Nonce other = nonce;
    other.b[(flip / 8) % neg::kNonceSize] ^= static_cast<uint8_t>(1u << (flip % 8));
    FUZZ_CHECK(neg::match_confirm(enc.data(), enc.size(), &other) == ConfirmMatch::no);
    FUZZ_CHECK(!(other == nonce));
    FUZZ_CHECK(nonce == nonce);
}

void imm_round_trip(Reader &rd)
{
    // Any 32-bit immediate a peer writes splits into a 3-bit type and a 29-bit value
    // that re-encode to it.
    uint32_t imm = rd.u32();
    neg::Imm t = neg::imm_type(imm);
    uint32_t v = neg::imm_value(imm);
    FUZZ_CHECK(static_cast<uint32_t>(t) < 8);
    FUZZ_CHECK(v <= neg::kImmValueMask);
    FUZZ_CHECK(neg::make_imm(t, v) == imm);
    // make_imm keeps the type and truncates the value to 29 bits.
    auto t2 = static_cast<neg::Imm>(rd.u8() % 8);
    uint32_t v2 = rd.u32();
    uint32_t imm2 = neg::make_imm(t2, v2);
    FUZZ_CHECK(neg::imm_type(imm2) == t2);
    FUZZ_CHECK(neg::imm_value(imm2) == (v2 & neg::kImmValueMask));
}

void ring_consistency(Reader &rd)
{
    // valid_ring on arbitrary values (log2 beyond 63 included) agrees with the rules.
    neg::RingInfo r;
    r.addr = rd.u64();
    r.rkey = rd.u32();
    r.log2 = rd.u32();
    uint8_t shape = rd.u8();
    if (shape & 1)
        r.log2 %= 64;
    if (shape & 2)
        r.log2 = neg::kMinRingLog2 + r.log2 % (neg::kMaxRingLog2 - neg::kMinRingLog2 + 1);
    if (shape & 4)  // within 256 MiB of the top of the address space: may wrap
        r.addr = UINT64_MAX - (r.addr % (uint64_t{1} << 28)) + 1;
    if (shape & 8)
        r.addr &= ~uint64_t{63};
    FUZZ_CHECK(neg::valid_ring(r) == ring_ok(r));
}

}  // namespace

FUZZ_TARGET(roundtrip)
{
    Reader rd(data, size);
    uint8_t mode = rd.u8();
    size_t pad = static_cast<size_t>(mode >> 2) * 4;  // 0..252
    hello_round_trip(rd, (mode & 1) != 0, pad);
    accept_round_trip(rd, (mode & 2) != 0, pad);
    decline_round_trip(rd, pad);
    confirm_round_trip(rd);
    imm_round_trip(rd);
    ring_consistency(rd);
}
