// Processes of the test programs: an environment to run a program with, a child process
// in its own process group (stdin/stdout pipes or files, another user, a deadline on
// every wait), a one-shot run that captures the output.  No Boost here; the tests do
// the asserting.
#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

namespace testcommon {

using Env = std::vector<std::string>;  // NAME=VALUE entries

// The test's own environment without LD_PRELOAD and RDMASOCK_*: the "without" side.
Env base_env();
// The process's environment without LD_PRELOAD, as an envp for execve() (pointers into
// environ, null-terminated): a new image without the library (RDMASOCK_* kept).
std::vector<char *> environ_without_preload();
// Set (or replace) NAME in env.
void set_var(Env &env, const std::string &name, const std::string &value);
// The LD_PRELOAD value that loads lib: "$TEST_PRELOAD_FIRST lib $TEST_PRELOAD_AFTER",
// each when set (a sanitizer's runtime, ASan's first, TSan's after the library, whose
// calls of the C library then go through its interceptors: tests/sanitize/run-sanitized).
std::string preload_value(const std::string &lib);
// env plus LD_PRELOAD=preload_value(lib) and, when not empty, RDMASOCK_LOG_LEVEL and RDMASOCK_LOG_FILE:
// the "with" side.
Env with_lib(Env env, const std::string &lib, const std::string &log_level = "",
             const std::string &log_file = "");
// $name of the test's own environment, dflt when unset or empty.
std::string env_or(const char *name, const std::string &dflt);

// A program (argv[0] searched in PATH) running in its own process group; the group is
// killed (SIGKILL) and the program reaped when the Proc is destroyed.
class Proc {
public:
    struct Options {
        bool pipe_in = false;                // stdin: a pipe (close_stdin()); else /dev/null
        bool pipe_out = false;               // stdout: a pipe (read_line(), out()); else out_file
        std::string out_file = "/dev/null";  // truncated
        std::string err_file = "/dev/null";  // truncated, or appended to with err_append
        bool err_append = false;
        uid_t uid = static_cast<uid_t>(-1);  // run as this user / group (-1: the test's)
        gid_t gid = static_cast<gid_t>(-1);
    };
    Proc() = default;
    Proc(const std::vector<std::string> &argv, const Env &env, const Options &opt);
    // stdout to a pipe unless out_file is given; stderr appended to err_file.
    Proc(const std::vector<std::string> &argv, const Env &env, const std::string &err_file,
         const std::string &out_file = "");
    Proc(const Proc &) = delete;
    Proc &operator=(const Proc &) = delete;
    ~Proc();

    bool started() const { return pid_ > 0; }
    pid_t pid() const { return pid_; }
    // The next stdout line, without its newline; "" at the deadline, or at the end of
    // stdout once the program exited (without a stdout pipe: waits for the exit).  Every
    // line read from the pipe is also kept in out().
    std::string read_line(int timeout_ms);
    void close_stdin();
    // Wait for the exit and the end of stdout (read meanwhile; a grandchild holding the
    // pipe open is given 200 ms after the exit); false if it has not exited by then.
    bool wait(int timeout_ms);
    // Signal the process (not its group).
    void signal(int sig);
    // Send sig, wait up to timeout_ms, then SIGKILL the group.  Returns the wait status.
    int stop(int sig, int timeout_ms);
    // SIGKILL the group and reap.
    void kill_all();
    int status() const { return status_; }  // raw wait status, -1 while running
    bool exited() const { return reaped_; }
    double exit_time_ms() const { return exit_ms_; }  // now_ms() when it was reaped
    const std::string &out() const { return all_; }
    int exit_code() const;  // exit code, 128 + signal, or -1

private:
    void start(const std::vector<std::string> &argv, const Env &env, const Options &opt);
    void pump(int timeout_ms);
    void reap(int options);
    pid_t pid_ = -1;
    int pidfd_ = -1, in_ = -1, out_ = -1;
    int status_ = -1;
    bool reaped_ = false;
    double exit_ms_ = 0;
    std::string buf_, all_;
};

// What run() saw.
struct Result {
    std::string out, err;
    int status = -1;  // raw wait status
    bool timed_out = false;
    int exit_code() const;  // exit code, or 128 + signal, or -1
    std::string describe() const;
};

// Run argv (argv[0] searched in PATH) with env, stdin from `in`, capture stdout and
// stderr; killed (whole process group) after timeout_ms.
Result run(const std::vector<std::string> &argv, const Env &env, int timeout_ms, const std::string &in = "");
// Run argv to completion with base_env(), stderr discarded; its exit code (-1 if it could
// not start or did not end within timeout_ms), its stdout in *output.
int run_quiet(const std::vector<std::string> &argv, int timeout_ms = 20000, std::string *output = nullptr);

// Children of pid (from /proc/*/stat).
std::vector<pid_t> children_of(pid_t pid);

}  // namespace testcommon
