// neg::match_proof: the bytes a client finds in its TCP stream at the offset the
// server's PROOF_AT named.  Whoever accepted the client's RDMA connection chose that
// offset; the bytes there come from the TCP peer, which may not run rdmasock at all
// (another process answered on its RDMA port).  The client peeks as many bytes as have
// arrived and switches only on `yes`.
//
// Input: bytes 0..15 = the nonce of the client's HELLO; the rest is the stream from the
// offset.  Every length 0..64 of the stream (and the whole) is matched from its own
// exact-size heap copy, so the invariants cover the stream as it arrives.
#include "fuzz.hh"

using namespace rsfuzz;
using neg::ConfirmMatch;

namespace {

ConfirmMatch match_exact(const uint8_t *s, size_t k, const neg::Nonce &expected)
{
    Buf b(s, k);
    return neg::match_proof(b.data(), b.size(), expected);
}

}  // namespace

FUZZ_TARGET(proof)
{
    if (size < neg::kNonceSize)
        return;
    neg::Nonce nonce;
    memcpy(nonce.b, data, neg::kNonceSize);
    const uint8_t *s = data + neg::kNonceSize;
    const size_t n = size - neg::kNonceSize;

    Buf frame(neg::kProofSize);  // the PROOF this client waits for
    neg::encode_proof(nonce, frame.data());

    bool seen_no = false;
    ConfirmMatch at_full = ConfirmMatch::partial;
    for (size_t k : arrival_lengths(n)) {
        ConfirmMatch m = match_exact(s, k, nonce);
        FUZZ_CHECK(m == ConfirmMatch::no || m == ConfirmMatch::partial || m == ConfirmMatch::yes);
        const size_t cmp = std::min(k, neg::kProofSize);
        const bool frame_prefix = memcmp(s, frame.data(), cmp) == 0;
        // Any byte that is not the PROOF's (its nonce's included) is `no` at once: the
        // bytes are the stream's, and a wrong nonce is not held back for more bytes.
        FUZZ_CHECK((m == ConfirmMatch::no) == !frame_prefix);
        // Never a switch on an incomplete frame; a whole frame is never `partial`.
        if (k < neg::kProofSize)
            FUZZ_CHECK(m != ConfirmMatch::yes);
        else
            FUZZ_CHECK(m != ConfirmMatch::partial);
        // Decisions are final as more bytes arrive; bytes after the frame do not matter.
        if (seen_no)
            FUZZ_CHECK(m == ConfirmMatch::no);
        seen_no = seen_no || m == ConfirmMatch::no;
        if (k == neg::kProofSize)
            at_full = m;
        if (k > neg::kProofSize)
            FUZZ_CHECK(m == at_full);
    }

    // The encoded PROOF itself: yes; every proper prefix partial; the CONFIRM of the same
    // nonce (the other direction's frame) is no.
    FUZZ_CHECK(match_exact(frame.data(), neg::kProofSize, nonce) == ConfirmMatch::yes);
    size_t cut = n != 0 ? s[0] % neg::kProofSize : 0;
    FUZZ_CHECK(match_exact(frame.data(), cut, nonce) == ConfirmMatch::partial);
    Buf confirm(neg::kConfirmSize);
    neg::encode_confirm(nonce, confirm.data());
    FUZZ_CHECK(match_exact(confirm.data(), neg::kConfirmSize, nonce) == ConfirmMatch::no);
}
