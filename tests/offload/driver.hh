// What the Boost.Test drivers of the VM suites share (offload_tests, hostile_tests):
// the device check and the per-case summary whose last line is "N passed, N failed".
#pragma once
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <infiniband/verbs.h>
#include <string>
#include <vector>

namespace offload {

// An RDMA device with an active port exists.
inline bool rdma_device_active()
{
    int n = 0, active = 0;
    ibv_device **list = ibv_get_device_list(&n);
    for (int i = 0; list != nullptr && i < n && active == 0; ++i) {
        ibv_context *ctx = ibv_open_device(list[i]);
        if (ctx == nullptr)
            continue;
        ibv_device_attr attr{};
        if (ibv_query_device(ctx, &attr) == 0)
            for (uint8_t port = 1; port <= attr.phys_port_cnt; ++port) {
                ibv_port_attr pa{};
                if (ibv_query_port(ctx, port, &pa) == 0 && pa.state == IBV_PORT_ACTIVE)
                    ++active;
            }
        ibv_close_device(ctx);
    }
    if (list != nullptr)
        ibv_free_device_list(list);
    return active > 0;
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
