// Process helpers of the offload tests: start a program with a controlled environment
// (optionally in a network namespace), read its stdout line by line, wait with a
// deadline, kill its process group.  No Boost here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <sys/types.h>
#include <vector>

namespace offload {

using Env = std::vector<std::string>;  // NAME=VALUE entries
using Fields = std::map<std::string, std::string>;

double now_ms();

// The test's environment without LD_PRELOAD and RDMASOCK_*.
Env base_env();
void set_var(Env &env, const std::string &name, const std::string &value);

class Proc {
public:
    // stdout to a pipe (read_line/out) unless out_file is given; stderr to err_file.
    Proc(const std::vector<std::string> &argv, const Env &env, const std::string &err_file,
         const std::string &out_file = "");
    Proc(const Proc &) = delete;
    Proc &operator=(const Proc &) = delete;
    ~Proc();

    bool started() const { return pid_ > 0; }
    pid_t pid() const { return pid_; }
    // The next stdout line ("" on EOF or timeout); every line is also kept in out().
    std::string read_line(int timeout_ms);
    // Wait for the exit (reading stdout meanwhile); false on timeout.
    bool wait(int timeout_ms);
    // Signal the process (not its group).
    void signal(int sig);
    // SIGKILL the group and reap.
    void kill_all();
    int status() const { return status_; }  // raw wait status, -1 while running
    bool exited() const { return reaped_; }
    double exit_time_ms() const { return exit_ms_; }
    const std::string &out() const { return all_; }
    int exit_code() const;  // exit code, 128 + signal, or -1

private:
    void pump(int timeout_ms);
    pid_t pid_ = -1;
    int pidfd_ = -1, out_ = -1;
    int status_ = -1;
    bool reaped_ = false;
    double exit_ms_ = 0;
    std::string buf_, all_;
};

std::string read_file(const std::string &path);
bool write_file(const std::string &path, const std::string &data);
// "k=v k=v ..." into a map (tokens without '=' are ignored).
Fields parse_kv(const std::string &line);
std::vector<std::string> split_lines(const std::string &s);
// A fresh directory under /tmp, removed (unless keep) when destroyed.
class TempDir {
public:
    TempDir();
    ~TempDir();
    const std::string &path() const { return path_; }
    std::string operator/(const std::string &n) const { return path_ + "/" + n; }
    bool keep = false;

private:
    std::string path_;
};
// Run a command to completion (argv, no shell), output discarded; its exit code.
int run_quiet(const std::vector<std::string> &argv, int timeout_ms = 20000, std::string *output = nullptr);
// Something listens on TCP port (IPv4, /proc/net/tcp) right now.
bool tcp_listening(int port);
// A currently free TCP port on addr.
int free_port(const std::string &addr);

}  // namespace offload
