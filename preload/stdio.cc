// stdio on offloaded sockets.  The C library's streams read, write and close through its
// own internal calls, which no interposer sees: a stream fdopen()ed on an offloaded
// socket would write into the TCP socket that the RDMA peer no longer reads.  Such a
// stream is made here with fopencookie() instead, its reads and writes going through the
// library's read() and write(), and its number kept as the stream's fileno().
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <set>
#include <vector>

#include "base/real.hh"
#include "preload/hooks.hh"
#include "process/fd_table.hh"
#include "process/socket.hh"

namespace rdmasock::hook {

namespace {

int fd_of(void *cookie) noexcept { return static_cast<int>(reinterpret_cast<intptr_t>(cookie)); }

ssize_t stream_read(void *cookie, char *buf, size_t n) noexcept { return ::read(fd_of(cookie), buf, n); }

// As the C library writes a file's buffer: until all of it is written or a call fails.
ssize_t stream_write(void *cookie, const char *buf, size_t n) noexcept
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = ::write(fd_of(cookie), buf + done, n - done);
        if (w < 0)
            break;
        done += static_cast<size_t>(w);
    }
    return static_cast<ssize_t>(done);
}

int stream_seek(void *, off64_t *, int) noexcept
{
    errno = ESPIPE;
    return -1;
}

// The streams made here (fclose must not take one for a stream of the C library's).
std::mutex g_mu;
std::set<FILE *> *g_streams = nullptr;  // never freed (streams may be closed at exit)

int stream_close(void *cookie) noexcept { return ::close(fd_of(cookie)); }

FILE *open_stream(int fd, const char *mode) noexcept
{
    // fdopen's modes: r, w or a, then any of + b e m x c; the socket is open both ways.
    if (mode == nullptr || (mode[0] != 'r' && mode[0] != 'w' && mode[0] != 'a')) {
        errno = EINVAL;
        return nullptr;
    }
    const bool plus = strchr(mode + 1, '+') != nullptr;
    const char *m = mode[0] == 'r' ? (plus ? "r+" : "r") : (plus ? "r+" : "w");
    cookie_io_functions_t io{stream_read, stream_write, stream_seek, stream_close};
    std::lock_guard<std::mutex> lk(g_mu);
    if (g_streams == nullptr)
        g_streams = new (std::nothrow) std::set<FILE *>;
    if (g_streams == nullptr) {
        errno = ENOMEM;
        return nullptr;
    }
    FILE *fp = fopencookie(reinterpret_cast<void *>(static_cast<intptr_t>(fd)), m, io);
    if (fp == nullptr)
        return nullptr;
    try {
        g_streams->insert(fp);
    } catch (...) {
        RS_REAL(fclose)(fp);
        errno = ENOMEM;
        return nullptr;
    }
    fp->_fileno = fd;  // fileno() as for fdopen (a cookie stream has none of its own)
    return fp;
}

}  // namespace

FILE *fdopen(int fd, const char *mode) noexcept
{
    SocketRef s = fdt::get(fd);
    if (!s || !s->offloaded())
        return RS_REAL(fdopen)(fd, mode);
    return open_stream(fd, mode);
}

namespace {
// Takes `fp` out of the library's streams; true when it was one.
bool forget_stream(FILE *fp) noexcept
{
    std::lock_guard<std::mutex> lk(g_mu);
    return g_streams != nullptr && g_streams->erase(fp) != 0;
}

// A stream of the C library's (not one of ours) is about to close its number itself:
// flushed first (to the kernel: the library does not offload that socket, or no longer),
// then the library's close bookkeeping.
void before_stream_close(FILE *fp) noexcept
{
    const int fd = fileno(fp);
    if (fd >= 0 && fdt::peek(fd) != nullptr) {
        fflush(fp);
        before_close(fd);
    }
}
}  // namespace

int fclose(FILE *fp) noexcept
{
    if (fp != nullptr && !forget_stream(fp))
        before_stream_close(fp);
    return RS_REAL(fclose)(fp);  // ours: flushes and closes through write() and close()
}

namespace {
// freopen() closes the stream's number itself (or dup3()s the new file onto it): for one
// of ours, flushed through write() first, then closed as close() closes it.
void before_reopen(FILE *fp) noexcept
{
    if (fp == nullptr)
        return;
    if (forget_stream(fp))
        fflush(fp);
    before_stream_close(fp);
}
}  // namespace

FILE *freopen(const char *path, const char *mode, FILE *fp) noexcept
{
    before_reopen(fp);
    return RS_REAL(freopen)(path, mode, fp);
}

FILE *freopen64(const char *path, const char *mode, FILE *fp) noexcept
{
    before_reopen(fp);
    return RS_REAL(freopen64)(path, mode, fp);
}

void flush_streams() noexcept
{
    std::vector<FILE *> all;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (g_streams == nullptr)
            return;
        try {
            all.assign(g_streams->begin(), g_streams->end());
        } catch (...) {
            return;
        }
    }
    for (FILE *fp : all)
        fflush(fp);
}

void streams_after_fork_child() noexcept { new (&g_mu) std::mutex(); }

namespace {
// dprintf's text, formatted, written with write() (the C library's goes round it).  On
// the stack when it fits (no allocation for a short line: a signal handler's dprintf).
int print_to_socket(int fd, const char *format, va_list ap) noexcept
{
    char small[1024];
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(small, sizeof small, format, ap);
    char *text = small;
    if (n >= static_cast<int>(sizeof small)) {
        text = static_cast<char *>(malloc(static_cast<size_t>(n) + 1));
        n = text == nullptr ? -1 : vsnprintf(text, static_cast<size_t>(n) + 1, format, again);
    }
    va_end(again);
    if (n < 0) {
        if (text != small)
            free(text);
        return -1;
    }
    const ssize_t w = stream_write(reinterpret_cast<void *>(static_cast<intptr_t>(fd)), text, static_cast<size_t>(n));
    if (text != small)
        free(text);
    return w == n ? n : -1;
}
}  // namespace

int vdprintf(int fd, const char *format, va_list ap) noexcept
{
    SocketRef s = fdt::get(fd);
    if (!s || !s->offloaded())
        return RS_REAL(vdprintf)(fd, format, ap);
    return print_to_socket(fd, format, ap);
}

// The fortified form (_FORTIFY_SOURCE): `flag` only checks %n in writable formats.
int __vdprintf_chk(int fd, int flag, const char *format, va_list ap) noexcept
{
    SocketRef s = fdt::get(fd);
    if (!s || !s->offloaded())
        return RS_REAL(__vdprintf_chk)(fd, flag, format, ap);
    return print_to_socket(fd, format, ap);
}

}  // namespace rdmasock::hook
