#include "base/copy.hh"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "base/log.hh"

namespace rdmasock::util {

namespace {

using CopyFn = void (*)(void *, const void *, size_t);

void libc_copy(void *d, const void *s, size_t n) { memcpy(d, s, n); }

}  // namespace

#if defined(__x86_64__)
// 64 bytes per iteration through SSE2 registers (every x86-64 CPU has them); the tail
// (under 64 bytes) by memcpy.
void vector_copy(void *dst, const void *src, size_t n) noexcept
{
    auto *d = static_cast<uint8_t *>(dst);
    const auto *s = static_cast<const uint8_t *>(src);
    while (n >= 64) {
        __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s));
        __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + 16));
        __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + 32));
        __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + 48));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(d), a);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(d + 16), b);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(d + 32), c);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(d + 48), e);
        d += 64;
        s += 64;
        n -= 64;
    }
    memcpy(d, s, n);
}
#else
void vector_copy(void *dst, const void *src, size_t n) noexcept { memcpy(dst, src, n); }
#endif

namespace {

// Below this the choice does not matter (memcpy's small-size paths use no `rep movsb`).
constexpr size_t kBulkFrom = 2048;

void vector_loop(void *d, const void *s, size_t n) { vector_copy(d, s, n); }

std::atomic<CopyFn> g_bulk{libc_copy};
std::atomic<bool> g_calibrated{false};

// The fastest of `rounds` copies of `n` bytes, in ns.
long long best_ns(CopyFn f, uint8_t *d, const uint8_t *s, size_t n, int rounds) noexcept
{
    long long best = -1;
    for (int i = 0; i < rounds; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        f(d, s, n);
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
        if (best < 0 || ns < best)
            best = ns;
    }
    return best;
}

}  // namespace

void bulk_copy(void *dst, const void *src, size_t n) noexcept
{
    if (n < kBulkFrom)
        memcpy(dst, src, n);
    else
        g_bulk.load(std::memory_order_relaxed)(dst, src, n);
}

void calibrate_copy() noexcept
{
#if defined(__x86_64__)
    if (g_calibrated.exchange(true))
        return;
    constexpr size_t kN = 64 * 1024;
    auto *buf = static_cast<uint8_t *>(malloc(2 * kN));
    if (buf == nullptr)
        return;
    memset(buf, 0x5a, 2 * kN);  // both halves touched: no page fault is timed
    // Interleaved rounds, so that a pause of the thread hurts neither side alone.
    long long libc = -1, vec = -1;
    for (int r = 0; r < 3; ++r) {
        long long a = best_ns(libc_copy, buf + kN, buf, kN, 3);
        long long b = best_ns(vector_loop, buf + kN, buf, kN, 3);
        libc = libc < 0 || a < libc ? a : libc;
        vec = vec < 0 || b < vec ? b : vec;
    }
    free(buf);
    // The loop only when clearly faster: on hardware both are close and memcpy may use
    // wider registers or non-temporal stores.
    const bool use_vec = vec > 0 && libc > 0 && vec * 4 < libc * 3;
    if (use_vec)
        g_bulk.store(vector_loop, std::memory_order_relaxed);
    RS_DEBUG("bulk copies of 64 KiB: memcpy %lld ns, vector loop %lld ns: using %s", libc, vec,
             use_vec ? "the vector loop" : "memcpy");
#endif
}

}  // namespace rdmasock::util
