#include "tests/common/proc.hh"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sstream>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/common/files.hh"
#include "tests/common/time.hh"

extern char **environ;

namespace testcommon {

Env base_env()
{
    Env e;
    for (char **p = environ; *p != nullptr; ++p) {
        std::string s = *p;
        if (s.rfind("LD_PRELOAD=", 0) == 0 || s.rfind("RDMASOCK_", 0) == 0)
            continue;
        e.push_back(s);
    }
    return e;
}

std::vector<char *> environ_without_preload()
{
    std::vector<char *> v;
    for (char **p = environ; *p != nullptr; ++p)
        if (strncmp(*p, "LD_PRELOAD=", 11) != 0)
            v.push_back(*p);
    v.push_back(nullptr);
    return v;
}

void set_var(Env &env, const std::string &name, const std::string &value)
{
    std::string prefix = name + "=";
    for (auto &s : env)
        if (s.rfind(prefix, 0) == 0) {
            s = prefix + value;
            return;
        }
    env.push_back(prefix + value);
}

std::string preload_value(const std::string &lib)
{
    const std::string first = env_or("TEST_PRELOAD_FIRST", ""), after = env_or("TEST_PRELOAD_AFTER", "");
    return (first.empty() ? "" : first + " ") + lib + (after.empty() ? "" : " " + after);
}

Env with_lib(Env env, const std::string &lib, const std::string &log_level, const std::string &log_file)
{
    set_var(env, "LD_PRELOAD", preload_value(lib));
    if (!log_level.empty())
        set_var(env, "RDMASOCK_LOG_LEVEL", log_level);
    if (!log_file.empty())
        set_var(env, "RDMASOCK_LOG_FILE", log_file);
    return env;
}

std::string env_or(const char *name, const std::string &dflt)
{
    const char *v = getenv(name);
    return v != nullptr && *v != '\0' ? v : dflt;
}

namespace {

// Writing to a child's stdin (or a pipe) after it exited must not kill the test.
void ignore_sigpipe()
{
    static bool done = false;
    if (!done) {
        ::signal(SIGPIPE, SIG_IGN);
        done = true;
    }
}

std::vector<char *> cvec(const std::vector<std::string> &v)
{
    std::vector<char *> r;
    for (auto &s : v)
        r.push_back(const_cast<char *>(s.c_str()));
    r.push_back(nullptr);
    return r;
}

// In the forked child, its fds 0-2 in place: a clean signal state, only fds 0-2, exec.
[[noreturn]] void exec_child(const std::vector<std::string> &argv, const Env &env)
{
    ::signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (syscall(SYS_close_range, 3U, ~0U, 0U) < 0)
        for (int fd = 3; fd < 4096; ++fd)
            close(fd);
    std::vector<char *> a = cvec(argv), e = cvec(env);
    execvpe(a[0], a.data(), e.data());
    dprintf(2, "%s: cannot exec %s: %s\n", program_invocation_short_name, a[0], strerror(errno));
    _exit(127);
}

int pidfd_open(pid_t pid)
{
    return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
}

// Wait for pid to exit within timeout_ms; true and *status when it did.
bool wait_pid(pid_t pid, int pidfd, int timeout_ms, int *status)
{
    if (pidfd >= 0) {
        pollfd p{pidfd, POLLIN, 0};
        if (poll(&p, 1, timeout_ms) <= 0)
            return false;
        return waitpid(pid, status, 0) == pid;
    }
    double deadline = now_ms() + timeout_ms;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return true;
        if (r < 0 || now_ms() >= deadline)
            return false;
        poll(nullptr, 0, 5);
    }
}

int exit_code_of(int status)
{
    if (status == -1)
        return -1;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return -1;
}

void close_fd(int &fd)
{
    if (fd >= 0) {
        close(fd);
        fd = -1;
    }
}

// One read() of a pipe into *to (and *also): what it has, up to 64 KiB; at its end (or an
// error) fd is closed and set to -1.
void read_some(int &fd, std::string &to, std::string *also = nullptr)
{
    char b[65536];
    ssize_t k = read(fd, b, sizeof b);
    if (k <= 0) {
        close_fd(fd);
        return;
    }
    to.append(b, static_cast<size_t>(k));
    if (also != nullptr)
        also->append(b, static_cast<size_t>(k));
}

}  // namespace

// ---- Proc ---------------------------------------------------------------------------------

Proc::Proc(const std::vector<std::string> &argv, const Env &env, const Options &opt)
{
    start(argv, env, opt);
}

Proc::Proc(const std::vector<std::string> &argv, const Env &env, const std::string &err_file,
           const std::string &out_file)
{
    Options opt;
    opt.pipe_out = out_file.empty();
    opt.out_file = out_file;
    opt.err_file = err_file;
    opt.err_append = true;
    start(argv, env, opt);
}

void Proc::start(const std::vector<std::string> &argv, const Env &env, const Options &opt)
{
    ignore_sigpipe();
    int pin[2] = {-1, -1}, pout[2] = {-1, -1};
    if (opt.pipe_in && pipe2(pin, O_CLOEXEC) < 0)
        return;
    if (opt.pipe_out && pipe2(pout, O_CLOEXEC) < 0) {
        close_fd(pin[0]);
        close_fd(pin[1]);
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        int fi = opt.pipe_in ? pin[0] : open("/dev/null", O_RDONLY);
        int fo = opt.pipe_out ? pout[1] : open(opt.out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(opt.err_file.c_str(), O_WRONLY | O_CREAT | (opt.err_append ? O_APPEND : O_TRUNC), 0644);
        if (fi < 0 || fo < 0 || fe < 0)
            _exit(126);
        dup2(fi, 0);
        dup2(fo, 1);
        dup2(fe, 2);
        if (opt.gid != static_cast<gid_t>(-1) && (setgroups(0, nullptr) < 0 || setresgid(opt.gid, opt.gid, opt.gid) < 0))
            _exit(125);
        if (opt.uid != static_cast<uid_t>(-1) && setresuid(opt.uid, opt.uid, opt.uid) < 0)
            _exit(125);
        exec_child(argv, env);
    }
    close_fd(pin[0]);
    close_fd(pout[1]);
    if (pid < 0) {
        close_fd(pin[1]);
        close_fd(pout[0]);
        return;
    }
    setpgid(pid, pid);
    pid_ = pid;
    pidfd_ = pidfd_open(pid);
    in_ = pin[1];
    out_ = pout[0];
}

Proc::~Proc()
{
    kill_all();
    close_fd(pidfd_);
    close_fd(in_);
    close_fd(out_);
}

int Proc::exit_code() const
{
    return reaped_ ? exit_code_of(status_) : -1;
}

void Proc::reap(int options)
{
    if (!reaped_ && waitpid(pid_, &status_, options) == pid_) {
        reaped_ = true;
        exit_ms_ = now_ms();
    }
}

// Read what stdout has (waiting up to timeout_ms for something); reap if exited.
void Proc::pump(int timeout_ms)
{
    pollfd p[2];
    int n = 0;
    if (out_ >= 0)
        p[n++] = {out_, POLLIN, 0};
    if (!reaped_ && pidfd_ >= 0)
        p[n++] = {pidfd_, POLLIN, 0};
    else if (!reaped_)
        timeout_ms = std::min(timeout_ms, 5);  // no pidfd: look for the exit every 5 ms
    int r = poll(n > 0 ? p : nullptr, static_cast<nfds_t>(n), timeout_ms);
    if (r > 0 && out_ >= 0 && p[0].revents)
        read_some(out_, buf_, &all_);
    reap(WNOHANG);
}

std::string Proc::read_line(int timeout_ms)
{
    double deadline = now_ms() + timeout_ms;
    for (;;) {
        size_t nl = buf_.find('\n');
        if (nl != std::string::npos) {
            std::string line = buf_.substr(0, nl);
            buf_.erase(0, nl + 1);
            return line;
        }
        if (pid_ <= 0 || (out_ < 0 && reaped_) || now_ms() >= deadline)
            return "";
        pump(ms_left(deadline));
    }
}

void Proc::close_stdin()
{
    close_fd(in_);
}

bool Proc::wait(int timeout_ms)
{
    if (pid_ <= 0)
        return false;
    double deadline = now_ms() + timeout_ms;
    while (!reaped_ || out_ >= 0) {
        if (now_ms() >= deadline)
            return reaped_;
        if (reaped_) {
            // Exited; drain what is left in the pipe (a grandchild may hold it: bounded).
            pollfd p{out_, POLLIN, 0};
            if (poll(&p, 1, 200) <= 0) {
                close_fd(out_);
                break;
            }
        }
        pump(ms_left(deadline));
    }
    return reaped_;
}

void Proc::signal(int sig)
{
    if (pid_ > 0 && !reaped_)
        ::kill(pid_, sig);
}

int Proc::stop(int sig, int timeout_ms)
{
    if (pid_ <= 0)
        return -1;
    if (!reaped_) {
        ::kill(pid_, sig);
        if (!wait(timeout_ms)) {
            ::kill(-pid_, SIGKILL);
            wait(5000);
        }
    }
    ::kill(-pid_, SIGKILL);  // whatever is left of the group
    return status_;
}

void Proc::kill_all()
{
    if (pid_ <= 0)
        return;
    ::kill(-pid_, SIGKILL);  // the group: also what a dead leader left (workers)
    reap(0);
}

// ---- run ----------------------------------------------------------------------------------

int Result::exit_code() const
{
    return exit_code_of(status);
}

std::string Result::describe() const
{
    std::ostringstream o;
    o << "exit=" << exit_code() << (timed_out ? " (timed out)" : "") << "\n--- stdout ---\n"
      << out.substr(0, 4000) << "\n--- stderr ---\n" << err.substr(0, 4000);
    return o.str();
}

Result run(const std::vector<std::string> &argv, const Env &env, int timeout_ms, const std::string &in)
{
    ignore_sigpipe();
    Result res;
    int pin[2], pout[2], perr[2];
    if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0) {
        res.err = std::string("run: pipe: ") + strerror(errno);
        return res;
    }
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        dup2(pin[0], 0);
        dup2(pout[1], 1);
        dup2(perr[1], 2);
        exec_child(argv, env);
    }
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    if (pid < 0) {
        res.err = std::string("run: fork: ") + strerror(errno);
        close(pin[1]);
        close(pout[0]);
        close(perr[0]);
        return res;
    }
    setpgid(pid, pid);
    int pidfd = pidfd_open(pid);
    double deadline = now_ms() + timeout_ms;
    size_t in_off = 0;
    int fin = pin[1];
    if (in.empty()) {
        close(fin);
        fin = -1;
    } else {
        fcntl(fin, F_SETFL, O_NONBLOCK);
    }
    int fo = pout[0], fe = perr[0];
    while (fo >= 0 || fe >= 0) {
        pollfd p[3];
        int n = 0;
        int io = -1, ie = -1, ii = -1;
        if (fo >= 0) {
            io = n;
            p[n++] = {fo, POLLIN, 0};
        }
        if (fe >= 0) {
            ie = n;
            p[n++] = {fe, POLLIN, 0};
        }
        if (fin >= 0) {
            ii = n;
            p[n++] = {fin, POLLOUT, 0};
        }
        int r = poll(p, static_cast<nfds_t>(n), ms_left(deadline));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            res.timed_out = true;
            kill(-pid, SIGKILL);
            break;
        }
        if (io >= 0 && p[io].revents)
            read_some(fo, res.out);
        if (ie >= 0 && p[ie].revents)
            read_some(fe, res.err);
        if (ii >= 0 && p[ii].revents) {
            ssize_t k = write(fin, in.data() + in_off, in.size() - in_off);
            if (k > 0)
                in_off += static_cast<size_t>(k);
            if (k < 0 || in_off == in.size())
                close_fd(fin);
        }
    }
    for (int fd : {fo, fe, fin})
        if (fd >= 0)
            close(fd);
    if (!wait_pid(pid, pidfd, res.timed_out ? 5000 : std::max(ms_left(deadline), 1000), &res.status)) {
        res.timed_out = true;
        kill(-pid, SIGKILL);
        wait_pid(pid, pidfd, 5000, &res.status);
    }
    if (pidfd >= 0)
        close(pidfd);
    return res;
}

int run_quiet(const std::vector<std::string> &argv, int timeout_ms, std::string *output)
{
    Proc p(argv, base_env(), "/dev/null");
    if (!p.started())
        return -1;
    if (!p.wait(timeout_ms)) {
        p.kill_all();
        return -1;
    }
    if (output != nullptr)
        *output = p.out();
    return p.exit_code();
}

std::vector<pid_t> children_of(pid_t pid)
{
    std::vector<pid_t> r;
    DIR *d = opendir("/proc");
    if (d == nullptr)
        return r;
    while (dirent *e = readdir(d)) {
        char *end = nullptr;
        long p = strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0')
            continue;
        std::string st = read_file(std::string("/proc/") + e->d_name + "/stat");
        size_t rp = st.rfind(')');
        if (rp == std::string::npos)
            continue;
        std::istringstream is(st.substr(rp + 1));
        std::string state;
        long ppid = 0;
        if (is >> state >> ppid && ppid == pid)
            r.push_back(static_cast<pid_t>(p));
    }
    closedir(d);
    return r;
}

}  // namespace testcommon
