#include "conn/shadows.hh"

#include <cstdint>
#include <sys/eventfd.h>

#include "base/fd.hh"
#include "base/real.hh"

namespace rdmasock {

namespace {

constexpr uint64_t kNotWritable = 0xfffffffffffffffeull;  // eventfd counter: no POLLOUT

void efd_write(int fd, uint64_t v) noexcept
{
    ssize_t r = RS_REAL(write)(fd, &v, sizeof v);
    (void)r;
}

void efd_drain(int fd) noexcept
{
    uint64_t v;
    ssize_t r = RS_REAL(read)(fd, &v, sizeof v);
    (void)r;
}

}  // namespace

Shadows::Shadows() noexcept
    : rd_(util::move_high(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC))),
      wr_(util::move_high(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)))
{
}

Shadows::~Shadows()
{
    if (rd_ >= 0)
        RS_REAL(close)(rd_);
    if (wr_ >= 0)
        RS_REAL(close)(wr_);
}

void Shadows::set(bool readable, bool writable) noexcept
{
    if (readable && !rd_set_) {
        efd_write(rd_, 1);
        rd_set_ = true;
    } else if (!readable && rd_set_) {
        efd_drain(rd_);
        rd_set_ = false;
    }
    if (!writable && !wr_blocked_) {
        efd_write(wr_, kNotWritable);
        wr_blocked_ = true;
    } else if (writable && wr_blocked_) {
        efd_drain(wr_);
        wr_blocked_ = false;
    }
}

void Shadows::wake() noexcept { efd_write(rd_, 1); }

void Shadows::drain_stale() noexcept
{
    if (!rd_set_)
        efd_drain(rd_);
}

void Shadows::drain() noexcept { efd_drain(rd_); }

}  // namespace rdmasock
