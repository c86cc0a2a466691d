// The definitions the library's rdma-core calls bind to (src/rdma/dl.hh): part of the
// preload library only.  Programs and tests that link rdma-core themselves do without.
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
}  // namespace

// The definitions the library's calls bind to.  A call before load() succeeded is a bug
// (the engine loads first): it stops the process with a report, never calls through null.
#define RS_DEFINE(lib, name, ret, params, args)                                                     \
    extern "C" ret name params                                                                      \
    {                                                                                               \
        void *f = g_fn[rdmasock::rdma::dl::k_##name];                                               \
        RS_CHECK(f != nullptr);                                                                     \
        ErrnoBridge bridge;                                                                         \
        return reinterpret_cast<decltype(&name)>(f) args;                                           \
    }
RS_RDMA_FUNCTIONS(RS_DEFINE)
#undef RS_DEFINE
