// The library's log as rdmasock(7) LOGGING documents it: every line is
// "rdmasock[PID]: LEVEL: MESSAGE"; at level info, closing a connection logs
//   rdmasock[PID]: info: event=close fd=FD role=client|server local=ADDR:PORT
//       peer=ADDR:PORT transport=tcp|rdma [reason=CODE] bytes_sent=N bytes_received=N
// (one line; reason present when, and only when, the transport is tcp), and at exit
//   rdmasock[PID]: info: event=exit program=NAME closed_rdma=N closed_tcp=N
//       closed_bytes_sent=N closed_bytes_received=N [closed_reason_CODE=N ...]  The one parser
// of those lines for every suite.  No Boost here; the tests do the asserting.
#pragma once

#include <string>
#include <vector>

#include "tests/common/text.hh"

namespace testcommon {

struct CloseLog {
    // The event=close lines, in order: their key=value pairs plus "pid" and "level".
    std::vector<Fields> closes;
    // One message per line that breaks the rules: malformed lines, error lines (and
    // warn lines unless allowed), close lines whose keys or values are not as documented,
    // exit lines whose totals are not what the close lines of their process add up to
    // (so a process that execs after closing connections would show as one).
    std::vector<std::string> problems;
    // How many event=exit lines were checked against the close lines.
    unsigned exits = 0;
};

// Parse a log written at level info or more verbose.
CloseLog check_close_log(const std::string &text, bool warnings_allowed = false);

}  // namespace testcommon
