// The connection's parts that need no device: the switchover's state machine (the only
// writer of the phase), the shadow eventfds' levels, and the wait's deadline and spin.
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <netinet/in.h>
#include <poll.h>
#include <thread>
#include <sys/socket.h>
#include <unistd.h>

#include "conn/shadows.hh"
#include "conn/switchover.hh"
#include "conn/wait.hh"

using rdmasock::Shadows;
using rdmasock::Switchover;
using Phase = Switchover::Phase;
using Event = Switchover::Event;

BOOST_AUTO_TEST_SUITE(switchover)

BOOST_AUTO_TEST_CASE(client_maybe_to_rdma_once)
{
    Switchover s;
    BOOST_TEST((s.phase() == Phase::maybe));
    BOOST_TEST(s.on(Event::client_switch));
    BOOST_TEST((s.phase() == Phase::rdma));
    // Nothing leaves rdma: not a second switch, not a decision for TCP.
    BOOST_TEST(!s.on(Event::client_switch));
    BOOST_TEST(!s.on(Event::decide_tcp));
    BOOST_TEST(!s.on(Event::server_unverify));
    BOOST_TEST((s.phase() == Phase::rdma));
}

BOOST_AUTO_TEST_CASE(server_verify_unverify_switch)
{
    Switchover s;
    BOOST_TEST(!s.on(Event::server_switch));  // not verifying
    BOOST_TEST(s.on(Event::server_verify));
    BOOST_TEST((s.phase() == Phase::verifying));
    BOOST_TEST(s.verify_watched());  // the progress thread takes the SWITCH in
    BOOST_TEST(s.on(Event::server_unverify));
    BOOST_TEST((s.phase() == Phase::maybe));
    BOOST_TEST(s.on(Event::server_verify));
    BOOST_TEST(s.on(Event::server_switch));
    BOOST_TEST((s.phase() == Phase::rdma));
}

BOOST_AUTO_TEST_CASE(tcp_is_final)
{
    for (bool verifying : {false, true}) {
        Switchover s;
        if (verifying)
            BOOST_TEST(s.on(Event::server_verify));
        BOOST_TEST(s.on(Event::decide_tcp));
        BOOST_TEST((s.phase() == Phase::tcp));
        for (Event e : {Event::client_switch, Event::server_verify, Event::server_unverify, Event::server_switch,
                        Event::decide_tcp})
            BOOST_TEST(!s.on(e));
        BOOST_TEST((s.phase() == Phase::tcp));
    }
}

BOOST_AUTO_TEST_CASE(switch_offset_and_prefix)
{
    Switchover srv;
    srv.took_from_tcp(10);
    BOOST_TEST(!srv.accept_switch(20));  // not verifying
    BOOST_TEST(srv.on(Event::server_verify));
    BOOST_TEST(srv.tcp_limit() == 0u);  // nothing delivered before the SWITCH is known
    BOOST_TEST(!srv.accept_switch(9));   // behind what was delivered
    BOOST_TEST(srv.accept_switch(20));
    BOOST_TEST(!srv.accept_switch(20));  // only once
    BOOST_TEST(srv.tcp_limit() == 10u);
    BOOST_TEST(srv.before_switch_offset());
    srv.took_from_tcp(10);
    BOOST_TEST(srv.at_switch_offset());

    Switchover cli;
    BOOST_TEST(cli.tcp_limit() == UINT64_MAX);  // maybe: every TCP byte is the program's
    cli.took_from_tcp(5);
    BOOST_TEST(!cli.accept_prefix(4));
    BOOST_TEST(cli.accept_prefix(8));
    BOOST_TEST(!cli.accept_prefix(8));
    BOOST_TEST(cli.prefix_left() == 3u);
    BOOST_TEST(cli.prefix_cap(100) == 3u);
    cli.took_from_tcp(3);
    BOOST_TEST(cli.prefix_done());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(shadows)

namespace {
short revents(int fd, short events)
{
    pollfd p{fd, events, 0};
    return poll(&p, 1, 0) > 0 ? p.revents : 0;
}
}  // namespace

BOOST_AUTO_TEST_CASE(levels_follow_set)
{
    Shadows sh;
    BOOST_TEST_REQUIRE(sh.ok());
    BOOST_TEST(revents(sh.rd_fd(), POLLIN) == 0);
    BOOST_TEST((revents(sh.wr_fd(), POLLOUT) & POLLOUT) != 0);
    sh.set(true, false);
    BOOST_TEST((revents(sh.rd_fd(), POLLIN) & POLLIN) != 0);
    BOOST_TEST((revents(sh.wr_fd(), POLLOUT) & POLLOUT) == 0);
    sh.set(true, false);  // already so: no change
    BOOST_TEST(sh.readable_set());
    sh.set(false, true);
    BOOST_TEST(revents(sh.rd_fd(), POLLIN) == 0);
    BOOST_TEST((revents(sh.wr_fd(), POLLOUT) & POLLOUT) != 0);
    // A wake-up the level does not hold is drained as stale.
    sh.wake();
    BOOST_TEST((revents(sh.rd_fd(), POLLIN) & POLLIN) != 0);
    sh.drain_stale();
    BOOST_TEST(revents(sh.rd_fd(), POLLIN) == 0);
}

BOOST_AUTO_TEST_CASE(watchers)
{
    Shadows sh;
    BOOST_TEST(!sh.watched());
    BOOST_TEST(sh.add_users(1) == 0);
    BOOST_TEST(sh.watched());
    BOOST_TEST(sh.add_users(-1) == 1);
    sh.sleep_begin();
    BOOST_TEST(sh.watched());
    sh.sleep_end();
    BOOST_TEST(!sh.watched());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(waits)

BOOST_AUTO_TEST_CASE(deadline_from_the_socket_timeout)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    BOOST_TEST_REQUIRE(fd >= 0);
    rdmasock::waits::Deadline dl;
    bool has = true;
    BOOST_TEST(rdmasock::waits::sleep_limit(fd, false, dl, {}, &has) == -1);  // no timeout: no limit
    BOOST_TEST(!has);
    timeval tv{0, 200000};
    BOOST_TEST_REQUIRE(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
    int ms = rdmasock::waits::sleep_limit(fd, false, dl, {}, &has);
    BOOST_TEST(has);
    BOOST_TEST(ms > 0);
    BOOST_TEST(ms <= 200);
    // The deadline is the call's: a later wait of the same call has less left, and none
    // once it has passed.
    rdmasock::waits::Deadline past;
    past.set = true;
    past.at = rdmasock::waits::Clock::now() - std::chrono::milliseconds(1);
    BOOST_TEST(rdmasock::waits::sleep_limit(fd, false, past, {}, &has) == -EAGAIN);
    BOOST_TEST(rdmasock::waits::sleep_limit(fd, true, dl, {}, &has) == -1);  // SO_SNDTIMEO unset
    close(fd);
}

// The adaptive spin: a connection whose data comes soon spins every wait; one whose data
// comes late (or never) spins on one wait in 16 only, and spins again once a spin finds
// data or its data comes soon again.
BOOST_AUTO_TEST_CASE(adaptive_spin)
{
    constexpr long us = 50;
    rdmasock::waits::AdaptiveSpin a;
    BOOST_TEST(a.budget_us(us) == us);  // the first wait
    a.spun(true);
    a.came_after(10'000, us);
    for (int i = 0; i < 100; ++i) {  // answers after 10 to 190 us: every wait spins
        BOOST_TEST_REQUIRE(a.budget_us(us) == us);
        const bool found = i % 2 == 0;
        a.spun(found);
        a.came_after(found ? 10'000 : 190'000, us);
    }
    // Idle: each wait's data comes after seconds.
    a.spun(false);
    a.came_after(5'000'000'000, us);
    a.came_after(5'000'000'000, us);
    a.came_after(5'000'000'000, us);
    int spins = 0;
    for (int i = 0; i < 160; ++i)
        if (a.budget_us(us) > 0) {
            ++spins;
            a.spun(false);
            a.came_after(5'000'000'000, us);
        }
    BOOST_TEST(spins == 10);  // one wait in 16
    // A look that finds data soon: the next waits spin.
    while (a.budget_us(us) == 0) {
    }
    a.spun(true);
    a.came_after(20'000, us);
    BOOST_TEST(a.budget_us(us) == us);
    // Data soon again while sleeping (a sleep whose data came within 4 spins on
    // average), after one spin that found nothing: spins.
    rdmasock::waits::AdaptiveSpin b;
    for (int i = 0; i < 8; ++i)
        b.came_after(5'000'000'000, us);
    b.spun(false);
    BOOST_TEST(b.budget_us(us) == 0);
    for (int i = 0; i < 12; ++i)
        b.came_after(100'000, us);
    BOOST_TEST(b.budget_us(us) == us);
    // A paced stream: its data comes every 100 us, always just after the spin: about
    // 11 spins find nothing, then one wait in 16 spins.
    rdmasock::waits::AdaptiveSpin c;
    int paced = 0;
    for (int i = 0; i < 160; ++i)
        if (c.budget_us(us) > 0) {
            ++paced;
            c.spun(false);
            c.came_after(100'000, us);
        } else {
            c.came_after(100'000, us);
        }
    BOOST_TEST(paced <= 11 + 10);
    // RDMASOCK_SPIN_US=0 never reaches here: the connection does not ask (conn_io.cc).
}

// A thread that spins again and again, as a call that goes round its loop does, never
// keeps another thread waiting for the lock: neither while its predicate is false (the
// lock is given up between two looks) nor when it holds at once (a call that cannot go
// on although the predicate holds: it used to keep the lock for as long as it went
// round).  The waiter here takes the lock within 200 ms of asking, ten times over, while
// the spinner runs for up to 5 s.
BOOST_AUTO_TEST_CASE(spin_gives_way_to_waiters)
{
    for (bool found_at_once : {true, false}) {
        rdmasock::util::WaitedMutex mu;
        std::atomic<bool> stop{false};
        std::atomic<long> spins{0};
        std::thread spinner([&] {
            std::unique_lock<rdmasock::util::WaitedMutex> lk(mu);
            const auto end = rdmasock::waits::Clock::now() + std::chrono::seconds(5);
            while (!stop.load() && rdmasock::waits::Clock::now() < end) {
                rdmasock::waits::Clock::time_point from{};
                rdmasock::waits::spin(lk, 50, [&] { return found_at_once; }, &from);
                spins.fetch_add(1);
            }
        });
        while (spins.load() == 0)
            std::this_thread::yield();
        double worst_ms = 0;
        for (int i = 0; i < 10; ++i) {
            const auto t0 = rdmasock::waits::Clock::now();
            {
                std::lock_guard<rdmasock::util::WaitedMutex> g(mu);
            }
            const double ms = std::chrono::duration<double, std::milli>(rdmasock::waits::Clock::now() - t0).count();
            worst_ms = ms > worst_ms ? ms : worst_ms;
        }
        stop.store(true);
        spinner.join();
        BOOST_TEST(worst_ms < 200.0, (found_at_once ? "found at once" : "never found") << ": a waiter waited "
                                                                                        << worst_ms << " ms");
        BOOST_TEST(!mu.wanted());
    }
}

BOOST_AUTO_TEST_SUITE_END()
