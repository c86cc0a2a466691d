// Device test: a locked-memory limit too small for a registration.  In a child process
// (so the limit and the dropped capability stay there): RLIMIT_MEMLOCK = 64 KiB, then
// CAP_IPC_LOCK removed from the effective, permitted, inheritable and ambient sets and
// the bounding set (as root, CAP_IPC_LOCK would make the kernel ignore the limit), then
// a 1 MiB registration must fail cleanly with ENOMEM or EPERM, memlock_too_small()
// must say so, and a 4 KiB registration must still work.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_MODULE rdma memlock
#include <boost/test/unit_test.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <linux/capability.h>
#include <string>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.hh"

using namespace rdmasock::rdma;
using namespace rdmasock::test;

RDMA_DEVICE_TEST_MAIN

namespace {

constexpr size_t kLimit = 64 * 1024;
constexpr size_t kBig = 1024 * 1024;

bool capget_ipc_lock(bool *effective, bool *permitted)
{
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3] = {};
    if (syscall(SYS_capget, &hdr, d) != 0)
        return false;
    int i = CAP_TO_INDEX(CAP_IPC_LOCK);
    unsigned m = CAP_TO_MASK(CAP_IPC_LOCK);
    *effective = (d[i].effective & m) != 0;
    *permitted = (d[i].permitted & m) != 0;
    return true;
}

// Removes CAP_IPC_LOCK from every set of this process.  "" or what failed.
std::string drop_cap_ipc_lock()
{
    if (prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0) != 0 && errno != EINVAL)
        return std::string("PR_CAPBSET_DROP: ") + std::strerror(errno);
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, CAP_IPC_LOCK, 0, 0);
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3] = {};
    if (syscall(SYS_capget, &hdr, d) != 0)
        return std::string("capget: ") + std::strerror(errno);
    int i = CAP_TO_INDEX(CAP_IPC_LOCK);
    unsigned m = CAP_TO_MASK(CAP_IPC_LOCK);
    d[i].effective &= ~m;
    d[i].permitted &= ~m;
    d[i].inheritable &= ~m;
    if (syscall(SYS_capset, &hdr, d) != 0)
        return std::string("capset: ") + std::strerror(errno);
    bool eff = true, perm = true;
    if (!capget_ipc_lock(&eff, &perm) || eff || perm)
        return "CAP_IPC_LOCK still present after capset";
    return "";
}

// Runs fn in a child; its exit status is the number of failed checks (0 = all good),
// its messages go to a pipe the parent reports.  Returns the status, -1 on a crash.
template <class Fn>
int in_child(Fn fn, std::string *out)
{
    int pfd[2];
    if (pipe(pfd) != 0)
        return -2;
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        std::string log;
        int failures = fn(log);
        (void)!write(pfd[1], log.data(), log.size());
        _exit(failures > 100 ? 100 : failures);
    }
    close(pfd[1]);
    char buf[4096];
    ssize_t n;
    while ((n = read(pfd[0], buf, sizeof buf)) > 0)
        out->append(buf, static_cast<size_t>(n));
    close(pfd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
        *out += "child killed by signal " + std::to_string(WTERMSIG(status)) + "\n";
        return -1;
    }
    return WEXITSTATUS(status);
}

#define CHILD_CHECK(cond, msg)                                                          \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            log += std::string("FAILED: ") + #cond + ": " + (msg) + "\n";              \
            ++failures;                                                                 \
        } else {                                                                        \
            log += std::string("ok: ") + #cond + "\n";                                  \
        }                                                                               \
    } while (0)

int set_limit(size_t bytes)
{
    rlimit rl{bytes, bytes};
    return setrlimit(RLIMIT_MEMLOCK, &rl);
}

}  // namespace

BOOST_AUTO_TEST_CASE(registration_over_memlock_limit_fails_cleanly)
{
    std::string dev = device_name();
    std::string out;
    int rc = in_child(
        [&](std::string &log) {
            int failures = 0;
            CHILD_CHECK(set_limit(kLimit) == 0, std::strerror(errno));
            std::string why = drop_cap_ipc_lock();
            CHILD_CHECK(why.empty(), why);
            log += "child: RLIMIT_MEMLOCK=64 KiB, CAP_IPC_LOCK dropped (capset + bounding set)\n";
            int err = 0;
            auto ctx = Context::open_by_name(dev.c_str(), &err);
            CHILD_CHECK(ctx != nullptr, std::strerror(err));
            auto pd = Pd::create(ctx, &err);
            CHILD_CHECK(pd != nullptr, std::strerror(err));
            if (!pd)
                return failures;
            Buffer big(kBig);
            CHILD_CHECK(memlock_too_small(big.data, kBig), "should predict the failure");
            err = 0;
            auto mr = Mr::reg(pd, big.data, kBig,
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &err);
            CHILD_CHECK(mr == nullptr, "1 MiB registered despite a 64 KiB limit");
            CHILD_CHECK(err == ENOMEM || err == EPERM,
                        std::string("errno ") + std::to_string(err) + " " + std::strerror(err));
            log += std::string("child: Mr::reg(1 MiB) -> null, err=") + std::to_string(err) +
                   " (" + std::strerror(err) + ")\n";
            // Small enough: the limit is the only reason.
            Buffer small(4096);
            CHILD_CHECK(!memlock_too_small(small.data, 4096), "4 KiB fits in 64 KiB");
            auto mr2 = Mr::reg(pd, small.data, 4096, IBV_ACCESS_LOCAL_WRITE, &err);
            CHILD_CHECK(mr2 != nullptr, std::strerror(err));
            // With the 4 KiB pinned, 60 KiB still fits, 64 KiB no longer does.
            CHILD_CHECK(!memlock_too_small(kLimit - 4096), "60 KiB more fits");
            CHILD_CHECK(memlock_too_small(kLimit), "64 KiB more does not");
            return failures;
        },
        &out);
    BOOST_TEST_MESSAGE(out);
    BOOST_CHECK_MESSAGE(rc == 0, "child without CAP_IPC_LOCK: status " << rc << "\n" << out);
}

BOOST_AUTO_TEST_CASE(cap_ipc_lock_overrides_the_limit)
{
    // Root keeps CAP_IPC_LOCK: the kernel ignores RLIMIT_MEMLOCK, and so must
    // memlock_too_small().
    bool eff = false, perm = false;
    BOOST_REQUIRE(capget_ipc_lock(&eff, &perm));
    if (!eff) {
        BOOST_TEST_MESSAGE("no CAP_IPC_LOCK here (not root): nothing to check");
        return;
    }
    std::string dev = device_name();
    std::string out;
    int rc = in_child(
        [&](std::string &log) {
            int failures = 0;
            CHILD_CHECK(set_limit(kLimit) == 0, std::strerror(errno));
            CHILD_CHECK(!memlock_too_small(kBig), "CAP_IPC_LOCK makes the limit moot");
            int err = 0;
            auto ctx = Context::open_by_name(dev.c_str(), &err);
            auto pd = Pd::create(ctx, &err);
            Buffer big(kBig);
            auto mr = Mr::reg(pd, big.data, kBig, IBV_ACCESS_LOCAL_WRITE, &err);
            CHILD_CHECK(mr != nullptr, std::strerror(err));
            return failures;
        },
        &out);
    BOOST_CHECK_MESSAGE(rc == 0, "child with CAP_IPC_LOCK: status " << rc << "\n" << out);
}

BOOST_AUTO_TEST_CASE(unlimited_is_never_too_small)
{
    std::string out;
    int rc = in_child(
        [&](std::string &log) {
            int failures = 0;
            if (set_limit(RLIM_INFINITY) != 0) {
                log += "cannot raise RLIMIT_MEMLOCK to unlimited here: nothing to check\n";
                return failures;
            }
            CHILD_CHECK(!memlock_too_small(size_t(1) << 40), "unlimited");
            return failures;
        },
        &out);
    BOOST_CHECK_MESSAGE(rc == 0, out);
}
