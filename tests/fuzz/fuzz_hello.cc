// neg::decode(Hello): the rdma_cm private data of a CONNECT_REQUEST, from any host that
// can reach the RDMA port.
#include "fuzz.hh"

#include <netinet/in.h>

using namespace rsfuzz;

namespace {

constexpr uint8_t kMagic[4] = {'R', 'S', 'K', '1'};

// Decodes `n` bytes of `d` from an exact-size heap copy.
Reason decode_exact(const uint8_t *d, size_t n, neg::Hello *out)
{
    Buf b(d, n);
    return neg::decode(b.data(), b.size(), out);
}

}  // namespace

FUZZ_TARGET(hello)
{
    neg::Hello out = sentinel_hello();
    Reason r = decode_exact(data, size, &out);
    FUZZ_CHECK(decoder_result(r));

    // The header decides first: a short message, a foreign magic or another version.
    if (size < neg::kHelloSize)
        FUZZ_CHECK(r == Reason::bad_message);
    else if (memcmp(data, kMagic, 4) != 0)
        FUZZ_CHECK(r == Reason::bad_message);
    else if (data[4] != neg::kVersion)
        FUZZ_CHECK(r == Reason::version_mismatch);  // whatever the rest looks like

    if (r != Reason::none) {
        FUZZ_CHECK(same(out, sentinel_hello()));  // a rejected message leaves *out alone
    } else {
        FUZZ_CHECK(out.family == AF_INET || out.family == AF_INET6);
        FUZZ_CHECK(out.client_port != 0);
        FUZZ_CHECK(out.server_port != 0);
        FUZZ_CHECK(neg::valid_ring(out.ring));
        FUZZ_CHECK(ring_ok(out.ring));
        FUZZ_CHECK(!zero(out.nonce.b, neg::kNonceSize));
        if (out.family == AF_INET)
            FUZZ_CHECK(zero(reinterpret_cast<const uint8_t *>(&out.client_addr) + 4, 12));
        // Canonical: every accepted message is exactly the encoding of what it decoded
        // to (reserved bytes zero, no field ignored).
        Buf enc(neg::kHelloSize);
        neg::encode(out, enc.data());
        FUZZ_CHECK(memcmp(enc.data(), data, neg::kHelloSize) == 0);
    }

    // Bytes past the HELLO (rdma_cm padding) are ignored.
    if (size > neg::kHelloSize) {
        neg::Hello head = sentinel_hello();
        FUZZ_CHECK(decode_exact(data, neg::kHelloSize, &head) == r);
        FUZZ_CHECK(same(head, out));
    }
    // Every truncation is rejected.
    if (size >= neg::kHelloSize) {
        neg::Hello t = sentinel_hello();
        size_t cut = data[size - 1] % neg::kHelloSize;
        FUZZ_CHECK(decode_exact(data, cut, &t) == Reason::bad_message);
        FUZZ_CHECK(same(t, sentinel_hello()));
    }
    // No private data at all (rdma_cm gives a null pointer).
    neg::Hello n = sentinel_hello();
    FUZZ_CHECK(neg::decode(nullptr, size, &n) == Reason::bad_message);
    FUZZ_CHECK(same(n, sentinel_hello()));
}
