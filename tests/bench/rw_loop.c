/* rw_loop N [socket|tcp]: N write()s of 1 byte to /dev/null and N read()s of 1 byte
 * from /dev/zero, through the ordinary libc calls (the PLT), so that under LD_PRELOAD
 * every call goes through librdmasock's read/write wrappers on a fd that is not a socket.
 *
 *   socket  a TCP socket is opened (and kept open) first, as in any networked program:
 *           the library then has an fd-table chunk for the low fds, so the wrapper's
 *           lookup goes one level deeper than in a process without sockets.
 *   tcp     the writes and reads go over a loopback TCP connection instead (write on
 *           the connecting end, read on the accepted end): the pass-through path of a
 *           socket the library tracks but has not offloaded (what iperf3 and sockperf
 *           hit today).
 *
 * tools/bench-passthrough runs it under callgrind for two values of N, with and without
 * the library; the difference of the differences, divided by the number of calls, is
 * the number of instructions the wrappers add per call (fixed startup costs cancel).
 * Built without _FORTIFY_SOURCE (see local.mk) so read() is read(), not __read_chk(). */
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A loopback TCP connection: *w the connecting end, *r the accepted end. */
static int tcp_pair(int *w, int *r)
{
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &alen) < 0)
        return -1;
    *w = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*w < 0 || connect(*w, (struct sockaddr *)&a, sizeof a) < 0)
        return -1;
    *r = accept(l, NULL, NULL);
    return *r < 0 ? -1 : 0;
}

int main(int argc, char **argv)
{
    const char *how = argc == 3 ? argv[2] : "";
    if (argc < 2 || argc > 3 || (argc == 3 && strcmp(how, "socket") && strcmp(how, "tcp"))) {
        fprintf(stderr, "usage: %s N [socket|tcp]\n", argv[0]);
        return 2;
    }
    char *end;
    long n = strtol(argv[1], &end, 10);
    if (*end != '\0' || n < 0) {
        fprintf(stderr, "rw_loop: bad N '%s'\n", argv[1]);
        return 2;
    }
    int out, in;
    if (strcmp(how, "tcp") == 0) {
        if (tcp_pair(&out, &in) < 0) {
            perror("rw_loop: tcp");
            return 1;
        }
    } else {
        if (strcmp(how, "socket") == 0 && socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0) < 0) {
            perror("rw_loop: socket");
            return 1;
        }
        out = open("/dev/null", O_WRONLY | O_CLOEXEC);
        in = open("/dev/zero", O_RDONLY | O_CLOEXEC);
        if (out < 0 || in < 0) {
            perror("rw_loop: open");
            return 1;
        }
        how = "zero";
    }
    char c = 'x';
    for (long i = 0; i < n; ++i) {
        if (write(out, &c, 1) != 1) {
            perror("rw_loop: write");
            return 1;
        }
        if (read(in, &c, 1) != 1) {
            perror("rw_loop: read");
            return 1;
        }
    }
    /* /dev/zero gave zero bytes; the TCP connection gave back what was written */
    return c == (strcmp(how, "zero") == 0 ? 0 : 'x') ? 0 : 1;
}
