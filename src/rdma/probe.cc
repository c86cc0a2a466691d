#include "rdma/probe.hh"

#include <infiniband/verbs.h>

namespace rdmasock::rdma {

ProbeResult probe_devices() noexcept
{
    ProbeResult r;
    int n = 0;
    ibv_device **list = ibv_get_device_list(&n);
    if (list == nullptr)
        return r;
    r.devices = n;
    for (int i = 0; i < n; ++i) {
        ibv_context *ctx = ibv_open_device(list[i]);
        if (ctx == nullptr)
            continue;
        ibv_device_attr attr{};
        if (ibv_query_device(ctx, &attr) == 0) {
            for (uint8_t port = 1; port <= attr.phys_port_cnt; ++port) {
                ibv_port_attr pa{};
                if (ibv_query_port(ctx, port, &pa) == 0 && pa.state == IBV_PORT_ACTIVE)
                    ++r.active_ports;
            }
        }
        ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
    return r;
}

}  // namespace rdmasock::rdma
