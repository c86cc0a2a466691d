// neg::match_confirm: the first bytes of a server's accepted TCP stream, which come from
// any TCP client (rdmasock or not).  The server peeks up to 24 bytes, as many as have
// arrived, and calls it with the nonce of the bound RDMA connection or, while no RDMA
// request has claimed the socket yet, without one.
//
// Input: byte 0 bit 0 = an expected nonce is given; bytes 1..16 = that nonce; the rest
// is the stream.  Every length 0..64 of the stream (and the whole) is matched from its
// own exact-size heap copy, so the invariants cover the stream as it arrives.
#include "fuzz.hh"

using namespace rsfuzz;
using neg::ConfirmMatch;

namespace {

constexpr size_t kHeader = 8;  // magic, version, reserved: the nonce-independent part

ConfirmMatch match_exact(const uint8_t *s, size_t k, const neg::Nonce *expected)
{
    Buf b(s, k);
    return neg::match_confirm(b.data(), b.size(), expected);
}

}  // namespace

FUZZ_TARGET(confirm)
{
    if (size < 1 + neg::kNonceSize)
        return;
    const bool bound = (data[0] & 1) != 0;
    neg::Nonce nonce;
    memcpy(nonce.b, data + 1, neg::kNonceSize);
    const neg::Nonce *expected = bound ? &nonce : nullptr;
    const uint8_t *s = data + 1 + neg::kNonceSize;
    const size_t n = size - 1 - neg::kNonceSize;

    Buf frame(neg::kConfirmSize);  // the CONFIRM this server waits for
    neg::encode_confirm(nonce, frame.data());

    bool seen_no = false;
    ConfirmMatch at_full = ConfirmMatch::partial;
    for (size_t k : arrival_lengths(n)) {
        ConfirmMatch m = match_exact(s, k, expected);
        FUZZ_CHECK(m == ConfirmMatch::no || m == ConfirmMatch::partial || m == ConfirmMatch::yes);
        const bool header_ok = memcmp(s, frame.data(), std::min(k, kHeader)) == 0;
        const bool frame_prefix = memcmp(s, frame.data(), std::min(k, neg::kConfirmSize)) == 0;

        // Anything that is not an rdmasock CONFIRM header is plain TCP at once.
        if (!header_ok)
            FUZZ_CHECK(m == ConfirmMatch::no);
        if (!bound) {
            // Nothing to bind to: never a switch; a CONFIRM (prefix) waits.
            FUZZ_CHECK(m == (header_ok ? ConfirmMatch::partial : ConfirmMatch::no));
        } else if (k < neg::kConfirmSize) {
            FUZZ_CHECK(m != ConfirmMatch::yes);  // never switch on an incomplete frame
            if (frame_prefix)
                FUZZ_CHECK(m == ConfirmMatch::partial);  // the right CONFIRM, still arriving
        } else {
            // A whole frame: switch exactly when it is this connection's CONFIRM.
            FUZZ_CHECK((m == ConfirmMatch::yes) == frame_prefix);
            FUZZ_CHECK(m != ConfirmMatch::partial);
        }
        // Decisions are final as more bytes arrive; bytes after the frame do not matter.
        if (seen_no)
            FUZZ_CHECK(m == ConfirmMatch::no);
        seen_no = seen_no || m == ConfirmMatch::no;
        if (k == neg::kConfirmSize)
            at_full = m;
        if (k > neg::kConfirmSize)
            FUZZ_CHECK(m == at_full);
    }

    // The encoded CONFIRM itself, from exact-size copies: yes when bound, every proper
    // prefix partial.
    FUZZ_CHECK(match_exact(frame.data(), neg::kConfirmSize, &nonce) == ConfirmMatch::yes);
    FUZZ_CHECK(match_exact(frame.data(), neg::kConfirmSize, nullptr) == ConfirmMatch::partial);
    size_t cut = n != 0 ? s[0] % neg::kConfirmSize : 0;
    FUZZ_CHECK(match_exact(frame.data(), cut, &nonce) == ConfirmMatch::partial);
}
