// util::bulk_copy: byte-exact for every size and alignment, before and after the choice
// between memcpy and the vector loop is made.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/copy.hh"

using rdmasock::util::bulk_copy;
using rdmasock::util::calibrate_copy;
// (each size from every alignment, with guard bytes around the destination)

namespace {

void check_sizes(void (*copy)(void *, const void *, size_t) noexcept)
{
    std::vector<uint8_t> src(70000 + 64), dst(70000 + 64 + 16);
    for (size_t i = 0; i < src.size(); ++i)
        src[i] = static_cast<uint8_t>(i * 131 + 7);
    const size_t sizes[] = {0, 1, 15, 63, 64, 65, 2047, 2048, 2049, 4095, 65536, 65536 + 17, 70000};
    for (size_t n : sizes) {
        for (size_t so : {0, 1, 13}) {
            for (size_t doff : {0, 3, 16}) {
                std::fill(dst.begin(), dst.end(), 0xee);
                copy(dst.data() + doff, src.data() + so, n);
                bool same = std::equal(src.begin() + so, src.begin() + so + n, dst.begin() + doff);
                BOOST_CHECK_MESSAGE(same, "size " << n << " src+" << so << " dst+" << doff << ": bytes differ");
                // Nothing written outside [doff, doff + n).
                bool before = std::all_of(dst.begin(), dst.begin() + doff, [](uint8_t b) { return b == 0xee; });
                bool after = std::all_of(dst.begin() + doff + n, dst.end(), [](uint8_t b) { return b == 0xee; });
                BOOST_CHECK_MESSAGE(before && after, "size " << n << " src+" << so << " dst+" << doff
                                                             << ": wrote outside the destination");
            }
        }
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(copy)

BOOST_AUTO_TEST_CASE(exact_before_and_after_calibration)
{
    check_sizes(bulk_copy);  // memcpy
    calibrate_copy();        // whichever is faster here
    check_sizes(bulk_copy);
    check_sizes(rdmasock::util::vector_copy);
}

BOOST_AUTO_TEST_SUITE_END()
