#include "base/estimate.hh"

namespace rdmasock {

void Estimate::sample(us took) noexcept
{
    long long r = took.count() < 0 ? 0 : took.count();
    if (n_ == 0) {
        srtt_ = r;
        rttvar_ = r / 2;
    } else {
        long long d = srtt_ > r ? srtt_ - r : r - srtt_;
        rttvar_ = (3 * rttvar_ + d) / 4;
        srtt_ = (7 * srtt_ + r) / 8;
    }
    ++n_;
}

Estimate::us Estimate::bound(us floor, us ceiling) const noexcept
{
    if (n_ == 0)
        return floor;
    us b(srtt_ + 4 * rttvar_);
    if (b < floor)
        b = floor;
    if (b > ceiling)
        b = ceiling;
    return b;
}

}  // namespace rdmasock
