// A connection's way back from RDMA to its TCP socket mid-stream
// (docs/design/tcp-fallback.md): when the queue pair fails (a link down, a completion
// error) or the peer says it fell back, each side writes a FALLBACK frame into its TCP
// stream and then every byte of its own that the peer may not have read, from its
// staging ring; from then on both sides use the kernel's socket.
//
//   out  our frame, then the backlog [start, end) of our stream (staging ring bytes),
//        then the kernel's shutdown(SHUT_WR) when the program had shut down writing;
//        written without blocking, as far as the socket takes it, by whoever calls
//        push() (a program's call, the progress thread on POLLOUT, a drain).
//   in   the peer's frame, at the head of what the TCP stream brings from now on, then
//        the bytes of its backlog we already read over RDMA (skipped).
//
// What arrived over RDMA before the fallback (the ring's residue) is read first: our
// frame's count includes it, and the peer resends from there on.  Its staging ring still
// holds every byte we did not credit (it frees space only for bytes credited, and we
// credit only what the program read).
//
// Thread safety: the connection's lock guards it.
#pragma once

#include <cstdint>
#include <sys/types.h>

#include "wire/negotiate.hh"

namespace rdmasock {

class FallbackPath {
public:
    // The staging ring: where the backlog's bytes are (a power-of-two ring).
    struct Staging {
        const uint8_t *mem = nullptr;
        uint64_t size = 0;
    };

    bool active() const noexcept { return active_; }

    // Begin: our frame says we hold `count` bytes of the peer's stream, and the TCP bytes
    // after it are ours from `start` to `end`.  `shut`: the program shut down writing (the
    // kernel's shutdown follows the backlog).
    void begin(uint64_t count, uint64_t start, uint64_t end, bool shut, const neg::Nonce &n,
               Staging staging) noexcept;

    // --- out ---
    bool out_done() const noexcept
    {
        return frame_out_ == neg::kFallbackSize && out_next_ == out_end_ && !shut_pending_;
    }
    // Bytes of the frame and backlog still to write.
    uint64_t out_left() const noexcept { return (neg::kFallbackSize - frame_out_) + (out_end_ - out_next_); }
    // The program shut down writing meanwhile: the kernel's shutdown follows the backlog.
    void shut_after() noexcept { shut_pending_ = true; }
    // Write what the socket `fd` takes now.  0 (done or the socket is full), or -errno
    // (the connection failed).
    int push(int fd) noexcept;

    // --- in ---
    bool in_done() const noexcept { return in_done_; }
    // The peer's frame was read before ours went (it fell back first): our start is
    // its count.
    bool have_peer() const noexcept { return have_peer_; }
    uint64_t peer_count() const noexcept { return peer_.count; }
    // Read the peer's frame and skip the bytes of its backlog we hold (our count: its
    // start must be at most that, and at most a ring of `ring` bytes behind), from `fd`,
    // as far as they are there.  `acked`, `posted`: our stream's cursors when we fell
    // back (its count lies between them).  1 done, 0 not yet (-EAGAIN), or -1 with *why:
    // a bad frame, or the stream ended before it.
    int take_peer(int fd, uint64_t acked, uint64_t posted, uint64_t ring, const char **why) noexcept;
    // The first bytes read where the peer's frame was to stand, in hex (a debug line's).
    void peer_head(char *buf, size_t n) const noexcept;
    // Before begin(): the peer's frame alone (the peer fell back first).  Same results.
    int read_peer_frame(int fd, const neg::Nonce &n, const char **why) noexcept;

private:
    int read_frame(int fd, const char **why) noexcept;

    bool active_ = false;
    neg::Nonce nonce_{};
    uint64_t count_ = 0;
    // out
    uint8_t frame_[neg::kFallbackSize] = {};
    size_t frame_out_ = 0;
    uint64_t out_next_ = 0, out_end_ = 0;
    bool shut_pending_ = false;
    Staging staging_;
    // in
    uint8_t peer_buf_[neg::kFallbackSize] = {};
    size_t peer_got_ = 0;
    bool have_peer_ = false;
    bool checked_ = false;
    neg::Fallback peer_;
    uint64_t skip_left_ = 0;
    bool in_done_ = false;
};

}  // namespace rdmasock
