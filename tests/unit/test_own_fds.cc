// The library's own descriptors (base/fd.hh): moved high, kept open by a program's
// close_range() and closefrom(), forgotten when closed or replaced.  And the look for
// io_uring (base/uring.hh), whose closes are among those the library cannot see.
#include <boost/test/unit_test.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <atomic>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

#include "base/fd.hh"
#include "base/maps.hh"
#include "base/uring.hh"

namespace util = rdmasock::util;

namespace {
bool is_open(int fd) { return fcntl(fd, F_GETFD) >= 0; }
}  // namespace

BOOST_AUTO_TEST_SUITE(own_fds)

BOOST_AUTO_TEST_CASE(runs_around_the_library_numbers)
{
    int p[2];
    BOOST_REQUIRE_EQUAL(pipe(p), 0);
    const int d = util::dup_high(p[0]);
    BOOST_REQUIRE_GT(d, p[1]);  // (the floor: this run's RLIMIT_NOFILE leaves one)
    BOOST_CHECK(util::owned(d));
    BOOST_CHECK(!util::owned(p[0]));
    unsigned n = 0;
    BOOST_CHECK(util::next_owned(static_cast<unsigned>(d) - 5, static_cast<unsigned>(d) + 5, &n));
    BOOST_CHECK_EQUAL(n, static_cast<unsigned>(d));
    BOOST_CHECK(!util::next_owned(static_cast<unsigned>(d) + 1, ~0u, &n));
    std::vector<std::pair<unsigned, unsigned>> runs;
    util::for_each_run_but_own(static_cast<unsigned>(d) - 2, static_cast<unsigned>(d) + 2, [&](unsigned lo, unsigned hi) {
        runs.emplace_back(lo, hi);
        return true;
    });
    const std::vector<std::pair<unsigned, unsigned>> want{{d - 2, d - 1}, {d + 1, d + 2}};
    BOOST_CHECK(runs == want);
    // The program's number just above ours, and one below: closed; ours: open.
    const int above = fcntl(p[1], F_DUPFD, d + 1), below = fcntl(p[1], F_DUPFD, d - 3);
    BOOST_REQUIRE(above > d && below < d && below >= d - 3);
    BOOST_CHECK_EQUAL(util::close_range_but_own(static_cast<unsigned>(below), static_cast<unsigned>(above), 0), 0);
    BOOST_CHECK(is_open(d));
    BOOST_CHECK(!is_open(above));
    BOOST_CHECK(!is_open(below));
    BOOST_CHECK(is_open(p[0]) && is_open(p[1]));
    BOOST_CHECK_EQUAL(util::close_own(d), 0);
    BOOST_CHECK(!util::owned(d) && !is_open(d));
    close(p[0]);
    close(p[1]);
}

// Numbers of ours side by side across a 64-bit word of the bitmap, ours at both ends of
// the range and a range of one of ours: only the program's between them close.
BOOST_AUTO_TEST_CASE(adjacent_across_a_word)
{
    int p[2];
    BOOST_REQUIRE_EQUAL(pipe(p), 0);
    std::vector<int> ours;
    while (ours.size() < 3 || ours.back() % 64 != 1) {  // (..., 64k - 1, 64k, 64k + 1)
        const int d = util::dup_high(p[0]);
        BOOST_REQUIRE(d > p[1] && (ours.empty() || d == ours.back() + 1) && ours.size() < 200);
        ours.push_back(d);
    }
    const int hole = ours[ours.size() - 2];  // 64k: the program's from now on
    util::disown(hole);
    const int mine = ours.back() + 1;
    BOOST_REQUIRE_EQUAL(fcntl(p[1], F_DUPFD, mine), mine);  // (the program's, above ours)
    const unsigned first = static_cast<unsigned>(ours[ours.size() - 3]), last = static_cast<unsigned>(ours.back());
    BOOST_CHECK_EQUAL(util::close_range_but_own(first, first, 0), 0);  // one of ours alone
    BOOST_CHECK(is_open(static_cast<int>(first)));
    BOOST_CHECK_EQUAL(util::close_range_but_own(first, last, CLOSE_RANGE_UNSHARE), 0);
    BOOST_CHECK(is_open(static_cast<int>(first)) && is_open(static_cast<int>(last)));
    BOOST_CHECK(!is_open(hole));
    BOOST_CHECK(is_open(mine));
    BOOST_CHECK_EQUAL(util::close_range_but_own(first, static_cast<unsigned>(mine), 0), 0);
    BOOST_CHECK(!is_open(mine));
    for (int d : ours)
        if (d != hole) {
            BOOST_CHECK(is_open(d));
            util::close_own(d);
        }
    close(p[0]);
    close(p[1]);
}

BOOST_AUTO_TEST_CASE(forgotten_when_the_program_takes_the_number)
{
    int p[2];
    BOOST_REQUIRE_EQUAL(pipe(p), 0);
    const int d = util::dup_high(p[0]);
    BOOST_REQUIRE(util::owned(d));
    util::disown(d);  // (the program closed or replaced it: the hooks say so)
    BOOST_CHECK(!util::owned(d));
    BOOST_CHECK_EQUAL(util::close_range_but_own(static_cast<unsigned>(d), static_cast<unsigned>(d), 0), 0);
    BOOST_CHECK(!is_open(d));
    // With CLOSE_RANGE_CLOEXEC nothing closes: the plain call.
    const int e = util::dup_high(p[1]);
    BOOST_CHECK_EQUAL(util::close_range_but_own(static_cast<unsigned>(e), static_cast<unsigned>(e), CLOSE_RANGE_CLOEXEC), 0);
    BOOST_CHECK(is_open(e));
    util::close_own(e);
    close(p[0]);
    close(p[1]);
}

// A descriptor the library makes on another thread holds the lowest number for a
// moment: the program's, made meanwhile, comes one higher; LowestFree moves it down once
// the library's is gone (and leaves it alone when no maker ran).
BOOST_AUTO_TEST_CASE(lowest_free_after_a_maker_on_another_thread)
{
    const int probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
    BOOST_REQUIRE_GE(probe, 0);
    BOOST_REQUIRE_EQUAL(close(probe), 0);  // (`probe` is the lowest free number)
    {
        // No maker: the number stays, even with a lower one free.
        const int x = open("/dev/null", O_RDONLY), y = open("/dev/null", O_RDONLY);
        BOOST_REQUIRE_EQUAL(close(x), 0);
        util::LowestFree quiet;
        BOOST_CHECK_EQUAL(quiet.fix(y), y);
        close(y);
    }
    {
        // A maker that only makes high numbers (a close of its own) is not waited for.
        util::LowestFree low;
        std::thread t([] { util::FdGate closing(util::FdGate::making, util::FdGate::high_only); });
        t.join();
        const int x = open("/dev/null", O_RDONLY), y = open("/dev/null", O_RDONLY);
        BOOST_REQUIRE_EQUAL(close(x), 0);
        BOOST_CHECK_EQUAL(low.fix(y), y);
        close(y);
    }
    util::LowestFree low;
    std::atomic<int> step{0};
    int theirs = -1;
    std::thread maker([&] {
        util::FdGate making(util::FdGate::making);
        theirs = open("/dev/null", O_RDONLY | O_CLOEXEC);
        step.store(1);
        while (step.load() != 2)
            std::this_thread::yield();
        theirs = util::move_high(theirs);
    });
    while (step.load() != 1)
        std::this_thread::yield();
    const int mine = open("/dev/null", O_RDONLY | O_CLOEXEC);
    BOOST_CHECK_EQUAL(mine, probe + 1);  // (the maker's is on `probe`)
    step.store(2);
    const int fixed = low.fix(mine);  // (waits for the maker to be done)
    maker.join();
    BOOST_CHECK_EQUAL(fixed, probe);
    BOOST_CHECK(!is_open(mine));
    BOOST_CHECK_EQUAL(fcntl(fixed, F_GETFD), FD_CLOEXEC);
    BOOST_CHECK_GT(theirs, mine);
    BOOST_CHECK(util::owned(theirs));
    close(fixed);
    util::close_own(theirs);
}

// /proc/self/maps a line at a time (base/maps.hh): a mapping made now is among the lines,
// with its start address, whole however long its file's name (the reads end mid-line);
// a callback that says stop is called no more; the descriptor is the library's own and
// closed (the lowest free number is the same before and after).
BOOST_AUTO_TEST_CASE(each_map_line_whole_and_stop)
{
    const std::string name = "rdmasock-maps-" + std::string(200, 'x');
    const int mfd = static_cast<int>(syscall(SYS_memfd_create, name.c_str(), 0));
    BOOST_REQUIRE(mfd >= 0);
    BOOST_REQUIRE(ftruncate(mfd, 4096) == 0);
    // Enough other lines that the file takes several 16 KiB reads.
    std::vector<void *> pads;
    for (int i = 0; i < 400; ++i) {
        void *p = mmap(nullptr, 4096, i % 2 ? PROT_READ : PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        BOOST_REQUIRE(p != MAP_FAILED);
        pads.push_back(p);
    }
    void *m = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, mfd, 0);
    BOOST_REQUIRE(m != MAP_FAILED);
    struct Seen {
        std::string want;
        unsigned long at;
        int lines = 0, found = 0;
        bool newline = false;
    } seen{name, reinterpret_cast<unsigned long>(m)};
    const int low = dup(0);
    close(low);
    BOOST_REQUIRE(rdmasock::util::each_map(
        [](const char *line, size_t len, void *arg) {
            auto *s = static_cast<Seen *>(arg);
            ++s->lines;
            s->newline |= memchr(line, '\n', len) != nullptr;
            // "start-end perms offset dev inode /memfd:NAME (deleted)", whole.
            const std::string l(line, len), tail = "/memfd:" + s->want + " (deleted)";
            if (strtoul(l.c_str(), nullptr, 16) == s->at && l.size() > tail.size() &&
                l.compare(l.size() - tail.size(), tail.size(), tail) == 0)
                ++s->found;
            return true;
        },
        &seen));
    BOOST_CHECK_EQUAL(seen.found, 1);
    BOOST_CHECK(seen.lines > 400);
    BOOST_CHECK(!seen.newline);
    int calls = 0;
    rdmasock::util::each_map([](const char *, size_t, void *arg) { return ++*static_cast<int *>(arg) < 3; }, &calls);
    BOOST_CHECK_EQUAL(calls, 3);
    const int after = dup(0);
    close(after);
    BOOST_CHECK_EQUAL(after, low);
    munmap(m, 4096);
    for (void *p : pads)
        munmap(p, 4096);
    close(mfd);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(uring)

// io_uring (base/uring.hh): not seen in a process without a ring, seen once one is
// mapped (as liburing makes it: raw system calls), and still seen after the ring's
// descriptor is closed (its memory stays mapped).  The process has no ring of its own
// before this case (Boost.Test makes none).
BOOST_AUTO_TEST_CASE(io_uring_seen_once_a_ring_is_mapped)
{
    BOOST_REQUIRE(!rdmasock::uring::seen());
    BOOST_CHECK(!rdmasock::uring::in_use());
    io_uring_params p{};
    const int ring = static_cast<int>(syscall(__NR_io_uring_setup, 2, &p));
    if (ring < 0) {
        BOOST_TEST_MESSAGE("no io_uring here (" << errno << "): the case checks nothing more");
        return;
    }
    // Before its memory is mapped the ring is only a descriptor: not looked for.
    const size_t len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, ring, IORING_OFF_SQ_RING);
    BOOST_REQUIRE(m != MAP_FAILED);
    close(ring);
    // A look is at most once a millisecond: the first one after the mapping may wait.
    bool found = false;
    for (int i = 0; i < 100 && !found; ++i) {
        found = rdmasock::uring::in_use();
        if (!found)
            usleep(2000);
    }
    BOOST_CHECK(found);
    BOOST_CHECK(rdmasock::uring::seen());
    munmap(m, len);
    BOOST_CHECK(rdmasock::uring::in_use());  // (sticky: a process that used one may again)
}

BOOST_AUTO_TEST_SUITE_END()
