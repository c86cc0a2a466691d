// Black-box parity tests: every sockprobe scenario runs twice, without and with
// librdmasock.so preloaded (RDMASOCK_LOG_LEVEL=info, log to a temporary file).  A case
// passes when
//   - the transcript without the library is the kernel's expected transcript below
//     (so the test fails if both runs are wrong the same way),
//   - the transcript, standard error and exit status with the library are identical,
//   - the library's log holds only well-formed lines: no warning, no error, every
//     event=close line with the documented keys in the documented order, a known reason
//     code, and no connection endpoint logged twice by one process.
// Some cases check the close-time log line further (byte counts, fd, addresses).
//
// The expected transcripts were taken from Linux (6.x) and checked against the kernel's
// documented behaviour; lines starting with "addr " are run-dependent and left out.
//
// RDMA mode: with TEST_PARITY_ADDR=IPV4 (an address on an RDMA device; optionally
// TEST_PARITY_ADDR6=IPV6 too) both runs pass it to sockprobe as SOCKPROBE_ADDR(6), so
// that both ends of every TCP connection can be offloaded, and every case also asserts
// what each close-time log line says: offload_expectation() below states, per
// scenario, how many connections must be on RDMA (a client and a server line in one
// process, addresses mirrored) and the role and reason of every line on TCP, with why.
// TEST_PARITY_PROBE_TIMEOUT_MS sets RDMASOCK_PROBE_TIMEOUT_MS for the library run,
// TEST_PARITY_CONNECT_WAIT its RDMASOCK_CONNECT_WAIT (run-parity-rdma: 1, so every
// connection's first byte already goes over RDMA), TEST_PARITY_BUSY_POLL_US its
// RDMASOCK_BUSY_POLL_US (make check-parity-rdma-busy: the same semantics while blocking
// calls spin on the completion queue first), TEST_PARITY_RING_KB its RDMASOCK_RING_KB
// (make check-parity-rdma-small: 8 KiB rings, so that every stream wraps and fills them).
// tests/preload/run-parity-rdma runs this in the soft-RoCE VM (make check-parity-rdma).
#define BOOST_TEST_MODULE rdmasock preload parity
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/common/closelog.hh"
#include "tests/common/files.hh"
#include "tests/common/proc.hh"
#include "tests/common/text.hh"

#ifndef RDMASOCK_BUILD_LIB
#error RDMASOCK_BUILD_LIB must name the built librdmasock.so
#endif
#ifndef SOCKPROBE
#error SOCKPROBE must name the built sockprobe
#endif

namespace {

using testcommon::Fields;

const std::string kAddr = testcommon::env_or("TEST_PARITY_ADDR", "");
const std::string kAddr6 = testcommon::env_or("TEST_PARITY_ADDR6", "");

bool rdma_mode() { return !kAddr.empty(); }
// RDMA mode in the library's default (asynchronous) mode: TEST_PARITY_CONNECT_WAIT=0
// (make check-parity-rdma-async).  connect() returns at once and a connection switches
// in the background, so most scenarios end before their connections switch: which
// transport a close line shows is timing, and only its consistency is checked (the
// transcripts, as in every mode, must be the kernel's).
bool async_mode() { return rdma_mode() && testcommon::env_or("TEST_PARITY_CONNECT_WAIT", "") == "0"; }
unsigned g_async_rdma_lines = 0;  // close lines on RDMA in async mode (reported)
unsigned g_exit_lines = 0;        // event=exit lines checked against the close lines
struct AsyncReport {
    ~AsyncReport()
    {
        printf("parity: %u exit lines, each one's totals equal to its process's close lines\n", g_exit_lines);
        if (async_mode())
            printf("parity rdma, default mode: %u close lines on RDMA (the other connections ended before "
                   "their switch)\n",
                   g_async_rdma_lines);
    }
};
BOOST_TEST_GLOBAL_FIXTURE(AsyncReport);

// Known library bugs that make a case differ when offloaded (see each case): that many
// failing assertions are expected in RDMA mode only; without it, none.
unsigned rdma_bug(unsigned assertions) { return rdma_mode() ? assertions : 0; }

// Can the scenario's TCP connections be offloaded: RDMA mode, and for inet6 scenarios
// an IPv6 address too.
bool offloadable(const std::vector<std::string> &args)
{
    bool v6 = std::find(args.begin(), args.end(), "inet6") != args.end();
    return rdma_mode() && (!v6 || !kAddr6.empty());
}

// What RDMA mode expects of a scenario's close lines.
struct Offload {
    unsigned rdma = 0;  // connections on RDMA, both ends
    std::vector<std::string> tcp;  // "ROLE REASON" of every other close line
    bool across = false;  // the RDMA connections' two ends are in different processes
    // At least `rdma` connections on RDMA, the others on TCP for a reason in `tcp` (as
    // many as the scenario's timing gave).
    bool some = false;
};

// A connection made on a loopback address when no address of its family is given.
std::vector<std::string> loopback_conn(unsigned n)
{
    std::vector<std::string> v;
    for (unsigned i = 0; i < n; ++i) {
        v.push_back("client not_rdma_addr");
        v.push_back("server peer_no_rdmasock");
    }
    return v;
}

// The server end of a connection whose client gave up waiting for the RDMA answer (the
// server end not read meanwhile): timeout when the client's request reached it before
// the client withdrew it (it was parked for the read, then accepted: the client does run
// rdmasock), else peer_no_rdmasock (no request came that the server could tell from
// none); which one is the timing's.
const char *const kServerAfterTimeout = "server peer_no_rdmasock|timeout";

// Per scenario (its arguments joined by spaces).  false when there is no entry: that
// fails the case, nothing is skipped.
bool offload_expectation(const std::vector<std::string> &args, Offload *o)
{
    std::string key;
    for (auto &a : args)
        key += (key.empty() ? "" : " ") + a;
    const bool six = !kAddr6.empty();
    static const std::set<std::string> one_pair = {
        "stream rw inet", "stream iov inet", "stream sendrecv inet", "stream msg inet",
        "stream sendfile inet", "epipe", "eagain", "fill", "connstate", "epoll-lt", "epoll-et",
        "epoll-et-fin", "epoll-oneshot", "epoll-rdhup", "epoll-nested", "peek", "waitall", "dontwait", "dup", "dup-reuse", "nonblock-elsewhere",
        "fork-epoll-close", "stdio", "splice", "listener-opts", "closelog inet exact", "closelog inet eof", "closelog-queued inet"};
    static const std::set<std::string> one_pair6 = {
        "stream rw inet6", "stream msg inet6", "closelog inet6 exact", "closelog inet6 eof",
        "closelog-queued inet6"};
    *o = Offload();
    if (one_pair.count(key)) {
        o->rdma = 1;
    } else if (one_pair6.count(key)) {
        if (six)
            o->rdma = 1;
        else
            o->tcp = loopback_conn(1);
    } else if (key == "timeouts" || key == "halfclose" || key == "dup2-live" || key == "close-range" ||
               key == "syscall-close") {
        o->rdma = 2;  // two tcp_pair()s
    } else if (key == "closefrom") {
        // Three tcp_pair()s a round, two rounds: the one made after the close too (the
        // library's devices and channels were left open).
        o->rdma = 6;
    } else if (key == "refused" || key == "ebadf" || key == "pipe" || key == "udp") {
        // refused connects only (no close line for a connect that failed blocking), no
        // TCP connection, pipes, UDP: nothing to log
    } else if (key == "nbrefused" || key == "epoll-refused") {
        // nonblocking connects refused: the socket never completed a connection
        unsigned n = key == "nbrefused" ? 2 : 4;  // one (two) per family
        for (unsigned i = 0; i < n; ++i)
            o->tcp.push_back("client not_connected");
    } else if (key == "nbconnect") {
        // One thread connects (nonblocking: the library negotiates inside connect() all
        // the same) before it accepts: nobody reads the server end while the client waits
        // for the RDMA answer, so the client gives up after the probe timeout; the
        // server end then reads bytes that are no CONFIRM.  Once per family.
        for (int i = 0; i < 2; ++i) {
            o->tcp.push_back("client timeout");
            o->tcp.push_back(kServerAfterTimeout);
        }
    } else if (key == "poll" || key == "ppoll" || key == "select" || key == "pselect") {
        // The main pair on RDMA; the second connection (c2) is connected before it is
        // accepted (the scenario watches the listener become readable) and its server
        // end is never read: the client times out, the server end is closed undecided.
        o->rdma = 1;
        o->tcp = {"client timeout", "server pending"};
    } else if (key == "signals") {
        // The main pair on RDMA; the connection a thread makes to wake the blocked
        // accept() (SA_RESTART part) is never read on the server side, which the scenario
        // leaves open (its line comes at exit, still undecided): the client times out.
        o->rdma = 1;
        o->tcp = {"client timeout", "server pending"};
    } else if (key == "exit-deferred") {
        // One connection from the parent to its fork child (whose library starts after
        // the fork), on RDMA; the child's close line comes from its exit.
        o->rdma = 1;
        o->across = true;
    } else if (key == "exit-open") {
        // The same, the child exiting with the connection open: its line comes from the
        // library's exit step.
        o->rdma = 1;
        o->across = true;
    } else if (key == "stdio-exit") {
        // One connection from a fork child to its parent, on RDMA; the child's line
        // comes from its exit.
        o->rdma = 1;
        o->across = true;
    } else if (key == "fork-connect") {
        // The parent's engine started with its listener: the fork child loads a copy of
        // rdma-core of its own, and its connection to the parent goes on RDMA (it
        // stayed on TCP, forked_child, before).
        o->rdma = 1;
        o->across = true;
    } else if (key == "close-read") {
        // Parts 1, 2 and 3 use offloadable pairs; the new sockets of parts 2 and 3
        // connect before their server ends are accepted (timeout), then their server ends
        // read a non-CONFIRM; part 4 makes no connection.
        o->rdma = 3;
        o->tcp = {"client timeout", kServerAfterTimeout, "client timeout", kServerAfterTimeout};
    } else if (key == "oobinline") {
        // Urgent bytes read in-band: no connection goes on RDMA.  (1) SO_OOBINLINE on
        // the listener, inherited by the accepted socket: the server declines the request
        // (urgent_data, which the client records).  (2) set on the client before
        // connect(): no request; the server end sends urgent data while undecided.
        o->tcp = {"client urgent_data", "server urgent_data", "client urgent_data", "server urgent_data"};
    } else if (key == "io-uring") {
        // A process that uses io_uring: no request from its clients, its servers decline
        // (both ends are this process's).  Two connections, one end of each closed by the
        // ring, which the library does not see: no close line for those ends (their
        // numbers, closed again once a file had them, are no socket then).
        o->tcp = {"server io_uring", "client io_uring"};
    } else if (key == "fork-storm" || key == "fork-storm thousands") {
        // Connection after connection while the main thread forks, as many as the forks
        // took time for: the first (made before the forks) on RDMA; the others on RDMA or,
        // as rdmasock(7) FORK says, on TCP when a fork came while they were negotiated
        // (forked), or while the server end, accepted, was not yet read (its request is
        // left to a child that may serve it: the client times out, the server end is
        // plain TCP, or the server declines it: rejected); a child's copy of a socket
        // still connecting at the fork logs not_connected at the child's close.  One on
        // RDMA that the connecting thread closes while a child forked a moment before
        // still holds its copy (before its close_range) goes back to TCP for that child
        // first (fell_back at both ends; docs/protocol.md, a fork child's copy): the
        // kernel's close of a socket another process holds ends nothing.  No reason that
        // says something failed (bad_message, resource, limit...).
        o->rdma = 1;
        o->some = true;
        for (const char *role : {"client", "server"})
            for (const char *why : {"forked", "timeout", "rejected", "peer_no_rdmasock", "pending", "closed_early",
                                    "not_connected", "fell_back"})
                o->tcp.push_back(std::string(role) + " " + why);
    } else if (key == "epoll-switch") {
        o->rdma = 3;  // (level-triggered, then edge-triggered, then one-shot)
    } else if (key == "dup2-race" || key == "numbers") {
        // Connections one after another, each read at once: on RDMA, or on TCP when a
        // negotiation did not finish before the exchange ended it (closed_early and
        // what goes with it).
        o->some = true;
        for (const char *role : {"client", "server"})
            for (const char *why : {"timeout", "peer_no_rdmasock", "pending", "closed_early"})
                o->tcp.push_back(std::string(role) + " " + why);
    } else if (key == "unix") {
        // Its only TCP connection, on RDMA, passed with SCM_RIGHTS (to the process
        // itself, which cannot be told from another): back to TCP first, both ends.
        o->tcp = {"client fell_back", "server fell_back"};
    } else if (key == "pass-child") {
        // The server passed its accepted connection on before using it (and before or
        // after the client's request came: declined either way).
        o->tcp = {"client rejected", "server passed"};
    } else if (key == "fork") {
        // Three connections shared with a fork child, made connect-then-accept (an
        // offloaded connection cannot be used by a fork child: rdmasock(7)); the client
        // gives up after the probe timeout (the first), then after twice that (a timeout
        // is not cached: the next connections probe again, and wait longer).  An
        // accepted connection unused at the fork is the first user's (fork per
        // connection): the copy a process closes unused logs no line, the process that
        // reads it logs it.  (1) child closes both ends: client timeout (its server copy,
        // unused: no line); parent: client timeout, server read a non-CONFIRM.  (2)
        // parent closes its server copy unused (no line), client timeout; child: server
        // read a non-CONFIRM, client timeout.  (3) the child _exits (no lines); parent:
        // client timeout, server read a non-CONFIRM.
        o->tcp = {"client timeout", "client timeout",    kServerAfterTimeout, "client timeout",
                  "client timeout", kServerAfterTimeout, "client timeout",    kServerAfterTimeout};
    } else {
        return false;
    }
    return true;
}

// RDMA mode: the close lines are what offload_expectation() says.
void check_offload(const std::vector<std::string> &args, const testcommon::CloseLog &lc, const std::string &log)
{
    Offload want;
    BOOST_REQUIRE_MESSAGE(offload_expectation(args, &want), "no RDMA expectation for scenario " << args[0]);
    std::vector<Fields> rdma;
    std::vector<std::string> tcp;
    for (auto &f : lc.closes) {
        if (f.at("transport") == "rdma") {
            BOOST_CHECK_MESSAGE(!f.count("reason"), "an rdma close line with a reason\n" << log);
            rdma.push_back(f);
        } else {
            tcp.push_back(f.at("role") + " " + (f.count("reason") ? f.at("reason") : "?"));
        }
    }
    // Each connection on RDMA: a client line and a server line of one process with the
    // addresses mirrored.
    unsigned pairs = 0, unmatched = 0;
    std::vector<bool> used(rdma.size(), false);
    for (size_t i = 0; i < rdma.size(); ++i) {
        if (rdma[i].at("role") != "client")
            continue;
        bool found = false;
        for (size_t j = 0; j < rdma.size() && !found; ++j)
            if (!used[j] && rdma[j].at("role") == "server" &&
                (want.across ? rdma[j].at("pid") != rdma[i].at("pid") : rdma[j].at("pid") == rdma[i].at("pid")) &&
                rdma[j].at("local") == rdma[i].at("peer") && rdma[j].at("peer") == rdma[i].at("local")) {
                used[j] = found = true;
                used[i] = true;
            }
        if (found)
            ++pairs;
    }
    for (bool u : used)
        unmatched += u ? 0 : 1;
    BOOST_CHECK_MESSAGE((want.some ? pairs >= want.rdma : pairs == want.rdma) && unmatched == 0,
                        "want " << want.rdma << " connection(s) on RDMA with both ends logged, got " << pairs
                                << " (and " << unmatched << " rdma line(s) without their other end)\n"
                                << log);
    if (want.some) {
        for (auto &t : tcp)
            BOOST_CHECK_MESSAGE(std::find(want.tcp.begin(), want.tcp.end(), t) != want.tcp.end(),
                                "a close line on TCP for an unexpected reason: " << t << "\n" << log);
        return;
    }
    std::sort(tcp.begin(), tcp.end());
    std::sort(want.tcp.begin(), want.tcp.end());
    std::string got_s, want_s;
    for (auto &t : tcp)
        got_s += "[" + t + "] ";
    for (auto &t : want.tcp)
        want_s += "[" + t + "] ";
    // One wanted line each ("ROLE A|B": either reason), in order: the alternatives of a
    // scenario are the same for each of its lines of one role.
    std::vector<bool> taken(want.tcp.size(), false);
    bool all = tcp.size() == want.tcp.size();
    for (size_t i = 0; i < tcp.size() && all; ++i) {
        const std::string role = tcp[i].substr(0, tcp[i].find(' ')), why = tcp[i].substr(tcp[i].find(' ') + 1);
        bool found = false;
        for (size_t j = 0; j < want.tcp.size() && !found; ++j) {
            const std::string &w = want.tcp[j];
            if (taken[j] || w.compare(0, role.size() + 1, role + " ") != 0)
                continue;
            const std::string alts = "|" + w.substr(role.size() + 1) + "|";
            if (alts.find("|" + why + "|") != std::string::npos)
                taken[j] = found = true;
        }
        all = found;
    }
    BOOST_CHECK_MESSAGE(all, "close lines on TCP (role reason): got " << got_s << "want " << want_s << "\n" << log);
}

// TEST_PARITY_LIB: another build of the library (tests/sanitize/run-sanitized).
const std::string kLib = testcommon::env_or("TEST_PARITY_LIB", RDMASOCK_BUILD_LIB);
const std::string kProbe = SOCKPROBE;
constexpr int kTimeoutMs = 30000;
// RDMA mode: sockprobe's own watchdog is 40 s there (probe timeouts in connect, and a
// known bug's cascade of 3 s waits in signals_eintr_restart): kill it only after that.
int run_timeout_ms() { return rdma_mode() ? 60000 : kTimeoutMs; }

struct Runs {
    std::vector<std::string> args;
    testcommon::Result plain, pre;
    std::string log;
    testcommon::CloseLog lc;
};

std::set<std::string> &covered()
{
    static std::set<std::string> s;
    return s;
}

struct Covers {
    explicit Covers(const std::string &scenario) { covered().insert(scenario); }
};

std::set<std::string> reason_codes()
{
    std::set<std::string> codes;
#ifdef RDMASOCK_REASON_DEF
    std::ifstream in(RDMASOCK_REASON_DEF);
    std::string line;
    std::regex re(R"(^RS_REASON\(\s*\w+\s*,\s*"([a-z_]+)\")");
    while (std::getline(in, line)) {
        std::smatch m;
        if (std::regex_search(line, m, re))
            codes.insert(m[1]);
    }
#endif
    return codes;
}

Runs parity(const std::vector<std::string> &args, const std::string &expected)
{
    BOOST_REQUIRE_MESSAGE(testcommon::file_exists(kLib), "the library is not built: " << kLib);
    BOOST_REQUIRE_MESSAGE(testcommon::file_exists(kProbe), "sockprobe is not built: " << kProbe);
    testcommon::TempDir td;
    BOOST_REQUIRE(!td.path().empty());
    const std::string log = td / "rdmasock.log";
    std::vector<std::string> argv = {kProbe};
    argv.insert(argv.end(), args.begin(), args.end());
    testcommon::Env env = testcommon::base_env();
    testcommon::set_var(env, "TMPDIR", td.path());
    if (rdma_mode()) {
        testcommon::set_var(env, "SOCKPROBE_ADDR", kAddr);
        if (!kAddr6.empty())
            testcommon::set_var(env, "SOCKPROBE_ADDR6", kAddr6);
    }
    testcommon::Env env_lib = testcommon::with_lib(env, kLib, "info", log);
    // TEST_PARITY_X sets the library run's RDMASOCK_X.
    for (const char *x : {"PROBE_TIMEOUT_MS", "CONNECT_WAIT", "BUSY_POLL_US", "SPIN_US", "RING_KB"}) {
        std::string v = testcommon::env_or(("TEST_PARITY_" + std::string(x)).c_str(), "");
        if (!v.empty())
            testcommon::set_var(env_lib, "RDMASOCK_" + std::string(x), v);
    }
    Runs r;
    r.args = args;
    r.plain = testcommon::run(argv, env, run_timeout_ms());
    r.pre = testcommon::run(argv, env_lib, run_timeout_ms());

    BOOST_CHECK_MESSAGE(r.plain.exit_code() == 0, "without the library: " << r.plain.describe());
    BOOST_CHECK_MESSAGE(r.pre.exit_code() == 0, "with the library: " << r.pre.describe());
    const std::string tp = testcommon::drop_lines(r.plain.out, "addr ");
    const std::string tw = testcommon::drop_lines(r.pre.out, "addr ");
    std::string d = testcommon::first_difference(tp, expected);
    BOOST_CHECK_MESSAGE(d.empty(), "without the library the transcript is not the kernel's expected one: "
                                       << d << "\n--- transcript ---\n" << r.plain.out);
    d = testcommon::first_difference(tw, tp);
    BOOST_CHECK_MESSAGE(d.empty(), "with the library the transcript differs from without it: "
                                       << d << "\n--- with ---\n" << r.pre.out << "--- without ---\n"
                                       << r.plain.out);
    BOOST_CHECK_MESSAGE(r.pre.err == r.plain.err, "standard error differs\n--- with ---\n"
                                                      << r.pre.err << "--- without ---\n" << r.plain.err);
    BOOST_CHECK_EQUAL(r.pre.exit_code(), r.plain.exit_code());

    r.log = testcommon::read_file(log);
    r.lc = testcommon::check_close_log(r.log);
    g_exit_lines += r.lc.exits;
    for (auto &p : r.lc.problems)
        BOOST_ERROR(p);
    static const std::set<std::string> codes = reason_codes();
    std::set<std::string> seen;
    for (auto &f : r.lc.closes) {
        if (f.count("reason") && !codes.empty())
            BOOST_CHECK_MESSAGE(codes.count(f.at("reason")), "unknown reason code " << f.at("reason"));
        std::string key = f.at("pid") + " " + f.at("local") + " " + f.at("peer");
        BOOST_CHECK_MESSAGE(seen.insert(key).second, "one process logged a connection twice: " << key);
    }
    BOOST_TEST_MESSAGE(args[0] << ": " << r.lc.closes.size() << " close lines logged");
    if (async_mode()) {
        for (auto &f : r.lc.closes) {
            const bool tcp = f.at("transport") == "tcp";
            BOOST_CHECK_MESSAGE(tcp || f.at("transport") == "rdma", "transport " << f.at("transport"));
            BOOST_CHECK_MESSAGE(tcp == (f.count("reason") && !f.at("reason").empty()),
                                "a close line's reason does not match its transport\n" << r.log);
            g_async_rdma_lines += tcp ? 0 : 1;
        }
        BOOST_TEST_MESSAGE(args[0] << ": default mode, close lines on RDMA so far: " << g_async_rdma_lines);
    } else if (rdma_mode()) {
        check_offload(args, r.lc, r.log);
    }
    return r;
}

// The transport the close lines of a scenario whose connections are all offloadable
// must show: rdma in RDMA mode, tcp (not_rdma_addr on loopback) otherwise.
std::string want_transport(const Runs &r) { return offloadable(r.args) ? "rdma" : "tcp"; }

// A close line's transport is want_transport(), but in async mode (timing), where only
// its consistency with the reason is checked (run_scenario).
void check_transport(const Runs &r, const Fields &f)
{
    if (!async_mode())
        BOOST_CHECK_EQUAL(f.at("transport"), want_transport(r));
}

std::vector<Fields> with_role(const Runs &r, const std::string &role)
{
    std::vector<Fields> v;
    for (auto &f : r.lc.closes)
        if (f.at("role") == role)
            v.push_back(f);
    return v;
}

// Both ends wrote 8 MiB: one line per end, bytes_sent exact.  (bytes_received is not
// checked here: see closelog_*_eof for the FIN accounting.)
void check_stream_log(const Runs &r)
{
    BOOST_CHECK_EQUAL(r.lc.closes.size(), 2u);
    for (const char *role : {"client", "server"}) {
        auto v = with_role(r, role);
        BOOST_CHECK_EQUAL(v.size(), 1u);
        for (auto &f : v) {
            check_transport(r, f);
            BOOST_CHECK_EQUAL(f.at("bytes_sent"), "8388608");
        }
    }
}

std::string note(const Runs &r, const std::string &key)
{
    std::regex re("^note " + key + "=(\\d+)$");
    for (auto &l : testcommon::split_lines(r.pre.out)) {  // the run that wrote the log
        std::smatch m;
        if (std::regex_match(l, m, re))
            return m[1];
    }
    return "";
}

// The five duplicates of the client end share one close line, logged at the last close.
void check_dup_log(const Runs &r)
{
    BOOST_CHECK_EQUAL(r.lc.closes.size(), 2u);
    auto c = with_role(r, "client");
    BOOST_REQUIRE_EQUAL(c.size(), 1u);
    BOOST_CHECK_EQUAL(c[0].at("fd"), note(r, "last-close fd"));
    BOOST_CHECK_EQUAL(c[0].at("bytes_sent"), "7");
    BOOST_CHECK_EQUAL(c[0].at("bytes_received"), "6");
}

// dup2 over a live socket closes it: its line is logged then, under the victim's fd.
void check_dup2_log(const Runs &r)
{
    BOOST_CHECK_EQUAL(r.lc.closes.size(), 4u);
    std::string victim = note(r, "victim fd");
    bool found = false;
    for (auto &f : with_role(r, "client"))
        if (f.at("fd") == victim && f.at("bytes_sent") == "0" && f.at("bytes_received") == "0")
            found = true;
    BOOST_CHECK_MESSAGE(found, "no close line for the socket dup2 replaced (fd " << victim << ")\n" << r.log);
}

// Exactly one close line per side, with the fd and addresses the program saw with
// getsockname/getpeername ("addr" lines) and the given byte counts (sent, received).
void check_close_lines(const Runs &r, const std::map<std::string, std::pair<std::string, std::string>> &bytes)
{
    std::regex re(R"(^addr (client|server) fd=(\d+) local=(\S+) peer=(\S+)$)");
    std::map<std::string, std::vector<std::string>> seen;
    for (auto &l : testcommon::split_lines(r.pre.out)) {
        std::smatch m;
        if (std::regex_match(l, m, re))
            seen[m[1]] = {m[2], m[3], m[4]};
    }
    BOOST_REQUIRE_EQUAL(seen.size(), 2u);
    BOOST_CHECK_EQUAL(r.lc.closes.size(), 2u);
    for (const char *role : {"client", "server"}) {
        auto v = with_role(r, role);
        BOOST_REQUIRE_MESSAGE(v.size() == 1, "want one close line for the " << role << "\n" << r.log);
        const Fields &f = v[0];
        BOOST_TEST_CONTEXT(role << " line of " << r.log)
        {
            BOOST_CHECK_EQUAL(f.at("fd"), seen[role][0]);
            BOOST_CHECK_EQUAL(f.at("local"), seen[role][1]);
            BOOST_CHECK_EQUAL(f.at("peer"), seen[role][2]);
            check_transport(r, f);
            BOOST_CHECK_EQUAL(f.count("reason") && !f.at("reason").empty(), f.at("transport") == "tcp");
            BOOST_CHECK_EQUAL(f.at("bytes_sent"), bytes.at(role).first);
            BOOST_CHECK_EQUAL(f.at("bytes_received"), bytes.at(role).second);
        }
    }
}

const Covers cov_closelog("closelog"), cov_closelog_queued("closelog-queued");

// closelog FAMILY MODE: client sends 123457 bytes, server 4242.
void check_closelog(const char *fam, const char *mode)
{
    Runs r = parity({"closelog", fam, mode}, "server received 123457, client received 4242\nclosed\n");
    check_close_lines(r, {{"client", {"123457", "4242"}}, {"server", {"4242", "123457"}}});
}

// closelog-queued FAMILY: the client closes with data and its FIN still queued.
void check_closelog_queued(const char *fam)
{
    Runs r = parity({"closelog-queued", fam}, "client: got EAGAIN after >0 bytes\n"
                                              "client shutdown SHUT_WR = 0\n"
                                              "client close = 0\n"
                                              "server received everything the client wrote: yes\n"
                                              "server close = 0\n");
    std::smatch m;
    std::string wrote;
    if (std::regex_search(r.pre.out, m, std::regex(R"(addr client wrote=(\d+))")))
        wrote = m[1];
    BOOST_REQUIRE(!wrote.empty());
    check_close_lines(r, {{"client", {wrote, "0"}}, {"server", {"0", wrote}}});
}

using Extra = void (*)(const Runs &);

}  // namespace

// PARITY_CASE_BUG: the same, with `bug` failing assertions expected in RDMA mode only
// (a library bug, described at the case).
#define PARITY_CASE_BUG(name, args, extra, bug, expected)                       \
    static Covers covers_##name{std::vector<std::string> args.front()};      \
    BOOST_AUTO_TEST_CASE(name, *boost::unit_test::expected_failures(rdma_bug(bug))) \
    {                                                                        \
        Runs r = parity(std::vector<std::string> args, expected);            \
        Extra x = extra;                                                     \
        if (x != nullptr)                                                    \
            x(r);                                                            \
    }
#define PARITY_CASE(name, args, extra, expected) PARITY_CASE_BUG(name, args, extra, 0, expected)

/* ---- byte-exact streams: 8 MiB each way at once, every send/receive family --------- */

PARITY_CASE(stream_rw_inet, ({"stream", "rw", "inet"}), check_stream_log,
R"(stream rw inet bytes=8388608 each way
client->server sent=8388608 received=8388608 verify=ok fnv=4da59ab4003ce383 tx_err=0 rx_err=0
server->client sent=8388608 received=8388608 verify=ok fnv=392b514e61105383 tx_err=0 rx_err=0
)")

PARITY_CASE(stream_iov_inet, ({"stream", "iov", "inet"}), check_stream_log,
R"(stream iov inet bytes=8388608 each way
client->server sent=8388608 received=8388608 verify=ok fnv=4da59ab4003ce383 tx_err=0 rx_err=0
server->client sent=8388608 received=8388608 verify=ok fnv=392b514e61105383 tx_err=0 rx_err=0
)")

PARITY_CASE(stream_sendrecv_inet, ({"stream", "sendrecv", "inet"}), check_stream_log,
R"(stream sendrecv inet bytes=8388608 each way
client->server sent=8388608 received=8388608 verify=ok fnv=4da59ab4003ce383 tx_err=0 rx_err=0
server->client sent=8388608 received=8388608 verify=ok fnv=392b514e61105383 tx_err=0 rx_err=0
)")

PARITY_CASE(stream_msg_inet, ({"stream", "msg", "inet"}), check_stream_log,
R"(stream msg inet bytes=8388608 each way
client->server sent=8388608 received=8388608 verify=ok fnv=4da59ab4003ce383 tx_err=0 rx_err=0
server->client sent=8388608 received=8388608 verify=ok fnv=392b514e61105383 tx_err=0 rx_err=0
recvmsg msg_flags seen: none
)")

PARITY_CASE(stream_sendfile_inet, ({"stream", "sendfile", "inet"}), check_stream_log,
R"(stream sendfile inet bytes=8388608 each way
client->server sent=8388608 received=8388608 verify=ok fnv=4da59ab4003ce383 tx_err=0 rx_err=0
server->client sent=8388608 received=8388608 verify=ok fnv=392b514e61105383 tx_err=0 rx_err=0
sendfile client offset=4194304 filepos=8388608
sendfile server offset=4194304 filepos=8388608
)")

PARITY_CASE(stream_rw_inet6, ({"stream", "rw", "inet6"}), check_stream_log,
R"(stream rw inet6 bytes=8388608 each way
client->server sent=8388608 received=8388608 verify=ok fnv=4da59ab4003ce383 tx_err=0 rx_err=0
server->client sent=8388608 received=8388608 verify=ok fnv=392b514e61105383 tx_err=0 rx_err=0
)")

PARITY_CASE(stream_msg_inet6, ({"stream", "msg", "inet6"}), check_stream_log,
R"(stream msg inet6 bytes=8388608 each way
client->server sent=8388608 received=8388608 verify=ok fnv=4da59ab4003ce383 tx_err=0 rx_err=0
server->client sent=8388608 received=8388608 verify=ok fnv=392b514e61105383 tx_err=0 rx_err=0
recvmsg msg_flags seen: none
)")

/* ---- errno parity ----------------------------------------------------------------- */

PARITY_CASE(errno_refused, ({"refused"}), nullptr,
R"(family inet
connect to a closed port = -1 ECONNREFUSED
SO_ERROR after = 0
connect again = -1 ECONNREFUSED
getpeername = -1 ENOTCONN
family inet6
connect to a closed port = -1 ECONNREFUSED
SO_ERROR after = 0
connect again = -1 ECONNREFUSED
getpeername = -1 ENOTCONN
)")

// RDMA mode: after the peer's close() (its FIN says "closed"), writes go to the TCP
// socket, so the peer's kernel answers with an RST as without the library.
PARITY_CASE(errno_epipe_sigpipe, ({"epipe"}), nullptr,
R"(peer close = 0
read after peer close (EOF) = 0
first write after peer close = 1
poll for the reset = 1
mask after reset = POLLIN|POLLOUT|POLLERR|POLLHUP|POLLRDHUP
send MSG_NOSIGNAL = -1 EPIPE
SIGPIPE count = 0
write = -1 EPIPE
SIGPIPE count = 1
send flags 0 = -1 EPIPE
SIGPIPE count = 2
writev = -1 EPIPE
SIGPIPE count = 3
sendmsg MSG_NOSIGNAL = -1 EPIPE
SIGPIPE count = 3
sendto MSG_NOSIGNAL = -1 EPIPE
SIGPIPE count = 3
read after reset = 0
SO_ERROR = 0
child with default SIGPIPE: killed by SIGPIPE
)")

PARITY_CASE(errno_ebadf, ({"ebadf"}), nullptr,
R"(close = 0
read = -1 EBADF
write = -1 EBADF
readv = -1 EBADF
writev = -1 EBADF
recv = -1 EBADF
send = -1 EBADF
recvfrom = -1 EBADF
sendto = -1 EBADF
recvmsg = -1 EBADF
sendmsg = -1 EBADF
sendfile = -1 EBADF
connect = -1 EBADF
bind = -1 EBADF
listen = -1 EBADF
accept = -1 EBADF
accept4 = -1 EBADF
shutdown = -1 EBADF
getsockopt = -1 EBADF
setsockopt = -1 EBADF
getsockname = -1 EBADF
getpeername = -1 EBADF
fcntl F_GETFL = -1 EBADF
fcntl F_DUPFD = -1 EBADF
ioctl FIONREAD = -1 EBADF
dup = -1 EBADF
dup2 = -1 EBADF
dup3 = -1 EBADF
epoll_ctl ADD = -1 EBADF
epoll_wait on a closed epoll fd = -1 EBADF
close again = -1 EBADF
close(-1) = -1 EBADF
read(-1) = -1 EBADF
write(99999) = -1 EBADF
poll = 1
poll revents = POLLNVAL
select = -1 EBADF
)")

PARITY_CASE(nonblocking_connect, ({"nbconnect"}), nullptr,
R"(family inet
connect = -1 EINPROGRESS
mask = POLLOUT
SO_ERROR = 0
connect again (completes it) = 0
connect a third time = -1 EISCONN
peer is the listener: yes
write = 4
read on the server = 4
write back = 4
nonblocking read = 4
nonblocking read again = -1 EAGAIN
family inet6
connect = -1 EINPROGRESS
mask = POLLOUT
SO_ERROR = 0
connect again (completes it) = 0
connect a third time = -1 EISCONN
peer is the listener: yes
write = 4
read on the server = 4
write back = 4
nonblocking read = 4
nonblocking read again = -1 EAGAIN
)")

PARITY_CASE(nonblocking_connect_refused, ({"nbrefused"}), nullptr,
R"(family inet
connect = -1 EINPROGRESS
mask = POLLIN|POLLOUT|POLLERR|POLLHUP|POLLRDHUP
SO_ERROR = ECONNREFUSED
SO_ERROR again = 0
connect again = -1 ECONNABORTED
connect a third time = -1 EINPROGRESS
SO_ERROR = ECONNREFUSED
family inet6
connect = -1 EINPROGRESS
mask = POLLIN|POLLOUT|POLLERR|POLLHUP|POLLRDHUP
SO_ERROR = ECONNREFUSED
SO_ERROR again = 0
connect again = -1 ECONNABORTED
connect a third time = -1 EINPROGRESS
SO_ERROR = ECONNREFUSED
)")

PARITY_CASE(errno_eagain, ({"eagain"}), nullptr,
R"(fcntl F_SETFL O_NONBLOCK = 0
fcntl F_GETFL has O_NONBLOCK = 1
read = -1 EAGAIN
readv = -1 EAGAIN
recv = -1 EAGAIN
recvfrom = -1 EAGAIN
recvmsg = -1 EAGAIN
blocking socket, recv MSG_DONTWAIT = -1 EAGAIN
blocking socket, recvmsg MSG_DONTWAIT = -1 EAGAIN
fcntl F_SETFL listener O_NONBLOCK = 0
accept = -1 EAGAIN
accept4 = -1 EAGAIN
ioctl FIONBIO = 0
read after FIONBIO = -1 EAGAIN
write = 3
read = 3
read again = -1 EAGAIN
)")

PARITY_CASE(fill_send_buffer, ({"fill"}), nullptr,
R"(write on O_NONBLOCK: got EAGAIN after >0 bytes
peer drained everything: yes
mask = POLLOUT
send MSG_DONTWAIT: got EAGAIN after >0 bytes
peer drained everything: yes
mask = POLLOUT
sendmsg MSG_DONTWAIT: got EAGAIN after >0 bytes
peer drained everything: yes
mask = POLLOUT
write 10 = 10
peer reads = 10
SIGPIPE count = 0
)")

PARITY_CASE(errno_eisconn_enotconn, ({"connstate"}), nullptr,
R"(connect a connected socket = -1 EISCONN
connect the accepted socket = -1 EISCONN
connect the listener = -1 EISCONN
listen on a connected socket = -1 EINVAL
accept on a connected socket = -1 EINVAL
getsockopt SO_ACCEPTCONN listener = 1
getsockopt SO_ACCEPTCONN connected = 0
getsockopt SO_TYPE = 1
getsockopt SO_DOMAIN = 2
getsockopt SO_PROTOCOL = 6
setsockopt TCP_NODELAY = 0
getsockopt TCP_NODELAY = 1
read on a listener = -1 ENOTCONN
send on a listener = -1 EPIPE
unconnected: read = -1 ENOTCONN
unconnected: recv = -1 ENOTCONN
unconnected: send MSG_NOSIGNAL = -1 EPIPE
SIGPIPE count = 0
unconnected: write = -1 EPIPE
SIGPIPE count = 1
unconnected: getpeername = -1 ENOTCONN
unconnected: shutdown = -1 ENOTCONN
unconnected: accept = -1 EINVAL
unconnected: ioctl FIONREAD = 0
listener: ioctl FIONREAD = -1 EINVAL
SO_ERROR = 0
)")

/* ---- readiness masks --------------------------------------------------------------- */

// RDMA mode: urgent data (send MSG_OOB) travels on the TCP socket, so the receiver sees
// POLLPRI (select: exceptfds) as with the kernel.
PARITY_CASE(readiness_poll, ({"poll"}), nullptr,
R"(fresh connection: c=POLLOUT s=POLLOUT
poll POLLIN timeout 0 = 0
poll POLLIN timeout 30ms = 0
server writes = 10
wait POLLIN = 1
revents = POLLIN
c = POLLIN|POLLOUT
read = 10
c = POLLOUT
pipe write = 1
poll 6 fds = 3
  c: 0
  s: POLLOUT
  pipe-r: POLLIN
  -1: 0
  listener: 0
  pipe-w: POLLOUT
listener: wait POLLIN = 1
listener = POLLIN
listener after accept = 0
urgent byte = 1
wait POLLPRI = 1
c = POLLPRI|POLLOUT
recv MSG_OOB = 1
c = POLLOUT
server shutdown SHUT_WR = 0
wait POLLRDHUP = 1
c = POLLIN|POLLOUT|POLLRDHUP
read EOF = 0
client shutdown SHUT_WR = 0
server: wait POLLRDHUP = 1
c = POLLIN|POLLOUT|POLLHUP|POLLRDHUP s = POLLIN|POLLOUT|POLLHUP|POLLRDHUP
pipe write end, read end closed = POLLOUT|POLLERR
poll a closed fd = 1
revents = POLLNVAL
poll no fds 10ms = 0
)")

PARITY_CASE(readiness_ppoll, ({"ppoll"}), nullptr,
R"(fresh connection: c=POLLOUT s=POLLOUT
poll POLLIN timeout 0 = 0
poll POLLIN timeout 30ms = 0
server writes = 10
wait POLLIN = 1
revents = POLLIN
c = POLLIN|POLLOUT
read = 10
c = POLLOUT
pipe write = 1
poll 6 fds = 3
  c: 0
  s: POLLOUT
  pipe-r: POLLIN
  -1: 0
  listener: 0
  pipe-w: POLLOUT
listener: wait POLLIN = 1
listener = POLLIN
listener after accept = 0
urgent byte = 1
wait POLLPRI = 1
c = POLLPRI|POLLOUT
recv MSG_OOB = 1
c = POLLOUT
server shutdown SHUT_WR = 0
wait POLLRDHUP = 1
c = POLLIN|POLLOUT|POLLRDHUP
read EOF = 0
client shutdown SHUT_WR = 0
server: wait POLLRDHUP = 1
c = POLLIN|POLLOUT|POLLHUP|POLLRDHUP s = POLLIN|POLLOUT|POLLHUP|POLLRDHUP
pipe write end, read end closed = POLLOUT|POLLERR
poll a closed fd = 1
revents = POLLNVAL
poll no fds 10ms = 0
handler ran before ppoll: 0
ppoll with SIGUSR1 unblocked = -1 EINTR
handler ran: 1
)")

PARITY_CASE(readiness_select, ({"select"}), nullptr,
R"(fresh: 2 r={} w={c,s} e={}
server writes = 10
wait readable: 1 r={c} w={} e={}
all: 3 r={c} w={c,s} e={}
read = 10
wait listener: 1 r={l} w={} e={}
urgent byte = 1
wait exception: 1 r={} w={} e={c}
all: 3 r={} w={c,s} e={c}
recv MSG_OOB = 1
server shutdown SHUT_WR = 0
wait EOF readable: 1 r={c} w={} e={}
read EOF = 0
select nothing 20ms = 0
timeval left = 0.000000
select a closed fd = -1 EBADF
)")

PARITY_CASE(readiness_pselect, ({"pselect"}), nullptr,
R"(fresh: 2 r={} w={c,s} e={}
server writes = 10
wait readable: 1 r={c} w={} e={}
all: 3 r={c} w={c,s} e={}
read = 10
wait listener: 1 r={l} w={} e={}
urgent byte = 1
wait exception: 1 r={} w={} e={c}
all: 3 r={} w={c,s} e={c}
recv MSG_OOB = 1
server shutdown SHUT_WR = 0
wait EOF readable: 1 r={c} w={} e={}
read EOF = 0
pselect nothing 20ms = 0
timespec left = 0.020000000 (pselect does not update it)
handler ran before pselect: 0
pselect with SIGUSR1 unblocked = -1 EINTR
handler ran: 1
select a closed fd = -1 EBADF
)")

PARITY_CASE(epoll_level_triggered, ({"epoll-lt"}), nullptr,
R"(ADD c EPOLLIN = 0
ADD c again = -1 EEXIST
MOD s (not added) = -1 ENOENT
DEL s (not added) = -1 ENOENT
ADD the epoll fd to itself = -1 EINVAL
wait 0: 0
server writes = 10
wait: 1 [1 EPOLLIN]
wait again (level): 1 [1 EPOLLIN]
epoll_pwait2: 1 [1 EPOLLIN]
read 4 = 4
still readable: 1 [1 EPOLLIN]
read rest = 6
drained: 0
epoll_wait 1 ms, nothing to read: 0, waited at least 1 ms: yes
epoll_wait 20 ms, nothing to read: 0, waited at least 20 ms: yes
epoll_pwait 1 ms, nothing to read: 0, waited at least 1 ms: yes
epoll_pwait 20 ms, nothing to read: 0, waited at least 20 ms: yes
epoll_pwait with a mask 1 ms, nothing to read: 0, waited at least 1 ms: yes
epoll_pwait with a mask 20 ms, nothing to read: 0, waited at least 20 ms: yes
MOD c EPOLLIN|EPOLLOUT = 0
writable: 1 [1 EPOLLOUT]
ADD s EPOLLIN|EPOLLOUT|EPOLLRDHUP = 0
both: 2 [1 EPOLLOUT] [2 EPOLLOUT]
DEL c = 0
DEL c again = -1 ENOENT
after DEL: 1 [2 EPOLLOUT]
ADD c EPOLLIN|EPOLLEXCLUSIVE = 0
MOD an EPOLLEXCLUSIVE entry = -1 EINVAL
server writes = 1
exclusive wait: 2 [1 EPOLLIN] [2 EPOLLOUT]
ADD c to a second epoll = 0
second epoll: 1 [7 EPOLLIN]
first epoll: 2 [1 EPOLLIN] [2 EPOLLOUT]
read = 1
second epoll after read: 0
after close(c): 0
)")

// Level-triggered waits with nothing to read while both ends switch (the default mode):
// no event before the timeout; then edge-triggered and one-shot registrations of new
// connections, which must still report the next write.  Before, a client's registration, still on its TCP
// socket, reported EPOLLIN for the server's PROOF in the stream (readiness.cc,
// fixup_deciding): 5 runs in 5 in the default mode, 1 in 5 with connect() waiting.
PARITY_CASE(epoll_wait_while_switching, ({"epoll-switch"}), nullptr,
R"(ADD c EPOLLIN = 0
ADD s EPOLLIN = 0
epoll_wait 400 ms, nothing to read: 0, waited at least 400 ms: yes
epoll_wait 400 ms, nothing to read: 0, waited at least 400 ms: yes
epoll_pwait 400 ms, nothing to read: 0, waited at least 400 ms: yes
epoll_pwait 400 ms, nothing to read: 0, waited at least 400 ms: yes
epoll_pwait2 400 ms, nothing to read: 0, waited at least 400 ms: yes
epoll_pwait2 400 ms, nothing to read: 0, waited at least 400 ms: yes
server writes = 3
wait: 1 [1 EPOLLIN]
read = 3
drained: 0
EPOLLET: ADD c = 0
EPOLLET: wait 400 ms, nothing to read: 0
server writes = 3
wait: 1 [1 EPOLLIN]
read = 3
EPOLLONESHOT: ADD c = 0
EPOLLONESHOT: wait 400 ms, nothing to read: 0
server writes = 3
wait: 1 [1 EPOLLIN]
read = 3
)")

PARITY_CASE(epoll_edge_triggered, ({"epoll-et"}), nullptr,
R"(ADD c EPOLLIN|EPOLLET = 0
wait 0: 0
server writes 10 = 10
edge: 1 [1 EPOLLIN]
no new edge: 0
server writes 10 more = 10
second edge: 1 [1 EPOLLIN]
no new edge: 0
read 5 = 5
partial read, no new edge: 0
read rest = 15
read until EAGAIN = -1 EAGAIN
drained: 0
MOD c EPOLLIN|EPOLLOUT|EPOLLET = 0
MOD re-evaluates: writable edge: 1 [1 EPOLLOUT]
no new edge: 0
server shutdown SHUT_WR = 0
EOF edge: 1 [1 EPOLLIN|EPOLLOUT]
no new edge: 0
)")

PARITY_CASE(epoll_edge_at_eof_with_bytes_unread, ({"epoll-et-fin"}), nullptr,
R"(ADD c EPOLLIN|EPOLLRDHUP|EPOLLET = 0
server writes 10 = 10
edge: 1 [1 EPOLLIN]
read 4 = 4
partial read, no new edge: 0
server writes 3 more = 3
edge for the new bytes: 1 [1 EPOLLIN]
read 4 = 4
no new edge: 0
server shutdown SHUT_WR = 0
EOF edge with 5 bytes unread: 1 [1 EPOLLIN|EPOLLRDHUP]
no new edge: 0
read rest = 5
read EOF = 0
)")

PARITY_CASE(epoll_oneshot, ({"epoll-oneshot"}), nullptr,
R"(ADD c EPOLLIN|EPOLLONESHOT = 0
server writes = 10
first event: 1 [1 EPOLLIN]
disarmed: 0
read = 10
server writes = 5
disarmed despite new data: 0
ADD again while disarmed = -1 EEXIST
MOD re-arm = 0
re-armed: 1 [1 EPOLLIN]
disarmed: 0
MOD re-arm level-triggered = 0
level: 1 [1 EPOLLIN]
level again: 1 [1 EPOLLIN]
)")

PARITY_CASE(epoll_rdhup, ({"epoll-rdhup"}), nullptr,
R"(ADD c EPOLLIN|EPOLLRDHUP = 0
nothing yet: 0
server writes = 4
server shutdown SHUT_WR = 0
data and half-close: 1 [1 EPOLLIN|EPOLLRDHUP]
read = 4
read EOF = 0
still RDHUP: 1 [1 EPOLLIN|EPOLLRDHUP]
write the other way = 4
server reads = 4
client shutdown SHUT_WR = 0
ADD s EPOLLIN|EPOLLOUT|EPOLLRDHUP = 0
both directions shut: 1 [2 EPOLLIN|EPOLLOUT|EPOLLHUP|EPOLLRDHUP]
client side: 1 [1 EPOLLIN|EPOLLHUP|EPOLLRDHUP]
)")

PARITY_CASE(epoll_refused_connect, ({"epoll-refused"}), nullptr,
R"(family inet
ADD c EPOLLOUT = 0
ADD d EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET = 0
unconnected sockets: 2 [1 EPOLLOUT|EPOLLHUP] [2 EPOLLOUT|EPOLLHUP]
connect c = -1 EINPROGRESS
connect d = -1 EINPROGRESS
refused: 2 [1 EPOLLOUT|EPOLLERR|EPOLLHUP] [2 EPOLLIN|EPOLLOUT|EPOLLERR|EPOLLHUP|EPOLLRDHUP]
SO_ERROR c = ECONNREFUSED
after SO_ERROR: 1 [1 EPOLLOUT|EPOLLHUP]
family inet6
ADD c EPOLLOUT = 0
ADD d EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET = 0
unconnected sockets: 2 [1 EPOLLOUT|EPOLLHUP] [2 EPOLLOUT|EPOLLHUP]
connect c = -1 EINPROGRESS
connect d = -1 EINPROGRESS
refused: 2 [1 EPOLLOUT|EPOLLERR|EPOLLHUP] [2 EPOLLIN|EPOLLOUT|EPOLLERR|EPOLLHUP|EPOLLRDHUP]
SO_ERROR c = ECONNREFUSED
after SO_ERROR: 1 [1 EPOLLOUT|EPOLLHUP]
)")

PARITY_CASE(epoll_nested, ({"epoll-nested"}), nullptr,
R"(ADD c to inner = 0
ADD inner to outer = 0
ADD outer to inner (loop) = -1 ELOOP
outer, nothing: 0
poll(inner) = 0
server writes = 10
poll on the inner epoll fd = 1
revents = POLLIN
outer: 1 [100 EPOLLIN]
inner: 1 [1 EPOLLIN]
select on the inner epoll fd = 1
read = 10
outer after read: 0
poll(inner) = 0
ADD outer to a third epoll = 0
server writes = 1
third (two levels down): 1 [300 EPOLLIN]
third, no new edge: 0
)")

/* ---- receive flags, ioctls, socket timeouts, half-close ---------------------------- */

PARITY_CASE(msg_peek_fionread, ({"peek"}), nullptr,
R"(server writes = 11
FIONREAD = 11
recv MSG_PEEK 5 = 5
data = hello
recv MSG_PEEK 100 = 11
data = hello world
recvmsg MSG_PEEK 3+2 = 5
data = hello
FIONREAD after peeks = 11
read 6 = 6
data = hello 
recv MSG_PEEK|MSG_DONTWAIT = 5
data = world
read rest = 5
FIONREAD empty = 0
recv MSG_PEEK|MSG_DONTWAIT empty = -1 EAGAIN
SIOCATMARK = 0
server shutdown SHUT_WR = 0
recv MSG_PEEK at EOF = 0
FIONREAD at EOF = 0
)")

PARITY_CASE(msg_waitall, ({"waitall"}), nullptr,
R"(recv MSG_WAITALL 100000 (written in 10 pieces) = 100000
verify = ok
recvmsg MSG_WAITALL 1000, peer sends 300 then EOF = 300
recv MSG_WAITALL at EOF = 0
client writes = 3
server recv MSG_WAITALL 10, woken by shutdown(SHUT_RD) in another thread = 3
)")

PARITY_CASE(msg_dontwait, ({"dontwait"}), nullptr,
R"(recv MSG_DONTWAIT empty = -1 EAGAIN
recvfrom MSG_DONTWAIT empty = -1 EAGAIN
send MSG_DONTWAIT = 3
recv MSG_DONTWAIT = 3
recv MSG_DONTWAIT empty again = -1 EAGAIN
socket still blocking: yes
)")

// RDMA mode: SO_RCVLOWAT holds for offloaded sockets too (poll and blocking reads).
PARITY_CASE(socket_timeouts, ({"timeouts"}), nullptr,
R"(setsockopt SO_RCVTIMEO 200ms = 0
getsockopt SO_RCVTIMEO = 0
SO_RCVTIMEO = 0.200000
read = -1 EAGAIN
timed out after 150ms..2s: yes
recv = -1 EAGAIN
timed out after 150ms..2s: yes
server writes = 3
read with data = 3
listener SO_RCVTIMEO 100ms = 0
accept = -1 EAGAIN
timed out after 50ms..2s: yes
setsockopt SO_SNDTIMEO 100ms = 0
blocking write of 64 MiB with SO_SNDTIMEO: short count >0
setsockopt SO_RCVLOWAT 5 = 0
SO_RCVLOWAT 5 = 0
server writes 3 = 3
mask with 3 of 5 = POLLOUT
server writes 2 = 2
mask with 5 of 5 = POLLIN|POLLOUT
read = 5
)")

// RDMA mode: shutdown() after both FINs gives ENOTCONN, and SHUT_RD shows POLLRDHUP, as
// the kernel's.
PARITY_CASE(half_close, ({"halfclose"}), nullptr,
R"(client shutdown SHUT_WR = 0
server read EOF = 0
server mask = POLLIN|POLLOUT|POLLRDHUP
server writes 1000 = 1000
client reads 1000 = 1000
same bytes: yes
client send MSG_NOSIGNAL after SHUT_WR = -1 EPIPE
SIGPIPE count = 0
client write after SHUT_WR = -1 EPIPE
SIGPIPE count = 1
client shutdown SHUT_WR again = 0
client mask = POLLOUT
server shutdown SHUT_WR = 0
client read EOF = 0
client mask = POLLIN|POLLOUT|POLLHUP|POLLRDHUP
shutdown SHUT_RD = -1 ENOTCONN
read after SHUT_RD = 0
shutdown how=7 = -1 EINVAL
shutdown SHUT_RD = 0
read after SHUT_RD = 0
mask after SHUT_RD = POLLIN|POLLOUT|POLLRDHUP
write still works = 3
peer reads = 3
)")

// Urgent data in-band (SO_OOBINLINE, set on the listener and inherited, or set before
// connect()): the byte in its place in the stream.  RDMA mode: the rings could not place
// it (it travels on the TCP socket): such connections stay on TCP (urgent_data).  Before,
// they went on RDMA and the urgent byte never reached the reader.
PARITY_CASE(urgent_data_in_band, ({"oobinline"}), nullptr,
R"(listener SO_OOBINLINE 1 = 0
listener SO_RCVTIMEO 150ms = 0
accepted: getsockopt SO_OOBINLINE = 0
SO_OOBINLINE = 1
accepted: getsockopt SO_RCVTIMEO = 0
SO_RCVTIMEO 140..160ms: yes
read, nothing sent = -1 EAGAIN
timed out after 100ms..2s: yes
client sends abc = 3
client sends XYZ! urgent = 4
client sends def = 3
server reads in-band: abcXYZ!def
recv MSG_OOB = -1 EINVAL
server sends 123 = 3
client reads: 123
client SO_OOBINLINE 1 before connect = 0
server sends ab = 2
server sends c! urgent = 2
server sends de = 2
client reads in-band: abc!de
client sends 45 = 2
server reads: 45
)")

// Options set on the listener, inherited by the accepted socket (issue 17, point 8):
// the kernel's values, and what they ask for, on RDMA in RDMA mode.
PARITY_CASE(listener_options_inherited, ({"listener-opts"}), nullptr,
R"(listener SO_RCVTIMEO 150ms = 0
listener SO_SNDTIMEO 150ms = 0
listener SO_RCVLOWAT 8 = 0
listener SO_LINGER 1 0 = 0
listener TCP_NODELAY 1 = 0
listener SO_KEEPALIVE 1 = 0
accepted: SO_RCVLOWAT = 8 (getsockopt 0)
accepted: TCP_NODELAY = 1 (getsockopt 0)
accepted: SO_KEEPALIVE = 1 (getsockopt 0)
accepted: SO_LINGER = 1 0
accepted: SO_RCVTIMEO 140..160ms: yes
accepted: SO_SNDTIMEO 140..160ms: yes
client sends 8 bytes = 8
server reads = 8
server sends 4 bytes = 4
client reads = 4
server reads, nothing sent = -1 EAGAIN
timed out after 100ms..2s: yes
client sends 4 bytes = 4
readable with 4 of SO_RCVLOWAT's 8 bytes (300 ms): no
client sends 4 more = 4
readable with 8: yes
server reads = 8
client sends 4 bytes = 4
readable with 4 of SO_RCVLOWAT's 8 bytes (300 ms): no
client sends 4 more = 4
readable with 8: yes
server reads = 8
a write into the full peer returned after 100ms..2s: yes
with part of its bytes or EAGAIN: yes
the client reads every byte written: yes
server closes (SO_LINGER 1 0) = 0
client reads = -1 ECONNRESET
)")

/* ---- descriptors, fork, threads, signals ------------------------------------------ */

// RDMA mode: the library's own descriptors (rdma_cm channel, devices, eventfds, ...)
// live on high numbers (src/base/fd.hh), so the program's sockets get the same numbers
// as without it.
// Issue 17, point 5: a thread forks 200 times (at least 50 within 15 s; each child closes
// its descriptors, resets its signal handlers and execs /bin/true) while another makes
// connections with an epoll set.  Every child exits at once with status 0.  Before, in
// RDMA mode, 1 to 3 children in 200 were still running after 3 s: each waited, at its
// close_range, for the SWITCH of every connection the parent was verifying (the probe
// timeout each), and a child's table could name a socket it did not have (accepted by
// another thread between the kernel's copy of the descriptors and of the memory): its
// close line had no local address.
PARITY_CASE(fork_exec_storm_with_connections, ({"fork-storm"}), nullptr,
R"(forks, 50 to 200: yes
children still running 3000 ms after the fork: 0
children that did not exit 0: 0
connections made while forking: some
exchanges that failed: 0
)")

// The same storm by the thousand: 2000 forks (at least 1000 within 34 s), where one
// child in 100 execs /bin/true and the others an absent path (each still through the
// library's exec hook, and _exit(0) when the exec fails).  In the VM: 1000 forks in
// 19 s with the library in each mode (8.5 ms in fork(), 1 ms without it), 2000 in 11 s
// without.  Not in the busy-poll, small-ring and sanitizer runs (tests/preload/local.mk,
// tests/sanitize/run-sanitized): what it tests is the fork, not the data path, and
// those runs' slower forks would make fewer than 1000.
PARITY_CASE(fork_exec_storm_thousands, ({"fork-storm", "thousands"}), nullptr,
R"(forks, 1000 to 2000: yes
children still running 3000 ms after the fork: 0
children that did not exit 0: 0
connections made while forking: some
exchanges that failed: 0
)")

PARITY_CASE(dup_family, ({"dup"}), check_dup_log,
R"(a=4 b=5
dup(a) = 3
fcntl(a, F_DUPFD, 100) = 100
dup3(a, 300, O_CLOEXEC) = 300
fcntl(a, F_DUPFD_CLOEXEC, 200) = 200
dup2(a, 400) = 400
F_GETFD dup = 0
F_GETFD F_DUPFD = 0
F_GETFD dup3 O_CLOEXEC = 1
F_GETFD F_DUPFD_CLOEXEC = 1
F_GETFD dup2 = 0
b reads 6 = 6
bytes = a12345
b writes 6 = 6
read one byte via each duplicate: ABCDEF
same peer via every duplicate: yes
setsockopt via a duplicate = 0
getsockopt via another = 1
closed fd 4: b mask = POLLOUT
closed fd 3: b mask = POLLOUT
closed fd 100: b mask = POLLOUT
closed fd 300: b mask = POLLOUT
closed fd 200: b mask = POLLOUT
write via the last duplicate = 1
b reads = 1
note last-close fd=400
b reads EOF after the last close = 0
dup2(b, b) = 5
dup3(b, b, 0) = -1 EINVAL
dup3 bad flags = -1 EINVAL
dup2 onto a negative fd = -1 EBADF
)")

// The program's new descriptors (accept, dup, socketpair, epoll_create1) take the
// kernel's numbers while the library, on other threads, makes descriptors of its own for
// the connections being set up (util::LowestFree).
PARITY_CASE(numbers_while_connecting, ({"numbers"}), nullptr,
R"(listener=3
round 1: connect failures 0, bytes read 10; accepted (dup, pair, epoll): 14(15,16,17,18) 15(16,17,18,19) 16(17,18,19,20) 17(18,19,20,21) 18(19,20,21,22) 19(20,21,22,23) 20(21,22,23,24) 21(22,23,24,25) 22(23,24,25,26) 23(24,25,26,27)
round 2: connect failures 0, bytes read 10; accepted (dup, pair, epoll): 14(15,16,17,18) 15(16,17,18,19) 16(17,18,19,20) 17(18,19,20,21) 18(19,20,21,22) 19(20,21,22,23) 20(21,22,23,24) 21(22,23,24,25) 22(23,24,25,26) 23(24,25,26,27)
round 3: connect failures 0, bytes read 10; accepted (dup, pair, epoll): 14(15,16,17,18) 15(16,17,18,19) 16(17,18,19,20) 17(18,19,20,21) 18(19,20,21,22) 19(20,21,22,23) 20(21,22,23,24) 21(22,23,24,25) 22(23,24,25,26) 23(24,25,26,27)
round 4: connect failures 0, bytes read 10; accepted (dup, pair, epoll): 14(15,16,17,18) 15(16,17,18,19) 16(17,18,19,20) 17(18,19,20,21) 18(19,20,21,22) 19(20,21,22,23) 20(21,22,23,24) 21(22,23,24,25) 22(23,24,25,26) 23(24,25,26,27)
round 5: connect failures 0, bytes read 10; accepted (dup, pair, epoll): 14(15,16,17,18) 15(16,17,18,19) 16(17,18,19,20) 17(18,19,20,21) 18(19,20,21,22) 19(20,21,22,23) 20(21,22,23,24) 21(22,23,24,25) 22(23,24,25,26) 23(24,25,26,27)
)")

// A connection's first number closed and taken by a new nonblocking socket with a 1 ms
// receive timeout: the duplicate still blocks until the peer writes (RDMA mode: the
// library must not ask the new socket for the connection's flags or timeouts).
PARITY_CASE(dup_then_number_reused, ({"dup-reuse"}), nullptr,
R"(fcntl(a, F_DUPFD, 100) = 100
close(a) = 0
a new socket takes a's number: yes
SO_RCVTIMEO 1 ms on the new socket = 0
blocking read via the duplicate (b writes 300 ms later) = 4
bytes = late
write via the duplicate = 4
b reads = 4
bytes = back
b reads EOF after the duplicate's close = 0
)")

// Issue 17, point 2: a thread puts descriptors on numbers it has just closed (dup2)
// while another makes connections: no placed number is closed or replaced behind its
// back (RDMA mode, before: the library's descriptors passed through the lowest free
// number on their way high, and a dup2() in between lost the program's descriptor).
PARITY_CASE(dup2_onto_closed_number_while_connecting, ({"dup2-race"}), nullptr,
R"(numbers placed with dup2 while connections were made: many
placed numbers closed or replaced behind the program's back: 0
bytes written into the program's pipe by someone else: 0
connections made meanwhile: some
exchanges that failed: 0
)")

// close_range() of a connection's number, then of both numbers of a duplicated one, and
// a file on the number: the file gets the program's bytes and the peer EOF (RDMA mode:
// the bytes went to the peer, as issue 17 reproduced).
PARITY_CASE(close_range_then_number_reused, ({"close-range"}), nullptr,
R"(a writes = 4
b reads = 4
close_range of a's number
close_range = 0
a file takes a's number: yes
write 1000 bytes to the file = 1000
the file holds 1000 bytes
b reads EOF = 0
a writes = 4
b reads = 4
close_range of a's two numbers
close_range = 0
a file takes a's number: yes
write 1000 bytes to the file = 1000
the file holds 1000 bytes
b reads EOF = 0
)")

// An io_uring program (its ring made with raw system calls, as liburing does): bytes
// through the ring and through the C library both ways, then the ring's close of one
// end, and a file that takes the number keeps its bytes while the peer reads EOF.  RDMA
// mode: both ends stay on TCP with reason io_uring; before, the connection switched
// behind the ring's calls.
PARITY_CASE(io_uring_program, ({"io-uring"}), nullptr,
R"(io_uring set up: yes
a writes = 4
b reads = 4
a writes = 4
the ring receives on b = 4
the ring sends 1000 bytes on b = 1000
a reads them = 1000
the ring sends 4 bytes on a = 4
b reads = 4
the ring closes a = 0
a file takes a's number: yes
write 1000 bytes to the file = 1000
the file holds 1000 bytes
b reads EOF = 0
a writes = 4
b reads = 4
a writes = 4
the ring receives on b = 4
the ring sends 1000 bytes on b = 1000
a reads them = 1000
the ring sends 4 bytes on a = 4
b reads = 4
the ring closes b = 0
a file takes a's number: yes
write 1000 bytes to the file = 1000
the file holds 1000 bytes
b reads EOF = 0
)")

// The same through syscall(2): SYS_close, then SYS_dup3, SYS_dup and SYS_close_range; the
// file gets the program's bytes and the peer EOF (RDMA mode: before the shim hooked
// syscall(), the library never saw these closes).
PARITY_CASE(raw_syscall_close_then_number_reused, ({"syscall-close"}), nullptr,
R"(a writes = 4
b reads = 4
syscall(SYS_close, a) = 0
a file takes a's number: yes
write 1000 bytes to the file = 1000
the file holds 1000 bytes
b reads EOF = 0
a writes = 4
b reads = 4
syscall(SYS_dup3, a, 400, 0) gives 400 = 1
syscall(SYS_dup, a) is a new number = 1
a writes through 400 = 4
b reads = 4
syscall(SYS_close_range) of the three = 0
a file takes a's number: yes
write 1000 bytes to the file = 1000
the file holds 1000 bytes
b reads EOF = 0
)")

// closefrom() of a connection's number and up, then raw SYS_close_range to the top: the
// connection closes (a file takes its number, the peer reads EOF); a connection below,
// and a new one, carry their bytes.  (RDMA mode: the library's own descriptors above the
// program's were closed with them.)
PARITY_CASE(closefrom_then_number_reused, ({"closefrom"}), nullptr,
R"(the numbers from a's up hold no other descriptor of the program: yes
a writes = 4
b reads = 4
closefrom(a's number)
a file takes a's number: yes
write 1000 bytes to the file = 1000
the file holds 1000 bytes
b reads EOF = 0
the connection below writes 1000 bytes = 1
its peer reads them = 1000
the connection below writes 1000 bytes = 1
its peer reads them = 1000
a new connection writes 1000 bytes = 1
its peer reads them = 1000
and back = 1
reads them = 1000
the numbers from a's up hold no other descriptor of the program: yes
a writes = 4
b reads = 4
syscall(SYS_close_range, a's number, ~0U, 0) = 0
a file takes a's number: yes
write 1000 bytes to the file = 1000
the file holds 1000 bytes
b reads EOF = 0
the connection below writes 1000 bytes = 1
its peer reads them = 1000
the connection below writes 1000 bytes = 1
its peer reads them = 1000
a new connection writes 1000 bytes = 1
its peer reads them = 1000
and back = 1
reads them = 1000
)")

// splice(2) between a connection and a pipe, both ways, every byte in order; then the
// kernel's answers to a nonblocking socket with nothing to read, an empty pipe with
// SPLICE_F_NONBLOCK, offsets (EINVAL for the socket, ESPIPE for the pipe), no pipe at
// all, and EOF.  (RDMA mode: the kernel's splice read the TCP socket the connection no
// longer used.)
PARITY_CASE(splice_with_a_pipe, ({"splice"}), nullptr,
R"(b writes 5000 bytes = 5000
spliced from a into the pipe: 5000 bytes, in order
write 3000 bytes into the pipe = 3000
spliced from the pipe to a: 3000 bytes
b reads 3000 bytes = 3000
b got them in order
a made nonblocking = 0
splice from a with nothing to read = -1 EAGAIN
a made blocking = 0
splice from an empty pipe to a, SPLICE_F_NONBLOCK = -1 EAGAIN
splice from a with an offset = -1 EINVAL
splice from a with an offset for the pipe = -1 ESPIPE
splice to a with an offset = -1 EINVAL
splice from a to b (no pipe) = -1 EINVAL
b shuts down its sending side = 0
splice from a at EOF = 0
)")

// exit() while a closed connection's reader is still blocked: the connection closes as
// close() would have closed it.  RDMA mode: the parent reads every byte, then EOF (it got
// ECONNRESET before: the deferred close never ran, the child's kernel closed the TCP
// socket without an RDMA FIN), and the child logs its close line.
// (the parent's transcript of exit-deferred and exit-open)
const char *const kParentReadsChild = R"(parent writes its go = 1
the read after the data = 0 (EOF)
child exit = 0
received 100000 bytes, verify=ok
)";
PARITY_CASE(exit_with_deferred_close, ({"exit-deferred"}), nullptr, kParentReadsChild)

// exit() with a connection open: the kernel closes it; the peer reads every byte, then
// EOF, and the exiting process logs the connection's close line (it logged none before).
void check_exit_open_log(const Runs &r)
{
    BOOST_CHECK_EQUAL(r.lc.closes.size(), 2u);
    auto c = with_role(r, "client"), s = with_role(r, "server");
    BOOST_REQUIRE_MESSAGE(s.size() == 1u, "want one close line for the child's end\n" << r.log);
    BOOST_REQUIRE_EQUAL(c.size(), 1u);
    BOOST_CHECK_NE(s[0].at("pid"), c[0].at("pid"));
    BOOST_CHECK_EQUAL(s[0].at("bytes_sent"), "100000");
    check_transport(r, s[0]);
    BOOST_CHECK_EQUAL(c[0].at("bytes_received"), "100000");
    // Both processes log their totals at exit, the child's with the connection it left
    // open (check_close_log compares them with the close lines).
    BOOST_CHECK_MESSAGE(r.lc.exits == 2u, r.lc.exits << " exit lines, want 2\n" << r.log);
}

PARITY_CASE(exit_with_connection_open, ({"exit-open"}), check_exit_open_log, kParentReadsChild)

// A fork child of a process that already listens connects to it, writes, closes while
// another of its threads reads, and exits: every byte, then EOF.  RDMA mode: the child's
// connection goes on RDMA, through a copy of rdma-core of the child's own (it stayed on
// TCP with reason forked_child before: the parent's device handles are refused the child).
PARITY_CASE(fork_child_connects, ({"fork-connect"}), nullptr,
R"(the read after the data = 0 (EOF)
child exit = 0
received 100000 bytes, verify=ok
)")

// O_NONBLOCK set behind the library's back (the raw system call, as another process
// sharing the socket would): reads follow the flag the kernel holds, also in busy-poll
// mode (which spins before it reads the flag); and set and cleared through fcntl/FIONBIO.
PARITY_CASE(nonblock_set_elsewhere, ({"nonblock-elsewhere"}), nullptr,
R"(blocking read (b writes 200 ms later) = 4
O_NONBLOCK by the raw system call = 0
read with nothing there = -1 EAGAIN
recv with nothing there = -1 EAGAIN
cleared by the raw system call = 0
blocking read again (b writes 200 ms later) = 4
FIONBIO on = 0
read with nothing there = -1 EAGAIN
FIONBIO off = 0
blocking read after FIONBIO off = 4
F_SETFL O_NONBLOCK = 0
read with nothing there = -1 EAGAIN
F_SETFL blocking = 0
blocking read after F_SETFL = 4
bytes = four
b reads EOF = 0
)")

// RDMA mode: dup2() over a live offloaded socket closes its connection as close() does
// (the old peer reads EOF).
PARITY_CASE(dup2_over_live_socket, ({"dup2-live"}), check_dup2_log,
R"(a=4 b=5 c=6 d=7
note victim fd=6
dup2(a, c) over a live socket = 6
c's old peer reads EOF = 0
write via c = 5
b reads = 5
bytes = via c
c now has a's peer: yes
write via c after close(a) = 3
b reads = 3
dup3(c, d, O_CLOEXEC) over the other side = 7
F_GETFD = 1
write via d = 2
b reads = 2
b mask (d still open) = POLLOUT
b reads EOF = 0
)")

// A fork child closes its copies of sockets registered in an epoll set it shares with
// its parent: the parent's waits still see them (the library dropped the parent's
// registrations of offloaded sockets from the set before).
PARITY_CASE(fork_child_closes_epoll_sockets, ({"fork-epoll-close"}), nullptr,
R"(ADD c EPOLLIN = 0
ADD s EPOLLIN = 0
child closed its copies: yes
server writes = 4
parent's wait (child alive): 1 [1 EPOLLIN]
client reads = 4
client writes = 4
parent's wait for the server end: 1 [2 EPOLLIN]
server reads = 4
nothing left: 0
let the child exit = 1
child exit = 0
server writes = 5
parent's wait (child gone): 1 [1 EPOLLIN]
client reads = 5
)")

PARITY_CASE(fork_child_uses_socket, ({"fork"}), nullptr,
R"(child writes, parent reads
child exit = 0
parent received 1048576 bytes, verify=ok
parent writes, child reads
child received 1048576 bytes, verify=ok
child replies = 4
parent wrote all: yes; child said done; child exit = 0
parent and child both write
server got 13 bytes: child.parent. (child exit 0)
)")

// close() while another thread is blocked in read() on the socket: as the kernel's file
// reference does, the blocked call keeps the connection open (the fd number is reused
// at once by a new socket); the reader still gets the old peer's next bytes, and the
// connection closes when it returns.  The same when dup2() puts another connection on
// the number.  In RDMA mode the library hands the connection to the calls in progress
// (hooks.cc, defer_close) and the last one closes it.
PARITY_CASE(close_while_reading, ({"close-read"}), nullptr,
R"(shutdown(SHUT_RDWR) while another thread reads = 0
blocked reader returned 0
peer reads EOF = 0
close while another thread reads = 0
reader still blocked (poll 100ms for its end) = 0
new socket reuses the fd number: yes
connect the new socket = 0
new socket writes = 5
its peer reads = 5
its peer writes = 5
new socket reads = 5
bytes = reply
old peer writes = 4
blocked reader returned 4: wake
old peer reads EOF (last reference gone) = 0
new socket still fine: mask = POLLOUT
connect a new socket = 0
dup2 it over the socket another thread reads = 0
reader still blocked (poll 100ms for its end) = 0
write via the number = 5
the new connection's peer reads = 5
bytes = fresh
old peer writes = 4
blocked reader returned 4: wake
old peer reads EOF (last reference gone) = 0
the new connection's peer reads EOF = 0
shutdown a listener while another thread accepts = 0
blocked accept returned -1 EINVAL
)")

// RDMA mode: a blocking read() on an offloaded socket interrupted by a handler installed
// with SA_RESTART is restarted, one without it returns EINTR (src/process/signals.hh: the
// library knows which signal interrupted it).
PARITY_CASE(signals_eintr_restart, ({"signals"}), nullptr,
R"(without SA_RESTART
blocking read = -1 EINTR
handler ran: 1
blocking accept = -1 EINTR
blocking recv = -1 EINTR
blocking write of 64 MiB interrupted: short count >0
peer drained it: yes
with SA_RESTART
blocking read = 5
handler ran: 1
blocking accept = 1
handler ran: 2
poll (never restarted) = -1 EINTR
epoll_wait (never restarted) = -1 EINTR
SO_RCVTIMEO 5s = 0
blocking read with SO_RCVTIMEO (not restarted) = -1 EINTR
handler ran: 5
)")

/* ---- other descriptor kinds through the same calls -------------------------------- */

// Its end: a connection passed to the process itself with SCM_RIGHTS (a new number for
// the same socket, recognised by its inode: the received number reaches the connection).
PARITY_CASE(unix_sockets, ({"unix"}), nullptr,
R"(socketpair AF_UNIX SOCK_STREAM = 0
fresh mask = POLLOUT
write = 5
peer mask = POLLIN|POLLOUT
FIONREAD = 5
read = 5
send = 5
recv MSG_PEEK = 5
recv = 5
writev many iovecs = 1000
readv many iovecs = 1000
same bytes: yes
sendmsg = 5000
recvmsg MSG_WAITALL = 5000
same bytes: yes; msg_flags=0
ADD sv0 EPOLLIN|EPOLLRDHUP|EPOLLET = 0
nothing: 0
peer writes = 1
edge: 1 [1 EPOLLIN]
no new edge: 0
peer shutdown SHUT_WR = 0
half-close edge: 1 [1 EPOLLIN|EPOLLRDHUP]
read = 1
read EOF = 0
write the other way = 1
peer reads = 1
mask after peer close = POLLIN|POLLOUT|POLLHUP|POLLRDHUP
send MSG_NOSIGNAL to a closed peer = -1 EPIPE
write to a closed peer = -1 EPIPE
SIGPIPE count = 1
socketpair SOCK_SEQPACKET
send abc = 3
send de = 2
write xyz = 3
recv 100 = 3
read 100 = 2
recvmsg into 1 byte = 1
msg_flags has MSG_TRUNC: yes
recv MSG_DONTWAIT empty = -1 EAGAIN
socketpair SOCK_DGRAM
send abc = 3
send de = 2
write xyz = 3
recv 100 = 3
read 100 = 2
recvmsg into 1 byte = 1
msg_flags has MSG_TRUNC: yes
recv MSG_DONTWAIT empty = -1 EAGAIN
bind abstract = 0
listen = 0
connect = 0
accept >= 0 = 1
sendmsg SCM_RIGHTS(tcp socket) = 1
recvmsg SCM_RIGHTS = 1
received a descriptor: yes
same peer: yes
write via the received descriptor = 6
tcp peer reads = 6
bytes = passed
tcp peer reads EOF = 0
)")

// SCM_RIGHTS to another process: an accepted connection not used yet stays on TCP
// (reason passed), and the process that receives it serves it over the kernel socket.
PARITY_CASE(pass_to_a_child, ({"pass-child"}), nullptr,
R"(sendmsg SCM_RIGHTS(an accepted connection) = 1
connect = 0
client writes = 5
client reads = 5
bytes = world
the child served it: yes
the parent closes its copy = 0
client reads EOF = 0
)")

// stdio streams on a connection: the C library's own reads and writes (found: on RDMA
// the lines went into the TCP socket the peer no longer reads).
PARITY_CASE(stdio_streams, ({"stdio"}), nullptr,
R"(fdopen w: yes
fileno is the socket: yes
fprintf = 7
fputs: ok
fflush = 0
fdopen r: yes
fgets: line 1
fgets: line two
dprintf = 10
client reads = 10
bytes = answer 42
fwrite 6000 = 6000
fclose the client's stream = 0
server reads to EOF: 6000 bytes, same: yes, eof: yes
fclose the server's stream = 0
)")

// A stream left for the C library to flush at exit (before, the flush came after the
// library's exit step had closed the connection: the line was lost and the child died
// of SIGPIPE).
PARITY_CASE(stdio_flushed_at_exit, ({"stdio-exit"}), nullptr,
R"(the parent reads = 19
bytes = bye from the child
then EOF = 0
the child's exit status: 0
)")

PARITY_CASE(pipes, ({"pipe"}), nullptr,
R"(pipe2 = 0
empty: r=0 w=POLLOUT
write = 5
FIONREAD = 5
r = POLLIN
read = 5
writev many iovecs = 5000
readv many iovecs = 5000
same bytes: yes
send on a pipe = -1 ENOTSOCK
recv on a pipe = -1 ENOTSOCK
sendmsg on a pipe = -1 ENOTSOCK
recvmsg on a pipe = -1 ENOTSOCK
getsockopt on a pipe = -1 ENOTSOCK
shutdown on a pipe = -1 ENOTSOCK
lseek on a pipe = -1 ESPIPE
sendfile file -> pipe 3000 = 3000
offset = 3000
read = 3000
same bytes: yes
ADD r EPOLLIN|EPOLLET = 0
ADD w EPOLLOUT = 0
writable: 1 [2 EPOLLOUT]
write = 3
readable edge: 2 [1 EPOLLIN] [2 EPOLLOUT]
no new edge: 1 [2 EPOLLOUT]
read = 3
writer closed: r = POLLHUP
hangup: 1 [1 EPOLLHUP]
read EOF = 0
reader closed: w = POLLOUT|POLLERR
write = -1 EPIPE
SIGPIPE count = 1
)")

PARITY_CASE(udp_sockets, ({"udp"}), nullptr,
R"(family inet
fresh mask = POLLOUT
sendto = 5
mask = POLLIN|POLLOUT
FIONREAD = 5
recvfrom = 5
source is the sender: yes
sendto 10 = 10
recv 4 of 10 (rest dropped) = 4
recv MSG_DONTWAIT empty = -1 EAGAIN
sendto 10 = 10
recvmsg into 4 = 4
msg_flags has MSG_TRUNC: yes
sendto 10 = 10
recv MSG_TRUNC into 4 = 10
sendto peek = 4
recv MSG_PEEK = 4
recv = 4
connect a to b = 0
connect b to a = 0
send = 2
write = 2
writev 3 iovecs = 3
sendmsg 3 iovecs = 3
read = 2
recv = 2
readv = 3
recvmsg = 3
sendmmsg 3 = 3
recvmmsg 3 (blocking) = 3
lengths = 1,2,3
ADD b EPOLLIN = 0
nothing: 0
send = 1
datagram: 1 [1 EPOLLIN]
recv = 1
connect to a closed port = 0
send = 1
poll for the ICMP error = 1
revents = POLLERR
recv = -1 ECONNREFUSED
recv again = -1 EAGAIN
family inet6
fresh mask = POLLOUT
sendto = 5
mask = POLLIN|POLLOUT
FIONREAD = 5
recvfrom = 5
source is the sender: yes
sendto 10 = 10
recv 4 of 10 (rest dropped) = 4
recv MSG_DONTWAIT empty = -1 EAGAIN
sendto 10 = 10
recvmsg into 4 = 4
msg_flags has MSG_TRUNC: yes
sendto 10 = 10
recv MSG_TRUNC into 4 = 10
sendto peek = 4
recv MSG_PEEK = 4
recv = 4
connect a to b = 0
connect b to a = 0
send = 2
write = 2
writev 3 iovecs = 3
sendmsg 3 iovecs = 3
read = 2
recv = 2
readv = 3
recvmsg = 3
sendmmsg 3 = 3
recvmmsg 3 (blocking) = 3
lengths = 1,2,3
ADD b EPOLLIN = 0
nothing: 0
send = 1
datagram: 1 [1 EPOLLIN]
recv = 1
connect to a closed port = 0
send = 1
poll for the ICMP error = 1
revents = POLLERR
recv = -1 ECONNREFUSED
recv again = -1 EAGAIN
)")

/* ---- the close-time log line -------------------------------------------------------- */

BOOST_AUTO_TEST_CASE(close_log_inet_exact) { check_closelog("inet", "exact"); }
BOOST_AUTO_TEST_CASE(close_log_inet6_exact) { check_closelog("inet6", "exact"); }

// Both sides read to EOF before closing: a socket that sent its FIN first and then
// received the peer's FIN is in TCP_CLOSE when it is closed; the peer's FIN (which the
// kernel counts as a received byte) must still not be counted.
BOOST_AUTO_TEST_CASE(close_log_inet_eof)
{
    check_closelog("inet", "eof");
}
BOOST_AUTO_TEST_CASE(close_log_inet6_eof)
{
    check_closelog("inet6", "eof");
}

// The client closes with unsent data and its FIN queued behind it: SIOCOUTQNSD counts
// the queued FIN's sequence number, which must not show up in bytes_sent.
BOOST_AUTO_TEST_CASE(close_log_queued_inet)
{
    check_closelog_queued("inet");
}
BOOST_AUTO_TEST_CASE(close_log_queued_inet6)
{
    check_closelog_queued("inet6");
}

/* ---- every scenario of sockprobe is exercised here (suid-hold: program_tests) ------ */

BOOST_AUTO_TEST_CASE(every_scenario_has_a_case)
{
    testcommon::Result r = testcommon::run({kProbe, "list"}, testcommon::base_env(), kTimeoutMs);
    BOOST_REQUIRE_EQUAL(r.exit_code(), 0);
    std::set<std::string> all;
    for (auto &s : testcommon::split_lines(r.out))
        all.insert(s);
    BOOST_CHECK(!all.empty());
    for (auto &s : all)
        BOOST_CHECK_MESSAGE(covered().count(s) || s == "suid-hold", "scenario " << s << " has no test case");
    for (auto &s : covered())
        BOOST_CHECK_MESSAGE(all.count(s), "test case for an unknown scenario " << s);
}
