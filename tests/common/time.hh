// Time helpers of the test programs.  No Boost here.
#pragma once

namespace testcommon {

// Milliseconds on the monotonic clock.
double now_ms() noexcept;

// Milliseconds from now to `deadline` (a now_ms() value), rounded up; 0 once it passed.
// What a poll() timeout wants.
int ms_left(double deadline) noexcept;

}  // namespace testcommon
