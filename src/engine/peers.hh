// What the engine remembers of the peers it probed (docs/protocol.md, "Only a definitive
// answer is cached"): definitive answers without RDMA, hosts whose last probe went
// unanswered, the probes in flight per host, and how long answers take.  Not locked: the
// engine holds its lock around every call.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <sys/socket.h>

#include "base/estimate.hh"
#include "base/reason.hh"

namespace rdmasock::offload {

// An address as bytes: family (4 or 6), address (IPv4-mapped IPv6 folded to IPv4), port.
void put_addr(uint8_t *out18, const sockaddr *sa, uint8_t *family) noexcept;
using Endpoint = std::array<uint8_t, 19>;
// Family + address, + port when with_port (else port 0: the whole host).
Endpoint endpoint_key(const sockaddr *sa, bool with_port) noexcept;

class Peers {
public:
    using Clock = std::chrono::steady_clock;

    // Before probing `peer`: Reason::none to probe; a cached definitive answer; or
    // timeout when the host's last probe went unanswered and kUnansweredProbes to it are
    // out.  *backoff: the host's last probe went unanswered (a connect() that waits
    // waits twice as long).
    Reason admit(const sockaddr *peer, bool *backoff) noexcept;
    // A probe of `peer` went out / ended (each start is ended once).
    void started(const sockaddr *peer) noexcept;
    void ended(const sockaddr *peer) noexcept;
    // Probes of `peer`'s host in flight.
    int in_flight(const sockaddr *peer) const noexcept;
    // How a probe of `peer` ended: Reason::none for any answer from rdmasock there (RDMA,
    // or a DECLINE), timeout for no answer, else a definitive answer without RDMA.
    void remember(const sockaddr *peer, Reason r) noexcept;
    // The time from a request to its accepting answer.
    void answered_in(Estimate::us took) noexcept { answers_.sample(took); }
    // How long a connect() waits for the answer after its request: the answers' bound
    // (mean + 4 deviations, at least 5 x the mean), at least RDMASOCK_PROBE_TIMEOUT_MS
    // (twice that with backoff), at most what still leaves time to switch.
    Clock::duration answer_wait(bool backoff) const noexcept;
    void clear() noexcept;
    // Drops what has expired (the maps stay as large as what is still remembered).
    void expire(Clock::time_point now) noexcept;

    // Probes at once to a host whose last probe went unanswered: a host without RDMA (its
    // RoCE packets are dropped) costs every connection to it a queue pair until the
    // probe times out; the excess stays on TCP (timeout) until the host answers.
    static constexpr int kUnansweredProbes = 4;

private:
    struct Cached {
        Reason reason;
        Clock::time_point until;
    };
    // Definitive answers only; host-wide ones (no device, no route) at port 0, those
    // about one server process (no RDMA listener there) at its port.  A timeout is no
    // answer: never cached here.
    std::map<Endpoint, Cached> negative_;
    // Hosts whose last probe went unanswered, until when: not a verdict (probes go on,
    // the first answer clears the entry).
    std::map<Endpoint, Clock::time_point> unanswered_;
    std::map<Endpoint, int> probing_;  // probes in flight, per host
    Estimate answers_;
};

}  // namespace rdmasock::offload
