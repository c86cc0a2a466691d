#include "wire/negotiate.hh"

#include <arpa/inet.h>
#include <cstring>
#include <sys/socket.h>

namespace rdmasock::neg {

namespace {

constexpr uint8_t kMagicHello[4] = {'R', 'S', 'K', '1'};
constexpr uint8_t kMagicAccept[4] = {'R', 'S', 'K', 'A'};
constexpr uint8_t kMagicDecline[4] = {'R', 'S', 'K', 'D'};
constexpr uint8_t kMagicConfirm[4] = {'R', 'S', 'K', 'C'};
constexpr uint8_t kMagicProof[4] = {'R', 'S', 'K', 'P'};
constexpr uint8_t kMagicFallback[4] = {'R', 'S', 'K', 'F'};

void put16(uint8_t *p, uint16_t v) noexcept
{
    p[0] = static_cast<uint8_t>(v >> 8);
    p[1] = static_cast<uint8_t>(v);
}
void put32(uint8_t *p, uint32_t v) noexcept
{
    for (int i = 0; i < 4; ++i)
        p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}
void put64(uint8_t *p, uint64_t v) noexcept
{
    for (int i = 0; i < 8; ++i)
        p[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}
uint16_t get16(const uint8_t *p) noexcept { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t get32(const uint8_t *p) noexcept
{
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
        v = v << 8 | p[i];
    return v;
}
uint64_t get64(const uint8_t *p) noexcept
{
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
        v = v << 8 | p[i];
    return v;
}

bool all_zero(const uint8_t *p, size_t n) noexcept
{
    for (size_t i = 0; i < n; ++i)
        if (p[i] != 0)
            return false;
    return true;
}

}  // namespace

bool operator==(const Nonce &a, const Nonce &b) noexcept
{
    // Constant time: the nonce is the connection's binding secret.
    uint8_t d = 0;
    for (size_t i = 0; i < kNonceSize; ++i)
        d |= a.b[i] ^ b.b[i];
    return d == 0;
}

bool valid_ring(const RingInfo &r) noexcept
{
    return r.log2 >= kMinRingLog2 && r.log2 <= kMaxRingLog2 && r.rkey != 0 && r.addr != 0 &&
           (r.addr & 63) == 0 && r.addr + (uint64_t{1} << r.log2) > r.addr;
}

void encode(const Hello &h, uint8_t out[kHelloSize]) noexcept
{
    memset(out, 0, kHelloSize);
    memcpy(out, kMagicHello, 4);
    out[4] = kVersion;
    out[5] = h.family == AF_INET6 ? 6 : 4;
    out[6] = static_cast<uint8_t>(h.ring.log2);
    memcpy(out + 8, h.nonce.b, kNonceSize);
    if (h.family == AF_INET6)
        memcpy(out + 24, &h.client_addr, 16);
    else
        memcpy(out + 24, &h.client_addr, 4);
    put16(out + 40, h.client_port);
    put16(out + 42, h.server_port);
    put32(out + 44, h.ring.rkey);
    put64(out + 48, h.ring.addr);
}

Reason decode(const void *data, size_t len, Hello *out) noexcept
{
    uint8_t m[kHelloSize];
    if (data == nullptr || len < kHelloSize)
        return Reason::bad_message;
    memcpy(m, data, kHelloSize);  // private copy: validate, then use
    if (memcmp(m, kMagicHello, 4) != 0)
        return Reason::bad_message;
    if (m[4] != kVersion)
        return Reason::version_mismatch;
    if ((m[5] != 4 && m[5] != 6) || m[7] != 0)
        return Reason::bad_message;
    Hello h;
    h.family = m[5] == 6 ? AF_INET6 : AF_INET;
    h.ring.log2 = m[6];
    memcpy(h.nonce.b, m + 8, kNonceSize);
    if (h.family == AF_INET && !all_zero(m + 28, 12))
        return Reason::bad_message;
    memcpy(&h.client_addr, m + 24, 16);
    h.client_port = get16(m + 40);
    h.server_port = get16(m + 42);
    h.ring.rkey = get32(m + 44);
    h.ring.addr = get64(m + 48);
    if (h.client_port == 0 || h.server_port == 0 || !valid_ring(h.ring) ||
        all_zero(h.nonce.b, kNonceSize))
        return Reason::bad_message;
    *out = h;
    return Reason::none;
}

void encode(const Accept &a, uint8_t out[kAcceptSize]) noexcept
{
    memset(out, 0, kAcceptSize);
    memcpy(out, kMagicAccept, 4);
    out[4] = kVersion;
    out[5] = static_cast<uint8_t>(a.ring.log2);
    put32(out + 8, a.ring.rkey);
    put64(out + 12, a.ring.addr);
    memcpy(out + 20, a.nonce.b, kNonceSize);
}

Reason decode(const void *data, size_t len, Accept *out) noexcept
{
    uint8_t m[kAcceptSize];
    if (data == nullptr || len < kAcceptSize)
        return Reason::bad_message;
    memcpy(m, data, kAcceptSize);
    if (memcmp(m, kMagicAccept, 4) != 0)
        return Reason::bad_message;
    if (m[4] != kVersion)
        return Reason::version_mismatch;
    if (m[6] != 0 || m[7] != 0)
        return Reason::bad_message;
    Accept a;
    a.ring.log2 = m[5];
    a.ring.rkey = get32(m + 8);
    a.ring.addr = get64(m + 12);
    memcpy(a.nonce.b, m + 20, kNonceSize);
    if (!valid_ring(a.ring))
        return Reason::bad_message;
    *out = a;
    return Reason::none;
}

void encode_decline(Reason r, uint8_t out[kDeclineSize]) noexcept
{
    memset(out, 0, kDeclineSize);
    memcpy(out, kMagicDecline, 4);
    out[4] = kVersion;
    out[5] = static_cast<uint8_t>(r);
}

void encode_redirect(uint16_t port, uint8_t out[kDeclineSize]) noexcept
{
    encode_decline(Reason::redirected, out);
    out[6] = static_cast<uint8_t>(port >> 8);
    out[7] = static_cast<uint8_t>(port);
}

uint16_t decode_redirect(const void *data, size_t len) noexcept
{
    uint8_t m[kDeclineSize];
    if (decode_decline(data, len) != Reason::redirected)
        return 0;
    memcpy(m, data, kDeclineSize);
    return static_cast<uint16_t>(m[6] << 8 | m[7]);
}

bool is_decline(const void *data, size_t len) noexcept
{
    return data != nullptr && len >= kDeclineSize && memcmp(data, kMagicDecline, 4) == 0;
}

Reason decode_decline(const void *data, size_t len) noexcept
{
    uint8_t m[kDeclineSize];
    if (data == nullptr || len < kDeclineSize)
        return Reason::bad_message;
    memcpy(m, data, kDeclineSize);
    if (memcmp(m, kMagicDecline, 4) != 0)
        return Reason::bad_message;
    if (m[4] != kVersion)
        return Reason::version_mismatch;
    auto r = static_cast<Reason>(m[5]);
    switch (r) {
    case Reason::disabled:
    case Reason::rule:
    case Reason::version_mismatch:
    case Reason::bad_message:
    case Reason::memlock:
    case Reason::resource:
    case Reason::limit:
    case Reason::not_rdma_addr:
    case Reason::redirected:
    case Reason::urgent_data:
    case Reason::closed_early:
    case Reason::io_uring:
        return r;
    case Reason::no_device:
        return Reason::peer_no_device;
    default:
        return Reason::rejected;
    }
}

void encode_confirm(const Nonce &n, uint8_t out[kConfirmSize]) noexcept
{
    memset(out, 0, kConfirmSize);
    memcpy(out, kMagicConfirm, 4);
    out[4] = kVersion;
    memcpy(out + 8, n.b, kNonceSize);
}

ConfirmMatch match_confirm(const uint8_t *data, size_t got, const Nonce *expected) noexcept
{
    uint8_t want[kConfirmSize];
    Nonce zero{};
    encode_confirm(expected ? *expected : zero, want);
    size_t fixed = got < 8 ? got : 8;  // magic, version, reserved
    if (memcmp(data, want, fixed) != 0)
        return ConfirmMatch::no;
    if (got < kConfirmSize)
        return ConfirmMatch::partial;
    if (expected == nullptr)
        return ConfirmMatch::partial;  // a frame, but no RDMA connection to bind it to yet
    Nonce n;
    memcpy(n.b, data + 8, kNonceSize);
    return n == *expected ? ConfirmMatch::yes : ConfirmMatch::no;
}

void encode_proof(const Nonce &n, uint8_t out[kProofSize]) noexcept
{
    memset(out, 0, kProofSize);
    memcpy(out, kMagicProof, 4);
    out[4] = kVersion;
    memcpy(out + 8, n.b, kNonceSize);
}

ConfirmMatch match_proof(const uint8_t *data, size_t got, const Nonce &expected) noexcept
{
    uint8_t want[kProofSize];
    encode_proof(expected, want);
    const size_t n = got < kProofSize ? got : kProofSize;
    uint8_t d = 0;  // constant time: the nonce is the connection's binding secret
    for (size_t i = 0; i < n; ++i)
        d |= static_cast<uint8_t>(data[i] ^ want[i]);
    if (d != 0)
        return ConfirmMatch::no;
    return n < kProofSize ? ConfirmMatch::partial : ConfirmMatch::yes;
}

void encode_fallback(const Fallback &f, const Nonce &n, uint8_t out[kFallbackSize]) noexcept
{
    memset(out, 0, kFallbackSize);
    memcpy(out, kMagicFallback, 4);
    out[4] = kVersion;
    out[5] = f.flags;
    put64(out + 8, f.count);
    put64(out + 16, f.start);
    memcpy(out + 24, n.b, 8);
}

ConfirmMatch match_fallback(const uint8_t *data, size_t got, const Nonce &expected, Fallback *out) noexcept
{
    constexpr uint8_t kKnown = kFbWrShut;
    // Checked as far as the bytes go: magic, version, flags, reserved, then the tag.
    if (memcmp(data, kMagicFallback, got < 4 ? got : 4) != 0 || (got > 4 && data[4] != kVersion) ||
        (got > 5 && (data[5] & ~kKnown) != 0) || (got > 6 && data[6] != 0) || (got > 7 && data[7] != 0))
        return ConfirmMatch::no;
    if (got > 24 && memcmp(data + 24, expected.b, (got < kFallbackSize ? got : kFallbackSize) - 24) != 0)
        return ConfirmMatch::no;
    if (got < kFallbackSize)
        return ConfirmMatch::partial;
    Fallback f;
    f.flags = data[5];
    f.count = get64(data + 8);
    f.start = get64(data + 16);
    *out = f;
    return ConfirmMatch::yes;
}

Reason check_fallback(const Fallback &peer, uint64_t acked, uint64_t posted, uint64_t held, uint64_t ring) noexcept
{
    if (peer.count < acked || peer.count > posted)
        return Reason::bad_message;
    if (peer.start > held || held - peer.start > ring)
        return Reason::bad_message;
    return Reason::none;
}

}  // namespace rdmasock::neg
