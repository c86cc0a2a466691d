// The definitions the library's rdma-core calls bind to (src/rdma/dl.hh): part of the
// preload library only.  Programs and tests that link rdma-core themselves do without.
#include <atomic>
#include <cerrno>

#include "base/check.hh"
#include "rdma/dl.hh"
#include "rdma/dl_functions.hh"

using rdmasock::rdma::dl::g_fn;

namespace {
// rdma-core loaded in a namespace of its own reports errors in that namespace's errno:
// ours goes in, theirs comes out.
struct ErrnoBridge {
    int *(*loc)() = rdmasock::rdma::dl::g_ns_errno;
    ErrnoBridge() noexcept
    {
        if (loc != nullptr)
            *loc() = errno;
    }
    ~ErrnoBridge()
    {
        if (loc != nullptr)
            errno = *loc();
    }
};

// librdmacm's calls on different threads are ordered through the kernel: a request one
// thread makes (rdma_create_id, then rdma_resolve_addr) comes back as an event another
// reads (rdma_get_cm_event, which writes into the id the first one allocated).  The same
// order, where a race detector sees it: each call is an acquire and a release of one
// counter, before and after.  (Under TSan an order it cannot see is a report, even a
// suppressed one reads /proc/self/maps to match the suppression, on the engine's thread
// at the lowest free number; a program's dup2() onto that number lost its socket when
// the runtime closed its file: parity dup_then_number_reused in the CI's TSan run.)
// Connection set-up calls only; no verbs call, none on the data path.
std::atomic<unsigned> g_cm_order{0};
template <rdmasock::rdma::dl::Lib L>
struct CmOrder {
    CmOrder() noexcept { tick(); }
    ~CmOrder() { tick(); }
    static void tick() noexcept
    {
        if constexpr (L == rdmasock::rdma::dl::Lib::cm)
            g_cm_order.fetch_add(1, std::memory_order_acq_rel);
    }
};
}  // namespace

// The definitions the library's calls bind to.  A call before load() succeeded is a bug
// (the engine loads first): it stops the process with a report, never calls through null.
#define RS_DEFINE(lib, name, ret, params, args)                                                     \
    extern "C" ret name params                                                                      \
    {                                                                                               \
        void *f = g_fn[rdmasock::rdma::dl::k_##name];                                               \
        RS_CHECK(f != nullptr);                                                                     \
        CmOrder<rdmasock::rdma::dl::lib> order;                                                     \
        ErrnoBridge bridge;                                                                         \
        return reinterpret_cast<decltype(&name)>(f) args;                                           \
    }
RS_RDMA_FUNCTIONS(RS_DEFINE)
#undef RS_DEFINE
