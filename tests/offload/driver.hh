// What the Boost.Test drivers of the VM suites share (offload_tests, hostile_tests): the
// configuration both read from the environment, their work directories, case
// registration, and the per-case summary whose last line is "N passed, N failed".
// The processes, files and the device check are tests/common's.
// A driver includes this first: it has its own main (the device check comes before
// Boost.Test) and links Boost.Test dynamically.
#pragma once
#ifndef BOOST_TEST_DYN_LINK
#define BOOST_TEST_DYN_LINK
#endif
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "tests/common/files.hh"
#include "tests/common/proc.hh"

namespace offload {

// What both drivers take from the environment (main fills it, before any case runs).
struct Config {
    std::string lib;          // the preload library under test
    std::string addr;         // the RDMA address: TEST_OFFLOAD_ADDR, else RDMASOCK_VM_ADDR
    bool keep = false;        // TEST_OFFLOAD_KEEP=1: keep every case's work directory
    // lib_var names a variable that overrides lib.
    void read_env(const char *lib_var)
    {
        addr = testcommon::env_or("TEST_OFFLOAD_ADDR", testcommon::env_or("RDMASOCK_VM_ADDR", ""));
        keep = testcommon::env_or("TEST_OFFLOAD_KEEP", "") == "1";
        lib = testcommon::env_or(lib_var, lib);
    }
};

// A case's work directory (logs, stdout, stderr of its processes): under
// $TEST_OFFLOAD_TMP (default /tmp; in the VM /tmp vanishes, the tree does not), mode
// 0700; kept when keep is set.
struct WorkDir : testcommon::TempDir {
    WorkDir() : TempDir("offload-test-", "TEST_OFFLOAD_TMP", false) {}
};

// Register fn as the case `name` of suite ts.
inline void add(boost::unit_test::test_suite *ts, const std::string &name, std::function<void()> fn)
{
    ts->add(boost::unit_test::make_test_case(boost::function<void()>(fn), name, __FILE__, __LINE__));
}

// One line per case (---- NAME, then PASS/FAIL/SKIP); a skip is a failure.
struct Summary : boost::unit_test::test_observer {
    int passed = 0, failed = 0, skipped = 0;
    bool cur_failed = false;
    std::vector<std::string> failures;

    void test_unit_start(const boost::unit_test::test_unit &tu) override
    {
        if (tu.p_type == boost::unit_test::TUT_CASE) {
            cur_failed = false;
            printf("---- %s\n", tu.full_name().c_str());
            fflush(stdout);
        }
    }
    void assertion_result(boost::unit_test::assertion_result ar) override
    {
        if (ar != boost::unit_test::AR_PASSED)
            cur_failed = true;
    }
    void exception_caught(const boost::execution_exception &) override { cur_failed = true; }
    void test_unit_aborted(const boost::unit_test::test_unit &) override { cur_failed = true; }
    void test_unit_timed_out(const boost::unit_test::test_unit &) override { cur_failed = true; }
    void test_unit_skipped(const boost::unit_test::test_unit &tu, boost::unit_test::const_string reason) override
    {
        // "disabled": not selected by --run_test; anything else is a real skip.
        if (tu.p_type == boost::unit_test::TUT_CASE && reason != boost::unit_test::const_string("disabled")) {
            ++skipped;
            printf("SKIP: %s: %s (a skip is a failure here)\n", tu.full_name().c_str(),
                   std::string(reason.begin(), reason.end()).c_str());
        }
    }
    void test_unit_finish(const boost::unit_test::test_unit &tu, unsigned long elapsed_us) override
    {
        if (tu.p_type != boost::unit_test::TUT_CASE)
            return;
        if (cur_failed) {
            ++failed;
            failures.push_back(tu.full_name());
        } else {
            ++passed;
        }
        printf("%s: %s (%.1f s)\n", cur_failed ? "FAIL" : "PASS", tu.full_name().c_str(),
               static_cast<double>(elapsed_us) / 1e6);
        fflush(stdout);
    }
    // Printed by main, last.
    void print() const
    {
        for (const auto &f : failures)
            printf("failed: %s\n", f.c_str());
        std::string sk = skipped ? " (" + std::to_string(skipped) + " skipped)" : "";
        printf("%d passed, %d failed%s\n", passed, failed + skipped, sk.c_str());
        fflush(stdout);
    }
    int priority() override { return 1000; }
};

}  // namespace offload
