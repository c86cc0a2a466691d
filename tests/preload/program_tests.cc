// Real programs, run without and with librdmasock.so preloaded; what matters must be the
// same (output, exit code, bytes transferred, replies, file contents).  Under the
// library the log (RDMASOCK_LOG_LEVEL=info, a temporary file) must hold only
// well-formed lines.  A case whose program is not installed is skipped with a message
// (tools/install-deps installs them all).
//
// The setuid case checks secure-execution mode from outside the process: the library is
// loaded, yet it reads no environment, opens nothing and starts nothing.
#define BOOST_TEST_MODULE rdmasock preload real programs
#include <boost/test/unit_test.hpp>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <glob.h>
#include <iostream>
#include <pwd.h>
#include <regex>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/common/closelog.hh"
#include "tests/common/files.hh"
#include "tests/common/ports.hh"
#include "tests/common/proc.hh"
#include "tests/common/text.hh"

#ifndef RDMASOCK_BUILD_LIB
#error RDMASOCK_BUILD_LIB must name the built librdmasock.so
#endif
#ifndef SOCKPROBE
#error SOCKPROBE must name the built sockprobe
#endif

namespace {

using testcommon::Env;
using testcommon::Result;

const std::string kLib = RDMASOCK_BUILD_LIB;
const std::string kProbe = SOCKPROBE;

// Precondition: one of the programs is installed; otherwise the case is skipped.
struct Installed {
    std::vector<std::string> names;
    boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const
    {
        for (auto &n : names) {
            if (testcommon::find_program({n}).empty()) {
                boost::test_tools::assertion_result r(false);
                r.message() << n << " is not installed (tools/install-deps installs it)";
                std::cerr << "SKIP: " << n << " is not installed (tools/install-deps installs it)\n";
                return r;
            }
        }
        return true;
    }
};

std::string program(const std::string &name)
{
    if (name == "python3" && access("/usr/bin/python3", X_OK) == 0)
        return "/usr/bin/python3";  // the system interpreter, not a version-manager shim
    return testcommon::find_program({name});
}

void require_lib()
{
    BOOST_REQUIRE_MESSAGE(testcommon::file_exists(kLib), "the library is not built: " << kLib);
}

// Check a log written by the library: well-formed, and return its close lines.
testcommon::CloseLog checked_log(const std::string &path)
{
    testcommon::CloseLog lc = testcommon::check_close_log(testcommon::read_file(path));
    for (auto &p : lc.problems)
        BOOST_ERROR(p);
    for (auto &f : lc.closes)
        BOOST_CHECK_MESSAGE(f.at("transport") == "tcp", "a connection on loopback reported transport "
                                                            << f.at("transport"));
    return lc;
}

size_t count_role(const testcommon::CloseLog &lc, const std::string &role)
{
    size_t n = 0;
    for (auto &f : lc.closes)
        n += f.at("role") == role;
    return n;
}

// Run argv without and with the library; both results must be identical.  No socket is
// created, so the library must not even open its log file (nothing starts before the
// first eligible socket).
std::pair<Result, Result> same_both_ways(const std::vector<std::string> &argv, const std::string &in = "",
                                         bool expect_no_log = true)
{
    require_lib();
    testcommon::TempDir td;
    std::string log = td / "rdmasock.log";
    Env env = testcommon::base_env();
    Result a = testcommon::run(argv, env, 30000, in);
    Result b = testcommon::run(argv, testcommon::with_lib(env, kLib, "info", log), 30000, in);
    BOOST_CHECK_MESSAGE(!a.timed_out && !b.timed_out, "timed out: " << a.describe() << b.describe());
    BOOST_CHECK_MESSAGE(a.out == b.out, "standard output differs\n--- without ---\n"
                                            << a.out << "--- with ---\n" << b.out);
    BOOST_CHECK_MESSAGE(a.err == b.err, "standard error differs\n--- without ---\n"
                                            << a.err << "--- with ---\n" << b.err);
    BOOST_CHECK_EQUAL(a.exit_code(), b.exit_code());
    if (expect_no_log)
        BOOST_CHECK_MESSAGE(!testcommon::file_exists(log), "the library opened its log file in a program "
                                                        "without sockets:\n" << testcommon::read_file(log));
    return {a, b};
}

// Is `path` a statically linked ELF executable (no PT_INTERP)?
bool is_static_elf(const std::string &path)
{
    std::string s = testcommon::read_file(path);
    if (s.size() < sizeof(Elf64_Ehdr) || s.compare(0, 4, ELFMAG) != 0 || s[EI_CLASS] != ELFCLASS64)
        return false;
    Elf64_Ehdr eh;
    memcpy(&eh, s.data(), sizeof eh);
    for (unsigned i = 0; i < eh.e_phnum; ++i) {
        size_t off = eh.e_phoff + static_cast<size_t>(i) * eh.e_phentsize;
        if (off + sizeof(Elf64_Phdr) > s.size())
            return false;
        Elf64_Phdr ph;
        memcpy(&ph, s.data() + off, sizeof ph);
        if (ph.p_type == PT_INTERP)
            return false;
    }
    return true;
}

// The number after "bytes": in the object that follows `key` in iperf3's JSON "end".
long long iperf_bytes(const std::string &json, const std::string &key)
{
    std::smatch top;  // the top-level "end" is the only one whose value is an object
    if (!std::regex_search(json, top, std::regex(R"("end"\s*:\s*\{)")))
        return -1;
    size_t k = json.find("\"" + key + "\"", static_cast<size_t>(top.position(0)));
    if (k == std::string::npos)
        return -1;
    std::smatch m;
    std::string rest = json.substr(k);
    if (!std::regex_search(rest, m, std::regex(R"("bytes"\s*:\s*(\d+))")))
        return -1;
    return std::stoll(m[1]);
}

std::string blob(size_t n)
{
    std::string s(n, '\0');
    uint32_t x = 12345;
    for (size_t i = 0; i < n; ++i) {
        x = x * 1103515245u + 12345u;
        s[i] = static_cast<char>(x >> 16);
    }
    return s;
}

// Does /proc/PID/maps map `path` (compared by device and inode, so symlinks match)?
bool maps_file(pid_t pid, const std::string &path)
{
    struct stat st;
    if (stat(path.c_str(), &st) != 0)
        return false;
    std::string maps = testcommon::read_file("/proc/" + std::to_string(pid) + "/maps");
    for (auto &l : testcommon::split_lines(maps)) {
        size_t slash = l.find('/');
        if (slash == std::string::npos)
            continue;
        struct stat ms;
        if (stat(l.substr(slash).c_str(), &ms) == 0 && ms.st_dev == st.st_dev && ms.st_ino == st.st_ino)
            return true;
    }
    return false;
}

}  // namespace

/* ---- ordinary programs ------------------------------------------------------------- */

BOOST_AUTO_TEST_CASE(ls_root, *boost::unit_test::precondition(Installed{{"ls"}}))
{
    auto r = same_both_ways({program("ls"), "/"});
    BOOST_CHECK_EQUAL(r.first.exit_code(), 0);
    BOOST_CHECK(r.first.out.find("usr\n") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(true_exits_zero, *boost::unit_test::precondition(Installed{{"true"}}))
{
    auto r = same_both_ways({program("true")});
    BOOST_CHECK_EQUAL(r.first.exit_code(), 0);
    BOOST_CHECK(r.first.out.empty() && r.first.err.empty());
}

BOOST_AUTO_TEST_CASE(sh_exit_code, *boost::unit_test::precondition(Installed{{"sh"}}))
{
    auto r = same_both_ways({program("sh"), "-c", "echo out; echo err >&2; exit 3"});
    BOOST_CHECK_EQUAL(r.first.exit_code(), 3);
    BOOST_CHECK_EQUAL(r.first.out, "out\n");
    BOOST_CHECK_EQUAL(r.first.err, "err\n");
}

BOOST_AUTO_TEST_CASE(python_prints, *boost::unit_test::precondition(Installed{{"python3"}}))
{
    auto r = same_both_ways({program("python3"), "-c",
                             "import socket, sys\n"
                             "print('hello', sum(range(1000)))\n"
                             "a, b = socket.socketpair()\n"
                             "a.sendall(b'x' * 100000); a.close()\n"
                             "n = 0\n"
                             "while True:\n"
                             "    d = b.recv(65536)\n"
                             "    if not d: break\n"
                             "    n += len(d)\n"
                             "print(n)\n"
                             "sys.exit(7)\n"});
    BOOST_CHECK_EQUAL(r.first.exit_code(), 7);
    BOOST_CHECK_EQUAL(r.first.out, "hello 499500\n100000\n");
}

// Nothing heavy at load (system-wide install): a program that makes no connection that
// could be offloaded (a socketpair, UDP, TCP over loopback) maps no rdma-core library, no
// libstdc++, no libunwind, and has the same threads and descriptors as without the
// library.  The program prints what it sees; both runs must print the same, and that is
// checked to be nothing.
BOOST_AUTO_TEST_CASE(nothing_loaded_without_an_eligible_socket, *boost::unit_test::precondition(Installed{{"python3"}}))
{
    const std::string script =
        "import os, socket\n"
        "a, b = socket.socketpair(); a.sendall(b'x' * 1000); b.recv(1000)\n"
        "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.1', 0))\n"
        "l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen(1)\n"
        "c = socket.create_connection(l.getsockname()); s, _ = l.accept()\n"
        "c.sendall(b'y' * 100000); c.shutdown(socket.SHUT_WR)\n"
        "n = 0\n"
        "while True:\n"
        "    d = s.recv(65536)\n"
        "    if not d: break\n"
        "    n += len(d)\n"
        "heavy = ('libibverbs', 'librdmacm', 'libstdc++', 'libunwind', 'libnl-', 'liblzma', 'libmlx', 'librxe')\n"
        "maps = sorted({l.split()[-1] for l in open('/proc/self/maps') if any(h in l for h in heavy)})\n"
        "print('received', n)\n"
        "print('heavy libraries:', maps)\n"
        "print('threads:', len(os.listdir('/proc/self/task')))\n"
        "print('descriptors:', len(os.listdir('/proc/self/fd')))\n";
    // The library as a system-wide install has it: preloaded, nothing configured (no
    // log file, which would be one descriptor more).
    require_lib();
    const std::vector<std::string> argv = {program("python3"), "-c", script};
    Result a = testcommon::run(argv, testcommon::base_env(), 30000);
    Result b = testcommon::run(argv, testcommon::with_lib(testcommon::base_env(), kLib, "", ""), 30000);
    BOOST_CHECK_EQUAL(a.exit_code(), 0);
    BOOST_CHECK_EQUAL(b.exit_code(), 0);
    BOOST_CHECK_MESSAGE(a.out == b.out, "what the program sees differs\n--- without ---\n"
                                            << a.out << "--- with ---\n" << b.out << b.err);
    BOOST_CHECK_MESSAGE(b.out.find("heavy libraries: []\n") != std::string::npos, "with the library:\n" << b.out);
    BOOST_CHECK_MESSAGE(b.out.find("threads: 1\n") != std::string::npos, "with the library:\n" << b.out);
}

// A process start maps the shim only: the engine is loaded at the first socket that may
// be offloaded (a TCP socket), not by a socketpair, a UDP socket, a fork or signal handlers.
BOOST_AUTO_TEST_CASE(engine_loaded_at_the_first_tcp_socket, *boost::unit_test::precondition(Installed{{"python3"}}))
{
    const std::string script =
        "import os, signal, socket\n"
        "def ours(): return sorted({os.path.basename(l.split()[-1]) for l in open('/proc/self/maps') if 'librdmasock' in l})\n"
        "print('start:', ours())\n"
        "signal.signal(signal.SIGUSR1, lambda *a: None)\n"
        "a, b = socket.socketpair(); u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "pid = os.fork()\n"
        "if pid == 0: os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print('no tcp socket:', ours())\n"
        "t = socket.socket()\n"
        "print('tcp socket:', ours())\n";
    require_lib();
    Result r = testcommon::run({program("python3"), "-c", script},
                               testcommon::with_lib(testcommon::base_env(), kLib, "", ""), 30000);
    BOOST_CHECK_EQUAL(r.exit_code(), 0);
    BOOST_CHECK_EQUAL(r.out, "start: ['librdmasock.so']\n"
                             "no tcp socket: ['librdmasock.so']\n"
                             "tcp socket: ['librdmasock.so', 'librdmasock_engine.so']\n");
    BOOST_CHECK_EQUAL(r.err, "");
}

// What the library costs every process start (as /etc/ld.so.preload has it), counted in
// instructions with callgrind (deterministic; the VM's system/start_cost gives the time,
// too noisy under emulation to hold a few percent): /bin/true with no preload, with an
// empty library preloaded and with librdmasock.so.  Held: at most 15% more than the
// empty library (the shim maps nothing else until a TCP socket: the whole engine at
// start cost +70-77% in time).
BOOST_AUTO_TEST_CASE(start_instructions, *boost::unit_test::precondition(Installed{{"valgrind", "true"}}))
{
    require_lib();
    auto count = [](const std::string &preload) {
        testcommon::Env env = testcommon::base_env();
        if (!preload.empty())
            testcommon::set_var(env, "LD_PRELOAD", preload);
        Result r = testcommon::run({program("valgrind"), "--tool=callgrind", "--callgrind-out-file=/dev/null",
                                    program("true")},
                                   env, 120000);
        BOOST_REQUIRE_MESSAGE(r.exit_code() == 0, r.describe());
        std::smatch m;
        BOOST_REQUIRE_MESSAGE(std::regex_search(r.err, m, std::regex("Collected : ([0-9]+)")), r.err);
        return std::stod(m[1].str());
    };
    const double none = count(""), empty = count(PROGRAM_EMPTY_PRELOAD), ours = count(kLib);
    char line[300];
    snprintf(line, sizeof line,
             "start_instructions: /bin/true: %.0f instructions without a preload, %.0f with an empty library "
             "(%+.1f%%), %.0f with librdmasock.so (%+.1f%%; %+.1f%% over the empty one)",
             none, empty, (empty / none - 1) * 100, ours, (ours / none - 1) * 100, (ours / empty - 1) * 100);
    BOOST_TEST_MESSAGE(line);
    std::cout << line << std::endl;
    BOOST_CHECK_MESSAGE(ours <= empty * 1.15, line);
}

BOOST_AUTO_TEST_CASE(static_busybox, *boost::unit_test::precondition(Installed{{"busybox"}}))
{
    std::string bb = testcommon::file_exists("/bin/busybox") ? "/bin/busybox" : program("busybox");
    if (!is_static_elf(bb)) {
        std::cerr << "SKIP: " << bb << " is not statically linked (install busybox-static)\n";
        BOOST_TEST_MESSAGE("skipped: " << bb << " is not statically linked");
        return;
    }
    auto e = same_both_ways({bb, "echo", "hi"});
    BOOST_CHECK_EQUAL(e.first.out, "hi\n");
    BOOST_CHECK_EQUAL(e.first.exit_code(), 0);
    auto w = same_both_ways({bb, "wc"}, "one two\nthree\n");
    BOOST_CHECK_EQUAL(e.first.exit_code(), 0);
    std::istringstream is(w.first.out);
    long lines = -1, words = -1, bytes = -1;
    is >> lines >> words >> bytes;
    BOOST_CHECK_EQUAL(lines, 2);
    BOOST_CHECK_EQUAL(words, 3);
    BOOST_CHECK_EQUAL(bytes, 14);
    auto f = same_both_ways({bb, "sh", "-c", "exit 5"});
    BOOST_CHECK_EQUAL(f.first.exit_code(), 5);
}

/* ---- the launcher ------------------------------------------------------------------- */

#ifdef RDMASOCK_LAUNCHER
// tools/rdmasock -v -o LOG PROGRAM: the same transcript as without it, the exit code
// passed through, and the close lines of the program's two connection ends.
BOOST_AUTO_TEST_CASE(launcher_runs_program)
{
    require_lib();
    const std::string launcher = RDMASOCK_LAUNCHER;
    BOOST_REQUIRE_MESSAGE(testcommon::file_exists(launcher), "the launcher is not built: " << launcher);
    testcommon::TempDir td;
    const std::string log = td / "launcher.log";
    Env env = testcommon::base_env();
    Result a = testcommon::run({kProbe, "closelog", "inet", "exact"}, env, 30000);
    Result b = testcommon::run({launcher, "--lib", kLib, "-v", "-o", log, kProbe, "closelog", "inet", "exact"}, env, 30000);
    BOOST_CHECK_MESSAGE(a.exit_code() == 0, a.describe());
    BOOST_CHECK_MESSAGE(b.exit_code() == 0, b.describe());
    BOOST_CHECK_EQUAL(testcommon::drop_lines(a.out, "addr "), testcommon::drop_lines(b.out, "addr "));
    BOOST_CHECK_EQUAL(a.err, b.err);
    testcommon::CloseLog lc = checked_log(log);
    BOOST_CHECK_EQUAL(count_role(lc, "client"), 1u);
    BOOST_CHECK_EQUAL(count_role(lc, "server"), 1u);
    Result c = testcommon::run({launcher, "--lib", kLib, program("sh"), "-c", "exit 3"}, env, 30000);
    BOOST_CHECK_EQUAL(c.exit_code(), 3);
}

// The launcher's options (getopt_long): bundled and --opt=value forms, options end at
// the program (its own options untouched), and a bad option, a missing or malformed
// value is exit 2 with one line naming it; the same for rdmasock ss, stat, check and
// doctor.
BOOST_AUTO_TEST_CASE(launcher_options)
{
    const std::string launcher = RDMASOCK_LAUNCHER;
    Env env = testcommon::base_env();
    testcommon::set_var(env, "RDMASOCK_LIB", kLib);
    Result r = testcommon::run({launcher, "-nv", "--log-file=/dev/null", program("sh"), "-c",
                                "echo $RDMASOCK_ENABLE $RDMASOCK_LOG_LEVEL $RDMASOCK_LOG_FILE \"$*\"", "sh", "-v", "--x"},
                               env, 30000);
    BOOST_CHECK_MESSAGE(r.exit_code() == 0 && r.out == "0 info /dev/null -v --x\n", r.describe());
    struct Bad {
        std::vector<std::string> args;
        std::string err;
    };
    const std::vector<Bad> bad = {
        {{"--bogus", "true"}, "rdmasock: unknown option '--bogus' (see rdmasock --help)\n"},
        {{"-l"}, "rdmasock: option -l needs an argument\n"},
        {{"--log-level=loud", "true"}, "rdmasock: bad log level 'loud' (error, warn, info, debug, trace)\n"},
        {{"ss", "-p", "12x"}, "rdmasock ss: bad value '12x' for --pid\n"},
        {{"ss", "--port", "70000"}, "rdmasock ss: bad value '70000' for --port\n"},
        {{"ss", "--watch"}, "rdmasock ss: --watch needs a value\n"},
        {{"stat", "-l"}, "rdmasock stat: unknown option '-l' (--help)\n"},
        {{"ss", "now"}, "rdmasock ss: unexpected argument 'now' (--help)\n"},
        {{"doctor", "--bogus"}, "rdmasock doctor: unknown option '--bogus' (--help)\n"},
        {{"check", "--timeout", "0", "127.0.0.1:1"}, "rdmasock check: bad value '0' for --timeout\n"},
        {{"check", "--timeout"}, "rdmasock check: --timeout needs a value\n"},
    };
    for (const Bad &b : bad) {
        std::vector<std::string> argv = {launcher};
        argv.insert(argv.end(), b.args.begin(), b.args.end());
        Result e = testcommon::run(argv, env, 30000);
        BOOST_CHECK_MESSAGE(e.exit_code() == 2 && e.err == b.err && e.out.empty(), b.args[0] << ": " << e.describe());
    }
}

// The offload rules (rdmasock.conf(5)), named by RDMASOCK_RULES_FILE: in one python3
// process, a client rule keeps its connection to port A on TCP and a server rule the
// connections its listener on port B accepts, both with reason rule; the other two ends
// (the server end on A, the client end to B) are not decided by a rule.  The library
// warns about nothing (a well-formed file), and `rdmasock rules test` names the same
// lines, exit 1 for tcp and 0 for no rule.
BOOST_AUTO_TEST_CASE(offload_rules_keep_connections_on_tcp, *boost::unit_test::precondition(Installed{{"python3"}}))
{
    require_lib();
    const std::string launcher = RDMASOCK_LAUNCHER;
    testcommon::TempDir td;
    const int a = testcommon::free_port(), b = testcommon::free_port();
    const std::string rules = td / "rules.conf";
    BOOST_REQUIRE(testcommon::write_file(rules, "# rules of the test\n"
                                                "tcp  python3*  client  127.0.0.1  " + std::to_string(a) + "\n"
                                                "tcp  *         server  *          " + std::to_string(b) + "\n"
                                                "RDMASOCK_NEG_CACHE_MS=0\n"));
    const std::string log = td / "rules.log";
    Env env = testcommon::with_lib(testcommon::base_env(), kLib, "info", log);
    testcommon::set_var(env, "RDMASOCK_RULES_FILE", rules);
    const std::string script =
        "import socket\n"
        "def pair(port):\n"
        "    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "    l.bind(('127.0.0.1', port)); l.listen(1)\n"
        "    c = socket.create_connection(('127.0.0.1', port)); s, _ = l.accept()\n"
        "    c.sendall(b'ping'); assert s.recv(4) == b'ping'\n"
        "    s.close(); c.close(); l.close()\n"
        "pair(" + std::to_string(a) + "); pair(" + std::to_string(b) + "); print('ok')\n";
    Result r = testcommon::run({program("python3"), "-c", script}, env, 30000);
    BOOST_CHECK_MESSAGE(r.exit_code() == 0 && r.out == "ok\n", r.describe());
    testcommon::CloseLog lc = checked_log(log);
    BOOST_REQUIRE_EQUAL(lc.closes.size(), 4u);
    auto reason_of = [&](const std::string &role, const std::string &end, int port) {
        for (auto &f : lc.closes)
            if (f.at("role") == role && f.at(end) == "127.0.0.1:" + std::to_string(port))
                return f.count("reason") ? f.at("reason") : std::string("(none)");
        return std::string("(no line)");
    };
    BOOST_CHECK_EQUAL(reason_of("client", "peer", a), "rule");
    BOOST_CHECK_EQUAL(reason_of("server", "local", b), "rule");
    BOOST_CHECK_NE(reason_of("server", "local", a), "rule");
    BOOST_CHECK_NE(reason_of("client", "peer", b), "rule");
    BOOST_CHECK_NE(reason_of("server", "local", a), "(no line)");
    BOOST_CHECK_NE(reason_of("client", "peer", b), "(no line)");

    testcommon::set_var(env, "LD_PRELOAD", "");
    Result t1 = testcommon::run({launcher, "rules", "test", "python3", "client", "127.0.0.1:" + std::to_string(a)}, env, 10000);
    BOOST_CHECK_EQUAL(t1.exit_code(), 1);
    BOOST_CHECK_EQUAL(t1.out, "tcp: " + rules + ":2: tcp  python3*  client  127.0.0.1  " + std::to_string(a) + "\n");
    Result t2 = testcommon::run({launcher, "rules", "test", "python3", "server", "127.0.0.1:" + std::to_string(a)}, env, 10000);
    BOOST_CHECK_EQUAL(t2.exit_code(), 0);
    BOOST_CHECK_EQUAL(t2.out, "rdma: no rule in " + rules + " matches\n");
    Result t3 = testcommon::run({launcher, "rules", "test", "x", "server", "[::1]:" + std::to_string(b)}, env, 10000);
    BOOST_CHECK_EQUAL(t3.exit_code(), 1);
    BOOST_CHECK(t3.err.empty());
    Result t4 = testcommon::run({launcher, "rules", "test", "x", "peer", "1.2.3.4:5"}, env, 10000);
    BOOST_CHECK_EQUAL(t4.exit_code(), 2);
}

// RDMASOCK_LOG_FILE with %p: each process writes its own file, a fork child too.
BOOST_AUTO_TEST_CASE(log_file_per_process, *boost::unit_test::precondition(Installed{{"python3"}}))
{
    require_lib();
    testcommon::TempDir td;
    const std::string pattern = td / "log.%p";
    Env env = testcommon::with_lib(testcommon::base_env(), kLib, "info", pattern);
    const std::string script =
        "import os, socket, sys\n"
        "def pair():\n"
        "    l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen(1)\n"
        "    c = socket.create_connection(l.getsockname()); s, _ = l.accept()\n"
        "    c.sendall(b'x'); assert s.recv(1) == b'x'\n"
        "    s.close(); c.close(); l.close()\n"
        "pair()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    pair(); print(os.getpid()); sys.exit(0)\n"
        "os.waitpid(pid, 0); print(os.getpid())\n";
    Result r = testcommon::run({program("python3"), "-c", script}, env, 30000);
    BOOST_REQUIRE_MESSAGE(r.exit_code() == 0, r.describe());
    std::istringstream is(r.out);
    std::string child, parent;
    is >> child >> parent;
    for (const std::string &pid : {parent, child}) {
        const std::string file = td / ("log." + pid);
        testcommon::CloseLog lc = checked_log(file);
        BOOST_CHECK_MESSAGE(lc.closes.size() == 2, file << ": " << lc.closes.size() << " close lines, want 2");
        // The exit line's totals: this process's two connections (the child's not the
        // parent's too: checked by check_close_log).
        BOOST_CHECK_MESSAGE(lc.exits == 1, file << ": " << lc.exits << " exit lines, want 1");
        for (auto &f : lc.closes)
            BOOST_CHECK_EQUAL(f.at("pid"), pid);
    }
}

// rdmasock doctor and rdmasock check on a machine without RDMA (the host): not ready,
// a connection stays on TCP (exit 1, with a reason and advice), nothing listening: exit 2.
BOOST_AUTO_TEST_CASE(diagnosis_without_rdma, *boost::unit_test::precondition(Installed{{"python3"}}))
{
    require_lib();
    const std::string launcher = RDMASOCK_LAUNCHER;
    Env env = testcommon::base_env();
    testcommon::set_var(env, "RDMASOCK_LIB", kLib);
    Result d = testcommon::run({launcher, "doctor", "--json"}, env, 10000);
    BOOST_CHECK_MESSAGE(d.exit_code() == 1 && d.out.find("\"ready\":false") != std::string::npos &&
                            d.out.find("\"name\":\"rdma_ports\",\"ok\":false") != std::string::npos,
                        d.describe());
    // A listener that accepts and waits (the probe closes at once).
    const int port = testcommon::free_port();
    Env plain = testcommon::base_env();
    testcommon::Proc::Options po;
    po.pipe_out = true;
    testcommon::Proc srv({program("python3"), "-c",
                          "import socket, time\n"
                          "l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                          "l.bind(('127.0.0.1', " + std::to_string(port) + ")); l.listen(4); print('up', flush=True)\n"
                          "time.sleep(20)\n"},
                         plain, po);
    BOOST_REQUIRE_EQUAL(srv.read_line(10000), "up");
    Result c = testcommon::run({launcher, "check", "--json", "127.0.0.1:" + std::to_string(port)}, env, 20000);
    BOOST_CHECK_MESSAGE(c.exit_code() == 1 && c.out.find("\"rdma\":false") != std::string::npos &&
                            c.out.find("\"error\":\"\"") != std::string::npos &&
                            c.out.find("\"reason\":\"none\"") == std::string::npos,
                        c.describe());
    srv.kill_all();
    srv.wait(5000);
    Result g = testcommon::run({launcher, "check", "127.0.0.1:" + std::to_string(port)}, env, 20000);
    BOOST_CHECK_MESSAGE(g.exit_code() == 2 && g.out.find("ECONNREFUSED") != std::string::npos, g.describe());
}

// Every man page renders without a warning from groff (-ww: all of them, but those of
// line breaking: FILES names paths under the configured prefix, and a long prefix such
// as distcheck's cannot be adjusted to the line), and the bash completion loads and
// registers itself.
BOOST_AUTO_TEST_CASE(man_pages_and_completion, *boost::unit_test::precondition(Installed{{"groff", "bash"}}))
{
    const std::string dir = RDMASOCK_MAN_DIR;
    for (const char *page : {"rdmasock.1", "rdmasock.7", "rdmasock.conf.5"}) {
        const std::string file = dir + "/" + page;
        BOOST_REQUIRE_MESSAGE(testcommon::file_exists(file), "not built: " << file);
        Result r = testcommon::run({program("groff"), "-man", "-Tutf8", "-ww", "-Wbreak", "-z", file}, testcommon::base_env(), 30000);
        BOOST_CHECK_MESSAGE(r.exit_code() == 0 && r.err.empty(), page << ": " << r.describe());
    }
    Result c = testcommon::run({program("bash"), "-c", std::string("source '") + RDMASOCK_COMPLETION +
                                                          "' && complete -p rdmasock"},
                               testcommon::base_env(), 30000);
    BOOST_CHECK_MESSAGE(c.exit_code() == 0 && c.out == "complete -F _rdmasock rdmasock\n", c.describe());
}

// rdmasock system enable|disable|status on a stand-in for /etc/ld.so.preload (the real
// file is tested in the VM with a writable root, tests/vm/system-install): other entries
// kept, idempotent, an old install's entry replaced, the file removed when ours was the
// only entry, and a library that does not load refused with nothing changed.
BOOST_AUTO_TEST_CASE(system_enable_disable)
{
    require_lib();
    const std::string launcher = RDMASOCK_LAUNCHER;
    testcommon::TempDir td;
    const std::string file = td / "ld.so.preload";
    Env env = testcommon::base_env();
    auto sys = [&](const std::string &verb, const std::string &lib = kLib) {
        return testcommon::run({launcher, "system", verb, "--file", file, "--lib", lib}, env, 60000);
    };
    testcommon::write_file(file, "/usr/lib/other.so /usr/lib/old/librdmasock.so\n/usr/lib/third.so\n");
    Result st0 = sys("status");
    BOOST_CHECK_EQUAL(st0.exit_code(), 0);  // an old install's entry counts as enabled
    Result en = sys("enable");
    BOOST_CHECK_MESSAGE(en.exit_code() == 0, en.describe());
    BOOST_CHECK_EQUAL(testcommon::read_file(file), "/usr/lib/other.so\n/usr/lib/third.so\n" + std::string(kLib) + "\n");
    Result en2 = sys("enable");
    BOOST_CHECK_EQUAL(en2.exit_code(), 0);
    BOOST_CHECK(en2.out.rfind("already enabled", 0) == 0);
    BOOST_CHECK_EQUAL(testcommon::read_file(file), "/usr/lib/other.so\n/usr/lib/third.so\n" + std::string(kLib) + "\n");
    Result st1 = sys("status");
    BOOST_CHECK_EQUAL(st1.exit_code(), 0);
    Result dis = sys("disable");
    BOOST_CHECK_EQUAL(dis.exit_code(), 0);
    BOOST_CHECK_EQUAL(testcommon::read_file(file), "/usr/lib/other.so\n/usr/lib/third.so\n");
    Result st2 = sys("status");
    BOOST_CHECK_EQUAL(st2.exit_code(), 1);
    Result dis2 = sys("disable");
    BOOST_CHECK_EQUAL(dis2.exit_code(), 0);
    // Ours the only entry: disable removes the file.
    testcommon::write_file(file, std::string(kLib) + "\n");
    BOOST_CHECK_EQUAL(sys("disable").exit_code(), 0);
    BOOST_CHECK(!testcommon::file_exists(file));
    // A "library" that is not one: refused, the file untouched.
    const std::string bad = td / "librdmasock.so";
    testcommon::write_file(bad, "not an ELF object\n");
    std::string engine = kLib;  // beside it, the real engine: only the library is bad
    engine.replace(engine.rfind('/') + 1, std::string::npos, "librdmasock_engine.so");
    BOOST_REQUIRE(testcommon::write_file(td / "librdmasock_engine.so", testcommon::read_file(engine), 0755));
    testcommon::write_file(file, "/usr/lib/other.so\n");
    Result refused = sys("enable", bad);
    BOOST_CHECK_MESSAGE(refused.exit_code() == 1 && refused.err.find("refusing") != std::string::npos, refused.describe());
    BOOST_CHECK_EQUAL(testcommon::read_file(file), "/usr/lib/other.so\n");
    BOOST_CHECK_EQUAL(testcommon::run({program("sh"), "-c", "ls " + td.path() + " | grep -c rdmasock-new"}, env, 10000).out,
                      "0\n");  // no temporary file left behind
    // A library without the engine beside it: refused, naming the engine.
    unlink((td / "librdmasock_engine.so").c_str());
    testcommon::write_file(bad, testcommon::read_file(kLib), 0755);
    Result noengine = sys("enable", bad);
    BOOST_CHECK_MESSAGE(noengine.exit_code() == 1 && noengine.err.find("librdmasock_engine.so") != std::string::npos,
                        noengine.describe());
    BOOST_CHECK_EQUAL(testcommon::read_file(file), "/usr/lib/other.so\n");
    // A commented-out entry is no entry (ld.so skips comments too).
    testcommon::write_file(file, "# " + std::string(kLib) + "\n/usr/lib/other.so # a comment\n");
    BOOST_CHECK_EQUAL(sys("status").exit_code(), 1);
    BOOST_CHECK_EQUAL(sys("enable").exit_code(), 0);
    BOOST_CHECK_EQUAL(testcommon::read_file(file),
                      "# " + std::string(kLib) + "\n/usr/lib/other.so # a comment\n" + std::string(kLib) + "\n");
    BOOST_CHECK_EQUAL(sys("disable").exit_code(), 0);
    BOOST_CHECK_EQUAL(testcommon::read_file(file), "# " + std::string(kLib) + "\n/usr/lib/other.so # a comment\n");
    Result usage = testcommon::run({launcher, "system", "frobnicate"}, env, 10000);
    BOOST_CHECK_EQUAL(usage.exit_code(), 2);
}
#endif

/* ---- servers and clients on loopback ------------------------------------------------ */

// iperf3 -n: the client writes exactly 20 MiB.  The server reports what it read before
// the client's TEST_END, which under load can be less than 20 MiB with or without the
// library (an iperf3 property), so the received side is checked for bounds, and against
// the library's own count in its close-time log line.
BOOST_AUTO_TEST_CASE(iperf3_loopback, *boost::unit_test::precondition(Installed{{"iperf3"}}))
{
    require_lib();
    testcommon::TempDir td;
    const std::string iperf = program("iperf3");
    const std::string log = td / "rdmasock.log";
    const long long want = 20LL << 20, cookie = 37;  // iperf3 opens each stream with a cookie
    long long sent[2] = {-1, -1}, received[2] = {-1, -1};
    for (int with = 0; with < 2; ++with) {
        BOOST_TEST_CONTEXT((with ? "with" : "without") << " the library")
        {
            Env env = testcommon::base_env();
            if (with)
                env = testcommon::with_lib(env, kLib, "info", log);
            int port = testcommon::free_port();
            std::string p = std::to_string(port);
            testcommon::Proc::Options o;
            o.out_file = td / ("server" + std::to_string(with) + ".json");
            o.err_file = td / ("server" + std::to_string(with) + ".err");
            testcommon::Proc srv({iperf, "-s", "-1", "-J", "-B", "127.0.0.1", "-p", p}, env, o);
            BOOST_REQUIRE(srv.started());
            BOOST_REQUIRE_MESSAGE(testcommon::wait_listening(port, 10000), "iperf3 -s did not listen");
            Result c = testcommon::run({iperf, "-c", "127.0.0.1", "-p", p, "-n", "20M", "-J"}, env, 60000);
            BOOST_CHECK_MESSAGE(c.exit_code() == 0, c.describe());
            bool exited = srv.wait(15000);
            BOOST_CHECK_MESSAGE(exited && WIFEXITED(srv.status()) && WEXITSTATUS(srv.status()) == 0,
                                "iperf3 -s -1 did not exit with 0: " << testcommon::read_file(o.err_file));
            sent[with] = iperf_bytes(c.out, "sum_sent");
            received[with] = iperf_bytes(testcommon::read_file(o.out_file), "sum_received");
            BOOST_CHECK_EQUAL(sent[with], want);
            BOOST_CHECK_MESSAGE(received[with] > 0 && received[with] <= want,
                                "the server received " << received[with] << " bytes");
            BOOST_CHECK_EQUAL(iperf_bytes(c.out, "sum_received"), received[with]);
        }
    }
    BOOST_CHECK_EQUAL(sent[0], sent[1]);
    testcommon::CloseLog lc = checked_log(log);
    // control connection and data stream, on each side
    BOOST_CHECK_GE(count_role(lc, "client"), 2u);
    BOOST_CHECK_GE(count_role(lc, "server"), 2u);
    long long csent = -1, srcvd = -1;
    for (auto &f : lc.closes) {
        if (f.at("role") == "client")
            csent = std::max(csent, std::stoll(f.at("bytes_sent")));
        else
            srcvd = std::max(srcvd, std::stoll(f.at("bytes_received")));
    }
    BOOST_TEST_CONTEXT("data stream lines of " << testcommon::read_file(log))
    {
        BOOST_CHECK_LE(csent, want + cookie);
        BOOST_CHECK_GE(csent, received[1] + cookie);
        BOOST_CHECK_LE(srcvd, want + cookie + 1);  // + 1: see close_log_*_eof in parity_tests
        BOOST_CHECK_GE(srcvd, received[1] + cookie);
    }
}

BOOST_AUTO_TEST_CASE(redis_set_get_benchmark,
                     *boost::unit_test::precondition(Installed{{"redis-server", "redis-cli", "redis-benchmark"}}))
{
    require_lib();
    testcommon::TempDir td;
    const std::string log = td / "rdmasock.log";
    std::vector<std::string> replies[2];
    for (int with = 0; with < 2; ++with) {
        BOOST_TEST_CONTEXT((with ? "with" : "without") << " the library")
        {
            Env env = testcommon::base_env();
            if (with)
                env = testcommon::with_lib(env, kLib, "info", log);
            int port = testcommon::free_port();
            std::string p = std::to_string(port);
            testcommon::Proc::Options o;
            o.out_file = td / ("redis" + std::to_string(with) + ".out");
            o.err_file = td / ("redis" + std::to_string(with) + ".err");
            testcommon::Proc srv({program("redis-server"), "--port", p, "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--daemonize", "no", "--dir", td.path()},
                               env, o);
            BOOST_REQUIRE(srv.started());
            BOOST_REQUIRE_MESSAGE(testcommon::wait_listening(port, 10000),
                                  "redis-server did not listen\n" << testcommon::read_file(o.out_file));
            auto cli = [&](std::vector<std::string> args) {
                std::vector<std::string> argv = {program("redis-cli"), "-p", p};
                argv.insert(argv.end(), args.begin(), args.end());
                Result r = testcommon::run(argv, env, 20000);
                BOOST_CHECK_MESSAGE(r.exit_code() == 0, r.describe());
                replies[with].push_back(r.out);
                return r.out;
            };
            BOOST_CHECK_EQUAL(cli({"SET", "rdmasock:key", "hello world"}), "OK\n");
            BOOST_CHECK_EQUAL(cli({"GET", "rdmasock:key"}), "hello world\n");
            Result b = testcommon::run({program("redis-benchmark"), "-p", p, "-q", "-n", "2000", "-t", "set,get"},
                                    env, 60000);
            BOOST_CHECK_MESSAGE(b.exit_code() == 0, b.describe());
            BOOST_CHECK_MESSAGE(std::regex_search(b.out, std::regex(R"(SET: [0-9.]+ requests per second)")), b.out);
            BOOST_CHECK_MESSAGE(std::regex_search(b.out, std::regex(R"(GET: [0-9.]+ requests per second)")), b.out);
            BOOST_CHECK_EQUAL(cli({"DBSIZE"}), "2\n");
            cli({"GET", "key:__rand_int__"});
            BOOST_CHECK_EQUAL(cli({"DEL", "rdmasock:key"}), "1\n");
            int st = srv.stop(SIGTERM, 10000);
            BOOST_CHECK_MESSAGE(WIFEXITED(st) && WEXITSTATUS(st) == 0, "redis-server status " << st);
        }
    }
    BOOST_CHECK(replies[0] == replies[1]);
    for (size_t i = 0; i < std::min(replies[0].size(), replies[1].size()); ++i)
        BOOST_CHECK_EQUAL(replies[0][i], replies[1][i]);
    testcommon::CloseLog lc = checked_log(log);
    BOOST_CHECK_GE(count_role(lc, "client"), 5u);
    BOOST_CHECK_GE(count_role(lc, "server"), 5u);
}

BOOST_AUTO_TEST_CASE(nginx_workers_serve_file, *boost::unit_test::precondition(Installed{{"nginx", "curl"}}))
{
    require_lib();
    testcommon::TempDir td;
    const std::string log = td / "rdmasock.log";
    const std::string www = td / "www";
    BOOST_REQUIRE(mkdir(www.c_str(), 0755) == 0);
    const std::string data = blob(1u << 20);
    BOOST_REQUIRE(testcommon::write_file(www + "/blob.bin", data));
    for (int with = 0; with < 2; ++with) {
        BOOST_TEST_CONTEXT((with ? "with" : "without") << " the library")
        {
            Env env = testcommon::base_env();
            if (with)
                env = testcommon::with_lib(env, kLib, "info", log);
            int port = testcommon::free_port();
            std::string conf = td / ("nginx" + std::to_string(with) + ".conf");
            std::string t = td.path();
            BOOST_REQUIRE(testcommon::write_file(
                conf, "daemon off;\nmaster_process on;\nworker_processes 2;\nerror_log stderr;\n"
                      "pid " + t + "/nginx" + std::to_string(with) + ".pid;\n"
                      "events { worker_connections 64; }\n"
                      "http {\n  access_log off;\n"
                      "  client_body_temp_path " + t + "/body;\n  proxy_temp_path " + t + "/proxy;\n"
                      "  fastcgi_temp_path " + t + "/fastcgi;\n  uwsgi_temp_path " + t + "/uwsgi;\n"
                      "  scgi_temp_path " + t + "/scgi;\n"
                      "  server {\n    listen 127.0.0.1:" + std::to_string(port) + ";\n"
                      "    root " + www + ";\n  }\n}\n"));
            testcommon::Proc::Options o;
            o.err_file = td / ("nginx" + std::to_string(with) + ".err");
            testcommon::Proc srv({program("nginx"), "-e", "stderr", "-p", t, "-c", conf}, env, o);
            BOOST_REQUIRE(srv.started());
            BOOST_REQUIRE_MESSAGE(testcommon::wait_listening(port, 10000),
                                  "nginx did not listen\n" << testcommon::read_file(o.err_file));
            std::vector<pid_t> workers;
            for (int i = 0; i < 500 && workers.size() < 2; ++i) {
                workers = testcommon::children_of(srv.pid());
                if (workers.size() < 2)
                    usleep(10000);
            }
            BOOST_CHECK_EQUAL(workers.size(), 2u);
            if (with)
                for (pid_t w : workers)
                    BOOST_CHECK_MESSAGE(maps_file(w, kLib), "worker " << w << " does not have the library mapped");
            std::string url = "http://127.0.0.1:" + std::to_string(port);
            std::string got = td / ("got" + std::to_string(with) + ".bin");
            for (int i = 0; i < 3; ++i) {  // several connections, likely spread over both workers
                Result c = testcommon::run({program("curl"), "-sS", "-o", got, "-w", "%{http_code}", url + "/blob.bin"},
                                        env, 30000);
                BOOST_CHECK_EQUAL(c.out, "200");
                bool ok = false;
                std::string body = testcommon::read_file(got, &ok);
                BOOST_CHECK_MESSAGE(ok && body == data, "the fetched file differs from the served one ("
                                                            << body.size() << " bytes)");
            }
            Result nf = testcommon::run({program("curl"), "-sS", "-o", "/dev/null", "-w", "%{http_code}", url + "/none"},
                                     env, 30000);
            BOOST_CHECK_EQUAL(nf.out, "404");
            int st = srv.stop(SIGQUIT, 10000);
            BOOST_CHECK_MESSAGE(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nginx status " << st << "\n"
                                                                       << testcommon::read_file(o.err_file));
        }
    }
    testcommon::CloseLog lc = checked_log(log);
    size_t big = 0;
    for (auto &f : lc.closes)
        if (f.at("role") == "server" && std::stoll(f.at("bytes_sent")) >= (1 << 20))
            ++big;
    BOOST_CHECK_MESSAGE(big >= 3, "the workers did not log the three 1 MiB responses\n" << testcommon::read_file(log));
    BOOST_CHECK_GE(count_role(lc, "client"), 4u);
}

BOOST_AUTO_TEST_CASE(python_http_server, *boost::unit_test::precondition(Installed{{"python3", "curl"}}))
{
    require_lib();
    testcommon::TempDir td;
    const std::string log = td / "rdmasock.log";
    const std::string www = td / "www";
    BOOST_REQUIRE(mkdir(www.c_str(), 0755) == 0);
    const std::string data = blob(300000);
    BOOST_REQUIRE(testcommon::write_file(www + "/blob.bin", data));
    std::string listing[2];
    for (int with = 0; with < 2; ++with) {
        BOOST_TEST_CONTEXT((with ? "with" : "without") << " the library")
        {
            Env env = testcommon::base_env();
            if (with)
                env = testcommon::with_lib(env, kLib, "info", log);
            int port = testcommon::free_port();
            testcommon::Proc::Options o;
            o.err_file = td / ("http" + std::to_string(with) + ".err");
            testcommon::Proc srv({program("python3"), "-m", "http.server", std::to_string(port), "--bind",
                                "127.0.0.1", "--directory", www},
                               env, o);
            BOOST_REQUIRE(srv.started());
            BOOST_REQUIRE_MESSAGE(testcommon::wait_listening(port, 15000),
                                  "http.server did not listen\n" << testcommon::read_file(o.err_file));
            std::string url = "http://127.0.0.1:" + std::to_string(port);
            Result c = testcommon::run({program("curl"), "-sS", url + "/blob.bin"}, env, 30000);
            BOOST_CHECK_EQUAL(c.exit_code(), 0);
            BOOST_CHECK_MESSAGE(c.out == data, "the body differs from the file (" << c.out.size() << " bytes)");
            Result l = testcommon::run({program("curl"), "-sS", url + "/"}, env, 30000);
            BOOST_CHECK_EQUAL(l.exit_code(), 0);
            listing[with] = l.out;
            // http.server closes each connection before it accepts the next one: the
            // server lines of the first two requests are logged before this one is served.
            Result h = testcommon::run({program("curl"), "-sS", "-o", "/dev/null", "-w", "%{http_code}", url + "/none"},
                                    env, 30000);
            BOOST_CHECK_EQUAL(h.out, "404");
            srv.stop(SIGTERM, 5000);
        }
    }
    BOOST_CHECK(listing[0].find("blob.bin") != std::string::npos);
    BOOST_CHECK_EQUAL(listing[0], listing[1]);
    testcommon::CloseLog lc = checked_log(log);
    BOOST_CHECK_GE(count_role(lc, "client"), 2u);
    BOOST_CHECK_GE(count_role(lc, "server"), 2u);
}

/* ---- setuid: secure-execution mode makes the library inert -------------------------- */

namespace {

// Only root can make a setuid-root copy, and a "nobody" is needed to run it.
struct CanSetuid {
    boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const
    {
        std::string why;
        if (geteuid() != 0)
            why = "needs root (to install a setuid-root copy)";
        else if (getpwnam("nobody") == nullptr)
            why = "needs a user named nobody";
        if (why.empty())
            return true;
        std::cerr << "SKIP: setuid test " << why << "\n";
        boost::test_tools::assertion_result r(false);
        r.message() << why;
        return r;
    }
};

// The trusted system library directory: where this process's libc lives.
std::string system_libdir()
{
    for (auto &l : testcommon::split_lines(testcommon::read_file("/proc/self/maps"))) {
        size_t slash = l.find('/');
        if (slash == std::string::npos)
            continue;
        std::string p = l.substr(slash);
        size_t base = p.rfind('/');
        if (p.compare(base + 1, std::string::npos, "libc.so.6") == 0)
            return p.substr(0, base);
    }
    return "/usr/lib/x86_64-linux-gnu";
}

// A setuid copy of the library in the system directory, always removed again.
struct SuidLib {
    std::string path, name;
    SuidLib()
    {
        std::string dir = system_libdir();
        // leftovers of runs that died before their cleanup
        glob_t g{};
        if (glob((dir + "/librdmasock-suidtest-*.so").c_str(), 0, nullptr, &g) == 0) {
            for (size_t i = 0; i < g.gl_pathc; ++i) {
                int pid = atoi(strrchr(g.gl_pathv[i], '-') + 1);
                if (pid > 0 && kill(pid, 0) < 0 && errno == ESRCH)
                    unlink(g.gl_pathv[i]);
            }
        }
        globfree(&g);
        name = "librdmasock-suidtest-" + std::to_string(getpid()) + ".so";
        path = dir + "/" + name;
        bool ok = false;
        std::string lib = testcommon::read_file(kLib, &ok);
        if (!ok || !testcommon::write_file(path, lib, 0755) || chmod(path.c_str(), 04755) != 0)
            path.clear();
        // The engine the shim loads, beside it (the non-setuid run loads it), unless one
        // is there already.
        std::string built = kLib;
        built.replace(built.rfind('/') + 1, std::string::npos, "librdmasock_engine.so");
        engine = dir + "/librdmasock_engine.so";
        if (testcommon::file_exists(engine)) {
            engine.clear();
        } else {
            std::string e = testcommon::read_file(built, &ok);
            if (!ok || !testcommon::write_file(engine, e, 0755)) {
                unlink(engine.c_str());
                path.clear();
            }
        }
    }
    ~SuidLib()
    {
        if (!path.empty())
            unlink(path.c_str());
        if (!engine.empty())
            unlink(engine.c_str());
    }
    std::string engine;  // the engine copied beside it, to remove
};

struct Inspection {
    long at_secure = -1;
    bool lib_mapped = false;
    bool rdma_mapped = false;
    int threads = -1;
    std::set<int> fds;
    bool log_created = false;
    std::string out;
    int status = -1;
};

long auxv_value(pid_t pid, unsigned long type)
{
    std::string a = testcommon::read_file("/proc/" + std::to_string(pid) + "/auxv");
    for (size_t off = 0; off + 16 <= a.size(); off += 16) {
        unsigned long t, v;
        memcpy(&t, a.data() + off, 8);
        memcpy(&v, a.data() + off + 8, 8);
        if (t == type)
            return static_cast<long>(v);
    }
    return -1;
}

// Run `exe suid-hold` as nobody with env and inspect it from outside while it waits.
Inspection inspect(const std::string &exe, const Env &env, const std::string &lib, const std::string &log,
                   const std::string &errfile)
{
    Inspection in;
    passwd *pw = getpwnam("nobody");
    testcommon::Proc::Options o;
    o.pipe_in = o.pipe_out = true;
    o.uid = pw->pw_uid;
    o.gid = pw->pw_gid;
    o.err_file = errfile;
    testcommon::Proc ch({exe, "suid-hold"}, env, o);
    if (!ch.started())
        return in;
    for (int i = 0; i < 5; ++i) {
        std::string line = ch.read_line(10000);
        if (line.empty())
            break;
        in.out += line + "\n";
        if (line == "ready")
            break;
    }
    std::string proc = "/proc/" + std::to_string(ch.pid());
    in.at_secure = auxv_value(ch.pid(), 23 /* AT_SECURE */);
    in.lib_mapped = maps_file(ch.pid(), lib);
    std::string maps = testcommon::read_file(proc + "/maps");
    in.rdma_mapped = maps.find("/dev/infiniband") != std::string::npos ||
                     std::regex_search(maps, std::regex(R"(-rdmav\d+\.so)"));
    in.threads = 0;
    if (DIR *d = opendir((proc + "/task").c_str())) {
        while (dirent *e = readdir(d))
            in.threads += e->d_name[0] != '.';
        closedir(d);
    }
    if (DIR *d = opendir((proc + "/fd").c_str())) {
        while (dirent *e = readdir(d))
            if (e->d_name[0] != '.')
                in.fds.insert(atoi(e->d_name));
        closedir(d);
    }
    in.log_created = testcommon::file_exists(log);
    ch.close_stdin();
    if (ch.wait(10000))
        in.status = ch.status();
    in.out += ch.read_line(100);
    return in;
}

}  // namespace

BOOST_AUTO_TEST_CASE(setuid_passthrough, *boost::unit_test::precondition(CanSetuid{}))
{
    require_lib();
    BOOST_REQUIRE(testcommon::file_exists(kProbe));
    testcommon::TempDir td;
    struct statvfs vfs;
    if (statvfs(td.path().c_str(), &vfs) == 0 && (vfs.f_flag & ST_NOSUID)) {
        std::cerr << "SKIP: " << td.path() << " is on a nosuid file system\n";
        BOOST_TEST_MESSAGE("skipped: temporary directory on a nosuid file system");
        return;
    }
    SuidLib lib;
    BOOST_REQUIRE_MESSAGE(!lib.path.empty(), "cannot install a setuid copy of the library in " << system_libdir());
    bool ok = false;
    std::string probe = testcommon::read_file(kProbe, &ok);
    BOOST_REQUIRE(ok);
    const std::string suid = td / "sockprobe-suid", plain = td / "sockprobe-plain";
    BOOST_REQUIRE(testcommon::write_file(suid, probe, 0755) && chown(suid.c_str(), 0, 0) == 0 &&
                  chmod(suid.c_str(), 04755) == 0);
    BOOST_REQUIRE(testcommon::write_file(plain, probe, 0755) && chown(plain.c_str(), 0, 0) == 0);
    const std::string logdir = td / "logs";
    BOOST_REQUIRE(mkdir(logdir.c_str(), 0777) == 0 && chmod(logdir.c_str(), 01777) == 0);
    const std::string log = logdir + "/x.log";
    Env env = testcommon::base_env();
    // No slash: in secure-execution mode glibc preloads only a setuid library from the
    // system directories, by name.
    testcommon::set_var(env, "LD_PRELOAD", lib.name);
    testcommon::set_var(env, "RDMASOCK_LOG_LEVEL", "debug");
    testcommon::set_var(env, "RDMASOCK_LOG_FILE", log);
    const std::string transcript = "exchange = 1\nfds 3 4 5\nready\n";

    Inspection s = inspect(suid, env, lib.path, log, td / "suid.err");
    BOOST_TEST_CONTEXT("setuid run: " << s.out << testcommon::read_file(td / "suid.err"))
    {
        BOOST_REQUIRE_MESSAGE(s.at_secure == 1, "the setuid copy did not run in secure-execution mode");
        BOOST_REQUIRE_MESSAGE(s.lib_mapped, "glibc did not preload the library: the test would prove nothing");
        BOOST_CHECK_EQUAL(s.out, transcript);
        BOOST_CHECK_EQUAL(s.threads, 1);
        BOOST_CHECK_MESSAGE(s.fds == std::set<int>({0, 1, 2, 3, 4, 5}),
                            "descriptors other than the program's own are open");
        BOOST_CHECK_MESSAGE(!s.rdma_mapped, "an RDMA device or provider library is mapped");
        BOOST_CHECK_MESSAGE(!s.log_created, "the library read RDMASOCK_LOG_FILE in secure-execution mode");
        BOOST_CHECK_EQUAL(s.status, 0);
    }
    unlink(log.c_str());

    // The same program without the setuid bit, same environment: the library is active,
    // so the checks above can fail.
    Inspection p = inspect(plain, env, lib.path, log, td / "plain.err");
    BOOST_TEST_CONTEXT("non-setuid run: " << p.out << testcommon::read_file(td / "plain.err"))
    {
        BOOST_CHECK_EQUAL(p.at_secure, 0);
        BOOST_CHECK(p.lib_mapped);
        BOOST_CHECK_EQUAL(p.out, transcript);
        BOOST_CHECK_MESSAGE(p.log_created, "the library did not open its log file outside secure mode");
        BOOST_CHECK_MESSAGE(p.fds != std::set<int>({0, 1, 2, 3, 4, 5}), "the log file is not open");
        BOOST_CHECK_EQUAL(p.status, 0);
    }
}
