#include "seeds.hh"

#include <cstdio>
#include <cstring>
#include <netinet/in.h>

#include "fuzz.hh"

namespace rsfuzz {

namespace {

Bytes cat(std::initializer_list<Bytes> parts)
{
    Bytes out;
    for (const Bytes &p : parts)
        out.insert(out.end(), p.begin(), p.end());
    return out;
}
Bytes str(const char *s) { return Bytes(s, s + strlen(s)); }
Bytes zeros(size_t n) { return Bytes(n, 0); }
Bytes head(Bytes b, size_t n)
{
    b.resize(n);
    return b;
}
Bytes with(Bytes b, size_t off, uint8_t v)
{
    b.at(off) = v;
    return b;
}

const Bytes kNonce = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
                      0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10};

// (Protocol version 4.)
// HELLO, IPv4: 10.0.0.1:40000 -> :5201, ring 64 KiB, rkey 0x1234 at 0x7f0000100000.
const Bytes kHelloV4 = cat({
    str("RSK1"), {4, 4, 16, 0}, kNonce,
    {10, 0, 0, 1}, zeros(12),
    {0x9c, 0x40}, {0x14, 0x51},
    {0x00, 0x00, 0x12, 0x34},
    {0x00, 0x00, 0x7f, 0x00, 0x00, 0x10, 0x00, 0x00},
});
// HELLO, IPv6: [fd00::2]:50000 -> :6379, ring 1 MiB, rkey 0xabcdef01 at 0x7f1234560000.
const Bytes kHelloV6 = cat({
    str("RSK1"), {4, 6, 20, 0}, kNonce,
    {0xfd, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02},
    {0xc3, 0x50}, {0x18, 0xeb},
    {0xab, 0xcd, 0xef, 0x01},
    {0x00, 0x00, 0x7f, 0x12, 0x34, 0x56, 0x00, 0x00},
});
// ACCEPT: ring 64 KiB, rkey 0x4321 at 0x7f00aa000040, nonce echoed.
const Bytes kAccept = cat({
    str("RSKA"), {4, 16, 0, 0},
    {0x00, 0x00, 0x43, 0x21},
    {0x00, 0x00, 0x7f, 0x00, 0xaa, 0x00, 0x00, 0x40},
    kNonce,
});
Bytes decline(rdmasock::Reason r) { return cat({str("RSKD"), {4, static_cast<uint8_t>(r), 0, 0}}); }
const Bytes kConfirm = cat({str("RSKC"), {4, 0, 0, 0}, kNonce});
const Bytes kProof = cat({str("RSKP"), {4, 0, 0, 0}, kNonce});

// proof target input: the expected nonce, then the stream from the PROOF's offset.
Bytes proof_input(const Bytes &stream) { return cat({kNonce, stream}); }

// fallback target input: the nonce, this side's counters (acked 6000, posted 10000,
// held 20000, ring 4096: little-endian), then the stream.
Bytes le64(uint64_t v)
{
    Bytes b(8);
    for (int i = 0; i < 8; ++i)
        b[i] = static_cast<uint8_t>(v >> (8 * i));
    return b;
}
Bytes be64(uint64_t v)
{
    Bytes b(8);
    for (int i = 0; i < 8; ++i)
        b[7 - i] = static_cast<uint8_t>(v >> (8 * i));
    return b;
}
Bytes fallback_input(const Bytes &stream)
{
    return cat({kNonce, le64(6000), le64(10000), le64(20000), le64(4096), stream});
}
// FALLBACK: WR_SHUT, count 8000, start 19000, the nonce's first 8 bytes.
Bytes fallback_frame(uint8_t flags, uint64_t count, uint64_t start)
{
    return cat({str("RSKF"), {4, flags, 0, 0}, be64(count), be64(start), head(kNonce, 8)});
}

// confirm target input: flags, expected nonce, stream.
Bytes confirm_input(bool bound, const Bytes &stream)
{
    return cat({{static_cast<uint8_t>(bound ? 1 : 0)}, kNonce, stream});
}

// ring target input (fuzz_ring.cc): the head byte, then steps of an op and a u32 (in
// the order the target reads it: this machine's).
struct Step {
    uint8_t op;
    uint32_t x;
};
Bytes ring_input(uint8_t head, std::initializer_list<Step> steps)
{
    Bytes b{head};
    for (const Step &s : steps) {
        b.push_back(s.op);
        const auto *p = reinterpret_cast<const uint8_t *>(&s.x);
        b.insert(b.end(), p, p + sizeof s.x);
    }
    return b;
}
uint32_t imm(neg::Imm t, uint32_t v) { return neg::make_imm(t, v); }
// A control message step: type t, value v.
Step ctl(neg::Imm t, uint32_t v) { return {2, static_cast<uint32_t>(t) | v << 3}; }
constexpr uint8_t kRing4k = 6, kSwitched = 0x20, kServer = 0x10;

Bytes pattern(uint8_t mode, size_t n, unsigned mul, unsigned add)
{
    Bytes b(n);
    for (size_t i = 0; i < n; ++i)
        b[i] = static_cast<uint8_t>(i * mul + add);
    b[0] = mode;
    return b;
}

}  // namespace

std::vector<Seed> seeds()
{
    using rdmasock::Reason;
    return {
        {"hello", "valid-v4", kHelloV4},
        {"hello", "valid-v6", kHelloV6},
        {"hello", "valid-v4-trailing", cat({kHelloV4, zeros(8)})},
        {"hello", "truncated-55", head(kHelloV4, 55)},
        {"hello", "truncated-8", head(kHelloV4, 8)},
        {"hello", "empty", {}},
        {"hello", "version-2", with(kHelloV4, 4, 2)},
        {"hello", "v4-address-tail", with(kHelloV4, 30, 1)},
        {"hello", "ring-log2-27", with(kHelloV6, 6, 27)},
        {"hello", "zero-port", with(with(kHelloV4, 42, 0), 43, 0)},
        {"accept", "valid", kAccept},
        {"accept", "valid-padded-196", cat({kAccept, zeros(196 - kAccept.size())})},
        {"accept", "truncated-35", head(kAccept, 35)},
        {"accept", "empty", {}},
        {"accept", "version-2", with(kAccept, 4, 2)},
        {"accept", "reserved", with(kAccept, 7, 1)},
        {"accept", "zero-rkey", with(kAccept, 10, 0)},
        {"accept", "misaligned", with(kAccept, 19, 0x44)},
        {"decline", "limit", decline(Reason::limit)},
        {"decline", "resource", decline(Reason::resource)},
        {"decline", "no_device", decline(Reason::no_device)},
        {"decline", "bad_message", decline(Reason::bad_message)},
        {"decline", "io_uring", decline(Reason::io_uring)},
        {"decline", "none", decline(Reason::none)},
        {"decline", "redirect-40000", with(with(decline(Reason::redirected), 6, 0x9c), 7, 0x40)},
        {"decline", "redirect-port-0", decline(Reason::redirected)},
        {"decline", "unknown-200", decline(static_cast<Reason>(200))},
        {"decline", "limit-padded-148", cat({decline(Reason::limit), zeros(148 - 8)})},
        {"decline", "truncated-7", head(decline(Reason::limit), 7)},
        {"decline", "version-2", with(decline(Reason::limit), 4, 2)},
        {"decline", "accept-magic", with(decline(Reason::limit), 3, 'A')},
        {"decline", "empty", {}},
        {"confirm", "bound-valid", confirm_input(true, kConfirm)},
        {"confirm", "unbound-valid", confirm_input(false, kConfirm)},
        {"confirm", "bound-valid-then-data", confirm_input(true, cat({kConfirm, str("hello, server")}))},
        {"confirm", "bound-prefix-10", confirm_input(true, head(kConfirm, 10))},
        {"confirm", "bound-other-nonce", confirm_input(true, with(kConfirm, 23, 0x11))},
        {"confirm", "bound-empty-stream", confirm_input(true, {})},
        {"confirm", "bound-http", confirm_input(true, str("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))},
        {"confirm", "unbound-redis", confirm_input(false, str("*1\r\n$4\r\nPING\r\n"))},
        {"proof", "valid", proof_input(kProof)},
        {"proof", "valid-then-data", proof_input(cat({kProof, str("+OK ready\r\n")}))},
        {"proof", "prefix-7", proof_input(head(kProof, 7))},
        {"proof", "other-nonce", proof_input(with(kProof, 23, 0x11))},
        {"proof", "confirm-frame", proof_input(kConfirm)},
        {"proof", "version-2", proof_input(with(kProof, 4, 2))},
        {"proof", "plain-banner", proof_input(str("SSH-2.0-OpenSSH_9.2\r\n"))},
        {"proof", "empty-stream", proof_input({})},
        {"fallback", "valid", fallback_input(fallback_frame(1, 8000, 19000))},
        {"fallback", "valid-then-data", fallback_input(cat({fallback_frame(0, 6000, 20000), str("resent bytes")}))},
        {"fallback", "prefix-13", fallback_input(head(fallback_frame(1, 8000, 19000), 13))},
        {"fallback", "other-nonce", fallback_input(with(fallback_frame(1, 8000, 19000), 31, 0x11))},
        {"fallback", "unknown-flag", fallback_input(fallback_frame(0x40, 8000, 19000))},
        {"fallback", "start-beyond-held", fallback_input(fallback_frame(0, 8000, 20001))},
        {"fallback", "proof-frame", fallback_input(cat({kProof, zeros(8)}))},
        {"ring", "stream-wrap", ring_input(kRing4k | kSwitched,
                                           {{0, imm(neg::Imm::data, 3000)}, {1, 2000}, {0, imm(neg::Imm::data, 2000)},
                                            {1, 500u | 700u << 10 | 1500u << 20}, {5, 8192}, {1, 8192},
                                            {0, imm(neg::Imm::fin, neg::kFinClosed)}, {1, 100}})},
        {"ring", "over-grant", ring_input(kRing4k | kSwitched, {{0, imm(neg::Imm::data, 4000)},
                                                               {0, imm(neg::Imm::data, 97)}, {1, 4096}})},
        {"ring", "data-after-fin", ring_input(kRing4k | kSwitched, {{0, imm(neg::Imm::data, 10)},
                                                                   {0, imm(neg::Imm::fin, 0)},
                                                                   {0, imm(neg::Imm::data, 10)}, {1, 64}})},
        {"ring", "credit-unsent-reset", ring_input(kRing4k | kSwitched, {{0, imm(neg::Imm::credit, 1)},
                                                                        {0, imm(neg::Imm::credit, 0)},
                                                                        {0, imm(neg::Imm::reset, 0)}, {0, 7u << 29}})},
        {"ring", "client-proof-at", ring_input(kRing4k, {{3, 100}, ctl(neg::Imm::proof_at, 300), {3, 1000},
                                                        ctl(neg::Imm::proof_at, 300), ctl(neg::Imm::data, 5)})},
        {"ring", "client-prefix", ring_input(kRing4k | kSwitched, {{3, 50}, ctl(neg::Imm::prefix, 40),
                                                                  ctl(neg::Imm::prefix, 80), {3, 100}, {3, 10},
                                                                  ctl(neg::Imm::prefix, 90)})},
        {"ring", "client-prefix-end", ring_input(kRing4k | kSwitched, {{3, 50}, ctl(neg::Imm::prefix_end, 60),
                                                                      ctl(neg::Imm::data, 5), {3, 20}, {1, 64}})},
        {"ring", "server-switch", ring_input(kRing4k | kServer | kSwitched,
                                             {{3, 100}, ctl(neg::Imm::switch_at, 500), {3, 600},
                                              ctl(neg::Imm::switch_at, 900), {3, 1}})},
        {"roundtrip", "valid-pattern", pattern(0x03, 128, 37, 11)},
        {"roundtrip", "valid-padded", pattern(0xff, 128, 101, 7)},
        {"roundtrip", "zeros", zeros(128)},
        {"roundtrip", "short", pattern(0x01, 20, 13, 1)},
    };
}

bool check_known_answers()
{
    using rdmasock::Reason;
    bool ok = true;
    auto expect = [&ok](bool c, const char *what) {
        if (!c) {
            fprintf(stderr, "known answer: %s\n", what);
            ok = false;
        }
    };
    neg::Nonce nonce;
    memcpy(nonce.b, kNonce.data(), neg::kNonceSize);

    neg::Hello h4;
    h4.family = AF_INET;
    h4.nonce = nonce;
    const uint8_t a4[4] = {10, 0, 0, 1};
    memcpy(&h4.client_addr, a4, 4);
    h4.client_port = 40000;
    h4.server_port = 5201;
    h4.ring = {0x7f0000100000ULL, 0x1234, 16};
    uint8_t m[neg::kHelloSize];
    neg::encode(h4, m);
    expect(Bytes(m, m + sizeof m) == kHelloV4, "encode(HELLO v4) differs from protocol.md");
    neg::Hello d = sentinel_hello();
    expect(neg::decode(kHelloV4.data(), kHelloV4.size(), &d) == Reason::none && same(d, h4),
           "decode(HELLO v4)");

    neg::Hello h6;
    h6.family = AF_INET6;
    h6.nonce = nonce;
    h6.client_addr.s6_addr[0] = 0xfd;
    h6.client_addr.s6_addr[15] = 2;
    h6.client_port = 50000;
    h6.server_port = 6379;
    h6.ring = {0x7f1234560000ULL, 0xabcdef01, 20};
    neg::encode(h6, m);
    expect(Bytes(m, m + sizeof m) == kHelloV6, "encode(HELLO v6) differs from protocol.md");
    d = sentinel_hello();
    expect(neg::decode(kHelloV6.data(), kHelloV6.size(), &d) == Reason::none && same(d, h6),
           "decode(HELLO v6)");

    neg::Accept a;
    a.ring = {0x7f00aa000040ULL, 0x4321, 16};
    a.nonce = nonce;
    uint8_t am[neg::kAcceptSize];
    neg::encode(a, am);
    expect(Bytes(am, am + sizeof am) == kAccept, "encode(ACCEPT) differs from protocol.md");
    neg::Accept da = sentinel_accept();
    expect(neg::decode(kAccept.data(), kAccept.size(), &da) == Reason::none && same(da, a),
           "decode(ACCEPT)");

    uint8_t dm[neg::kDeclineSize];
    neg::encode_decline(Reason::limit, dm);
    expect(Bytes(dm, dm + sizeof dm) == decline(Reason::limit), "encode_decline differs from protocol.md");
    expect(neg::decode_decline(dm, sizeof dm) == Reason::limit, "decode_decline(limit)");

    uint8_t cm[neg::kConfirmSize];
    neg::encode_confirm(nonce, cm);
    expect(Bytes(cm, cm + sizeof cm) == kConfirm, "encode_confirm differs from protocol.md");
    expect(neg::match_confirm(kConfirm.data(), kConfirm.size(), &nonce) == neg::ConfirmMatch::yes,
           "match_confirm(CONFIRM)");
    uint8_t pm[neg::kProofSize];
    neg::encode_proof(nonce, pm);
    expect(Bytes(pm, pm + sizeof pm) == kProof, "encode_proof differs from protocol.md");
    expect(neg::match_proof(kProof.data(), kProof.size(), nonce) == neg::ConfirmMatch::yes, "match_proof(PROOF)");
    expect(neg::match_proof(kConfirm.data(), kConfirm.size(), nonce) == neg::ConfirmMatch::no,
           "match_proof(CONFIRM) is no");
    neg::Fallback fb;
    fb.flags = neg::kFbWrShut;
    fb.count = 8000;
    fb.start = 19000;
    uint8_t fm[neg::kFallbackSize];
    neg::encode_fallback(fb, nonce, fm);
    expect(Bytes(fm, fm + sizeof fm) == fallback_frame(1, 8000, 19000), "encode_fallback differs from the layout");

    // The DECLINE reason byte is the Reason enum's value (protocol.md), so the order of
    // src/base/reason.def is part of the wire protocol: a server's decline must mean the
    // same to clients of other builds.  Renumbering needs a new protocol version.
    const struct {
        uint8_t wire;
        const char *code;
    } wire_reasons[] = {
        {3, "disabled"},   {4, "rule"},       {5, "no_device"},         {6, "not_rdma_addr"},
        {10, "rejected"},  {12, "version_mismatch"}, {13, "bad_message"}, {14, "memlock"},
        {15, "resource"},  {16, "limit"},  {20, "closed_early"}, {22, "urgent_data"},
        {27, "io_uring"},
    };
    for (const auto &w : wire_reasons) {
        const char *code = rdmasock::reason_code(static_cast<Reason>(w.wire));
        if (strcmp(code, w.code) != 0) {
            fprintf(stderr,
                    "known answer: DECLINE reason byte %u is %s in this build, %s on the wire"
                    " (src/base/reason.def was reordered: a wire protocol change)\n",
                    w.wire, code, w.code);
            ok = false;
        }
    }

    // Every reason byte a DECLINE can carry.
    for (unsigned b = 0; b < 256; ++b) {
        uint8_t dd[neg::kDeclineSize];
        neg::encode_decline(static_cast<Reason>(b), dd);
        const Reason got = neg::decode_decline(dd, sizeof dd);
        if (got != decline_reason(static_cast<uint8_t>(b))) {
            fprintf(stderr, "known answer: decode_decline of reason byte %u\n", b);
            ok = false;
        }
        // The fuzz targets' list of results (decline_result) knows every one.
        if (!decline_result(got)) {
            fprintf(stderr, "known answer: reason byte %u decodes to %s, not in decline_result\n", b,
                    rdmasock::reason_code(got));
            ok = false;
        }
    }

    // Ring limits: sizes, alignment, the top of the address space.
    const uint64_t top = 0;  // 2^64 mod 2^64
    const struct {
        neg::RingInfo r;
        bool valid;
    } rings[] = {
        {{0x10000, 1, 12}, true},
        {{0x10000, 1, 26}, true},
        {{0x10000, 1, 11}, false},
        {{0x10000, 1, 27}, false},
        {{0x10000, 1, 63}, false},
        {{0x10000, 1, 64}, false},
        {{0x10000, 1, 0xffffffffu}, false},
        {{0x10000, 0, 12}, false},
        {{0, 1, 12}, false},
        {{0x10020, 1, 12}, false},
        {{0x10040, 1, 12}, true},
        {{top - 8192, 1, 12}, true},   // ends 4 KiB below the top
        {{top - 4096, 1, 12}, false},  // ends exactly at 2^64: wraps to 0
        {{top - 64, 1, 12}, false},
        {{top - (uint64_t{1} << 26), 1, 26}, false},
        {{top - (uint64_t{1} << 27), 1, 26}, true},
    };
    for (const auto &c : rings) {
        if (neg::valid_ring(c.r) != c.valid || ring_ok(c.r) != c.valid) {
            fprintf(stderr, "known answer: ring addr=%#llx rkey=%u log2=%u should be %s\n",
                    static_cast<unsigned long long>(c.r.addr), c.r.rkey, c.r.log2,
                    c.valid ? "valid" : "invalid");
            ok = false;
        }
    }

    expect(neg::make_imm(neg::Imm::prefix, 5) == 0x80000005u, "make_imm(PREFIX, 5)");
    expect(neg::make_imm(neg::Imm::credit, 1u << 29) == 0x20000000u, "make_imm value is 29 bits");
    return ok;
}

}  // namespace rsfuzz
