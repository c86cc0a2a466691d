// The FALLBACK frame (src/wire/negotiate.hh): encoded and matched back, every prefix
// partial, every altered byte refused, and the peer's counts checked against ours.
#include <boost/test/unit_test.hpp>

#include <cstring>

#include "wire/negotiate.hh"

using namespace rdmasock;
using neg::ConfirmMatch;

namespace {

neg::Nonce nonce(uint8_t seed)
{
    neg::Nonce n{};
    for (size_t i = 0; i < neg::kNonceSize; ++i)
        n.b[i] = static_cast<uint8_t>(seed + 17 * i);
    return n;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fallback_frame)

BOOST_AUTO_TEST_CASE(round_trip_and_prefixes)
{
    neg::Fallback f;
    f.count = 0x0102030405060708ULL;
    f.start = (5ULL << 32) + 77;
    f.flags = neg::kFbWrShut | neg::kFbResidueDropped;
    const neg::Nonce n = nonce(3);
    uint8_t b[neg::kFallbackSize];
    neg::encode_fallback(f, n, b);
    neg::Fallback got;
    BOOST_TEST(static_cast<int>(neg::match_fallback(b, sizeof b, n, &got)) == static_cast<int>(ConfirmMatch::yes));
    BOOST_TEST(got.count == f.count);
    BOOST_TEST(got.start == f.start);
    BOOST_TEST(got.flags == f.flags);
    for (size_t k = 0; k < neg::kFallbackSize; ++k)
        BOOST_TEST(static_cast<int>(neg::match_fallback(b, k, n, &got)) == static_cast<int>(ConfirmMatch::partial),
                   "prefix of " << k << " bytes");
}

BOOST_AUTO_TEST_CASE(altered_bytes_refused)
{
    neg::Fallback f;
    f.count = 1000;
    f.start = 900;
    const neg::Nonce n = nonce(9);
    uint8_t good[neg::kFallbackSize];
    neg::encode_fallback(f, n, good);
    // Magic, version, flags (unknown bits), reserved, tag: each altered byte refuses the
    // frame, also seen only up to that byte.  (The counts are any values: checked later.)
    for (size_t i = 0; i < neg::kFallbackSize; ++i) {
        if (i >= 8 && i < 24)
            continue;
        uint8_t b[neg::kFallbackSize];
        memcpy(b, good, sizeof b);
        b[i] ^= (i == 5 ? 0x80 : 0x01);
        neg::Fallback got;
        BOOST_TEST(static_cast<int>(neg::match_fallback(b, sizeof b, n, &got)) == static_cast<int>(ConfirmMatch::no),
                   "byte " << i);
        BOOST_TEST(static_cast<int>(neg::match_fallback(b, i + 1, n, &got)) == static_cast<int>(ConfirmMatch::no),
                   "byte " << i << ", prefix");
    }
    neg::Fallback got;
    BOOST_TEST(static_cast<int>(neg::match_fallback(good, sizeof good, nonce(10), &got)) ==
               static_cast<int>(ConfirmMatch::no));
}

BOOST_AUTO_TEST_CASE(counts_checked)
{
    const uint64_t ring = 4096;
    // We posted up to 10,000 and the peer acknowledged 6,000; we hold 20,000 of its bytes.
    auto check = [&](uint64_t count, uint64_t start) {
        neg::Fallback f;
        f.count = count;
        f.start = start;
        return neg::check_fallback(f, 6000, 10000, 20000, ring) == Reason::none;
    };
    BOOST_TEST(check(6000, 20000));           // nothing to skip, from what it acknowledged
    BOOST_TEST(check(10000, 20000 - ring));   // a whole ring of duplicates
    BOOST_TEST(check(8000, 19000));
    BOOST_TEST(!check(5999, 20000));          // less than it acknowledged
    BOOST_TEST(!check(10001, 20000));         // more than we ever posted
    BOOST_TEST(!check(8000, 20001));          // a start beyond what we hold: a gap
    BOOST_TEST(!check(8000, 20000 - ring - 1));  // more duplicates than a ring holds
    BOOST_TEST(!check(8000, 0));
}

BOOST_AUTO_TEST_SUITE_END()
