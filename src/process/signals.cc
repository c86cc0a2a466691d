#include "process/signals.hh"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <pthread.h>

#include "base/real.hh"
#include "process/secure.hh"

namespace rdmasock::sig {

namespace {

using Plain = void (*)(int);
using Info = void (*)(int, siginfo_t *, void *);

// The program's handler and flags for each signal we wrapped (fn null: not wrapped).
struct Entry {
    std::atomic<void *> fn{nullptr};
    std::atomic<int> flags{0};
};
Entry g_user[NSIG];
// sigaction calls are rare: one at a time keeps table and kernel in step.  (A plain
// pthread mutex: the shim links no C++ runtime.)  sigaction(2) is async-signal-safe and
// survives fork(): held with every signal blocked (a handler that calls sigaction in the
// thread holding it cannot run meanwhile), and across fork() (pthread_atfork), so that a
// child never inherits it held by a thread that does not exist there.
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
void lock_for_fork() noexcept { pthread_mutex_lock(&g_mu); }
void unlock_after_fork() noexcept { pthread_mutex_unlock(&g_mu); }
pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
void register_atfork() noexcept { pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork); }
struct Lock {
    sigset_t saved;
    Lock() noexcept
    {
        pthread_once(&g_atfork_once, register_atfork);
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &saved);
        pthread_mutex_lock(&g_mu);
    }
    ~Lock()
    {
        pthread_mutex_unlock(&g_mu);
        pthread_sigmask(SIG_SETMASK, &saved, nullptr);
    }
    Lock(const Lock &) = delete;
    Lock &operator=(const Lock &) = delete;
};

__thread int t_last __attribute__((tls_model("initial-exec"))) = 0;

void trampoline(int signo, siginfo_t *info, void *uc)
{
    t_last = signo;
    if (signo <= 0 || signo >= NSIG)
        return;
    void *fn = g_user[signo].fn.load(std::memory_order_acquire);
    int flags = g_user[signo].flags.load(std::memory_order_acquire);
    if (fn == nullptr)
        return;
    if (flags & SA_SIGINFO)
        reinterpret_cast<Info>(fn)(signo, info, uc);
    else
        reinterpret_cast<Plain>(fn)(signo);
}

// The flags that describe how the program's handler is called (the trampoline's own
// are these, with SA_SIGINFO forced).
constexpr int kHandlerFlags = SA_SIGINFO | SA_RESTART | SA_RESETHAND | SA_NODEFER | SA_ONSTACK;

void *handler_of(const struct sigaction &sa) noexcept
{
    return sa.sa_flags & SA_SIGINFO ? reinterpret_cast<void *>(sa.sa_sigaction)
                                    : reinterpret_cast<void *>(sa.sa_handler);
}

bool is_trampoline(const struct sigaction &sa) noexcept
{
    return (sa.sa_flags & SA_SIGINFO) && sa.sa_sigaction == trampoline;
}

}  // namespace

void clear_last() noexcept { t_last = 0; }
int last() noexcept { return t_last; }

bool restart_after(int signo, bool has_timeout) noexcept
{
    if (has_timeout)
        return false;
    if (signo > 0 && signo < NSIG) {
        struct sigaction sa {};
        if (RS_REAL(sigaction)(signo, nullptr, &sa) == 0)
            return (sa.sa_flags & SA_RESTART) != 0;
    }
    for (int s = 1; s < NSIG; ++s) {  // unknown: restart only if every handler would
        struct sigaction sa {};
        if (RS_REAL(sigaction)(s, nullptr, &sa) != 0)
            continue;
        if (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN)
            continue;
        if (!(sa.sa_flags & SA_RESTART))
            return false;
    }
    return true;
}

int sigaction(int signo, const struct sigaction *act, struct sigaction *old) noexcept
{
    if (rt::secure() || signo <= 0 || signo >= NSIG || signo == SIGKILL || signo == SIGSTOP)
        return RS_REAL(sigaction)(signo, act, old);
    Lock lk;
    struct sigaction prev {};
    const bool wrap = act != nullptr && act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN;
    // Save the previous entry: the program sees what it had installed.
    void *prev_fn = g_user[signo].fn.load();
    int prev_flags = g_user[signo].flags.load();
    int r;
    if (wrap) {
        struct sigaction mine = *act;
        mine.sa_flags |= SA_SIGINFO;
        mine.sa_sigaction = trampoline;
        // The table first: a signal arriving meanwhile runs the new handler.
        g_user[signo].flags.store(act->sa_flags, std::memory_order_release);
        g_user[signo].fn.store(handler_of(*act), std::memory_order_release);
        r = RS_REAL(sigaction)(signo, &mine, &prev);
        if (r != 0) {
            g_user[signo].fn.store(prev_fn);
            g_user[signo].flags.store(prev_flags);
        }
    } else {
        r = RS_REAL(sigaction)(signo, act, &prev);
        if (r == 0 && act != nullptr)
            g_user[signo].fn.store(nullptr, std::memory_order_release);
    }
    if (r == 0 && old != nullptr) {
        *old = prev;
        if (is_trampoline(prev)) {  // what the program installed, as it installed it
            old->sa_flags = (prev.sa_flags & ~kHandlerFlags) | (prev_flags & kHandlerFlags);
            if (prev_flags & SA_SIGINFO)
                old->sa_sigaction = reinterpret_cast<Info>(prev_fn);
            else
                old->sa_handler = reinterpret_cast<Plain>(prev_fn);
        }
    }
    return r;
}

sighandler_t signal(int signo, sighandler_t handler) noexcept
{
    // glibc's signal(): BSD semantics (SA_RESTART), the signal blocked in its handler.
    struct sigaction act {}, old {};
    act.sa_handler = handler;
    sigemptyset(&act.sa_mask);
    if (signo > 0 && signo < NSIG)
        sigaddset(&act.sa_mask, signo);
    act.sa_flags = SA_RESTART;
    if (sig::sigaction(signo, &act, &old) != 0)
        return SIG_ERR;
    return old.sa_handler;
}

}  // namespace rdmasock::sig
