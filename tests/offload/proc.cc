#include "tests/offload/proc.hh"

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

namespace offload {

double now_ms()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) * 1000.0 + static_cast<double>(ts.tv_nsec) / 1e6;
}

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

namespace {

std::vector<char *> cvec(const std::vector<std::string> &v)
{
    std::vector<char *> r;
    for (auto &s : v)
        r.push_back(const_cast<char *>(s.c_str()));
    r.push_back(nullptr);
    return r;
}

int remaining(double deadline)
{
    double r = deadline - now_ms();
    return r < 0 ? 0 : static_cast<int>(r) + 1;
}

}  // namespace

Proc::Proc(const std::vector<std::string> &argv, const Env &env, const std::string &err_file,
           const std::string &out_file)
{
    ::signal(SIGPIPE, SIG_IGN);
    int p[2] = {-1, -1};
    if (out_file.empty() && pipe2(p, O_CLOEXEC) < 0)
        return;
    std::vector<char *> a = cvec(argv), e = cvec(env);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        ::signal(SIGPIPE, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        int fi = open("/dev/null", O_RDONLY);
        int fo = out_file.empty() ? p[1] : open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(err_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fi < 0 || fo < 0 || fe < 0)
            _exit(126);
        dup2(fi, 0);
        dup2(fo, 1);
        dup2(fe, 2);
        if (syscall(SYS_close_range, 3U, ~0U, 0U) < 0)
            for (int fd = 3; fd < 1024; ++fd)
                close(fd);
        execvpe(a[0], a.data(), e.data());
        dprintf(2, "offload_tests: cannot exec %s: %s\n", a[0], strerror(errno));
        _exit(127);
    }
    if (p[1] >= 0)
        close(p[1]);
    if (pid < 0) {
        if (p[0] >= 0)
            close(p[0]);
        return;
    }
    setpgid(pid, pid);
    pid_ = pid;
    pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    out_ = p[0];
}

Proc::~Proc()
{
    if (pid_ > 0)
        kill_all();
    if (pidfd_ >= 0)
        close(pidfd_);
    if (out_ >= 0)
        close(out_);
}

int Proc::exit_code() const
{
    if (!reaped_)
        return -1;
    if (WIFEXITED(status_))
        return WEXITSTATUS(status_);
    if (WIFSIGNALED(status_))
        return 128 + WTERMSIG(status_);
    return -1;
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
    if (n == 0)
        return;
    int r = poll(p, static_cast<nfds_t>(n), timeout_ms);
    if (r <= 0)
        return;
    if (out_ >= 0 && p[0].revents) {
        char b[65536];
        ssize_t k = read(out_, b, sizeof b);
        if (k > 0) {
            buf_.append(b, static_cast<size_t>(k));
            all_.append(b, static_cast<size_t>(k));
        } else {
            close(out_);
            out_ = -1;
        }
    }
    if (!reaped_ && waitpid(pid_, &status_, WNOHANG) == pid_) {
        reaped_ = true;
        exit_ms_ = now_ms();
    }
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
        if ((out_ < 0 && reaped_) || now_ms() >= deadline || pid_ <= 0)
            return "";
        if (out_ < 0) {  // no pipe: just wait for the exit
            pump(remaining(deadline));
            if (out_ < 0 && reaped_)
                return "";
            continue;
        }
        pump(remaining(deadline));
    }
}

bool Proc::wait(int timeout_ms)
{
    if (pid_ <= 0)
        return false;
    double deadline = now_ms() + timeout_ms;
    while (!reaped_ || out_ >= 0) {
        if (now_ms() >= deadline)
            return reaped_;
        if (reaped_ && out_ >= 0) {
            // Exited; drain what is left in the pipe (a grandchild may hold it: bounded).
            pollfd p{out_, POLLIN, 0};
            if (poll(&p, 1, 200) <= 0) {
                close(out_);
                out_ = -1;
                break;
            }
        }
        pump(remaining(deadline));
    }
    return reaped_;
}

void Proc::signal(int sig)
{
    if (pid_ > 0 && !reaped_)
        ::kill(pid_, sig);
}

void Proc::kill_all()
{
    if (pid_ <= 0)
        return;
    ::kill(-pid_, SIGKILL);
    if (!reaped_) {
        if (waitpid(pid_, &status_, 0) == pid_) {
            reaped_ = true;
            exit_ms_ = now_ms();
        }
    }
}

std::string read_file(const std::string &path)
{
    std::string s;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return s;
    char b[65536];
    ssize_t k;
    while ((k = read(fd, b, sizeof b)) > 0)
        s.append(b, static_cast<size_t>(k));
    close(fd);
    return s;
}

bool write_file(const std::string &path, const std::string &data)
{
    FILE *f = fopen(path.c_str(), "w");
    if (f == nullptr)
        return false;
    bool ok = fwrite(data.data(), 1, data.size(), f) == data.size();
    return fclose(f) == 0 && ok;
}

Fields parse_kv(const std::string &line)
{
    Fields f;
    size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && line[i] == ' ')
            ++i;
        size_t j = line.find(' ', i);
        if (j == std::string::npos)
            j = line.size();
        std::string tok = line.substr(i, j - i);
        size_t eq = tok.find('=');
        if (eq != std::string::npos && eq > 0)
            f[tok.substr(0, eq)] = tok.substr(eq + 1);
        i = j;
    }
    return f;
}

std::vector<std::string> split_lines(const std::string &s)
{
    std::vector<std::string> v;
    size_t a = 0;
    while (a < s.size()) {
        size_t b = s.find('\n', a);
        if (b == std::string::npos)
            b = s.size();
        v.push_back(s.substr(a, b - a));
        a = b + 1;
    }
    return v;
}

TempDir::TempDir()
{
    const char *base = getenv("TEST_OFFLOAD_TMP");
    std::string t = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/offload-test-XXXXXX";
    std::vector<char> b(t.begin(), t.end());
    b.push_back('\0');
    if (mkdtemp(b.data()) != nullptr)
        path_ = b.data();
}

TempDir::~TempDir()
{
    if (path_.empty() || keep)
        return;
    nftw(
        path_.c_str(), [](const char *p, const struct stat *, int, FTW *) { return remove(p) < 0 ? 0 : 0; },
        16, FTW_DEPTH | FTW_PHYS);
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

bool tcp_listening(int port)
{
    std::string t = read_file("/proc/net/tcp");
    char want[16];
    snprintf(want, sizeof want, ":%04X ", port);
    for (const std::string &line : split_lines(t)) {
        // sl local_address rem_address st ...; st 0A = LISTEN
        size_t p = line.find(want);
        if (p != std::string::npos && p < 30 && line.find(" 0A ") != std::string::npos)
            return true;
    }
    return false;
}

int free_port(const std::string &addr)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
    socklen_t len = sizeof sa;
    int port = -1;
    if (bind(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr *>(&sa), &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

}  // namespace offload
