/*
 * rdmasock.h: what a program (or a test) can ask librdmasock about one of its sockets.
 *
 *   struct rdmasock_info info;
 *   socklen_t len = sizeof info;
 *   if (getsockopt(fd, SOL_RDMASOCK, RDMASOCK_INFO, &info, &len) == 0) ...
 *
 * Without the library (or for a socket it does not track) the call fails with
 * ENOPROTOOPT, as the kernel answers for an unknown level.
 */
#ifndef RDMASOCK_H
#define RDMASOCK_H

#include <stdint.h>

#define SOL_RDMASOCK 0x52534bu /* "RSK" */
#define RDMASOCK_INFO 1

enum rdmasock_transport { RDMASOCK_TCP = 0, RDMASOCK_RDMA = 1 };

struct rdmasock_info {
    uint32_t transport;      /* enum rdmasock_transport */
    uint32_t reason;         /* numeric reason (see reason_code) */
    char reason_code[32];    /* "none" when on RDMA, else why not (rdmasock(7)) */
    char phase[16];          /* "tcp", "rdma", "maybe" (server, undecided), "verifying" */
    uint64_t bytes_sent;     /* bytes the program wrote to the connection */
    uint64_t bytes_received; /* bytes the program read from it */
    uint64_t connection_id;  /* process-unique id of the socket object */
};

#endif
