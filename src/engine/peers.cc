#include "engine/peers.hh"

#include <cstring>
#include <netinet/in.h>

#include "conn/windows.hh"
#include "process/runtime.hh"

namespace rdmasock::offload {

namespace {

using Ms = std::chrono::milliseconds;

bool host_wide(Reason r) noexcept
{
    return r == Reason::peer_no_device || r == Reason::no_route || r == Reason::not_rdma_addr;
}

Ms cache_time() noexcept { return Ms(rt::config().neg_cache_ms); }

}  // namespace

void put_addr(uint8_t *out, const sockaddr *sa, uint8_t *fam) noexcept
{
    memset(out, 0, 18);
    if (sa->sa_family == AF_INET) {
        auto *a = reinterpret_cast<const sockaddr_in *>(sa);
        memcpy(out, &a->sin_addr, 4);
        memcpy(out + 16, &a->sin_port, 2);
        *fam = 4;
    } else if (sa->sa_family == AF_INET6) {
        auto *a = reinterpret_cast<const sockaddr_in6 *>(sa);
        if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
            memcpy(out, a->sin6_addr.s6_addr + 12, 4);
            *fam = 4;
        } else {
            memcpy(out, &a->sin6_addr, 16);
            *fam = 6;
        }
        memcpy(out + 16, &a->sin6_port, 2);
    }
}

Endpoint endpoint_key(const sockaddr *sa, bool with_port) noexcept
{
    Endpoint k{};
    uint8_t tmp[18];
    put_addr(tmp, sa, &k[0]);
    memcpy(k.data() + 1, tmp, with_port ? 18 : 16);
    return k;
}

Reason Peers::admit(const sockaddr *peer, bool *backoff) noexcept
{
    *backoff = false;
    const auto now = Clock::now();
    for (bool with_port : {false, true}) {
        auto it = negative_.find(endpoint_key(peer, with_port));
        if (it == negative_.end())
            continue;
        if (now < it->second.until)
            return it->second.reason;
        negative_.erase(it);
    }
    const auto host = endpoint_key(peer, false);
    auto it = unanswered_.find(host);
    if (it == unanswered_.end())
        return Reason::none;
    if (now >= it->second) {
        unanswered_.erase(it);
        return Reason::none;
    }
    *backoff = true;
    auto p = probing_.find(host);
    return p != probing_.end() && p->second >= kUnansweredProbes ? Reason::timeout : Reason::none;
}

void Peers::started(const sockaddr *peer) noexcept { ++probing_[endpoint_key(peer, false)]; }

int Peers::in_flight(const sockaddr *peer) const noexcept
{
    auto it = probing_.find(endpoint_key(peer, false));
    return it == probing_.end() ? 0 : it->second;
}

void Peers::ended(const sockaddr *peer) noexcept
{
    auto it = probing_.find(endpoint_key(peer, false));
    if (it != probing_.end() && --it->second <= 0)
        probing_.erase(it);
}

void Peers::remember(const sockaddr *peer, Reason r) noexcept
{
    const auto host = endpoint_key(peer, false);
    if (r == Reason::timeout) {
        if (cache_time().count() > 0)
            unanswered_[host] = Clock::now() + cache_time();
        return;
    }
    unanswered_.erase(host);  // whatever the answer, it came
    if (r == Reason::none) {
        negative_.erase(host);
        negative_.erase(endpoint_key(peer, true));
        return;
    }
    if (cache_time().count() > 0)
        negative_[host_wide(r) ? host : endpoint_key(peer, true)] = Cached{r, Clock::now() + cache_time()};
}

Peers::Clock::duration Peers::answer_wait(bool backoff) const noexcept
{
    using us = Estimate::us;
    us floor = std::chrono::duration_cast<us>(Ms(rt::config().probe_timeout_ms * (backoff ? 2 : 1)));
    // Answer times have long tails where they are slow (a loaded or emulated machine:
    // 40-60 ms answers with one of 100+ ms among them): never less than 5 x their mean,
    // as TCP never lets its timeout near the round-trip time.  Where answers are fast
    // this stays under the probe timeout.
    if (!answers_.empty() && answers_.mean() * 5 > floor)
        floor = answers_.mean() * 5;
    us ceiling = std::chrono::duration_cast<us>(windows::switch_window() - windows::switch_margin());
    if (ceiling < floor)
        ceiling = floor;
    return answers_.bound(floor, ceiling);
}

void Peers::expire(Clock::time_point now) noexcept
{
    for (auto it = negative_.begin(); it != negative_.end();)
        it = now >= it->second.until ? negative_.erase(it) : std::next(it);
    for (auto it = unanswered_.begin(); it != unanswered_.end();)
        it = now >= it->second ? unanswered_.erase(it) : std::next(it);
}

void Peers::clear() noexcept
{
    negative_.clear();
    unanswered_.clear();
}

}  // namespace rdmasock::offload
