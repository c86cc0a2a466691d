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
    if (fd < 0)
        return;
    ssize_t r = RS_REAL(write)(fd, &v, sizeof v);
    (void)r;
}

void efd_drain(int fd) noexcept
{
    if (fd < 0)
        return;
    uint64_t v;
    ssize_t r = RS_REAL(read)(fd, &v, sizeof v);
    (void)r;
}

}  // namespace

Shadows::Shadows() noexcept
    : rd_(util::make_high([] { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); })),
      wr_(util::make_high([] { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); })),
      made_(rd_fd() >= 0 && wr_fd() >= 0)
{
}

Shadows::~Shadows() { close_fds(); }

void Shadows::close_fds() noexcept
{
    const int rd = rd_.exchange(-1), wr = wr_.exchange(-1);
    if (rd >= 0)
        util::close_own(rd);
    if (wr >= 0)
        util::close_own(wr);
}

void Shadows::set(bool readable, bool writable) noexcept
{
    if (readable && !rd_set_) {
        efd_write(rd_fd(), 1);
        rd_set_ = true;
    } else if (!readable && rd_set_) {
        efd_drain(rd_fd());
        rd_set_ = false;
    }
    if (!writable && !wr_blocked_) {
        efd_write(wr_fd(), kNotWritable);
        wr_blocked_ = true;
    } else if (writable && wr_blocked_) {
        efd_drain(wr_fd());
        wr_blocked_ = false;
    }
}

void Shadows::wake() noexcept { efd_write(rd_fd(), 1); }

void Shadows::drain_stale() noexcept
{
    if (!rd_set_)
        efd_drain(rd_fd());
}

void Shadows::drain() noexcept { efd_drain(rd_fd()); }

}  // namespace rdmasock
