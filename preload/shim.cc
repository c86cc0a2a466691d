// The shim's constructor and the engine's loader (preload/shim.hh).
#include "preload/shim.hh"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include "process/secure.hh"

// Defined when the engine is linked into the same library (the ASan build of the tests):
// then it is not loaded from a file.
extern "C" const rdmasock::entry::Table *rdmasock_engine_start() noexcept __attribute__((weak));

namespace rdmasock::shim {

const entry::Table *g_engine = nullptr;

namespace {

constexpr const char kEngineFile[] = "librdmasock_engine.so";

enum State : int { kNotTried, kLoaded, kFailed };
int g_state = kNotTried;  // under g_mu
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
__thread bool t_loading __attribute__((tls_model("initial-exec"))) = false;

// The directory the shim was loaded from, with a trailing '/': the engine is beside it.
char g_dir[PATH_MAX];

// dladdr names the shim as it was preloaded; a relative name (LD_PRELOAD=./x.so) is taken
// from /proc/self/maps instead, where the kernel gives the path whatever the working
// directory has become since.
void find_dir() noexcept
{
    Dl_info info{};
    if (dladdr(reinterpret_cast<void *>(&find_dir), &info) == 0 || info.dli_fname == nullptr)
        return;
    char file[PATH_MAX];
    snprintf(file, sizeof file, "%s", info.dli_fname);
    if (file[0] != '/') {
        file[0] = '\0';
        FILE *maps = fopen("/proc/self/maps", "re");
        if (maps == nullptr)
            return;
        const auto here = reinterpret_cast<unsigned long>(&find_dir);
        char line[PATH_MAX + 128];
        while (fgets(line, sizeof line, maps) != nullptr) {
            unsigned long lo = 0, hi = 0;
            char *path = strchr(line, '/');
            if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo <= here && here < hi && path != nullptr) {
                path[strcspn(path, "\n")] = '\0';
                snprintf(file, sizeof file, "%s", path);
                break;
            }
        }
        fclose(maps);
    }
    const char *slash = strrchr(file, '/');
    if (slash == nullptr)
        return;
    const size_t len = static_cast<size_t>(slash - file) + 1;
    if (len + sizeof kEngineFile > sizeof g_dir)
        return;
    memcpy(g_dir, file, len);
    g_dir[len] = '\0';
}

const entry::Table *open_engine() noexcept
{
    if (rdmasock_engine_start != nullptr)
        return rdmasock_engine_start();
    find_dir();
    char path[PATH_MAX + sizeof kEngineFile];
    snprintf(path, sizeof path, "%s%s", g_dir, kEngineFile);
    const char *why = "the shim's own path is unknown";
    if (g_dir[0] != '\0') {
        if (void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE)) {
            using Start = const entry::Table *(*)() noexcept;
            if (auto start = reinterpret_cast<Start>(dlsym(h, RDMASOCK_ENGINE_START)))
                return start();
        }
        why = dlerror();
    }
    char line[PATH_MAX + 256];
    int n = snprintf(line, sizeof line,
                     "rdmasock: cannot load %s (%s): connections stay on kernel TCP\n", path,
                     why != nullptr ? why : "no entry point");
    if (n > 0)
        (void)!RS_REAL(write)(STDERR_FILENO, line, static_cast<size_t>(n) < sizeof line ? n : sizeof line - 1);
    return nullptr;
}

// A fork while another thread loads the engine waits for it: the child never inherits a
// held lock or a half-done load.  (Registered at the first load, not at start.)
void before_fork() noexcept { pthread_mutex_lock(&g_mu); }
void after_fork() noexcept { pthread_mutex_unlock(&g_mu); }
pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
void register_atfork() noexcept { pthread_atfork(before_fork, after_fork, after_fork); }

// All the constructor does.
__attribute__((constructor(101))) void rdmasock_load() noexcept { rt::on_load(); }

}  // namespace

const entry::Table *load() noexcept
{
    if (const entry::Table *e = engine())
        return e;
    if (rt::secure() || t_loading)
        return nullptr;
    int saved = errno;
    pthread_once(&g_atfork_once, register_atfork);
    pthread_mutex_lock(&g_mu);
    if (g_state == kNotTried) {
        t_loading = true;
        real::resolve_all();  // from now on no call resolves a symbol (signal handlers)
        const entry::Table *t = open_engine();
        t_loading = false;
        g_state = t != nullptr ? kLoaded : kFailed;
        if (t != nullptr)
            __atomic_store_n(&g_engine, t, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_mu);
    errno = saved;
    return engine();
}

}  // namespace rdmasock::shim
