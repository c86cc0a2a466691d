#include "tests/common/time.hh"

#include <time.h>

namespace testcommon {

double now_ms() noexcept
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) * 1000.0 + static_cast<double>(ts.tv_nsec) / 1e6;
}

int ms_left(double deadline) noexcept
{
    double r = deadline - now_ms();
    return r < 0 ? 0 : static_cast<int>(r) + 1;
}

}  // namespace testcommon
