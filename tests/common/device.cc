#include "tests/common/device.hh"

#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <string>
#include <vector>

#include "tests/common/files.hh"

namespace testcommon {

namespace {

// The names in directory dir, without . and ..
std::vector<std::string> entries(const std::string &dir)
{
    std::vector<std::string> r;
    if (DIR *d = opendir(dir.c_str())) {
        while (dirent *e = readdir(d))
            if (e->d_name[0] != '.')
                r.push_back(e->d_name);
        closedir(d);
    }
    return r;
}

}  // namespace

RdmaDevices rdma_devices()
{
    RdmaDevices r;
    const std::string base = "/sys/class/infiniband/";
    for (const std::string &dev : entries(base)) {
        ++r.devices;
        for (const std::string &port : entries(base + dev + "/ports"))  // "4: ACTIVE"
            if (read_file(base + dev + "/ports/" + port + "/state").find("ACTIVE") != std::string::npos)
                ++r.active_ports;
    }
    return r;
}

bool rdma_device_active()
{
    return rdma_devices().active_ports > 0;
}

int require_device(const std::string &how)
{
    RdmaDevices r = rdma_devices();
    if (r.active_ports > 0)
        return 0;
    std::printf("SKIP: no active RDMA device (run via %s)%s\n", how.c_str(),
                r.devices > 0 ? ": devices exist but no port is active" : "");
    if (const char *vm = std::getenv("RDMASOCK_VM"); vm != nullptr && *vm == '1')
        std::printf("note: RDMASOCK_VM=1 yet no active device: the VM's soft-RoCE setup failed\n");
    std::fflush(stdout);
    return 77;
}

}  // namespace testcommon
