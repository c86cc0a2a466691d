// rules::parse and rules::match: the offload rules file (rdmasock.conf(5)), which a
// user or an administrator writes, and the rules tester's ADDRESS:PORT argument.
//
// Input: the file's text.  Every rule parsed must be well formed (a line within the
// file, a prefix within its family's length, LOW <= HIGH ports), every warning must name
// the file and a line, and matching any endpoint must return one of the rules or none.
// The input is also given to parse_endpoint as one string.
#include "fuzz.hh"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string>

#include "config/rules.hh"

using namespace rsfuzz;
namespace rules = rdmasock::rules;

namespace {

struct Seen {
    size_t lines;
    size_t warnings = 0;
};

void on_warning(const char *line, void *ctx)
{
    auto *s = static_cast<Seen *>(ctx);
    ++s->warnings;
    FUZZ_CHECK(strncmp(line, "fuzz.conf:", 10) == 0);
    const long n = strtol(line + 10, nullptr, 10);
    FUZZ_CHECK(n >= 1 && static_cast<size_t>(n) <= s->lines);
}

}  // namespace

FUZZ_TARGET(rules)
{
    Buf b(data, size);
    const char *text = reinterpret_cast<const char *>(b.data());
    Seen seen{static_cast<size_t>(std::count(text, text + size, '\n')) + 1};
    rules::File f = rules::parse("fuzz.conf", text, size, on_warning, &seen);
    FUZZ_CHECK(f.rules.size() + f.settings.size() + seen.warnings <= seen.lines);
    for (const rules::Rule &r : f.rules) {
        FUZZ_CHECK(r.line >= 1 && r.line <= seen.lines);
        FUZZ_CHECK(r.port_lo <= r.port_hi && r.port_hi <= 65535);
        FUZZ_CHECK(r.family == 0 || r.family == AF_INET || r.family == AF_INET6);
        FUZZ_CHECK(r.prefix <= (r.family == AF_INET ? 32u : 128u));
        FUZZ_CHECK(r.sides != 0 && (r.sides & ~3u) == 0);
        FUZZ_CHECK(!r.text.empty() && r.text.find('\n') == std::string::npos);
    }
    for (const rules::Setting &s : f.settings)
        FUZZ_CHECK(s.name.compare(0, 9, "RDMASOCK_") == 0 && s.name.size() > 9);

    sockaddr_in v4{};
    v4.sin_family = AF_INET;
    sockaddr_in6 v6{};
    v6.sin6_family = AF_INET6;
    const size_t take = size < 18 ? size : 18;
    memcpy(&v4.sin_addr, data, take < 4 ? take : 4);
    memcpy(&v6.sin6_addr, data, take < 16 ? take : 16);
    if (size >= 18) {
        memcpy(&v4.sin_port, data + 16, 2);
        memcpy(&v6.sin6_port, data + 16, 2);
    }
    for (const sockaddr *sa : {reinterpret_cast<const sockaddr *>(&v4), reinterpret_cast<const sockaddr *>(&v6)})
        for (rules::Side side : {rules::client, rules::server})
            for (const char *program : {"redis-server", "", "sshd"}) {
                const rules::Rule *r = rules::match(f, program, side, sa);
                FUZZ_CHECK(r == nullptr || (r >= f.rules.data() && r < f.rules.data() + f.rules.size()));
                FUZZ_CHECK(r == nullptr || (r->sides & side));
            }

    std::string s(text, size < 200 ? size : 200);
    if (s.find('\0') == std::string::npos) {
        sockaddr_storage ss{};
        if (rules::parse_endpoint(s.c_str(), &ss))
            FUZZ_CHECK(ss.ss_family == AF_INET || ss.ss_family == AF_INET6);
    }
}
