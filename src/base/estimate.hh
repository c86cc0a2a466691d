// An estimate of how long a step takes, from the times it took, the way TCP follows the
// round-trip time to set its retransmission timeout (RFC 6298): a smoothed mean and a
// smoothed mean deviation, and a bound of mean + 4 x deviation.
//
// The offload engine keeps one for connection set-up (a connect() up to the peer's
// answer): connect() waits that long for the answer, not a fixed tunable, so a slow or
// loaded machine needs no tuning.
#pragma once

#include <chrono>

namespace rdmasock {

class Estimate {
public:
    using us = std::chrono::microseconds;

    void sample(us took) noexcept;
    bool empty() const noexcept { return n_ == 0; }
    unsigned long samples() const noexcept { return n_; }
    us mean() const noexcept { return us(srtt_); }
    us deviation() const noexcept { return us(rttvar_); }
    // mean + 4 x deviation, within [floor, ceiling]; floor when there is no sample yet.
    us bound(us floor, us ceiling) const noexcept;

private:
    long long srtt_ = 0;    // microseconds
    long long rttvar_ = 0;  // microseconds
    unsigned long n_ = 0;
};

}  // namespace rdmasock
