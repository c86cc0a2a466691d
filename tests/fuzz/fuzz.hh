// Fuzz targets for the decoders of peer input (src/wire/negotiate.*) and the offload rules
// parser (src/config/rules.*).
//
// Each fuzz_<name>.cc defines one target with FUZZ_TARGET(name).  Built two ways:
//  * with -DRS_FUZZ_LIBFUZZER (clang++ -fsanitize=fuzzer,address,undefined, `make
//    check-fuzz`): the target is LLVMFuzzerTestOneInput;
//  * without (g++, `make check`): the target registers itself and replay_main.cc runs
//    every file of tests/fuzz/corpus/<name>/ through it.
// A broken invariant prints what failed and aborts: libFuzzer saves the input as a crash
// artifact, the replay names the corpus file.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <sys/socket.h>

#include "wire/negotiate.hh"
#include "base/reason.hh"

namespace rsfuzz {

using rdmasock::Reason;
namespace neg = rdmasock::neg;

using TargetFn = void (*)(const uint8_t *, size_t);
struct Target {
    const char *name;
    TargetFn fn;
};
inline std::vector<Target> &targets()
{
    static std::vector<Target> t;
    return t;
}
struct Registrar {
    Registrar(const char *name, TargetFn fn) { targets().push_back({name, fn}); }
};

// The input being replayed, for the failure message (replay mode only).
inline const char *g_input = nullptr;

[[noreturn]] inline void fail(const char *file, int line, const char *expr)
{
    fprintf(stderr, "FUZZ INVARIANT BROKEN: %s:%d: %s\n", file, line, expr);
    if (g_input != nullptr)
        fprintf(stderr, "  input: %s\n", g_input);
    abort();
}

// A private heap copy of exactly `n` bytes: ASan reports any read past the end (the
// decoders must never look beyond the length they are given).  n == 0 gives a non-null
// zero-size block.
class Buf {
public:
    Buf(const uint8_t *d, size_t n) : p_(new uint8_t[n]), n_(n)
    {
        if (n != 0)
            memcpy(p_.get(), d, n);
    }
    // `n` bytes: `d[0..dn)` then zeros (how rdma_cm pads private data).
    Buf(const uint8_t *d, size_t dn, size_t n) : p_(new uint8_t[n]()), n_(n)
    {
        if (dn != 0)
            memcpy(p_.get(), d, std::min(dn, n));
    }
    explicit Buf(size_t n) : p_(new uint8_t[n]()), n_(n) {}
    uint8_t *data() noexcept { return p_.get(); }
    const uint8_t *data() const noexcept { return p_.get(); }
    size_t size() const noexcept { return n_; }

private:
    std::unique_ptr<uint8_t[]> p_;
    size_t n_;
};

// Consumes fuzz bytes as fields; an exhausted input reads as zeros.
class Reader {
public:
    Reader(const uint8_t *d, size_t n) : p_(d), n_(n) {}
    void bytes(void *out, size_t k) noexcept
    {
        size_t t = std::min(k, n_);
        if (t != 0)
            memcpy(out, p_, t);
        if (t < k)
            memset(static_cast<uint8_t *>(out) + t, 0, k - t);
        p_ += t;
        n_ -= t;
    }
    template <class T> T get() noexcept
    {
        T v;
        bytes(&v, sizeof v);
        return v;
    }
    uint8_t u8() noexcept { return get<uint8_t>(); }
    uint16_t u16() noexcept { return get<uint16_t>(); }
    uint32_t u32() noexcept { return get<uint32_t>(); }
    uint64_t u64() noexcept { return get<uint64_t>(); }

private:
    const uint8_t *p_;
    size_t n_;
};

// --- reference predicates, written from docs/protocol.md, not from negotiate.cc ------

// A ring a peer may name: 4 KiB .. 64 MiB, rkey and address non-zero, address 64-byte
// aligned, and [addr, addr + size) does not wrap around the address space.
// The lengths at which a frame matcher sees a stream of n bytes as it arrives: every
// length 0..64, and the whole.
inline std::vector<size_t> arrival_lengths(size_t n)
{
    std::vector<size_t> lengths;
    for (size_t k = 0; k <= std::min<size_t>(n, 64); ++k)
        lengths.push_back(k);
    if (n > 64)
        lengths.push_back(n);
    return lengths;
}

inline bool ring_ok(const neg::RingInfo &r) noexcept
{
    if (r.log2 < neg::kMinRingLog2 || r.log2 > neg::kMaxRingLog2)
        return false;
    if (r.rkey == 0 || r.addr == 0 || r.addr % 64 != 0)
        return false;
    uint64_t size = uint64_t{1} << r.log2;
    return r.addr <= UINT64_MAX - size;
}

inline bool zero(const void *p, size_t n) noexcept
{
    auto *b = static_cast<const uint8_t *>(p);
    for (size_t i = 0; i < n; ++i)
        if (b[i] != 0)
            return false;
    return true;
}

inline bool same(const neg::Nonce &a, const neg::Nonce &b) noexcept
{
    return memcmp(a.b, b.b, neg::kNonceSize) == 0;
}
inline bool same(const neg::RingInfo &a, const neg::RingInfo &b) noexcept
{
    return a.addr == b.addr && a.rkey == b.rkey && a.log2 == b.log2;
}
inline bool same(const neg::Hello &a, const neg::Hello &b) noexcept
{
    return a.family == b.family && same(a.nonce, b.nonce) &&
           memcmp(&a.client_addr, &b.client_addr, sizeof a.client_addr) == 0 &&
           a.client_port == b.client_port && a.server_port == b.server_port && same(a.ring, b.ring);
}
inline bool same(const neg::Accept &a, const neg::Accept &b) noexcept
{
    return same(a.ring, b.ring) && same(a.nonce, b.nonce);
}

// Recognisable values: a decoder that fails must leave its output untouched.
inline neg::Hello sentinel_hello() noexcept
{
    neg::Hello h;
    h.family = -12345;
    memset(h.nonce.b, 0xa5, sizeof h.nonce.b);
    memset(&h.client_addr, 0x5a, sizeof h.client_addr);
    h.client_port = 0xbeef;
    h.server_port = 0xcafe;
    h.ring.addr = 0xdeadbeefdeadbeefULL;
    h.ring.rkey = 0x12345678;
    h.ring.log2 = 9999;
    return h;
}
inline neg::Accept sentinel_accept() noexcept
{
    neg::Accept a;
    a.ring.addr = 0xdeadbeefdeadbeefULL;
    a.ring.rkey = 0x12345678;
    a.ring.log2 = 9999;
    memset(a.nonce.b, 0xa5, sizeof a.nonce.b);
    return a;
}

inline bool decoder_result(Reason r) noexcept
{
    return r == Reason::none || r == Reason::bad_message || r == Reason::version_mismatch;
}

// What a DECLINE naming reason byte `b` must decode to (negotiate.hh): the reasons a
// server may give pass through, its no_device is the client's peer_no_device, anything
// else (none, pending, codes only a client can have, unknown bytes) is `rejected`.
inline Reason decline_reason(uint8_t b) noexcept
{
    switch (static_cast<Reason>(b)) {
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
        return static_cast<Reason>(b);
    case Reason::no_device:
        return Reason::peer_no_device;
    default:
        return Reason::rejected;
    }
}

// The reasons decode_decline may ever return: never none (the connection would count as
// offloaded) nor pending (negotiation would wait forever) nor an unknown code.
inline bool decline_result(Reason r) noexcept
{
    switch (r) {
    case Reason::disabled:
    case Reason::rule:
    case Reason::version_mismatch:
    case Reason::bad_message:
    case Reason::memlock:
    case Reason::resource:
    case Reason::limit:
    case Reason::not_rdma_addr:
    case Reason::peer_no_device:
    case Reason::rejected:
    case Reason::redirected:
    case Reason::urgent_data:
    case Reason::closed_early:
    case Reason::io_uring:
        return true;
    default:
        return false;
    }
}

}  // namespace rsfuzz

#define FUZZ_CHECK(cond) ((cond) ? (void)0 : ::rsfuzz::fail(__FILE__, __LINE__, #cond))

#ifdef RS_FUZZ_LIBFUZZER
#define FUZZ_TARGET(name)                                                                  \
    static void rs_fuzz_##name(const uint8_t *data, size_t size);                           \
    extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)                 \
    {                                                                                       \
        rs_fuzz_##name(data, size);                                                         \
        return 0;                                                                           \
    }                                                                                       \
    static void rs_fuzz_##name(const uint8_t *data, size_t size)
#else
#define FUZZ_TARGET(name)                                                                  \
    static void rs_fuzz_##name(const uint8_t *data, size_t size);                           \
    static ::rsfuzz::Registrar rs_fuzz_registrar_##name(#name, rs_fuzz_##name);             \
    static void rs_fuzz_##name(const uint8_t *data, size_t size)
#endif
