// Device test: the RAII owners of src/rdma/owners.hh, created and destroyed in every
// order their handles can be dropped in, with no leaked kernel object (checked against
// `rdma -j resource show` after each case).
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_MODULE rdma owners
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <poll.h>
#include <random>
#include <set>
#include <sys/mman.h>

#include "common.hh"

using namespace rdmasock::rdma;
using namespace rdmasock::test;

RDMA_DEVICE_TEST_MAIN

namespace {

struct Env {
    std::string dev;
    std::string addr;
};

const Env &env()
{
    static Env e = [] {
        Env x;
        x.dev = device_name();
        x.addr = test_addr();
        settle_rdmacm(x.addr);
        return x;
    }();
    return e;
}

ResCounts baseline()
{
    std::string why;
    ResCounts c = resource_counts(env().dev, &why);
    BOOST_REQUIRE_MESSAGE(!c.empty(), "cannot read rdma resource counters: " << why);
    BOOST_TEST_MESSAGE("baseline " << env().dev << ": " << format_counts(c));
    return c;
}

void check_back_to(const ResCounts &base, const std::string &what)
{
    settle_rdmacm(env().addr);
    ResCounts now = wait_for_counts(env().dev, base, 3000);
    BOOST_CHECK_MESSAGE(now == base, what << ": rdma resources " << format_counts(now)
                                          << ", baseline " << format_counts(base));
}

// counts - base, per key
ResCounts delta(const ResCounts &now, const ResCounts &base)
{
    ResCounts d;
    for (const auto &[k, v] : now) {
        auto it = base.find(k);
        long diff = v - (it == base.end() ? 0 : it->second);
        if (diff != 0)
            d[k] = diff;
    }
    return d;
}

// Which drop orders to run: by default one per distinct teardown (see
// distinct_orders); TEST_RDMA_ORDERS=all runs all 7! = 5040 permutations,
// TEST_RDMA_ORDERS=N a fixed-seed sample of N distinct ones.
const char *orders_mode()
{
    const char *s = std::getenv("TEST_RDMA_ORDERS");
    return s != nullptr && *s != '\0' ? s : "distinct";
}

ibv_qp_init_attr rc_attr()
{
    ibv_qp_init_attr a{};
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 16;
    a.cap.max_recv_wr = 16;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    return a;
}

// ------------------------------------------------------------------ verbs stack

// A complete verbs object graph, each object held by one handle here.
struct VerbsStack {
    Buffer buf{65536};  // first: freed after every handle below is dropped
    std::shared_ptr<Context> ctx;
    std::shared_ptr<Pd> pd;
    std::shared_ptr<CompChannel> ch;
    std::shared_ptr<Cq> scq, rcq;
    std::shared_ptr<Mr> mr;
    std::shared_ptr<Qp> qp;
    static constexpr int kHandles = 7;
    static const char *name(int h)
    {
        static const char *n[] = {"ctx", "pd", "chan", "send_cq", "recv_cq", "mr", "qp"};
        return n[h];
    }
    // Bit mask of the objects each object holds a shared_ptr to (owners.hh).
    static unsigned parents(int h)
    {
        static const unsigned p[] = {0, 1u << 0, 1u << 0, 1u << 0 | 1u << 2,
                                     1u << 0 | 1u << 2, 1u << 1, 1u << 1 | 1u << 3 | 1u << 4};
        return p[h];
    }
    void drop(int h)
    {
        switch (h) {
        case 0: ctx.reset(); break;
        case 1: pd.reset(); break;
        case 2: ch.reset(); break;
        case 3: scq.reset(); break;
        case 4: rcq.reset(); break;
        case 5: mr.reset(); break;
        case 6: qp.reset(); break;
        }
    }
};

// Builds the stack; false (with a message) on failure.
bool build(VerbsStack &s, std::string *why)
{
    int err = 0;
    auto fail = [&](const char *what) {
        *why = std::string(what) + ": " + std::strerror(err);
        return false;
    };
    if (!(s.ctx = Context::open_by_name(env().dev.c_str(), &err)))
        return fail("Context::open_by_name");
    if (!(s.pd = Pd::create(s.ctx, &err)))
        return fail("Pd::create");
    if (!(s.ch = CompChannel::create(s.ctx, &err)))
        return fail("CompChannel::create");
    if (!(s.scq = Cq::create(s.ctx, s.ch, 16, &err)))
        return fail("Cq::create (send)");
    if (!(s.rcq = Cq::create(s.ctx, s.ch, 16, &err)))
        return fail("Cq::create (recv)");
    if (!(s.mr = Mr::reg(s.pd, s.buf.data, s.buf.size,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &err)))
        return fail("Mr::reg");
    if (!(s.qp = Qp::create(s.pd, s.scq, s.rcq, rc_attr(), &err)))
        return fail("Qp::create");
    return true;
}

int modify_to_init(ibv_qp *qp)
{
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int post_recv(ibv_qp *qp, const Mr &mr, uint64_t wr_id)
{
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(mr.addr());
    sge.length = 64;
    sge.lkey = mr.lkey();
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_recv(qp, &wr, &bad);
}

// ------------------------------------------------------------------ rdma_cm stack

struct CmStack {
    std::shared_ptr<CmChannel> cmch;
    std::shared_ptr<CmId> id;
    std::shared_ptr<Context> ctx;  // borrowed
    std::shared_ptr<Pd> pd;
    std::shared_ptr<CompChannel> ch;
    std::shared_ptr<Cq> cq;
    std::shared_ptr<Qp> qp;
    static constexpr int kHandles = 7;
    static const char *name(int h)
    {
        static const char *n[] = {"cm_chan", "cm_id", "ctx", "pd", "chan", "cq", "qp"};
        return n[h];
    }
    // The borrowed ctx holds no handle here (only librdmacm's device pin).
    static unsigned parents(int h)
    {
        static const unsigned p[] = {0, 1u << 0, 0, 1u << 2, 1u << 2, 1u << 2 | 1u << 4,
                                     1u << 1 | 1u << 3 | 1u << 5};
        return p[h];
    }
    void drop(int h)
    {
        switch (h) {
        case 0: cmch.reset(); break;
        case 1: id.reset(); break;
        case 2: ctx.reset(); break;
        case 3: pd.reset(); break;
        case 4: ch.reset(); break;
        case 5: cq.reset(); break;
        case 6: qp.reset(); break;
        }
    }
};

bool build(CmStack &s, std::string *why)
{
    int err = 0;
    auto fail = [&](const char *what) {
        *why = std::string(what) + ": " + std::strerror(err);
        return false;
    };
    if (!(s.cmch = CmChannel::create(&err)))
        return fail("CmChannel::create");
    if (!(s.id = CmId::create(s.cmch, nullptr, RDMA_PS_TCP, &err)))
        return fail("CmId::create");
    sockaddr_in sin = make_sockaddr(env().addr, 0);
    if (rdma_bind_addr(s.id->get(), reinterpret_cast<sockaddr *>(&sin)) != 0) {
        err = errno;
        return fail("rdma_bind_addr");
    }
    if (!(s.ctx = s.id->context())) {
        err = ENODEV;
        return fail("CmId::context");
    }
    if (!(s.pd = Pd::create(s.ctx, &err)))
        return fail("Pd::create");
    if (!(s.ch = CompChannel::create(s.ctx, &err)))
        return fail("CompChannel::create");
    if (!(s.cq = Cq::create(s.ctx, s.ch, 32, &err)))
        return fail("Cq::create");
    if (!(s.qp = Qp::create_on(s.id, s.pd, s.cq, s.cq, rc_attr(), &err)))
        return fail("Qp::create_on");
    return true;
}

// What dropping the handles in `order` does, as the list of (handle dropped, set of
// objects destroyed by that drop) for every drop that destroys something, computed
// on the ownership graph.  Two orders with the same teardown run exactly the same
// destructor calls in the same sequence.
template <class Stack>
std::vector<std::pair<int, unsigned>> teardown(const std::array<int, Stack::kHandles> &order)
{
    std::vector<std::pair<int, unsigned>> t;
    unsigned all = (1u << Stack::kHandles) - 1, alive = all, held = all;
    for (int h : order) {
        held &= ~(1u << h);
        unsigned gone = 0;
        for (bool changed = true; changed;) {
            changed = false;
            for (int o = 0; o < Stack::kHandles; ++o) {
                if (!(alive & (1u << o)) || (held & (1u << o)))
                    continue;
                bool referenced = false;
                for (int c = 0; c < Stack::kHandles; ++c)
                    if ((alive & (1u << c)) && (Stack::parents(c) & (1u << o)))
                        referenced = true;
                if (!referenced) {
                    alive &= ~(1u << o);
                    gone |= 1u << o;
                    changed = true;
                }
            }
        }
        if (gone != 0)
            t.emplace_back(h, gone);
    }
    return t;
}

// One permutation of handle drops for each distinct teardown.
template <class Stack>
std::vector<std::array<int, Stack::kHandles>> distinct_orders(size_t *permutations)
{
    std::array<int, Stack::kHandles> order;
    for (int i = 0; i < Stack::kHandles; ++i)
        order[i] = i;
    std::set<std::vector<std::pair<int, unsigned>>> seen;
    std::vector<std::array<int, Stack::kHandles>> orders;
    *permutations = 0;
    do {
        ++*permutations;
        if (seen.insert(teardown<Stack>(order)).second)
            orders.push_back(order);
    } while (std::next_permutation(order.begin(), order.end()));
    return orders;
}

// Builds a fresh Stack for each drop order and drops its handles in that order,
// checking the counters return to `base` every 60 orders and at the end.
template <class Stack>
void all_orders(const ResCounts &base, const char *label)
{
    size_t permutations = 0;
    std::vector<std::array<int, Stack::kHandles>> orders =
        distinct_orders<Stack>(&permutations);
    size_t distinct = orders.size();
    std::string mode = orders_mode();
    if (mode == "all") {
        orders.clear();
        std::array<int, Stack::kHandles> order;
        for (int i = 0; i < Stack::kHandles; ++i)
            order[i] = i;
        do
            orders.push_back(order);
        while (std::next_permutation(order.begin(), order.end()));
    } else if (mode != "distinct") {
        size_t n = std::strtoul(mode.c_str(), nullptr, 10);
        if (n < orders.size()) {
            std::mt19937 rng(20240601);
            std::shuffle(orders.begin() + 1, orders.end(), rng);
            orders.resize(std::max<size_t>(n, 1));
        }
    }
    double t0 = now_ms();
    size_t done = 0;
    for (const auto &o : orders) {
        Stack s;
        std::string why;
        if (!build(s, &why)) {
            BOOST_ERROR(label << ": build failed: " << why);
            return;
        }
        for (int h : o)
            s.drop(h);
        ++done;
        if (done % 60 == 0 || done == orders.size()) {
            std::string o_str;
            for (int h : o)
                o_str += std::string(o_str.empty() ? "" : ",") + Stack::name(h);
            check_back_to(base, std::string(label) + " after " + std::to_string(done) +
                                    " orders (last: " + o_str + ")");
        }
    }
    BOOST_TEST_MESSAGE(label << ": " << done << " drop orders run (" << distinct
                             << " distinct teardowns among the " << permutations
                             << " orders of " << Stack::kHandles << " handles) in "
                             << (now_ms() - t0) << " ms");
}

}  // namespace

BOOST_AUTO_TEST_CASE(counters_move)
{
    // The leak checks below mean something only if the counters see our objects.
    ResCounts base = baseline();
    {
        VerbsStack s;
        std::string why;
        BOOST_REQUIRE_MESSAGE(build(s, &why), why);
        ResCounts d = delta(resource_counts(env().dev), base);
        BOOST_TEST_MESSAGE("verbs stack adds: " << format_counts(d));
        BOOST_CHECK_EQUAL(d["pd"], 1);
        BOOST_CHECK_EQUAL(d["cq"], 2);
        BOOST_CHECK_EQUAL(d["qp"], 1);
        BOOST_CHECK_EQUAL(d["mr"], 1);
        if (base.count("ctx") != 0)
            BOOST_CHECK_EQUAL(d["ctx"], 1);
    }
    check_back_to(base, "verbs stack");
    {
        CmStack s;
        std::string why;
        BOOST_REQUIRE_MESSAGE(build(s, &why), why);
        ResCounts d = delta(resource_counts(env().dev), base);
        BOOST_TEST_MESSAGE("rdma_cm stack adds: " << format_counts(d));
        BOOST_CHECK_EQUAL(d["cm_id"], 1);
        BOOST_CHECK_EQUAL(d["qp"], 1);
        BOOST_CHECK_EQUAL(d["cq"], 1);
        BOOST_CHECK_GE(d["pd"], 1);  // ours, plus librdmacm's own while an id is bound
        BOOST_CHECK_EQUAL(d["ctx"], 0);  // borrowed: librdmacm's context
        BOOST_CHECK(s.id->context() == s.ctx);  // one borrowed Context per id
        BOOST_CHECK(!s.ctx->owned());
    }
    check_back_to(base, "rdma_cm stack");
}

BOOST_AUTO_TEST_CASE(children_keep_parents_alive)
{
    ResCounts base = baseline();
    {
        VerbsStack s;
        std::string why;
        BOOST_REQUIRE_MESSAGE(build(s, &why), why);
        ibv_qp *raw_qp = s.qp->get();
        // Drop every parent handle first: the Mr and Qp keep them alive.
        s.ctx.reset();
        s.pd.reset();
        s.ch.reset();
        s.scq.reset();
        s.rcq.reset();
        ResCounts d = delta(resource_counts(env().dev), base);
        BOOST_CHECK_EQUAL(d["pd"], 1);
        BOOST_CHECK_EQUAL(d["cq"], 2);
        BOOST_CHECK_EQUAL(d["qp"], 1);
        BOOST_CHECK_EQUAL(d["mr"], 1);
        // ...and still work: the QP moves to INIT and takes a receive on the MR.
        BOOST_CHECK_EQUAL(modify_to_init(raw_qp), 0);
        BOOST_CHECK_EQUAL(post_recv(raw_qp, *s.mr, 1), 0);
        BOOST_CHECK(s.qp->pd() && s.qp->pd() == s.mr->pd());
        BOOST_CHECK(s.qp->pd()->context()->owned());
        // Mr gone, Qp left: the PD stays (the Qp holds it).
        s.mr.reset();
        d = delta(resource_counts(env().dev), base);
        BOOST_CHECK_EQUAL(d["mr"], 0);
        BOOST_CHECK_EQUAL(d["pd"], 1);
        BOOST_CHECK_EQUAL(d["qp"], 1);
    }
    check_back_to(base, "parents dropped first");
}

BOOST_AUTO_TEST_CASE(unacked_events_and_shared_channel)
{
    // A completion event read but not acknowledged must not make ibv_destroy_cq hang;
    // an event for the other CQ of a shared channel is counted on that CQ.
    ResCounts base = baseline();
    {
        VerbsStack s;
        std::string why;
        BOOST_REQUIRE_MESSAGE(build(s, &why), why);
        BOOST_REQUIRE_EQUAL(s.ch->set_nonblocking(), 0);
        BOOST_CHECK_EQUAL(s.scq->ack_event(), -EAGAIN);  // nothing yet, no blocking
        BOOST_REQUIRE_EQUAL(modify_to_init(s.qp->get()), 0);
        BOOST_REQUIRE_EQUAL(s.rcq->arm(), 0);
        BOOST_REQUIRE_EQUAL(post_recv(s.qp->get(), *s.mr, 7), 0);
        // Error state flushes the posted receive: one completion on the recv CQ.
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_ERR;
        BOOST_REQUIRE_EQUAL(ibv_modify_qp(s.qp->get(), &a, IBV_QP_STATE), 0);
        pollfd pfd{s.ch->fd(), POLLIN, 0};
        BOOST_REQUIRE_MESSAGE(poll(&pfd, 1, 5000) == 1, "no completion event within 5 s");
        // Read through the *send* CQ: the event is the recv CQ's.
        BOOST_CHECK_EQUAL(s.scq->ack_event(), 1);
        BOOST_CHECK_EQUAL(s.rcq->unacked(), 1u);
        BOOST_CHECK_EQUAL(s.scq->unacked(), 0u);
        ibv_wc wc{};
        BOOST_CHECK_EQUAL(ibv_poll_cq(s.rcq->get(), 1, &wc), 1);
        BOOST_CHECK_EQUAL(wc.wr_id, 7u);
        BOOST_CHECK_EQUAL(wc.status, IBV_WC_WR_FLUSH_ERR);
        // Drop the recv CQ handle first while its event is unacknowledged (the QP still
        // holds it), then everything: ~Cq acknowledges before ibv_destroy_cq.
        s.rcq.reset();
        s.ctx.reset();
        s.qp.reset();
    }
    check_back_to(base, "unacknowledged event");
}

BOOST_AUTO_TEST_CASE(errors_are_reported)
{
    ResCounts base = baseline();
    int err = 0;
    BOOST_CHECK(!Pd::create(nullptr, &err));
    BOOST_CHECK_EQUAL(err, EINVAL);
    BOOST_CHECK(!Context::open(nullptr, &err));
    BOOST_CHECK_EQUAL(err, EINVAL);
    BOOST_CHECK(!Context::open_by_name("no-such-device", &err));
    BOOST_CHECK_EQUAL(err, ENODEV);
    BOOST_CHECK(!Context::borrow(nullptr));
    {
        auto ctx = Context::open_by_name(env().dev.c_str(), &err);
        BOOST_REQUIRE(ctx);
        BOOST_CHECK_EQUAL(err, 0);
        BOOST_CHECK(!Cq::create(ctx, nullptr, 0, &err));
        BOOST_CHECK_EQUAL(err, EINVAL);
        auto pd = Pd::create(ctx, &err);
        BOOST_REQUIRE(pd);
        // Unmapped memory: the kernel's errno comes back (EFAULT).
        void *hole = mmap(nullptr, 1 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        BOOST_REQUIRE(hole != MAP_FAILED);
        munmap(hole, 1 << 20);
        err = 0;
        BOOST_CHECK(!Mr::reg(pd, hole, 1 << 20, IBV_ACCESS_LOCAL_WRITE, &err));
        BOOST_TEST_MESSAGE("Mr::reg on unmapped memory: " << std::strerror(err));
        BOOST_CHECK(err == EFAULT || err == ENOMEM || err == EINVAL);
        // A Cq whose channel is on another context is refused.
        auto other = Context::open_by_name(env().dev.c_str(), &err);
        auto ch = CompChannel::create(other, &err);
        BOOST_REQUIRE(ch);
        BOOST_CHECK(!Cq::create(ctx, ch, 4, &err));
        BOOST_CHECK_EQUAL(err, EINVAL);
        // A second QP on one cm id is refused.
        CmStack s;
        std::string why;
        BOOST_REQUIRE_MESSAGE(build(s, &why), why);
        BOOST_CHECK(!Qp::create_on(s.id, s.pd, s.cq, s.cq, rc_attr(), &err));
        BOOST_CHECK_EQUAL(err, EEXIST);
        // A Pd of another context does not fit the id.
        auto qp_id = CmId::create(s.cmch, nullptr, RDMA_PS_TCP, &err);
        BOOST_REQUIRE(qp_id);
        sockaddr_in sin = make_sockaddr(env().addr, 0);
        BOOST_REQUIRE_EQUAL(rdma_bind_addr(qp_id->get(), reinterpret_cast<sockaddr *>(&sin)), 0);
        auto cq2 = Cq::create(ctx, nullptr, 4, &err);
        BOOST_REQUIRE(cq2);
        BOOST_CHECK(!Qp::create_on(qp_id, pd, cq2, cq2, rc_attr(), &err));
        BOOST_CHECK_EQUAL(err, EINVAL);
        // An unbound id has no context yet.
        auto unbound = CmId::create(nullptr, nullptr, RDMA_PS_TCP, &err);
        BOOST_REQUIRE(unbound);
        BOOST_CHECK(!unbound->context());
    }
    check_back_to(base, "error paths");
}

BOOST_AUTO_TEST_CASE(verbs_all_drop_orders)
{
    ResCounts base = baseline();
    all_orders<VerbsStack>(base, "verbs stack");
}

BOOST_AUTO_TEST_CASE(rdma_cm_all_drop_orders)
{
    ResCounts base = baseline();
    all_orders<CmStack>(base, "rdma_cm stack");
}

BOOST_AUTO_TEST_CASE(synchronous_and_async_ids)
{
    ResCounts base = baseline();
    int err = 0;
    {
        // Synchronous id (librdmacm's private channel): bind, context, destroy.
        auto id = CmId::create(nullptr, nullptr, RDMA_PS_TCP, &err);
        BOOST_REQUIRE_MESSAGE(id, "CmId::create(sync): " << std::strerror(err));
        BOOST_CHECK(!id->channel());
        sockaddr_in sin = make_sockaddr(env().addr, 0);
        BOOST_REQUIRE_EQUAL(rdma_bind_addr(id->get(), reinterpret_cast<sockaddr *>(&sin)), 0);
        auto ctx = id->context();
        BOOST_REQUIRE(ctx);
        // The borrowed context outlives the id (librdmacm keeps it open).
        id.reset();
        auto pd = Pd::create(ctx, &err);
        BOOST_CHECK_MESSAGE(pd, "Pd on a borrowed context after its id is gone: "
                                    << std::strerror(err));
    }
    check_back_to(base, "synchronous id");
    {
        // Async id on a channel, listening; the channel handle dropped first.
        auto ch = CmChannel::create(&err);
        BOOST_REQUIRE(ch);
        BOOST_CHECK_EQUAL(ch->set_nonblocking(), 0);
        auto id = CmId::create(ch, reinterpret_cast<void *>(0x1234), RDMA_PS_TCP, &err);
        BOOST_REQUIRE(id);
        BOOST_CHECK_EQUAL(id->get()->context, reinterpret_cast<void *>(0x1234));
        sockaddr_in sin = make_sockaddr(env().addr, 0);
        BOOST_REQUIRE_EQUAL(rdma_bind_addr(id->get(), reinterpret_cast<sockaddr *>(&sin)), 0);
        BOOST_REQUIRE_EQUAL(rdma_listen(id->get(), 8), 0);
        ch.reset();
        rdma_cm_event *ev = nullptr;
        BOOST_CHECK(rdma_get_cm_event(id->channel()->get(), &ev) != 0 && errno == EAGAIN);
        ResCounts d = delta(resource_counts(env().dev), base);
        BOOST_CHECK_EQUAL(d["cm_id"], 1);
    }
    check_back_to(base, "listening id");
}
