#include "rdma/dl.hh"

#include <atomic>
#include <dlfcn.h>
#include <mutex>
#include <new>
#include <unistd.h>
#include <vector>

#include "base/fd.hh"
#include "base/log.hh"
#include "base/real.hh"
#include "rdma/dl_functions.hh"

namespace rdmasock::rdma::dl {

void *g_fn[kFunctions];
int *(*g_ns_errno)() = nullptr;

namespace {

const char *const kSonames[] = {"libibverbs.so.1", "librdmacm.so.1"};

struct Entry {
    Lib lib;
    const char *name;
};
const Entry kEntries[kFunctions] = {
#define RS_ENTRY(lib, name, ret, params, args) {lib, #name},
    RS_RDMA_FUNCTIONS(RS_ENTRY)
#undef RS_ENTRY
};

std::atomic<int> g_state{0};  // 0 not tried, 1 loaded, -1 failed
std::atomic<bool> g_loading{false};
std::mutex g_mu;
bool g_fresh = false;           // load a copy of our own (a fork child of a process that loaded it)
bool g_program_has_it = false;
unsigned g_generation = 0;  // the program had loaded rdma-core itself before us

// dlopen, or in a fresh namespace: dlmopen, all in the namespace of the first library.
void *open_lib(const char *name, Lmid_t *ns) noexcept
{
    // RTLD_LOCAL: nothing of rdma-core becomes visible to the program's own lookups.
    if (!g_fresh)
        return dlopen(name, RTLD_NOW | RTLD_LOCAL);
    void *h = dlmopen(*ns, name, RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr && *ns == LM_ID_NEWLM && dlinfo(h, RTLD_DI_LMID, ns) != 0) {
        *ns = LM_ID_NEWLM;  // (cannot happen: the handle is valid)
        return nullptr;
    }
    return h;
}

// The descriptors of rdma-core objects the library made (the connection manager's
// channel, completion channels, the devices librdmacm opened for it).  A fork child
// closes its copies: kept open, they would keep the parent's ids, queue pairs and
// registered memory alive as long as the child lives, after the parent's exit (an RDMA
// listener of a server that daemonizes would hold its port for nobody).
// (Never destroyed: the engine's thread may still destroy objects, and so look here,
// while the process runs its static destructors at exit.)
std::mutex g_fds_mu;
std::vector<int> &g_fds = *new std::vector<int>();

}  // namespace

bool load() noexcept
{
    int s = g_state.load(std::memory_order_acquire);
    if (s != 0)
        return s > 0;
    std::lock_guard<std::mutex> lk(g_mu);
    if ((s = g_state.load(std::memory_order_relaxed)) != 0)
        return s > 0;
    g_loading.store(true, std::memory_order_relaxed);
    if (!g_fresh)
        g_program_has_it = dlopen(kSonames[0], RTLD_NOW | RTLD_NOLOAD) != nullptr;
    void *h[2] = {nullptr, nullptr};
    bool ok = true;
    Lmid_t ns = LM_ID_NEWLM;
    for (int l = 0; l < 2 && ok; ++l) {
        h[l] = open_lib(kSonames[l], &ns);
        if (h[l] == nullptr) {
            RS_WARN("rdma-core cannot be loaded%s (%s): connections stay on TCP",
                    g_fresh ? " in a namespace of its own" : "", dlerror());
            ok = false;
        }
    }
    int *(*ns_errno)() = nullptr;
    if (ok && g_fresh) {
        // The namespace has its own C library, and so its own errno: the forwarders copy it.
        void *libc = dlmopen(ns, "libc.so.6", RTLD_NOW | RTLD_LOCAL);
        ns_errno = libc == nullptr ? nullptr : reinterpret_cast<int *(*)()>(dlsym(libc, "__errno_location"));
        if (ns_errno == nullptr) {
            RS_WARN("rdma-core's namespace has no errno: connections stay on TCP");
            ok = false;
        }
    }
    void *fn[kFunctions] = {};
    for (int i = 0; i < kFunctions && ok; ++i) {
        fn[i] = dlsym(h[static_cast<int>(kEntries[i].lib)], kEntries[i].name);
        if (fn[i] == nullptr) {
            RS_WARN("rdma-core has no %s (too old?): connections stay on TCP", kEntries[i].name);
            ok = false;
        }
    }
    if (ok) {
        for (int i = 0; i < kFunctions; ++i)
            g_fn[i] = fn[i];
        g_ns_errno = ns_errno;
        RS_DEBUG("rdma-core loaded (%s, %s)%s", kSonames[0], kSonames[1], g_fresh ? " in a namespace of its own" : "");
    }
    // (A failed load keeps what it opened: dlclose of a half-initialised rdma-core is
    // not worth the risk, and it is tried once.)
    g_state.store(ok ? 1 : -1, std::memory_order_release);
    g_loading.store(false, std::memory_order_relaxed);
    return ok;
}

bool loaded() noexcept { return g_state.load(std::memory_order_acquire) > 0; }

bool program_has_it() noexcept { return g_program_has_it; }

void own_fd(int fd) noexcept
{
    std::lock_guard<std::mutex> lk(g_fds_mu);
    try {
        g_fds.push_back(fd);
    } catch (...) {  // (not closed in a fork child: only its resources outlive the parent)
    }
}

void disown_fd(int fd) noexcept
{
    util::disown(fd);  // (rdma-core closes it next, maybe not through our close())
    std::lock_guard<std::mutex> lk(g_fds_mu);
    for (auto it = g_fds.begin(); it != g_fds.end(); ++it)
        if (*it == fd) {
            g_fds.erase(it);
            return;
        }
}

unsigned generation() noexcept { return g_generation; }

bool after_fork_child() noexcept
{
    new (&g_mu) std::mutex();
    // (A load under way in another thread at the fork counts as done: what it opened
    // may be half set up, and is the parent's.)
    if (g_state.load(std::memory_order_relaxed) == 0 && !g_loading.load(std::memory_order_relaxed))
        return false;
    g_loading.store(false, std::memory_order_relaxed);
    // The parent's copy stays mapped, unused: its state (device handles, ids) is the
    // parent's.  The next load() makes a copy of our own.
    new (&g_fds_mu) std::mutex();
    for (int fd : g_fds)
        util::close_own(fd);
    g_fds.clear();
    for (void *&f : g_fn)
        f = nullptr;
    g_ns_errno = nullptr;
    g_fresh = true;
    ++g_generation;
    g_state.store(0, std::memory_order_release);
    return true;
}

}  // namespace rdmasock::rdma::dl
