// TCP port helpers of the test programs.  No Boost here.
#pragma once

#include <string>

namespace testcommon {

// A TCP port free on the IPv4 address addr right now (bind to port 0, read it, close);
// -1 on failure.
int free_port(const std::string &addr = "127.0.0.1");
// Something listens on TCP `port` (IPv4 or IPv6) right now, seen in /proc/net/tcp{,6}
// without connecting to it.
bool tcp_listening(int port);
// Wait up to timeout_ms until tcp_listening(port).
bool wait_listening(int port, int timeout_ms);

}  // namespace testcommon
