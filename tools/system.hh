// rdmasock system enable|disable|status (tools/system.cc).
#pragma once

#include <string>

namespace rdmasock::tool {

// argv[0] is "system"; default_lib: the library enable adds.  Returns the exit status.
int system_command(int argc, char **argv, const std::string &default_lib);

}  // namespace rdmasock::tool
