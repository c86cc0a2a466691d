// Bulk copies between a program's buffers and the rings.
#pragma once

#include <cstddef>

namespace rdmasock::util {

// memcpy() for the data path: for large copies, whichever of the C library's memcpy and
// a plain 16-byte vector loop measured faster on this machine (calibrate()).  glibc
// copies large blocks with `rep movsb`, which is fast on hardware with ERMS but several
// times slower than a vector loop where the CPU is emulated (qemu TCG).
void bulk_copy(void *dst, const void *src, size_t n) noexcept;

// Times both once (a few 64 KiB copies each, the fastest of several rounds) and keeps
// the faster; until then bulk_copy() is memcpy().  Called once, off the data path.
void calibrate_copy() noexcept;

// The vector loop itself (memcpy where there is none), for the tests.
void vector_copy(void *dst, const void *src, size_t n) noexcept;

}  // namespace rdmasock::util
