// neg::match_fallback and neg::check_fallback: the bytes a side finds at the head of its
// peer's TCP stream once the connection left RDMA mid-stream (docs/design/tcp-fallback.md),
// and the peer's counts in them.  The peer is the TCP peer of a switched connection, but
// may be hostile or broken: any bytes, any counts.
//
// Input: bytes 0..15 = the connection's nonce; bytes 16..47 = this side's counters
// (acked, posted, held, ring: 8 bytes each, little-endian); the rest is the stream.
// Every arrival length of the stream is matched from its own exact-size heap copy.
#include "fuzz.hh"

using namespace rsfuzz;
using neg::ConfirmMatch;

namespace {

uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i)
        v = (v << 8) | p[i];
    return v;
}

// The byte at `i` may stand there in some FALLBACK of this nonce (an oracle written
// from the layout, apart from the decoder's code).
bool byte_ok(size_t i, uint8_t b, const neg::Nonce &n)
{
    static const char magic[] = "RSKF";
    if (i < 4)
        return b == static_cast<uint8_t>(magic[i]);
    if (i == 4)
        return b == neg::kVersion;
    if (i == 5)
        return (b & ~neg::kFbWrShut) == 0;
    if (i == 6 || i == 7)
        return b == 0;
    if (i < 24)
        return true;  // the counts
    return b == n.b[i - 24];
}

}  // namespace

FUZZ_TARGET(fallback)
{
    if (size < neg::kNonceSize + 32)
        return;
    neg::Nonce nonce;
    memcpy(nonce.b, data, neg::kNonceSize);
    const uint64_t acked = le64(data + 16), posted = le64(data + 24), held = le64(data + 32), ring = le64(data + 40);
    const uint8_t *s = data + neg::kNonceSize + 32;
    const size_t n = size - neg::kNonceSize - 32;

    bool seen_no = false;
    for (size_t k : arrival_lengths(n)) {
        Buf b(s, k);
        neg::Fallback f;
        f.count = 0xdeadbeef;  // (left alone unless `yes`)
        ConfirmMatch m = neg::match_fallback(b.data(), b.size(), nonce, &f);
        FUZZ_CHECK(m == ConfirmMatch::no || m == ConfirmMatch::partial || m == ConfirmMatch::yes);
        bool prefix_ok = true;
        for (size_t i = 0; i < std::min(k, neg::kFallbackSize); ++i)
            prefix_ok = prefix_ok && byte_ok(i, s[i], nonce);
        FUZZ_CHECK((m == ConfirmMatch::no) == !prefix_ok);
        if (k < neg::kFallbackSize)
            FUZZ_CHECK(m != ConfirmMatch::yes && f.count == 0xdeadbeef);
        else
            FUZZ_CHECK(m != ConfirmMatch::partial);
        if (seen_no)
            FUZZ_CHECK(m == ConfirmMatch::no);
        seen_no = seen_no || m == ConfirmMatch::no;
        if (m != ConfirmMatch::yes)
            continue;
        // What was decoded encodes back to the same 32 bytes.
        Buf again(neg::kFallbackSize);
        neg::encode_fallback(f, nonce, again.data());
        FUZZ_CHECK(memcmp(again.data(), s, neg::kFallbackSize) == 0);
        // The counts: accepted only inside the bounds, whatever the values (no overflow
        // lets a start beyond what we hold, or more than a ring of duplicates, through).
        const bool ok = neg::check_fallback(f, acked, posted, held, ring) == Reason::none;
        FUZZ_CHECK(ok == (f.count >= acked && f.count <= posted && f.start <= held && held - f.start <= ring));
    }
}
