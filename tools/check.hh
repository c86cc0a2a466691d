// rdmasock check HOST:PORT and rdmasock doctor (tools/check.cc): would a connection go
// over RDMA, and if not why and what to do; is this machine ready for RDMA.
#pragma once

#include <string>

namespace rdmasock::tool {

// argv[0] is "check" or "doctor"; lib: the library the probe preloads.  Exit status:
// 0 RDMA would be used (the machine is ready), 1 not, 2 usage or the probe failed.
int check_command(int argc, char **argv, const std::string &lib);
int doctor_command(int argc, char **argv, const std::string &lib);

}  // namespace rdmasock::tool
