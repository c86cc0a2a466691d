// File helpers of the test programs: temporary directories, whole-file reads and
// writes, looking up programs.  No Boost here.
#pragma once

#include <string>
#include <vector>

namespace testcommon {

// A fresh directory <base>/<prefix>XXXXXX, removed with its contents when destroyed
// (unless keep).  <base> is $<base_var> when that is set and not empty, else /tmp.
// Mode 0755 when world_readable (programs run as another user can read it), else
// mkdtemp's 0700.  path() is "" if it could not be made.
class TempDir {
public:
    explicit TempDir(const std::string &prefix = "rdmasock-test-", const char *base_var = "TMPDIR",
                     bool world_readable = true);
    TempDir(const TempDir &) = delete;
    TempDir &operator=(const TempDir &) = delete;
    ~TempDir();
    const std::string &path() const { return path_; }
    std::string operator/(const std::string &name) const { return path_ + "/" + name; }
    bool keep = false;

private:
    std::string path_;
};

// The whole file ("" if it cannot be opened; *ok says whether it could).
std::string read_file(const std::string &path, bool *ok = nullptr);
// Create or truncate path, write data, set its mode; false on any error.
bool write_file(const std::string &path, const std::string &data, int mode = 0644);
bool file_exists(const std::string &path);
// First of the names found as an executable in PATH (or as an absolute path); "" if none.
std::string find_program(const std::vector<std::string> &names);

}  // namespace testcommon
