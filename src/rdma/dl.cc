#include "rdma/dl.hh"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <mutex>
#include <new>
#include <unistd.h>

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

// The parent's rdma-core descriptors (the connection manager's, the devices', the
// completion channels'): kept open, they would keep the parent's ids, queue pairs and
// registered memory alive as long as this process lives, after the parent's exit (an
// RDMA listener of a server that daemonizes would hold its port for nobody).
void close_device_descriptors() noexcept
{
    DIR *d = opendir("/proc/self/fd");
    if (d == nullptr)
        return;
    const int own = dirfd(d);
    char path[64], link[64];
    while (dirent *e = readdir(d)) {
        char *end = nullptr;
        long fd = strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || fd == own)
            continue;
        snprintf(path, sizeof path, "/proc/self/fd/%ld", fd);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n <= 0)
            continue;
        link[n] = '\0';
        if (strncmp(link, "/dev/infiniband/", 16) == 0 || strcmp(link, "anon_inode:[infinibandevent]") == 0)
            RS_REAL(close)(static_cast<int>(fd));
    }
    closedir(d);
}

}  // namespace

bool load() noexcept
{
    int s = g_state.load(std::memory_order_acquire);
    if (s != 0)
        return s > 0;
    std::lock_guard<std::mutex> lk(g_mu);
    if ((s = g_state.load(std::memory_order_relaxed)) != 0)
        return s > 0;
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
    return ok;
}

bool loaded() noexcept { return g_state.load(std::memory_order_acquire) > 0; }

bool program_has_it() noexcept { return g_program_has_it; }

unsigned generation() noexcept { return g_generation; }

bool after_fork_child() noexcept
{
    new (&g_mu) std::mutex();
    if (g_state.load(std::memory_order_relaxed) == 0)
        return false;
    // The parent's copy stays mapped, unused: its state (device handles, ids) is the
    // parent's.  The next load() makes a copy of our own.
    if (!g_program_has_it)
        close_device_descriptors();
    for (void *&f : g_fn)
        f = nullptr;
    g_ns_errno = nullptr;
    g_fresh = true;
    ++g_generation;
    g_state.store(0, std::memory_order_release);
    return true;
}

}  // namespace rdmasock::rdma::dl
