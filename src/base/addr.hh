// An address as the log lines and the operator's tools print it.
#pragma once

#include <cstddef>
#include <sys/socket.h>

namespace rdmasock::util {

// "ADDR:PORT", "[ADDR6]:PORT", or "-" (another family).
void format_addr(const sockaddr_storage &ss, char *out, size_t n) noexcept;

}  // namespace rdmasock::util
