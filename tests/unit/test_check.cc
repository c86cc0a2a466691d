// A broken invariant logs the condition and a libunwind backtrace, then aborts.
#include <csignal>
#include <cstring>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include "base/check.hh"

namespace {
__attribute__((noinline)) void deep_frame(int x)
{
    RS_CHECK(x == 0);  // fails for x != 0
}
}  // namespace

BOOST_AUTO_TEST_SUITE(check)

BOOST_AUTO_TEST_CASE(broken_invariant_logs_a_backtrace_and_aborts)
{
    int p[2];
    BOOST_REQUIRE_EQUAL(pipe(p), 0);
    pid_t pid = fork();
    BOOST_REQUIRE(pid >= 0);
    if (pid == 0) {
        dup2(p[1], STDERR_FILENO);
        close(p[0]);
        signal(SIGABRT, SIG_DFL);
        deep_frame(7);
        _exit(0);  // not reached
    }
    close(p[1]);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(p[0], buf, sizeof buf)) > 0)
        out.append(buf, static_cast<size_t>(n));
    close(p[0]);
    int status = 0;
    BOOST_REQUIRE_EQUAL(waitpid(pid, &status, 0), pid);
    BOOST_TEST_MESSAGE(out);
    BOOST_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    BOOST_CHECK(out.find("internal invariant broken") != std::string::npos);
    BOOST_CHECK(out.find("x == 0") != std::string::npos);
    BOOST_CHECK(out.find("test_check.cc") != std::string::npos);
    // The backtrace names the frames that led there (symbols from libunwind).
    BOOST_CHECK(out.find("#0 ") != std::string::npos);
    BOOST_CHECK(out.find("deep_frame") != std::string::npos);
    BOOST_CHECK(out.find("broken_invariant_logs_a_backtrace_and_aborts") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
