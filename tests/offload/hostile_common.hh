// Shared by the hostile-peer test programs (tests/offload/hostile.cc, victim.cc): the
// byte pattern every honest stream carries and a hash of what a side moved, so the
// driver can check that what one end sent is exactly what the other end received.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hostile {

// Byte i of a stream: a bijection of the 32-bit word index mixed with a salt (any lost,
// repeated, reordered or foreign byte changes the stream).
inline uint8_t pattern_byte(uint64_t i, uint32_t salt)
{
    uint32_t w = static_cast<uint32_t>(i / 4) * 2654435761u + salt;
    return static_cast<uint8_t>(w >> (8 * (i % 4)));
}

inline void fill_pattern(uint8_t *p, size_t n, uint64_t off, uint32_t salt)
{
    for (size_t k = 0; k < n; ++k)
        p[k] = pattern_byte(off + k, salt);
}

// FNV-1a 64, incremental.
struct Hash {
    uint64_t h = 1469598103934665603ull;
    void add(const uint8_t *p, size_t n)
    {
        for (size_t k = 0; k < n; ++k) {
            h ^= p[k];
            h *= 1099511628211ull;
        }
    }
};

constexpr uint32_t kSaltClient = 0x0badc0deu;  // client -> server streams

}  // namespace hostile
