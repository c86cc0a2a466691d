// The FALLBACK frame (src/wire/negotiate.hh): encoded and matched back, every prefix
// partial, every altered byte refused, and the peer's counts checked against ours.
// Then FallbackPath (src/conn/fallback.hh), the frames and backlogs of two ends.
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

#include "conn/fallback.hh"
#include "wire/negotiate.hh"

using namespace rdmasock;
using neg::ConfirmMatch;

namespace {

neg::Nonce nonce(uint8_t seed)
{
    neg::Nonce n{};
    for (size_t i = 0; i < neg::kNonceSize; ++i)
        n.b[i] = static_cast<uint8_t>(seed + 17 * i);
    return n;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fallback_frame)

BOOST_AUTO_TEST_CASE(round_trip_and_prefixes)
{
    neg::Fallback f;
    f.count = 0x0102030405060708ULL;
    f.start = (5ULL << 32) + 77;
    f.flags = neg::kFbWrShut;
    const neg::Nonce n = nonce(3);
    uint8_t b[neg::kFallbackSize];
    neg::encode_fallback(f, n, b);
    neg::Fallback got;
    BOOST_TEST(static_cast<int>(neg::match_fallback(b, sizeof b, n, &got)) == static_cast<int>(ConfirmMatch::yes));
    BOOST_TEST(got.count == f.count);
    BOOST_TEST(got.start == f.start);
    BOOST_TEST(got.flags == f.flags);
    for (size_t k = 0; k < neg::kFallbackSize; ++k)
        BOOST_TEST(static_cast<int>(neg::match_fallback(b, k, n, &got)) == static_cast<int>(ConfirmMatch::partial),
                   "prefix of " << k << " bytes");
}

BOOST_AUTO_TEST_CASE(altered_bytes_refused)
{
    neg::Fallback f;
    f.count = 1000;
    f.start = 900;
    const neg::Nonce n = nonce(9);
    uint8_t good[neg::kFallbackSize];
    neg::encode_fallback(f, n, good);
    // Magic, version, flags (unknown bits), reserved, tag: each altered byte refuses the
    // frame, also seen only up to that byte.  (The counts are any values: checked later.)
    for (size_t i = 0; i < neg::kFallbackSize; ++i) {
        if (i >= 8 && i < 24)
            continue;
        uint8_t b[neg::kFallbackSize];
        memcpy(b, good, sizeof b);
        b[i] ^= (i == 5 ? 0x80 : 0x01);
        neg::Fallback got;
        BOOST_TEST(static_cast<int>(neg::match_fallback(b, sizeof b, n, &got)) == static_cast<int>(ConfirmMatch::no),
                   "byte " << i);
        BOOST_TEST(static_cast<int>(neg::match_fallback(b, i + 1, n, &got)) == static_cast<int>(ConfirmMatch::no),
                   "byte " << i << ", prefix");
    }
    neg::Fallback got;
    BOOST_TEST(static_cast<int>(neg::match_fallback(good, sizeof good, nonce(10), &got)) ==
               static_cast<int>(ConfirmMatch::no));
}

BOOST_AUTO_TEST_CASE(counts_checked)
{
    const uint64_t ring = 4096;
    // We posted up to 10,000 and the peer acknowledged 6,000; we hold 20,000 of its bytes.
    auto check = [&](uint64_t count, uint64_t start) {
        neg::Fallback f;
        f.count = count;
        f.start = start;
        return neg::check_fallback(f, 6000, 10000, 20000, ring) == Reason::none;
    };
    BOOST_TEST(check(6000, 20000));           // nothing to skip, from what it acknowledged
    BOOST_TEST(check(10000, 20000 - ring));   // a whole ring of duplicates
    BOOST_TEST(check(8000, 19000));
    BOOST_TEST(!check(5999, 20000));          // less than it acknowledged
    BOOST_TEST(!check(10001, 20000));         // more than we ever posted
    BOOST_TEST(!check(8000, 20001));          // a start beyond what we hold: a gap
    BOOST_TEST(!check(8000, 20000 - ring - 1));  // more duplicates than a ring holds
    BOOST_TEST(!check(8000, 0));
}

BOOST_AUTO_TEST_SUITE_END()

// FallbackPath (src/conn/fallback.hh): two ends over a socket pair, each with a staging
// ring that wraps, resend from where the other said it is, skip what it already holds,
// and end its stream when it had shut down writing; a bad or missing frame is refused.

namespace {

uint8_t stream_byte(int side, uint64_t i)
{
    return static_cast<uint8_t>(i * 7 + static_cast<uint64_t>(side) * 101 + (i >> 8));
}

struct End {
    uint8_t staging[64] = {};
    FallbackPath fb;
    // Stream bytes [from, to) of `side` in the staging ring (where the ring cursor puts them).
    void stage(int side, uint64_t from, uint64_t to)
    {
        for (uint64_t i = from; i < to; ++i)
            staging[i & 63] = stream_byte(side, i);
    }
};

struct SocketPair {
    int fd[2] = {-1, -1};
    SocketPair() { BOOST_REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fd) == 0); }
    ~SocketPair()
    {
        close(fd[0]);
        close(fd[1]);
    }
};

// Read exactly n bytes (the socket holds them already).
std::string read_n(int fd, size_t n)
{
    std::string s(n, '\0');
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, &s[got], n - got, MSG_DONTWAIT);
        if (r <= 0)
            break;
        got += static_cast<size_t>(r);
    }
    s.resize(got);
    return s;
}

std::string expected(int side, uint64_t from, uint64_t to)
{
    std::string s;
    for (uint64_t i = from; i < to; ++i)
        s += static_cast<char>(stream_byte(side, i));
    return s;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fallback_path)

BOOST_AUTO_TEST_CASE(both_ends_resend_and_skip)
{
    SocketPair sp;
    const neg::Nonce n = nonce(5);
    // A's stream: the peer credited 100 bytes, 140 were posted, 150 staged (the ring of
    // 64 bytes wraps inside [100, 150)).  B holds 120 of them (read or in its ring).
    // B's stream: credited 30, posted and staged 60; A holds 45.
    End a, b;
    a.stage(0, 100, 150);
    b.stage(1, 30, 60);
    a.fb.begin(45, 100, 150, false, n, {a.staging, sizeof a.staging});
    b.fb.begin(120, 30, 60, true, n, {b.staging, sizeof b.staging});
    BOOST_TEST(a.fb.push(sp.fd[0]) == 0);
    BOOST_TEST(b.fb.push(sp.fd[1]) == 0);
    BOOST_TEST(a.fb.out_done());
    BOOST_TEST(b.fb.out_done());  // (its shutdown too)
    const char *why = "";
    // A: B's count (120) lies in [acked 100, posted 140]; B resends from 30, A holds 45:
    // 15 bytes skipped, then B's 45..60 and its end.
    BOOST_TEST(a.fb.take_peer(sp.fd[0], 100, 140, 64, &why) == 1, why);
    BOOST_TEST(read_n(sp.fd[0], 100) == expected(1, 45, 60));
    char c;
    BOOST_TEST(recv(sp.fd[0], &c, 1, MSG_DONTWAIT) == 0);  // B shut down writing
    // B: A's count 45 in [30, 60]; A resends from 100, B holds 120: 20 skipped.
    BOOST_TEST(b.fb.take_peer(sp.fd[1], 30, 60, 64, &why) == 1, why);
    BOOST_TEST(read_n(sp.fd[1], 100) == expected(0, 120, 150));
}

BOOST_AUTO_TEST_CASE(frame_in_pieces_and_peer_first)
{
    const neg::Nonce n = nonce(8);
    // What A writes (its frame, then its stream's bytes 10..20), captured.
    SocketPair capture;
    End a;
    a.stage(0, 10, 20);
    a.fb.begin(0, 10, 20, false, n, {a.staging, sizeof a.staging});
    BOOST_TEST(!a.fb.out_done());
    BOOST_TEST(a.fb.push(capture.fd[0]) == 0);
    BOOST_TEST(a.fb.out_done());
    const std::string bytes = read_n(capture.fd[1], neg::kFallbackSize + 10);
    BOOST_REQUIRE(bytes.size() == neg::kFallbackSize + 10);
    // B gets them in two pieces, before it fell back itself.
    SocketPair feed;
    FallbackPath b;
    const char *why = "";
    BOOST_TEST(write(feed.fd[0], bytes.data(), 20) == 20);
    BOOST_TEST(b.read_peer_frame(feed.fd[1], n, &why) == 0);  // 20 of its 32 bytes
    BOOST_TEST(!b.have_peer());
    BOOST_TEST(write(feed.fd[0], bytes.data() + 20, bytes.size() - 20) == static_cast<ssize_t>(bytes.size() - 20));
    BOOST_TEST(b.read_peer_frame(feed.fd[1], n, &why) == 1, why);
    BOOST_TEST(b.have_peer());
    BOOST_TEST(b.peer_count() == 0u);
    // B falls back second (it resends from A's count, 0); it holds 10 of A's stream, and
    // A resends from 10: nothing to skip.
    b.begin(10, 0, 0, false, n, {nullptr, 64});
    BOOST_TEST(!b.out_done());  // (nothing to resend: its frame all the same; once missed, a defect)
    BOOST_TEST(b.take_peer(feed.fd[1], 0, 0, 64, &why) == 1, why);
    BOOST_TEST(read_n(feed.fd[1], 10) == expected(0, 10, 20));
}

BOOST_AUTO_TEST_CASE(bad_or_missing_frames_refused)
{
    const neg::Nonce n = nonce(2);
    const char *why = "";
    {  // bytes that are no frame
        SocketPair sp;
        FallbackPath a;
        a.begin(0, 0, 0, false, n, {nullptr, 64});
        BOOST_TEST(write(sp.fd[1], "GET / HTTP/1.1\r\n", 16) == 16);
        BOOST_TEST(a.take_peer(sp.fd[0], 0, 0, 64, &why) == -1);
    }
    {  // the stream ends before it
        SocketPair sp;
        FallbackPath a;
        a.begin(0, 0, 0, false, n, {nullptr, 64});
        BOOST_TEST(a.take_peer(sp.fd[0], 0, 0, 64, &why) == 0);  // nothing yet
        shutdown(sp.fd[1], SHUT_WR);
        BOOST_TEST(a.take_peer(sp.fd[0], 0, 0, 64, &why) == -1);
    }
    {  // another connection's frame (its nonce)
        SocketPair sp;
        FallbackPath other, a;
        other.begin(0, 0, 0, false, nonce(3), {nullptr, 64});
        BOOST_TEST(other.push(sp.fd[1]) == 0);
        a.begin(0, 0, 0, false, n, {nullptr, 64});
        BOOST_TEST(a.take_peer(sp.fd[0], 0, 0, 64, &why) == -1);
    }
    {  // a count beyond what we posted, and a start ahead of what we hold
        for (int k = 0; k < 2; ++k) {
            SocketPair sp;
            FallbackPath peer, a;
            peer.begin(k == 0 ? 500 : 50, k == 0 ? 10 : 90, k == 0 ? 10 : 90, false, n, {nullptr, 64});
            BOOST_TEST(peer.push(sp.fd[1]) == 0);
            a.begin(80, 0, 0, false, n, {nullptr, 64});
            // ours: acked 40, posted 100; we hold 80 of the peer's stream
            BOOST_TEST(a.take_peer(sp.fd[0], 40, 100, 64, &why) == -1, "case " << k);
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
