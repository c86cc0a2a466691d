// neg::decode_decline: the private data of an rdma_cm REJECTED event, which may come
// from an rdmasock server (DECLINE), from the remote CM itself (no listener), or from
// any other program listening on that port (rdma_cm pads it to 148 bytes).
#include "fuzz.hh"

using namespace rsfuzz;

namespace {

constexpr uint8_t kMagic[4] = {'R', 'S', 'K', 'D'};

Reason decode_exact(const uint8_t *d, size_t n)
{
    Buf b(d, n);
    return neg::decode_decline(b.data(), b.size());
}

}  // namespace

FUZZ_TARGET(decline)
{
    Reason r = decode_exact(data, size);
    FUZZ_CHECK(decline_result(r));
    FUZZ_CHECK(static_cast<unsigned>(r) < rdmasock::kReasonCount);
    FUZZ_CHECK(strcmp(rdmasock::reason_code(r), "unknown") != 0);

    if (size < neg::kDeclineSize)
        FUZZ_CHECK(r == Reason::bad_message);
    else if (memcmp(data, kMagic, 4) != 0)
        FUZZ_CHECK(r == Reason::bad_message);
    else if (data[4] != neg::kVersion)
        FUZZ_CHECK(r == Reason::version_mismatch);
    else
        FUZZ_CHECK(r == decline_reason(data[5]));

    if (size > neg::kDeclineSize)
        FUZZ_CHECK(decode_exact(data, neg::kDeclineSize) == r);
    if (size >= neg::kDeclineSize)
        FUZZ_CHECK(decode_exact(data, data[size - 1] % neg::kDeclineSize) == Reason::bad_message);
    FUZZ_CHECK(neg::decode_decline(nullptr, size) == Reason::bad_message);
    // A redirect names its port; anything else names none.
    const uint16_t port = neg::decode_redirect(data, size);
    if (r == Reason::redirected)
        FUZZ_CHECK(port == (data[6] << 8 | data[7]));
    else
        FUZZ_CHECK(port == 0);

    // The reason byte as logged: any value names a code, in range or "unknown".
    if (size > 5) {
        auto raw = static_cast<Reason>(data[5]);
        const char *code = rdmasock::reason_code(raw);
        const char *doc = rdmasock::reason_doc(raw);
        FUZZ_CHECK(code != nullptr && doc != nullptr);
        FUZZ_CHECK((data[5] < rdmasock::kReasonCount) == (strcmp(code, "unknown") != 0));
    }
}
