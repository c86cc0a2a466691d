// Peers: what probes teach the engine about peers.  Only a definitive answer is cached;
// a timeout marks the host unanswered (backoff, at most kUnansweredProbes at once) and
// the first answer clears it; connect()'s wait follows the answers measured.
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "engine/peers.hh"
#include "process/runtime.hh"

using rdmasock::Reason;
using rdmasock::offload::Peers;

namespace {

sockaddr_in addr(const char *ip, int port)
{
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}
const sockaddr *sa(const sockaddr_in &a) { return reinterpret_cast<const sockaddr *>(&a); }

}  // namespace

BOOST_AUTO_TEST_SUITE(peers)

BOOST_AUTO_TEST_CASE(a_timeout_is_not_cached)
{
    Peers p;
    auto a = addr("10.0.0.1", 80);
    bool backoff = true;
    BOOST_CHECK(p.admit(sa(a), &backoff) == Reason::none);
    BOOST_CHECK(!backoff);
    p.remember(sa(a), Reason::timeout);
    BOOST_CHECK(p.admit(sa(a), &backoff) == Reason::none);  // probed again
    BOOST_CHECK(backoff);                                   // with a longer wait
    auto other_port = addr("10.0.0.1", 81);
    BOOST_CHECK(p.admit(sa(other_port), &backoff) == Reason::none && backoff);  // the host's mark
    p.remember(sa(a), Reason::none);  // an answer clears it
    BOOST_CHECK(p.admit(sa(a), &backoff) == Reason::none && !backoff);
}

BOOST_AUTO_TEST_CASE(unanswered_host_gets_a_few_probes_at_once)
{
    Peers p;
    auto a = addr("10.0.0.2", 80);
    p.remember(sa(a), Reason::timeout);
    bool backoff = false;
    for (int i = 0; i < Peers::kUnansweredProbes; ++i) {
        BOOST_CHECK(p.admit(sa(a), &backoff) == Reason::none);
        p.started(sa(a));
    }
    BOOST_CHECK(p.admit(sa(a), &backoff) == Reason::timeout);  // the excess stays on TCP
    p.ended(sa(a));
    BOOST_CHECK(p.admit(sa(a), &backoff) == Reason::none);
    // A host that answered is not limited.
    auto b = addr("10.0.0.3", 80);
    for (int i = 0; i < 2 * Peers::kUnansweredProbes; ++i)
        p.started(sa(b));
    BOOST_CHECK(p.admit(sa(b), &backoff) == Reason::none && !backoff);
}

BOOST_AUTO_TEST_CASE(definitive_answers_are_cached_per_port_or_host)
{
    Peers p;
    auto a = addr("10.0.0.4", 80), a2 = addr("10.0.0.4", 81);
    bool backoff = false;
    p.remember(sa(a), Reason::peer_no_rdmasock);  // no RDMA listener on that port
    BOOST_CHECK(p.admit(sa(a), &backoff) == Reason::peer_no_rdmasock);
    BOOST_CHECK(p.admit(sa(a2), &backoff) == Reason::none);
    auto h = addr("10.0.0.5", 80), h2 = addr("10.0.0.5", 9);
    p.remember(sa(h), Reason::no_route);  // about the host
    BOOST_CHECK(p.admit(sa(h2), &backoff) == Reason::no_route);
    p.remember(sa(h2), Reason::none);  // rdmasock answered there: forgotten
    BOOST_CHECK(p.admit(sa(h), &backoff) == Reason::none);
    p.clear();
    BOOST_CHECK(p.admit(sa(a), &backoff) == Reason::none);
}

BOOST_AUTO_TEST_CASE(the_wait_follows_the_answers)
{
    using us = rdmasock::Estimate::us;
    Peers p;
    const long probe_us = rdmasock::rt::config().probe_timeout_ms * 1000;
    auto wait_us = [&](bool backoff) {
        return std::chrono::duration_cast<us>(p.answer_wait(backoff)).count();
    };
    BOOST_CHECK_EQUAL(wait_us(false), probe_us);  // nothing measured: the tunable
    BOOST_CHECK_EQUAL(wait_us(true), 2 * probe_us);
    p.answered_in(us(4 * probe_us));  // slow answers: the wait grows past the tunable
    BOOST_CHECK_GT(wait_us(false), 4 * probe_us);
}

BOOST_AUTO_TEST_SUITE_END()
