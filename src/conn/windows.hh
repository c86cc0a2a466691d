// The negotiation's time windows (docs/protocol.md), from RDMASOCK_PROBE_TIMEOUT_MS:
// a server answers an RDMA request within answer_window() (it parks one until the
// connection is read, and declines it then); it holds an undecided connection, and
// waits for a SWITCH and its CONFIRM, for switch_window() (longer, so that no answer
// within the first can come after the second; 3 s more, so that a first connection's
// set-up on a slow machine, 100..700 ms under emulation at each end, fits it with the
// default probe timeout).
#pragma once

#include <chrono>

#include "process/runtime.hh"

namespace rdmasock::windows {

inline std::chrono::milliseconds answer_window() noexcept
{
    return std::chrono::milliseconds(2 * rt::config().probe_timeout_ms + 100);
}
inline std::chrono::milliseconds switch_window() noexcept
{
    return std::chrono::milliseconds(2 * rt::config().probe_timeout_ms + 3000);
}
// A client switches only when it handles the server's answer at least this long before
// switch_window() has passed since its request: the SWITCH's way to the server's
// completion queue must fit in it.
inline std::chrono::milliseconds switch_margin() noexcept
{
    return std::chrono::milliseconds(500);
}

}  // namespace rdmasock::windows
