#include "process/copies.hh"

#include <cerrno>
#include <new>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fd.hh"
#include "base/real.hh"

namespace rdmasock::copies {

namespace {

constexpr unsigned kSlots = 16384;  // 640 KiB of address space, touched as used
constexpr unsigned kHolders = 4;    // processes named per slot (more: held while it lives)
// A slot's word: its id (0: free) above its state, changed only by compare-and-swap, so
// that no move lands on a slot another connection has taken meanwhile.
constexpr unsigned kStateBits = 8;
constexpr uint64_t kClaiming = ~0ull >> kStateBits;  // the id while a claim fills it in

uint64_t word(uint64_t id, State st) noexcept { return id << kStateBits | static_cast<uint64_t>(st); }
uint64_t id_of(uint64_t w) noexcept { return w >> kStateBits; }
State state_of(uint64_t w) noexcept { return static_cast<State>(w & ((1u << kStateBits) - 1)); }

struct Slot {
    std::atomic<uint64_t> word;
    std::atomic<int32_t> owner;
    std::atomic<int32_t> holders[kHolders];
    std::atomic<uint32_t> overflow;  // a holder not named: held until the owner releases it
    std::atomic<uint32_t> released;  // the owner is done; freed once no holder lives
};

struct Table {
    std::atomic<uint64_t> next_id;
    std::atomic<uint64_t> asks;
    std::atomic<uint32_t> high;  // slots [0, high) have been used
    std::atomic<uint32_t> hint;  // where the next search for a free slot starts
    Slot slots[kSlots];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free,
              "the table is shared between processes: its atomics must be lock-free");

// Shared with the fork children made after it was mapped (never unmapped: they may look).
std::atomic<Table *> g_table{nullptr};

// (The forking thread's; the child's one thread is its copy.)
thread_local bool t_fork_shares = false;

Table *table() noexcept { return g_table.load(std::memory_order_acquire); }

Table *map_table() noexcept
{
    if (Table *t = table())
        return t;
    void *p = mmap(nullptr, sizeof(Table), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return nullptr;
    Table *t = new (p) Table;  // (zero pages already: every slot free, none touched)
    Table *none = nullptr;
    if (!g_table.compare_exchange_strong(none, t, std::memory_order_acq_rel)) {
        munmap(p, sizeof(Table));
        return none;
    }
    return t;
}

// r's slot, while it is r's.
Slot *slot_of(Ref r) noexcept
{
    Table *t = table();
    if (t == nullptr || !r || r.index >= kSlots)
        return nullptr;
    Slot &s = t->slots[r.index];
    return id_of(s.word.load(std::memory_order_acquire)) == r.id ? &s : nullptr;
}

// Liveness of a few processes, each looked up once per scan.
class AliveCache {
public:
    bool operator()(pid_t p) noexcept
    {
        for (unsigned i = 0; i < n_; ++i)
            if (pid_[i] == p)
                return alive_[i];
        const bool a = alive(p);
        if (n_ < kN) {
            pid_[n_] = p;
            alive_[n_++] = a;
        }
        return a;
    }

private:
    static constexpr unsigned kN = 16;
    pid_t pid_[kN] = {};
    bool alive_[kN] = {};
    unsigned n_ = 0;
};

// A holder other than `self` that lives; dead ones are forgotten on the way.
bool live_holder(Slot &s, pid_t self, AliveCache &alive_now) noexcept
{
    if (s.overflow.load() != 0)
        return true;
    bool any = false;
    for (auto &h : s.holders) {
        int32_t p = h.load();
        if (p == 0 || p == self)
            continue;
        if (p < 0 || alive_now(p))  // (a placeholder: a fork under way)
            any = true;
        else
            h.compare_exchange_strong(p, 0);
    }
    return any;
}

bool no_holder(Slot &s) noexcept
{
    if (s.overflow.load() != 0)
        return false;
    for (auto &h : s.holders)
        if (h.load() != 0)
            return false;
    return true;
}

// (Sequentially consistent, as are the holders' writes and `released`: a release and
// the last holder's drop each see the other's write, so one of them frees the slot.)
void free_slot(Slot &s, uint64_t id) noexcept
{
    uint64_t w = s.word.load();
    while (id_of(w) == id && !s.word.compare_exchange_weak(w, 0)) {
    }
}

// Claims slot `i` whose word is `seen` (free, or a slot nobody can need any more).
Ref claim(Table &t, unsigned i, uint64_t seen, pid_t self) noexcept
{
    Slot &s = t.slots[i];
    if (!s.word.compare_exchange_strong(seen, word(kClaiming, State::free), std::memory_order_acq_rel))
        return {};
    s.owner.store(self, std::memory_order_relaxed);
    for (auto &h : s.holders)
        h.store(0, std::memory_order_relaxed);
    s.overflow.store(0, std::memory_order_relaxed);
    s.released.store(0, std::memory_order_relaxed);
    const uint64_t id = t.next_id.fetch_add(1, std::memory_order_relaxed) + 1;
    s.word.store(word(id, State::owned), std::memory_order_release);
    uint32_t h = t.high.load(std::memory_order_relaxed);
    while (h < i + 1 && !t.high.compare_exchange_weak(h, i + 1, std::memory_order_acq_rel)) {
    }
    t.hint.store((i + 1) % kSlots, std::memory_order_relaxed);
    return {i, id};
}

// The owners' wake-up descriptors (a fork child's, inherited by its own children), with
// the file each was (a number the program closed behind the library's back may be
// another file's by now: never written then).
struct Wake {
    std::atomic<pid_t> owner{0};
    std::atomic<int> fd{-1};
    dev_t dev = 0;
    ino_t ino = 0;
};
Wake g_wakes[8];

}  // namespace

void keep_wake(pid_t owner, int fd) noexcept
{
    struct stat st {};
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            util::close_own(fd);
        return;
    }
    for (auto &w : g_wakes) {
        pid_t none = 0;
        if (w.owner.load(std::memory_order_relaxed) == owner || w.owner.compare_exchange_strong(none, owner)) {
            const int old = w.fd.exchange(-1, std::memory_order_acq_rel);
            if (old >= 0 && old != fd)
                util::close_own(old);
            w.dev = st.st_dev;
            w.ino = st.st_ino;
            w.fd.store(fd, std::memory_order_release);
            return;
        }
    }
    util::close_own(fd);  // (more owners than entries: the owner's engine looks every 250 ms)
}

void wake(pid_t owner) noexcept
{
    for (auto &w : g_wakes)
        if (w.owner.load(std::memory_order_relaxed) == owner) {
            const int fd = w.fd.load(std::memory_order_acquire);
            struct stat st {};
            uint64_t one = 1;
            if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == w.dev && st.st_ino == w.ino &&
                RS_REAL(write)(fd, &one, sizeof one) < 0) {
            }
            return;
        }
}

void on_fds_closed(unsigned first, unsigned last) noexcept
{
    for (auto &w : g_wakes) {
        int fd = w.fd.load(std::memory_order_relaxed);
        if (fd >= 0 && static_cast<unsigned>(fd) >= first && static_cast<unsigned>(fd) <= last)
            w.fd.compare_exchange_strong(fd, -1, std::memory_order_acq_rel);
    }
}

bool alive(pid_t pid) noexcept
{
    if (pid <= 0)
        return false;
    // No descriptor (a pidfd would take a low number for a moment, and the program's
    // next socket another one than without the library: parity dup2_over_live_socket
    // under ASan): a child of ours that exited and waits to be reaped is found by
    // waitid(WNOWAIT), which leaves it to be reaped; any other process by kill(0).
    const int saved = errno;
    bool live = !(kill(pid, 0) != 0 && errno == ESRCH);
    siginfo_t si{};
    if (live && waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid)
        live = false;
    errno = saved;
    return live;
}

bool mapped() noexcept { return table() != nullptr; }

Ref add() noexcept
{
    Table *t = map_table();
    if (t == nullptr)
        return {};
    const pid_t self = getpid();
    const unsigned from = t->hint.load(std::memory_order_relaxed) % kSlots;
    for (unsigned k = 0; k < kSlots; ++k) {
        const unsigned i = (from + k) % kSlots;
        if (t->slots[i].word.load(std::memory_order_acquire) == 0)
            if (Ref r = claim(*t, i, 0, self))
                return r;
    }
    // Full: take a slot whose owner and holders are all gone (they died without a word).
    AliveCache alive_now;
    for (unsigned i = 0; i < kSlots; ++i) {
        Slot &s = t->slots[i];
        const uint64_t w = s.word.load(std::memory_order_acquire);
        if (w == 0 || id_of(w) == kClaiming)
            continue;
        const bool owner_done = s.released.load() != 0 || !alive_now(s.owner.load(std::memory_order_relaxed));
        if (owner_done && !live_holder(s, 0, alive_now))
            if (Ref r = claim(*t, i, w, self))
                return r;
    }
    return {};
}

void add_holder(Ref r, pid_t pid) noexcept
{
    Slot *s = slot_of(r);
    if (s == nullptr || pid == 0)
        return;
    for (int pass = 0; pass < 2; ++pass) {
        for (auto &h : s->holders)
            if (h.load() == pid)
                return;  // (named already: a socket with several numbers)
        for (auto &h : s->holders) {
            int32_t none = 0;
            if (h.compare_exchange_strong(none, pid))
                return;
        }
        AliveCache alive_now;  // full: forget the holders that are gone, then look again
        live_holder(*s, 0, alive_now);
    }
    s->overflow.store(1);
}

void rename_holder(Ref r, pid_t from, pid_t to) noexcept
{
    Slot *s = slot_of(r);
    if (s == nullptr || from == 0)
        return;
    for (auto &h : s->holders) {
        int32_t p = from;
        if (h.compare_exchange_strong(p, to))
            return;
    }
}

namespace {
// (Cached by the forking thread: the child, whose thread is its copy, reads the same.)
thread_local pid_t t_placeholder = 0;
}  // namespace

pid_t fork_placeholder() noexcept
{
    if (t_placeholder == 0)
        t_placeholder = -static_cast<pid_t>(syscall(SYS_gettid));
    return t_placeholder;
}

void forget_placeholder() noexcept { t_placeholder = 0; }

void drop_holder(Ref r) noexcept
{
    Slot *s = slot_of(r);
    if (s == nullptr)
        return;
    const pid_t self = getpid();
    for (auto &h : s->holders) {
        int32_t p = self;
        h.compare_exchange_strong(p, 0);
    }
    if (s->released.load() != 0 && no_holder(*s))
        free_slot(*s, r.id);
}

bool held(Ref r) noexcept
{
    Slot *s = slot_of(r);
    if (s == nullptr)
        return false;
    AliveCache alive_now;
    return live_holder(*s, getpid(), alive_now);
}

State state(Ref r) noexcept
{
    Table *t = table();
    if (t == nullptr || !r || r.index >= kSlots)
        return State::ended;
    const uint64_t w = t->slots[r.index].word.load(std::memory_order_acquire);
    return id_of(w) == r.id ? state_of(w) : State::ended;
}

bool move(Ref r, State from, State to) noexcept
{
    Table *t = table();
    if (t == nullptr || !r || r.index >= kSlots)
        return false;
    uint64_t w = word(r.id, from);
    return t->slots[r.index].word.compare_exchange_strong(w, word(r.id, to), std::memory_order_acq_rel);
}

bool ask(Ref r) noexcept
{
    if (!move(r, State::owned, State::wanted))
        return false;
    table()->asks.fetch_add(1, std::memory_order_release);
    return true;
}

uint64_t asks() noexcept
{
    Table *t = table();
    return t == nullptr ? 0 : t->asks.load(std::memory_order_acquire);
}

void note_fork_shares(bool on) noexcept { t_fork_shares = on; }
bool fork_shares() noexcept { return t_fork_shares; }

void release(Ref r) noexcept
{
    Slot *s = slot_of(r);
    if (s == nullptr)
        return;
    s->released.store(1);
    AliveCache alive_now;
    if (!live_holder(*s, getpid(), alive_now))
        free_slot(*s, r.id);
}

size_t wanted(Ref *refs, size_t max) noexcept
{
    Table *t = table();
    if (t == nullptr)
        return 0;
    const pid_t self = getpid();
    size_t n = 0;
    const uint32_t high = t->high.load(std::memory_order_acquire);
    for (uint32_t i = 0; i < high && n < max; ++i) {
        Slot &s = t->slots[i];
        const uint64_t w = s.word.load(std::memory_order_acquire);
        if (w != 0 && state_of(w) == State::wanted && s.owner.load(std::memory_order_relaxed) == self)
            refs[n++] = Ref{i, id_of(w)};
    }
    return n;
}

bool watching() noexcept
{
    Table *t = table();
    if (t == nullptr)
        return false;
    const pid_t self = getpid();
    AliveCache alive_now;
    bool any = false;
    const uint32_t high = t->high.load(std::memory_order_acquire);
    for (uint32_t i = 0; i < high; ++i) {
        Slot &s = t->slots[i];
        const uint64_t w = s.word.load(std::memory_order_acquire);
        if (w == 0 || id_of(w) == kClaiming || s.owner.load(std::memory_order_relaxed) != self)
            continue;
        const State st = state_of(w);
        const bool released = s.released.load() != 0;
        if (!released && st != State::owned && st != State::wanted)
            continue;
        if (live_holder(s, self, alive_now))
            any = true;
        else if (released)
            free_slot(s, id_of(w));  // (its last holder died without letting it go)
    }
    return any;
}

pid_t owner(Ref r) noexcept
{
    Slot *s = slot_of(r);
    return s == nullptr ? 0 : s->owner.load(std::memory_order_relaxed);
}

}  // namespace rdmasock::copies
