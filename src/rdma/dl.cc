#include "rdma/dl.hh"

#include <atomic>
#include <dlfcn.h>
#include <mutex>

#include "base/log.hh"
#include "rdma/dl_functions.hh"

namespace rdmasock::rdma::dl {

void *g_fn[kFunctions];

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

}  // namespace

bool load() noexcept
{
    int s = g_state.load(std::memory_order_acquire);
    if (s != 0)
        return s > 0;
    std::lock_guard<std::mutex> lk(g_mu);
    if ((s = g_state.load(std::memory_order_relaxed)) != 0)
        return s > 0;
    void *h[2] = {nullptr, nullptr};
    bool ok = true;
    for (int l = 0; l < 2 && ok; ++l) {
        // RTLD_LOCAL: nothing of rdma-core becomes visible to the program's own lookups.
        h[l] = dlopen(kSonames[l], RTLD_NOW | RTLD_LOCAL);
        if (h[l] == nullptr) {
            RS_WARN("rdma-core cannot be loaded (%s): connections stay on TCP", dlerror());
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
        RS_DEBUG("rdma-core loaded (%s, %s)", kSonames[0], kSonames[1]);
    }
    // (A failed load keeps what it opened: dlclose of a half-initialised rdma-core is
    // not worth the risk, and it is tried once.)
    g_state.store(ok ? 1 : -1, std::memory_order_release);
    return ok;
}

bool loaded() noexcept { return g_state.load(std::memory_order_acquire) > 0; }

}  // namespace rdmasock::rdma::dl
