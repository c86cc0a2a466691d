// Estimate: the set-up time estimate connect() waits by (RFC 6298's smoothed mean and
// deviation, a bound of mean + 4 x deviation within a floor and a ceiling).
#include <boost/test/unit_test.hpp>

#include "base/estimate.hh"

using rdmasock::Estimate;
using us = Estimate::us;

BOOST_AUTO_TEST_SUITE(estimate)

BOOST_AUTO_TEST_CASE(no_sample_gives_the_floor)
{
    Estimate e;
    BOOST_CHECK(e.empty());
    BOOST_CHECK_EQUAL(e.bound(us(50000), us(600000)).count(), 50000);
}

BOOST_AUTO_TEST_CASE(first_sample_is_mean_and_half_deviation)
{
    Estimate e;
    e.sample(us(100000));  // a slow first set-up: 100 ms
    BOOST_CHECK_EQUAL(e.mean().count(), 100000);
    BOOST_CHECK_EQUAL(e.deviation().count(), 50000);
    // 100 + 4 x 50 = 300 ms: above a 50 ms floor, so a 50 ms tunable no longer decides.
    BOOST_CHECK_EQUAL(e.bound(us(50000), us(600000)).count(), 300000);
    // ... and never above the ceiling (the time that still leaves room to switch).
    BOOST_CHECK_EQUAL(e.bound(us(50000), us(200000)).count(), 200000);
}

BOOST_AUTO_TEST_CASE(steady_samples_converge_and_tighten)
{
    Estimate e;
    for (int i = 0; i < 100; ++i)
        e.sample(us(2000));
    BOOST_CHECK_EQUAL(e.samples(), 100u);
    BOOST_CHECK(e.mean().count() >= 1990 && e.mean().count() <= 2010);
    BOOST_CHECK(e.deviation().count() < 100);
    // Set-up takes 2 ms: the bound is the floor.
    BOOST_CHECK_EQUAL(e.bound(us(50000), us(600000)).count(), 50000);
}

BOOST_AUTO_TEST_CASE(a_slower_period_raises_the_bound)
{
    Estimate e;
    for (int i = 0; i < 20; ++i)
        e.sample(us(10000));
    const auto before = e.bound(us(1000), us(10000000)).count();
    for (int i = 0; i < 5; ++i)
        e.sample(us(200000));  // the machine got loaded
    const auto after = e.bound(us(1000), us(10000000)).count();
    BOOST_CHECK_MESSAGE(after > 200000, "bound " << after << " us after 200 ms samples (was " << before << ")");
    BOOST_CHECK(after > before);
}

BOOST_AUTO_TEST_CASE(negative_sample_counts_as_zero)
{
    Estimate e;
    e.sample(us(-5));
    BOOST_CHECK_EQUAL(e.mean().count(), 0);
    BOOST_CHECK_EQUAL(e.bound(us(7), us(100)).count(), 7);
}

BOOST_AUTO_TEST_SUITE_END()
