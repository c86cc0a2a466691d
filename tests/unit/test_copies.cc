// copies: the table an owner of connections with RDMA bound shares with the fork
// children that hold copies of them (process/copies.hh).
#include <boost/test/unit_test.hpp>

#include <csignal>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "process/copies.hh"

namespace copies = rdmasock::copies;
using copies::State;

namespace {

// A child that waits until it is killed (or, with `then`, runs it and exits).
template <class F>
pid_t child(F then)
{
    const pid_t p = fork();
    if (p == 0) {
        then();
        _exit(0);
    }
    return p;
}

void reap(pid_t p)
{
    int st = 0;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(copies_table)

BOOST_AUTO_TEST_CASE(states_and_ids)
{
    copies::Ref r = copies::add();
    BOOST_REQUIRE(r);
    BOOST_CHECK(copies::mapped());
    BOOST_CHECK(copies::state(r) == State::owned);
    BOOST_CHECK_EQUAL(copies::owner(r), getpid());
    BOOST_CHECK(copies::move(r, State::owned, State::wanted));
    BOOST_CHECK(!copies::move(r, State::owned, State::wanted));  // (once)
    copies::Ref refs[4];
    BOOST_REQUIRE_EQUAL(copies::wanted(refs, 4), 1u);
    BOOST_CHECK_EQUAL(refs[0].id, r.id);
    BOOST_CHECK(copies::move(r, State::wanted, State::tcp));
    BOOST_CHECK_EQUAL(copies::wanted(refs, 4), 0u);
    // No holder: the release frees the slot, and its old id reads as ended.
    copies::release(r);
    BOOST_CHECK(copies::state(r) == State::ended);
    copies::Ref other = copies::add();
    BOOST_REQUIRE(other);
    BOOST_CHECK(other.id != r.id);
    BOOST_CHECK(copies::state(r) == State::ended);
    copies::release(other);
}

BOOST_AUTO_TEST_CASE(holders_live_and_die)
{
    copies::Ref r = copies::add();
    BOOST_REQUIRE(r);
    BOOST_CHECK(!copies::held(r));
    copies::add_holder(r, getpid());  // (this process itself never counts)
    BOOST_CHECK(!copies::held(r));
    copies::drop_holder(r);
    const pid_t p = child([] { pause(); });
    copies::add_holder(r, p);
    BOOST_CHECK(copies::held(r));
    BOOST_CHECK(copies::watching());
    // Exited and not reaped yet: not alive any more.
    kill(p, SIGKILL);
    for (int i = 0; i < 200 && copies::alive(p); ++i)
        usleep(5000);
    BOOST_CHECK(!copies::alive(p));
    BOOST_CHECK(!copies::held(r));
    BOOST_CHECK(!copies::watching());
    reap(p);
    copies::release(r);
    BOOST_CHECK(copies::state(r) == State::ended);
}

BOOST_AUTO_TEST_CASE(freed_by_the_last_holder)
{
    copies::Ref r = copies::add();
    BOOST_REQUIRE(r);
    int go[2];
    BOOST_REQUIRE_EQUAL(pipe(go), 0);
    // The child holds a copy, sees the owner's state, then lets it go.
    const pid_t p = child([&] {
        char b;
        if (read(go[0], &b, 1) != 1)
            _exit(3);
        if (copies::state(r) != State::tcp)
            _exit(4);
        copies::drop_holder(r);
        _exit(0);
    });
    copies::add_holder(r, p);
    copies::add_holder(r, p);  // (named once: a socket with two numbers)
    BOOST_CHECK(copies::move(r, State::owned, State::tcp));
    copies::release(r);  // a holder lives: kept for it
    BOOST_CHECK(copies::state(r) == State::tcp);
    BOOST_REQUIRE_EQUAL(write(go[1], "x", 1), 1);
    int st = 0;
    BOOST_REQUIRE_EQUAL(waitpid(p, &st, 0), p);
    BOOST_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    BOOST_CHECK(copies::state(r) == State::ended);  // freed by its drop
    close(go[0]);
    close(go[1]);
}

BOOST_AUTO_TEST_CASE(a_child_asks_its_owner)
{
    copies::Ref r = copies::add();
    BOOST_REQUIRE(r);
    const int efd = eventfd(0, EFD_CLOEXEC);
    BOOST_REQUIRE(efd >= 0);
    const int kept = dup(efd);
    copies::keep_wake(getpid(), kept);
    // The child asks (owned -> wanted) and wakes the owner, as a copy's first use does.
    const uint64_t asks = copies::asks();
    const pid_t p = child([&] {
        if (!copies::ask(r) || copies::ask(r))
            _exit(3);
        copies::wake(getppid());
        _exit(0);
    });
    pollfd pf{efd, POLLIN, 0};
    BOOST_CHECK_EQUAL(poll(&pf, 1, 5000), 1);
    reap(p);
    BOOST_CHECK(copies::state(r) == State::wanted);
    BOOST_CHECK_EQUAL(copies::asks(), asks + 1);
    // A wake-up descriptor the program closed is not written any more.
    uint64_t v;
    BOOST_CHECK_EQUAL(read(efd, &v, sizeof v), static_cast<ssize_t>(sizeof v));
    copies::on_fds_closed(0, ~0u);
    copies::wake(getpid());
    BOOST_CHECK_EQUAL(poll(&pf, 1, 0), 0);
    close(kept);
    close(efd);
    copies::release(r);
}

BOOST_AUTO_TEST_CASE(a_child_done_before_fork_returns)
{
    // The child names itself in the parent's placeholder and lets its copy go (an exec
    // that closes it) before the parent names it: it never counts as a holder.
    copies::Ref r = copies::add();
    BOOST_REQUIRE(r);
    const pid_t ph = copies::fork_placeholder();
    BOOST_CHECK(ph < 0);
    copies::add_holder(r, ph);
    BOOST_CHECK(copies::held(r));  // (a fork under way)
    int go[2];
    BOOST_REQUIRE_EQUAL(pipe(go), 0);
    const pid_t p = child([&] {
        copies::rename_holder(r, copies::fork_placeholder(), getpid());
        copies::drop_holder(r);
        char b;
        if (read(go[0], &b, 1) != 1)  // (alive until the parent has looked)
            _exit(3);
        _exit(0);
    });
    for (int i = 0; i < 400 && copies::held(r); ++i)
        usleep(5000);
    copies::rename_holder(r, ph, p);  // (too late: nothing to rename)
    BOOST_CHECK(!copies::held(r));
    BOOST_REQUIRE_EQUAL(write(go[1], "x", 1), 1);
    reap(p);
    close(go[0]);
    close(go[1]);
    copies::release(r);
    BOOST_CHECK(copies::state(r) == State::ended);
}

BOOST_AUTO_TEST_CASE(moves_only_on_its_own_slot)
{
    copies::Ref r = copies::add();
    BOOST_REQUIRE(r);
    copies::release(r);
    copies::Ref next = copies::add();  // (may take the same slot)
    BOOST_REQUIRE(next);
    // The old connection's copy asks, and its owner's settle: neither lands on `next`.
    BOOST_CHECK(!copies::ask(r));
    BOOST_CHECK(!copies::move(r, State::owned, State::tcp));
    BOOST_CHECK(copies::state(next) == State::owned);
    copies::release(next);
}

BOOST_AUTO_TEST_CASE(more_holders_than_names)
{
    copies::Ref r = copies::add();
    BOOST_REQUIRE(r);
    std::vector<pid_t> kids;
    for (int i = 0; i < 6; ++i) {
        kids.push_back(child([] { pause(); }));
        copies::add_holder(r, kids.back());
    }
    BOOST_CHECK(copies::held(r));
    for (pid_t k : kids)
        kill(k, SIGKILL);
    for (pid_t k : kids)
        reap(k);
    // Six named in four places: held while the owner has it (it cannot tell which went).
    BOOST_CHECK(copies::held(r));
    copies::release(r);
    // Dead holders are forgotten before a new one is counted as one too many.
    copies::Ref q = copies::add();
    BOOST_REQUIRE(q);
    for (int i = 0; i < 4; ++i) {
        const pid_t k = child([] {});
        reap(k);
        copies::add_holder(q, k);
    }
    const pid_t live = child([] { pause(); });
    copies::add_holder(q, live);
    BOOST_CHECK(copies::held(q));
    kill(live, SIGKILL);
    reap(live);
    BOOST_CHECK(!copies::held(q));
    copies::release(q);
    BOOST_CHECK(copies::state(q) == State::ended);
}

BOOST_AUTO_TEST_SUITE_END()
