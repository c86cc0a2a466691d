// rdmasock: run a program with librdmasock.so preloaded.
//
//   rdmasock [options] PROGRAM [ARGS...]
//
// Adds the library to LD_PRELOAD (keeping what is there), sets the RDMASOCK_*
// variables the options ask for, and execs PROGRAM.
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <getopt.h>
#include <netinet/in.h>
#include <string>
#include <unistd.h>

#include "config.h"
#include "base/log.hh"
#include "base/reason.hh"
#include "config/config.hh"
#include "config/rules.hh"
#include "tools/check.hh"
#include "tools/ss.hh"
#include "tools/system.hh"

#ifndef RDMASOCK_LIBDIR
#define RDMASOCK_LIBDIR "/usr/lib/rdmasock"
#endif

namespace {

const char *const kLibName = "librdmasock.so";

std::string default_for(const rdmasock::TunableInfo &t)
{
    if (!strcmp(t.kind, "level"))
        return rdmasock::log::level_name(atoi(t.def));
    if (!strcmp(t.kind, "string"))
        return "(unset)";
    return t.def;
}

void usage(FILE *out)
{
    fprintf(out,
            "Usage: rdmasock [OPTIONS] PROGRAM [ARGS...]\n"
            "       rdmasock rules test PROGRAM client|server ADDRESS:PORT\n"
            "       rdmasock system enable|disable|status [--lib PATH]\n"
            "       rdmasock ss [-a|-l] [--json] [-p PID] [--port PORT] [-t rdma|tcp] [-w SECONDS]\n"
            "       rdmasock stat [--json] [-p PID] [-w SECONDS]\n"
            "       rdmasock check [--json] HOST:PORT\n"
            "       rdmasock doctor [--json]\n"
            "Run PROGRAM with librdmasock.so preloaded: its TCP connections to peers that also\n"
            "run rdmasock move onto RDMA; everything else stays kernel TCP.\n"
            "\n"
            "Options:\n"
            "  -d, --debug            same as --log-level=debug\n"
            "  -v, --verbose          same as --log-level=info (one line per closed connection)\n"
            "  -l, --log-level LEVEL  error, warn, info, debug or trace\n"
            "  -o, --log-file FILE    append log lines to FILE instead of standard error\n"
            "  -n, --disable          load the library but offload nothing (RDMASOCK_ENABLE=0)\n"
            "      --lib PATH         use this librdmasock.so\n"
            "      --print-lib        print the library path that would be preloaded, and exit\n"
            "  -h, --help             show this help and exit\n"
            "  -V, --version          show the version and exit\n"
            "\n"
            "ss: the live connections of the processes that run the library (yours; all as\n"
            "root) with their transport, the reason they are not on RDMA, phase and bytes;\n"
            "stat: their totals, and the connections closed since each process started.\n"
            "check: would a connection to HOST:PORT go over RDMA (one is made), and if not why\n"
            "and what to do; doctor: this machine's devices, ports, addresses and limits.\n"
            "(rdmasock ss --help, rdmasock stat --help, rdmasock check, rdmasock doctor --help)\n"
            "\n"
            "rules test: which line of the offload rules (rdmasock.conf(5)) decides a connection\n"
            "of PROGRAM in that role whose server end is ADDRESS:PORT; exit status 0 when it may\n"
            "go over RDMA, 1 when it stays on TCP.  (To run a program named rules: rdmasock -- rules.)\n"
            "\n"
            "system enable: check that programs run under the library, then add it to\n"
            "/etc/ld.so.preload (every process started after that loads it); disable removes\n"
            "it; status says whether it is there (exit 0) or not (exit 1).  As root.\n"
            "\n"
            "Environment (each option above sets one of these; they can also be set directly):\n");
    unsigned n = 0;
    const rdmasock::TunableInfo *t = rdmasock::tunables(&n);
    for (unsigned i = 0; i < n; ++i) {
        std::string range;
        if (!strcmp(t[i].kind, "int"))
            range = ", " + std::to_string(t[i].min) + ".." + std::to_string(t[i].max);
        fprintf(out, "  %-28s %s (%s%s, default %s)\n", t[i].env, t[i].doc, t[i].kind,
                range.c_str(), default_for(t[i]).c_str());
    }
    fprintf(out, "  %-28s %s\n", "RDMASOCK_LIB", "path of librdmasock.so for this launcher");
    fprintf(out, "\nSee rdmasock(1) and rdmasock(7).\n");
}

// roff for the man page's ENVIRONMENT and FALLBACK REASONS sections (build time).
void man_sections()
{
    unsigned n = 0;
    const rdmasock::TunableInfo *t = rdmasock::tunables(&n);
    printf(".SH ENVIRONMENT\n");
    for (unsigned i = 0; i < n; ++i) {
        printf(".TP\n.B %s\n%s.\nType %s", t[i].env, t[i].doc, t[i].kind);
        if (!strcmp(t[i].kind, "int"))
            printf(", %ld to %ld", t[i].min, t[i].max);
        printf("; default %s.\n", default_for(t[i]).c_str());
    }
    printf(".PP\nA malformed or out-of-range value produces one warning line and the default.\n"
           "In secure-execution mode (setuid or file-capability programs) no variable is read\n"
           "and the library is a pure pass-through.\n");
    printf(".SH FALLBACK REASONS\nEvery TCP connection that is not on RDMA carries one of these "
           "codes (reason=CODE):\n");
    for (unsigned i = 0; i < rdmasock::kReasonCount; ++i) {
        auto r = static_cast<rdmasock::Reason>(i);
        printf(".TP\n.B %s\n%s.\n", rdmasock::reason_code(r), rdmasock::reason_doc(r));
    }
}

bool exists(const std::string &p) { return access(p.c_str(), R_OK) == 0; }

// The library next to a build-tree launcher, else the installed one.
std::string find_lib()
{
    if (const char *e = getenv("RDMASOCK_LIB"); e && *e)
        return e;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        std::string dir(self);
        dir.erase(dir.rfind('/'));
        for (const char *rel : {"/../.libs/", "/../lib/rdmasock/"}) {
            std::string p = dir + rel + kLibName;
            if (exists(p)) {
                char real[PATH_MAX];
                return realpath(p.c_str(), real) ? std::string(real) : p;
            }
        }
    }
    return std::string(RDMASOCK_LIBDIR) + "/" + kLibName;
}

void rules_warn(const char *line, void *) { fprintf(stderr, "rdmasock: %s\n", line); }

// rdmasock rules test PROGRAM ROLE ADDRESS:PORT: the rule that decides such a connection.
// Exit 0: RDMA may be used, 1: kept on TCP, 2: usage.
int rules_command(int argc, char **argv)
{
    if (argc != 5 || strcmp(argv[1], "test") != 0) {
        fprintf(stderr, "Usage: rdmasock rules test PROGRAM client|server ADDRESS:PORT\n"
                        "  (ADDRESS:PORT is the server end: [IPv6]:PORT for IPv6; the rules file is\n"
                        "  RDMASOCK_RULES_FILE, else %s)\n",
                rdmasock::rules::kDefaultPath);
        return 2;
    }
    rdmasock::rules::Side side;
    if (!strcmp(argv[3], "client")) {
        side = rdmasock::rules::client;
    } else if (!strcmp(argv[3], "server")) {
        side = rdmasock::rules::server;
    } else {
        fprintf(stderr, "rdmasock: rules test: the role is client or server, not '%s'\n", argv[3]);
        return 2;
    }
    sockaddr_storage ss{};
    if (!rdmasock::rules::parse_endpoint(argv[4], &ss)) {
        fprintf(stderr, "rdmasock: rules test: '%s' is not ADDRESS:PORT or [IPv6]:PORT\n", argv[4]);
        return 2;
    }
    rdmasock::rules::File f = rdmasock::rules::load(getenv("RDMASOCK_RULES_FILE"), rules_warn, nullptr);
    const rdmasock::rules::Rule *r =
        rdmasock::rules::match(f, argv[2], side, reinterpret_cast<const sockaddr *>(&ss));
    if (r == nullptr) {
        printf("rdma: no rule in %s matches\n", f.path.c_str());
        return 0;
    }
    printf("%s: %s:%u: %s\n", r->rdma ? "rdma" : "tcp", f.path.c_str(), r->line, r->text.c_str());
    return r->rdma ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "rules"))
        return rules_command(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "ss"))
        return rdmasock::tool::ss_command(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "stat"))
        return rdmasock::tool::stat_command(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "check"))
        return rdmasock::tool::check_command(argc - 1, argv + 1, find_lib());
    if (argc > 1 && !strcmp(argv[1], "doctor"))
        return rdmasock::tool::doctor_command(argc - 1, argv + 1, find_lib());
    if (argc > 1 && !strcmp(argv[1], "system"))
        return rdmasock::tool::system_command(argc - 1, argv + 1, find_lib());
    // Options end at the first argument that is not one ("+"): the program's own
    // options follow it untouched.
    enum { kLib = 256, kPrintLib, kManSections };
    static const option longopts[] = {
        {"debug", no_argument, nullptr, 'd'},         {"verbose", no_argument, nullptr, 'v'},
        {"log-level", required_argument, nullptr, 'l'}, {"log-file", required_argument, nullptr, 'o'},
        {"disable", no_argument, nullptr, 'n'},       {"lib", required_argument, nullptr, kLib},
        {"print-lib", no_argument, nullptr, kPrintLib}, {"man-sections", no_argument, nullptr, kManSections},
        {"help", no_argument, nullptr, 'h'},          {"version", no_argument, nullptr, 'V'},
        {nullptr, 0, nullptr, 0},
    };
    std::string lib;
    bool print_lib = false;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "+:dvl:o:nhV", longopts, nullptr)) != -1;) {
        switch (c) {
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("rdmasock %s\n", PACKAGE_VERSION);
            return 0;
        case kManSections:
            man_sections();
            return 0;
        case 'd':
            setenv("RDMASOCK_LOG_LEVEL", "debug", 1);
            break;
        case 'v':
            setenv("RDMASOCK_LOG_LEVEL", "info", 1);
            break;
        case 'n':
            setenv("RDMASOCK_ENABLE", "0", 1);
            break;
        case 'l':
            if (rdmasock::log::parse_level(optarg) < 0) {
                fprintf(stderr, "rdmasock: bad log level '%s' (error, warn, info, debug, trace)\n", optarg);
                return 2;
            }
            setenv("RDMASOCK_LOG_LEVEL", optarg, 1);
            break;
        case 'o':
            setenv("RDMASOCK_LOG_FILE", optarg, 1);
            break;
        case kLib:
            lib = optarg;
            break;
        case kPrintLib:
            print_lib = true;
            break;
        case ':':
            fprintf(stderr, "rdmasock: option %s needs an argument\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "rdmasock: unknown option '%s' (see rdmasock --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (print_lib) {
        printf("%s\n", (lib.empty() ? find_lib() : lib).c_str());
        return 0;
    }
    const int i = optind;
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    if (lib.empty())
        lib = find_lib();
    if (!exists(lib)) {
        fprintf(stderr, "rdmasock: %s: %s\n", lib.c_str(), strerror(errno));
        return 127;
    }
    std::string preload = lib;
    if (const char *old = getenv("LD_PRELOAD"); old && *old) {
        std::string o = old;
        preload = o.find(lib) != std::string::npos ? o : o + ":" + lib;
    }
    setenv("LD_PRELOAD", preload.c_str(), 1);
    execvp(argv[i], argv + i);
    fprintf(stderr, "rdmasock: cannot run %s: %s\n", argv[i], strerror(errno));
    return errno == ENOENT ? 127 : 126;
}
