// Negotiation messages (docs/protocol.md): encoding and validation, no I/O.
// Every decoder takes untrusted bytes and either fills a host-order struct whose every
// field has been checked, or returns a Reason (bad_message, version_mismatch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <netinet/in.h>

#include "base/reason.hh"

namespace rdmasock::neg {

// 2: asynchronous switch (SWITCH, CONFIRM at its offset); 3: the server proves itself in
// the TCP stream first (PROOF_AT, PROOF at its offset), before the client's SWITCH.
constexpr uint8_t kVersion = 4;
constexpr size_t kHelloSize = 56;
constexpr size_t kAcceptSize = 36;
constexpr size_t kDeclineSize = 8;
constexpr size_t kConfirmSize = 24;
constexpr size_t kProofSize = 24;
constexpr size_t kNonceSize = 16;
constexpr unsigned kMinRingLog2 = 12;  // 4 KiB
constexpr unsigned kMaxRingLog2 = 26;  // 64 MiB

struct Nonce {
    uint8_t b[kNonceSize];
};
bool operator==(const Nonce &a, const Nonce &b) noexcept;

struct RingInfo {
    uint64_t addr = 0;
    uint32_t rkey = 0;
    unsigned log2 = 0;  // ring size = 1 << log2
};

struct Hello {
    int family = 0;  // AF_INET or AF_INET6
    Nonce nonce{};
    in6_addr client_addr{};  // IPv4: first 4 bytes
    uint16_t client_port = 0;  // host order
    uint16_t server_port = 0;  // host order
    RingInfo ring;
};

struct Accept {
    RingInfo ring;
    Nonce nonce{};
};

void encode(const Hello &h, uint8_t out[kHelloSize]) noexcept;
void encode(const Accept &a, uint8_t out[kAcceptSize]) noexcept;
void encode_decline(Reason r, uint8_t out[kDeclineSize]) noexcept;
// A DECLINE that sends the request on to `port` (RDMA port space) of the same address:
// reason `redirected`, the port in the two last bytes (network order).
void encode_redirect(uint16_t port, uint8_t out[kDeclineSize]) noexcept;
void encode_confirm(const Nonce &n, uint8_t out[kConfirmSize]) noexcept;
void encode_proof(const Nonce &n, uint8_t out[kProofSize]) noexcept;

// Decoders: `len` is what the peer sent (rdma_cm may pad private data with zeros).
Reason decode(const void *data, size_t len, Hello *out) noexcept;
Reason decode(const void *data, size_t len, Accept *out) noexcept;
// True when `data` is a DECLINE of our protocol (magic), whatever its contents.
bool is_decline(const void *data, size_t len) noexcept;
// A DECLINE's reason, or bad_message when it is not one.  Reasons a peer may not claim
// (none, pending...) are mapped to `rejected`.
Reason decode_decline(const void *data, size_t len) noexcept;
// The port of a redirecting DECLINE; 0 when `data` is not one (or names port 0).
uint16_t decode_redirect(const void *data, size_t len) noexcept;

// CONFIRM detection in a server's TCP stream, at the offset the client's SWITCH named.
enum class ConfirmMatch { no, partial, yes };
// `got` bytes are available; a prefix of a valid frame is `partial`.
ConfirmMatch match_confirm(const uint8_t *data, size_t got, const Nonce *expected) noexcept;
// PROOF detection in a client's TCP stream, at the offset the server's PROOF_AT named:
// every byte available is compared (a prefix of the expected frame is `partial`).
ConfirmMatch match_proof(const uint8_t *data, size_t got, const Nonce &expected) noexcept;

// Immediate data of ring messages: type (3 bits) | value (29 bits).  PREFIX_END is a
// PREFIX and a FIN 0 in one message: the server shut down writing before its switch.
enum class Imm : uint32_t {
    data = 0,
    credit = 1,
    fin = 2,
    reset = 3,
    prefix = 4,
    switch_at = 5,
    proof_at = 6,
    prefix_end = 7
};
constexpr uint32_t kImmValueMask = (1u << 29) - 1;
// FIN's value: 0 after shutdown(SHUT_WR) (the sender still reads), kFinClosed after
// close() (it reads nothing more).
constexpr uint32_t kFinClosed = 1;
inline uint32_t make_imm(Imm t, uint32_t v) noexcept
{
    return (static_cast<uint32_t>(t) << 29) | (v & kImmValueMask);
}
inline Imm imm_type(uint32_t imm) noexcept { return static_cast<Imm>(imm >> 29); }
inline uint32_t imm_value(uint32_t imm) noexcept { return imm & kImmValueMask; }

bool valid_ring(const RingInfo &r) noexcept;

// ---- FALLBACK (docs/design/tcp-fallback.md) --------------------------------------------
// A connection that leaves RDMA mid-stream: the first bytes each side writes to the TCP
// stream then.  After the switch that stream carries nothing else, so the frame stands
// where the peer looks for it.  32 bytes: "RSKF", version, flags, 2 reserved (0), the
// count, the start (both network order), the first 8 bytes of the connection's nonce.
constexpr size_t kFallbackSize = 32;
constexpr uint8_t kFbWrShut = 1;           // the sender's stream ends after its resend
                                           // (exec, SCM_RIGHTS: its ring goes)
struct Fallback {
    // Bytes of the peer's stream the sender holds (received over RDMA, counted at their
    // message's completion only): the peer resends over TCP from there on.
    uint64_t count = 0;
    // Where in the sender's own stream the TCP bytes after the frame begin.
    uint64_t start = 0;
    uint8_t flags = 0;
};
void encode_fallback(const Fallback &f, const Nonce &n, uint8_t out[kFallbackSize]) noexcept;
// A FALLBACK at the head of `got` bytes of the peer's TCP stream: `partial` while a
// prefix of a valid one; `yes` fills `out` (fields not yet checked against counters).
ConfirmMatch match_fallback(const uint8_t *data, size_t got, const Nonce &expected, Fallback *out) noexcept;
// The peer's FALLBACK against what this side knows (ring bytes, stream counts):
// - its count covers what it acknowledged to us and no more than we posted
//   (acked <= count <= posted);
// - its start is no later than what we hold, and no earlier than one ring before it
//   (held - ring <= start <= held): the TCP bytes after the frame that we already hold
//   are held - start, dropped as duplicates.
// bad_message when one fails (that connection is reset).
Reason check_fallback(const Fallback &peer, uint64_t acked, uint64_t posted, uint64_t held,
                      uint64_t ring) noexcept;

}  // namespace rdmasock::neg
