// rdmasock system enable|disable|status: the system-wide install through
// /etc/ld.so.preload, which the dynamic loader reads for every process it starts.
//
// A broken entry there breaks every dynamically linked program of the machine, so:
// enable first proves the library loads and runs programs under it (and refuses,
// changing nothing, otherwise); every change is one atomic rename of a complete new
// file; other entries are kept as they are; enable and disable are idempotent.
#include "tools/system.hh"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <spawn.h>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char **environ;

namespace rdmasock::tool {

namespace {

const char *const kDefaultFile = "/etc/ld.so.preload";

// Appends what fd yields up to its end, then closes it; false on a read error.
bool drain(int fd, std::string *out)
{
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        out->append(buf, static_cast<size_t>(n));
    close(fd);
    return n == 0;
}

bool read_all(const std::string &path, std::string *out, bool *missing)
{
    *missing = false;
    out->clear();
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *missing = errno == ENOENT;
        return *missing;
    }
    return drain(fd, out);
}

// The file's entries are separated by white space (and ':' in recent glibc); a line
// may hold several; '#' starts a comment, to the end of the line (as ld.so reads it).
// Ours: any entry naming a librdmasock.so (this install's or an old one's).
bool is_ours(const std::string &entry)
{
    const std::string name = "librdmasock.so";
    return entry.size() >= name.size() && entry.compare(entry.size() - name.size(), name.size(), name) == 0 &&
           (entry.size() == name.size() || entry[entry.size() - name.size() - 1] == '/');
}

std::vector<std::string> entries_of(const std::string &text)
{
    std::vector<std::string> v;
    std::string cur;
    bool comment = false;
    for (char ch : text + "\n") {
        if (ch == '\n')
            comment = false;
        else if (ch == '#')
            comment = true;
        if (comment || ch == ' ' || ch == '\t' || ch == '\n' || ch == ':') {
            if (!cur.empty())
                v.push_back(cur);
            cur.clear();
        } else {
            cur += ch;
        }
    }
    return v;
}

// The text without our entries: lines that held only ours go; a line with other
// entries too keeps them.
std::string without_ours(const std::string &text)
{
    std::string out;
    size_t at = 0;
    while (at < text.size()) {
        size_t nl = text.find('\n', at);
        std::string line = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
        at = nl == std::string::npos ? text.size() : nl + 1;
        auto es = entries_of(line);
        std::string kept;
        bool had_ours = false;
        for (const auto &e : es) {
            if (is_ours(e))
                had_ours = true;
            else
                kept += (kept.empty() ? "" : " ") + e;
        }
        if (!had_ours)
            out += line + "\n";
        else if (!kept.empty())
            out += kept + "\n";
    }
    return out;
}

// Write `text` as `path`, atomically: a complete temporary file beside it, synced, then
// renamed over it.  An empty text removes the file (the machine as it was before).
bool replace_file(const std::string &path, const std::string &text)
{
    if (entries_of(text).empty()) {
        if (unlink(path.c_str()) != 0 && errno != ENOENT) {
            fprintf(stderr, "rdmasock: cannot remove %s: %s\n", path.c_str(), strerror(errno));
            return false;
        }
        return true;
    }
    // A name of its own (O_EXCL): two runs at once never write into one temporary file;
    // the last rename wins, and the file is always one run's complete text.
    const std::string tmp = path + ".rdmasock-new." + std::to_string(getpid());
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        fprintf(stderr, "rdmasock: cannot create %s: %s\n", tmp.c_str(), strerror(errno));
        return false;
    }
    bool ok = fchmod(fd, 0644) == 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
              fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
        fprintf(stderr, "rdmasock: cannot write %s: %s\n", path.c_str(), strerror(errno));
        unlink(tmp.c_str());
        return false;
    }
    return true;
}

// Runs argv with only LD_PRELOAD=lib (and PATH) in its environment; its standard output
// in *out, standard error discarded unless it says something (then in *out too).
int run_under(const std::string &lib, const std::vector<std::string> &args, std::string *out)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_adddup2(&fa, p[1], 2);
    std::string pre = "LD_PRELOAD=" + lib;
    char path_var[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
    char *envp[] = {pre.data(), path_var, nullptr};
    std::vector<char *> argv;
    for (const auto &a : args)
        argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (rc != 0) {
        close(p[0]);
        return -1;
    }
    drain(p[0], out);
    int st = 0;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// A file every process of the machine will map: regular, and (as root) owned by root and
// writable by nobody else.
bool mappable(const std::string &path, bool as_root)
{
    struct stat st{};
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "rdmasock: %s: not a regular file (%s)\n", path.c_str(), strerror(errno));
        return false;
    }
    if (as_root && (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)))) {
        fprintf(stderr, "rdmasock: %s must be owned by root and writable only by root\n", path.c_str());
        return false;
    }
    return true;
}

// What enable proves before it writes anything: the library and the engine beside it
// (loaded at a process's first TCP socket) are mappable, and programs run under it as
// without it (a TCP connection loads the engine: a failure to load it prints a line,
// which the probe's transcript would show).
bool prove(const std::string &lib, bool as_root)
{
    if (lib.empty() || lib[0] != '/') {
        fprintf(stderr, "rdmasock: the library path must be absolute: '%s'\n", lib.c_str());
        return false;
    }
    if (!mappable(lib, as_root) ||
        !mappable(lib.substr(0, lib.rfind('/') + 1) + "librdmasock_engine.so", as_root))
        return false;
    struct Probe {
        std::vector<std::string> argv;
        const char *want;
    };
    const Probe probes[] = {
        {{"/bin/true"}, ""},
        {{"/bin/sh", "-c", "echo loaded"}, "loaded\n"},
        // A TCP connection over loopback, through the library's socket calls.
        {{"/bin/sh", "-c",
          "command -v python3 >/dev/null || { echo tcp; exit 0; }; exec python3 -c \""
          "import socket; l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen(1); "
          "c = socket.create_connection(l.getsockname()); s, _ = l.accept(); c.sendall(b'tcp'); c.close(); "
          "print(s.recv(3).decode())\""},
         "tcp\n"},
    };
    for (const auto &p : probes) {
        std::string out;
        int rc = run_under(lib, p.argv, &out);
        if (rc != 0 || out != p.want) {
            fprintf(stderr, "rdmasock: refusing: '%s' under %s exited %d, printed '%s' (want '%s')\n",
                    p.argv.back().c_str(), lib.c_str(), rc, out.c_str(), p.want);
            return false;
        }
    }
    return true;
}

void usage(FILE *out)
{
    fprintf(out, "Usage: rdmasock system enable|disable|status [--lib PATH] [--file PATH]\n"
                 "  enable   prove the library loads and runs programs, then add it to\n"
                 "           /etc/ld.so.preload: every process started after that loads it\n"
                 "  disable  remove it from /etc/ld.so.preload (other entries stay)\n"
                 "  status   say whether it is there; exit 0 enabled, 1 not\n"
                 "  --lib PATH   the library (default: the installed one)\n"
                 "  --file PATH  another file than /etc/ld.so.preload (tests)\n");
}

}  // namespace

int system_command(int argc, char **argv, const std::string &default_lib)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const std::string verb = argv[1];
    std::string lib = default_lib, file = kDefaultFile;
    for (int i = 2; i < argc; ++i) {
        std::string a = argv[i];
        if ((a == "--lib" || a == "--file") && i + 1 < argc)
            (a == "--lib" ? lib : file) = argv[++i];
        else if (a == "-h" || a == "--help") {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (verb != "enable" && verb != "disable" && verb != "status") {
        usage(stderr);
        return 2;
    }
    std::string text;
    bool missing = false;
    if (!read_all(file, &text, &missing)) {
        fprintf(stderr, "rdmasock: cannot read %s: %s\n", file.c_str(), strerror(errno));
        return 1;
    }
    std::string ours;
    for (const auto &e : entries_of(text))
        if (is_ours(e))
            ours = e;
    if (verb == "status") {
        if (ours.empty()) {
            printf("disabled: %s does not preload librdmasock.so\n", file.c_str());
            return 1;
        }
        printf("enabled: %s preloads %s%s\n", file.c_str(), ours.c_str(),
               access(ours.c_str(), R_OK) == 0 ? "" : " (missing!)");
        return 0;
    }
    const bool real_file = file == kDefaultFile;
    if (real_file && geteuid() != 0) {
        fprintf(stderr, "rdmasock: system %s changes %s: run it as root\n", verb.c_str(), file.c_str());
        return 1;
    }
    if (verb == "disable") {
        if (ours.empty()) {
            printf("already disabled: %s does not preload librdmasock.so\n", file.c_str());
            return 0;
        }
        if (!replace_file(file, without_ours(text)))
            return 1;
        printf("disabled: removed from %s; processes started from now on do not load it\n", file.c_str());
        return 0;
    }
    if (ours == lib) {
        printf("already enabled: %s preloads %s\n", file.c_str(), lib.c_str());
        return 0;
    }
    if (!prove(lib, real_file))
        return 1;
    // Another librdmasock.so (an older install) is replaced, not added beside.
    std::string next = without_ours(text);
    if (!next.empty() && next.back() != '\n')
        next += '\n';
    next += lib + "\n";
    if (!replace_file(file, next))
        return 1;
    printf("enabled: %s preloads %s; processes started from now on load it\n"
           "(to undo: rdmasock system disable, or remove that line from %s)\n",
           file.c_str(), lib.c_str(), file.c_str());
    return 0;
}

}  // namespace rdmasock::tool
