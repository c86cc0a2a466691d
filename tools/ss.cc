// rdmasock ss / rdmasock stat (tools/ss.hh).  Finds the processes that run the library
// by their abstract socket names in /proc/net/unix ("@rdmasock/PID", preload/report.hh),
// asks them all at once, and prints what they answer within the time.
#include "tools/ss.hh"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <getopt.h>
#include <map>
#include <poll.h>
#include <set>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

#include "base/credmsg.hh"

namespace rdmasock::tool {

namespace {

using Fields = std::map<std::string, std::string>;

struct Process {
    Fields info;                 // the "process" line
    std::vector<Fields> sockets; // the "socket" lines
    bool complete = false;       // its "end" came
};

constexpr char kPrefix[] = "@rdmasock/";

// The processes whose library has its socket (any user's: the answer says who may see).
std::vector<pid_t> library_processes()
{
    std::vector<pid_t> pids;
    std::set<pid_t> seen;
    std::ifstream in("/proc/net/unix");
    std::string line;
    while (std::getline(in, line)) {
        const size_t at = line.find(kPrefix);
        if (at == std::string::npos)
            continue;
        char *end = nullptr;
        long pid = strtol(line.c_str() + at + sizeof kPrefix - 1, &end, 10);
        if (pid > 0 && pid <= INT_MAX && (*end == '\0' || *end == ' ' || *end == '\n') && seen.insert(static_cast<pid_t>(pid)).second)
            pids.push_back(static_cast<pid_t>(pid));
    }
    return pids;
}

// Likely to answer: my own user's process, or any as root (the library decides; this
// only says whose answers are worth waiting for).
bool likely_mine(pid_t pid)
{
    struct stat st{};
    if (stat(("/proc/" + std::to_string(pid)).c_str(), &st) != 0)
        return false;
    return geteuid() == 0 || st.st_uid == geteuid() || st.st_uid == getuid();
}

Fields parse_fields(const std::string &line, size_t from)
{
    Fields f;
    std::istringstream is(line.substr(from));
    std::string tok;
    while (is >> tok) {
        const size_t eq = tok.find('=');
        if (eq != std::string::npos)
            f[tok.substr(0, eq)] = tok.substr(eq + 1);
    }
    return f;
}

std::map<pid_t, Process> ask(const std::vector<pid_t> &pids, int timeout_ms)
{
    std::map<pid_t, Process> out;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return out;
    sockaddr_un me{};
    me.sun_family = AF_UNIX;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
    if (bind(fd, reinterpret_cast<sockaddr *>(&me), sizeof(sa_family_t)) != 0) {  // an abstract name of its own
        close(fd);
        return out;
    }
    // Every process is asked (the library answers only its user or root); the wait ends
    // when the likely ones have answered, and a moment after.
    int expected = 0;
    for (pid_t pid : pids) {
        sockaddr_un to{};
        to.sun_family = AF_UNIX;
        int n = snprintf(to.sun_path + 1, sizeof to.sun_path - 1, "%s%d", kPrefix + 1, static_cast<int>(pid));
        socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + static_cast<size_t>(n));
        if (sendto(fd, "list\n", 5, MSG_DONTWAIT, reinterpret_cast<sockaddr *>(&to), len) == 5) {
            out[pid];
            expected += likely_mine(pid) ? 1 : 0;
        }
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    int done = 0;
    bool grace = false;
    std::vector<char> buf(65536);
    for (;;) {
        if (done >= expected && !grace) {
            grace = true;  // the others, which should not answer: a moment more
            deadline = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
        pollfd p{fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0)
            break;
        util::CredMsg r(buf.data(), buf.size());
        ssize_t n = recvmsg(fd, &r.m, 0);
        const size_t namelen = r.abstract_len();
        if (n <= 0 || namelen == 0)
            continue;
        const std::string name(r.from.sun_path + 1, namelen);
        if (name.compare(0, sizeof kPrefix - 2, kPrefix + 1) != 0)
            continue;
        const pid_t pid = static_cast<pid_t>(atoi(name.c_str() + sizeof kPrefix - 2));
        // Anyone can bind a name: only the process the name says answers for it (the
        // kernel's credentials on the datagram).
        const ucred *cred = r.cred();
        if (cred == nullptr || cred->pid != pid)
            continue;
        auto it = out.find(pid);
        if (it == out.end() || it->second.complete)
            continue;
        std::istringstream is(std::string(buf.data(), static_cast<size_t>(n)));
        std::string line;
        while (std::getline(is, line)) {
            if (line == "end") {
                it->second.complete = true;
                done += likely_mine(pid) ? 1 : 0;
            } else if (line.compare(0, 8, "process ") == 0) {
                it->second.info = parse_fields(line, 8);
            } else if (line.compare(0, 7, "socket ") == 0) {
                it->second.sockets.push_back(parse_fields(line, 7));
            }
        }
    }
    close(fd);
    for (auto it = out.begin(); it != out.end();)
        it = it->second.complete ? std::next(it) : out.erase(it);  // no (full) answer: gone, or not ours
    return out;
}

std::string json_str(const std::string &s)
{
    std::string o = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            o += '\\';
            o += static_cast<char>(c);
        } else if (c < 0x20) {
            char b[8];
            snprintf(b, sizeof b, "\\u%04x", c);
            o += b;
        } else {
            o += static_cast<char>(c);
        }
    }
    return o + "\"";
}

bool numeric(const std::string &s)
{
    return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos && s.size() < 19;
}

// One JSON object of the fields (numbers as numbers), after the members in `extra`.
std::string json_obj(const Fields &f, const std::string &extra = "")
{
    std::string o = "{" + extra;
    bool first = extra.empty();
    for (const auto &kv : f) {
        o += (first ? "" : ",") + json_str(kv.first) + ":" + (numeric(kv.second) ? kv.second : json_str(kv.second));
        first = false;
    }
    return o + "}";
}

// A field's value for the table: control characters (a program's name is the
// program's to choose) shown as '?'.
std::string get(const Fields &f, const char *k)
{
    auto it = f.find(k);
    if (it == f.end())
        return "-";
    std::string v = it->second;
    for (char &c : v)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
            c = '?';
    return v;
}

unsigned port_of(const std::string &addr)
{
    const size_t c = addr.rfind(':');
    return c == std::string::npos ? 0 : static_cast<unsigned>(atoi(addr.c_str() + c + 1));
}

struct Options {
    bool json = false;
    bool listening = false;  // also listening sockets (-l: only them; -a: both)
    bool all = false;
    pid_t pid = 0;
    unsigned port = 0;
    std::string transport;
    int watch_s = 0;
    int timeout_ms = 1000;
};

void ss_usage(FILE *out)
{
    fprintf(out,
            "Usage: rdmasock ss [-a|-l] [--json] [-p PID] [--port PORT] [-t rdma|tcp] [-w SECONDS]\n"
            "List the live TCP connections of every process that runs librdmasock and that you may\n"
            "see (yours; everyone's as root): process, role, addresses, transport, the reason a\n"
            "connection is not on RDMA, its phase and the bytes each way.\n"
            "  -a, --all          connections and listening sockets\n"
            "  -l, --listening    listening sockets only\n"
            "  -j, --json         one JSON array of objects\n"
            "  -p, --pid PID      only that process\n"
            "      --port PORT    only sockets whose local or peer port is PORT\n"
            "  -t, --transport T  only connections on T (rdma or tcp)\n"
            "  -w, --watch SECS   print again every SECS seconds (until interrupted)\n"
            "      --timeout MS   wait at most MS for the processes' answers (default 1000)\n");
}


// Parses the options of ss and stat (getopt_long); false (after a message) on a bad one.
bool parse(int argc, char **argv, Options &o, bool for_ss)
{
    enum { kPort = 256, kTimeout };
    static const option longopts[] = {
        {"json", no_argument, nullptr, 'j'},         {"all", no_argument, nullptr, 'a'},
        {"listening", no_argument, nullptr, 'l'},    {"pid", required_argument, nullptr, 'p'},
        {"port", required_argument, nullptr, kPort}, {"transport", required_argument, nullptr, 't'},
        {"watch", required_argument, nullptr, 'w'},  {"timeout", required_argument, nullptr, kTimeout},
        {"help", no_argument, nullptr, 'h'},         {nullptr, 0, nullptr, 0},
    };
    const char *const cmd = argv[0];
    optind = 0;  // (a fresh scan)
    opterr = 0;
    long v = 0;
    auto bad_value = [&](const char *opt) {
        fprintf(stderr, "rdmasock %s: bad value '%s' for %s\n", cmd, optarg, opt);
        return false;
    };
    for (int c; (c = getopt_long(argc, argv, ":jalp:t:w:h", longopts, nullptr)) != -1;) {
        const bool ss_only = c == 'a' || c == 'l' || c == kPort || c == 't';
        if (ss_only && !for_ss)
            c = '?';
        switch (c) {
        case 'j':
            o.json = true;
            break;
        case 'a':
            o.all = true;
            break;
        case 'l':
            o.listening = true;
            break;
        case 'p':
            if (!parse_number(optarg, 1, INT_MAX, &v))
                return bad_value("--pid");
            o.pid = static_cast<pid_t>(v);
            break;
        case kPort:
            if (!parse_number(optarg, 1, 65535, &v))
                return bad_value("--port");
            o.port = static_cast<unsigned>(v);
            break;
        case 't':
            o.transport = optarg;
            if (o.transport != "rdma" && o.transport != "tcp") {
                fprintf(stderr, "rdmasock ss: the transport is rdma or tcp, not '%s'\n", optarg);
                return false;
            }
            break;
        case 'w':
            if (!parse_number(optarg, 1, 86400, &v))
                return bad_value("--watch");
            o.watch_s = static_cast<int>(v);
            break;
        case kTimeout:
            if (!parse_number(optarg, 1, 600000, &v))
                return bad_value("--timeout");
            o.timeout_ms = static_cast<int>(v);
            break;
        case 'h':
            if (for_ss)
                ss_usage(stdout);
            else
                printf("Usage: rdmasock stat [--json] [-p PID] [-w SECONDS] [--timeout MS]\n"
                       "Totals of the processes that run librdmasock and that you may see: live\n"
                       "connections by transport and by reason, bytes, and the connections closed\n"
                       "since each process started; then the sums over them all.\n");
            exit(0);
        case ':':
            fprintf(stderr, "rdmasock %s: %s needs a value\n", cmd, argv[optind - 1]);
            return false;
        default:
            fprintf(stderr, "rdmasock %s: unknown option '%s' (--help)\n", cmd, argv[optind - 1]);
            return false;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "rdmasock %s: unexpected argument '%s' (--help)\n", cmd, argv[optind]);
        return false;
    }
    return true;
}

std::map<pid_t, Process> gather(const Options &o)
{
    std::vector<pid_t> pids = library_processes();
    if (o.pid != 0)
        pids.assign(1, o.pid);
    return ask(pids, o.timeout_ms);
}

bool wanted(const Options &o, const Fields &s)
{
    const bool listener = get(s, "role") == "listener";
    if (o.listening && !o.all ? !listener : (!o.all && listener))
        return false;
    if (!o.transport.empty() && get(s, "transport") != o.transport)
        return false;
    if (o.port != 0 && port_of(get(s, "local")) != o.port && port_of(get(s, "peer")) != o.port)
        return false;
    return true;
}

void print_ss(const Options &o, const std::map<pid_t, Process> &procs)
{
    if (o.json) {
        printf("[");
        bool first = true;
        for (const auto &p : procs)
            for (const auto &s : p.second.sockets)
                if (wanted(o, s)) {
                    printf("%s%s", first ? "" : ",\n ",
                           json_obj(s, "\"pid\":" + std::to_string(p.first) + ",\"program\":" +
                                           json_str(get(p.second.info, "program"))).c_str());
                    first = false;
                }
        printf("]\n");
        return;
    }
    printf("%-7s %-15s %-5s %-8s %-28s %-28s %-9s %-17s %-10s %12s %12s %s\n", "PID", "PROGRAM", "FD", "ROLE",
           "LOCAL", "PEER", "TRANSPORT", "REASON", "PHASE", "SENT", "RECEIVED", "LINK");
    for (const auto &p : procs)
        for (const auto &s : p.second.sockets)
            if (wanted(o, s))
                printf("%-7d %-15s %-5s %-8s %-28s %-28s %-9s %-17s %-10s %12s %12s %s\n", static_cast<int>(p.first),
                       get(p.second.info, "program").c_str(), get(s, "fd").c_str(), get(s, "role").c_str(),
                       get(s, "local").c_str(), get(s, "peer").c_str(), get(s, "transport").c_str(),
                       get(s, "reason").c_str(), get(s, "phase").c_str(), get(s, "bytes_sent").c_str(),
                       get(s, "bytes_received").c_str(), get(s, "link").c_str());
}

// Per process and in all: live connections by transport and reason, bytes, closed ones.
void print_stat(const Options &o, const std::map<pid_t, Process> &procs)
{
    std::map<std::string, unsigned long long> sum;
    unsigned long long setup_max = 0;
    std::string json = "{\"processes\":[";
    bool first = true;
    for (const auto &p : procs) {
        std::map<std::string, unsigned long long> t;
        for (const auto &s : p.second.sockets) {
            if (get(s, "role") == "listener")
                continue;
            ++t["live_" + get(s, "transport")];
            if (get(s, "transport") != "rdma")
                ++t["live_reason_" + get(s, "reason")];
            t["live_bytes_sent"] += strtoull(get(s, "bytes_sent").c_str(), nullptr, 10);
            t["live_bytes_received"] += strtoull(get(s, "bytes_received").c_str(), nullptr, 10);
        }
        for (const auto &kv : p.second.info)
            if (kv.first.compare(0, 7, "closed_") == 0 || kv.first == "switches" || kv.first == "setup_us_sum")
                t[kv.first] += strtoull(kv.second.c_str(), nullptr, 10);
        const unsigned long long max = strtoull(get(p.second.info, "setup_us_max").c_str(), nullptr, 10);
        Fields f;
        for (const auto &kv : t) {
            f[kv.first] = std::to_string(kv.second);
            sum[kv.first] += kv.second;
        }
        // How long the switches to RDMA took (connect() or accept() to the switch).
        if (t.count("switches") != 0 && t["switches"] != 0) {
            f["setup_us_max"] = std::to_string(max);
            f["setup_us_mean"] = std::to_string(t["setup_us_sum"] / t["switches"]);
            t["setup_us_max"] = max;
            t["setup_us_mean"] = t["setup_us_sum"] / t["switches"];
            setup_max = std::max(setup_max, max);
        }
        if (o.json) {
            json += std::string(first ? "" : ",") +
                    json_obj(f, "\"pid\":" + std::to_string(p.first) + ",\"program\":" +
                                    json_str(get(p.second.info, "program")) + ",\"version\":" +
                                    json_str(get(p.second.info, "version")));
        } else {
            printf("pid %d (%s):", static_cast<int>(p.first), get(p.second.info, "program").c_str());
            for (const auto &kv : t)
                printf(" %s=%llu", kv.first.c_str(), kv.second);
            printf("\n");
        }
        first = false;
    }
    if (sum.count("switches") != 0 && sum["switches"] != 0) {
        sum["setup_us_max"] = setup_max;
        sum["setup_us_mean"] = sum["setup_us_sum"] / sum["switches"];
    }
    Fields all;
    for (const auto &kv : sum)
        all[kv.first] = std::to_string(kv.second);
    if (o.json) {
        printf("%s],\"total\":%s}\n", json.c_str(),
               json_obj(all, "\"processes\":" + std::to_string(procs.size())).c_str());
        return;
    }
    printf("total: processes=%zu", procs.size());
    for (const auto &kv : sum)
        printf(" %s=%llu", kv.first.c_str(), kv.second);
    printf("\n");
}

int run(int argc, char **argv, bool for_ss)
{
    Options o;
    if (!parse(argc, argv, o, for_ss))
        return 2;
    for (;;) {
        auto procs = gather(o);
        if (o.watch_s > 0 && !o.json)
            printf("\033[H\033[2J");
        if (for_ss)
            print_ss(o, procs);
        else
            print_stat(o, procs);
        fflush(stdout);
        if (o.watch_s <= 0)
            return 0;
        sleep(static_cast<unsigned>(o.watch_s));
    }
}

}  // namespace

// A whole decimal number in [lo, hi], else false.
bool parse_number(const char *s, long lo, long hi, long *out)
{
    char *end = nullptr;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

int ss_command(int argc, char **argv) { return run(argc, argv, true); }
int stat_command(int argc, char **argv) { return run(argc, argv, false); }

}  // namespace rdmasock::tool
