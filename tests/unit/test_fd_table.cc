#include <atomic>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "process/fd_table.hh"

using namespace rdmasock;

BOOST_AUTO_TEST_SUITE(fd_table)

BOOST_AUTO_TEST_CASE(install_get_remove_round_trip)
{
    unsigned live0 = live_sockets();
    {
        SocketRef s = Socket::create(AF_INET, SOCK_STREAM);
        BOOST_REQUIRE(s);
        BOOST_CHECK_EQUAL(s->refs(), 1u);
        BOOST_CHECK(!fdt::install(7, s));
        BOOST_CHECK_EQUAL(s->refs(), 2u);
        BOOST_CHECK_EQUAL(fdt::peek(7), s.get());
        BOOST_CHECK(!fdt::offloaded(7));
        SocketRef g = fdt::get(7);
        BOOST_CHECK_EQUAL(g.get(), s.get());
        BOOST_CHECK_EQUAL(s->refs(), 3u);
        SocketRef r = fdt::remove(7);
        BOOST_CHECK_EQUAL(r.get(), s.get());
        BOOST_CHECK(!fdt::get(7));
        BOOST_CHECK(fdt::peek(7) == nullptr);
    }
    BOOST_CHECK_EQUAL(live_sockets(), live0);
}

BOOST_AUTO_TEST_CASE(out_of_range_fds_are_never_tracked)
{
    SocketRef s = Socket::create(AF_INET, SOCK_STREAM);
    bool ok = true;
    fdt::install(-1, s, &ok);
    BOOST_CHECK(!ok);
    fdt::install(static_cast<int>(fdt::kMaxFd), s, &ok);
    BOOST_CHECK(!ok);
    BOOST_CHECK(fdt::peek(-1) == nullptr);
    BOOST_CHECK(!fdt::get(-5));
    BOOST_CHECK_EQUAL(s->refs(), 1u);
}

BOOST_AUTO_TEST_CASE(offloaded_flag_is_per_socket_and_seen_through_every_fd)
{
    SocketRef s = Socket::create(AF_INET6, SOCK_STREAM);
    fdt::install(100, s);
    fdt::install(5000, s);  // a dup in another chunk
    s->set_offloaded(true);
    BOOST_CHECK(fdt::offloaded(100));
    BOOST_CHECK(fdt::offloaded(5000));
    BOOST_CHECK(!fdt::offloaded(101));
    s->set_offloaded(false);
    fdt::remove(100);
    fdt::remove(5000);
}

BOOST_AUTO_TEST_CASE(replacing_an_occupant_returns_it)
{
    SocketRef a = Socket::create(AF_INET, SOCK_STREAM);
    SocketRef b = Socket::create(AF_INET, SOCK_STREAM);
    fdt::install(9, a);
    SocketRef old = fdt::install(9, b);
    BOOST_CHECK_EQUAL(old.get(), a.get());
    BOOST_CHECK_EQUAL(fdt::get(9).get(), b.get());
    fdt::remove(9);
}

BOOST_AUTO_TEST_CASE(recycled_blocks_are_reused)
{
    Socket *first;
    {
        SocketRef s = Socket::create(AF_INET, SOCK_STREAM);
        first = s.get();
    }
    SocketRef again = Socket::create(AF_INET, SOCK_STREAM);
    BOOST_CHECK_EQUAL(again.get(), first);  // LIFO free list: type-stable memory
}

// One thread closes fds and reuses their numbers at once while others look them up and
// use what they get.  A reader must never hold a socket that has been recycled: each
// socket carries a stamp (its `type` field) that is set at creation and checked after use.
BOOST_AUTO_TEST_CASE(close_and_reuse_race_under_threads)
{
    constexpr int kFds = 64;
    constexpr int kBase = 20000;
    constexpr int kRounds = 200000;
    unsigned live0 = live_sockets();
    std::atomic<bool> stop{false};
    std::atomic<long> lookups{0}, hits{0}, bad{0};

    auto stamp = [](int fd, unsigned gen) { return (fd << 12) | static_cast<int>(gen & 0xfff); };
    for (int i = 0; i < kFds; ++i) {
        SocketRef s = Socket::create(AF_INET, stamp(i, 0));
        fdt::install(kBase + i, s);
    }

    std::vector<std::thread> readers;
    for (int t = 0; t < 3; ++t)
        readers.emplace_back([&, t] {
            unsigned x = 12345u + static_cast<unsigned>(t);
            while (!stop.load(std::memory_order_relaxed)) {
                x = x * 1103515245u + 12345u;
                int i = static_cast<int>((x >> 8) % kFds);
                SocketRef s = fdt::get(kBase + i);
                lookups.fetch_add(1, std::memory_order_relaxed);
                if (!s)
                    continue;
                hits.fetch_add(1, std::memory_order_relaxed);
                int before = s->type;
                if ((before >> 12) != i || s->refs() == 0)
                    bad.fetch_add(1);
                for (int spin = 0; spin < 20; ++spin)
                    std::atomic_signal_fence(std::memory_order_seq_cst);
                if (s->type != before)
                    bad.fetch_add(1);  // recycled while we held a reference
            }
        });

    std::thread closer([&] {
        unsigned gen = 1;
        for (int r = 0; r < kRounds; ++r, ++gen) {
            int i = r % kFds;
            SocketRef old = fdt::remove(kBase + i);  // close(fd)
            old = SocketRef();                        // last table reference dropped
            SocketRef s = Socket::create(AF_INET, stamp(i, gen));  // fd number reused
            fdt::install(kBase + i, s);
        }
        stop = true;
    });
    closer.join();
    for (auto &t : readers)
        t.join();

    for (int i = 0; i < kFds; ++i)
        fdt::remove(kBase + i);
    BOOST_TEST_MESSAGE("lookups " << lookups << ", hits " << hits);
    BOOST_CHECK_EQUAL(bad.load(), 0);
    BOOST_CHECK_GT(hits.load(), 0);
    BOOST_CHECK_EQUAL(live_sockets(), live0);
}

BOOST_AUTO_TEST_SUITE_END()
