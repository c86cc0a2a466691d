// Shared helpers of the RDMA device tests (tests/rdma/*_test).
//
// Each device test program starts with RDMA_DEVICE_TEST_MAIN: without an active RDMA
// device it prints "SKIP: ..." and exits 77 (automake's SKIP) before Boost.Test runs.
// `make check-rdma` runs them in the soft-RoCE VM, where a skip counts as a failure.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <netinet/in.h>

#include "rdma/owners.hh"
#include "tests/common/device.hh"
#include "tests/common/time.hh"

namespace rdmasock::test {

// Milliseconds on the monotonic clock.
using testcommon::now_ms;

// The device under test: $RDMASOCK_VM_DEV, else the first device with an active port.
std::string device_name();

// The IPv4 address rdma_cm tests bind and connect to: $RDMASOCK_VM_ADDR, else the
// first IPv4-mapped RoCE GID of the device under test; "" if none.
std::string test_addr();
sockaddr_in make_sockaddr(const std::string &addr, uint16_t port);

// `rdma -j resource show` counters of one device (pd, cq, qp, cm_id, mr, ctx, srq...).
// Empty map (and a message in *why) when the tool fails or lists no such device.
using ResCounts = std::map<std::string, long>;
ResCounts resource_counts(const std::string &dev, std::string *why = nullptr);
std::string format_counts(const ResCounts &c);
// Polls (up to timeout_ms) until the counters equal `want`; returns the last reading.
ResCounts wait_for_counts(const std::string &dev, const ResCounts &want, int timeout_ms);

// Creates, binds (to addr) and destroys a synchronous rdma_cm id.  Run once before a
// baseline: librdmacm opens the device context then and keeps it for the life of the
// process, so it belongs to the baseline.  Run again before comparing with a baseline:
// librdmacm allocates a PD per device while ids use it and frees it only when an id's
// destruction drops its device reference count to zero -- a borrowed Context's device
// pin (rdma_get_devices/rdma_free_devices) does not free it when released last -- so
// this flushes that cached PD instead of counting it as a leak.
void settle_rdmacm(const std::string &addr);

// A page-aligned heap buffer.
struct Buffer {
    explicit Buffer(size_t n);
    ~Buffer();
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
    uint8_t *data = nullptr;
    size_t size = 0;
};

}  // namespace rdmasock::test

// The program's main: skip without a device, else Boost.Test.  Needs BOOST_TEST_NO_MAIN
// and BOOST_TEST_MODULE defined before <boost/test/unit_test.hpp>.
#define RDMA_DEVICE_TEST_MAIN                                                          \
    int main(int argc, char **argv)                                                    \
    {                                                                                  \
        if (int rc = ::testcommon::require_device("make check-rdma"); rc != 0)        \
            return rc;                                                                 \
        return ::boost::unit_test::unit_test_main(&init_unit_test, argc, argv);        \
    }
