#include "tests/preload/harness.hh"

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <regex>
#include <sstream>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

namespace harness {

namespace {

long long now_ms()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

int remaining(long long deadline)
{
    long long r = deadline - now_ms();
    return r < 0 ? 0 : static_cast<int>(r);
}

// Writing to a child's stdin after it exited must not kill the test.
void ignore_sigpipe()
{
    static bool done = false;
    if (!done) {
        signal(SIGPIPE, SIG_IGN);
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

// In the forked child: a clean signal state, only fds 0-2, then exec.
[[noreturn]] void exec_child(const std::vector<std::string> &argv, const Env &env)
{
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (syscall(SYS_close_range, 3U, ~0U, 0U) < 0)
        for (int fd = 3; fd < 4096; ++fd)
            close(fd);
    std::vector<char *> a = cvec(argv), e = cvec(env);
    execvpe(a[0], a.data(), e.data());
    dprintf(2, "harness: cannot exec %s: %s\n", a[0], strerror(errno));
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
    long long deadline = now_ms() + timeout_ms;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return true;
        if (r < 0 || now_ms() >= deadline)
            return false;
        poll(nullptr, 0, 5);
    }
}

}  // namespace

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

Env with_lib(Env env, const std::string &lib, const std::string &log_level, const std::string &log_file)
{
    set_var(env, "LD_PRELOAD", lib);
    if (!log_level.empty())
        set_var(env, "RDMASOCK_LOG_LEVEL", log_level);
    if (!log_file.empty())
        set_var(env, "RDMASOCK_LOG_FILE", log_file);
    return env;
}

int Result::exit_code() const
{
    if (status == -1)
        return -1;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return -1;
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
        res.err = std::string("harness: pipe: ") + strerror(errno);
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
        res.err = std::string("harness: fork: ") + strerror(errno);
        close(pin[1]);
        close(pout[0]);
        close(perr[0]);
        return res;
    }
    setpgid(pid, pid);
    int pidfd = pidfd_open(pid);
    long long deadline = now_ms() + timeout_ms;
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
        int r = poll(p, static_cast<nfds_t>(n), remaining(deadline));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            res.timed_out = true;
            kill(-pid, SIGKILL);
            break;
        }
        char buf[65536];
        if (io >= 0 && p[io].revents) {
            ssize_t k = read(fo, buf, sizeof buf);
            if (k > 0)
                res.out.append(buf, static_cast<size_t>(k));
            else {
                close(fo);
                fo = -1;
            }
        }
        if (ie >= 0 && p[ie].revents) {
            ssize_t k = read(fe, buf, sizeof buf);
            if (k > 0)
                res.err.append(buf, static_cast<size_t>(k));
            else {
                close(fe);
                fe = -1;
            }
        }
        if (ii >= 0 && p[ii].revents) {
            ssize_t k = write(fin, in.data() + in_off, in.size() - in_off);
            if (k > 0)
                in_off += static_cast<size_t>(k);
            if (k < 0 || in_off == in.size()) {
                close(fin);
                fin = -1;
            }
        }
    }
    for (int fd : {fo, fe, fin})
        if (fd >= 0)
            close(fd);
    if (!wait_pid(pid, pidfd, res.timed_out ? 5000 : std::max(remaining(deadline), 1000), &res.status)) {
        res.timed_out = true;
        kill(-pid, SIGKILL);
        wait_pid(pid, pidfd, 5000, &res.status);
    }
    if (pidfd >= 0)
        close(pidfd);
    return res;
}

Child::Child(const std::vector<std::string> &argv, const Env &env, const Options &opt)
{
    ignore_sigpipe();
    int pin[2] = {-1, -1}, pout[2] = {-1, -1};
    if (opt.pipe_in && pipe2(pin, O_CLOEXEC) < 0)
        return;
    if (opt.pipe_out && pipe2(pout, O_CLOEXEC) < 0)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        int fi = opt.pipe_in ? pin[0] : open("/dev/null", O_RDONLY);
        int fo = opt.pipe_out ? pout[1] : open(opt.out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(opt.err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
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
    if (pin[0] >= 0)
        close(pin[0]);
    if (pout[1] >= 0)
        close(pout[1]);
    if (pid < 0) {
        if (pin[1] >= 0)
            close(pin[1]);
        if (pout[0] >= 0)
            close(pout[0]);
        return;
    }
    setpgid(pid, pid);
    pid_ = pid;
    pidfd_ = pidfd_open(pid);
    in_ = pin[1];
    out_ = pout[0];
}

Child::~Child()
{
    if (pid_ > 0 && !reaped_)
        stop(SIGKILL, 5000);
    else if (pid_ > 0)
        kill(-pid_, SIGKILL);  // leftovers of the group (workers of a dead master)
    for (int fd : {pidfd_, in_, out_})
        if (fd >= 0)
            close(fd);
}

std::string Child::read_line(int timeout_ms)
{
    long long deadline = now_ms() + timeout_ms;
    for (;;) {
        size_t nl = buf_.find('\n');
        if (nl != std::string::npos) {
            std::string line = buf_.substr(0, nl);
            buf_.erase(0, nl + 1);
            return line;
        }
        if (out_ < 0)
            return "";
        pollfd p{out_, POLLIN, 0};
        if (poll(&p, 1, remaining(deadline)) <= 0)
            return "";
        char b[4096];
        ssize_t k = read(out_, b, sizeof b);
        if (k <= 0)
            return "";
        buf_.append(b, static_cast<size_t>(k));
    }
}

void Child::close_stdin()
{
    if (in_ >= 0) {
        close(in_);
        in_ = -1;
    }
}

bool Child::wait(int timeout_ms)
{
    if (pid_ <= 0)
        return false;
    if (reaped_)
        return true;
    if (!wait_pid(pid_, pidfd_, timeout_ms, &status_))
        return false;
    reaped_ = true;
    return true;
}

int Child::stop(int sig, int timeout_ms)
{
    if (pid_ <= 0)
        return -1;
    if (!reaped_) {
        kill(pid_, sig);
        if (!wait(timeout_ms)) {
            kill(-pid_, SIGKILL);
            wait(5000);
        }
    }
    kill(-pid_, SIGKILL);  // whatever is left of the group
    return status_;
}

TempDir::TempDir()
{
    const char *t = getenv("TMPDIR");
    std::string tmpl = std::string(t != nullptr && *t != '\0' ? t : "/tmp") + "/rdmasock-test-XXXXXX";
    std::vector<char> b(tmpl.begin(), tmpl.end());
    b.push_back('\0');
    if (mkdtemp(b.data()) != nullptr) {
        path_ = b.data();
        chmod(path_.c_str(), 0755);
    }
}

TempDir::~TempDir()
{
    if (path_.empty())
        return;
    nftw(
        path_.c_str(),
        [](const char *p, const struct stat *, int, FTW *) {
            remove(p);
            return 0;  // keep going: remove what can be removed
        },
        16,
        FTW_DEPTH | FTW_PHYS);
}

std::string read_file(const std::string &path, bool *ok)
{
    std::string s;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ok != nullptr)
        *ok = fd >= 0;
    if (fd < 0)
        return s;
    char b[65536];
    ssize_t k;
    while ((k = read(fd, b, sizeof b)) > 0)
        s.append(b, static_cast<size_t>(k));
    close(fd);
    return s;
}

bool write_file(const std::string &path, const std::string &data, int mode)
{
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return false;
    size_t off = 0;
    while (off < data.size()) {
        ssize_t k = write(fd, data.data() + off, data.size() - off);
        if (k <= 0) {
            close(fd);
            return false;
        }
        off += static_cast<size_t>(k);
    }
    fchmod(fd, static_cast<mode_t>(mode));
    return close(fd) == 0;
}

bool file_exists(const std::string &path)
{
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

std::string find_program(const std::vector<std::string> &names)
{
    const char *path = getenv("PATH");
    std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
    dirs += ":/usr/sbin:/sbin:/usr/local/sbin";
    for (auto &n : names) {
        if (n.find('/') != std::string::npos) {
            if (access(n.c_str(), X_OK) == 0)
                return n;
            continue;
        }
        std::stringstream ss(dirs);
        std::string d;
        while (std::getline(ss, d, ':')) {
            std::string p = (d.empty() ? "." : d) + "/" + n;
            struct stat st;
            if (stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0)
                return p;
        }
    }
    return "";
}

int free_port()
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

bool wait_listening(int port, int timeout_ms)
{
    char want[16];
    snprintf(want, sizeof want, ":%04X", port);
    long long deadline = now_ms() + timeout_ms;
    for (;;) {
        for (const char *f : {"/proc/net/tcp", "/proc/net/tcp6"}) {
            for (auto &line : split_lines(read_file(f))) {
                std::istringstream is(line);
                std::string sl, local, remote, st;
                if (!(is >> sl >> local >> remote >> st))
                    continue;
                if (st == "0A" && local.size() > 5 && local.compare(local.size() - 5, 5, want) == 0)
                    return true;
            }
        }
        if (now_ms() >= deadline)
            return false;
        poll(nullptr, 0, 10);
    }
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

std::vector<std::string> split_lines(const std::string &s)
{
    std::vector<std::string> r;
    std::string line;
    std::istringstream is(s);
    while (std::getline(is, line))
        r.push_back(line);
    return r;
}

std::string drop_lines(const std::string &s, const std::string &prefix)
{
    std::string r;
    for (auto &l : split_lines(s))
        if (l.rfind(prefix, 0) != 0)
            r += l + "\n";
    return r;
}

std::string first_difference(const std::string &got, const std::string &want)
{
    if (got == want)
        return "";
    auto g = split_lines(got), w = split_lines(want);
    size_t n = std::max(g.size(), w.size());
    for (size_t i = 0; i < n; ++i) {
        std::string a = i < g.size() ? g[i] : "<missing>";
        std::string b = i < w.size() ? w[i] : "<missing>";
        if (a != b)
            return "line " + std::to_string(i + 1) + ": got [" + a + "] want [" + b + "]";
    }
    return "trailing newline differs";
}

LogCheck check_log(const std::string &text)
{
    static const std::regex line_re(R"(^rdmasock\[(\d+)\]: (error|warn|info|debug|trace): (.*)$)");
    static const std::regex addr_re(R"(^(\d+\.\d+\.\d+\.\d+|\[[0-9a-fA-F:.]+\]):\d+$)");
    static const std::regex num_re(R"(^\d+$)");
    LogCheck lc;
    for (auto &line : split_lines(text)) {
        std::smatch m;
        if (!std::regex_match(line, m, line_re)) {
            lc.problems.push_back("malformed log line: " + line);
            continue;
        }
        std::string level = m[2], msg = m[3];
        if (level == "error" || level == "warn") {
            lc.problems.push_back("unexpected " + level + " line: " + line);
            continue;
        }
        if (msg.rfind("event=close ", 0) != 0)
            continue;
        Fields f;
        f["pid"] = m[1];
        f["level"] = level;
        std::vector<std::string> keys;
        std::istringstream is(msg);
        std::string tok;
        bool bad = false;
        while (is >> tok) {
            size_t eq = tok.find('=');
            if (eq == std::string::npos || eq == 0) {
                bad = true;
                break;
            }
            keys.push_back(tok.substr(0, eq));
            f[tok.substr(0, eq)] = tok.substr(eq + 1);
        }
        std::vector<std::string> want = {"event", "fd", "role", "local", "peer", "transport"};
        if (f.count("reason"))
            want.push_back("reason");
        want.push_back("bytes_sent");
        want.push_back("bytes_received");
        if (bad || keys != want)
            lc.problems.push_back("close line keys not as documented: " + line);
        else if (level != "info")
            lc.problems.push_back("close line not at level info: " + line);
        else if (!std::regex_match(f["fd"], num_re) || !std::regex_match(f["bytes_sent"], num_re) ||
                 !std::regex_match(f["bytes_received"], num_re))
            lc.problems.push_back("close line with a non-numeric value: " + line);
        else if (f["role"] != "client" && f["role"] != "server")
            lc.problems.push_back("close line with role " + f["role"] + ": " + line);
        else if (!std::regex_match(f["local"], addr_re) || !std::regex_match(f["peer"], addr_re))
            lc.problems.push_back("close line with a malformed address: " + line);
        else if (f["transport"] != "tcp" && f["transport"] != "rdma")
            lc.problems.push_back("close line with transport " + f["transport"] + ": " + line);
        else if (f["transport"] == "tcp" && (!f.count("reason") || f["reason"].empty()))
            lc.problems.push_back("tcp close line without a reason: " + line);
        lc.closes.push_back(f);
    }
    return lc;
}

}  // namespace harness
