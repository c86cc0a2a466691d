// neg::decode(Accept): the private data of the server's rdma_accept (ESTABLISHED on
// the client; rdma_cm pads it to 196 bytes).
#include "fuzz.hh"

using namespace rsfuzz;

namespace {

constexpr uint8_t kMagic[4] = {'R', 'S', 'K', 'A'};

Reason decode_exact(const uint8_t *d, size_t n, neg::Accept *out)
{
    Buf b(d, n);
    return neg::decode(b.data(), b.size(), out);
}

}  // namespace

FUZZ_TARGET(accept)
{
    neg::Accept out = sentinel_accept();
    Reason r = decode_exact(data, size, &out);
    FUZZ_CHECK(decoder_result(r));

    if (size < neg::kAcceptSize)
        FUZZ_CHECK(r == Reason::bad_message);
    else if (memcmp(data, kMagic, 4) != 0)
        FUZZ_CHECK(r == Reason::bad_message);
    else if (data[4] != neg::kVersion)
        FUZZ_CHECK(r == Reason::version_mismatch);

    if (r != Reason::none) {
        FUZZ_CHECK(same(out, sentinel_accept()));
    } else {
        FUZZ_CHECK(neg::valid_ring(out.ring));
        FUZZ_CHECK(ring_ok(out.ring));
        Buf enc(neg::kAcceptSize);
        neg::encode(out, enc.data());
        FUZZ_CHECK(memcmp(enc.data(), data, neg::kAcceptSize) == 0);  // canonical
    }

    if (size > neg::kAcceptSize) {
        neg::Accept head = sentinel_accept();
        FUZZ_CHECK(decode_exact(data, neg::kAcceptSize, &head) == r);
        FUZZ_CHECK(same(head, out));
    }
    if (size >= neg::kAcceptSize) {
        neg::Accept t = sentinel_accept();
        size_t cut = data[size - 1] % neg::kAcceptSize;
        FUZZ_CHECK(decode_exact(data, cut, &t) == Reason::bad_message);
        FUZZ_CHECK(same(t, sentinel_accept()));
    }
    neg::Accept n = sentinel_accept();
    FUZZ_CHECK(neg::decode(nullptr, size, &n) == Reason::bad_message);
    FUZZ_CHECK(same(n, sentinel_accept()));
}
