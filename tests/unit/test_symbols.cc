// The one symbol list against the built library: every listed symbol is exported by the
// shim, and nothing else is but what it shares with the engine; the engine exports only
// its entry point.
#include <dlfcn.h>
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include <boost/test/unit_test.hpp>

namespace {
std::set<std::string> listed_symbols()
{
    std::ifstream in(RDMASOCK_SYMBOLS_DEF);
    std::set<std::string> names;
    std::regex entry(R"(^RS_(DATA|CTL|HOOK|LOAD|SHIM|VA)\([^,]*,\s*([A-Za-z_0-9]+),)");
    std::string line;
    while (std::getline(in, line)) {
        std::smatch m;
        if (std::regex_search(line, m, entry))
            BOOST_CHECK_MESSAGE(names.insert(m[2]).second, "declared twice: " << m[2]);
    }
    return names;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(symbols)

BOOST_AUTO_TEST_CASE(the_list_covers_the_socket_api_and_wait_primitives)
{
    auto names = listed_symbols();
    for (const char *must :
         {"socket", "socketpair", "bind", "listen", "accept", "accept4", "connect", "read", "readv",
          "write", "writev", "recv", "recvfrom", "recvmsg", "recvmmsg", "send", "sendto", "sendmsg",
          "sendmmsg", "sendfile", "sendfile64", "close", "shutdown", "dup", "dup2", "dup3", "fcntl",
          "fcntl64", "ioctl", "getsockopt", "setsockopt", "getsockname", "getpeername", "poll",
          "ppoll", "select", "pselect", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
          "epoll_pwait", "epoll_pwait2", "fork", "vfork", "__read_chk", "__recv_chk",
          "__recvfrom_chk", "__poll_chk", "__ppoll_chk", "close_range", "closefrom"})
        BOOST_CHECK_MESSAGE(names.count(must), "not interposed: " << must);
}

BOOST_AUTO_TEST_CASE(the_library_exports_exactly_the_list)
{
    void *h = dlopen(RDMASOCK_BUILD_LIB, RTLD_NOW | RTLD_LOCAL);
    BOOST_REQUIRE_MESSAGE(h != nullptr, "dlopen: " << dlerror());
    auto names = listed_symbols();
    for (const auto &n : names) {
        void *p = dlsym(h, n.c_str());
        BOOST_CHECK_MESSAGE(p != nullptr, "not exported: " << n);
        Dl_info info{};
        if (p && dladdr(p, &info))
            BOOST_CHECK_MESSAGE(std::string(info.dli_fname).find("librdmasock") != std::string::npos,
                                n << " resolves outside the library");
    }
    // What the shim shares with the engine is exported (src/base/shared.hh); the engine's
    // internals are not in the shim at all.
    for (const char *shared : {"_ZN8rdmasock4real1gE", "_ZN8rdmasock3fdt5g_topE"})
        BOOST_CHECK_MESSAGE(dlsym(h, shared) != nullptr, "not exported: " << shared);
    for (const char *hidden : {"_ZN8rdmasock2rt15ensure_startedEv", "rdmasock_load", "rdmasock_engine_start"})
        BOOST_CHECK_MESSAGE(dlsym(h, hidden) == nullptr, "exported but internal: " << hidden);

    // The engine, beside the shim: its one entry point, no interposed symbol.
    std::string engine = RDMASOCK_BUILD_LIB;
    engine.replace(engine.rfind('/') + 1, std::string::npos, "librdmasock_engine.so");
    void *eh = dlopen(engine.c_str(), RTLD_NOW | RTLD_LOCAL);
    BOOST_REQUIRE_MESSAGE(eh != nullptr, "dlopen: " << dlerror());
    BOOST_CHECK(dlsym(eh, "rdmasock_engine_start") != nullptr);
    for (const char *internal :
         {"_ZN8rdmasock2rt15ensure_startedEv", "_ZN8rdmasock4real1gE", "_ZN8rdmasock3fdt5g_topE"})
        BOOST_CHECK_MESSAGE(dlsym(eh, internal) == nullptr || dlsym(eh, internal) == dlsym(h, internal),
                            "the engine exports " << internal);
    Dl_info info{};
    void *r = dlsym(eh, "read");
    BOOST_CHECK_MESSAGE(r == nullptr || (dladdr(r, &info) &&
                                         std::string(info.dli_fname).find("engine") == std::string::npos),
                        "the engine exports read");
    dlclose(eh);
    dlclose(h);
}

BOOST_AUTO_TEST_SUITE_END()
