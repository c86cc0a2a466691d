// Offload tests (issue "Offload", point 4): connections really move onto RDMA verbs, the
// bytes arrive intact, every fallback says why, socket semantics hold on offloaded
// connections, and real programs (iperf3, sockperf) run offloaded.
//
// Runs where an RDMA device is (the soft-RoCE VM: `make check-offload`); without one it
// prints SKIP and exits 77 before Boost.Test starts, so it never passes on a host
// without RDMA.  Each case forks/execs pairs of tests/offload/peer (or real programs)
// with or without LD_PRELOAD=librdmasock.so, on $RDMASOCK_VM_ADDR (10.77.0.1) or in the
// namespace $RDMASOCK_VM_NORDMA_NS (tests/vm/run --nordma-ns), and asserts on what the
// peers print (their RDMASOCK_INFO and byte counts) and on the close-time log lines
// (RDMASOCK_LOG_FILE at RDMASOCK_LOG_LEVEL=info).
//
// Environment: TEST_OFFLOAD_ADDR (default $RDMASOCK_VM_ADDR), TEST_OFFLOAD_LOG_LEVEL
// (default info; debug shows negotiation details in failure reports), TEST_OFFLOAD_KEEP=1
// (keep every work directory: peer logs, stdout, stderr), TEST_OFFLOAD_TMP (where the
// work directories go, default /tmp; in the VM /tmp vanishes, the tree does not).
#include "tests/offload/driver.hh"

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>

#include <algorithm>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <spawn.h>
#include <sys/wait.h>
#include <csignal>
#include <dirent.h>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/common/closelog.hh"
#include "tests/common/device.hh"
#include "tests/common/ports.hh"
#include "tests/common/text.hh"
#include "tests/common/time.hh"

using namespace testcommon;
using namespace offload;
namespace utf = boost::unit_test;

namespace {

// ---- configuration ------------------------------------------------------------------------

// lib (TEST_OFFLOAD_LIB), addr (10.77.0.1 in the VM), keep: offload::Config.
struct OffloadConfig : Config {
    OffloadConfig() { lib = RDMASOCK_BUILD_LIB; }
    std::string peer = OFFLOAD_PEER;
    std::string nordma_ns;    // "nordma" with --nordma-ns
    std::string nordma_addr;  // 10.77.1.2
    std::string log_level = "info";
    std::string peer_addr;  // --two-vms: the other VM's RDMA address
    std::string peer_exec;  // --two-vms: runs a command on the other VM
};
OffloadConfig cfg;

Summary g_summary;

// Timing notes collected over the run, printed at the end (the report's numbers).
std::vector<std::string> g_notes;
void note(const std::string &s)
{
    g_notes.push_back(s);
    printf("note: %s\n", s.c_str());
    fflush(stdout);
}

// ---- running peers ----------------------------------------------------------------------

struct Side {
    bool lib = true;
    bool nordma = false;  // run inside the namespace (`ip netns exec`)
    bool remote = false;  // run on the other VM (tests/vm/run --two-vms)
    std::vector<std::string> prefix;  // a command that runs the peer (prlimit, setpriv ...)
    std::string addr;     // server: bind address; client: connect address (default cfg.addr)
    std::vector<std::string> args;
    std::vector<std::pair<std::string, std::string>> env;
};

// One peer's run: exit status, output, parsed lines, log.
struct PeerRun {
    std::string name;
    std::string role;  // server or client
    bool lib = true;
    int exit_code = -1;
    bool timed_out = false;
    std::string out, err, log;
    std::vector<Fields> conns;   // "conn=" lines of stdout
    std::vector<Fields> closes;  // event=close lines of the log
    std::vector<std::string> log_problems;  // error lines, malformed close lines

    const Fields *conn(size_t i) const
    {
        for (const auto &f : conns)
            if (f.count("conn") && f.at("conn") == std::to_string(i))
                return &f;
        return nullptr;
    }
    std::string describe() const
    {
        std::ostringstream o;
        o << "[" << name << (lib ? ", with librdmasock" : ", without librdmasock") << "] exit=" << exit_code
          << (timed_out ? " (TIMED OUT)" : "") << "\n  stdout:\n" << indent(out) << "  stderr:\n"
          << indent(err.substr(0, 6000));
        if (lib)
            o << "  log:\n" << indent(log.size() > 8000 ? log.substr(0, 4000) + "\n...\n" + log.substr(log.size() - 4000) : log);
        return o.str();
    }
    static std::string indent(const std::string &s)
    {
        std::string r;
        for (const auto &l : split_lines(s))
            r += "    " + l + "\n";
        return r;
    }
};

// The close lines of the log (tests/common/closelog.hh: every line well formed, close
// lines as documented); warnings are allowed, errors are problems.
void parse_log(PeerRun &p)
{
    CloseLog lc = check_close_log(p.log, true);
    p.closes = lc.closes;
    p.log_problems = lc.problems;
}

std::string peer_log_file(const TempDir &dir, const std::string &name) { return dir / (name + ".log"); }

Env side_env(const Side &s, const TempDir &dir, const std::string &name)
{
    Env env = base_env();
    if (s.lib) {
        set_var(env, "LD_PRELOAD", preload_value(cfg.lib));
        set_var(env, "RDMASOCK_LOG_LEVEL", cfg.log_level);
        set_var(env, "RDMASOCK_LOG_FILE", peer_log_file(dir, name));
        // Connection setup under TCG takes tens of ms: a generous probe timeout.
        set_var(env, "RDMASOCK_PROBE_TIMEOUT_MS", "3000");
        // Cases that assert every byte went over RDMA have connect() wait for the
        // switch; the cases of the default (asynchronous) switch set it to 0.
        set_var(env, "RDMASOCK_CONNECT_WAIT", "1");
    }
    for (const auto &kv : s.env)
        set_var(env, kv.first, kv.second);
    return env;
}

std::vector<std::string> side_argv(const Side &s, const std::string &mode, const std::string &addr,
                                   const std::string &port)
{
    std::vector<std::string> a;
    if (s.nordma) {
        a = {"ip", "netns", "exec", cfg.nordma_ns};
    }
    a.insert(a.end(), s.prefix.begin(), s.prefix.end());
    a.push_back(cfg.peer);
    a.push_back(mode);
    a.push_back("--addr");
    a.push_back(addr);
    a.push_back("--port");
    a.push_back(port);
    a.insert(a.end(), s.args.begin(), s.args.end());
    return a;
}

PeerRun collect(const std::string &name, const Side &s, Proc &p, const TempDir &dir, bool timed_out)
{
    PeerRun r;
    r.name = name;
    r.role = name.rfind("server", 0) == 0 ? "server" : "client";
    r.lib = s.lib;
    r.exit_code = p.exit_code();
    r.timed_out = timed_out;
    r.out = p.out();
    r.err = read_file(dir / (name + ".err")) + read_file(dir / (name + ".err.remote"));
    if (cfg.keep)
        write_file(dir / (name + ".out"), r.out);
    for (const std::string &l : split_lines(r.out))
        if (l.rfind("conn=", 0) == 0)
            r.conns.push_back(parse_kv(l));
    if (s.lib) {
        r.log = read_file(peer_log_file(dir, name));
        parse_log(r);
    }
    return r;
}

std::string shell_quote(const std::string &v)
{
    std::string q = "'";
    for (char ch : v)
        q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return q + "'";
}

// A command for the other VM (tests/vm/run --two-vms), started through
// $RDMASOCK_VM_PEER_EXEC: the library's variables of `env`, stderr to `err` (the
// temporary directory must be in the shared tree: TEST_OFFLOAD_TMP), stdout streamed
// back with an empty line after each line (peer-exec holds a line until the next one
// arrives: the "port=" line must not wait for the end of the run).
std::vector<std::string> remote_argv(const std::vector<std::string> &argv, const Env &env, const std::string &err)
{
    std::string cmd = "set -o pipefail; env";
    for (const auto &kv : env)
        if (kv.rfind("LD_PRELOAD=", 0) == 0 || kv.rfind("RDMASOCK_", 0) == 0)
            cmd += " " + shell_quote(kv);
    for (const auto &a : argv)
        cmd += " " + shell_quote(a);
    cmd += " 2>" + shell_quote(err) + " | while IFS= read -r l; do printf '%s\\n\\n' \"$l\"; done";
    return {cfg.peer_exec, "bash", "-c", cmd};
}

// The environment of the local peer-exec client for remote_argv (base_env() drops the
// RDMASOCK_* variables it needs).  Without the library's: they go to the command on the
// other VM; the client under the library logged its own TCP connection into that
// command's log, and a pid of one VM could equal a pid of the other (twovm/cost once
// saw a bash's exit line checked against the server's close lines).
Env remote_env(Env env)
{
    env.erase(std::remove_if(env.begin(), env.end(),
                             [](const std::string &kv) {
                                 return kv.rfind("LD_PRELOAD=", 0) == 0 || kv.rfind("RDMASOCK_", 0) == 0;
                             }),
              env.end());
    for (const char *v : {"RDMASOCK_VM_PEER", "RDMASOCK_VM_PEER_EXEC_PORT"})
        if (const char *x = getenv(v))
            set_var(env, v, x);
    return env;
}

struct Pair {
    PeerRun server, client;
    double wall_ms = 0;
    double t0_ms = 0;           // when run_pair started (now_ms clock)
    double kill_ms = 0;         // when the hook killed a peer (now_ms clock)
    double server_exit_ms = 0;  // when the server exited
    double client_exit_ms = 0;
    std::string server_log, client_log;  // the library's log files (set before `during`)
    std::string describe() const { return server.describe() + client.describe(); }
};

// Start the server, read its port, start the client, wait for both (bounded).  `during`
// (optional) runs once both are started.
Pair run_pair(const std::string &name, const Side &server, const Side &client, int timeout_ms = 90000,
              const std::function<void(Proc &, Proc &, Pair &)> &during = {})
{
    WorkDir dir;
    dir.keep = cfg.keep;
    Pair pr;
    double t0 = now_ms();
    pr.t0_ms = t0;
    std::string saddr = server.addr.empty() ? (server.remote ? cfg.peer_addr : cfg.addr) : server.addr;
    std::string caddr = client.addr.empty() ? saddr : client.addr;
    Proc sp(server.remote ? remote_argv(side_argv(server, "server", saddr, "0"), side_env(server, dir, "server"),
                                        dir / "server.err.remote")
                          : side_argv(server, "server", saddr, "0"),
            server.remote ? remote_env(side_env(server, dir, "server")) : side_env(server, dir, "server"),
            dir / "server.err");
    std::string first = sp.read_line(30000);
    bool s_to = false, c_to = false;
    if (first.rfind("port=", 0) != 0) {
        sp.wait(2000);
        sp.kill_all();
        pr.server = collect("server", server, sp, dir, false);
        pr.server.err += "\n(offload_tests: the server printed no port line: '" + first + "')";
        BOOST_ERROR(name << ": the server did not start\n" << pr.server.describe());
        return pr;
    }
    std::string port = first.substr(5);
    Proc cp(side_argv(client, "client", caddr, port), side_env(client, dir, "client"), dir / "client.err");
    pr.server_log = peer_log_file(dir, "server");
    pr.client_log = peer_log_file(dir, "client");
    if (during)
        during(sp, cp, pr);
    double deadline = t0 + timeout_ms;
    if (!cp.wait(static_cast<int>(std::max(1.0, deadline - now_ms())))) {
        c_to = true;
        cp.kill_all();
    }
    if (!sp.wait(static_cast<int>(std::max(5000.0, deadline - now_ms())))) {
        s_to = true;
        sp.kill_all();
    }
    pr.wall_ms = now_ms() - t0;
    pr.server_exit_ms = sp.exit_time_ms();
    pr.client_exit_ms = cp.exit_time_ms();
    pr.server = collect("server", server, sp, dir, s_to);
    pr.client = collect("client", client, cp, dir, c_to);
    BOOST_TEST_MESSAGE(name << ": " << static_cast<long>(pr.wall_ms) << " ms");
    return pr;
}

// ---- assertions -------------------------------------------------------------------------

uint64_t num(const Fields &f, const std::string &k)
{
    auto it = f.find(k);
    if (it == f.end())
        return ~0ull;
    return std::strtoull(it->second.c_str(), nullptr, 10);
}

std::string field(const Fields &f, const std::string &k)
{
    auto it = f.find(k);
    return it == f.end() ? "<missing>" : it->second;
}

// The peer exited 0 (all data verified, no call failed).
void expect_clean_exit(const PeerRun &p, const std::string &what)
{
    BOOST_CHECK_MESSAGE(p.exit_code == 0 && !p.timed_out,
                        what << ": " << p.name << " exited " << p.exit_code
                             << (p.timed_out ? " (timed out)" : "")
                             << " (1: data mismatch, 2: a call failed, 3: a scenario check failed)\n"
                             << p.describe());
    BOOST_CHECK_MESSAGE(p.log_problems.empty(), what << ": " << p.name << " log problems:\n"
                                                     << PeerRun::indent([&] {
                                                            std::string s;
                                                            for (auto &x : p.log_problems)
                                                                s += x + "\n";
                                                            return s;
                                                        }()));
}

// Connection i of peer p: on `transport` ("rdma"/"tcp"; reasons: allowed reason codes
// for tcp, empty = any), the program moved exactly sent/received bytes (-1: don't
// check), and the library's counters (RDMASOCK_INFO and the close-time log line) say the
// same.  Without the library only the program's counts are checked.
void expect_conn(const PeerRun &p, size_t i, const std::string &transport, const std::set<std::string> &reasons,
                 int64_t sent, int64_t received, const std::string &what)
{
    const Fields *f = p.conn(i);
    std::string ctx = what + ": " + p.name + " connection " + std::to_string(i);
    if (f == nullptr) {
        BOOST_ERROR(ctx << ": no result line\n" << p.describe());
        return;
    }
    if (sent >= 0)
        BOOST_CHECK_MESSAGE(num(*f, "sent") == static_cast<uint64_t>(sent),
                            ctx << ": the program sent " << field(*f, "sent") << " bytes, want " << sent);
    if (received >= 0)
        BOOST_CHECK_MESSAGE(num(*f, "received") == static_cast<uint64_t>(received),
                            ctx << ": the program received " << field(*f, "received") << " bytes, want " << received);
    if (!p.lib) {
        BOOST_CHECK_MESSAGE(field(*f, "transport") == "none",
                            ctx << ": RDMASOCK_INFO answered without the library: " << field(*f, "transport"));
        return;
    }
    const std::string t = field(*f, "transport"), r = field(*f, "reason");
    bool reason_ok = transport == "rdma" ? r == "none" : (reasons.empty() || reasons.count(r) > 0);
    // A server cannot tell a client without rdmasock from one whose RDMA request has not
    // come yet (clients negotiate in the background): while the connection lives it is
    // honestly undecided (pending, phase maybe) until RDMASOCK's deadline
    // (2 x probe timeout + 3 s); its close line gives the final reason, checked below.
    if (transport == "tcp" && p.role == "server" && reasons.count("peer_no_rdmasock") && r == "pending" &&
        field(*f, "phase") == "maybe")
        reason_ok = true;
    std::string want_reasons;
    for (auto &x : reasons)
        want_reasons += (want_reasons.empty() ? "" : "|") + x;
    BOOST_CHECK_MESSAGE(t == transport && reason_ok,
                        ctx << ": RDMASOCK_INFO says transport=" << t << " reason=" << r << " phase="
                            << field(*f, "phase") << ", want transport=" << transport
                            << (transport == "tcp" && !reasons.empty() ? " reason=" + want_reasons : ""));
    // A server connection the library never decided (the program never read it) is
    // honestly "maybe" with reason pending.
    bool phase_ok = field(*f, "phase") == transport ||
                    (transport == "tcp" && r == "pending" && (field(*f, "phase") == "maybe" || field(*f, "phase") == "verifying"));
    BOOST_CHECK_MESSAGE(phase_ok, ctx << ": RDMASOCK_INFO phase=" << field(*f, "phase") << " reason=" << r << ", want "
                                      << transport);
    BOOST_CHECK_MESSAGE(num(*f, "info_sent") == num(*f, "sent"),
                        ctx << ": RDMASOCK_INFO bytes_sent=" << field(*f, "info_sent") << " but the program sent "
                            << field(*f, "sent") << " (transport=" << t << ")");
    BOOST_CHECK_MESSAGE(num(*f, "info_received") == num(*f, "received"),
                        ctx << ": RDMASOCK_INFO bytes_received=" << field(*f, "info_received")
                            << " but the program received " << field(*f, "received") << " (transport=" << t << ")");
    // An orderly close() with a live peer returns once the FIN is acknowledged: well
    // before RDMASOCK_LINGER_MS (2 s), the bound for a peer that does not acknowledge.
    if (transport == "rdma" && f->count("close_us"))
        BOOST_CHECK_MESSAGE(num(*f, "close_us") < 1500000,
                            ctx << ": close() took " << num(*f, "close_us") / 1000
                                << " ms (RDMASOCK_LINGER_MS is 2000: it waited for a completion that never came?)");
    // The close-time log line of this connection (connections are sequential: the i-th).
    if (i >= p.closes.size()) {
        BOOST_ERROR(ctx << ": no event=close log line (" << p.closes.size() << " in the log)\n" << p.log);
        return;
    }
    const Fields &c = p.closes[i];
    const std::string lt = field(c, "transport");
    bool log_reason_ok = transport == "rdma" ? c.count("reason") == 0
                                             : (reasons.empty() || reasons.count(field(c, "reason")) > 0);
    BOOST_CHECK_MESSAGE(lt == transport && log_reason_ok,
                        ctx << ": the close log line says transport=" << lt << " reason=" << field(c, "reason")
                            << ", want transport=" << transport);
    BOOST_CHECK_MESSAGE(field(c, "role") == p.role, ctx << ": close log line role=" << field(c, "role"));
    BOOST_CHECK_MESSAGE(num(c, "bytes_sent") == num(*f, "sent") && num(c, "bytes_received") == num(*f, "received"),
                        ctx << ": the close log line says bytes_sent=" << field(c, "bytes_sent") << " bytes_received="
                            << field(c, "bytes_received") << ", the program moved sent=" << field(*f, "sent")
                            << " received=" << field(*f, "received") << " (transport=" << lt << ")");
}

void expect_rdma(const PeerRun &p, size_t i, int64_t sent, int64_t received, const std::string &what)
{
    expect_conn(p, i, "rdma", {}, sent, received, what);
}

std::string human(uint64_t n)
{
    if (n >= (1u << 20) && n % (1u << 20) == 0)
        return std::to_string(n >> 20) + "M";
    if (n >= 1024 && n % 1024 == 0)
        return std::to_string(n >> 10) + "K";
    if (n > 65536 && (n - 1) % 1024 == 0)
        return std::to_string((n - 1) >> 10) + "K+1";
    return std::to_string(n);
}

// ---- 1. streams ---------------------------------------------------------------------------

struct Stream {
    uint64_t c2s, s2c;
    std::string api;
    bool bidir;
};

std::string plan_arg(const std::vector<Stream> &plan)
{
    std::string s;
    for (const auto &e : plan)
        s += (s.empty() ? "" : ",") + std::to_string(e.c2s) + ":" + std::to_string(e.s2c) + ":" + e.api + ":" +
             (e.bidir ? "bidir" : "seq");
    return s;
}

std::string describe_stream(const Stream &e)
{
    std::string d = e.api + (e.bidir ? " both directions at once" : " one direction at a time") + ", c2s " +
                    human(e.c2s) + " s2c " + human(e.s2c);
    return d;
}

// Every connection of the plan on RDMA at both ends, each having moved its bytes (the
// server also its banner first).
// Every stream of the plan whole, on RDMA (or, with `tcp_reason`, on TCP for that reason:
// a connection that left RDMA mid-stream).
void expect_plan_rdma(const Pair &pr, const std::vector<Stream> &plan, const std::string &name, uint64_t banner = 0,
                      const std::string &tcp_reason = "")
{
    const std::string t = tcp_reason.empty() ? "rdma" : "tcp";
    const std::set<std::string> why = tcp_reason.empty() ? std::set<std::string>{} : std::set<std::string>{tcp_reason};
    for (size_t i = 0; i < plan.size(); ++i) {
        const Stream &e = plan[i];
        std::string what = name + " [" + describe_stream(e) + (banner ? ", banner " + std::to_string(banner) : "") + "]";
        expect_conn(pr.client, i, t, why, static_cast<int64_t>(e.c2s), static_cast<int64_t>(e.s2c + banner), what);
        expect_conn(pr.server, i, t, why, static_cast<int64_t>(e.s2c + banner), static_cast<int64_t>(e.c2s), what);
    }
}

// wait_decided: the server starts writing only once its socket is on RDMA (else its
// first bytes go out on TCP before the switch and arrive as the PREFIX: that path is
// what write_both_directions and the banner cases test).
Pair run_streams(const std::string &name, const std::vector<Stream> &plan, Side s = {}, Side c = {},
                 bool wait_decided = true, const std::function<void(Proc &, Proc &, Pair &)> &during = {},
                 const std::string &tcp_reason = "")
{
    // --stall-ms: a blocking call without progress for 10 s fails (a lost wake-up)
    // rather than hanging the run.
    s.args.insert(s.args.end(), {"--plan", plan_arg(plan), "--stall-ms", "10000"});
    if (wait_decided)
        s.args.push_back("--wait-decided");
    else
        s.args.push_back("--shutdown-decided");  // (its first bytes on TCP, but its FIN not before the PROOF)
    c.args.insert(c.args.end(), {"--plan", plan_arg(plan), "--stall-ms", "10000"});
    Pair pr = run_pair(name, s, c, 150000, during);
    expect_clean_exit(pr.server, name);
    expect_clean_exit(pr.client, name);
    expect_plan_rdma(pr, plan, name, 0, tcp_reason);
    for (size_t i = 0; i < plan.size(); ++i) {
        const Stream &e = plan[i];
        std::string what = name + " [" + describe_stream(e) + "]";
        for (const PeerRun *p : {&pr.client, &pr.server})
            if (const Fields *g = p->conn(i); g != nullptr && g->count("max_call_ms"))
                BOOST_CHECK_MESSAGE(num(*g, "max_call_ms") < 9500,
                                    what << ": " << p->name << ": one blocking call took " << field(*g, "max_call_ms")
                                         << " ms: it hit the 10 s SO_RCVTIMEO/SO_SNDTIMEO with partial progress "
                                            "(a lost wake-up the timeout rescued)");
        const Fields *f = pr.server.conn(i);
        if (f != nullptr && !e.bidir)
            BOOST_CHECK_MESSAGE(field(*f, "eof") == "1" && field(*f, "eof_before_send") == "1",
                                what << ": the server did not see the client's EOF before sending");
        if (f != nullptr && e.c2s >= (16u << 20)) {
            std::string ms = f->count("recv_ms") ? field(*f, "recv_ms") : field(*f, "data_ms");
            note(name + " " + describe_stream(e) + ": " + ms + " ms for the data");
        }
    }
    if (pr.client.conn(0) != nullptr)
        note(name + ": connect to an rdmasock server (first connection of the process): " +
             field(*pr.client.conn(0), "connect_us") + " us; later: " +
             (pr.client.conn(1) ? field(*pr.client.conn(1), "connect_us") : "-") + " us");
    return pr;
}

const std::vector<uint64_t> kSizes = {1, 1000, (64u << 10) + 1, 1u << 20, 16u << 20, 64u << 20};
const std::vector<uint64_t> kApiSizes = {1, 1000, (64u << 10) + 1, 1u << 20, 16u << 20};

void streams_write_seq()
{
    std::vector<Stream> plan;
    for (uint64_t n : kSizes)
        plan.push_back({n, n, "write", false});
    run_streams("streams/write_seq", plan);
}

void streams_write_bidir()
{
    std::vector<Stream> plan;
    for (uint64_t n : kSizes)
        plan.push_back({n, n, "write", true});
    // The server writes at once after accept(): up to a socket buffer of it goes out on
    // TCP before the switch (the client is still in connect()), then the ring.
    run_streams("streams/write_bidir", plan, {}, {}, false);
}

void streams_api(const std::string &api)
{
    std::vector<Stream> plan;
    for (uint64_t n : kApiSizes)
        plan.push_back({n, n, api, false});
    for (uint64_t n : {uint64_t{1000}, uint64_t{(64u << 10) + 1}, uint64_t{16u << 20}})
        plan.push_back({n, n, api, true});
    run_streams("streams/" + api, plan);
}

// Asymmetric, small rings: the client's receive ring 4 KiB, the server's 64 KiB; every
// write wraps and waits for credit.  The bidir connections have a reader and a writer
// thread blocked on the same connection at once, credits flowing all the time: a
// completion one thread handles must wake the other.
void streams_small_rings()
{
    std::vector<Stream> plan;
    for (uint64_t n : {uint64_t{1}, uint64_t{4097}, uint64_t{(64u << 10) + 1}, uint64_t{4u << 20}})
        plan.push_back({n, n, "write", false});
    for (uint64_t n : {uint64_t{65537}, uint64_t{4u << 20}})
        plan.push_back({n, n, "writev", true});
    for (int i = 0; i < 6; ++i)
        plan.push_back({2u << 20, 2u << 20, "write", true});
    Side s, c;
    s.env = {{"RDMASOCK_RING_KB", "64"}};
    c.env = {{"RDMASOCK_RING_KB", "4"}};
    run_streams("streams/small_rings", plan, s, c);
}

// The server calls accept() 500 ms after the client's connect(): the client's RDMA
// request arrives before accept() and waits for it (a parked request).
void streams_late_accept()
{
    std::vector<Stream> plan = {{1u << 20, 1u << 20, "write", false}, {1000, 1000, "write", true}};
    Side s, c;
    s.args = {"--accept-delay-ms", "500"};
    run_streams("streams/late_accept", plan, s, c);
}

// ---- asynchronous switch --------------------------------------------------------------------

Side async_side()
{
    Side x;
    x.env = {{"RDMASOCK_CONNECT_WAIT", "0"}, {"RDMASOCK_LOG_LEVEL", "debug"}};
    return x;
}

// The client's TCP bytes before its switch, from its debug log ("client switched to RDMA
// after N TCP bytes"), one per connection that switched.
std::vector<uint64_t> tcp_bytes_before_switch(const PeerRun &p)
{
    std::vector<uint64_t> v;
    for (const auto &l : split_lines(p.log)) {
        auto at = l.find("client switched to RDMA after ");
        if (at != std::string::npos)
            v.push_back(std::stoull(l.substr(at + 30)));
    }
    return v;
}

// Both ends write at once after connect()/accept(): the first bytes of each direction
// go over TCP while the negotiation runs, the rest over RDMA; every byte verified, every
// connection on RDMA at the end, and the switch came after TCP bytes (the client's SWITCH
// named them, the server delivered them first).
void async_streams()
{
    // (The first connection of a process pays rdma_cm's start-up, 100..450 ms under
    // emulation: it carries 64 MiB, so that it is still open when its switch comes.)
    std::vector<Stream> plan = {{64u << 20, 64u << 20, "write", true},
                                {64u << 20, 0, "write", false},
                                {16u << 20, 16u << 20, "writev", true},
                                {16u << 20, 16u << 20, "send", true}};
    Pair pr = run_streams("async/streams", plan, async_side(), async_side(), false);
    auto before = tcp_bytes_before_switch(pr.client);
    BOOST_CHECK_MESSAGE(before.size() == plan.size(), "async/streams: " << before.size() << " client switches logged, want "
                                                                        << plan.size());
    uint64_t with_tcp = 0;
    std::string list;
    for (uint64_t b : before) {
        with_tcp += b > 0;
        list += " " + std::to_string(b);
    }
    BOOST_CHECK_MESSAGE(with_tcp > 0, "async/streams: no connection switched after TCP bytes (the mid-stream switch "
                                      "was not exercised):" << list);
    note("async/streams: client TCP bytes before the switch, per connection:" + list);
}

// The server accepts 500 ms after the client's connect(): connect() returns at once (the
// synchronous mode waits for the accept and the first read), the client writes on TCP
// meanwhile, and the connection switches once the server reads.
void async_late_accept()
{
    // Two connections, each accepted 500 ms after the connect(); the second one's
    // connect() is measured (the first pays the process's one-time rdma_cm start-up,
    // 100..450 ms under emulation).
    std::vector<Stream> plan = {{64u << 20, 64u << 20, "write", true}, {64u << 20, 64u << 20, "write", true}};
    Side s = async_side(), c = async_side();
    s.args = {"--accept-delay-ms", "500"};
    Pair pr = run_streams("async/late_accept", plan, s, c, false);
    if (const Fields *f = pr.client.conn(1)) {
        BOOST_CHECK_MESSAGE(num(*f, "connect_us") < 100000, "async/late_accept: connect() took "
                                                                << num(*f, "connect_us") / 1000
                                                                << " ms: it waited for the server's accept()");
        note("async/late_accept: connect() " + field(*f, "connect_us") + " us with the accept() 500 ms late");
    }
}

// The start of a python3 server of the cases below: listen on argv[1]:argv[2], print
// "ready", accept one connection as c.
const std::string kPyAccept = "import socket, sys, time\n"
                              "l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                              "l.bind((sys.argv[1], int(sys.argv[2]))); l.listen(1); print('ready', flush=True)\n"
                              "c, _ = l.accept()\n";

// A blocking recv(MSG_WAITALL) that already holds part of its bytes when the background
// negotiation decides for TCP (the server runs no rdmasock; it sends the first 1000
// bytes at once and the rest 5 s later, long after the client's probe was rejected)
// returns all 4000 bytes in order: the rest goes after what the call already holds.
void async_waitall_across_fallback()
{
    const std::string name = "async/waitall_across_fallback";
    WorkDir dir;
    dir.keep = cfg.keep;
    const std::string port = std::to_string(free_port());
    const std::string data = "d = bytes(i % 251 for i in range(4000))\n";
    const std::string server = kPyAccept + data +
                               "c.sendall(d[:1000]); time.sleep(5); c.sendall(d[1000:]); c.close()\n";
    const std::string client = "import socket, sys\n" + data +
                               "s = socket.create_connection((sys.argv[1], int(sys.argv[2])))\n"
                               "b = s.recv(4000, socket.MSG_WAITALL)\n"
                               "print('ok' if b == d else 'got %d bytes, first %d' % (len(b), b[0] if b else -1), flush=True)\n"
                               "s.close()\n";
    Side plain;
    plain.lib = false;
    Proc ps({"/usr/bin/python3", "-c", server, cfg.addr, port}, side_env(plain, dir, "server"), dir / "server.err");
    BOOST_REQUIRE_MESSAGE(ps.read_line(20000) == "ready", name << ": the server did not start: " << read_file(dir / "server.err"));
    Proc pc({"/usr/bin/python3", "-c", client, cfg.addr, port}, side_env(async_side(), dir, "client"), dir / "client.err");
    const std::string got = pc.read_line(30000);
    BOOST_CHECK_MESSAGE(got == "ok", name << ": recv(MSG_WAITALL): " << got << " " << read_file(dir / "client.err"));
    BOOST_CHECK(pc.wait(10000));
    BOOST_CHECK(ps.wait(10000));
    CloseLog lc = check_close_log(read_file(peer_log_file(dir, "client")), true);
    BOOST_CHECK_MESSAGE(lc.closes.size() == 1 && field(lc.closes[0], "reason") == "peer_no_rdmasock",
                        name << ": want one close line with reason peer_no_rdmasock, got " << lc.closes.size());
}

// A server that shuts down writing before its switch: its FIN is in the TCP stream after
// its bytes, and the client, switched already, must read those bytes and then EOF, not
// take the TCP FIN for a server that died (a reset after the grace time).  The server
// holds its switch: the client's first 100 bytes come before the SWITCH's offset and the
// server reads only 1 of them, then writes 1000 bytes, shuts down writing, waits 1 s
// (longer than the grace time), and reads the rest; the client, having read everything
// and the EOF, writes 10 more bytes half a second later (a reset would fail them).
void async_shutdown_before_switch()
{
    const std::string name = "async/shutdown_before_switch";
    WorkDir dir;
    dir.keep = cfg.keep;
    const std::string port = std::to_string(free_port());
    const std::string data = "d = bytes(i % 251 for i in range(1000))\n";
    const std::string server = kPyAccept + data +
                               "got = c.recv(1); time.sleep(1)\n"
                               "c.sendall(d); c.shutdown(socket.SHUT_WR); time.sleep(1)\n"
                               "while len(got) < 110:\n"
                               "    b = c.recv(110 - len(got))\n"
                               "    if not b: break\n"
                               "    got += b\n"
                               "rest = c.recv(10)\n"
                               "print('ok' if got == bytes(110) and rest == b'' else 'server got %d bytes' % len(got), flush=True)\n"
                               "c.close()\n";
    const std::string client = "import socket, sys, time\n" + data +
                               "s = socket.create_connection((sys.argv[1], int(sys.argv[2]))); s.sendall(bytes(100))\n"
                               "b = b''\n"
                               "try:\n"
                               "    while True:\n"
                               "        x = s.recv(4096)\n"
                               "        if not x: break\n"
                               "        b += x\n"
                               "    time.sleep(0.5); s.sendall(bytes(10))\n"
                               "    print('ok' if b == d else 'got %d bytes' % len(b), flush=True)\n"
                               "except OSError as e:\n"
                               "    print('error after %d bytes: %s' % (len(b), e), flush=True)\n"
                               "s.close()\n";
    Proc ps({"/usr/bin/python3", "-c", server, cfg.addr, port}, side_env(async_side(), dir, "server"), dir / "server.err");
    BOOST_REQUIRE_MESSAGE(ps.read_line(20000) == "ready", name << ": the server did not start: " << read_file(dir / "server.err"));
    Proc pc({"/usr/bin/python3", "-c", client, cfg.addr, port}, side_env(async_side(), dir, "client"), dir / "client.err");
    const std::string c = pc.read_line(30000);
    BOOST_CHECK_MESSAGE(c == "ok", name << ": client: " << c << " " << read_file(dir / "client.err"));
    const std::string sv = ps.read_line(30000);
    BOOST_CHECK_MESSAGE(sv == "ok", name << ": server: " << sv << " " << read_file(dir / "server.err"));
    BOOST_CHECK(pc.wait(10000));
    BOOST_CHECK(ps.wait(10000));
    for (const char *side : {"client", "server"}) {
        CloseLog lc = check_close_log(read_file(peer_log_file(dir, side)), true);
        BOOST_CHECK_MESSAGE(lc.closes.size() == 1 && field(lc.closes[0], "transport") == "rdma",
                            name << ": " << side << ": want one close line with transport=rdma, got "
                                 << lc.closes.size() << (lc.closes.empty() ? "" : " " + field(lc.closes[0], "reason")));
    }
}

// Event-driven peers: nonblocking sockets, every EAGAIN waits with poll, select or a
// level-triggered epoll registration (one per thread and direction); a wait that sees
// nothing for 10 s while bytes are due is a lost wake-up.  The server writes a banner
// and (in the bidir connections) its data at once after accept(), so readiness is
// also checked across the switch from TCP to RDMA.
void streams_readiness(const std::string &mux)
{
    std::vector<Stream> plan = {{1u << 20, 1u << 20, "write", false},
                                {16u << 20, 16u << 20, "write", true},
                                {65537, 65537, "send", true},
                                {1000, 100000, "sendfile", false}};
    Side s, c;
    // (Its end of the stream once decided: a FIN before the RDMA request came would keep
    // the connection on TCP, docs/protocol.md.)
    s.args = {"--wait-mode", mux, "--banner", "1000", "--shutdown-decided"};
    c.args = {"--wait-mode", mux, "--banner", "1000"};
    std::string name = "streams/readiness_" + mux;
    s.args.insert(s.args.end(), {"--plan", plan_arg(plan)});
    c.args.insert(c.args.end(), {"--plan", plan_arg(plan)});
    Pair pr = run_pair(name, s, c, 120000);
    expect_clean_exit(pr.server, name);
    expect_clean_exit(pr.client, name);
    expect_plan_rdma(pr, plan, name, 1000);
}

// Many short connections, one after the other: set-up and teardown of queue pairs and
// rings, descriptor numbers reused while the previous connection's rings linger.
void streams_churn()
{
    std::vector<Stream> plan;
    for (int i = 0; i < 30; ++i)
        plan.push_back({1000, static_cast<uint64_t>(i % 2 ? 1 : 70000), "write", i % 3 == 0});
    double t0 = now_ms();
    run_streams("streams/churn_30", plan);
    note("streams/churn_30: 30 connections in " + std::to_string(static_cast<long>(now_ms() - t0)) + " ms");
}

// Small writes (1..200 bytes each) streamed, byte-exact both ways.  While earlier ones
// are in flight they are coalesced into fewer RDMA messages (the library's debug line at
// close counts both).  In one VM soft-RoCE completes a write within the post (the
// loopback path runs synchronously), so nothing is ever in flight and nothing is
// coalesced: that is only noted.  Across two VMs (twovm/small_writes) writes are in
// flight for a network round trip and there the count of messages must be lower.
void small_writes(const std::string &name, bool remote_server, bool must_coalesce)
{
    std::vector<Stream> plan = {{4u << 20, 4u << 20, "write", false}, {2u << 20, 2u << 20, "send", true}};
    Side s, c;
    s.remote = remote_server;
    s.args = {"--chunk", "200"};
    c.args = {"--chunk", "200"};
    s.env = c.env = {{"RDMASOCK_LOG_LEVEL", "debug"}};
    double t0 = now_ms();
    Pair pr = run_streams(name, plan, s, c);
    // "connection fd=N: W writes went out in M data messages"
    for (const PeerRun *p : {&pr.client, &pr.server}) {
        unsigned long long writes = 0, msgs = 0;
        for (const auto &l : split_lines(p->log)) {
            size_t at = l.find(" writes went out in ");
            if (at == std::string::npos)
                continue;
            size_t colon = l.rfind(": ", at);
            unsigned long long w = 0, m = 0;
            if (colon != std::string::npos &&
                sscanf(l.c_str() + colon, ": %llu writes went out in %llu data messages", &w, &m) == 2) {
                writes += w;
                msgs += m;
            }
        }
        BOOST_CHECK_MESSAGE(writes > 0, name << ": " << p->name << ": no 'writes went out in' debug line\n" << p->log);
        if (must_coalesce)
            BOOST_CHECK_MESSAGE(msgs < writes, name << ": " << p->name << ": " << writes << " small writes went out in "
                                                    << msgs << " RDMA messages: nothing was coalesced");
        note(name + ": " + p->name + ": " + std::to_string(writes) + " writes in " + std::to_string(msgs) +
             " RDMA data messages");
    }
    note(name + ": " + std::to_string(static_cast<long>(now_ms() - t0)) + " ms for 12 MiB in writes of 1..200 B");
}

void streams_small_writes() { small_writes("streams/small_writes", false, false); }

// Small writes, coalesced behind a write in flight, and then the writer makes no socket
// call for 3 s (usleep, not intercepted) before shutdown(): the held bytes must go out at
// the completion they wait for (the library's own thread), not when the program calls
// again.  The server notes when its last byte arrived (data_in_ms) and the client how
// long its writes took (send_ms).  Only across two VMs: in one VM nothing is in flight.
void coalesced_then_idle(const std::string &name)
{
    const int pause = 3000;
    std::vector<Stream> plan = {{2u << 20, 0, "write", false}, {1u << 20, 0, "write", false}};
    Side s, c;
    s.remote = true;
    s.args = {"--chunk", "100"};
    c.args = {"--chunk", "100", "--pause-ms", std::to_string(pause)};
    Pair pr = run_streams(name, plan, s, c);
    for (size_t i = 0; i < plan.size(); ++i) {
        const Fields *sf = pr.server.conn(i), *cf = pr.client.conn(i);
        if (sf == nullptr || cf == nullptr)
            continue;
        uint64_t in = num(*sf, "data_in_ms"), sent = num(*cf, "send_ms");
        note(name + ": connection " + std::to_string(i) + ": the client wrote for " + std::to_string(sent) +
             " ms, then slept " + std::to_string(pause) + " ms; the server had every byte after " + std::to_string(in) +
             " ms");
        BOOST_CHECK_MESSAGE(in < sent + pause / 2, name << ": connection " << i << ": the last bytes arrived after "
                                                        << in << " ms, the writes took " << sent
                                                        << " ms: held bytes waited for the program's next call");
    }
}

// recv(MSG_WAITALL) of up to 200 bytes while the server's first bytes (written at once
// after accept(), before the switch) arrive on TCP and the rest through the ring: a call
// whose buffer straddles the two must still be filled.
void streams_waitall_across_switch()
{
    std::vector<Stream> plan = {{1000, 1000, "send", true}, {65537, 65537, "send", true}, {1u << 20, 1u << 20, "send", true}};
    Side s, c;
    s.args = {"--chunk", "200"};
    c.args = {"--chunk", "200"};
    run_streams("streams/waitall_across_switch", plan, s, c, false);
}

// ---- connection cost -------------------------------------------------------------------

// A server (here or on the other VM) printing its port; nullptr when it did not start.
std::unique_ptr<Proc> start_server(const Side &s, const TempDir &dir, const std::string &name, std::string &port)
{
    std::string addr = s.remote ? cfg.peer_addr : cfg.addr;
    std::vector<std::string> argv = side_argv(s, "server", addr, "0");
    Env env = side_env(s, dir, name);
    auto p = std::make_unique<Proc>(s.remote ? remote_argv(argv, env, dir / (name + ".err.remote")) : argv,
                                    s.remote ? remote_env(env) : env, dir / (name + ".err"));
    std::string l = p->read_line(30000);
    if (l.rfind("port=", 0) != 0) {
        BOOST_ERROR(name << ": the server did not start: '" << l << "'");
        return nullptr;
    }
    port = l.substr(5);
    return p;
}

double conn_ms(const PeerRun &r, size_t i, const char *key)
{
    const Fields *f = r.conn(i);
    return f == nullptr ? -1 : static_cast<double>(num(*f, key)) / 1000.0;
}

std::string ms3(double v)
{
    char b[32];
    snprintf(b, sizeof b, "%.2f", v);
    return b;
}

// What the library costs a connection to or from a peer without rdmasock (issue point:
// accept() no later than plain TCP; connect() to a peer with an RDMA device but no
// rdmasock <= 2 ms more, cached after).  Three rounds of three connections of 1000 bytes
// each way against servers without the library:
//   lib client -> plain server: the client first connects once to another plain server
//     (warm-up: the library's one-time set-up), so connection 0 pays one uncached probe
//     (rdma_cm's reject), 1 and 2 are answered from the per-port cache;
//   plain client -> plain server: the baseline;
//   plain client -> lib server: accept() and the first read on the server side.
// Correctness (reasons, transports, bytes) is asserted; the times are measurements,
// reported, compared with the targets in the notes.
void connection_cost(const std::string &name, bool remote, bool async = false)
{
    WorkDir dir;
    dir.keep = cfg.keep;
    const std::string plan = "1000:1000:write:seq,1000:1000:write:seq,1000:1000:write:seq";
    Side w, s, base, ls;
    w.lib = s.lib = base.lib = false;
    w.remote = s.remote = base.remote = ls.remote = remote;
    w.args = {"--plan", "0:0:write:seq"};
    s.args = base.args = ls.args = {"--plan", plan};
    std::string pw, ps, pb, pl;
    auto srv_w = start_server(w, dir, "serverW", pw), srv_s = start_server(s, dir, "serverS", ps),
         srv_b = start_server(base, dir, "serverB", pb), srv_l = start_server(ls, dir, "serverL", pl);
    if (!srv_w || !srv_s || !srv_b || !srv_l)
        return;
    const std::string addr = remote ? cfg.peer_addr : cfg.addr;
    auto run_client = [&](Side c, const std::string &cname, const std::string &port) {
        c.args.insert(c.args.end(), {"--plan", plan});
        Proc pc(side_argv(c, "client", addr, port), side_env(c, dir, cname), dir / (cname + ".err"));
        bool ok = pc.wait(60000);
        return collect(cname, c, pc, dir, !ok);
    };
    Side c;
    c.env = {{"RDMASOCK_LOG_LEVEL", "debug"}};
    if (async)
        c.env.push_back({"RDMASOCK_CONNECT_WAIT", "0"});
    c.args = {"--warmup", addr + ":" + pw};
    PeerRun rc = run_client(c, "client", ps);
    Side plain;
    plain.lib = false;
    PeerRun rb = run_client(plain, "clientB", pb);
    PeerRun rl = run_client(plain, "clientL", pl);
    bool ok_w = srv_w->wait(10000), ok_s = srv_s->wait(10000), ok_b = srv_b->wait(10000), ok_l = srv_l->wait(10000);
    PeerRun rw = collect("serverW", w, *srv_w, dir, !ok_w), rs = collect("serverS", s, *srv_s, dir, !ok_s),
            rsb = collect("serverB", base, *srv_b, dir, !ok_b), rsl = collect("serverL", ls, *srv_l, dir, !ok_l);
    for (const PeerRun *r : {&rc, &rb, &rl, &rw, &rs, &rsb, &rsl})
        expect_clean_exit(*r, name);
    if (!rc.closes.empty() && field(rc.closes.front(), "peer") == addr + ":" + pw)
        rc.closes.erase(rc.closes.begin());  // the warm-up connection's
    for (size_t i = 0; i < 3; ++i) {
        // Asynchronous: a connection that ends before the rdma_cm reject arrives is
        // closed_early (the reject, arriving later, is still cached for the next ones).
        expect_conn(rc, i, "tcp", async ? std::set<std::string>{"peer_no_rdmasock", "closed_early"}
                                        : std::set<std::string>{"peer_no_rdmasock"},
                    1000, 1000, name + " (client with rdmasock)");
        expect_conn(rsl, i, "tcp", {}, 1000, 1000, name + " (server with rdmasock)");
    }
    std::string warm = "?";
    for (const auto &l : split_lines(rc.out))
        if (l.rfind("warmup ", 0) == 0)
            warm = ms3(static_cast<double>(num(parse_kv(l), "connect_us")) / 1000.0);
    // "negotiation fd=N: route R us, resources S us, ..." (debug): where connection 0's time went.
    std::string breakdown;
    for (const auto &l : split_lines(rc.log))
        if (l.find("negotiation fd=") != std::string::npos && l.find("peer_no_rdmasock") != std::string::npos) {
            breakdown = l.substr(l.find("negotiation fd="));
        }
    note(name + ": connect() to a server without rdmasock, ms: plain client " + ms3(conn_ms(rb, 0, "connect_us")) +
         ", " + ms3(conn_ms(rb, 1, "connect_us")) + ", " + ms3(conn_ms(rb, 2, "connect_us")) +
         "; rdmasock client (after a warm-up connect of " + warm + " ms) " + ms3(conn_ms(rc, 0, "connect_us")) +
         " (uncached probe), " + ms3(conn_ms(rc, 1, "connect_us")) + ", " + ms3(conn_ms(rc, 2, "connect_us")) +
         " (cached); added by the probe " + ms3(conn_ms(rc, 0, "connect_us") - conn_ms(rb, 0, "connect_us")) +
         " ms (target 2 ms)" + (async ? " [asynchronous: connect() does not wait for the probe]" : "") +
         (breakdown.empty() ? "" : "; last probe: " + breakdown));
    // (Asynchronous: the connect()s are measured and reported, like the synchronous
    // ones, not asserted: under emulation on two CPUs the process's background work (the
    // previous probe, a kit being rebuilt) makes single figures vary from 0.4 to 10 ms.)
    note(name + ": a plain client's connect+write+read of 1000 B each way, ms: to a plain server " +
         ms3(conn_ms(rb, 0, "io_us") + conn_ms(rb, 0, "connect_us")) + ", " +
         ms3(conn_ms(rb, 1, "io_us") + conn_ms(rb, 1, "connect_us")) + "; to an rdmasock server " +
         ms3(conn_ms(rl, 0, "io_us") + conn_ms(rl, 0, "connect_us")) + ", " +
         ms3(conn_ms(rl, 1, "io_us") + conn_ms(rl, 1, "connect_us")));
}

// ---- 2. fallback matrix -------------------------------------------------------------------

const std::string kPlan1M = "1048576:1048576:write:seq";

// A connection that must stay on TCP with a reason, data verified.
void fallback_pair(const std::string &name, Side s, Side c, const std::set<std::string> &s_reasons,
                   const std::set<std::string> &c_reasons, int conns = 1)
{
    std::string plan = kPlan1M;
    for (int i = 1; i < conns; ++i)
        plan += ",1000:1000:write:seq";
    s.args.insert(s.args.begin(), {"--plan", plan});
    c.args.insert(c.args.begin(), {"--plan", plan});
    Pair pr = run_pair(name, s, c);
    expect_clean_exit(pr.server, name);
    expect_clean_exit(pr.client, name);
    for (int i = 0; i < conns; ++i) {
        int64_t n = i == 0 ? (1 << 20) : 1000;
        expect_conn(pr.client, static_cast<size_t>(i), "tcp", c_reasons, n, n, name);
        expect_conn(pr.server, static_cast<size_t>(i), "tcp", s_reasons, n, n, name);
    }
    for (int i = 0; i < conns; ++i)
        if (const Fields *f = pr.client.conn(static_cast<size_t>(i)); f != nullptr && c.lib)
            note(name + ": connect() " + std::to_string(i + 1) + " took " + field(*f, "connect_us") + " us (reason " +
                 field(*f, "reason") + ")");
}

// SO_RCVTIMEO on a server socket that is still undecided (its client runs without the
// library and has sent nothing yet, so no CONFIRM and no first bytes): the read must
// fail with EAGAIN after the timeout, as the kernel's does, not after the library's own
// wait for a decision.  The scenario checks 290..1500 ms itself.
void fallback_rcvtimeo_undecided()
{
    const std::string name = "fallback/rcvtimeo_undecided";
    Side s, c;
    s.args = {"--scenario", "rcvtimeo", "--allow-tcp"};
    c.lib = false;
    c.args = {"--helper", "--conns", "1"};
    Pair pr = run_pair(name, s, c, 60000);
    expect_clean_exit(pr.server, name);
    expect_clean_exit(pr.client, name);
    std::string errs;
    for (const auto &l : split_lines(pr.server.err))
        if (l.find("scenario rcvtimeo:") != std::string::npos)
            errs += l + "\n";
    BOOST_CHECK_MESSAGE(errs.empty(), name << ": " << errs);
    expect_conn(pr.server, 0, "tcp", {"peer_no_rdmasock"}, -1, -1, name);
    if (const Fields *f = pr.server.conn(0))
        note(name + ": read() with SO_RCVTIMEO 300 ms on an undecided server socket: EAGAIN after " +
             field(*f, "rcvtimeo_ms") + " ms");
}

// The locked-memory limit too small for the rings (64 KiB, CAP_IPC_LOCK dropped, 1 MiB
// rings asked for) on one side: that side's reason is memlock, the other side's says
// what it saw (the client: memlock from the server's DECLINE; the server: the client
// never asked), and the bytes go over TCP.
void fallback_memlock(bool client_limited)
{
    const std::string name = std::string("fallback/memlock_") + (client_limited ? "client" : "server");
    Side s, c;
    Side &lim = client_limited ? c : s;
    lim.prefix = {"prlimit", "--memlock=65536:65536", "setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock"};
    lim.env = {{"RDMASOCK_RING_KB", "1024"}};
    fallback_pair(name, s, c, client_limited ? std::set<std::string>{"peer_no_rdmasock"} : std::set<std::string>{"memlock"},
                  {"memlock"}, 2);
}

// QP/MR/CQ creation failure, for real: the client runs in an rdma cgroup whose
// rdma.max allows each device 4 objects (hca_object: PD, CQ and the two ring MRs of one
// connection kit), so creating the queue pair fails; the connection stays on TCP with
// reason `resource`, its data verified.  The cgroup v2 hierarchy is mounted here when
// the VM has not (the kernel's rdma controller is built in).
void fallback_resource()
{
    const std::string root = "/sys/fs/cgroup", cg = root + "/rdmasock-resource-test";
    auto write_file = [](const std::string &path, const std::string &v) {
        FILE *f = fopen(path.c_str(), "w");
        if (f == nullptr)
            return false;
        bool ok = fputs(v.c_str(), f) >= 0;
        return fclose(f) == 0 && ok;
    };
    struct stat st{};
    if (stat((root + "/cgroup.controllers").c_str(), &st) != 0)
        BOOST_REQUIRE_MESSAGE(system(("mount -t cgroup2 none " + root).c_str()) == 0, "cannot mount cgroup2 on " << root);
    BOOST_REQUIRE_MESSAGE(write_file(root + "/cgroup.subtree_control", "+rdma"), "cannot enable the rdma controller");
    mkdir(cg.c_str(), 0755);
    int devices = 0;
    if (DIR *d = opendir("/sys/class/infiniband")) {
        while (dirent *e = readdir(d)) {
            if (e->d_name[0] == '.')
                continue;
            std::string l = std::string(e->d_name) + " hca_handle=max hca_object=4";
            BOOST_CHECK_MESSAGE(write_file(cg + "/rdma.max", l), "cannot write rdma.max: " << l);
            ++devices;
        }
        closedir(d);
    }
    BOOST_REQUIRE_MESSAGE(devices > 0, "no RDMA device");
    Side s, c;
    c.prefix = {"/bin/sh", "-c", "echo $$ > " + cg + "/cgroup.procs && exec \"$@\"", "sh"};
    fallback_pair("fallback/resource", s, c, {"peer_no_rdmasock"}, {"resource"}, 2);
    rmdir(cg.c_str());
}

void fallback_server_without_lib()
{
    Side s, c;
    s.lib = false;
    fallback_pair("fallback/server_without_lib", s, c, {}, {"peer_no_rdmasock"}, 2);
}

void fallback_client_without_lib()
{
    Side s, c;
    c.lib = false;
    fallback_pair("fallback/client_without_lib", s, c, {"peer_no_rdmasock"}, {});
}

void fallback_client_disabled()
{
    Side s, c;
    c.env = {{"RDMASOCK_ENABLE", "0"}};
    fallback_pair("fallback/client_disabled", s, c, {"peer_no_rdmasock"}, {"disabled"});
}

// The offload rules (rdmasock.conf(5)), in a file named by RDMASOCK_RULES_FILE for the
// client or the server.  A client rule keeps the client's connections on TCP without a
// probe (reason rule; its server sees a client without rdmasock).  A server rule leaves
// the listener without an RDMA listener: its connections say rule, and the client's
// probe finds no one (peer_no_rdmasock).
void fallback_rule(bool server)
{
    TempDir td;
    const std::string rules = td / "rules.conf";
    BOOST_REQUIRE(write_file(rules, server ? "tcp  *  server  *  *\n" : "tcp  peer  client\n"));
    Side s, c;
    (server ? s : c).env = {{"RDMASOCK_RULES_FILE", rules}};
    fallback_pair(server ? "fallback/server_rule" : "fallback/client_rule", s, c,
                  {server ? "rule" : "peer_no_rdmasock"}, {server ? "peer_no_rdmasock" : "rule"}, 2);
}

void fallback_server_disabled()
{
    Side s, c;
    s.env = {{"RDMASOCK_ENABLE", "0"}};
    fallback_pair("fallback/server_disabled", s, c, {"disabled"}, {"peer_no_rdmasock"});
}

void fallback_loopback()
{
    Side s, c;
    s.addr = "127.0.0.1";
    // 127.0.0.1 is not on an RDMA device: the client must not offload it, and say so.
    // The server's view: its peer runs rdmasock but sent no CONFIRM.
    fallback_pair("fallback/loopback", s, c, {"not_rdma_addr", "no_listener", "peer_no_rdmasock"}, {"not_rdma_addr"}, 2);
}

bool have_nordma()
{
    if (cfg.nordma_ns.empty()) {
        BOOST_ERROR("no nordma namespace: run in tests/vm/run --nordma-ns (RDMASOCK_VM_NORDMA_NS unset)");
        return false;
    }
    return true;
}

// A peer in the nordma namespace (no RDMA answers there): a connect waits for the probe
// timeout, the next ones are answered from the negative cache.  The client first makes
// one warm-up connection (to a server without the library on the RDMA address): the
// library's one-time set-up (its thread, rdma_cm and verbs initialisation, hundreds of
// ms under TCG) is measured there, not in the probe.
void fallback_nordma_timeout()
{
    if (!have_nordma())
        return;
    const int probe = 200;
    const std::string name = "fallback/nordma_timeout";
    WorkDir dir;
    dir.keep = cfg.keep;
    Side w, s, c;
    w.lib = false;
    w.args = {"--plan", "0:0:write:seq"};
    s.lib = false;
    s.nordma = true;
    std::string plan = "65536:65536:write:seq,1000:1000:write:seq,1000:1000:write:seq";
    s.args = {"--plan", plan};
    Proc pw(side_argv(w, "server", cfg.addr, "0"), side_env(w, dir, "serverW"), dir / "serverW.err");
    Proc ps(side_argv(s, "server", cfg.nordma_addr, "0"), side_env(s, dir, "server"), dir / "server.err");
    std::string lw = pw.read_line(30000), ls = ps.read_line(30000);
    BOOST_REQUIRE_MESSAGE(lw.rfind("port=", 0) == 0 && ls.rfind("port=", 0) == 0, name << ": servers did not start");
    // Debug level: the negotiation line tells where the time went.
    c.env = {{"RDMASOCK_PROBE_TIMEOUT_MS", std::to_string(probe)}, {"RDMASOCK_LOG_LEVEL", "debug"}};
    c.args = {"--plan", plan, "--warmup", cfg.addr + ":" + lw.substr(5)};
    Proc pc(side_argv(c, "client", cfg.nordma_addr, ls.substr(5)), side_env(c, dir, "client"), dir / "client.err");
    bool ok_c = pc.wait(60000), ok_s = ps.wait(10000), ok_w = pw.wait(10000);
    PeerRun rc = collect("client", c, pc, dir, !ok_c), rs = collect("server", s, ps, dir, !ok_s),
            rw = collect("serverW", w, pw, dir, !ok_w);
    expect_clean_exit(rs, name);
    expect_clean_exit(rc, name);
    expect_clean_exit(rw, name);
    // The warm-up connection's close line comes first in the client's log.
    if (!rc.closes.empty() && field(rc.closes.front(), "peer").rfind(cfg.addr + ":", 0) == 0)
        rc.closes.erase(rc.closes.begin());
    for (size_t i = 0; i < 3; ++i) {
        int64_t n = i == 0 ? 65536 : 1000;
        expect_conn(rc, i, "tcp", {"timeout"}, n, n, name);
        expect_conn(rs, i, "tcp", {}, n, n, name);
    }
    const Fields *f0 = rc.conn(0), *f1 = rc.conn(1), *f2 = rc.conn(2);
    if (f0 == nullptr || f1 == nullptr || f2 == nullptr)
        return;
    std::string warm = "?";
    for (const auto &l : split_lines(rc.out))
        if (l.rfind("warmup ", 0) == 0)
            warm = std::to_string(num(parse_kv(l), "connect_us") / 1000) + " ms (reason " + field(parse_kv(l), "reason") + ")";
    double c0 = static_cast<double>(num(*f0, "connect_us")) / 1000.0;
    double c1 = static_cast<double>(num(*f1, "connect_us")) / 1000.0;
    double c2 = static_cast<double>(num(*f2, "connect_us")) / 1000.0;
    // "negotiation fd=N: route R us, resources S us, no answer after W us: timeout"
    double route = -1, res = -1, wait = -1;
    for (const auto &l : split_lines(rc.log)) {
        size_t at = l.find("negotiation fd=");
        if (l.find("no answer after") == std::string::npos)
            continue;  // the warm-up connection's
        const char *q = at == std::string::npos ? nullptr : strstr(l.c_str() + at, "route ");
        long r1 = -1, r2 = -1, r3 = -1;
        if (q != nullptr && sscanf(q, "route %ld us, resources %ld us, no answer after %ld us", &r1, &r2, &r3) == 3) {
            route = r1 / 1000.0;
            res = r2 / 1000.0;
            wait = r3 / 1000.0;
            break;
        }
    }
    note(name + ": RDMASOCK_PROBE_TIMEOUT_MS=" + std::to_string(probe) + ": warm-up connect() to a server without rdmasock " +
         warm + "; first connect() to nordma " + std::to_string(c0) + " ms (address+route resolution " +
         std::to_string(route) + " ms, QP/ring setup " + std::to_string(res) + " ms, waiting for an answer " +
         std::to_string(wait) + " ms); then, not cached (twice the wait): " + std::to_string(c1) + " ms, " + std::to_string(c2) + " ms");
    BOOST_CHECK_MESSAGE(c0 >= probe, name << ": the first connect() took " << c0 << " ms, less than the probe timeout "
                                          << probe << " ms: did it wait at all?");
    BOOST_CHECK_MESSAGE(wait >= 0, name << ": no 'negotiation fd=...: no answer after' debug line\n" << rc.log);
    // The wait for the peer's answer is what RDMASOCK_PROBE_TIMEOUT_MS bounds.
    BOOST_CHECK_MESSAGE(wait <= probe + 50, name << ": waited " << wait << " ms for an answer, probe timeout " << probe);
    // connect() in all: address/route resolution and QP/ring set-up (both measured above:
    // tens to a hundred ms under TCG on a loaded machine, about 1 ms on hardware), then the
    // probe timeout, then teardown. What connect() adds beyond the measured set-up is bounded.
    const double margin = 100;
    const double beyond = c0 - std::max(route, 0.0) - std::max(res, 0.0);
    BOOST_CHECK_MESSAGE(beyond <= probe + margin, name << ": the first connect() took " << c0 << " ms, " << beyond
                                                       << " ms of it beyond resolution (" << route << " ms) and set-up ("
                                                       << res << " ms): more than the probe timeout " << probe
                                                       << " ms + " << margin << " ms (wait " << wait << " ms)");
    // A timeout is no answer: the next connect()s probe again (nothing cached), each
    // waiting twice the probe timeout (the backoff after a timeout).
    BOOST_CHECK_MESSAGE(c1 >= 2 * probe && c2 >= 2 * probe,
                        name << ": connect() after a timeout took " << c1 << " / " << c2
                             << " ms, less than twice the probe timeout: was the timeout cached, or no backoff?");
    BOOST_CHECK_MESSAGE(c1 <= 2 * probe + 300 && c2 <= 2 * probe + 300,
                        name << ": connect() after a timeout took " << c1 << " / " << c2
                             << " ms, more than twice the probe timeout + 300 ms");
}

// rdma_cm to the nordma namespace fails at once when no RDMA device is on the route:
// rxe1 (on nd0) is deleted for this case (as tests/vm/run --nordma-no-rxe sets up) and
// put back afterwards.
// ---- mid-stream fallback to TCP ----------------------------------------------------------

// The network interface that holds `addr` (IPv4), or "".
std::string netdev_of(const std::string &addr)
{
    std::string name;
    ifaddrs *list = nullptr;
    if (getifaddrs(&list) != 0)
        return name;
    for (ifaddrs *i = list; i != nullptr && name.empty(); i = i->ifa_next) {
        if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET)
            continue;
        char buf[INET_ADDRSTRLEN] = {};
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in *>(i->ifa_addr)->sin_addr, buf, sizeof buf);
        if (addr == buf)
            name = i->ifa_name;
    }
    freeifaddrs(list);
    return name;
}

// Wait (up to 30 s) until both ends of `p` logged event=switch: in the default mode the
// switch comes when it comes, after the first bytes went over TCP.
bool wait_both_switched(const Pair &p)
{
    for (double until = now_ms() + 30000; now_ms() < until; usleep(50 * 1000))
        if (read_file(p.server_log).find("event=switch ") != std::string::npos &&
            read_file(p.client_log).find("event=switch ") != std::string::npos)
            return true;
    return false;
}

// The link under the RDMA device goes down for `down_s` seconds in the middle of a
// stream both ways (issue 17, point 4).  soft-RoCE fails the queue pairs at once (a
// send on a link that is down); the connection falls back to its TCP socket, which
// goes on between local addresses: every byte arrives once and in order, both
// programs end cleanly, and the log of each says why it left RDMA; RDMASOCK_INFO and the
// close line of each say transport=tcp reason=fell_back (phase tcp).  `async`: in the
// default mode (RDMASOCK_CONNECT_WAIT=0: connect() returns before the switch, the first
// bytes go over TCP), where the suite's other cases have connect() wait.
void midstream_link_down(int down_s, bool async = false)
{
    const std::string name = "midstream/link_down_" + std::to_string(down_s) + "s" + (async ? "_default" : "");
    const std::string dev = netdev_of(cfg.addr);
    BOOST_REQUIRE_MESSAGE(!dev.empty(), name << ": no interface holds " << cfg.addr);
    const std::vector<Stream> plan = {{256u << 20, 256u << 20, "write", true}};
    double down_at = 0, up_at = 0;
    std::string ip_out;
    int down_rc = -1, up_rc = -1;
    Side srv, cli;
    if (async) {
        srv.env = {{"RDMASOCK_CONNECT_WAIT", "0"}};
        cli.env = {{"RDMASOCK_CONNECT_WAIT", "0"}};
    }
    bool switched = !async;
    Pair pr = run_streams(name, plan, srv, cli, true, [&](Proc &, Proc &, Pair &p) {
        // (Connected, switched, and well into the stream.)
        switched = switched || wait_both_switched(p);
        usleep((async ? 500 : 1500) * 1000);
        down_at = now_ms();
        down_rc = run_quiet({"ip", "link", "set", dev, "down"}, 10000, &ip_out);
        usleep(static_cast<useconds_t>(down_s) * 1000 * 1000);
        up_rc = run_quiet({"ip", "link", "set", dev, "up"}, 10000, &ip_out);
        up_at = now_ms();
    }, "fell_back");
    // Up again, whatever happened.  (Each case runs in a VM of its own: after a link flap
    // with connections on it, Debian 12's rdma_rxe (6.1) carries no rdma_cm connection any
    // more (rping gets no answer 45 s later; after a flap without traffic it answers 0.8 s
    // after the link came up), and making the device anew failed when other cases had
    // run before (rdma link add, in a full run).  A property of the emulated device's
    // kernel: RDMA hardware reconnects.)
    if (up_rc != 0)
        run_quiet({"ip", "link", "set", dev, "up"}, 10000, &ip_out);
    BOOST_CHECK_MESSAGE(down_rc == 0 && up_rc == 0, name << ": ip link set " << dev << " failed: " << ip_out);
    BOOST_CHECK_MESSAGE(switched, name << ": the connection did not switch to RDMA within 30 s");
    size_t fell_back = 0;
    std::string why;
    for (const PeerRun *p : {&pr.client, &pr.server})
        for (const std::string &l : split_lines(p->log))
            if (l.find("event=fallback ") != std::string::npos) {
                ++fell_back;
                why += " " + p->role + ": " + l.substr(l.find("event=fallback ") + 15) + ";";
            }
    // (A connection falls back only while open: the lines show the stream still ran.)
    BOOST_CHECK_MESSAGE(fell_back == 2, name << ": want one event=fallback line per end, got " << fell_back << why
                                             << "\n" << pr.describe());
    const Fields *c = pr.client.conn(0);
    note(name + ": link " + dev + " down " + std::to_string(static_cast<long>(up_at - down_at)) + " ms, from " +
         std::to_string(static_cast<long>(down_at - pr.t0_ms)) + " ms; the data took " +
         (c != nullptr ? field(*c, "data_ms") : std::string("?")) + " ms; fallback lines:" + why);
}

// The RDMA device (rdma link show: "link DEV/PORT ... netdev NETDEV") over `netdev`, or "".
std::string rdma_dev_of(const std::string &netdev)
{
    std::string out;
    if (run_quiet({"rdma", "link", "show"}, 10000, &out) != 0)
        return "";
    for (const std::string &l : split_lines(out)) {
        const size_t nd = l.find(" netdev " + netdev);
        if (l.rfind("link ", 0) != 0 || nd == std::string::npos ||
            (nd + 8 + netdev.size() < l.size() && l[nd + 8 + netdev.size()] != ' '))
            continue;
        return l.substr(5, l.find('/') - 5);
    }
    return "";
}

// `rdma link delete` of the device under a connection in the middle of a stream both
// ways, each side blocked in its reads and writes (issue 17, point 4).  soft-RoCE cannot
// take the verbs objects away from a process: the removal waits until the process has
// released every one on the device.  It must return while the programs still run (the
// library releases them at RDMA_CM_EVENT_DEVICE_REMOVAL), the connection must fall back to
// TCP with every byte, each end say so, and a new connection must stay on TCP with a
// reason.  (Only with TEST_OFFLOAD_MIDSTREAM=1, in a VM of its own: the device is gone.)
void device_removal()
{
    const std::string name = "midstream/device_removal";
    const std::string netdev = netdev_of(cfg.addr);
    const std::string dev = rdma_dev_of(netdev);
    BOOST_REQUIRE_MESSAGE(!dev.empty(), name << ": no RDMA device over " << netdev << " (" << cfg.addr << ")");
    const std::vector<Stream> plan = {{256u << 20, 256u << 20, "write", true}};
    double del_at = 0, del_done = 0;
    std::string out;
    int rc = -1;
    bool switched = false, alive = false;
    Pair pr = run_streams(name, plan, {}, {}, true, [&](Proc &sp, Proc &cp, Pair &p) {
        switched = wait_both_switched(p);
        usleep(500 * 1000);
        del_at = now_ms();
        rc = run_quiet({"rdma", "link", "delete", dev}, 30000, &out);
        del_done = now_ms();
        alive = !sp.wait(0) && !cp.wait(0);  // (both still running as it returned)
    }, "fell_back");
    BOOST_CHECK_MESSAGE(switched, name << ": the connection did not switch to RDMA within 30 s");
    BOOST_CHECK_MESSAGE(rc == 0, name << ": rdma link delete " << dev << " failed (" << rc << "): " << out);
    // Returned while both programs still ran: it did not wait for their exit.  (Without
    // the release it returned as they exited.)
    BOOST_CHECK_MESSAGE(alive,
                        name << ": rdma link delete returned " << static_cast<long>(del_done - del_at)
                             << " ms after it started, after a program's exit (client "
                             << static_cast<long>(pr.client_exit_ms - del_at) << " ms, server "
                             << static_cast<long>(pr.server_exit_ms - del_at) << " ms)");
    // Each end fell back: for the removal, or for the peer's frame when that came first.
    int for_removal = 0;
    for (const PeerRun *p : {&pr.client, &pr.server}) {
        BOOST_CHECK_MESSAGE(p->log.find("event=device_gone device=" + dev + " connections=1") != std::string::npos,
                            name << ": " << p->role << ": no event=device_gone line for its connection\n" << p->log);
        BOOST_CHECK_MESSAGE(p->log.find("event=fallback ") != std::string::npos,
                            name << ": " << p->role << ": no event=fallback line\n" << p->log);
        for_removal += p->log.find("why=\"the RDMA device was removed\"") != std::string::npos;
    }
    BOOST_CHECK_MESSAGE(for_removal >= 1, name << ": no end fell back for the device's removal\n"
                                               << pr.describe());
    // A new connection: on TCP, with a reason (the address has no RDMA device now).
    Side s, c;
    const std::string small = "1000:1000:write:seq";
    s.args = {"--plan", small};
    c.args = {"--plan", small};
    Pair after = run_pair(name + " (after)", s, c);
    expect_clean_exit(after.server, name);
    expect_clean_exit(after.client, name);
    expect_conn(after.client, 0, "tcp", {"not_rdma_addr", "no_route", "no_device"}, 1000, 1000, name + " (after)");
    note(name + ": rdma link delete " + dev + " took " + std::to_string(static_cast<long>(del_done - del_at)) +
         " ms, from " + std::to_string(static_cast<long>(del_at - pr.t0_ms)) + " ms; the programs ended " +
         std::to_string(static_cast<long>(std::min(pr.client_exit_ms, pr.server_exit_ms) - del_done)) +
         " ms after it; a new connection: " +
         (after.client.conn(0) ? field(*after.client.conn(0), "reason") : std::string("?")));
}

void fallback_nordma_no_rxe()
{
    if (!have_nordma())
        return;
    const std::string name = "fallback/nordma_no_rxe";
    bool had_rxe1 = access("/sys/class/infiniband/rxe1", F_OK) == 0;
    if (had_rxe1) {
        std::string out;
        int rc = run_quiet({"rdma", "link", "delete", "rxe1"}, 20000, &out);
        BOOST_REQUIRE_MESSAGE(rc == 0, name << ": rdma link delete rxe1 failed (" << rc << "): " << out);
    }
    Side s, c;
    s.lib = false;
    s.nordma = true;
    s.addr = cfg.nordma_addr;
    std::string plan = kPlan1M + ",1000:1000:write:seq";
    s.args = {"--plan", plan};
    c.args = {"--plan", plan};
    Pair pr = run_pair(name, s, c);
    if (had_rxe1) {
        std::string out;
        int rc = run_quiet({"rdma", "link", "add", "rxe1", "type", "rxe", "netdev", "nd0"}, 20000, &out);
        BOOST_CHECK_MESSAGE(rc == 0, name << ": could not put rxe1 back (" << rc << "): " << out);
    }
    expect_clean_exit(pr.server, name);
    expect_clean_exit(pr.client, name);
    for (size_t i = 0; i < 2; ++i) {
        int64_t n = i == 0 ? (1 << 20) : 1000;
        expect_conn(pr.client, i, "tcp", {"not_rdma_addr", "no_route"}, n, n, name);
        expect_conn(pr.server, i, "tcp", {}, n, n, name);
    }
    for (size_t i = 0; i < 2; ++i)
        if (const Fields *f = pr.client.conn(i)) {
            double ms = static_cast<double>(num(*f, "connect_us")) / 1000.0;
            note(name + ": connect() " + std::to_string(i + 1) + " took " + std::to_string(ms) + " ms (reason " +
                 field(*f, "reason") + ")");
            BOOST_CHECK_MESSAGE(ms < 1000, name << ": connect() took " << ms
                                                << " ms although rdma_cm fails at once (probe timeout 3000 ms)");
        }
}

// A server that speaks first: its banner goes out on TCP before the switch, and must
// arrive first and intact, then the rest over RDMA.
void fallback_banner(uint64_t banner)
{
    const std::string name = "fallback/banner_" + human(banner) + "_rdmasock_client";
    Side s, c;
    s.args = {"--plan", kPlan1M, "--banner", std::to_string(banner)};
    c.args = {"--plan", kPlan1M, "--banner", std::to_string(banner)};
    if (banner <= 4096)  // FIONREAD must count the banner, which arrives on TCP before the switch
        c.args.push_back("--fionread-banner");
    Pair pr = run_pair(name, s, c);
    expect_clean_exit(pr.server, name);
    expect_clean_exit(pr.client, name);
    expect_rdma(pr.client, 0, 1 << 20, static_cast<int64_t>((1 << 20) + banner), name);
    expect_rdma(pr.server, 0, static_cast<int64_t>((1 << 20) + banner), 1 << 20, name);
}

void fallback_banner_plain_client()
{
    const std::string name = "fallback/banner_plain_client";
    Side s, c;
    c.lib = false;
    s.args = {"--plan", kPlan1M, "--banner", "1000"};
    c.args = {"--plan", kPlan1M, "--banner", "1000"};
    Pair pr = run_pair(name, s, c);
    expect_clean_exit(pr.server, name);
    expect_clean_exit(pr.client, name);
    expect_conn(pr.client, 0, "tcp", {}, 1 << 20, (1 << 20) + 1000, name);
    expect_conn(pr.server, 0, "tcp", {"peer_no_rdmasock"}, (1 << 20) + 1000, 1 << 20, name);
}

// A server that only writes (never reads, never waits for input): the library binds RDMA
// to a server connection only once the program reads it, so this stays on TCP (the
// client learns it when the server closes its copy, or at the probe timeout); the data
// must arrive intact and both ends (RDMASOCK_INFO and the close log line) must agree it
// went over TCP.
void fallback_push_server()
{
    const std::string name = "fallback/push_server";
    Side s, c;
    s.args = {"--plan", "0:1048576:write:seq", "--push"};
    c.args = {"--plan", "0:1048576:write:seq"};
    Pair pr = run_pair(name, s, c);
    expect_clean_exit(pr.server, name);
    expect_clean_exit(pr.client, name);
    expect_conn(pr.client, 0, "tcp", {}, 0, 1 << 20, name);
    expect_conn(pr.server, 0, "tcp", {}, 1 << 20, 0, name);
    if (const Fields *f = pr.client.conn(0))
        note(name + ": connect() took " + std::to_string(num(*f, "connect_us") / 1000) + " ms (probe timeout 3000 ms), reason " +
             field(*f, "reason") + "; server reason " + (pr.server.conn(0) ? field(*pr.server.conn(0), "reason") : "?"));
}

// An echo server without the library: it must see exactly the client's bytes (it checks
// the client's pattern from byte 0: a CONFIRM or any foreign byte fails it).
void fallback_echo_server_without_lib()
{
    const std::string name = "fallback/echo_server_without_lib";
    Side s, c;
    s.lib = false;
    s.args = {"--plan", "1048576:1048576:write:bidir", "--echo"};
    c.args = {"--plan", "1048576:1048576:write:bidir", "--expect-echo"};
    Pair pr = run_pair(name, s, c);
    expect_clean_exit(pr.server, name);
    expect_clean_exit(pr.client, name);
    expect_conn(pr.client, 0, "tcp", {"peer_no_rdmasock"}, 1 << 20, 1 << 20, name);
    expect_conn(pr.server, 0, "tcp", {}, 1 << 20, 1 << 20, name);
}

// One client process connects to two servers on the same address: first one without
// the library (port A: rdma_cm has no listener there), then an rdmasock server (port B).
// "No RDMA listener on port A" says nothing about port B: the second connection must be
// offloaded.
void fallback_cache_per_port()
{
    const std::string name = "fallback/negative_cache_is_per_port";
    WorkDir dir;
    dir.keep = cfg.keep;
    Side a, b, c;
    a.lib = false;
    a.args = {"--plan", "1000:1000:write:seq"};
    b.args = {"--plan", "1000:1000:write:seq"};
    Proc pa(side_argv(a, "server", cfg.addr, "0"), side_env(a, dir, "serverA"), dir / "serverA.err");
    Proc pb(side_argv(b, "server", cfg.addr, "0"), side_env(b, dir, "serverB"), dir / "serverB.err");
    std::string la = pa.read_line(30000), lb = pb.read_line(30000);
    BOOST_REQUIRE_MESSAGE(la.rfind("port=", 0) == 0 && lb.rfind("port=", 0) == 0, name << ": servers did not start");
    c.args = {"--plan", "1000:1000:write:seq,1000:1000:write:seq", "--ports", la.substr(5) + "," + lb.substr(5)};
    Proc pc(side_argv(c, "client", cfg.addr, "0"), side_env(c, dir, "client"), dir / "client.err");
    bool ok_c = pc.wait(60000), ok_a = pa.wait(10000), ok_b = pb.wait(10000);
    PeerRun ra = collect("serverA", a, pa, dir, !ok_a), rb = collect("serverB", b, pb, dir, !ok_b),
            rc = collect("client", c, pc, dir, !ok_c);
    expect_clean_exit(ra, name);
    expect_clean_exit(rb, name);
    expect_clean_exit(rc, name);
    expect_conn(rc, 0, "tcp", {"peer_no_rdmasock"}, 1000, 1000, name + " (port A, no rdmasock)");
    expect_rdma(rc, 1, 1000, 1000, name + " (port B, rdmasock)");
    expect_rdma(rb, 0, 1000, 1000, name + " (port B, rdmasock)");
}

// connect() waits (RDMASOCK_CONNECT_WAIT=1) with the default probe timeout (50 ms, made
// for hardware), below what the first answer takes here: the server accepts (and so
// answers) its first connection 400 ms late (--first-accept-delay-ms; before, the case
// counted on the server's first queue pair and rings taking 100..450 ms under TCG, and
// failed in CI the day the first answer took less than 50 ms): the first connection stays
// on TCP (timeout).  That
// timeout is not cached: the next connect()s probe again, wait twice as long (backoff),
// and once an answer came in time, as long as answers take (the estimate); the last
// connections are on RDMA from their first byte.  Before: the first timeout was cached
// as "peer without rdmasock" and every connection stayed on TCP (the VM tools had to set
// RDMASOCK_PROBE_TIMEOUT_MS=3000).
void fallback_probe_adapts()
{
    const std::string name = "fallback/probe_adapts";
    const size_t n = 6;
    std::vector<Stream> plan(n, Stream{1u << 20, 1u << 20, "write", false});
    Side s, c;
    c.env = {{"RDMASOCK_PROBE_TIMEOUT_MS", "50"}, {"RDMASOCK_CONNECT_WAIT", "1"}, {"RDMASOCK_LOG_LEVEL", "debug"}};
    s.args = {"--plan", plan_arg(plan), "--stall-ms", "10000", "--first-accept-delay-ms", "400"};
    c.args = {"--plan", plan_arg(plan), "--stall-ms", "10000"};
    Pair pr = run_pair(name, s, c, 150000);
    expect_clean_exit(pr.server, name);
    expect_clean_exit(pr.client, name);
    // The first: its answer came 400 ms late.
    expect_conn(pr.client, 0, "tcp", {"timeout"}, 1u << 20, 1u << 20, name + " (the first connection)");
    std::string list;
    for (size_t i = 0; i < n; ++i) {
        const Fields *f = pr.client.conn(i);
        if (f == nullptr)
            continue;
        const std::string t = field(*f, "transport");
        list += " " + t + (t == "tcp" ? "/" + field(*f, "reason") : "") + "(" + ms3(conn_ms(pr.client, i, "connect_us")) +
                " ms)";
        if (i > 0 && i + 2 < n)  // in between: on RDMA, or the wait was still too short
            BOOST_CHECK_MESSAGE(t == "rdma" || field(*f, "reason") == "timeout",
                                name << ": connection " << i << ": " << t << " " << field(*f, "reason"));
    }
    // The last two: the wait has adapted.
    for (size_t i = n - 2; i < n; ++i) {
        expect_rdma(pr.client, i, 1u << 20, 1u << 20, name + " (after adapting)");
        expect_rdma(pr.server, i, 1u << 20, 1u << 20, name + " (after adapting)");
    }
    auto before = tcp_bytes_before_switch(pr.client);
    BOOST_CHECK_MESSAGE(!before.empty() && before.back() == 0,
                        name << ": the last connection did not switch before its first byte");
    // The server of a connection whose client gave up waiting: tcp, and its close line
    // says why, the client's timeout (while it lives it is undecided: a request may come
    // yet; not peer_no_rdmasock: the client asked, it does run rdmasock).
    std::string server_list;
    for (const Fields &f : pr.server.closes)
        server_list += " " + field(f, "transport") + "/" + field(f, "reason");
    BOOST_CHECK_MESSAGE(!pr.server.closes.empty() && field(pr.server.closes[0], "transport") == "tcp" &&
                            field(pr.server.closes[0], "reason") == "timeout",
                        name << ": the server's first connection (its client timed out), close lines:" << server_list
                             << "; want tcp/timeout first");
    note(name + ": RDMASOCK_PROBE_TIMEOUT_MS=50, client connections (transport, connect()):" + list +
         "; server close lines:" + server_list);
}

// ---- system: what every process of a machine pays -----------------------------------------

// The cost of a process start with the library preloaded (as /etc/ld.so.preload does
// for every process): /bin/true spawned again and again without LD_PRELOAD, with an empty
// library preloaded and with librdmasock.so, in interleaved rounds; the median round of
// each.  The library maps nothing but its shim and libc until a connection may be
// offloaded (tests/preload: nothing_loaded_...).
void system_start_cost()
{
    const std::string name = "system/start_cost";
    const int rounds = 15, per_round = 20;
    auto spawn_all = [&](const std::string &preload) {
        std::vector<std::string> envs = {"PATH=/usr/bin:/bin"};
        if (!preload.empty())
            envs.push_back("LD_PRELOAD=" + preload);
        std::vector<char *> envp;
        for (auto &e : envs)
            envp.push_back(const_cast<char *>(e.c_str()));
        envp.push_back(nullptr);
        char arg0[] = "/bin/true";
        char *argv[] = {arg0, nullptr};
        const double t0 = now_ms();
        for (int i = 0; i < per_round; ++i) {
            pid_t pid = -1;
            int st = 0;
            BOOST_REQUIRE(posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv, envp.data()) == 0);
            BOOST_REQUIRE(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
        }
        return (now_ms() - t0) / per_round;
    };
    // Each round measures the three back to back, in alternating order (a slow stretch of
    // the emulator then weighs on both sides of a round's ratio alike); the library's cost
    // over the empty one is the median of the rounds' ratios.
    std::vector<double> without, empty, with, ratio;
    for (int r = 0; r < rounds; ++r) {
        double w = 0, e = 0, b = 0;
        if (r % 2 == 0) {
            w = spawn_all("");
            e = spawn_all(OFFLOAD_EMPTY_PRELOAD);
            b = spawn_all(cfg.lib);
        } else {
            b = spawn_all(cfg.lib);
            e = spawn_all(OFFLOAD_EMPTY_PRELOAD);
            w = spawn_all("");
        }
        without.push_back(w);
        empty.push_back(e);
        with.push_back(b);
        ratio.push_back(b / e);
    }
    std::sort(without.begin(), without.end());
    std::sort(empty.begin(), empty.end());
    std::sort(with.begin(), with.end());
    std::sort(ratio.begin(), ratio.end());
    const double a = without[rounds / 2], e = empty[rounds / 2], b = with[rounds / 2], q = ratio[rounds / 2];
    char line[400];
    snprintf(line, sizeof line,
             "%s: /bin/true, median of %d rounds of %d: %.3f ms without, %.3f ms with an empty library "
             "preloaded (%+.1f%%), %.3f ms with librdmasock.so (%+.1f%%); over the empty one, median of the "
             "rounds' ratios: %+.1f%% (rounds %+.1f%% .. %+.1f%%)",
             name.c_str(), rounds, per_round, a, e, (e / a - 1) * 100, b, (b / a - 1) * 100, (q - 1) * 100,
             (ratio.front() - 1) * 100, (ratio.back() - 1) * 100);
    note(line);
    // The issue's target (+5% over no preload) is below what preloading any library costs
    // under emulation (the empty one: +4-22% in the same VM).  Time here moves by 10-20%
    // from one run to the next (rounds' ratios over the empty library from -16% to +39%,
    // medians 0..+16%), so the library's cost against the empty one is held in
    // instructions, on the host (tests/preload: start_instructions, at most +15%, +6.9%
    // measured).  Held here: a start costs far less than it did with the engine mapped at
    // start (+70-77% over no preload; +124% with rdma-core linked): at most +55%
    // (measured +15..+37%).
    BOOST_CHECK_MESSAGE(b <= a * 1.55, line);
}

// ---- servers: the shapes servers are deployed in ------------------------------------------

// A server that accepts a connection and closes its listening socket at once (nc -l,
// one-shot transfer tools), then listens anew on the same port for the next one: every
// connection on RDMA at both ends.  The RDMA listener outlives the TCP listener until the
// connections it accepted are decided, and the new listener takes it back.  Before, both
// ends fell back with peer_no_rdmasock.
void servers_close_listener(bool async)
{
    const std::string name = std::string("servers/close_listener") + (async ? "_async" : "");
    std::vector<Stream> plan = {{16u << 20, 16u << 20, "write", true},
                                {1u << 20, 1u << 20, "write", false},
                                {16u << 20, 16u << 20, "write", true}};
    Side s = async ? async_side() : Side{}, c = async ? async_side() : Side{};
    s.args = {"--close-listener"};
    if (async) {
        // Each connection still open at its switch: the first carries 64 MiB (it pays
        // rdma_cm's start-up), the others pause 1.5 s between their two directions.
        plan = {{64u << 20, 64u << 20, "write", true}, {1u << 20, 1u << 20, "write", false},
                {1u << 20, 1u << 20, "write", false}};
        c.args = {"--pause-ms", "1500"};
    }
    run_streams(name, plan, s, c, false);  // every connection on RDMA at both ends
}

// A client that has used RDMA (its first connection) makes each later connection in a
// fork child: the child loads a copy of rdma-core of its own (the loaded one holds the
// parent's device handles) and its connections go on RDMA as the parent's.  Before, they
// stayed on TCP with reason forked_child.
void servers_fork_child_client()
{
    std::vector<Stream> plan = {{4u << 20, 4u << 20, "write", true},
                                {1u << 20, 1u << 20, "write", false},
                                {4u << 20, 4u << 20, "write", true}};
    Side s, c;
    c.args = {"--fork-conns"};
    run_streams("servers/fork_child_client", plan, s, c, false);  // every connection on RDMA at both ends
}

// A pre-fork server: the master listens (and so holds the port's RDMA listener), N
// forked workers accept.  The worker that accepts a connection records it in the
// listener's shared table; the master sends the client's request on to the worker's own
// RDMA listener (a redirecting DECLINE).  Every connection on RDMA at both ends.
void servers_prefork(int workers, bool async, bool reuseport = false)
{
    const std::string name =
        "servers/prefork" + std::to_string(workers) + (async ? "_async" : "") + (reuseport ? "_reuseport" : "");
    // (Uniform plans: any worker may accept any connection.)
    std::vector<Stream> plan(6, Stream{2u << 20, 2u << 20, "write", true});
    Side s = async ? async_side() : Side{}, c = async ? async_side() : Side{};
    s.args = {"--prefork", std::to_string(workers)};
    if (reuseport)  // one listener per worker, all made by the master (nginx `reuseport`)
        s.args.push_back("--reuseport");
    if (!async) {
        // Writes of 1 byte to 2 KiB: thousands of messages each way on a queue pair made
        // after a redirect (its receive count once started from the first one's, and
        // the receive queue ran dry after 512).
        s.args.insert(s.args.end(), {"--chunk", "2K"});
        c.args = {"--chunk", "2K"};
    }
    if (async) {
        // Each connection still open at its switch: 2.5 s between its two directions (a
        // worker's first connection also loads the worker's rdma-core).
        plan.assign(static_cast<size_t>(workers), Stream{1u << 20, 1u << 20, "write", false});
        c.args = {"--pause-ms", "2500"};
    }
    run_streams(name, plan, s, c, false);
}

// A server that accepts each connection and forks a child to serve it, closing its own
// copy (inetd style): the child, first to use the connection, negotiates it (the parent,
// which holds the RDMA listener, sends the request on to the child's).  Every
// connection on RDMA at both ends; before, both stayed on TCP (forked).
void servers_fork_per_conn(bool async)
{
    const std::string name = std::string("servers/fork_per_conn") + (async ? "_async" : "");
    std::vector<Stream> plan = {{4u << 20, 4u << 20, "write", true},
                                {1u << 20, 1u << 20, "write", false},
                                {4u << 20, 4u << 20, "write", true}};
    Side s = async ? async_side() : Side{}, c = async ? async_side() : Side{};
    s.args = {"--fork-per-conn"};
    if (async) {  // each connection still open at its switch
        plan = {{1u << 20, 1u << 20, "write", false}, {1u << 20, 1u << 20, "write", false}};
        c.args = {"--pause-ms", "2500"};
    }
    run_streams(name, plan, s, c, false);
}

// A client whose connection is on RDMA forks mid-connection; the child does MODE to its
// copy (close; close every descriptor; exit(3), which runs the library's exit step;
// exec with the descriptor inherited; use it: a wait for input) and ends while the
// parent waits, then the parent goes on.  The parent's connection stays on RDMA,
// byte-exact at both ends, unless the child used its copy or exec'd with it inherited
// (the new program may use it): then the parent's library hands the connection back to
// its TCP socket first, and both processes share the kernel socket (the stream goes on
// over TCP, byte-exact, fell_back at both ends; before, the child's copy reported a
// reset, and the new program's bytes would have been lost).  raw-exit, raw-exec: the
// child made by _Fork(), which the library's fork() does not see (before, its exit sent
// the parent's FIN, its exec handed the parent's connection back to TCP).  maps: the
// child has none of the parent's device memory (the queues soft-RoCE maps from
// /dev/infiniband; before, every one was copied into the child: with 64 connections
// on RDMA each fork() took 9.6 ms, 5.5 ms now, and 1 ms in a process with no library).
void servers_fork_live(const std::string &mode)
{
    Side s, c;
    c.args = {"--fork-child", mode};
    run_streams("servers/fork_live_" + mode, {{2u << 20, 2u << 20, "write", false}}, s, c, false, {},
                mode == "use" || mode == "exec" ? "fell_back" : "");
}

// A client execs itself in the middle of its connection, the socket inherited (issue 14,
// point 5; peer --exec-self): the new image, under the library or without it (_nolib),
// goes on with the stream on the kernel socket, the library of the old one having made
// the stream the program's alone first.  after: on RDMA at the exec, with bytes of the
// echo arrived unread in the ring (the server resends them over TCP: its connection
// falls back).  before: the exec right after connect() and 1000 bytes, the switch still
// being negotiated (default mode).  Every byte arrives once and in order at both ends,
// then the EOF.  close: the whole stream both ways on RDMA, then an exec of /bin/true
// with the socket close-on-exec: the server reads every byte, then the EOF, as after a
// kernel TCP socket's close (before, the server got a reset: the queue pair ended
// without a FIN).  pass (servers/pass_after: issue 17, point 3): as after, but the
// connection goes with SCM_RIGHTS to a new process (a dispatcher handing a connection
// it has read from to a worker), which goes on with it over the kernel socket (before,
// the peer's bytes went on over RDMA to the first process, which had closed its copy:
// lost).  pass_after_mmsg: with sendmmsg().
// The line a peer prints before its exec or pass (peer --exec-self, --pass-after).
Fields exec_from_line(const PeerRun &p)
{
    for (const auto &l : split_lines(p.out))
        if (l.rfind("exec_from ", 0) == 0)
            return parse_kv(l.substr(10));
    return Fields{};
}

// The first fallback line of a peer's log (its fields), empty when there is none.
Fields fallback_line(const PeerRun &p)
{
    for (const auto &l : split_lines(p.log))
        if (auto at = l.find("event=fallback "); at != std::string::npos)
            return parse_kv(l.substr(at));
    return Fields{};
}

// The process that went on with a connection after an exec or a pass (its first line):
// every byte of a 2 MiB stream each way and the EOF, on a socket no library knows
// (RDMASOCK_INFO unanswered: transport=none), or (a fork child's copy, handed back) one
// its library knows as a kernel socket (transport=tcp, reason forked).
void expect_continued(const PeerRun &p, const char *who, const std::string &name, const Pair &pr,
                      const std::string &transport = "none")
{
    const uint64_t n = 2u << 20;
    const Fields *f = p.conn(0);
    BOOST_CHECK_MESSAGE(f != nullptr && num(*f, "sent") == n && num(*f, "received") == n && field(*f, "eof") == "1" &&
                            field(*f, "transport") == transport && f->count("exec_continued") &&
                            (transport != "tcp" || field(*f, "reason") == "forked"),
                        name << ": " << who << " did not finish the stream on the kernel socket\n" << pr.describe());
}

// The ring of `left` (the side that exec'd or passed) held bytes unread at the time, and
// its peer resent at least those over TCP (our count was what the program read).
void expect_residue_resent(const PeerRun &left, const PeerRun &peer, const std::string &name, const Pair &pr)
{
    const Fields lf = fallback_line(left), pf = fallback_line(peer);
    BOOST_CHECK_MESSAGE(num(lf, "residue_bytes") > 0 && num(lf, "residue_bytes") != ~0ull &&
                            num(pf, "resend_bytes") >= num(lf, "residue_bytes"),
                        name << ": " << left.name << "'s ring held " << field(lf, "residue_bytes")
                             << " unread bytes when it left, " << peer.name << " resent " << field(pf, "resend_bytes")
                             << " (want > 0, and at least those)\n" << pr.describe());
}

void servers_exec_self(const std::string &when, bool async, bool nolib)
{
    const bool pass = when.rfind("pass", 0) == 0, after = when == "after" || pass;
    const std::string name = (when == "pass-mmsg" ? "servers/pass_after_mmsg" : pass ? "servers/pass_after"
                                                                                     : "servers/exec_" + when) +
                             (async ? "_async" : "") + (nolib ? "_nolib" : "");
    const int64_t n = 2 << 20;
    Side s = async ? async_side() : Side{}, c = async ? async_side() : Side{};
    s.args = {"--plan", "2M:2M:write", "--echo"};
    c.args = {"--plan", "2M:2M:write", "--expect-echo", "--exec-self", when};
    if (nolib)
        c.args.push_back("--exec-env-clean");
    Pair pr = run_pair(name, s, c);
    expect_clean_exit(pr.server, name);
    expect_clean_exit(pr.client, name);
    const Fields from = exec_from_line(pr.client);
    BOOST_CHECK_MESSAGE(!from.empty(), name << ": the client printed no exec_from line\n" << pr.describe());
    if (after)
        BOOST_CHECK_MESSAGE(field(from, "transport") == "rdma" && num(from, "received") < num(from, "sent"),
                            name << ": at the exec (pass) the connection was not on RDMA with echo bytes unread\n"
                                 << pr.describe());
    if (when == "close")
        BOOST_CHECK_MESSAGE(field(from, "transport") == "rdma" && num(from, "received") == static_cast<uint64_t>(n),
                            name << ": at the exec the connection was not on RDMA with the echo read\n"
                                 << pr.describe());
    // The new image: every byte and the EOF, on a socket no library knows (RDMASOCK_INFO
    // unanswered: transport=none).
    if (when != "close")
        expect_continued(pr.client, "the new image", name, pr);
    // The server checked every byte it echoed (--echo), on TCP from the fallback on.
    expect_conn(pr.server, 0, "tcp",
                when != "before" ? std::set<std::string>{"fell_back"} : std::set<std::string>{}, n, n, name);
    const Fields *sf = pr.server.conn(0);
    BOOST_CHECK_MESSAGE(sf != nullptr && field(*sf, "eof") == "1", name << ": the server read no EOF\n" << pr.describe());
    if (when == "before")
        return;
    // The fallback lines: the client's for the exec; with echo bytes unread in its ring
    // (after), the server resends at least those (our count was what the program read).
    const Fields sfb = fallback_line(pr.server);
    const char *why = pass ? "why=\"the program passed the socket on\"" : "why=\"the program exec'd\"";
    BOOST_CHECK_MESSAGE(pr.client.log.find(why) != std::string::npos && !sfb.empty(),
                        name << ": no fallback for the exec (pass) in the logs\n" << pr.describe());
    if (after)
        expect_residue_resent(pr.client, pr.server, name, pr);
}

// An echo server hands its connection on to another process after 1 MiB of a 2 MiB
// stream, the connection on RDMA (`how`: the server's arguments for it); `who` goes on
// with it, seeing `transport` (expect_continued), and the server's fallback says `why`.
void echo_handed_on(const std::string &name, bool async, const std::vector<std::string> &how, const char *who,
                    const std::string &transport, const std::string &why)
{
    const int64_t n = 2 << 20;
    Side s = async ? async_side() : Side{}, c = async ? async_side() : Side{};
    s.args = {"--plan", "2M:2M:write", "--echo"};
    s.args.insert(s.args.end(), how.begin(), how.end());
    c.args = {"--plan", "2M:2M:write", "--expect-echo", "--wait-rdma"};
    Pair pr = run_pair(name, s, c);
    expect_clean_exit(pr.server, name);
    expect_clean_exit(pr.client, name);
    const Fields from = exec_from_line(pr.server);
    BOOST_CHECK_MESSAGE(field(from, "transport") == "rdma" && num(from, "received") == 1048576,
                        name << ": when it handed the connection on, the server's was not on RDMA after 1 MiB\n"
                             << pr.describe());
    expect_continued(pr.server, who, name, pr, transport);
    expect_conn(pr.client, 0, "tcp", {"fell_back"}, n, n, name);
    BOOST_CHECK_MESSAGE(pr.server.log.find("why=\"" + why + "\"") != std::string::npos,
                        name << ": no fallback (" << why << ") in the server's log\n" << pr.describe());
    expect_residue_resent(pr.server, pr.client, name, pr);
}

// A dispatcher (issue 17, point 3): the echo server reads and echoes the first 1 MiB,
// then passes the connection with SCM_RIGHTS to a new process (peer --pass-after), which
// echoes the rest over the kernel socket.  At the pass the connection is on RDMA with
// bytes of the client's arrived unread in the ring: the server's library falls back
// first, the client resends them over TCP.  Every byte arrives once and in order at both
// ends, then the EOF.
void servers_pass_worker(bool async)
{
    echo_handed_on(std::string("servers/pass_to_worker") + (async ? "_async" : ""), async, {"--pass-after", "1048576"},
                   "the worker", "none", "the program passed the socket on");
}

// A server that forks after bytes were exchanged, the connection on RDMA (issue 14,
// point 2; peer --fork-after): it echoes 1 MiB of a 2 MiB stream, then a fork child goes
// on with the echo, while the parent closes its copy at once (close: a server that read
// a request, then forks a child to answer it), keeps it open until the child ends (keep:
// the child's first read asks the parent for the connection), or the child execs a new
// image of the server that goes on (exec: inetd, CGI; the parent keeps its copy).  The
// parent's library hands the connection back to its TCP socket first, the bytes of the
// client's that its ring held unread resent by the client.  Before, the child's copy
// reported ECONNRESET at its first read.  Every byte arrives once and in order at both
// ends, then the EOF.
void servers_fork_after(const std::string &mode, bool async)
{
    echo_handed_on("servers/fork_after_" + mode + (async ? "_async" : ""), async,
                   {"--fork-after", "1048576", "--fork-mode", mode}, "the fork child", mode == "exec" ? "none" : "tcp",
                   "a fork child holds the socket");
}

// A pre-fork echo server and a client that writes 1 MB in calls of 1 to 64 bytes: many
// thousands of messages each way, on a client queue pair made after the master sent
// the request on to the worker (its receive count once carried over from the first
// queue pair, and its receive queue ran dry after 512 messages: a stall).
void servers_prefork_echo()
{
    const std::string name = "servers/prefork_echo";
    Side s, c;
    s.args = {"--prefork", "2", "--plan", "1048576:1048576:write:bidir", "--echo"};
    c.args = {"--plan", "1048576:1048576:write:bidir", "--expect-echo", "--chunk", "64"};
    Pair pr = run_pair(name, s, c);
    expect_clean_exit(pr.server, name);
    expect_clean_exit(pr.client, name);
    expect_conn(pr.client, 0, "rdma", {}, 1 << 20, 1 << 20, name);
    expect_conn(pr.server, 0, "rdma", {}, 1 << 20, 1 << 20, name);
}

// ---- 3. semantics on offloaded connections -------------------------------------------------

const std::vector<std::string> kScenarios = {"halfclose", "peek",     "dontwait",    "fionread",
                                             "poll",      "select",   "epoll_lt",    "epoll_et",
                                             "epoll_oneshot", "epoll_rdhup", "rcvtimeo", "linger0",
                                             "oobinline"};

// The scenarios a tester on that side runs (a client also connects nonblocking).
std::vector<std::string> scenario_list(bool tester_is_client)
{
    std::vector<std::string> list = kScenarios;
    if (tester_is_client)
        list.insert(list.begin() + 4, "nbconnect");
    return list;
}

// One pair runs every scenario, one connection each; memoized per tester role and mode
// (connect-wait, or the default asynchronous switch).
struct ScenarioRun {
    bool done = false;
    Pair pr;
    std::vector<std::string> list;
};

ScenarioRun &scenario_run(bool tester_is_client, bool async)
{
    static ScenarioRun runs[4];
    ScenarioRun &r = runs[(tester_is_client ? 1 : 0) + (async ? 2 : 0)];
    if (r.done)
        return r;
    r.done = true;
    r.list = scenario_list(tester_is_client);
    std::string sc;
    for (auto &x : r.list)
        sc += (sc.empty() ? "" : ",") + x;
    Side s = async ? async_side() : Side(), c = async ? async_side() : Side();
    Side &tester = tester_is_client ? c : s;
    Side &helper = tester_is_client ? s : c;
    tester.args = {"--scenario", sc};
    helper.args = {"--helper", "--conns", std::to_string(r.list.size())};
    r.pr = run_pair(std::string(async ? "semantics_default_mode" : "semantics") + " (tester=" +
                        (tester_is_client ? "client" : "server") + ")",
                    s, c, 180000);
    return r;
}

// `async`: in the library's default mode (connect() returns at once, the connection
// switches in the background, often in the middle of the scenario): the scenario's
// checks and the byte counts are the same; the transport is whichever the timing gave
// (reported).
void semantics_case(const std::string &scenario, bool tester_is_client, bool async)
{
    ScenarioRun &r = scenario_run(tester_is_client, async);
    auto it = std::find(r.list.begin(), r.list.end(), scenario);
    BOOST_REQUIRE(it != r.list.end());
    size_t i = static_cast<size_t>(it - r.list.begin());
    const PeerRun &tester = tester_is_client ? r.pr.client : r.pr.server;
    const PeerRun &helper = tester_is_client ? r.pr.server : r.pr.client;
    std::string name = std::string(async ? "semantics_default_mode/" : "semantics/") + scenario +
                       (tester_is_client ? " (tester=client)" : " (tester=server)");
    // The scenario's own checks: "error: scenario NAME: ..." lines on the tester's stderr.
    std::string errs;
    for (const auto &l : split_lines(tester.err))
        if (l.find("scenario " + scenario + ":") != std::string::npos)
            errs += l + "\n";
    const Fields *tf = tester.conn(i);
    BOOST_CHECK_MESSAGE(tf != nullptr && errs.empty(), name << ": failed:\n"
                                                            << (errs.empty() ? "(no result line)\n" : errs)
                                                            << (tf == nullptr ? tester.describe() : ""));
    if (tf == nullptr)
        return;
    std::string vals;
    for (const auto &kv : *tf)
        if (kv.first.find("_ms") != std::string::npos || kv.first.find("_us") != std::string::npos ||
            kv.first.find("eagain") != std::string::npos || kv.first.find("outq") != std::string::npos)
            if (kv.first != "connect_us" || scenario == "nbconnect")
                vals += " " + kv.first + "=" + kv.second;
    if (!vals.empty())
        note(name + ":" + vals);
    // Transport and counters on both ends, from RDMASOCK_INFO and the log.
    if (!async) {
        expect_rdma(tester, i, -1, -1, name);
        expect_rdma(helper, i, -1, -1, name);
    } else if (const Fields *hf = helper.conn(i)) {
        note(name + ": tester transport=" + field(*tf, "transport") + " reason=" + field(*tf, "reason") +
             ", helper transport=" + field(*hf, "transport") + " reason=" + field(*hf, "reason"));
    }
    // Both ends agree on what moved.
    const Fields *hf = helper.conn(i);
    if (hf != nullptr && scenario != "linger0")
        BOOST_CHECK_MESSAGE(num(*tf, "sent") == num(*hf, "received") && num(*hf, "sent") == num(*tf, "received"),
                            name << ": tester sent " << field(*tf, "sent") << " received " << field(*tf, "received")
                                 << ", helper sent " << field(*hf, "sent") << " received " << field(*hf, "received"));
}

// Close right after writing N MB, then exit(): the peer gets all N bytes, then EOF.  In
// the default mode (async) both ends wait until the connection is on RDMA first
// (--wait-rdma; else a fast writer may be done and closed before the switch).
void semantics_close_exit(bool writer_is_client, bool async = false)
{
    const std::string name = std::string(async ? "semantics_default_mode" : "semantics") + "/close_exit_" +
                             (writer_is_client ? "client" : "server");
    const uint64_t n = 16u << 20;
    std::string plan = writer_is_client ? std::to_string(n) + ":0:write:seq" : "0:" + std::to_string(n) + ":write:seq";
    Side s = async ? async_side() : Side{}, c = async ? async_side() : Side{};
    s.args = {"--plan", plan};
    c.args = {"--plan", plan};
    (writer_is_client ? c : s).args.push_back("--close-exit");
    if (async)
        for (Side *x : {&s, &c})
            x->args.push_back("--wait-rdma");
    Pair pr = run_pair(name, s, c);
    expect_clean_exit(pr.server, name);
    expect_clean_exit(pr.client, name);
    expect_rdma(pr.client, 0, writer_is_client ? static_cast<int64_t>(n) : 0, writer_is_client ? 0 : static_cast<int64_t>(n), name);
    expect_rdma(pr.server, 0, writer_is_client ? 0 : static_cast<int64_t>(n), writer_is_client ? static_cast<int64_t>(n) : 0, name);
    const PeerRun &reader = writer_is_client ? pr.server : pr.client;
    if (const Fields *f = reader.conn(0))
        BOOST_CHECK_MESSAGE(field(*f, "eof") == "1", name << ": the reader saw no EOF after the data");
}

// CPU time (user + system, clock ticks) a process has used so far; -1 if unknown.
long cpu_ticks(pid_t pid)
{
    std::string st = read_file("/proc/" + std::to_string(pid) + "/stat");
    size_t rp = st.rfind(')');
    if (rp == std::string::npos)
        return -1;
    std::istringstream is(st.substr(rp + 2));
    std::string f;
    long utime = -1, stime = -1;
    for (int i = 3; is >> f; ++i) {  // field 3 is the state
        if (i == 14)
            utime = std::atol(f.c_str());
        if (i == 15) {
            stime = std::atol(f.c_str());
            break;
        }
    }
    return utime < 0 || stime < 0 ? -1 : utime + stime;
}

// The adaptive spin (RDMASOCK_SPIN_US, on by default) spins on a connection whose data
// comes late on one wait in 16 only, for 50 us: with an offloaded connection idle (the client sleeps 6 s
// after its data, no socket call; the server blocks in read() waiting for the rest),
// neither process may use CPU (both have the library's thread) over 2 s of that time.
void semantics_idle_no_cpu()
{
    const std::string name = "semantics/idle_no_cpu";
    Side s, c;
    s.args = {"--plan", "1000:1000:write:seq"};
    c.args = {"--plan", "1000:1000:write:seq", "--pause-ms", "6000"};
    long s0 = -1, s1 = -1, c0 = -1, c1 = -1;
    Pair pr = run_pair(name, s, c, 60000, [&](Proc &sp, Proc &cp, Pair &) {
        usleep(3000 * 1000);  // connect and data done (well under 3 s), the pause runs
        s0 = cpu_ticks(sp.pid());
        c0 = cpu_ticks(cp.pid());
        usleep(2000 * 1000);
        s1 = cpu_ticks(sp.pid());
        c1 = cpu_ticks(cp.pid());
    });
    expect_clean_exit(pr.server, name);
    expect_clean_exit(pr.client, name);
    expect_rdma(pr.client, 0, 1000, 1000, name);
    expect_rdma(pr.server, 0, 1000, 1000, name);
    const long hz = sysconf(_SC_CLK_TCK);
    BOOST_REQUIRE_MESSAGE(s0 >= 0 && s1 >= 0 && c0 >= 0 && c1 >= 0, name << ": no CPU figures from /proc");
    const double s_ms = 1000.0 * static_cast<double>(s1 - s0) / static_cast<double>(hz);
    const double c_ms = 1000.0 * static_cast<double>(c1 - c0) / static_cast<double>(hz);
    note(name + ": CPU over 2 s idle: server (blocked in read) " + std::to_string(static_cast<long>(s_ms)) +
         " ms, client (sleeping) " + std::to_string(static_cast<long>(c_ms)) + " ms");
    BOOST_CHECK_MESSAGE(s_ms <= 50 && c_ms <= 50, name << ": an idle offloaded connection used CPU: server " << s_ms
                                                      << " ms, client " << c_ms << " ms in 2 s");
}

// The peer is killed with SIGKILL while the survivor is blocked in read() (sigkill), in
// write() on a full ring (sigkill_write) or in epoll_wait() (sigkill_epoll): ECONNRESET
// or EPIPE (EOF is wrong: the peer's FIN never came) within about 2 s.  sigkill_idle:
// the survivor makes no call for 3 s, then its read() fails at once (within 500 ms).
// `async`: in the default mode (the survivor waits until its connection is on RDMA).
void semantics_sigkill(bool killed_is_client, const std::string &scenario = "sigkill", bool async = false)
{
    const std::string name = std::string(async ? "semantics_default_mode/" : "semantics/") + scenario + "_" +
                             (killed_is_client ? "client" : "server");
    Side s = async ? async_side() : Side{}, c = async ? async_side() : Side{};
    Side &tester = killed_is_client ? s : c;
    Side &helper = killed_is_client ? c : s;
    tester.args = {"--scenario", scenario};
    helper.args = {"--helper", "--conns", "1"};
    double killed_at = 0;
    Pair pr = run_pair(name, s, c, 60000, [&](Proc &sp, Proc &cp, Pair &) {
        Proc &h = killed_is_client ? cp : sp;
        Proc &t = killed_is_client ? sp : cp;
        bool ready = false, blocked = false;
        double deadline = now_ms() + 30000;
        while (now_ms() < deadline && !(ready && blocked)) {
            if (!ready) {
                std::string l = h.read_line(100);
                ready = l == "ready";
            }
            if (!blocked) {
                std::string l = t.read_line(100);
                blocked = l == "blocked";
            }
            if (h.exited() || t.exited())
                break;
        }
        BOOST_CHECK_MESSAGE(ready && blocked, name << ": the helper never got ready / the tester never blocked");
        usleep(300000);  // the tester is in read() by now
        killed_at = now_ms();
        h.signal(SIGKILL);
    });
    const PeerRun &t = killed_is_client ? pr.server : pr.client;
    const PeerRun &h = killed_is_client ? pr.client : pr.server;
    BOOST_CHECK_MESSAGE(h.exit_code == 128 + SIGKILL, name << ": the helper was not killed: " << h.exit_code);
    expect_clean_exit(t, name);
    expect_rdma(t, 0, -1, -1, name);
    double exit_at = killed_is_client ? pr.server_exit_ms : pr.client_exit_ms;
    if (scenario == "sigkill_idle") {
        const Fields *f = t.conn(0);
        BOOST_CHECK_MESSAGE(f != nullptr && f->count("read_returned_after_ms") &&
                                num(*f, "read_returned_after_ms") < 500,
                            name << ": the idle survivor's read() returned after "
                                 << (f != nullptr ? field(*f, "read_returned_after_ms") : "?")
                                 << " ms, want < 500 (the peer died 3 s before)\n" << pr.describe());
        note(name + ": the idle survivor's read() failed " +
             (f != nullptr ? field(*f, "read_returned_after_ms") : "?") + " ms into the call (" +
             (f != nullptr ? field(*f, "read_result") : "?") + ")");
    } else if (killed_at > 0 && exit_at > 0) {
        double dt = exit_at - killed_at;
        const std::string call = scenario == "sigkill_write" ? "write" : "read";
        note(name + ": the survivor's " + (scenario == "sigkill_epoll" ? "epoll_wait() and " : "") + call +
             "() failed and it exited " + std::to_string(static_cast<long>(dt)) + " ms after the SIGKILL (" +
             (t.conn(0) ? field(*t.conn(0), call + "_result") : "?") + ")");
        BOOST_CHECK_MESSAGE(dt < 2500, name << ": the survivor took " << dt << " ms after the SIGKILL, want < ~2 s");
    }
}

// The helper writes 4 MiB and ends without closing its socket: _exit(), a fatal signal
// (SIGTERM's default action), or execve() with the socket close-on-exec (issue 17, 4).
// The kernel's TCP delivers every byte, then EOF.  rdmasock(7): bytes still in flight
// may be lost, and then the peer sees a reset; never an EOF after fewer bytes (the
// tester's scenario checks the bytes, and how the stream ended).  Before an exec the
// helper's library hands the connection back to TCP (docs/protocol.md, "exec"), so
// there the exec's close ends it as the kernel's: every byte, then EOF.
void semantics_abrupt(const std::string &how, bool helper_is_client, bool async)
{
    const std::string name = std::string(async ? "semantics_default_mode" : "semantics") + "/abrupt_" + how +
                             (helper_is_client ? "_client" : "_server");
    Side s = async ? async_side() : Side{}, c = async ? async_side() : Side{};
    Side &tester = helper_is_client ? s : c;
    Side &helper = helper_is_client ? c : s;
    tester.args = {"--scenario", "abrupt_" + how};
    helper.args = {"--helper", "--conns", "1"};
    Pair pr = run_pair(name, s, c);
    const PeerRun &t = helper_is_client ? pr.server : pr.client;
    const PeerRun &h = helper_is_client ? pr.client : pr.server;
    const int want = how == "signal" ? 128 + SIGTERM : 0;
    BOOST_CHECK_MESSAGE(h.exit_code == want, name << ": the helper's exit status is " << h.exit_code << ", want "
                                                  << want << "\n" << h.describe());
    expect_clean_exit(t, name);
    if (how == "exec")
        expect_conn(t, 0, "tcp", {"fell_back"}, -1, -1, name);
    else
        expect_rdma(t, 0, -1, -1, name);
    if (const Fields *f = t.conn(0)) {
        note(name + ": the reader got " + field(*f, "abrupt_got") + " of 4194304 bytes, then " +
             field(*f, "abrupt_end"));
        if (how == "exec")
            BOOST_CHECK_MESSAGE(field(*f, "abrupt_got") == "4194304" && field(*f, "abrupt_end") == "EOF",
                                name << ": the reader got " << field(*f, "abrupt_got") << " bytes, then "
                                     << field(*f, "abrupt_end") << "; want 4194304, then EOF");
    }
}

// The helper stops itself (SIGSTOP) and the tester writes until the connection takes no
// more (1 KiB writes: on RDMA, more messages than the stopped side has receives posted),
// then closes.  As on the kernel's TCP: close() returns at once, and the helper,
// continued 1 s later, reads every byte, then EOF.  (The library tries for
// RDMASOCK_LINGER_MS, 2 s, where the kernel's TCP tries for minutes.)
// (The tester's exit waits for the last bytes to go: rdmasock(7), close.)
void semantics_stopped_close(bool async)
{
    const std::string name = std::string(async ? "semantics_default_mode" : "semantics") + "/stopped_close";
    Side s = async ? async_side() : Side{}, c = async ? async_side() : Side{};
    c.args = {"--scenario", "stopped_close"};
    s.args = {"--helper", "--conns", "1"};
    Pair pr = run_pair(name, s, c, 60000, [&](Proc &sp, Proc &cp, Pair &) {
        bool ready = false;
        double deadline = now_ms() + 30000;
        while (now_ms() < deadline && !ready && !sp.exited())
            ready = sp.read_line(100) == "ready";
        BOOST_CHECK_MESSAGE(ready, name << ": the helper never got ready");
        bool closed = false;
        while (now_ms() < deadline && !closed && !cp.exited())
            closed = cp.read_line(100).rfind("conn=", 0) == 0;
        BOOST_CHECK_MESSAGE(closed, name << ": the tester did not close while the helper was stopped");
        usleep(1000000);
        sp.signal(SIGCONT);
    });
    expect_clean_exit(pr.client, name);
    expect_clean_exit(pr.server, name);
    const Fields *t = pr.client.conn(0);
    const Fields *h = pr.server.conn(0);
    BOOST_REQUIRE_MESSAGE(t && h, name << ": a connection line is missing\n" << pr.client.describe() << pr.server.describe());
    BOOST_CHECK_MESSAGE(field(*t, "transport") == "rdma", name << ": the tester's connection is not on RDMA");
    const long long wrote = std::atoll(field(*t, "sent_while_stopped").c_str());
    const long long close_us = std::atoll(field(*t, "close_us").c_str());
    note(name + ": " + std::to_string(wrote) + " bytes written to the stopped peer; close() took " +
         std::to_string(close_us / 1000) + " ms; after SIGCONT the peer read " + field(*h, "after_stop") +
         " bytes, eof=" + field(*h, "eof"));
    BOOST_CHECK_MESSAGE(wrote > 0, name << ": nothing was written");
    BOOST_CHECK_MESSAGE(field(*h, "received") == field(*t, "sent"),
                        name << ": the helper received " << field(*h, "received") << " bytes, the tester sent " << field(*t, "sent"));
    BOOST_CHECK_MESSAGE(field(*h, "eof") == "1", name << ": the helper saw no EOF after the bytes");
    BOOST_CHECK_MESSAGE(close_us < 100000, name << ": close() took " << close_us / 1000 << " ms (the kernel's returns at once)");
}

// ---- 4. real programs ----------------------------------------------------------------------

struct ProgRun {
    std::string name;
    std::string out, err, log;
    int exit_code = -1;
    bool timed_out = false;
    std::vector<Fields> closes;
    std::vector<std::string> log_problems;
};

// wait: RDMASOCK_CONNECT_WAIT=1, every connection on RDMA from its first byte (the
// programs' short runs would otherwise end on TCP before their switch; the asynchronous
// mode has its own run, long enough to switch mid-stream).
Env prog_env(const std::string &log, bool wait = true)
{
    Env env = base_env();
    set_var(env, "LD_PRELOAD", preload_value(cfg.lib));
    set_var(env, "RDMASOCK_LOG_LEVEL", cfg.log_level);
    set_var(env, "RDMASOCK_LOG_FILE", log);
    set_var(env, "RDMASOCK_PROBE_TIMEOUT_MS", "3000");
    set_var(env, "RDMASOCK_CONNECT_WAIT", wait ? "1" : "0");
    return env;
}

void finish_prog(ProgRun &r, Proc &p, const TempDir &dir, const std::string &base, bool timed_out)
{
    r.exit_code = p.exit_code();
    r.timed_out = timed_out;
    r.out = read_file(dir / (base + ".out"));
    r.err = read_file(dir / (base + ".err"));
    r.log = read_file(dir / (base + ".log"));
    PeerRun tmp;
    tmp.log = r.log;
    parse_log(tmp);
    r.closes = tmp.closes;
    r.log_problems = tmp.log_problems;
}

// Each program logged `each` close lines, every one on RDMA.
void expect_all_rdma(const std::string &name, std::initializer_list<const ProgRun *> runs, size_t each,
                     const std::string &all)
{
    for (const ProgRun *r : runs) {
        BOOST_CHECK_MESSAGE(r->closes.size() == each, name << ": " << r->name << ": " << r->closes.size()
                                                           << " connections closed, want " << each << "\n" << all);
        for (const Fields &f : r->closes)
            BOOST_CHECK_MESSAGE(field(f, "transport") == "rdma", name << ": " << r->name << ": transport="
                                                                     << field(f, "transport") << " reason="
                                                                     << field(f, "reason"));
    }
}

// Waits (up to ms) for a program to end, killing it past that, and collects its run.
void await_prog(ProgRun &r, Proc &p, const TempDir &dir, const std::string &base, int ms)
{
    bool ok = p.wait(ms);
    if (!ok)
        p.kill_all();
    finish_prog(r, p, dir, base, !ok);
}

std::string describe_prog(const ProgRun &r)
{
    return "[" + r.name + "] exit=" + std::to_string(r.exit_code) + (r.timed_out ? " (TIMED OUT)" : "") +
           "\n  stdout:\n" + PeerRun::indent(r.out.substr(0, 3000)) + "  stderr:\n" +
           PeerRun::indent(r.err.substr(0, 3000)) + "  log:\n" + PeerRun::indent(r.log.substr(0, 6000));
}

// Wait until port has a TCP listener and an rdma_cm listener (the library creates the
// latter inside the program's listen() call, just after the kernel's).
bool wait_listener(int port, int timeout_ms)
{
    double deadline = now_ms() + timeout_ms;
    while (now_ms() < deadline) {
        if (tcp_listening(port)) {
            std::string out;
            if (run_quiet({"rdma", "resource", "show", "cm_id"}, 5000, &out) == 0 &&
                out.find("src-addr " + cfg.addr + ":" + std::to_string(port)) != std::string::npos)
                return true;
        }
        usleep(20000);
    }
    return false;
}

// The exit status of `rdmasock ARGS...` and its stdout (as user `uid`, and with a
// locked-memory limit of `memlock_kb` when not 0).
int run_tool_status(const std::vector<std::string> &args, std::string *out, uid_t uid = static_cast<uid_t>(-1),
                    unsigned memlock_kb = 0)
{
    std::vector<std::string> argv = {OFFLOAD_TOOL};
    argv.insert(argv.end(), args.begin(), args.end());
    if (memlock_kb != 0) {
        std::string cmd = "ulimit -l " + std::to_string(memlock_kb) + " && exec";
        for (const auto &a : argv)
            cmd += " '" + a + "'";
        argv = {"sh", "-c", cmd};
    }
    Proc::Options o;
    o.pipe_out = true;
    o.uid = uid;
    o.gid = uid == static_cast<uid_t>(-1) ? static_cast<gid_t>(-1) : static_cast<gid_t>(uid);
    Proc p(argv, base_env(), o);
    if (!p.wait(30000))
        p.kill_all();
    *out = p.out();
    return p.exit_code();
}

// `rdmasock ARGS...` (the launcher's subcommands) without the library; its stdout.
std::string run_tool(const std::vector<std::string> &args, uid_t uid = static_cast<uid_t>(-1))
{
    std::string out;
    run_tool_status(args, &out, uid);
    return out;
}

// The rows of `rdmasock ss --json` (a JSON array of objects); *ok false when it is not
// JSON at all.
std::vector<boost::property_tree::ptree> ss_rows(const std::string &json, bool *ok = nullptr)
{
    std::vector<boost::property_tree::ptree> rows;
    bool parsed = false;
    try {
        boost::property_tree::ptree j;
        std::istringstream is(json);
        boost::property_tree::read_json(is, j);
        for (auto &r : j)
            rows.push_back(r.second);
        parsed = true;
    } catch (const std::exception &) {
    }
    if (ok != nullptr)
        *ok = parsed;
    return rows;
}

// `rdmasock ss --json ARGS...` printed an empty array (JSON, no row).
bool ss_empty(const std::string &json)
{
    bool ok = false;
    return ss_rows(json, &ok).empty() && ok;
}

// Issue 16, point 1: `rdmasock ss` lists the live connections of running programs (an
// iperf3 server and client, both offloaded) with their transport and bytes, filters
// them, shows another user nothing, and nothing once the programs are gone; `rdmasock
// stat` counts them.
void tools_ss_live()
{
    const std::string name = "tools/ss_live";
    WorkDir dir;
    dir.keep = cfg.keep;
    int port = free_port(cfg.addr);
    const std::string ps = std::to_string(port);
    Proc sp({"iperf3", "-s", "-1", "-B", cfg.addr, "-p", ps}, prog_env(dir / "s.log"), dir / "s.err", dir / "s.out");
    BOOST_REQUIRE_MESSAGE(wait_listener(port, 20000), name << ": no iperf3 listener");
    Proc cp({"iperf3", "-c", cfg.addr, "-p", ps, "-t", "12", "-b", "20M"}, prog_env(dir / "c.log"), dir / "c.err",
            dir / "c.out");
    // Both processes, both connections (control and data) on RDMA, data moving.
    std::vector<boost::property_tree::ptree> rows;
    std::string json;
    const double t0 = now_ms();
    bool seen = false;
    while (!seen && now_ms() - t0 < 5000) {
        json = run_tool({"ss", "--json", "--port", ps});
        rows = ss_rows(json);
        unsigned rdma = 0, moving = 0;
        for (auto &r : rows) {
            rdma += r.get<std::string>("transport", "") == "rdma" && r.get<std::string>("phase", "") == "rdma";
            moving += r.get<uint64_t>("bytes_sent", 0) > 100000 || r.get<uint64_t>("bytes_received", 0) > 100000;
        }
        seen = rows.size() == 4 && rdma == 4 && moving == 2;
        if (!seen)
            usleep(300000);
    }
    BOOST_CHECK_MESSAGE(seen, name << ": want 4 rows on RDMA (control and data, each end), data moving; got\n" << json);
    // A second look: the data connection's counts have grown at both ends.
    usleep(1000000);
    const std::string json2 = run_tool({"ss", "--json", "--port", ps});
    unsigned grown = 0;
    for (auto &r : rows) {
        const uint64_t before = r.get<uint64_t>("bytes_sent", 0) + r.get<uint64_t>("bytes_received", 0);
        if (before <= 100000)
            continue;
        for (auto &r2 : ss_rows(json2))
            if (r2.get<int>("pid", 0) == r.get<int>("pid", -1) && r2.get<int>("fd", 0) == r.get<int>("fd", -1))
                grown += r2.get<uint64_t>("bytes_sent", 0) + r2.get<uint64_t>("bytes_received", 0) > before;
    }
    BOOST_CHECK_MESSAGE(grown == 2, name << ": byte counts grown at " << grown << " of 2 data connection ends\n"
                                         << json << "\n" << json2);
    unsigned server = 0, client = 0;
    for (auto &r : rows) {
        const int pid = r.get<int>("pid", 0);
        BOOST_CHECK_EQUAL(r.get<std::string>("program", ""), "iperf3");
        BOOST_CHECK_EQUAL(r.get<std::string>("reason", ""), "-");
        if (r.get<std::string>("role", "") == "server") {
            ++server;
            BOOST_CHECK_EQUAL(pid, sp.pid());
        } else if (r.get<std::string>("role", "") == "client") {
            ++client;
            BOOST_CHECK_EQUAL(pid, cp.pid());
        }
    }
    BOOST_CHECK_MESSAGE(server == 2 && client == 2, name << ": roles\n" << json);
    // Each connection end's link: a device, port and queue pair of its own, one that
    // `rdma resource show qp` lists.
    std::string qps;
    run_quiet({"rdma", "resource", "show", "qp"}, 5000, &qps);
    std::set<std::string> links;
    static const std::regex link_re(R"(([A-Za-z0-9_]+):(\d+)/(\d+))");
    for (auto &r : rows) {
        const std::string link = r.get<std::string>("link", "");
        std::smatch m;
        BOOST_CHECK_MESSAGE(std::regex_match(link, m, link_re) && links.insert(link).second &&
                                qps.find("link " + m[1].str() + "/" + m[2].str()) != std::string::npos &&
                                qps.find("lqpn " + m[3].str() + " ") != std::string::npos,
                            name << ": link '" << link << "'\n" << json << "\nrdma resource show qp:\n" << qps);
    }
    // Filters, another user, the totals, the table.
    std::string tcp = run_tool({"ss", "--json", "--port", ps, "-t", "tcp"});
    BOOST_CHECK_MESSAGE(ss_empty(tcp), name << ": -t tcp\n" << tcp);
    std::string one = run_tool({"ss", "--json", "-p", std::to_string(cp.pid())});
    BOOST_CHECK_MESSAGE(ss_rows(one).size() == 2, name << ": -p client\n" << one);
    // (The tool asks every process; the library answers only its own user or root.)
    std::string nobody = run_tool({"ss", "--json"}, 65534);
    BOOST_CHECK_MESSAGE(ss_empty(nobody), name << ": user nobody sees\n" << nobody);
    std::string all = run_tool({"ss", "-a", "--port", ps});
    BOOST_CHECK_MESSAGE(all.find("listener") != std::string::npos && all.find("TRANSPORT") != std::string::npos,
                        name << ": ss -a (the listener, the table's header)\n" << all);
    std::string st = run_tool({"stat", "--json", "-p", std::to_string(sp.pid())});
    uint64_t setup_max = 0, setup_mean = 0;
    try {
        boost::property_tree::ptree j;
        std::istringstream is(st);
        boost::property_tree::read_json(is, j);
        BOOST_CHECK_EQUAL(j.get<int>("total.processes"), 1);
        BOOST_CHECK_EQUAL(j.get<int>("total.live_rdma"), 2);
        BOOST_CHECK(j.get<uint64_t>("total.live_bytes_received") > 100000);
        BOOST_CHECK_EQUAL(j.get<int>("total.switches"), 2);
        setup_max = j.get<uint64_t>("total.setup_us_max");
        setup_mean = j.get<uint64_t>("total.setup_us_mean");
    } catch (const std::exception &e) {
        BOOST_ERROR(name << ": stat --json: " << e.what() << "\n" << st);
    }
    bool c_ok = cp.wait(40000), s_ok = sp.wait(10000);
    if (!c_ok)
        cp.kill_all();
    if (!s_ok)
        sp.kill_all();
    BOOST_CHECK_MESSAGE(c_ok && s_ok && cp.exit_code() == 0 && sp.exit_code() == 0, name << ": iperf3 failed\n"
                                                                                    << read_file(dir / "c.err"));
    // The info-level lines of the engine's start and of each switch (rdmasock(7), LOGGING).
    for (const char *side : {"s", "c"}) {
        const std::string log = read_file(dir / (std::string(side) + ".log"));
        static const std::regex start_re(R"(info: event=start version=\S+ program=iperf3 ports=\S*:active\S* ring_kb=\d+ memlock_kb=(\d+|unlimited) connect_wait=1)");
        static const std::regex switch_re(R"(info: event=switch fd=\d+ role=(client|server) local=\S+ peer=\S+ setup_us=\d+ tcp_bytes_sent=\d+ tcp_bytes_received=\d+)");
        const auto n_switch = std::distance(std::sregex_iterator(log.begin(), log.end(), switch_re), std::sregex_iterator());
        BOOST_CHECK_MESSAGE(std::regex_search(log, start_re) && n_switch == 2,
                            name << ": want an event=start line and 2 event=switch lines in the " << side << " log\n" << log);
        if (*side != 's')
            continue;
        // The server's setup times in rdmasock stat: those of its two switch lines.
        static const std::regex us_re(R"(event=switch .* setup_us=(\d+) )");
        uint64_t max = 0, sum = 0;
        for (std::sregex_iterator it(log.begin(), log.end(), us_re), end; it != end; ++it) {
            const uint64_t us = std::stoull((*it)[1].str());
            max = std::max(max, us);
            sum += us;
        }
        BOOST_CHECK_MESSAGE(setup_max == max && setup_mean == sum / 2 && max > 0,
                            name << ": stat setup_us_max=" << setup_max << " setup_us_mean=" << setup_mean
                                 << ", the switch lines: max " << max << ", mean " << sum / 2 << "\n" << st);
    }
    std::string after = run_tool({"ss", "--json", "--port", ps});
    BOOST_CHECK_MESSAGE(ss_empty(after), name << ": the programs are gone, yet\n" << after);
}

// Issue 16, point 4: `rdmasock check HOST:PORT` says RDMA for a server under the library
// (exit 0), TCP with reason peer_no_rdmasock and advice for one without (exit 1), TCP
// with reason memlock under `ulimit -l 64` (an unprivileged user), and the probe fails
// (exit 2) where nothing listens; `rdmasock doctor` finds the VM's port.  And (point 1)
// `rdmasock ss` shows a live client of the server without rdmasock as tcp
// peer_no_rdmasock.
void tools_check()
{
    const std::string name = "tools/check";
    WorkDir dir;
    dir.keep = cfg.keep;
    const int p1 = free_port(cfg.addr), p2 = free_port(cfg.addr);
    Proc with({"iperf3", "-s", "-B", cfg.addr, "-p", std::to_string(p1)}, prog_env(dir / "s1.log"), dir / "s1.err",
              dir / "s1.out");
    Proc without({"iperf3", "-s", "-B", cfg.addr, "-p", std::to_string(p2)}, base_env(), dir / "s2.err", dir / "s2.out");
    bool plain_up = false;
    for (int i = 0; i < 500 && !(plain_up = tcp_listening(p2)); ++i)
        usleep(20000);
    BOOST_REQUIRE_MESSAGE(wait_listener(p1, 20000) && plain_up, name << ": no iperf3 listeners");
    std::string out;
    int st = run_tool_status({"check", cfg.addr + ":" + std::to_string(p1)}, &out);
    BOOST_CHECK_MESSAGE(st == 0 && out.find("RDMA (the connection went over RDMA)") != std::string::npos,
                        name << ": a server under the library: exit " << st << "\n" << out);
    st = run_tool_status({"check", "--json", cfg.addr + ":" + std::to_string(p2)}, &out);
    try {
        boost::property_tree::ptree j;
        std::istringstream is(out);
        boost::property_tree::read_json(is, j);
        BOOST_CHECK_EQUAL(st, 1);
        BOOST_CHECK_EQUAL(j.get<bool>("rdma"), false);
        BOOST_CHECK_EQUAL(j.get<std::string>("reason"), "peer_no_rdmasock");
        BOOST_CHECK(j.get<std::string>("advice").find("does not run rdmasock") != std::string::npos);
    } catch (const std::exception &e) {
        BOOST_ERROR(name << ": check --json of a plain server: " << e.what() << "\n" << out);
    }
    st = run_tool_status({"check", "--json", cfg.addr + ":" + std::to_string(p1)}, &out, 65534, 64);
    BOOST_CHECK_MESSAGE(st == 1 && out.find("\"reason\":\"memlock\"") != std::string::npos &&
                            out.find("LimitMEMLOCK") != std::string::npos,
                        name << ": ulimit -l 64: exit " << st << "\n" << out);
    {
        Proc cl({"iperf3", "-c", cfg.addr, "-p", std::to_string(p2), "-t", "8", "-b", "1M"}, prog_env(dir / "c2.log"),
                dir / "c2.err", dir / "c2.out");
        std::string rows;
        bool seen = false;
        for (int i = 0; i < 25 && !seen; ++i) {
            usleep(200000);
            rows = run_tool({"ss", "--json", "-p", std::to_string(cl.pid())});
            for (auto &r : ss_rows(rows))
                seen = seen || (r.get<std::string>("transport", "") == "tcp" &&
                                r.get<std::string>("reason", "") == "peer_no_rdmasock" &&
                                r.get<std::string>("role", "") == "client");
        }
        BOOST_CHECK_MESSAGE(seen, name << ": a live client of a server without rdmasock, in ss:\n" << rows);
        cl.kill_all();
        cl.wait(5000);
    }
    with.kill_all();
    without.kill_all();
    with.wait(5000);
    without.wait(5000);
    st = run_tool_status({"check", cfg.addr + ":" + std::to_string(p2)}, &out);
    BOOST_CHECK_MESSAGE(st == 2 && out.find("the probe failed (connect:ECONNREFUSED)") != std::string::npos,
                        name << ": nothing listening: exit " << st << "\n" << out);
    st = run_tool_status({"doctor", "--json"}, &out);
    BOOST_CHECK_MESSAGE(st == 0 && out.find("\"ready\":true") != std::string::npos &&
                            out.find(" ACTIVE") != std::string::npos,
                        name << ": doctor: exit " << st << "\n" << out);
}

void program_iperf3(const std::string &variant, const std::vector<std::string> &flags, int streams,
                    bool async = false)
{
    const std::string name = "programs/iperf3_" + variant;
    WorkDir dir;
    dir.keep = cfg.keep;
    int port = free_port(cfg.addr);
    ProgRun sr, cr;
    sr.name = "iperf3 server";
    cr.name = "iperf3 client " + variant;
    Proc sp({"iperf3", "-s", "-1", "-B", cfg.addr, "-p", std::to_string(port)}, prog_env(dir / "s.log", !async),
            dir / "s.err", dir / "s.out");
    bool listening = wait_listener(port, 20000);
    BOOST_CHECK_MESSAGE(listening, name << ": the iperf3 server has no TCP and RDMA listener on port " << port);
    std::vector<std::string> argv = {"iperf3", "-c", cfg.addr, "-p", std::to_string(port), "-n", async ? "200M" : "20M", "-J"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    double t0 = now_ms();
    Proc cp(argv, prog_env(dir / "c.log", !async), dir / "c.err", dir / "c.out");
    bool c_ok = cp.wait(120000);
    if (!c_ok)
        cp.kill_all();
    bool s_ok = sp.wait(c_ok ? 20000 : 1000);
    if (!s_ok)
        sp.kill_all();
    finish_prog(sr, sp, dir, "s", !s_ok);
    finish_prog(cr, cp, dir, "c", !c_ok);
    note(name + ": " + std::to_string(static_cast<long>(now_ms() - t0)) + " ms for the client run");
    std::string both = describe_prog(sr) + describe_prog(cr);
    BOOST_CHECK_MESSAGE(cr.exit_code == 0 && sr.exit_code == 0, name << ": iperf3 failed\n" << both);
    BOOST_CHECK_MESSAGE(sr.log_problems.empty() && cr.log_problems.empty(), name << ": log problems\n" << both);
    // The JSON report.
    boost::property_tree::ptree j;
    try {
        std::istringstream is(cr.out);
        boost::property_tree::read_json(is, j);
    } catch (const std::exception &e) {
        BOOST_ERROR(name << ": no JSON from the client: " << e.what() << "\n" << both);
        return;
    }
    // Data streams: client port -> (sender is client, sender bytes, receiver bytes).
    struct S {
        bool client_sends = true;
        uint64_t sent = 0, received = 0;
    };
    std::map<int, int> port_of_socket;
    for (auto &c : j.get_child("start.connected"))
        port_of_socket[c.second.get<int>("socket")] = c.second.get<int>("local_port");
    std::map<int, S> ds;
    for (auto &st : j.get_child("end.streams")) {
        S s;
        int sock = st.second.get<int>("sender.socket");
        s.client_sends = st.second.get<bool>("sender.sender");
        s.sent = st.second.get<uint64_t>("sender.bytes");
        s.received = st.second.get<uint64_t>("receiver.bytes");
        ds[port_of_socket[sock]] = s;
    }
    // The client writes iperf3's 37-byte cookie on every data connection first; the
    // JSON counts only the test data.
    const uint64_t kCookie = 37;
    BOOST_CHECK_MESSAGE(static_cast<int>(ds.size()) == streams,
                        name << ": " << ds.size() << " data streams in the JSON, want " << streams);
    auto port_of = [](const std::string &hostport) {
        size_t c = hostport.rfind(':');
        return c == std::string::npos ? -1 : std::atoi(hostport.c_str() + c + 1);
    };
    // Every connection of both programs on RDMA; data counters as the JSON says.
    int client_data = 0, server_data = 0;
    uint64_t total_sent = 0;
    for (const Fields &f : cr.closes) {
        BOOST_CHECK_MESSAGE(field(f, "transport") == "rdma",
                            name << ": client connection local=" << field(f, "local") << " transport="
                                 << field(f, "transport") << " reason=" << field(f, "reason"));
        auto it = ds.find(port_of(field(f, "local")));
        if (it == ds.end())
            continue;  // the control connection
        ++client_data;
        const S &s = it->second;
        if (s.client_sends) {
            total_sent += num(f, "bytes_sent") - kCookie;
            BOOST_CHECK_MESSAGE(num(f, "bytes_sent") == s.sent + kCookie && num(f, "bytes_received") == 0,
                                name << ": client stream " << field(f, "local") << " bytes_sent=" << field(f, "bytes_sent")
                                     << " bytes_received=" << field(f, "bytes_received") << ", the JSON says "
                                     << s.sent << " sent (+ the 37-byte cookie), 0 received");
        } else {
            BOOST_CHECK_MESSAGE(num(f, "bytes_sent") == kCookie && num(f, "bytes_received") >= s.received &&
                                    num(f, "bytes_received") <= s.sent,
                                name << ": client stream " << field(f, "local") << " bytes_sent=" << field(f, "bytes_sent")
                                     << " bytes_received=" << field(f, "bytes_received") << ", the JSON says "
                                     << s.received << " received of " << s.sent << " sent (and the cookie: 37 sent)");
        }
    }
    for (const Fields &f : sr.closes) {
        BOOST_CHECK_MESSAGE(field(f, "transport") == "rdma",
                            name << ": server connection peer=" << field(f, "peer") << " transport="
                                 << field(f, "transport") << " reason=" << field(f, "reason"));
        auto it = ds.find(port_of(field(f, "peer")));
        if (it == ds.end())
            continue;
        ++server_data;
        const S &s = it->second;
        if (!s.client_sends) {
            total_sent += num(f, "bytes_sent");
            BOOST_CHECK_MESSAGE(num(f, "bytes_sent") == s.sent && num(f, "bytes_received") == kCookie,
                                name << ": server stream " << field(f, "peer") << " bytes_sent=" << field(f, "bytes_sent")
                                     << " bytes_received=" << field(f, "bytes_received") << ", the JSON says " << s.sent
                                     << " sent (and the cookie: 37 received)");
        } else {
            BOOST_CHECK_MESSAGE(num(f, "bytes_sent") == 0 && num(f, "bytes_received") >= s.received + kCookie &&
                                    num(f, "bytes_received") <= s.sent + kCookie,
                                name << ": server stream " << field(f, "peer") << " bytes_sent=" << field(f, "bytes_sent")
                                     << " bytes_received=" << field(f, "bytes_received") << ", the JSON says "
                                     << s.received << " received of " << s.sent << " sent (+ the 37-byte cookie)");
        }
    }
    BOOST_CHECK_MESSAGE(client_data == streams && server_data == streams,
                        name << ": data connections in the logs: client " << client_data << ", server " << server_data
                             << ", want " << streams << "\n" << both);
    BOOST_CHECK_MESSAGE(cr.closes.size() == static_cast<size_t>(streams) + 1 &&
                            sr.closes.size() == static_cast<size_t>(streams) + 1,
                        name << ": close lines: client " << cr.closes.size() << ", server " << sr.closes.size()
                             << ", want " << streams + 1 << " (control + data)");
    BOOST_CHECK_MESSAGE(total_sent >= (20u << 20), name << ": " << total_sent << " data bytes sent in all, want >= 20M");
    for (const char *k : {"sum_sent", "sum_received", "sum_sent_bidir_reverse", "sum_received_bidir_reverse"})
        if (auto v = j.get_optional<double>(std::string("end.") + k + ".bits_per_second"))
            note(name + ": " + k + " " + std::to_string(static_cast<long>(*v / 1e6)) + " Mbit/s (" +
                 std::to_string(j.get<uint64_t>(std::string("end.") + k + ".bytes")) + " bytes)");
}

// n pseudo-random bytes (xorshift64 from seed); printable: '!'..'z', no line breaks.
std::string random_bytes(size_t n, uint64_t seed, bool printable)
{
    std::string out(n, '\0');
    for (auto &ch : out) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        ch = static_cast<char>(printable ? '!' + (seed >> 32) % 90 : seed >> 32);
    }
    return out;
}

// redis: redis-server and its own clients, all under the library.  redis-benchmark
// (hiredis: nonblocking connect, then a second connect() that reports the handshake's
// completion; epoll; pipelined requests) in the default, asynchronous mode, so its
// connections switch to RDMA mid-stream; then redis-cli stores a 1 MB value and reads it
// back, on connections that are on RDMA from their first byte.
void program_redis(int clients)
{
    const std::string name = "programs/redis_c" + std::to_string(clients);
    WorkDir dir;
    dir.keep = cfg.keep;
    const std::string port = std::to_string(free_port(cfg.addr));
    ProgRun sr;
    sr.name = "redis-server";
    Proc sp({"redis-server", "--port", port, "--bind", cfg.addr, "--save", "", "--appendonly", "no",
             "--protected-mode", "no"},
            prog_env(dir / "s.log", false), dir / "s.err", dir / "s.out");
    BOOST_REQUIRE_MESSAGE(wait_listener(std::stoi(port), 20000),
                          name << ": redis-server has no TCP and RDMA listener on port " << port);
    double t0 = now_ms();
    ProgRun br;
    br.name = "redis-benchmark";
    const std::string n = std::to_string(clients == 1 ? 1000 : 500 * clients);
    Proc bp({"redis-benchmark", "-h", cfg.addr, "-p", port, "-c", std::to_string(clients), "-n", n, "-t",
             "set,get,lpush,lpop,incr", "-q"},
            prog_env(dir / "b.log", false), dir / "b.err", dir / "b.out");
    bool b_ok = bp.wait(120000);
    if (!b_ok)
        bp.kill_all();
    finish_prog(br, bp, dir, "b", !b_ok);
    note(name + ": " + std::to_string(static_cast<long>(now_ms() - t0)) + " ms for redis-benchmark");
    // A 1 MB value (printable, one line) stored and read back.
    const std::string value = random_bytes(1u << 20, 0x9E3779B97F4A7C15ull, true);
    write_file(dir / "value", value);
    ProgRun wr, rr;
    wr.name = "redis-cli set";
    rr.name = "redis-cli get";
    {
        Proc w({"sh", "-c", "exec redis-cli -h " + cfg.addr + " -p " + port + " -x set big < " + (dir / "value")},
               prog_env(dir / "w.log"), dir / "w.err", dir / "w.out");
        bool ok = w.wait(60000);
        if (!ok)
            w.kill_all();
        finish_prog(wr, w, dir, "w", !ok);
    }
    {
        Proc r({"redis-cli", "-h", cfg.addr, "-p", port, "--raw", "get", "big"}, prog_env(dir / "r.log"),
               dir / "r.err", dir / "r.out");
        bool ok = r.wait(60000);
        if (!ok)
            r.kill_all();
        finish_prog(rr, r, dir, "r", !ok);
    }
    sp.signal(SIGTERM);
    bool s_ok = sp.wait(20000);
    if (!s_ok)
        sp.kill_all();
    finish_prog(sr, sp, dir, "s", !s_ok);
    const std::string all = describe_prog(sr) + describe_prog(br) + describe_prog(wr) + describe_prog(rr);

    BOOST_CHECK_MESSAGE(br.exit_code == 0, name << ": redis-benchmark did not finish\n" << all);
    for (const char *t : {"SET", "GET", "LPUSH", "LPOP", "INCR"})
        BOOST_CHECK_MESSAGE(br.out.find(std::string(t) + ": ") != std::string::npos &&
                                br.out.find("requests per second") != std::string::npos,
                            name << ": no " << t << " result from redis-benchmark\n" << all);
    BOOST_CHECK_MESSAGE(wr.exit_code == 0 && wr.out.find("OK") != std::string::npos, name << ": SET failed\n" << all);
    BOOST_CHECK_MESSAGE(rr.exit_code == 0 && rr.out == value + "\n",
                        name << ": GET returned " << rr.out.size() << " bytes, want " << value.size() + 1
                             << (rr.out.compare(0, value.size(), value) == 0 ? " (same prefix)" : " (different)"));
    BOOST_CHECK_MESSAGE(sr.exit_code == 0, name << ": redis-server status " << sr.exit_code << "\n" << all);
    for (const ProgRun *r : {&sr, &br, &wr, &rr})
        BOOST_CHECK_MESSAGE(r->log_problems.empty(), name << ": log problems [" << r->name << "]\n" << all);
    // redis-benchmark opens `clients` connections per test (5 tests), after a short
    // CONFIG GET connection that closes before its switch (closed_early).  Every
    // connection on RDMA but that one, or one whose test ended before its switch (also
    // closed_early: a test of 500 requests takes a few seconds here, the switch a few
    // hundred ms).  redis-cli exits without close(): its close line comes from the
    // library's exit step; its two connections are on RDMA from their first byte.
    for (const ProgRun *r : {&wr, &rr}) {
        BOOST_CHECK_MESSAGE(r->closes.size() == 1, name << ": " << r->closes.size() << " close lines from "
                                                        << r->name << ", want 1 (logged at its exit)\n" << all);
        for (const Fields &f : r->closes)
            BOOST_CHECK_MESSAGE(field(f, "transport") == "rdma" &&
                                    num(f, r == &wr ? "bytes_sent" : "bytes_received") > value.size(),
                                name << ": " << r->name << " transport=" << field(f, "transport")
                                     << " bytes_sent=" << field(f, "bytes_sent")
                                     << " bytes_received=" << field(f, "bytes_received"));
    }
    int rdma = 0, early = 0;
    for (const Fields &f : br.closes) {
        if (field(f, "transport") == "rdma")
            ++rdma;
        else if (field(f, "reason") == "closed_early")
            ++early;
        else
            BOOST_ERROR(name << ": benchmark connection local=" << field(f, "local") << " transport="
                             << field(f, "transport") << " reason=" << field(f, "reason"));
    }
    const int want = 5 * clients;
    BOOST_CHECK_MESSAGE(rdma + early == want + 1 && rdma >= want - clients,
                        name << ": benchmark connections: " << rdma << " on RDMA, " << early
                             << " closed before their switch; want " << want + 1 << " in all, at least "
                             << want - clients << " on RDMA\n" << all);
    int srv_rdma = 0;
    for (const Fields &f : sr.closes)
        srv_rdma += field(f, "transport") == "rdma";
    BOOST_CHECK_MESSAGE(srv_rdma == rdma + 2, name << ": " << srv_rdma << " server connections on RDMA, want "
                                                   << rdma + 2 << " (the benchmark's and redis-cli's two)\n" << all);
    note(name + ": " + std::to_string(rdma) + " of " + std::to_string(want + 1) + " benchmark connections on RDMA");
}

// The README's main job, tools/rdmasock-iperf (inside the VM, the device here): iperf3's
// JSON summary, and every connection end on RDMA.
void program_rdmasock_iperf()
{
    const std::string name = "programs/rdmasock_iperf";
    const std::string script = OFFLOAD_IPERF_SCRIPT;
    const std::string dir = script.substr(0, script.rfind('/'));
    if (access((dir + "/rdmasock").c_str(), X_OK) != 0) {
        note(name + ": skipped (a build outside the source tree: the script runs tools/rdmasock beside it)");
        return;
    }
    Env env = base_env();
    set_var(env, "RDMASOCK_IPERF_INNER", "1");
    set_var(env, "RDMASOCK_VM", "1");
    set_var(env, "RDMASOCK_VM_ADDR", cfg.addr);
    Proc::Options o;
    o.pipe_out = true;
    Proc p({script, "--no-deps", "--no-bench", "-t", "2"}, env, o);
    const bool ok = p.wait(120000);
    if (!ok)
        p.kill_all();
    const std::string out = p.out();
    BOOST_CHECK_MESSAGE(ok && p.exit_code() == 0, name << ": exit " << p.exit_code() << "\n" << out);
    static const std::regex sum(R"((^|\n)(sender|receiver) +[0-9.]+ s +[0-9.]+ MBytes +([0-9.]+) Mbits/sec)");
    int sums = 0;
    for (std::sregex_iterator it(out.begin(), out.end(), sum), end; it != end; ++it)
        sums += std::stod((*it)[3].str()) > 0;
    BOOST_CHECK_MESSAGE(sums == 2, name << ": " << sums << " of the sender and receiver lines\n" << out);
    std::smatch m;
    BOOST_CHECK_MESSAGE(std::regex_search(out, m, std::regex(R"(rdmasock-iperf: (\d+) of (\d+) connection ends went over RDMA)")) &&
                            m[1] == m[2] && std::stoi(m[2]) >= 4,
                        name << ": not every connection end on RDMA\n" << out);
}

// A rule keeps redis-cli's connections to port 6379 on TCP (issue 16): its close line
// says reason=rule and `rdmasock rules test` names the line; the same redis-cli to a
// server on another port, and redis-benchmark to 6379, are not matched and go over RDMA.
void program_redis_rule()
{
    const std::string name = "programs/redis_rule";
    WorkDir dir;
    dir.keep = cfg.keep;
    const std::string rules = dir / "rdmasock.conf";
    const std::string rule_line = "tcp  redis-cli  client  *  6379";
    write_file(rules, "# redis-cli talks to the cache over TCP\n" + rule_line + "\n");
    auto env = [&](const std::string &log) {
        Env e = prog_env(log);
        set_var(e, "RDMASOCK_RULES_FILE", rules);
        return e;
    };
    const std::string other = std::to_string(free_port(cfg.addr));
    std::vector<std::unique_ptr<Proc>> servers;
    ProgRun s1, s2;
    s1.name = "redis-server 6379";
    s2.name = "redis-server " + other;
    for (const std::string &port : {std::string("6379"), other}) {
        const std::string b = port == "6379" ? "s1" : "s2";
        servers.push_back(std::make_unique<Proc>(
            std::vector<std::string>{"redis-server", "--port", port, "--bind", cfg.addr, "--save", "", "--appendonly",
                                     "no", "--protected-mode", "no"},
            env(dir / (b + ".log")), dir / (b + ".err"), dir / (b + ".out")));
        BOOST_REQUIRE_MESSAGE(wait_listener(std::stoi(port), 20000),
                              name << ": redis-server has no TCP and RDMA listener on port " << port);
    }
    auto client = [&](ProgRun &r, const std::string &base, const std::vector<std::string> &argv) {
        r.name = base;
        Proc p(argv, env(dir / (base + ".log")), dir / (base + ".err"), dir / (base + ".out"));
        bool ok = p.wait(60000);
        if (!ok)
            p.kill_all();
        finish_prog(r, p, dir, base, !ok);
    };
    ProgRun ruled, free_cli, bench;
    client(ruled, "cli6379", {"redis-cli", "-h", cfg.addr, "-p", "6379", "set", "k", "v"});
    client(free_cli, "cliother", {"redis-cli", "-h", cfg.addr, "-p", other, "set", "k", "v"});
    client(bench, "bench", {"redis-benchmark", "-h", cfg.addr, "-p", "6379", "-c", "1", "-n", "200", "-t", "ping", "-q"});
    for (size_t i = 0; i < servers.size(); ++i) {
        ProgRun &r = i == 0 ? s1 : s2;
        servers[i]->signal(SIGTERM);
        bool ok = servers[i]->wait(20000);
        if (!ok)
            servers[i]->kill_all();
        finish_prog(r, *servers[i], dir, i == 0 ? "s1" : "s2", !ok);
    }
    const std::string all =
        describe_prog(ruled) + describe_prog(free_cli) + describe_prog(bench) + describe_prog(s1) + describe_prog(s2);
    for (const ProgRun *r : {&ruled, &free_cli, &bench, &s1, &s2})
        BOOST_CHECK_MESSAGE(r->exit_code == 0 && r->log_problems.empty(), name << ": " << r->name << "\n" << all);
    BOOST_CHECK_MESSAGE(ruled.out == "OK\n" && free_cli.out == "OK\n", name << ": SET\n" << all);
    BOOST_CHECK_MESSAGE(ruled.closes.size() == 1 && field(ruled.closes[0], "transport") == "tcp" &&
                            field(ruled.closes[0], "reason") == "rule",
                        name << ": redis-cli to 6379 is not kept on TCP by the rule\n" << all);
    BOOST_CHECK_MESSAGE(free_cli.closes.size() == 1 && field(free_cli.closes[0], "transport") == "rdma",
                        name << ": redis-cli to port " << other << " is not on RDMA\n" << all);
    BOOST_CHECK_MESSAGE(!bench.closes.empty() && field(bench.closes.back(), "transport") == "rdma",
                        name << ": redis-benchmark to 6379 is not on RDMA\n" << all);
    // The server end of the ruled connection: on TCP, its client asked for nothing.
    int s1_tcp = 0;
    for (const Fields &f : s1.closes)
        if (field(f, "transport") == "tcp") {
            ++s1_tcp;
            BOOST_CHECK_MESSAGE(field(f, "reason") == "peer_no_rdmasock", name << ": server end\n" << all);
        }
    BOOST_CHECK_MESSAGE(s1_tcp == 1, name << ": " << s1_tcp << " server connections on TCP, want 1\n" << all);
    // rules test names the line; another port is not matched.
    for (const std::string &port : {std::string("6379"), other}) {
        Env e = base_env();
        set_var(e, "RDMASOCK_RULES_FILE", rules);
        Proc::Options o;
        o.pipe_out = true;
        Proc t({OFFLOAD_TOOL, "rules", "test", "redis-cli", "client", cfg.addr + ":" + port}, e, o);
        if (!t.wait(30000))
            t.kill_all();
        const std::string want = port == "6379" ? "tcp: " + rules + ":2: " + rule_line + "\n"
                                                : "rdma: no rule in " + rules + " matches\n";
        BOOST_CHECK_MESSAGE(t.exit_code() == (port == "6379" ? 1 : 0) && t.out() == want,
                            name << ": rules test for port " << port << ": exit " << t.exit_code() << "\n"
                                 << t.out());
    }
}

// memcached (libevent; a dispatcher thread accepts and hands each connection to a
// worker thread, whose own epoll set watches it) and tests/offload/kvclient: four
// connections at once, each 400 rounds of set, get and compare (values of 1 byte to
// 100 KB), multi-gets of 16 keys, a delete; the default, asynchronous switch.
void program_memcached()
{
    const std::string name = "programs/memcached";
    WorkDir dir;
    dir.keep = cfg.keep;
    const std::string port = std::to_string(free_port(cfg.addr));
    ProgRun sr, cr;
    sr.name = "memcached";
    cr.name = "kvclient";
    std::vector<std::string> argv = {"memcached", "-l", cfg.addr, "-p", port, "-U", "0", "-t", "2", "-m", "256"};
    if (geteuid() == 0) {
        argv.push_back("-u");
        argv.push_back("root");
    }
    Proc sp(argv, prog_env(dir / "s.log", false), dir / "s.err", dir / "s.out");
    BOOST_REQUIRE_MESSAGE(wait_listener(std::stoi(port), 20000),
                          name << ": memcached has no TCP and RDMA listener on port " << port);
    const int conns = 4;
    double t0 = now_ms();
    Proc cp({OFFLOAD_KVCLIENT, "--addr", cfg.addr, "--port", port, "--conns", std::to_string(conns), "--ops", "400"},
            prog_env(dir / "c.log", false), dir / "c.err", dir / "c.out");
    bool c_ok = cp.wait(120000);
    if (!c_ok)
        cp.kill_all();
    finish_prog(cr, cp, dir, "c", !c_ok);
    note(name + ": " + std::to_string(static_cast<long>(now_ms() - t0)) + " ms for kvclient: " + cr.out);
    sp.signal(SIGTERM);
    bool s_ok = sp.wait(20000);
    if (!s_ok)
        sp.kill_all();
    finish_prog(sr, sp, dir, "s", !s_ok);
    const std::string all = describe_prog(sr) + describe_prog(cr);
    BOOST_CHECK_MESSAGE(cr.exit_code == 0 && cr.out.rfind("ok ", 0) == 0, name << ": kvclient failed\n" << all);
    BOOST_CHECK_MESSAGE(sr.log_problems.empty() && cr.log_problems.empty(), name << ": log problems\n" << all);
    int c_rdma = 0, s_rdma = 0;
    for (const Fields &f : cr.closes) {
        c_rdma += field(f, "transport") == "rdma";
        BOOST_CHECK_MESSAGE(field(f, "transport") == "rdma",
                            name << ": client connection local=" << field(f, "local") << " transport="
                                 << field(f, "transport") << " reason=" << field(f, "reason"));
    }
    for (const Fields &f : sr.closes)
        s_rdma += field(f, "transport") == "rdma";
    BOOST_CHECK_MESSAGE(c_rdma == conns && s_rdma == conns,
                        name << ": connections on RDMA: client " << c_rdma << ", server " << s_rdma << ", want "
                             << conns << "\n" << all);
}

// socat as a one-shot server (TCP-LISTEN without fork: it accepts one connection and
// closes its listening socket at once), a file each way, both ends under the library:
// byte-exact, and each connection on RDMA at both ends.
void program_socat_oneshot()
{
    const std::string name = "programs/socat_oneshot";
    WorkDir dir;
    dir.keep = cfg.keep;
    const std::string t = dir.path();
    const std::string body = random_bytes(8u << 20, 0x9E3779B97F4A7C15ull, false);
    write_file(t + "/in.bin", body);
    for (bool to_server : {true, false}) {
        const std::string tag = to_server ? "up" : "down";
        const std::string port = std::to_string(free_port(cfg.addr));
        const std::string listen = "TCP-LISTEN:" + port + ",bind=" + cfg.addr + ",reuseaddr";
        const std::string connect = "TCP:" + cfg.addr + ":" + port;
        const std::string in = "OPEN:" + t + "/in.bin", out = "OPEN:" + t + "/" + tag + ".bin,creat,trunc";
        ProgRun sr, cr;
        sr.name = "socat server (" + tag + ")";
        cr.name = "socat client (" + tag + ")";
        Proc sp(to_server ? std::vector<std::string>{"socat", "-u", listen, out} : std::vector<std::string>{"socat", "-u", in, listen},
                prog_env(t + "/s" + tag + ".log"), dir / ("s" + tag + ".err"), dir / ("s" + tag + ".out"));
        BOOST_REQUIRE_MESSAGE(wait_listener(std::stoi(port), 20000),
                              name << ": socat has no TCP and RDMA listener on port " << port);
        Proc cp(to_server ? std::vector<std::string>{"socat", "-u", in, connect} : std::vector<std::string>{"socat", "-u", connect, out},
                prog_env(t + "/c" + tag + ".log"), dir / ("c" + tag + ".err"), dir / ("c" + tag + ".out"));
        bool c_ok = cp.wait(60000), s_ok = sp.wait(20000);
        if (!c_ok)
            cp.kill_all();
        if (!s_ok)
            sp.kill_all();
        finish_prog(cr, cp, dir, "c" + tag, !c_ok);
        finish_prog(sr, sp, dir, "s" + tag, !s_ok);
        const std::string all = describe_prog(sr) + describe_prog(cr);
        BOOST_CHECK_MESSAGE(cr.exit_code == 0 && sr.exit_code == 0, name << " (" << tag << "): socat failed\n" << all);
        BOOST_CHECK_MESSAGE(read_file(t + "/" + tag + ".bin") == body, name << " (" << tag << "): the file differs");
        BOOST_CHECK_MESSAGE(sr.log_problems.empty() && cr.log_problems.empty(), name << ": log problems\n" << all);
        expect_all_rdma(name, {&sr, &cr}, 1, all);
    }
}

// socat TCP-LISTEN:...,fork EXEC:cat, an echo server that forks a child per connection
// (the child relays between the connection and cat), and three connections of a client
// that checks the echo byte for byte: every connection on RDMA at both ends, the
// server's in its fork children.
void program_socat_fork()
{
    const std::string name = "programs/socat_fork";
    WorkDir dir;
    dir.keep = cfg.keep;
    const std::string port = std::to_string(free_port(cfg.addr));
    ProgRun sr, cr;
    sr.name = "socat";
    cr.name = "peer client";
    Proc sp({"socat", "TCP-LISTEN:" + port + ",bind=" + cfg.addr + ",reuseaddr,fork", "EXEC:cat"},
            prog_env(dir / "s.log"), dir / "s.err", dir / "s.out");
    BOOST_REQUIRE_MESSAGE(wait_listener(std::stoi(port), 20000), name << ": socat has no TCP and RDMA listener");
    const std::string plan = "1048576:1048576:write:bidir,65536:65536:write:bidir,1048576:1048576:write:bidir";
    Proc cp({cfg.peer, "client", "--addr", cfg.addr, "--port", port, "--plan", plan, "--expect-echo"},
            prog_env(dir / "c.log"), dir / "c.err", dir / "c.out");
    await_prog(cr, cp, dir, "c", 60000);
    usleep(500 * 1000);  // (the children log their close as they end)
    sp.signal(SIGTERM);
    await_prog(sr, sp, dir, "s", 20000);
    const std::string all = describe_prog(sr) + describe_prog(cr);
    BOOST_CHECK_MESSAGE(cr.exit_code == 0, name << ": the client failed (exit 1: the echo differs)\n" << all);
    BOOST_CHECK_MESSAGE(sr.log_problems.empty() && cr.log_problems.empty(), name << ": log problems\n" << all);
    expect_all_rdma(name, {&sr, &cr}, 3, all);
}

// redis-server under load while BGSAVE forks it three times: redis-benchmark (4
// clients, SET and GET, every connection on RDMA from its first byte) runs while
// redis-cli asks for a BGSAVE every 400 ms; the fork child writes the dump with the
// parent's offloaded connections inherited (and leaves them alone).  The benchmark
// completes, the dumps succeed, a 1 MB value set before reads back the same after, and
// every redis-server connection is on RDMA (but redis-benchmark's CONFIG GET, closed
// before its switch when it is not waited for).
void program_redis_bgsave()
{
    const std::string name = "programs/redis_bgsave";
    WorkDir dir;
    dir.keep = cfg.keep;
    const std::string port = std::to_string(free_port(cfg.addr));
    ProgRun sr, br, lr;
    sr.name = "redis-server";
    br.name = "redis-benchmark";
    lr.name = "redis-cli";
    Proc sp({"redis-server", "--port", port, "--bind", cfg.addr, "--save", "", "--appendonly", "no",
             "--protected-mode", "no", "--dir", dir.path(), "--dbfilename", "dump.rdb"},
            prog_env(dir / "s.log"), dir / "s.err", dir / "s.out");
    BOOST_REQUIRE_MESSAGE(wait_listener(std::stoi(port), 20000), name << ": redis-server has no listener");
    const std::string value = random_bytes(1u << 20, 0x2545F4914F6CDD1Dull, true);
    write_file(dir / "value", value);
    const std::string cli = "redis-cli -h " + cfg.addr + " -p " + port;
    // One script: the value, then BGSAVE three times while the benchmark runs, then the
    // value read back and the persistence status.  (Its connections: one per command.)
    const std::string script = cli + " -x set big < " + (dir / "value") + " && sleep 0.5 && for i in 1 2 3; do " + cli +
                               " bgsave; sleep 0.4; done; sleep 1; " + cli + " --raw get big > " +
                               (dir / "got") + "; " + cli + " info persistence";
    Proc bp({"redis-benchmark", "-h", cfg.addr, "-p", port, "-c", "4", "-n", "6000", "-t", "set,get", "-q"},
            prog_env(dir / "b.log"), dir / "b.err", dir / "b.out");
    Proc lp({"sh", "-c", script}, prog_env(dir / "l.log"), dir / "l.err", dir / "l.out");
    await_prog(br, bp, dir, "b", 180000);
    await_prog(lr, lp, dir, "l", 60000);
    sp.signal(SIGTERM);
    await_prog(sr, sp, dir, "s", 20000);
    const std::string all = describe_prog(sr) + describe_prog(br) + describe_prog(lr);
    BOOST_CHECK_MESSAGE(br.exit_code == 0 && br.out.find("SET: ") != std::string::npos &&
                            br.out.find("GET: ") != std::string::npos,
                        name << ": redis-benchmark did not finish\n" << all);
    BOOST_CHECK_MESSAGE(lr.exit_code == 0 && read_file(dir / "got") == value + "\n",
                        name << ": the value did not read back the same\n" << all);
    size_t saves = 0;
    for (size_t at = 0; (at = lr.out.find("Background saving started", at)) != std::string::npos; ++at)
        ++saves;
    BOOST_CHECK_MESSAGE(lr.out.find("rdb_last_bgsave_status:ok") != std::string::npos && saves >= 2,
                        name << ": " << saves << " BGSAVEs started (want >= 2), or the last failed\n" << all);
    BOOST_CHECK_MESSAGE(sr.log_problems.empty() && br.log_problems.empty() && lr.log_problems.empty(),
                        name << ": log problems\n" << all);
    unsigned rdma = 0;
    for (const Fields &f : sr.closes) {
        if (field(f, "transport") == "rdma")
            ++rdma;
        else
            BOOST_CHECK_MESSAGE(field(f, "reason") == "closed_early",
                                name << ": redis-server connection transport=" << field(f, "transport")
                                     << " reason=" << field(f, "reason") << "\n" << all);
    }
    // 4 clients x 2 tests, and the script's 6 redis-cli connections.
    BOOST_CHECK_MESSAGE(rdma >= 14, name << ": " << rdma << " redis-server connections on RDMA, want >= 14\n" << all);
    std::string rates;  // redis-benchmark -q: progress lines end in \r, results in \n
    for (const std::string &l : split_lines(br.out))
        if (l.find("requests per second") != std::string::npos)
            rates += " " + l.substr(l.rfind('\r') == std::string::npos ? 0 : l.rfind('\r') + 1);
    note(name + ": " + std::to_string(rdma) + " redis-server connections on RDMA; redis-benchmark:" + rates);
}

// Python's socketserver as multi-process servers: an echo handler under
// ForkingTCPServer (the parent accepts and forks a child per connection), and the
// pre-fork pattern (a TCPServer whose process forks 2 workers that each serve_forever(),
// waiting in poll(), not epoll).  A client checks the echo of four connections byte for
// byte; every connection on RDMA at both ends.
void program_python_server(bool prefork)
{
    const std::string name = std::string("programs/python_") + (prefork ? "prefork" : "forking");
    WorkDir dir;
    dir.keep = cfg.keep;
    const std::string port = std::to_string(free_port(cfg.addr));
    write_file(dir / "server.py",
               "import os, socketserver, sys\n"
               "class Echo(socketserver.BaseRequestHandler):\n"
               "    def handle(self):\n"
               "        while True:\n"
               "            data = self.request.recv(65536)\n"
               "            if not data:\n"
               "                return\n"
               "            self.request.sendall(data)\n"
               "addr = (sys.argv[1], int(sys.argv[2]))\n"
               "if sys.argv[3] == 'forking':\n"
               "    socketserver.ForkingTCPServer.allow_reuse_address = True\n"
               "    socketserver.ForkingTCPServer(addr, Echo).serve_forever()\n"
               "socketserver.TCPServer.allow_reuse_address = True\n"
               "srv = socketserver.TCPServer(addr, Echo)\n"
               "for _ in range(2):\n"
               "    if os.fork() == 0:\n"
               "        srv.serve_forever()\n"
               "os.wait()\n");
    ProgRun sr, cr;
    sr.name = "python server";
    cr.name = "peer client";
    Proc sp({"python3", dir / "server.py", cfg.addr, port, prefork ? "prefork" : "forking"}, prog_env(dir / "s.log"),
            dir / "s.err", dir / "s.out");
    BOOST_REQUIRE_MESSAGE(wait_listener(std::stoi(port), 20000), name << ": no TCP and RDMA listener");
    usleep(300 * 1000);  // (the workers start)
    const std::string plan = "1048576:1048576:write:bidir,65536:65536:write:bidir,1048576:1048576:write:bidir,"
                             "262144:262144:write:bidir";
    Proc cp({cfg.peer, "client", "--addr", cfg.addr, "--port", port, "--plan", plan, "--expect-echo"},
            prog_env(dir / "c.log"), dir / "c.err", dir / "c.out");
    await_prog(cr, cp, dir, "c", 60000);
    usleep(500 * 1000);  // (the server's children log their close as they end)
    sp.kill_all();
    await_prog(sr, sp, dir, "s", 20000);
    const std::string all = describe_prog(sr) + describe_prog(cr);
    BOOST_CHECK_MESSAGE(cr.exit_code == 0, name << ": the client failed (exit 1: the echo differs)\n" << all);
    BOOST_CHECK_MESSAGE(sr.log_problems.empty() && cr.log_problems.empty(), name << ": log problems\n" << all);
    expect_all_rdma(name, {&sr, &cr}, 4, all);
}

// An nginx configuration in `t` (files under t/www) listening on addr:port: one process
// (`master_process off`) when workers is 0, else that many worker processes.
// (keepalive_requests: nginx closes a keep-alive connection after 1000 requests by
// default, and wrk opens another; the tests count connections.  A CI run served 2502
// requests in 3 s, one worker's connections got most of them, and nginx had 11 close
// lines where the test wanted 10.)
std::string nginx_conf(const std::string &t, const std::string &port, int workers, bool daemon = false)
{
    return std::string(daemon ? "daemon on;\n" : "daemon off;\n") +
           (workers == 0 ? "master_process off;\n" : "worker_processes " + std::to_string(workers) + ";\n") +
           "error_log " + t + "/error.log;\npid " + t + "/nginx.pid;\n" + (geteuid() == 0 ? "user root;\n" : "") +
           "events { worker_connections 64; }\n" + "http {\n access_log off;\n keepalive_requests 1000000;\n client_body_temp_path " + t +
           "/tmp;\n proxy_temp_path " + t + "/tmp;\n fastcgi_temp_path " + t + "/tmp;\n uwsgi_temp_path " + t +
           "/tmp;\n scgi_temp_path " + t + "/tmp;\n server {\n  listen " + cfg.addr + ":" + port + ";\n  root " + t +
           "/www;\n }\n}\n";
}

// An nginx site in a work directory: a file of `size` random bytes at /file.bin, the
// configuration for `workers` (nginx_conf), on a free port.
struct NginxSite {
    WorkDir dir;
    std::string port, body, t, url;
    NginxSite(size_t size, uint64_t seed, int workers, bool daemon = false)
    {
        dir.keep = cfg.keep;
        port = std::to_string(free_port(cfg.addr));
        body = random_bytes(size, seed, false);
        t = dir.path();
        mkdir((t + "/www").c_str(), 0755);
        write_file(t + "/www/file.bin", body);
        write_file(t + "/nginx.conf", nginx_conf(t, port, workers, daemon));
        url = "http://" + cfg.addr + ":" + port + "/file.bin";
    }
    std::vector<std::string> command() const { return {"nginx", "-e", t + "/error.log", "-p", t, "-c", t + "/nginx.conf"}; }
};

// nginx serving a 1 MB file to curl (checked byte for byte), both under the library.
// single: `master_process off`, one process that listens and accepts.  workers: 2
// worker processes (pre-fork: the master listens and holds the RDMA listener, a forked
// worker accepts; the master sends the request on to the worker's own RDMA listener).
// On RDMA either way (curl with RDMASOCK_CONNECT_WAIT=1, so its short exchange is on
// RDMA from the first byte).  Before, the workers' connections stayed on TCP
// (forked_listener).
void program_nginx(bool single)
{
    const std::string name = std::string("programs/nginx_") + (single ? "single" : "workers");
    NginxSite site(1u << 20, 0x2545F4914F6CDD1Dull, single ? 0 : 2);
    const WorkDir &dir = site.dir;
    const std::string &port = site.port, &body = site.body, &t = site.t;
    ProgRun sr, cr;
    sr.name = "nginx";
    cr.name = "curl";
    Proc sp(site.command(), prog_env(dir / "s.log", false), dir / "s.err", dir / "s.out");
    BOOST_REQUIRE_MESSAGE(wait_listener(std::stoi(port), 20000),
                          name << ": nginx has no TCP and RDMA listener on port " << port << "\n"
                               << read_file(t + "/error.log"));
    Proc cp({"curl", "-sS", "-o", t + "/got.bin", "http://" + cfg.addr + ":" + port + "/file.bin"},
            prog_env(dir / "c.log", true), dir / "c.err", dir / "c.out");
    await_prog(cr, cp, dir, "c", 60000);
    sp.signal(SIGQUIT);  // graceful: every process closes its connections
    await_prog(sr, sp, dir, "s", 20000);
    const std::string all = describe_prog(sr) + describe_prog(cr) + "error.log:\n" + read_file(t + "/error.log");
    BOOST_CHECK_MESSAGE(cr.exit_code == 0, name << ": curl failed\n" << all);
    const std::string got = read_file(t + "/got.bin");
    BOOST_CHECK_MESSAGE(got == body, name << ": curl got " << got.size() << " bytes, want the file's " << body.size()
                                          << (got.size() == body.size() ? " (different bytes)" : ""));
    BOOST_CHECK_MESSAGE(sr.log_problems.empty() && cr.log_problems.empty(), name << ": log problems\n" << all);
    BOOST_CHECK_MESSAGE(cr.closes.size() == 1 && sr.closes.size() == 1,
                        name << ": close lines: curl " << cr.closes.size() << ", nginx " << sr.closes.size()
                             << ", want 1 each\n" << all);
    for (const Fields &f : sr.closes)
        BOOST_CHECK_MESSAGE(field(f, "transport") == "rdma" && num(f, "bytes_sent") > body.size(),
                            name << ": nginx connection transport=" << field(f, "transport") << " reason="
                                 << field(f, "reason") << " bytes_sent=" << field(f, "bytes_sent"));
    for (const Fields &f : cr.closes)
        BOOST_CHECK_MESSAGE(field(f, "transport") == "rdma" && num(f, "bytes_received") > body.size(),
                            name << ": curl connection transport=" << field(f, "transport") << " reason="
                                 << field(f, "reason"));
}

// nginx with `workers` worker processes (pre-fork; 0: one process) serving a 16 KB
// file to wrk (8 keep-alive connections for 3 s, and the one wrk makes first to check
// the server), then curl fetching it once, checked byte for byte.  Every connection on
// RDMA at both ends; the note gives the request count (emulated soft-RoCE is slower than
// the VM's TCP: in one run 1139 requests against 3930 without the library) and how the
// connections spread over the workers.
// wrk's summary: "N requests in 3.00s, ..." and nothing about errors or non-2xx
// answers; at least `min` requests.  Returns N.
uint64_t check_wrk(const std::string &name, const ProgRun &r, uint64_t min, const std::string &all)
{
    uint64_t requests = 0;
    for (const std::string &l : split_lines(r.out))
        if (l.find(" requests in ") != std::string::npos)
            requests = std::strtoull(l.c_str(), nullptr, 10);
    BOOST_CHECK_MESSAGE(r.exit_code == 0 && requests >= min && r.out.find("Socket errors") == std::string::npos &&
                            r.out.find("Non-2xx") == std::string::npos,
                        name << ": wrk: exit " << r.exit_code << ", " << requests << " requests (want >= " << min
                             << ", no errors)\n" << all);
    return requests;
}

void program_nginx_wrk(int workers)
{
    const std::string name = "programs/nginx_wrk_workers" + std::to_string(workers);
    NginxSite site(16u << 10, 0x7A3C5E1D2B4F6A89ull, workers);
    const WorkDir &dir = site.dir;
    const std::string &port = site.port, &body = site.body, &t = site.t, &url = site.url;
    ProgRun sr, wr, cr;
    sr.name = "nginx";
    wr.name = "wrk";
    cr.name = "curl";
    Proc sp(site.command(), prog_env(dir / "s.log"), dir / "s.err", dir / "s.out");
    BOOST_REQUIRE_MESSAGE(wait_listener(std::stoi(port), 20000),
                          name << ": nginx has no TCP and RDMA listener on port " << port << "\n"
                               << read_file(t + "/error.log"));
    Proc wp({"wrk", "-t", "2", "-c", "8", "-d", "3s", url}, prog_env(dir / "w.log"), dir / "w.err", dir / "w.out");
    await_prog(wr, wp, dir, "w", 60000);
    Proc cp({"curl", "-sS", "-o", t + "/got.bin", url}, prog_env(dir / "c.log"), dir / "c.err", dir / "c.out");
    await_prog(cr, cp, dir, "c", 60000);
    sp.signal(SIGQUIT);  // graceful: every process closes its connections
    await_prog(sr, sp, dir, "s", 20000);
    const std::string all = describe_prog(sr) + describe_prog(wr) + describe_prog(cr) + "error.log:\n" +
                            read_file(t + "/error.log");
    const uint64_t requests = check_wrk(name, wr, 100, all);
    BOOST_CHECK_MESSAGE(cr.exit_code == 0 && read_file(t + "/got.bin") == body, name << ": curl did not get the file\n"
                                                                                      << all);
    BOOST_CHECK_MESSAGE(sr.log_problems.empty() && wr.log_problems.empty() && cr.log_problems.empty(),
                        name << ": log problems\n" << all);
    BOOST_CHECK_MESSAGE(wr.closes.size() == 9 && cr.closes.size() == 1 && sr.closes.size() == 10,
                        name << ": close lines: wrk " << wr.closes.size() << " (want 9), curl " << cr.closes.size()
                             << " (want 1), nginx " << sr.closes.size() << " (want 10)\n" << all);
    std::map<std::string, int> per_pid;
    for (const ProgRun *r : {&sr, &wr, &cr})
        for (const Fields &f : r->closes) {
            BOOST_CHECK_MESSAGE(field(f, "transport") == "rdma", name << ": " << r->name << " connection transport="
                                                                       << field(f, "transport") << " reason="
                                                                       << field(f, "reason"));
            if (r == &sr)
                ++per_pid[field(f, "pid")];
        }
    std::string spread;
    for (const auto &kv : per_pid)
        spread += " " + std::to_string(kv.second);
    note(name + ": " + std::to_string(requests) + " requests in 3 s; nginx connections per worker:" + spread);
}

// nginx as it runs by default: `daemon on` (the process started listens, forks the
// master and exits; the master forks 2 workers).  The RDMA listener goes with the
// process that exits; the first worker to use the listener takes the port over (and
// sends the others' requests on).  Two curl clients, one fetching the file three times
// on one keep-alive connection, each copy checked byte for byte, then wrk (8 keep-alive
// connections for 2 s, and its first one, closed at once): every connection on RDMA at
// both ends, and the daemon stops gracefully (each worker saw each connection's end:
// wrk's first connection, whose client closed right after its switch, once left a
// worker waiting for an EOF that never came, in 3 of 15 runs).
// What every live process named `comm` is doing, for a test that found one hung: each
// thread's kernel wait channel and, when gdb is there, its stack.
std::string stacks_of(const std::string &comm)
{
    std::string out;
    DIR *d = opendir("/proc");
    if (d == nullptr)
        return out;
    while (dirent *e = readdir(d)) {
        const std::string pid = e->d_name;
        if (pid.find_first_not_of("0123456789") != std::string::npos)
            continue;
        std::string c = read_file("/proc/" + pid + "/comm");
        while (!c.empty() && c.back() == '\n')
            c.pop_back();
        if (c != comm)
            continue;
        out += "--- " + comm + " " + pid + ":";
        if (DIR *t = opendir(("/proc/" + pid + "/task").c_str())) {
            while (dirent *te = readdir(t))
                if (te->d_name[0] != '.')
                    out += std::string(" task ") + te->d_name + " wchan=" +
                           read_file("/proc/" + pid + "/task/" + te->d_name + "/wchan");
            closedir(t);
        }
        out += "\n";
        const std::string cmd = "gdb -p " + pid + " -batch -nx -ex 'thread apply all bt' 2>&1 | grep -E '^(Thread|#)'";
        if (FILE *f = popen(cmd.c_str(), "r")) {
            char buf[512];
            while (fgets(buf, sizeof buf, f) != nullptr)
                out += buf;
            pclose(f);
        }
    }
    closedir(d);
    return out;
}

void program_nginx_daemon()
{
    const std::string name = "programs/nginx_daemon";
    NginxSite site(256u << 10, 0x1B873593CC9E2D51ull, 2, true);
    const WorkDir &dir = site.dir;
    const std::string &port = site.port, &body = site.body, &t = site.t, &url = site.url;
    ProgRun sr, wr, cr;
    sr.name = "nginx";
    wr.name = "curl (keep-alive)";
    cr.name = "curl";
    Proc sp(site.command(), prog_env(dir / "s.log"), dir / "s.err", dir / "s.out");
    BOOST_REQUIRE_MESSAGE(sp.wait(20000) && sp.exit_code() == 0, name << ": nginx did not daemonize\n"
                                                                     << read_file(t + "/error.log"));
    if (!wait_listener(std::stoi(port), 20000)) {
        std::string ids;
        run_quiet({"rdma", "resource", "show", "cm_id"}, 5000, &ids);
        BOOST_FAIL(name << ": nginx has no TCP and RDMA listener on port " << port << "\nrdma cm_ids:\n"
                        << ids << "log:\n" << read_file(dir / "s.log") << "error.log:\n" << read_file(t + "/error.log"));
    }
    usleep(300 * 1000);  // (the workers start)
    Proc cp({"curl", "-sS", "-o", t + "/got.bin", url}, prog_env(dir / "c.log"), dir / "c.err", dir / "c.out");
    await_prog(cr, cp, dir, "c", 60000);
    // A second client: a keep-alive one, three requests on one connection.
    Proc wp({"curl", "-sS", "-o", t + "/got2.bin", "-o", t + "/got3.bin", "-o", t + "/got4.bin", url, url, url},
            prog_env(dir / "w.log"), dir / "w.err", dir / "w.out");
    await_prog(wr, wp, dir, "w", 60000);
    ProgRun kr;
    kr.name = "wrk";
    Proc kp({"wrk", "-t", "2", "-c", "8", "-d", "2s", url}, prog_env(dir / "k.log"), dir / "k.err", dir / "k.out");
    await_prog(kr, kp, dir, "k", 60000);
    // Stop the daemon: SIGQUIT to its master (pid file), then wait until it is gone
    // (its workers end once every connection ended).
    const pid_t master = static_cast<pid_t>(std::atoi(read_file(t + "/nginx.pid").c_str()));
    if (master > 0)
        kill(master, SIGQUIT);
    const double stop_from = now_ms();
    // (Gone: no such process, or a zombie its reaper has not collected yet.)
    auto gone = [](pid_t pid) {
        const std::string st = read_file("/proc/" + std::to_string(pid) + "/stat");
        const size_t paren = st.rfind(')');
        return kill(pid, 0) != 0 || (paren != std::string::npos && st.compare(paren, 3, ") Z") == 0);
    };
    for (int i = 0; master > 0 && i < 200 && !gone(master); ++i)
        usleep(100 * 1000);
    const bool stopped = master > 0 && gone(master);
    const std::string hung = stopped ? std::string() : stacks_of("nginx");
    const long stop_ms = static_cast<long>(now_ms() - stop_from);
    usleep(300 * 1000);
    sr.log = read_file(dir / "s.log");
    {
        PeerRun tmp;
        tmp.log = sr.log;
        parse_log(tmp);
        sr.closes = tmp.closes;
        sr.log_problems = tmp.log_problems;
    }
    const std::string all = describe_prog(sr) + describe_prog(cr) + describe_prog(wr) + describe_prog(kr) +
                            "error.log:\n" + read_file(t + "/error.log");
    BOOST_CHECK_MESSAGE(stopped, name << ": the daemon did not stop within 20 s of SIGQUIT\n" << all << hung);
    BOOST_CHECK_MESSAGE(cr.exit_code == 0 && read_file(t + "/got.bin") == body, name << ": curl did not get the file\n"
                                                                                      << all);
    const uint64_t requests = check_wrk(name, kr, 10, all);
    BOOST_CHECK_MESSAGE(wr.exit_code == 0 && read_file(t + "/got2.bin") == body && read_file(t + "/got3.bin") == body &&
                            read_file(t + "/got4.bin") == body,
                        name << ": the keep-alive curl did not get the file three times\n" << all);
    BOOST_CHECK_MESSAGE(sr.log_problems.empty() && cr.log_problems.empty() && wr.log_problems.empty() &&
                            kr.log_problems.empty(),
                        name << ": log problems\n" << all);
    BOOST_CHECK_MESSAGE(cr.closes.size() == 1 && wr.closes.size() == 1 && kr.closes.size() == 9 &&
                            sr.closes.size() == 11,
                        name << ": close lines: curl " << cr.closes.size() << " and " << wr.closes.size()
                             << " (want 1 each), wrk " << kr.closes.size() << " (want 9), nginx " << sr.closes.size()
                             << " (want 11)\n" << all);
    note(name + ": wrk " + std::to_string(requests) + " requests in 2 s; the daemon stopped " +
         std::to_string(stop_ms) + " ms after SIGQUIT");
    for (const ProgRun *r : {&sr, &cr, &wr, &kr})
        for (const Fields &f : r->closes)
            BOOST_CHECK_MESSAGE(field(f, "transport") == "rdma", name << ": " << r->name << " connection transport="
                                                                       << field(f, "transport") << " reason="
                                                                       << field(f, "reason"));
}

// sockperf: one server per I/O multiplexer, a ping-pong and a throughput client on it.
struct SockperfRun {
    bool done = false;
    ProgRun server, pp, tp;
};

SockperfRun &sockperf_run(const std::string &mux)
{
    static std::map<std::string, SockperfRun> runs;
    SockperfRun &r = runs[mux];
    if (r.done)
        return r;
    r.done = true;
    WorkDir dir;
    dir.keep = cfg.keep;
    int port = free_port(cfg.addr);
    std::vector<std::string> target;
    if (mux == "default") {
        target = {"--tcp", "-i", cfg.addr, "-p", std::to_string(port)};
    } else {
        write_file(dir / "feed", "T:" + cfg.addr + ":" + std::to_string(port) + "\n");
        target = {"-f", dir / "feed", "-F", mux};
    }
    std::vector<std::string> sargv = {"sockperf", "sr"};
    sargv.insert(sargv.end(), target.begin(), target.end());
    r.server.name = "sockperf sr " + mux;
    Proc sp(sargv, prog_env(dir / "s.log"), dir / "s.err", dir / "s.out");
    bool listening = wait_listener(port, 20000);
    BOOST_CHECK_MESSAGE(listening, "sockperf " << mux << ": no TCP and RDMA listener on port " << port);
    for (const std::string kind : {"pp", "tp"}) {
        std::vector<std::string> argv = {"sockperf", kind};
        argv.insert(argv.end(), target.begin(), target.end());
        argv.insert(argv.end(), {"-t", "2"});
        ProgRun &pr = kind == "pp" ? r.pp : r.tp;
        pr.name = "sockperf " + kind + " " + mux;
        Proc cp(argv, prog_env(dir / (kind + ".log")), dir / (kind + ".err"), dir / (kind + ".out"));
        bool ok = cp.wait(60000);
        if (!ok)
            cp.kill_all();
        finish_prog(pr, cp, dir, kind, !ok);
    }
    sp.signal(SIGINT);
    bool ok = sp.wait(10000);
    if (!ok)
        sp.kill_all();
    finish_prog(r.server, sp, dir, "s", !ok);
    return r;
}

void program_sockperf(const std::string &kind, const std::string &mux)
{
    const std::string name = "programs/sockperf_" + kind + "_" + mux;
    SockperfRun &r = sockperf_run(mux);
    const ProgRun &c = kind == "pp" ? r.pp : r.tp;
    std::string both = describe_prog(r.server) + describe_prog(c);
    BOOST_CHECK_MESSAGE(c.exit_code == 0, name << ": the client failed\n" << both);
    std::string want = kind == "pp" ? "Summary: Latency is " : "Summary: Message Rate is ";
    size_t at = c.out.find(want);
    if (at == std::string::npos)
        at = c.err.find(want);
    BOOST_CHECK_MESSAGE(at != std::string::npos, name << ": no '" << want << "' result\n" << both);
    if (at != std::string::npos) {
        const std::string &src = c.out.find(want) != std::string::npos ? c.out : c.err;
        note(name + ": " + src.substr(at + 9, src.find('\n', at) - at - 9));
    }
    BOOST_CHECK_MESSAGE(c.out.find("ERROR") == std::string::npos && c.err.find("ERROR") == std::string::npos,
                        name << ": sockperf reported an error\n" << both);
    BOOST_CHECK_MESSAGE(!c.closes.empty(), name << ": no close line in the client's log\n" << both);
    for (const Fields &f : c.closes)
        BOOST_CHECK_MESSAGE(field(f, "transport") == "rdma" && num(f, "bytes_sent") > 0 &&
                                (kind == "tp" || num(f, "bytes_received") > 0),
                            name << ": client connection transport=" << field(f, "transport") << " reason="
                                 << field(f, "reason") << " bytes_sent=" << field(f, "bytes_sent")
                                 << " bytes_received=" << field(f, "bytes_received"));
    // The server's side of the same connection (it logs when it closes it).
    for (const Fields &cf : c.closes) {
        bool found = false;
        for (const Fields &sf : r.server.closes)
            if (field(sf, "peer") == field(cf, "local")) {
                found = true;
                BOOST_CHECK_MESSAGE(field(sf, "transport") == "rdma",
                                    name << ": server side transport=" << field(sf, "transport") << " reason="
                                         << field(sf, "reason"));
                // The server reads until EOF: it gets all the client sent.  The client
                // may close with the last reply unread (ping-pong ends on a timer).
                BOOST_CHECK_MESSAGE(num(sf, "bytes_received") == num(cf, "bytes_sent") &&
                                        num(sf, "bytes_sent") >= num(cf, "bytes_received") &&
                                        num(sf, "bytes_sent") - num(cf, "bytes_received") <= 65536,
                                    name << ": server side bytes_sent=" << field(sf, "bytes_sent") << " bytes_received="
                                         << field(sf, "bytes_received") << " vs client bytes_sent=" << field(cf, "bytes_sent")
                                         << " bytes_received=" << field(cf, "bytes_received"));
            }
        BOOST_CHECK_MESSAGE(found, name << ": the server logged no close line for " << field(cf, "local") << "\n"
                                        << describe_prog(r.server));
    }
}

// ---- scale -------------------------------------------------------------------------------

// Issue 15, point 6: the library's descriptors never make the program fail.  One process
// that is both client and server of 10,000 short connections (100 bytes each way, then
// close; tests/offload/churn) under a soft descriptor limit of 1024, in the default mode:
// every cycle passes, and once the negotiations still running at the end are over its
// descriptors are no more than after the first 1000 cycles (none kept per connection).
// (Each closed connection used to keep its two eventfds for its linger or its
// negotiation: EMFILE after about 250 cycles.)
// The same run without the library gives the time of kernel TCP, reported side by side.
void scale_short_connections()
{
    const std::string name = "scale/short_connections";
    WorkDir dir;
    dir.keep = cfg.keep;
    const std::string conns = "10000";
    auto run = [&](bool lib, const std::string &base) {
        ProgRun r;
        r.name = base;
        Env env = lib ? prog_env(dir / (base + ".log"), false) : base_env();
        Proc p({OFFLOAD_CHURN, "--addr", cfg.addr, "--conns", conns, "--nofile", "1024"}, env, dir / (base + ".err"),
               dir / (base + ".out"));
        bool ok = p.wait(600000);
        if (!ok)
            p.kill_all();
        finish_prog(r, p, dir, base, !ok);
        return r;
    };
    ProgRun k = run(false, "kernel"), l = run(true, "lib");
    const Fields fk = parse_kv(k.out), fl = parse_kv(l.out);
    const std::string all = describe_prog(l);
    BOOST_CHECK_MESSAGE(k.exit_code == 0, name << ": without the library\n" << describe_prog(k));
    BOOST_CHECK_MESSAGE(l.exit_code == 0 && field(fl, "cycles") == conns && field(fl, "errors") == "0",
                        name << ": with the library, not every cycle passed\n" << all);
    // Against the count after the first 1000 cycles, both settled: once it has made
    // connections the library keeps completion channels made ahead for the process, 2 to
    // 8 per device (src/rdma/kit.cc), so the two counts may differ by that much.  While
    // the cycles run, what a connection holds goes with it: the count stays within 100
    // of the settled one (it grew by 4 a cycle, to the limit, when closed connections
    // kept their eventfds).
    const int devices = testcommon::rdma_devices().devices;
    const uint64_t warm = num(fl, "fds_warm");
    BOOST_CHECK_MESSAGE(!field(fl, "fds_warm").empty() && num(fl, "fds_after") <= warm + 8u * static_cast<unsigned>(devices),
                        name << ": more descriptors after the last cycle than after the first 1000 (" << devices
                             << " devices)\n" << all);
    BOOST_CHECK_MESSAGE(num(fl, "fds_max") <= warm + 100, name << ": descriptors grew during the cycles\n" << all);
    BOOST_CHECK_MESSAGE(l.log_problems.empty(), name << ": log problems\n" << all);
    std::map<std::string, int> reasons;
    for (const Fields &f : l.closes)
        ++reasons[field(f, "role") + " " + field(f, "transport") + " " + field(f, "reason")];
    BOOST_CHECK_MESSAGE(l.closes.size() == 2 * std::stoul(conns),
                        name << ": " << l.closes.size() << " close lines for " << conns << " connections\n" << all);
    std::string rs;
    for (const auto &kv : reasons)
        rs += (rs.empty() ? "" : ", ") + kv.first + " x" + std::to_string(kv.second);
    const double ms_k = static_cast<double>(num(fk, "ms")), ms_l = static_cast<double>(num(fl, "ms"));
    note(name + ": " + conns + " cycles under ulimit -n 1024: kernel TCP " + ms3(ms_k) + " ms, rdmasock " + ms3(ms_l) +
         " ms (" + (ms_k > 0 ? ms3(ms_l / ms_k) : std::string("?")) + "x); descriptors before " + field(fl, "fds_before") +
         ", after 1000 cycles " + field(fl, "fds_warm") + ", at most " + field(fl, "fds_max") + " during, " +
         field(fl, "fds_after") + " after (kernel run: at most " + field(fk, "fds_max") + "); closes: " + rs);
}

// Issue 18, point 1: open connections that carry nothing cost no CPU.  An epoll server
// and its client, two processes (tests/offload/idle), 100 connections on RDMA, each
// used once; then both sit in epoll_wait() for 10 s with nothing to do: each process,
// every thread counted (the library's too), may use at most 0.1% of a core over that
// time (10 ms in 10 s); then each connection is used once more, byte for byte.  The
// connections are made in connect-wait mode (RDMASOCK_CONNECT_WAIT=1: each on RDMA as
// connect() returns): a burst of 100 in the default mode leaves some on TCP under the
// VM's emulation (issue 15: each set-up registers two 4 MiB rings, about 100 ms here,
// one after the other); what an idle connection costs does not depend on how it
// switched.  The same run without the library is the kernel's figure, side by side.
void scale_idle_cpu()
{
    const std::string name = "scale/idle_cpu";
    WorkDir dir;
    dir.keep = cfg.keep;
    const std::string conns = "100", idle_ms = "10000";
    auto run = [&](bool lib, const std::string &base) {
        ProgRun r;
        r.name = base;
        Env env = lib ? prog_env(dir / (base + ".log")) : base_env();
        Proc p({OFFLOAD_IDLE, "--addr", cfg.addr, "--conns", conns, "--idle-ms", idle_ms}, env,
               dir / (base + ".err"), dir / (base + ".out"));
        bool ok = p.wait(180000);
        if (!ok)
            p.kill_all();
        finish_prog(r, p, dir, base, !ok);
        return r;
    };
    auto line = [](const ProgRun &r, const std::string &who) {
        for (const std::string &l : split_lines(r.out))
            if (l.rfind(who + " ", 0) == 0)
                return parse_kv(l);
        return Fields{};
    };
    ProgRun k = run(false, "kernel"), l = run(true, "lib");
    const std::string all = describe_prog(l);
    BOOST_CHECK_MESSAGE(k.exit_code == 0, name << ": without the library\n" << describe_prog(k));
    BOOST_REQUIRE_MESSAGE(l.exit_code == 0, name << ": with the library, not every request was answered\n" << all);
    const Fields lc = line(l, "client"), ls = line(l, "server"), kc = line(k, "client"), ks = line(k, "server");
    BOOST_CHECK_MESSAGE(field(lc, "rdma") == conns, name << ": not every connection on RDMA before the idle time\n"
                                                         << all);
    expect_all_rdma(name, {&l}, 2 * std::stoul(conns), all);
    // Each side's idle time is the 10 s (the server's, its longest wait, a little more).
    const uint64_t want_ms = std::stoul(idle_ms);
    for (const Fields *f : {&lc, &ls})
        BOOST_CHECK_MESSAGE(num(*f, "idle_ms") + 100 >= want_ms,
                            name << ": an idle time shorter than " << idle_ms << " ms\n" << all);
    // 0.1% of a core: cpu_us at most idle_ms (1 us per ms).
    auto pct = [](const Fields &f) {
        const double ms = static_cast<double>(num(f, "idle_ms"));
        char b[32];
        snprintf(b, sizeof b, "%.4f%%", ms > 0 ? 100.0 * static_cast<double>(num(f, "cpu_us")) / (ms * 1000.0) : -1.0);
        return std::string(b);
    };
    note(name + ": " + conns + " connections idle for " + idle_ms + " ms, CPU (whole process): rdmasock server " +
         field(ls, "cpu_us") + " us (" + pct(ls) + "), client " + field(lc, "cpu_us") + " us (" + pct(lc) +
         "); kernel TCP server " + field(ks, "cpu_us") + " us (" + pct(ks) + "), client " + field(kc, "cpu_us") +
         " us (" + pct(kc) + "); rdmasock's by thread (us): server " + field(ls, "threads_us") + ", client " +
         field(lc, "threads_us"));
    for (const Fields *f : {&ls, &lc})
        BOOST_CHECK_MESSAGE(!field(*f, "cpu_us").empty() && num(*f, "cpu_us") <= num(*f, "idle_ms"),
                            name << ": an idle process used more than 0.1% of a core\n" << all);
}

// ---- soak --------------------------------------------------------------------------------

// What the server holds: its descriptors and resident memory, and the queue pairs and
// memory regions of the devices (rdma_totals: the server's once no client runs).
struct Holdings {
    long fds = -1, rss_kb = -1, qps = -1, mrs = -1;
    std::string text() const
    {
        return "fds=" + std::to_string(fds) + " rss_kb=" + std::to_string(rss_kb) + " qps=" + std::to_string(qps) +
               " mrs=" + std::to_string(mrs);
    }
};

// The devices' totals of one kind of resource ("qp", "mr") as `rdma resource show` sums
// them up: every process's.  (Per process they cannot be told apart: the kernel names the
// thread that created a resource, and the library's builder thread that registers the
// rings has often exited.)  When no client runs, the server's and the kernel's.
long rdma_totals(const std::string &kind)
{
    Proc p({"rdma", "resource", "show"}, base_env(), "/dev/null");
    if (!p.wait(20000) || p.exit_code() != 0)
        return -1;
    long n = 0;
    bool seen = false;
    for (const std::string &l : split_lines(p.out())) {  // "0: rxe0: pd 6 cq 4 qp 2 cm_id 3 mr 2 ctx 2 srq 0"
        const size_t at = (l + " ").find(" " + kind + " ");
        if (at == std::string::npos)
            continue;
        n += std::atol(l.c_str() + at + kind.size() + 2);
        seen = true;
    }
    return seen ? n : -1;
}

Holdings holdings_of(pid_t pid)
{
    Holdings h;
    h.fds = 0;
    if (DIR *d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str())) {
        while (dirent *e = readdir(d))
            h.fds += e->d_name[0] != '.';
        closedir(d);
    }
    for (const std::string &l : split_lines(read_file("/proc/" + std::to_string(pid) + "/status")))
        if (l.rfind("VmRSS:", 0) == 0)
            h.rss_kb = std::atol(l.c_str() + 6);
    h.qps = rdma_totals("qp");
    h.mrs = rdma_totals("mr");
    return h;
}

// Once no client runs: the holdings when the descriptor count has not changed for 3 s
// (at most 30 s: closed connections linger, negotiations end).
Holdings settled_holdings(pid_t pid)
{
    long same_since = now_ms(), fds = holdings_of(pid).fds;
    for (const double end = now_ms() + 30000; now_ms() < end && now_ms() - same_since < 3000;) {
        usleep(200 * 1000);
        long f = holdings_of(pid).fds;
        if (f != fds)
            same_since = now_ms(), fds = f;
    }
    return holdings_of(pid);
}

// Issue 17, point 7: a bounded soak.  One server process under the library (its
// connections each served by a thread) lives through random clients, also under the
// library (tests/offload/soak.cc): verified exchanges of 1 B .. 1 MiB, clients killed
// -9 mid-stream, fork children closing inherited copies, dup2, shutdown while another
// thread reads.  A warm-up run first, then the soak run (TEST_SOAK_SECS, default 60;
// make check-soak runs 600).  After each, once settled, the server's descriptors, queue
// pairs, memory regions and resident memory: after the soak, none of the first three
// above the warm-up's, resident memory at most 16 MiB above it (and, sampled every 5 s
// while clients ran, more queue pairs and memory regions than idle: the counts work).  Every client operation
// verified, no connection's bytes wrong at the server, the server alive throughout.
void soak_bounded()
{
    const std::string name = "soak/bounded";
    const long secs = std::max(10L, std::atol(env_or("TEST_SOAK_SECS", "60").c_str()));
    WorkDir dir;
    dir.keep = cfg.keep;
    Proc sp({OFFLOAD_SOAK, "server", "--addr", cfg.addr}, prog_env(dir / "server.log", false), dir / "server.err");
    const Fields sf = parse_kv(sp.read_line(30000));
    BOOST_REQUIRE_MESSAGE(!field(sf, "port").empty(), name << ": the server did not start: " << read_file(dir / "server.err"));
    const pid_t spid = static_cast<pid_t>(num(sf, "pid"));
    // While a client runs, the holdings every 5 s: the largest counts seen.  More queue
    // pairs and memory regions than when idle show that the counts see the connections'
    // (and so would see those a closed connection left behind).
    Holdings busy;
    auto client = [&](const std::string &base, long s, const std::string &seed) {
        Proc cp({OFFLOAD_SOAK, "client", "--addr", cfg.addr, "--port", field(sf, "port"), "--secs", std::to_string(s),
                 "--seed", seed},
                prog_env(dir / (base + ".log"), false), dir / (base + ".err"), dir / (base + ".out"));
        const double until = now_ms() + static_cast<double>(s * 1000 + 120000);
        bool ok = false;
        while (!(ok = cp.wait(5000)) && now_ms() < until) {
            const Holdings h = holdings_of(spid);
            busy.qps = std::max(busy.qps, h.qps);
            busy.mrs = std::max(busy.mrs, h.mrs);
            busy.fds = std::max(busy.fds, h.fds);
            busy.rss_kb = std::max(busy.rss_kb, h.rss_kb);
        }
        if (!ok)
            cp.kill_all();
        const std::vector<std::string> ls = split_lines(read_file(dir / (base + ".out")));
        const std::string out = ls.empty() ? std::string() : ls.front();
        BOOST_CHECK_MESSAGE(ok && cp.exit_code() == 0 && field(parse_kv(out), "errors") == "0",
                            name << ": " << base << (ok ? "" : " (timed out)") << ": " << out
                                 << read_file(dir / (base + ".err")));
        return out;
    };
    const std::string seed = std::to_string(static_cast<unsigned long>(now_ms()));
    client("warmup", std::max(5L, secs / 10), seed);
    const Holdings warm = settled_holdings(spid);
    const std::string run = client("soak", secs, seed + "1");
    BOOST_CHECK_MESSAGE(!sp.exited(), name << ": the server died: " << read_file(dir / "server.err"));
    const Holdings end = settled_holdings(spid);
    sp.signal(SIGTERM);
    BOOST_CHECK_MESSAGE(sp.wait(20000), name << ": the server did not stop at SIGTERM");
    const std::vector<std::string> lines = split_lines(sp.out());
    const Fields fin = parse_kv(lines.empty() ? std::string() : lines.back());
    BOOST_CHECK_MESSAGE(field(fin, "bad") == "0", name << ": the server got wrong bytes: " << sp.out());
    BOOST_CHECK_MESSAGE(warm.qps >= 0 && warm.mrs >= 0, name << ": rdma resource show gave nothing");
    BOOST_CHECK_MESSAGE(busy.qps > warm.qps && busy.mrs > warm.mrs,
                        name << ": no more queue pairs and memory regions while clients ran (most " << busy.text()
                             << ") than after the warm-up (" << warm.text() << "): the counts prove nothing");
    // (The library keeps 2 to 8 completion channels made ahead per device once it has
    // made connections, src/rdma/kit.cc: the count may grow by that much, as in
    // scale/short_connections.)
    const long devices = testcommon::rdma_devices().devices;
    // (A kit kept in reserve per device holds two registered rings, src/rdma/kit.cc: the
    // count of memory regions may grow by that much.)
    BOOST_CHECK_MESSAGE(end.fds <= warm.fds + 8 * devices && end.qps <= warm.qps && end.mrs <= warm.mrs + 2 * devices &&
                            end.rss_kb <= warm.rss_kb + 16 * 1024,
                        name << ": the server holds more after the soak: warm-up " << warm.text() << ", soak "
                             << end.text());
    note(name + ": seed " + seed + "1, " + std::to_string(secs) + " s: " + run.substr(0, run.find('\n')) +
         "; server after warm-up " + warm.text() + ", after the soak " + end.text() + ", at most while clients ran " +
         busy.text() + "; " + field(fin, "served") +
         " connections served");
}

// A server that answers and closes while its client is switching: the client has the
// PROOF, its SWITCH and CONFIRM are on their way, and the server's close() waits for them
// only briefly (the probe timeout).  Its socket's FIN waits on until the client switched
// or cannot any more (Conn::verify_closed_locked): closed at once, the CONFIRM met a
// closed socket and the client, switched, read ECONNRESET where kernel TCP gives EOF
// (soak server_end with the default 50 ms, about 1 in 1,000 operations).  Here the probe
// timeout is 1 ms at both ends, so that every close that meets a negotiation meets it
// there: server_end operations for 15 s, every one verified to its EOF, and some
// connections switched after the server's close (the server's switch lines outnumber
// its RDMA close lines: its close came before the switch), as many as their clients.
void soak_close_while_switching()
{
    const std::string name = "soak/close_while_switching";
    WorkDir dir;
    dir.keep = cfg.keep;
    auto env = [&](const std::string &log) {
        Env e = prog_env(log, false);
        set_var(e, "RDMASOCK_PROBE_TIMEOUT_MS", "1");
        set_var(e, "RDMASOCK_LOG_LEVEL", "info");
        return e;
    };
    Proc sp({OFFLOAD_SOAK, "server", "--addr", cfg.addr}, env(dir / "server.log"), dir / "server.err");
    const Fields sf = parse_kv(sp.read_line(30000));
    BOOST_REQUIRE_MESSAGE(!field(sf, "port").empty(), name << ": the server did not start: " << read_file(dir / "server.err"));
    auto count = [&](const std::string &file, const char *what, const char *also = "") {
        long n = 0;
        for (const std::string &l : split_lines(read_file(dir / file)))
            n += l.find(what) != std::string::npos && l.find(also) != std::string::npos;
        return n;
    };
    // Runs of 15 s until one saw a connection switch after the server's close, at most
    // 10.  In the VM a run makes about 500 operations with 30 to 45 switches, and about 1
    // in 80 switches comes after the close (4 in 328 over four runs of this case: 3 in
    // 90, 1 in 123, 0 in 115 once in CI, where 3 runs were the limit): about 2 runs on
    // average, and at most 10 leave a chance of about 1 in 150 to see none.
    std::string outs;
    long switches = 0, rdma_closes = 0, client_switches = 0;
    for (int run = 1; run <= 10 && switches == rdma_closes; ++run) {
        const std::string base = "client" + std::to_string(run);
        Proc cp({OFFLOAD_SOAK, "client", "--addr", cfg.addr, "--port", field(sf, "port"), "--secs", "15", "--only",
                 "server_end"},
                env(dir / (base + ".log")), dir / (base + ".err"), dir / (base + ".out"));
        const bool ok = cp.wait(120000);
        if (!ok)
            cp.kill_all();
        const std::vector<std::string> ls = split_lines(read_file(dir / (base + ".out")));
        const std::string out = ls.empty() ? std::string() : ls.front();
        BOOST_CHECK_MESSAGE(ok && cp.exit_code() == 0 && field(parse_kv(out), "errors") == "0",
                            name << ": run " << run << (ok ? "" : " (timed out)") << ": " << out
                                 << read_file(dir / (base + ".err")));
        outs += (outs.empty() ? "" : "; ") + out;
        client_switches += count(base + ".log", "event=switch");
        // (The server's lines so far: every connection of the run is closed by now.)
        switches = count("server.log", "event=switch");
        rdma_closes = count("server.log", "event=close", "transport=rdma");
    }
    sp.signal(SIGTERM);
    BOOST_CHECK_MESSAGE(sp.wait(20000), name << ": the server did not stop at SIGTERM");
    // (Before: the server's socket closed as TCP while its client switched, 5 in 884
    // operations, and the client read EOF or, when the server's kernel answered the
    // CONFIRM with a reset first, ECONNRESET.)
    BOOST_CHECK_MESSAGE(client_switches == switches, name << ": " << client_switches << " clients switched, "
                                                          << switches << " server sockets");
    BOOST_CHECK_MESSAGE(switches > rdma_closes,
                        name << ": no connection switched after the server's close (" << switches << " switches, "
                             << rdma_closes << " closed on RDMA): the case proves nothing");
    note(name + ": " + outs + "; server: " + std::to_string(switches) + " switches, " + std::to_string(rdma_closes) +
         " closed on RDMA, " + std::to_string(switches - rdma_closes) + " switched after the close");
}

// ---- registration ------------------------------------------------------------------------

bool init_tests()
{
    utf::framework::register_observer(g_summary);
    auto &master = utf::framework::master_test_suite();
    master.p_name.value = "offload";

    auto *streams = BOOST_TEST_SUITE("streams");
    add(streams, "write_one_direction", streams_write_seq);
    add(streams, "write_both_directions", streams_write_bidir);
    add(streams, "small_rings", streams_small_rings);
    add(streams, "late_accept", streams_late_accept);
    for (std::string mux : {"poll", "epoll", "select"})
        add(streams, "readiness_" + mux, [mux] { streams_readiness(mux); });
    add(streams, "churn_30", streams_churn);
    add(streams, "small_writes", streams_small_writes);
    add(streams, "waitall_across_switch", streams_waitall_across_switch);
    for (std::string api : {"writev", "send", "sendmsg", "sendfile"})
        add(streams, api, [api] { streams_api(api); });
    master.add(streams);

    // The default, asynchronous switch (RDMASOCK_CONNECT_WAIT=0): connect() returns after
    // the TCP handshake, the first bytes go over TCP, the connection switches once both
    // ends are ready.
    auto *as = BOOST_TEST_SUITE("async");
    add(as, "streams", async_streams);
    add(as, "late_accept", async_late_accept);
    add(as, "waitall_across_fallback", async_waitall_across_fallback);
    add(as, "shutdown_before_switch", async_shutdown_before_switch);
    add(as, "cost", [] { connection_cost("async/cost", false, true); });
    master.add(as);

    auto *sys = BOOST_TEST_SUITE("system");
    add(sys, "start_cost", system_start_cost);
    master.add(sys);

    auto *scale = BOOST_TEST_SUITE("scale");
    add(scale, "short_connections", scale_short_connections);
    add(scale, "idle_cpu", scale_idle_cpu);
    master.add(scale);

    auto *soak = BOOST_TEST_SUITE("soak");
    add(soak, "bounded", soak_bounded);
    add(soak, "close_while_switching", soak_close_while_switching);
    master.add(soak);

    auto *srv = BOOST_TEST_SUITE("servers");
    add(srv, "close_listener", [] { servers_close_listener(false); });
    add(srv, "close_listener_async", [] { servers_close_listener(true); });
    add(srv, "fork_child_client", servers_fork_child_client);
    add(srv, "prefork2", [] { servers_prefork(2, false); });
    add(srv, "prefork4_async", [] { servers_prefork(4, true); });
    add(srv, "prefork2_reuseport", [] { servers_prefork(2, false, true); });
    add(srv, "prefork_echo", servers_prefork_echo);
    add(srv, "fork_per_conn", [] { servers_fork_per_conn(false); });
    for (std::string m : {"close", "closeall", "exit", "exec", "use", "maps", "raw-exit", "raw-exec"})
        add(srv, "fork_live_" + m, [m] { servers_fork_live(m); });
    add(srv, "fork_per_conn_async", [] { servers_fork_per_conn(true); });
    add(srv, "exec_after", [] { servers_exec_self("after", false, false); });
    add(srv, "exec_after_async", [] { servers_exec_self("after", true, false); });
    add(srv, "exec_after_nolib", [] { servers_exec_self("after", false, true); });
    add(srv, "exec_before_async", [] { servers_exec_self("before", true, false); });
    add(srv, "exec_close_async", [] { servers_exec_self("close", true, false); });
    add(srv, "pass_after", [] { servers_exec_self("pass", false, false); });
    add(srv, "pass_after_async", [] { servers_exec_self("pass", true, false); });
    add(srv, "pass_after_mmsg_async", [] { servers_exec_self("pass-mmsg", true, false); });
    add(srv, "pass_to_worker", [] { servers_pass_worker(false); });
    add(srv, "pass_to_worker_async", [] { servers_pass_worker(true); });
    for (std::string m : {"close", "keep", "exec"}) {
        add(srv, "fork_after_" + m, [m] { servers_fork_after(m, false); });
        add(srv, "fork_after_" + m + "_async", [m] { servers_fork_after(m, true); });
    }
    master.add(srv);

    auto *fb = BOOST_TEST_SUITE("fallback");
    add(fb, "server_without_lib", fallback_server_without_lib);
    add(fb, "client_without_lib", fallback_client_without_lib);
    add(fb, "client_disabled", fallback_client_disabled);
    add(fb, "client_rule", [] { fallback_rule(false); });
    add(fb, "server_rule", [] { fallback_rule(true); });
    add(fb, "server_disabled", fallback_server_disabled);
    add(fb, "loopback", fallback_loopback);
    add(fb, "nordma_timeout", fallback_nordma_timeout);
    add(fb, "nordma_no_rxe", fallback_nordma_no_rxe);
    add(fb, "banner_rdmasock_client", [] { fallback_banner(1000); });
    add(fb, "banner_256K_rdmasock_client", [] { fallback_banner(256u << 10); });
    add(fb, "banner_plain_client", fallback_banner_plain_client);
    add(fb, "echo_server_without_lib", fallback_echo_server_without_lib);
    add(fb, "push_server", fallback_push_server);
    add(fb, "negative_cache_is_per_port", fallback_cache_per_port);
    add(fb, "probe_adapts", fallback_probe_adapts);
    add(fb, "cost", [] { connection_cost("fallback/cost", false); });
    add(fb, "rcvtimeo_undecided", fallback_rcvtimeo_undecided);
    add(fb, "memlock_client", [] { fallback_memlock(true); });
    add(fb, "memlock_server", [] { fallback_memlock(false); });
    add(fb, "resource", fallback_resource);
    master.add(fb);

    // (Only with TEST_OFFLOAD_MIDSTREAM=1, one case per VM: make check-offload runs them
    // so.  A link flap leaves soft-RoCE without rdma_cm connections: midstream_link_down.)
    if (getenv("TEST_OFFLOAD_MIDSTREAM") != nullptr) {
        auto *mid = BOOST_TEST_SUITE("midstream");
        add(mid, "link_down_3s", [] { midstream_link_down(3); });
        add(mid, "link_down_15s", [] { midstream_link_down(15); });
        add(mid, "link_down_3s_default", [] { midstream_link_down(3, true); });
        add(mid, "device_removal", device_removal);
        master.add(mid);
    }

    // tests/vm/run --two-vms (make check-offload-2vm): the servers run on the other VM,
    // the bytes cross a network link (one VM's soft-RoCE loopback completes every write
    // within the post).
    if (!cfg.peer_exec.empty()) {
        auto *two = BOOST_TEST_SUITE("twovm");
        add(two, "streams", [] {
            Side s;
            s.remote = true;
            run_streams("twovm/streams", {{64u << 20, 64u << 20, "write", false}, {16u << 20, 16u << 20, "write", true}}, s);
        });
        add(two, "small_writes", [] { small_writes("twovm/small_writes", true, true); });
        add(two, "coalesced_then_idle", [] { coalesced_then_idle("twovm/coalesced_then_idle"); });
        add(two, "cost", [] { connection_cost("twovm/cost", true); });
        master.add(two);
    }

    // The scenarios, tester on either side, in connect-wait mode or the default one.
    auto add_scenarios = [](utf::test_suite *suite, bool async) {
        for (bool client : {true, false})
            for (const auto &s : scenario_list(client))
                add(suite, s + (client ? "_tester_client" : "_tester_server"),
                    [s, client, async] { semantics_case(s, client, async); });
    };
    auto *sem = BOOST_TEST_SUITE("semantics");
    add_scenarios(sem, false);
    add(sem, "close_exit_client", [] { semantics_close_exit(true); });
    add(sem, "close_exit_server", [] { semantics_close_exit(false); });
    add(sem, "sigkill_client", [] { semantics_sigkill(true); });
    add(sem, "idle_no_cpu", semantics_idle_no_cpu);
    add(sem, "sigkill_server", [] { semantics_sigkill(false); });
    // The survivor blocked in write() on a full ring, or in epoll_wait() (issue 17, 4).
    for (std::string k : {"sigkill_write", "sigkill_epoll", "sigkill_idle"})
        for (bool killed_client : {true, false})
            add(sem, k + (killed_client ? "_client" : "_server"), [k, killed_client] { semantics_sigkill(killed_client, k); });
    add(sem, "stopped_close", [] { semantics_stopped_close(false); });
    // A peer that ends without closing (issue 17, 4).
    add(sem, "abrupt_exit_client", [] { semantics_abrupt("exit", true, false); });
    add(sem, "abrupt_exit_server", [] { semantics_abrupt("exit", false, false); });
    add(sem, "abrupt_signal_client", [] { semantics_abrupt("signal", true, false); });
    add(sem, "abrupt_exec_server", [] { semantics_abrupt("exec", false, false); });
    master.add(sem);

    // The same scenarios in the default mode (issue 17: users get the asynchronous switch).
    auto *sem_async = BOOST_TEST_SUITE("semantics_default_mode");
    add_scenarios(sem_async, true);
    add(sem_async, "stopped_close", [] { semantics_stopped_close(true); });
    add(sem_async, "abrupt_exit_client", [] { semantics_abrupt("exit", true, true); });
    add(sem_async, "abrupt_exit_server", [] { semantics_abrupt("exit", false, true); });
    add(sem_async, "abrupt_signal_client", [] { semantics_abrupt("signal", true, true); });
    add(sem_async, "abrupt_exec_server", [] { semantics_abrupt("exec", false, true); });
    add(sem_async, "close_exit_client", [] { semantics_close_exit(true, true); });
    add(sem_async, "close_exit_server", [] { semantics_close_exit(false, true); });
    // A peer killed while the survivor is blocked or idle (issue 17, points 4 and 6).
    for (std::string k : {"sigkill", "sigkill_write", "sigkill_epoll", "sigkill_idle"})
        for (bool killed_client : {true, false})
            add(sem_async, k + (killed_client ? "_client" : "_server"),
                [k, killed_client] { semantics_sigkill(killed_client, k, true); });
    master.add(sem_async);

    auto *prog = BOOST_TEST_SUITE("programs");
    add(prog, "iperf3", [] { program_iperf3("plain", {}, 1); });
    add(prog, "iperf3_reverse", [] { program_iperf3("reverse", {"-R"}, 1); });
    add(prog, "iperf3_parallel4", [] { program_iperf3("parallel4", {"-P", "4"}, 4); });
    add(prog, "iperf3_bidir", [] { program_iperf3("bidir", {"--bidir"}, 2); });
    // The default, asynchronous switch: 200 MB, the data connection switches mid-stream.
    add(prog, "iperf3_async", [] { program_iperf3("async", {}, 1, true); });
    add(prog, "tools_ss_live", tools_ss_live);
    add(prog, "tools_check", tools_check);
    for (int c : {1, 8})
        add(prog, "redis_c" + std::to_string(c), [c] { program_redis(c); });
    add(prog, "redis_bgsave", program_redis_bgsave);
    add(prog, "redis_rule", program_redis_rule);
    add(prog, "rdmasock_iperf", program_rdmasock_iperf);
    add(prog, "memcached", program_memcached);
    add(prog, "socat_oneshot", program_socat_oneshot);
    add(prog, "socat_fork", program_socat_fork);
    add(prog, "python_forking", [] { program_python_server(false); });
    add(prog, "python_prefork", [] { program_python_server(true); });
    add(prog, "nginx_single", [] { program_nginx(true); });
    add(prog, "nginx_workers", [] { program_nginx(false); });
    for (int w : {0, 2, 4})
        add(prog, "nginx_wrk_workers" + std::to_string(w), [w] { program_nginx_wrk(w); });
    add(prog, "nginx_daemon", program_nginx_daemon);
    for (std::string mux : {"default", "poll", "select"})
        for (std::string kind : {"pp", "tp"})
            add(prog, "sockperf_" + kind + "_" + mux, [kind, mux] { program_sockperf(kind, mux); });
    master.add(prog);
    return true;
}

}  // namespace

int main(int argc, char **argv)
{
    if (int rc = require_device("make check-offload"); rc != 0)
        return rc;
    cfg.read_env("TEST_OFFLOAD_LIB");
    cfg.nordma_ns = env_or("RDMASOCK_VM_NORDMA_NS", "");
    cfg.nordma_addr = env_or("RDMASOCK_VM_NORDMA_ADDR", "10.77.1.2");
    cfg.log_level = env_or("TEST_OFFLOAD_LOG_LEVEL", "info");
    cfg.peer_addr = env_or("RDMASOCK_VM_PEER", "");
    cfg.peer_exec = env_or("RDMASOCK_VM_PEER_EXEC", "");
    if (cfg.addr.empty()) {
        printf("SKIP: an RDMA device but no test address: set TEST_OFFLOAD_ADDR (or run via make check-offload)\n");
        return 77;
    }
    if (access(cfg.lib.c_str(), R_OK) != 0 || access(cfg.peer.c_str(), X_OK) != 0) {
        printf("FAIL: %s or %s missing (build first)\n", cfg.lib.c_str(), cfg.peer.c_str());
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    int rc = utf::unit_test_main(&init_tests, argc, argv);
    if (!g_notes.empty()) {
        printf("---- measurements\n");
        for (const auto &n : g_notes)
            printf("  %s\n", n.c_str());
    }
    g_summary.print();
    if (rc == 0 && (g_summary.skipped > 0 || g_summary.failed > 0))
        rc = 1;
    return rc;
}
