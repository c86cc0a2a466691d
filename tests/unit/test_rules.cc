// The offload rules (rdmasock.conf(5)): parsing, first match wins, warnings naming the
// file and the line, the rest of the file still applying, and the tester's endpoint.
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <cstdio>
#include <cstdlib>
#include <netinet/in.h>
#include <string>
#include <unistd.h>
#include <vector>

#include "config/rules.hh"

namespace rules = rdmasock::rules;

namespace {

struct Warnings {
    std::vector<std::string> lines;
    static void add(const char *line, void *ctx) { static_cast<Warnings *>(ctx)->lines.push_back(line); }
};

rules::File parse(const std::string &text, Warnings *w = nullptr)
{
    return rules::parse("rules.conf", text.data(), text.size(), w ? Warnings::add : nullptr, w);
}

sockaddr_storage endpoint(const char *s)
{
    sockaddr_storage ss{};
    BOOST_TEST_REQUIRE(rules::parse_endpoint(s, &ss), s);
    return ss;
}

// The line number of the rule deciding the connection (0: none), and its action.
unsigned decide(const rules::File &f, const char *program, rules::Side side, const char *ep, bool *rdma = nullptr)
{
    sockaddr_storage ss = endpoint(ep);
    const rules::Rule *r = rules::match(f, program, side, reinterpret_cast<sockaddr *>(&ss));
    if (rdma != nullptr)
        *rdma = r == nullptr || r->rdma;
    return r ? r->line : 0;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(offload_rules)

BOOST_AUTO_TEST_CASE(first_match_wins)
{
    Warnings w;
    auto f = parse("# keep ssh on TCP\n"
                   "tcp   sshd     server  *            22\n"
                   "rdma  redis-*  *       10.0.0.0/8   6379-6380   # the cache\n"
                   "\n"
                   "tcp   *        client  10.0.0.0/8\n"
                   "tcp   *        *       2001:db8::/32  443\n",
                   &w);
    BOOST_TEST(w.lines.empty());
    BOOST_TEST(f.rules.size() == 4u);
    bool rdma = false;
    BOOST_TEST(decide(f, "sshd", rules::server, "192.0.2.1:22", &rdma) == 2u);
    BOOST_TEST(!rdma);
    BOOST_TEST(decide(f, "sshd", rules::client, "192.0.2.1:22") == 0u);  // role
    BOOST_TEST(decide(f, "redis-server", rules::client, "10.1.2.3:6379", &rdma) == 3u);
    BOOST_TEST(rdma);  // before the broader tcp rule below it
    BOOST_TEST(decide(f, "redis-server", rules::client, "10.1.2.3:6381", &rdma) == 5u);
    BOOST_TEST(!rdma);
    BOOST_TEST(decide(f, "curl", rules::client, "11.0.0.1:80", &rdma) == 0u);
    BOOST_TEST(rdma);  // no rule: RDMA
    BOOST_TEST(decide(f, "nginx", rules::server, "[2001:db8:1::5]:443") == 6u);
    BOOST_TEST(decide(f, "nginx", rules::server, "[2001:db9::5]:443") == 0u);
    BOOST_TEST(f.rules[1].text == "rdma  redis-*  *       10.0.0.0/8   6379-6380");
}

BOOST_AUTO_TEST_CASE(prefixes_and_mapped_addresses)
{
    auto f = parse("tcp * * 192.168.4.0/22\n"
                   "tcp * * ::ffff:172.16.0.0/108\n"
                   "tcp * * 0.0.0.0/0 7\n");
    BOOST_TEST(decide(f, "p", rules::client, "192.168.7.255:1") == 1u);
    BOOST_TEST(decide(f, "p", rules::client, "192.168.8.0:1") == 0u);
    BOOST_TEST(decide(f, "p", rules::client, "[::ffff:192.168.5.1]:1") == 1u);  // IPv4-mapped is IPv4
    BOOST_TEST(decide(f, "p", rules::client, "172.16.255.1:1") == 2u);         // the mapped rule is IPv4
    BOOST_TEST(decide(f, "p", rules::client, "172.31.0.1:1") == 2u);  // /108 = IPv4 /12
    BOOST_TEST(decide(f, "p", rules::client, "172.32.0.1:1") == 0u);
    BOOST_TEST(decide(f, "p", rules::client, "8.8.8.8:7") == 3u);
    BOOST_TEST(decide(f, "p", rules::client, "[::1]:7") == 0u);  // an IPv4 rule is no IPv6 one
}

BOOST_AUTO_TEST_CASE(omitted_fields_are_any)
{
    auto f = parse("tcp\n");
    BOOST_TEST(decide(f, "anything", rules::server, "[::1]:1") == 1u);
    auto g = parse("tcp memcached\n");
    BOOST_TEST(decide(g, "memcached", rules::client, "1.2.3.4:5") == 1u);
    BOOST_TEST(decide(g, "memcache", rules::client, "1.2.3.4:5") == 0u);
}

BOOST_AUTO_TEST_CASE(bad_lines_warn_once_each_and_the_rest_applies)
{
    Warnings w;
    auto f = parse("offload * * * *\n"            // 1: action
                   "tcp * both\n"                 // 2: role
                   "tcp * * 10.0.0.0/33\n"        // 3: prefix
                   "tcp * * 10.0.0.300\n"         // 4: address
                   "tcp * * * 80-79\n"            // 5: range
                   "tcp * * * 70000\n"            // 6: port
                   "tcp * * * 1 extra\n"          // 7: fields
                   "LOG_LEVEL=debug\n"            // 8: setting name
                   "tcp * client * 5000\n"        // 9: good
                   "RDMASOCK_LOG_LEVEL = info\n", // 10: good setting
                   &w);
    BOOST_TEST_REQUIRE(w.lines.size() == 8u);
    for (unsigned i = 0; i < 8; ++i) {
        const std::string want = "rules.conf:" + std::to_string(i + 1) + ": ";
        BOOST_TEST(w.lines[i].compare(0, want.size(), want) == 0, w.lines[i]);
        BOOST_TEST(w.lines[i].find("line ignored") != std::string::npos, w.lines[i]);
    }
    BOOST_TEST_REQUIRE(f.rules.size() == 1u);
    BOOST_TEST(f.rules[0].line == 9u);
    BOOST_TEST(decide(f, "x", rules::client, "1.1.1.1:5000") == 9u);
    BOOST_TEST_REQUIRE(f.settings.size() == 1u);
    BOOST_TEST(f.settings[0].name == "RDMASOCK_LOG_LEVEL");
    BOOST_TEST(f.settings[0].value == "info");
}

BOOST_AUTO_TEST_CASE(endpoints)
{
    sockaddr_storage ss{};
    BOOST_TEST(rules::parse_endpoint("10.0.0.1:80", &ss));
    BOOST_TEST(ss.ss_family == AF_INET);
    BOOST_TEST(ntohs(reinterpret_cast<sockaddr_in *>(&ss)->sin_port) == 80);
    BOOST_TEST(rules::parse_endpoint("[fe80::1]:65535", &ss));
    BOOST_TEST(ss.ss_family == AF_INET6);
    for (const char *bad : {"10.0.0.1", "10.0.0.1:", ":80", "10.0.0.1:65536", "fe80::1:80", "[fe80::1]", "x:1"})
        BOOST_TEST(!rules::parse_endpoint(bad, &ss), bad);
}

BOOST_AUTO_TEST_CASE(load_reads_the_named_file_and_drops_unknown_settings)
{
    char path[] = "/tmp/rdmasock-rules-XXXXXX";
    int fd = mkstemp(path);
    BOOST_TEST_REQUIRE(fd >= 0);
    const std::string text = "tcp * client * 9\nRDMASOCK_NOT_A_TUNABLE=1\nRDMASOCK_PROBE_TIMEOUT_MS=70\n";
    BOOST_TEST_REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    close(fd);
    Warnings w;
    auto f = rules::load(path, Warnings::add, &w);
    unlink(path);
    BOOST_TEST(f.rules.size() == 1u);
    BOOST_TEST_REQUIRE(f.settings.size() == 1u);
    BOOST_TEST(f.settings[0].name == "RDMASOCK_PROBE_TIMEOUT_MS");
    BOOST_TEST_REQUIRE(w.lines.size() == 1u);
    BOOST_TEST(w.lines[0].find(":2: unknown setting RDMASOCK_NOT_A_TUNABLE") != std::string::npos, w.lines[0]);
    // A named file that is missing is a warning; the default one may be missing.
    Warnings w2;
    auto g = rules::load("/nonexistent/rdmasock.conf", Warnings::add, &w2);
    BOOST_TEST(g.rules.empty());
    BOOST_TEST(w2.lines.size() == 1u);
}

BOOST_AUTO_TEST_SUITE_END()
