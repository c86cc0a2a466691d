// Registry: the table a listener's processes share (which process accepted which
// connection), and the DECLINE that sends a request on to that process's port.
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include "process/registry.hh"
#include "wire/negotiate.hh"

using rdmasock::Reason;
using rdmasock::Registry;

namespace {

struct Table {
    Registry *r = Registry::create();
    ~Table() { Registry::destroy(r); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(registry)

BOOST_AUTO_TEST_CASE(put_find_erase)
{
    Table t;
    BOOST_REQUIRE(t.r != nullptr);
    Registry::Entry e;
    BOOST_CHECK(!t.r->find(42, 1000, &e));
    BOOST_CHECK(t.r->put(42, {1234, 40000}, 2000, 1000));
    BOOST_REQUIRE(t.r->find(42, 1500, &e));
    BOOST_CHECK_EQUAL(e.pid, 1234);
    BOOST_CHECK_EQUAL(e.port, 40000);
    BOOST_CHECK(!t.r->find(43, 1500, &e));
    // Refreshed in place (one slot per key).
    BOOST_CHECK(t.r->put(42, {1234, 40001}, 3000, 1500));
    BOOST_REQUIRE(t.r->find(42, 2500, &e));
    BOOST_CHECK_EQUAL(e.port, 40001);
    t.r->erase(42, 999);  // another process's erase leaves it
    BOOST_CHECK(t.r->find(42, 2500, &e));
    t.r->erase(42, 1234);
    BOOST_CHECK(!t.r->find(42, 2500, &e));
}

BOOST_AUTO_TEST_CASE(entries_expire)
{
    Table t;
    Registry::Entry e;
    BOOST_CHECK(t.r->put(7, {1, 2}, 2000, 1000));
    BOOST_CHECK(t.r->find(7, 1999, &e));
    BOOST_CHECK(!t.r->find(7, 2000, &e));  // a worker that died leaves nothing for long
}

BOOST_AUTO_TEST_CASE(full_around_a_key_then_free_again)
{
    Table t;
    // Keys with the same home slot fill its probe window, and no more fit.
    for (uint64_t i = 0; i < Registry::kProbe; ++i)
        BOOST_CHECK(t.r->put(5 + i * Registry::kSlots, {1, 1}, 2000, 1000));
    BOOST_CHECK(!t.r->put(5 + Registry::kProbe * Registry::kSlots, {1, 1}, 2000, 1000));
    // Once they expire, their slots are taken again.
    BOOST_CHECK(t.r->put(5 + Registry::kProbe * Registry::kSlots, {1, 1}, 4000, 2000));
    Registry::Entry e;
    BOOST_CHECK(t.r->find(5 + Registry::kProbe * Registry::kSlots, 3000, &e));
}

BOOST_AUTO_TEST_CASE(shared_with_fork_children)
{
    // The table is mapped before the fork; what a child records, the parent finds.
    Table t;
    pid_t p = fork();
    BOOST_REQUIRE(p >= 0);
    if (p == 0)
        _exit(t.r->put(99, {getpid(), 41000}, 5000, 1000) ? 0 : 1);
    int st = 0;
    BOOST_REQUIRE_EQUAL(waitpid(p, &st, 0), p);
    BOOST_REQUIRE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    Registry::Entry e;
    BOOST_REQUIRE(t.r->find(99, 2000, &e));
    BOOST_CHECK_EQUAL(e.pid, p);
    BOOST_CHECK_EQUAL(e.port, 41000);
}

BOOST_AUTO_TEST_CASE(key_names_the_bytes)
{
    const uint8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
    BOOST_CHECK_EQUAL(rdmasock::registry_key(a, 4), rdmasock::registry_key(a, 4));
    BOOST_CHECK_NE(rdmasock::registry_key(a, 4), rdmasock::registry_key(b, 4));
    BOOST_CHECK_NE(rdmasock::registry_key(a, 0), 0u);  // 0 is never a name
}

BOOST_AUTO_TEST_CASE(redirect_round_trip)
{
    namespace neg = rdmasock::neg;
    uint8_t d[neg::kDeclineSize];
    neg::encode_redirect(43210, d);
    BOOST_CHECK(neg::is_decline(d, sizeof d));
    BOOST_CHECK(neg::decode_decline(d, sizeof d) == Reason::redirected);
    BOOST_CHECK_EQUAL(neg::decode_redirect(d, sizeof d), 43210);
    // Any other DECLINE names no port, whatever its last bytes.
    neg::encode_decline(Reason::limit, d);
    d[6] = 0x12;
    d[7] = 0x34;
    BOOST_CHECK_EQUAL(neg::decode_redirect(d, sizeof d), 0);
    BOOST_CHECK_EQUAL(neg::decode_redirect(d, 4), 0);
    BOOST_CHECK_EQUAL(neg::decode_redirect(nullptr, 8), 0);
}

BOOST_AUTO_TEST_SUITE_END()
