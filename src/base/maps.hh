// /proc/self/maps, a line at a time: what the process has mapped now (io_uring rings,
// device memory).  Read with the library's own descriptor (util::FdGate making) and
// raw system calls, no allocation.
#pragma once

#include <cstddef>

namespace rdmasock::util {

// Calls fn(line, len, arg) for each line of /proc/self/maps (without its newline; a
// line longer than 16 KiB comes as its first 16 KiB), until fn returns false.  False
// when the file could not be opened.
bool each_map(bool (*fn)(const char *line, size_t len, void *arg), void *arg) noexcept;

}  // namespace rdmasock::util
