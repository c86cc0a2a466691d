// The library's own descriptors (base/fd.hh): moved high, kept open by a program's
// close_range() and closefrom(), forgotten when closed or replaced.
#include <boost/test/unit_test.hpp>

#include <cerrno>
#include <fcntl.h>
#include <linux/close_range.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include "base/fd.hh"

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
    BOOST_CHECK_EQUAL(util::close_range_but_own(static_cast<unsigned>(below), ~0u, 0), 0);
    BOOST_CHECK(is_open(d));
    BOOST_CHECK(!is_open(above));
    BOOST_CHECK(!is_open(below));
    BOOST_CHECK(is_open(p[0]) && is_open(p[1]));
    BOOST_CHECK_EQUAL(util::close_own(d), 0);
    BOOST_CHECK(!util::owned(d) && !is_open(d));
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

BOOST_AUTO_TEST_SUITE_END()
