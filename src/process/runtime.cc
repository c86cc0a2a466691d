#include "process/runtime.hh"

#include <cerrno>
#include <cstdlib>
#include <pthread.h>
#include <sched.h>

#include "base/fd.hh"
#include "base/log.hh"
#include "base/real.hh"
#include "rdma/probe.hh"

namespace rdmasock::rt {

std::atomic<unsigned> g_offloaded{0};
std::atomic<unsigned> g_pending{0};
SetupTimes g_setup;

void SetupTimes::record(unsigned long long us) noexcept
{
    switches.fetch_add(1, std::memory_order_relaxed);
    us_sum.fetch_add(us, std::memory_order_relaxed);
    unsigned long long max = us_max.load(std::memory_order_relaxed);
    while (us > max && !us_max.compare_exchange_weak(max, us, std::memory_order_relaxed)) {
    }
}

namespace {

enum State : int { kIdle, kStarting, kOn, kOff };

std::atomic<int> g_state{kIdle};
// Never destroyed (its strings are read by the library's threads, which may still run
// while the process runs its static destructors at exit).
Config &the_config() noexcept
{
    static auto *c = new Config();
    return *c;
}
Reason g_default_reason = Reason::pending;
thread_local bool t_starting = false;

// Never destroyed, as the configuration.
rules::File &the_rules() noexcept
{
    static auto *r = new rules::File();
    return *r;
}

// A tunable: from the environment, else the rules file's last NAME=VALUE line.
const char *env_get(const char *name, void *)
{
    if (const char *v = secure_getenv(name))
        return v;
    const char *v = nullptr;
    for (const rules::Setting &s : the_rules().settings)
        if (s.name == name)
            v = s.value.c_str();
    return v;
}
void env_warn(const char *line, void *) { log::write(log::kWarn, "%s", line); }

void start() noexcept
{
    // A child of a fork the library's hook does not see (daemon(), the C library's own
    // fork) starts with the gate open too.
    pthread_atfork(nullptr, nullptr, util::fd_gate_after_fork_child);
    // The rules file, the log file and the devices' sysfs files are opened here: a
    // program thread does not place a descriptor meanwhile (util::FdGate).
    util::FdGate making(util::FdGate::making);
    the_rules() = rules::load(secure_getenv("RDMASOCK_RULES_FILE"), env_warn, nullptr);
    the_config() = load_config(env_get, nullptr, env_warn, nullptr);
    log::configure(static_cast<int>(the_config().log_level), the_config().log_file.c_str());
    if (!the_config().enable) {
        g_default_reason = Reason::disabled;
        RS_DEBUG("offload disabled by RDMASOCK_ENABLE=0");
        return;
    }
    rdma::ProbeResult probe = rdma::probe_devices();
    if (probe.active_ports == 0) {
        g_default_reason = Reason::no_device;
        RS_DEBUG("no active RDMA device (%d devices found)", probe.devices);
    } else {
        g_default_reason = Reason::pending;
        RS_DEBUG("%d RDMA devices, %d active ports", probe.devices, probe.active_ports);
    }
}

}  // namespace

bool ensure_started() noexcept
{
    int s = g_state.load(std::memory_order_acquire);
    if (__builtin_expect(s == kOn, 1))
        return true;
    if (s == kOff || secure() || t_starting)
        return false;
    int expected = kIdle;
    if (g_state.compare_exchange_strong(expected, kStarting, std::memory_order_acq_rel)) {
        int saved = errno;
        t_starting = true;
        try {
            start();
        } catch (...) {
            g_default_reason = Reason::resource;
        }
        t_starting = false;
        errno = saved;
        // Sockets are tracked even when offload is disabled: the close-time log line and
        // rdmasock-stat still show them, with reason=disabled.
        g_state.store(kOn, std::memory_order_release);
        return true;
    }
    while ((s = g_state.load(std::memory_order_acquire)) == kStarting)
        sched_yield();
    return s == kOn;
}

const Config &config() noexcept { return the_config(); }

bool excluded(rules::Side side, const sockaddr *server_addr) noexcept
{
    const rules::File &f = the_rules();
    if (f.rules.empty())
        return false;
    const rules::Rule *r = rules::match(f, program_invocation_short_name, side, server_addr);
    if (r == nullptr || r->rdma)
        return false;
    RS_DEBUG("%s:%u keeps this connection on TCP: %s", f.path.c_str(), r->line, r->text.c_str());
    return true;
}

const rules::File &rules_file() noexcept { return the_rules(); }

Reason default_reason() noexcept { return g_default_reason; }

void no_rdma_in_fork_child() noexcept
{
    if (g_default_reason == Reason::pending)
        g_default_reason = Reason::forked_child;
}

void after_fork_child() noexcept
{
    log::after_fork_child();
    g_setup.switches = 0;
    g_setup.us_sum = 0;
    g_setup.us_max = 0;
}

}  // namespace rdmasock::rt
