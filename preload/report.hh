// The live view of this process for the operator's tools (`rdmasock ss`, `rdmasock stat`,
// tools/ss.cc): a datagram socket on the abstract name "rdmasock/PID", made when the
// engine starts and answered on its progress thread.  Nothing on the data path: a query
// reads what the connections already count.  Only the process's own user (or root), as
// the kernel's credentials on the request say, gets an answer; the name goes away with
// the process, crashed or not.
//
// Protocol (docs/protocol.md, "The operator's view"): a request datagram (any content);
// the answer is datagrams of whole lines, the last one "end".
#pragma once

#include "base/reason.hh"

namespace rdmasock::report {

// The abstract name's prefix; the process id follows.
constexpr char kNamePrefix[] = "rdmasock/";

// The socket (engine start, the program's thread; moved high), or -1.
int open() noexcept;
// It is readable (progress thread): answer a few of the requests waiting.
void answer(int fd) noexcept;

// A connection's close, for the totals (log_close, before its log-level check).
void count_closed(bool rdma, Reason why, unsigned long long sent, unsigned long long received) noexcept;

// At exit, after the close lines of the connections left open: the info-level line
// "event=exit program=NAME" with the totals `rdmasock stat` shows (rdmasock(7), LOGGING),
// when the process closed any connection.
void log_exit() noexcept;
// A fork child counts its own connections from zero.
void after_fork_child() noexcept;

}  // namespace rdmasock::report
