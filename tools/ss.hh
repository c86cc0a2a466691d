// rdmasock ss and rdmasock stat: the live connections of every process the caller may
// see, and their totals (tools/ss.cc; the library's side is preload/report.hh).
#pragma once

namespace rdmasock::tool {

// argv[0] is "ss" or "stat".  Returns the exit status.
int ss_command(int argc, char **argv);
int stat_command(int argc, char **argv);
// A whole decimal number in [lo, hi] into *out, else false (the subcommands' options).
bool parse_number(const char *s, long lo, long hi, long *out);

}  // namespace rdmasock::tool
