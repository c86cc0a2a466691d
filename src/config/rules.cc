#include "config/rules.hh"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.hh"

namespace rdmasock::rules {

namespace {

constexpr size_t kMaxLine = 1024;

bool is_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\r'; }

// The fields of a line (at most `max`; false when there are more).
bool split(const std::string &s, std::vector<std::string> &out, size_t max)
{
    size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && is_space(s[i]))
            ++i;
        if (i == s.size())
            break;
        size_t j = i;
        while (j < s.size() && !is_space(s[j]))
            ++j;
        if (out.size() == max)
            return false;
        out.push_back(s.substr(i, j - i));
        i = j;
    }
    return true;
}

// A decimal number in [0, max], all of `s`.
bool number(const std::string &s, unsigned max, unsigned *out) noexcept
{
    if (s.empty() || s.size() > 10)
        return false;
    unsigned long v = 0;
    for (char c : s) {
        if (c < '0' || c > '9')
            return false;
        v = v * 10 + static_cast<unsigned long>(c - '0');
    }
    if (v > max)
        return false;
    *out = static_cast<unsigned>(v);
    return true;
}

const char *parse_address(const std::string &s, Rule &r)
{
    if (s == "*")
        return nullptr;
    std::string a = s;
    unsigned prefix = 0;
    bool has_prefix = false;
    const size_t slash = s.find('/');
    if (slash != std::string::npos) {
        a = s.substr(0, slash);
        if (!number(s.substr(slash + 1), 128, &prefix))
            return "bad prefix length";
        has_prefix = true;
    }
    if (inet_pton(AF_INET, a.c_str(), r.addr) == 1) {
        r.family = AF_INET;
        if (has_prefix && prefix > 32)
            return "prefix longer than 32 bits for an IPv4 address";
        r.prefix = has_prefix ? prefix : 32;
        return nullptr;
    }
    if (inet_pton(AF_INET6, a.c_str(), r.addr) == 1) {
        r.family = AF_INET6;
        r.prefix = has_prefix ? prefix : 128;
        if (IN6_IS_ADDR_V4MAPPED(reinterpret_cast<const in6_addr *>(r.addr)) && r.prefix >= 96) {
            memmove(r.addr, r.addr + 12, 4);  // an IPv4-mapped address is the IPv4 one
            memset(r.addr + 4, 0, 12);
            r.family = AF_INET;
            r.prefix -= 96;
        }
        return nullptr;
    }
    return "bad address (want *, an IPv4 or IPv6 address, with an optional /PREFIX)";
}

const char *parse_ports(const std::string &s, Rule &r)
{
    if (s == "*")
        return nullptr;
    const size_t dash = s.find('-');
    unsigned lo = 0, hi = 0;
    if (dash == std::string::npos) {
        if (!number(s, 65535, &lo))
            return "bad port (want *, a port or LOW-HIGH)";
        hi = lo;
    } else if (!number(s.substr(0, dash), 65535, &lo) || !number(s.substr(dash + 1), 65535, &hi) || lo > hi) {
        return "bad port range (want LOW-HIGH, LOW <= HIGH <= 65535)";
    }
    r.port_lo = lo;
    r.port_hi = hi;
    return nullptr;
}

// One rule line; nullptr, or why it is bad.
const char *parse_rule(const std::string &line, Rule &r)
{
    std::vector<std::string> f;
    if (!split(line, f, 5))
        return "too many fields (want ACTION PROGRAM ROLE ADDRESS PORTS)";
    if (f[0] == "rdma")
        r.rdma = true;
    else if (f[0] == "tcp")
        r.rdma = false;
    else
        return "unknown action (want rdma or tcp)";
    if (f.size() > 1)
        r.program = f[1];
    if (f.size() > 2) {
        if (f[2] == "client")
            r.sides = client;
        else if (f[2] == "server")
            r.sides = server;
        else if (f[2] != "*")
            return "unknown role (want client, server or *)";
    }
    if (f.size() > 3)
        if (const char *e = parse_address(f[3], r))
            return e;
    if (f.size() > 4)
        if (const char *e = parse_ports(f[4], r))
            return e;
    return nullptr;
}

void warn_line(Warner warn, void *ctx, const std::string &path, unsigned n, const char *why)
{
    if (warn == nullptr)
        return;
    char buf[512];
    snprintf(buf, sizeof buf, "%s:%u: %s; line ignored", path.c_str(), n, why);
    warn(buf, ctx);
}

bool prefix_matches(const uint8_t *a, const uint8_t *b, unsigned bits) noexcept
{
    const unsigned whole = bits / 8;
    if (memcmp(a, b, whole) != 0)
        return false;
    const unsigned rest = bits % 8;
    if (rest == 0)
        return true;
    const uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
    return (a[whole] & mask) == (b[whole] & mask);
}

}  // namespace

File parse(const std::string &path, const char *text, size_t len, Warner warn, void *ctx)
{
    File f;
    f.path = path;
    unsigned n = 0;
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && text[j] != '\n')
            ++j;
        ++n;
        std::string line(text + i, j - i);
        i = j + 1;
        if (line.size() > kMaxLine) {
            warn_line(warn, ctx, path, n, "line too long");
            continue;
        }
        if (line.find('\0') != std::string::npos) {
            warn_line(warn, ctx, path, n, "NUL byte in the line");
            continue;
        }
        const size_t hash = line.find('#');
        if (hash != std::string::npos)
            line.resize(hash);
        size_t a = 0, b = line.size();
        while (a < b && is_space(line[a]))
            ++a;
        while (b > a && is_space(line[b - 1]))
            --b;
        line = line.substr(a, b - a);
        if (line.empty())
            continue;
        const size_t eq = line.find('=');
        if (eq != std::string::npos) {
            std::string name = line.substr(0, eq), value = line.substr(eq + 1);
            while (!name.empty() && is_space(name.back()))
                name.pop_back();
            size_t v = 0;
            while (v < value.size() && is_space(value[v]))
                ++v;
            value = value.substr(v);
            if (name.compare(0, 9, "RDMASOCK_") != 0 || name.size() == 9 ||
                name.find_first_of(" \t") != std::string::npos) {
                warn_line(warn, ctx, path, n, "a setting is RDMASOCK_NAME=VALUE");
                continue;
            }
            f.settings.push_back({name, value, n});
            continue;
        }
        Rule r;
        if (const char *why = parse_rule(line, r)) {
            warn_line(warn, ctx, path, n, why);
            continue;
        }
        r.line = n;
        r.text = line;
        f.rules.push_back(std::move(r));
    }
    return f;
}

File load(const char *path, Warner warn, void *ctx)
{
    const bool given = path != nullptr && path[0] != '\0';
    if (!given)
        path = kDefaultPath;
    char msg[600];
    auto say = [&](const char *fmt, const char *arg) {
        if (warn != nullptr) {
            snprintf(msg, sizeof msg, fmt, path, arg);
            warn(msg, ctx);
        }
    };
    File f;
    f.path = path;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        if (given)
            say("cannot open the rules file %s: %s", strerror(errno));
        return f;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        say("%s%s: not a regular file; ignored", "");
    } else if (!given && (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)))) {
        say("%s%s: not owned by root, or writable by others; ignored", "");
    } else {
        std::string text;
        char buf[4096];
        ssize_t n;
        while (text.size() < (1u << 20) && (n = read(fd, buf, sizeof buf)) > 0)
            text.append(buf, static_cast<size_t>(n));
        f = parse(path, text.data(), text.size(), warn, ctx);
    }
    close(fd);
    // A setting must name a tunable.
    unsigned count = 0;
    const TunableInfo *t = tunables(&count);
    for (auto it = f.settings.begin(); it != f.settings.end();) {
        bool known = false;
        for (unsigned i = 0; i < count && !known; ++i)
            known = it->name == t[i].env;
        if (known) {
            ++it;
            continue;
        }
        char why[200];
        snprintf(why, sizeof why, "unknown setting %s", it->name.c_str());
        warn_line(warn, ctx, f.path, it->line, why);
        it = f.settings.erase(it);
    }
    return f;
}

const Rule *match(const File &f, const char *program, Side side, const sockaddr *sa) noexcept
{
    int family = 0;
    uint8_t addr[16] = {};
    unsigned port = 0;
    if (sa != nullptr && sa->sa_family == AF_INET) {
        auto *in = reinterpret_cast<const sockaddr_in *>(sa);
        family = AF_INET;
        memcpy(addr, &in->sin_addr, 4);
        port = ntohs(in->sin_port);
    } else if (sa != nullptr && sa->sa_family == AF_INET6) {
        auto *in6 = reinterpret_cast<const sockaddr_in6 *>(sa);
        port = ntohs(in6->sin6_port);
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            family = AF_INET;
            memcpy(addr, in6->sin6_addr.s6_addr + 12, 4);
        } else {
            family = AF_INET6;
            memcpy(addr, &in6->sin6_addr, 16);
        }
    }
    for (const Rule &r : f.rules) {
        if (!(r.sides & side))
            continue;
        if (r.family != 0 && (r.family != family || !prefix_matches(r.addr, addr, r.prefix)))
            continue;
        if (port < r.port_lo || port > r.port_hi)
            continue;
        if (r.program != "*" && fnmatch(r.program.c_str(), program != nullptr ? program : "", 0) != 0)
            continue;
        return &r;
    }
    return nullptr;
}

bool parse_endpoint(const char *s, sockaddr_storage *out) noexcept
{
    memset(out, 0, sizeof *out);
    const char *colon = strrchr(s, ':');
    if (colon == nullptr || colon == s)
        return false;
    unsigned port = 0;
    if (!number(std::string(colon + 1), 65535, &port))
        return false;
    std::string host(s, static_cast<size_t>(colon - s));
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
        auto *in6 = reinterpret_cast<sockaddr_in6 *>(out);
        if (inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr) != 1)
            return false;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(static_cast<uint16_t>(port));
        return true;
    }
    auto *in = reinterpret_cast<sockaddr_in *>(out);
    if (inet_pton(AF_INET, host.c_str(), &in->sin_addr) != 1)
        return false;
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(port));
    return true;
}

}  // namespace rdmasock::rules
