// Process and file helpers shared by the black-box tests (parity_tests, program_tests):
// run a program with a controlled environment and a deadline, start and stop servers,
// parse the close-time log lines.  No Boost here; the tests do the asserting.
#pragma once

#include <map>
#include <string>
#include <sys/types.h>
#include <vector>

namespace harness {

using Env = std::vector<std::string>;  // NAME=VALUE entries

// The test's own environment without LD_PRELOAD and RDMASOCK_*: the "without" side.
Env base_env();
// env plus LD_PRELOAD=lib and the given RDMASOCK_* settings: the "with" side.
Env with_lib(Env env, const std::string &lib, const std::string &log_level = "",
             const std::string &log_file = "");
void set_var(Env &env, const std::string &name, const std::string &value);

struct Result {
    std::string out, err;
    int status = -1;          // raw wait status
    bool timed_out = false;
    int exit_code() const;    // exit code, or 128 + signal, or -1
    std::string describe() const;
};

// Run argv[0] (searched in PATH) with env, stdin from `in`, capture stdout and stderr;
// killed (whole process group) after timeout_ms.
Result run(const std::vector<std::string> &argv, const Env &env, int timeout_ms,
           const std::string &in = "");

// A background process in its own process group; killed with its group when destroyed.
class Child {
public:
    struct Options {
        std::string out_file = "/dev/null", err_file = "/dev/null";
        bool pipe_in = false, pipe_out = false;
        uid_t uid = static_cast<uid_t>(-1);
        gid_t gid = static_cast<gid_t>(-1);
    };
    Child() = default;
    Child(const std::vector<std::string> &argv, const Env &env, const Options &opt);
    Child(const Child &) = delete;
    Child &operator=(const Child &) = delete;
    ~Child();

    bool started() const { return pid_ > 0; }
    pid_t pid() const { return pid_; }
    // One line from the stdout pipe (without the newline); "" on EOF or timeout.
    std::string read_line(int timeout_ms);
    void close_stdin();
    // Wait for the exit; false on timeout.  status() is then the raw wait status.
    bool wait(int timeout_ms);
    // Send sig, wait up to timeout_ms, then SIGKILL the group.  Returns the wait status.
    int stop(int sig, int timeout_ms);
    int status() const { return status_; }

private:
    pid_t pid_ = -1;
    int pidfd_ = -1, in_ = -1, out_ = -1;
    int status_ = -1;
    bool reaped_ = false;
    std::string buf_;
};

// A fresh directory (mode 0755) removed with its contents when destroyed.
class TempDir {
public:
    TempDir();
    ~TempDir();
    const std::string &path() const { return path_; }
    std::string operator/(const std::string &name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

std::string read_file(const std::string &path, bool *ok = nullptr);
bool write_file(const std::string &path, const std::string &data, int mode = 0644);
bool file_exists(const std::string &path);
// First of the names found as an executable in PATH (or as an absolute path); "" if none.
std::string find_program(const std::vector<std::string> &names);
// A loopback TCP port free right now (bind to port 0, read it, close).
int free_port();
// Wait until something listens on TCP `port` (IPv4 or IPv6), without connecting to it.
bool wait_listening(int port, int timeout_ms);
// Children of pid (from /proc/*/stat).
std::vector<pid_t> children_of(pid_t pid);
std::vector<std::string> split_lines(const std::string &s);
// Lines of s not starting with `prefix`, joined again.
std::string drop_lines(const std::string &s, const std::string &prefix);
// "line N: got X / want Y" for the first differing line, "" if equal.
std::string first_difference(const std::string &got, const std::string &want);

// One parsed close-time log line: the key=value pairs, plus "pid" and "level".
using Fields = std::map<std::string, std::string>;
struct LogCheck {
    std::vector<Fields> closes;         // event=close lines, in order
    std::vector<std::string> problems;  // malformed lines, warnings, errors
};
// Parse a log file written at level info: every line must be "rdmasock[PID]: LEVEL: ...";
// event=close lines must have exactly the documented keys in the documented order.
LogCheck check_log(const std::string &text);

}  // namespace harness
