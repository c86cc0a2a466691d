// The offload rules (rdmasock.conf(5)): which TCP connections may go over RDMA and
// which stay on kernel TCP, by program, role, address and port.  The first rule that
// matches a connection decides; a connection no rule matches may go over RDMA.
//
//   # ACTION  PROGRAM  ROLE    ADDRESS          PORTS
//   tcp       sshd     server  *                22
//   rdma      redis-*  *       10.0.0.0/8       6379-6380
//   tcp       *        client  *                *
//
// ACTION is rdma or tcp; PROGRAM an fnmatch(3) pattern on the program's name (as ps
// shows it); ROLE client, server or *; ADDRESS *, an IPv4 or IPv6 address, with an
// optional /PREFIX; PORTS *, a port, or a range LOW-HIGH.  Omitted trailing fields are
// *.  ADDRESS and PORTS are the server end's: for a client the peer it connects to, for
// a server the local address and port it accepted on.  A line NAME=VALUE sets the
// RDMASOCK_NAME tunable (the environment still wins).  '#' starts a comment.  A bad line
// gives one warning naming the file and the line, and the rest still apply.
//
// Pure: parsing and matching only (the runtime reads the file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <sys/socket.h>
#include <vector>

namespace rdmasock::rules {

enum Side : unsigned { client = 1, server = 2 };

struct Rule {
    bool rdma = true;            // the action
    std::string program = "*";   // fnmatch(3) pattern
    unsigned sides = client | server;
    int family = 0;              // 0: any address; else AF_INET or AF_INET6
    uint8_t addr[16] = {};
    unsigned prefix = 0;         // bits of addr that must match
    unsigned port_lo = 0, port_hi = 65535;
    unsigned line = 0;           // its line in the file
    std::string text;            // the line as written (without comment and edges)
};

struct Setting {
    std::string name;  // RDMASOCK_...
    std::string value;
    unsigned line = 0;
};

struct File {
    std::string path;
    std::vector<Rule> rules;
    std::vector<Setting> settings;
};

using Warner = void (*)(const char *line, void *ctx);

// The default rules file.
constexpr const char *kDefaultPath = "/etc/rdmasock.conf";

// Read and parse the rules file `path`, or kDefaultPath when it is null or empty (that
// one must be a regular file owned by root and writable by nobody else, and may be
// missing).  Problems, and settings that name no tunable, are warnings.
File load(const char *path, Warner warn, void *ctx);

// Parse the text of file `path`: a bad line gives one warning through `warn` ("PATH:N:
// ...") and is skipped.
File parse(const std::string &path, const char *text, size_t len, Warner warn, void *ctx);

// The first rule matching a connection of `program` on `side` whose server end is
// `server_addr` (IPv4-mapped IPv6 addresses count as IPv4); nullptr: none.
const Rule *match(const File &f, const char *program, Side side, const sockaddr *server_addr) noexcept;

// "ADDRESS:PORT" or "[IPv6]:PORT" (the rules tester's argument) into `out`.
bool parse_endpoint(const char *s, sockaddr_storage *out) noexcept;

}  // namespace rdmasock::rules
