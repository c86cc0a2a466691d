// The RDMA device check of the test programs that need a device (tests/rdma,
// tests/offload): without an active port they print a SKIP line and exit 77 (automake's
// SKIP) before Boost.Test runs; the VM targets (make check-rdma, check-offload, ...)
// count a skip as a failure.  No Boost here.
#pragma once

#include <string>

namespace testcommon {

// The RDMA devices and their port states as the kernel lists them in sysfs
// (/sys/class/infiniband/DEV/ports/N/state): no device is opened and no provider
// library is loaded, so the check leaves nothing behind in the test's process (the
// device tests count its RDMA resources).
struct RdmaDevices {
    int devices = 0;
    int active_ports = 0;  // ports in state ACTIVE
};
RdmaDevices rdma_devices();
// An RDMA device with an active port exists.
bool rdma_device_active();

// 0 when a device with an active port exists; otherwise prints
// "SKIP: no active RDMA device (run via <how>)" (and why, and a note when RDMASOCK_VM=1
// says the VM should have one) and returns 77.
int require_device(const std::string &how);

}  // namespace testcommon
