// The RDMA device probe: runs once, at the first eligible socket, never at load.
#pragma once

namespace rdmasock::rdma {

struct ProbeResult {
    int devices = 0;       // devices libibverbs lists
    int active_ports = 0;  // ports in IBV_PORT_ACTIVE state
};

ProbeResult probe_devices() noexcept;

}  // namespace rdmasock::rdma
