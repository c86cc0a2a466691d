// Text helpers of the test programs: lines and key=value fields.  No Boost here.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace testcommon {

// key=value pairs of a line (a program's result line, a log line).
using Fields = std::map<std::string, std::string>;

// "k=v k=v ..." into a map (tokens without '=' or with an empty key are ignored).
Fields parse_kv(const std::string &line);
// The lines of s, without their newlines ("a\nb\n" and "a\nb" are both {"a", "b"}).
std::vector<std::string> split_lines(const std::string &s);
// Lines of s not starting with `prefix`, joined again (each ends with a newline).
std::string drop_lines(const std::string &s, const std::string &prefix);
// "line N: got [X] want [Y]" for the first differing line, "" if equal.
std::string first_difference(const std::string &got, const std::string &want);

}  // namespace testcommon
