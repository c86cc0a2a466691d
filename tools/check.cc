// rdmasock check / rdmasock doctor (tools/check.hh).
//
// doctor reads the machine as the library would find it: the RDMA devices and their
// ports (sysfs), the network interfaces and addresses behind each port, the locked-memory
// limit against the ring size, the library, /etc/ld.so.preload and the rules file.
// check HOST:PORT also connects there once, as a program under the library would (the
// tool itself, preloaded, RDMASOCK_CONNECT_WAIT=1 and a 3 s probe timeout), asks the library for the
// connection's transport and reason (getsockopt RDMASOCK_INFO), and closes it: the
// server's program sees one connection that sends nothing.
#include "tools/check.hh"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <getopt.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sstream>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "base/reason.hh"
#include "config/config.hh"
#include "config/rules.hh"
#include "include/rdmasock.h"
#include "tools/ss.hh"

namespace rdmasock::tool {

namespace {

struct Item {
    explicit Item(const char *n, bool req = true) : name(n), required(req) {}
    std::string name;
    bool ok = true;
    bool required;  // a failure makes the verdict "no"
    std::string detail;
    std::string advice;
};

std::string read_line_of(const std::string &path)
{
    std::ifstream in(path);
    std::string l;
    std::getline(in, l);
    return l;
}

std::vector<std::string> dir_entries(const std::string &path)
{
    std::vector<std::string> v;
    if (DIR *d = opendir(path.c_str())) {
        while (dirent *e = readdir(d))
            if (e->d_name[0] != '.')
                v.push_back(e->d_name);
        closedir(d);
    }
    std::sort(v.begin(), v.end());
    return v;
}

// The addresses of interface `ifname` ("10.0.0.1 fd00::1").
std::string addresses_of(const std::string &ifname)
{
    std::string out;
    ifaddrs *ifa = nullptr;
    if (getifaddrs(&ifa) != 0)
        return out;
    for (ifaddrs *i = ifa; i != nullptr; i = i->ifa_next) {
        if (i->ifa_addr == nullptr || ifname != i->ifa_name)
            continue;
        const int fam = i->ifa_addr->sa_family;
        if (fam != AF_INET && fam != AF_INET6)
            continue;
        char host[NI_MAXHOST];
        if (getnameinfo(i->ifa_addr, fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6), host, sizeof host,
                        nullptr, 0, NI_NUMERICHOST) == 0)
            out += (out.empty() ? "" : " ") + std::string(host);
    }
    freeifaddrs(ifa);
    return out;
}


std::vector<Item> machine(const std::string &lib)
{
    std::vector<Item> items;
    Item l{"library"};
    l.ok = access(lib.c_str(), R_OK) == 0;
    l.detail = lib;
    if (!l.ok)
        l.advice = "install the rdmasock package, or name the library with --lib or RDMASOCK_LIB";
    items.push_back(l);

    Item dev{"rdma_ports"};
    unsigned active = 0;
    for (const auto &d : dir_entries("/sys/class/infiniband")) {
        for (const auto &p : dir_entries("/sys/class/infiniband/" + d + "/ports")) {
            const std::string base = "/sys/class/infiniband/" + d + "/ports/" + p;
            std::string state = read_line_of(base + "/state");  // "4: ACTIVE"
            const size_t colon = state.find(": ");
            if (colon != std::string::npos)
                state = state.substr(colon + 2);
            const std::string ndev = read_line_of(base + "/gid_attrs/ndevs/0");
            const std::string addrs = ndev.empty() ? "" : addresses_of(ndev);
            const bool up = state == "ACTIVE";
            if (up && !addrs.empty())
                ++active;
            dev.detail += (dev.detail.empty() ? "" : "; ") + d + " port " + p + " " + state +
                          (ndev.empty() ? "" : " netdev " + ndev) + (addrs.empty() ? " (no address)" : " " + addrs);
        }
    }
    dev.ok = active > 0;
    if (dev.detail.empty())
        dev.detail = "no RDMA device";
    if (!dev.ok)
        dev.advice = "load the NIC's RDMA driver and bring a port up with an IP address on its netdev "
                     "(soft-RoCE: modprobe rdma_rxe; rdma link add rxe0 type rxe netdev ETH)";
    items.push_back(dev);

    Item mem{"memlock"};
    rlimit rl{};
    getrlimit(RLIMIT_MEMLOCK, &rl);
    const char *ring_kb = getenv("RDMASOCK_RING_KB");
    const unsigned long ring = ring_bytes(ring_kb != nullptr ? atol(ring_kb) : 0);
    char buf[256];
    if (rl.rlim_cur == RLIM_INFINITY || geteuid() == 0) {
        snprintf(buf, sizeof buf, "%s; ring %lu KiB per direction", rl.rlim_cur == RLIM_INFINITY ? "unlimited" : "root",
                 ring / 1024);
    } else {
        const unsigned long per_conn = 2 * ring;  // receive ring and staging ring
        snprintf(buf, sizeof buf, "%llu KiB; ring %lu KiB per direction: about %llu connection(s) fit",
                 static_cast<unsigned long long>(rl.rlim_cur / 1024), ring / 1024,
                 static_cast<unsigned long long>(rl.rlim_cur / per_conn));
        mem.ok = rl.rlim_cur >= per_conn;
        if (!mem.ok || rl.rlim_cur / per_conn < 64)
            mem.advice = "raise the locked-memory limit (ulimit -l unlimited; LimitMEMLOCK=infinity for a "
                         "service; /etc/security/limits.d) or set a smaller RDMASOCK_RING_KB";
    }
    mem.detail = buf;
    items.push_back(mem);

    Item pre{"system_wide", false};
    std::ifstream in("/etc/ld.so.preload");
    std::string line;
    bool found = false;
    while (std::getline(in, line))
        found = found || line.find("librdmasock") != std::string::npos;
    pre.detail = found ? "in /etc/ld.so.preload" : "not in /etc/ld.so.preload (programs run under it one by one)";
    items.push_back(pre);

    Item rules{"rules", false};
    const char *path = getenv("RDMASOCK_RULES_FILE");
    unsigned warnings = 0;
    rules::File f = rules::load(path, [](const char *, void *ctx) { ++*static_cast<unsigned *>(ctx); }, &warnings);
    rules.ok = warnings == 0;
    rules.detail = std::string(path != nullptr && *path ? path : rules::kDefaultPath) + ": " +
                   std::to_string(f.rules.size()) + " rule(s), " + std::to_string(warnings) + " bad line(s)";
    if (!rules.ok)
        rules.advice = "rdmasock rules test PROGRAM client|server ADDRESS:PORT shows each bad line";
    items.push_back(rules);
    return items;
}

std::string json_str(const std::string &s)
{
    std::string o = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\')
            o += '\\';
        if (c >= 0x20)
            o += static_cast<char>(c);
    }
    return o + "\"";
}

std::string items_json(const std::vector<Item> &items)
{
    std::string o = "[";
    for (size_t i = 0; i < items.size(); ++i)
        o += std::string(i ? "," : "") + "{\"name\":" + json_str(items[i].name) + ",\"ok\":" +
             (items[i].ok ? "true" : "false") + ",\"detail\":" + json_str(items[i].detail) +
             ",\"advice\":" + json_str(items[i].advice) + "}";
    return o + "]";
}

void print_items(const std::vector<Item> &items)
{
    for (const auto &it : items) {
        printf("%-12s %-4s %s\n", it.name.c_str(), it.ok ? "ok" : (it.required ? "FAIL" : "warn"), it.detail.c_str());
        if (!it.advice.empty())
            printf("%-12s      -> %s\n", "", it.advice.c_str());
    }
}

bool ready(const std::vector<Item> &items)
{
    for (const auto &it : items)
        if (it.required && !it.ok)
            return false;
    return true;
}

// What to do about a connection that stays on TCP for `code`.
std::string advice_for(const std::string &code)
{
    static const std::pair<const char *, const char *> kAdvice[] = {
        {"no_device", "no active RDMA port here: see rdmasock doctor"},
        {"not_rdma_addr", "the connection's local address is not on an RDMA netdev: use the peer's address on "
                          "the RDMA network (rdmasock doctor lists the netdevs and their addresses)"},
        {"peer_no_rdmasock", "the server does not run rdmasock, or its RDMA listener cannot be reached: start it "
                             "under rdmasock (or LD_PRELOAD=librdmasock.so) and check rdmasock ss there"},
        {"peer_no_device", "the server runs rdmasock but has no usable RDMA device: rdmasock doctor there"},
        {"no_route", "no RDMA route to the peer: its address must be reachable through an RDMA netdev"},
        {"timeout", "the server's rdmasock did not answer in time: a loaded server, or a slow fabric "
                    "(RDMASOCK_PROBE_TIMEOUT_MS); see its log (RDMASOCK_LOG_LEVEL=info)"},
        {"rejected", "the server's rdmasock declined: see its log (RDMASOCK_LOG_LEVEL=info) and rdmasock ss there"},
        {"memlock", "the locked-memory limit is too small for the rings: raise it (ulimit -l, LimitMEMLOCK=) "
                    "or lower RDMASOCK_RING_KB"},
        {"rule", "an offload rule keeps it on TCP: rdmasock rules test PROGRAM client HOST:PORT"},
        {"disabled", "RDMASOCK_ENABLE=0 is set"},
        {"version_mismatch", "the two ends run different rdmasock protocol versions: install the same version"},
    };
    for (const auto &a : kAdvice)
        if (code == a.first)
            return a.second;
    for (unsigned r = 0; r < kReasonCount; ++r)
        if (code == reason_code(static_cast<Reason>(r)))
            return reason_doc(static_cast<Reason>(r));
    return "";
}

bool parse_target(const char *s, sockaddr_storage *ss)
{
    if (rules::parse_endpoint(s, ss))
        return true;
    std::string t(s);  // HOST:PORT with a name
    const size_t colon = t.rfind(':');
    if (colon == std::string::npos)
        return false;
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(t.substr(0, colon).c_str(), t.substr(colon + 1).c_str(), &hints, &res) != 0 || res == nullptr)
        return false;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return true;
}

// The probe, in a child run preloaded: connect, ask, print one line, close.
int probe(const char *target, int timeout_ms)
{
    sockaddr_storage ss{};
    if (!parse_target(target, &ss)) {
        printf("result error=bad_target\n");
        return 2;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM, 0);
    alarm(static_cast<unsigned>((timeout_ms + 999) / 1000));
    socklen_t len = ss.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr *>(&ss), len) != 0) {
        printf("result error=connect:%s\n", strerrorname_np(errno) != nullptr ? strerrorname_np(errno) : "?");
        return 2;
    }
    rdmasock_info info{};
    socklen_t il = sizeof info;
    if (getsockopt(fd, SOL_RDMASOCK, RDMASOCK_INFO, &info, &il) != 0) {
        printf("result error=no_library\n");
        return 2;
    }
    printf("result transport=%s reason=%s phase=%s\n", info.transport == RDMASOCK_RDMA ? "rdma" : "tcp",
           info.reason_code, info.phase);
    fflush(stdout);
    close(fd);
    return 0;
}

// Runs the probe under the library; its "result ..." line's fields.
std::string run_probe(const std::string &lib, const char *target, int timeout_ms)
{
    int p[2];
    if (pipe(p) != 0)
        return "error=pipe";
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], STDOUT_FILENO);
        close(p[0]);
        close(p[1]);
        setenv("LD_PRELOAD", lib.c_str(), 1);
        setenv("RDMASOCK_CONNECT_WAIT", "1", 1);
        // A fresh process's first connection waits only the short default for the peer's
        // answer (RDMASOCK_PROBE_TIMEOUT_MS, before any set-up time was measured): a
        // diagnosis waits longer, unless told otherwise.
        setenv("RDMASOCK_PROBE_TIMEOUT_MS", "3000", 0);
        setenv("RDMASOCK_LOG_LEVEL", "error", 1);
        unsetenv("RDMASOCK_LOG_FILE");
        const std::string t = std::to_string(timeout_ms);
        execl("/proc/self/exe", "rdmasock", "check", "--probe", target, t.c_str(), static_cast<char *>(nullptr));
        _exit(127);
    }
    close(p[1]);
    std::string out;
    char buf[512];
    pollfd pf{p[0], POLLIN, 0};
    while (poll(&pf, 1, timeout_ms + 2000) > 0) {
        ssize_t n = read(p[0], buf, sizeof buf);
        if (n <= 0)
            break;
        out.append(buf, static_cast<size_t>(n));
    }
    close(p[0]);
    if (pid > 0) {
        kill(pid, SIGKILL);  // (if it hangs; else it has exited)
        waitpid(pid, nullptr, 0);
    }
    const size_t at = out.find("result ");
    if (at == std::string::npos)
        return "error=no_answer";
    std::string line = out.substr(at + 7);
    return line.substr(0, line.find('\n'));
}

std::string field(const std::string &fields, const std::string &key)
{
    std::istringstream is(fields);
    std::string tok;
    while (is >> tok)
        if (tok.compare(0, key.size() + 1, key + "=") == 0)
            return tok.substr(key.size() + 1);
    return "";
}

// The options of doctor (--json) and check (--json, --timeout MS), through getopt_long;
// -1 to go on, else the exit status (after a message or the help).
int parse_options(int argc, char **argv, const char *help, bool *json, int *timeout_ms)
{
    static const option with_timeout[] = {{"json", no_argument, nullptr, 'j'},
                                          {"timeout", required_argument, nullptr, 't'},
                                          {"help", no_argument, nullptr, 'h'},
                                          {nullptr, 0, nullptr, 0}};
    static const option without[] = {{"json", no_argument, nullptr, 'j'},
                                     {"help", no_argument, nullptr, 'h'},
                                     {nullptr, 0, nullptr, 0}};
    const char *const cmd = argv[0];
    const option *const longopts = timeout_ms != nullptr ? with_timeout : without;
    optind = 0;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, ":jh", longopts, nullptr)) != -1;) {
        switch (c) {
        case 'j':
            *json = true;
            break;
        case 't': {
            long v = 0;
            if (!parse_number(optarg, 1, 600000, &v)) {
                fprintf(stderr, "rdmasock %s: bad value '%s' for --timeout\n", cmd, optarg);
                return 2;
            }
            *timeout_ms = static_cast<int>(v);
            break;
        }
        case 'h':
            fputs(help, stdout);
            return 0;
        case ':':
            fprintf(stderr, "rdmasock %s: %s needs a value\n", cmd, argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "rdmasock %s: unknown option '%s' (--help)\n", cmd, argv[optind - 1]);
            return 2;
        }
    }
    return -1;
}

}  // namespace

int doctor_command(int argc, char **argv, const std::string &lib)
{
    static const char help[] =
        "Usage: rdmasock doctor [--json]\n"
        "Checks this machine for RDMA: devices, ports and their addresses, the locked-memory\n"
        "limit, the library, the system-wide install and the rules file.  Exit 0 when\n"
        "connections could go over RDMA.\n";
    bool json = false;
    if (int rc = parse_options(argc, argv, help, &json, nullptr); rc >= 0)
        return rc;
    if (optind < argc) {
        fprintf(stderr, "rdmasock doctor: unexpected argument '%s' (--help)\n", argv[optind]);
        return 2;
    }
    const auto items = machine(lib);
    const bool ok = ready(items);
    if (json)
        printf("{\"ready\":%s,\"checks\":%s}\n", ok ? "true" : "false", items_json(items).c_str());
    else {
        print_items(items);
        printf("verdict: %s\n", ok ? "connections can go over RDMA" : "connections stay on TCP here");
    }
    return ok ? 0 : 1;
}

int check_command(int argc, char **argv, const std::string &lib)
{
    if (argc == 4 && !strcmp(argv[1], "--probe"))
        return probe(argv[2], atoi(argv[3]));
    static const char help[] =
        "Usage: rdmasock check [--json] [--timeout MS] HOST:PORT\n"
        "Connects to HOST:PORT once under the library (the server sees a connection that\n"
        "sends nothing) and says whether it went over RDMA, and if not why and what to do.\n"
        "Exit 0 on RDMA, 1 on TCP, 2 when the connection could not be made.\n";
    bool json = false;
    int timeout_ms = 10000;
    if (int rc = parse_options(argc, argv, help, &json, &timeout_ms); rc >= 0)
        return rc;
    if (optind + 1 != argc) {
        fputs(help, stderr);
        return 2;
    }
    const char *target = argv[optind];
    sockaddr_storage ss{};
    if (!parse_target(target, &ss)) {
        fprintf(stderr, "rdmasock check: '%s' is not ADDRESS:PORT, [IPv6]:PORT or HOST:PORT\n", target);
        return 2;
    }
    const auto items = machine(lib);
    const std::string res = run_probe(lib, target, timeout_ms);
    const std::string err = field(res, "error"), transport = field(res, "transport"), reason = field(res, "reason");
    const bool rdma = transport == "rdma";
    const std::string advice = err.empty() ? (rdma ? "" : advice_for(reason)) : "";
    if (json) {
        printf("{\"target\":%s,\"rdma\":%s,\"transport\":%s,\"reason\":%s,\"phase\":%s,\"error\":%s,\"advice\":%s,"
               "\"checks\":%s}\n",
               json_str(target).c_str(), rdma ? "true" : "false", json_str(transport).c_str(),
               json_str(rdma ? "none" : reason).c_str(), json_str(field(res, "phase")).c_str(),
               json_str(err).c_str(), json_str(advice).c_str(), items_json(items).c_str());
    } else {
        print_items(items);
        if (!err.empty())
            printf("%s: the probe failed (%s)\n", target, err.c_str());
        else if (rdma)
            printf("%s: RDMA (the connection went over RDMA)\n", target);
        else
            printf("%s: TCP, reason %s\n  -> %s\n", target, reason.c_str(), advice.c_str());
    }
    return !err.empty() ? 2 : (rdma ? 0 : 1);
}

}  // namespace rdmasock::tool
