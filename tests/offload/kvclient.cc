// kvclient: a memcached client (text protocol) that checks every answer, for the
// offload case programs/memcached (tests/offload/offload_tests.cc).  Plain C++17, runs
// under librdmasock.
//
//   kvclient --addr A --port P [--conns N] [--ops K] [--max-value BYTES]
//
// N connections at once (one thread each, blocking sockets); on each, K rounds of: set
// a key to a value of a size drawn from 1 byte to --max-value (a pattern that names the
// key, the round and the offset), get it back and compare; every 16 rounds a multi-get
// of the last 16 keys; then "delete" of one key and a get that must miss.  Prints
// "ok conns=N sets=S gets=G bytes=B" and exits 0 when every answer was the expected
// one; "error: ..." on stderr and exit 1 otherwise (2: usage or a call failed).
#include <arpa/inet.h>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>
#include <atomic>

namespace {

struct Totals {
    std::atomic<uint64_t> sets{0}, gets{0}, bytes{0};
    std::atomic<int> failures{0};
} g;

std::string value_for(const std::string &key, unsigned round, size_t n)
{
    std::string v(n, '\0');
    uint32_t x = 2166136261u;
    for (char c : key)
        x = (x ^ static_cast<uint8_t>(c)) * 16777619u;
    x ^= round * 2654435761u;
    for (size_t i = 0; i < n; ++i) {
        x = x * 1103515245u + 12345u;
        v[i] = static_cast<char>('!' + (x >> 16) % 90);  // printable, no CR/LF
    }
    return v;
}

class Conn {
public:
    explicit Conn(int fd) : fd_(fd) {}
    bool send_all(const std::string &s)
    {
        size_t off = 0;
        while (off < s.size()) {
            ssize_t w = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return false;
            off += static_cast<size_t>(w);
        }
        return true;
    }
    // One line without its CRLF; false on EOF/error.
    bool line(std::string *out)
    {
        for (;;) {
            size_t p = buf_.find("\r\n");
            if (p != std::string::npos) {
                *out = buf_.substr(0, p);
                buf_.erase(0, p + 2);
                return true;
            }
            if (!fill())
                return false;
        }
    }
    bool bytes(size_t n, std::string *out)
    {
        while (buf_.size() < n)
            if (!fill())
                return false;
        *out = buf_.substr(0, n);
        buf_.erase(0, n);
        return true;
    }

private:
    bool fill()
    {
        char b[65536];
        ssize_t r;
        do
            r = ::recv(fd_, b, sizeof b, 0);
        while (r < 0 && errno == EINTR);
        if (r <= 0)
            return false;
        buf_.append(b, static_cast<size_t>(r));
        return true;
    }
    int fd_;
    std::string buf_;
};

void fail(unsigned c, const std::string &what)
{
    fprintf(stderr, "error: connection %u: %s\n", c, what.c_str());
    g.failures.fetch_add(1);
}

// Reads the VALUE blocks of a get answer up to END: key -> value.
bool read_values(Conn &k, unsigned c, std::vector<std::pair<std::string, std::string>> *got)
{
    std::string l;
    for (;;) {
        if (!k.line(&l)) {
            fail(c, "the connection ended inside an answer");
            return false;
        }
        if (l == "END")
            return true;
        char key[251];
        unsigned flags = 0;
        size_t n = 0;
        if (sscanf(l.c_str(), "VALUE %250s %u %zu", key, &flags, &n) != 3) {
            fail(c, "unexpected line: " + l.substr(0, 80));
            return false;
        }
        std::string v, crlf;
        if (!k.bytes(n, &v) || !k.bytes(2, &crlf) || crlf != "\r\n") {
            fail(c, "a value was cut short");
            return false;
        }
        got->emplace_back(key, std::move(v));
    }
}

void run(const std::string &addr, int port, unsigned c, unsigned ops, size_t max_value)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0) {
        fail(c, std::string("connect: ") + strerror(errno));
        if (fd >= 0)
            close(fd);
        return;
    }
    Conn k(fd);
    uint64_t rng = 0x9E3779B97F4A7C15ull ^ (c * 0x100000001B3ull);
    auto next = [&rng] {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
    };
    std::vector<std::string> keys;
    std::vector<std::string> values;
    for (unsigned r = 0; r < ops && g.failures.load() == 0; ++r) {
        std::string key = "c" + std::to_string(c) + ":k" + std::to_string(r);
        // Mostly small values, some up to max_value.
        size_t n = (next() % 8 == 0) ? 1 + next() % max_value : 1 + next() % 512;
        std::string v = value_for(key, r, n);
        std::string l;
        if (!k.send_all("set " + key + " " + std::to_string(r) + " 0 " + std::to_string(n) + "\r\n" + v + "\r\n") ||
            !k.line(&l) || l != "STORED") {
            fail(c, "set " + key + ": " + l.substr(0, 80));
            break;
        }
        g.sets.fetch_add(1);
        g.bytes.fetch_add(n);
        std::vector<std::pair<std::string, std::string>> got;
        if (!k.send_all("get " + key + "\r\n") || !read_values(k, c, &got))
            break;
        g.gets.fetch_add(1);
        if (got.size() != 1 || got[0].first != key || got[0].second != v) {
            fail(c, "get " + key + " answered " + std::to_string(got.size()) + " values, not the one stored");
            break;
        }
        keys.push_back(key);
        values.push_back(std::move(v));
        if (keys.size() % 16 == 0) {
            std::string cmd = "get";
            for (size_t i = keys.size() - 16; i < keys.size(); ++i)
                cmd += " " + keys[i];
            got.clear();
            if (!k.send_all(cmd + "\r\n") || !read_values(k, c, &got))
                break;
            g.gets.fetch_add(1);
            bool same = got.size() == 16;
            for (size_t i = 0; same && i < 16; ++i)
                same = got[i].first == keys[keys.size() - 16 + i] && got[i].second == values[values.size() - 16 + i];
            if (!same) {
                fail(c, "a multi-get of 16 keys answered something else (" + std::to_string(got.size()) + " values)");
                break;
            }
        }
    }
    if (g.failures.load() == 0 && !keys.empty()) {
        std::string l;
        std::vector<std::pair<std::string, std::string>> got;
        if (!k.send_all("delete " + keys[0] + "\r\n") || !k.line(&l) || l != "DELETED")
            fail(c, "delete: " + l.substr(0, 80));
        else if (!k.send_all("get " + keys[0] + "\r\n") || !read_values(k, c, &got) || !got.empty())
            fail(c, "a deleted key was still there");
    }
    close(fd);
}

}  // namespace

int main(int argc, char **argv)
{
    std::string addr;
    int port = 0;
    unsigned conns = 1, ops = 200;
    size_t max_value = 100000;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string a = argv[i];
        if (a == "--addr")
            addr = argv[i + 1];
        else if (a == "--port")
            port = atoi(argv[i + 1]);
        else if (a == "--conns")
            conns = static_cast<unsigned>(atoi(argv[i + 1]));
        else if (a == "--ops")
            ops = static_cast<unsigned>(atoi(argv[i + 1]));
        else if (a == "--max-value")
            max_value = static_cast<size_t>(atol(argv[i + 1]));
        else
            port = -1;
    }
    if (addr.empty() || port <= 0 || conns == 0 || max_value == 0) {
        fprintf(stderr, "usage: kvclient --addr A --port P [--conns N] [--ops K] [--max-value BYTES]\n");
        return 2;
    }
    std::vector<std::thread> t;
    for (unsigned c = 0; c < conns; ++c)
        t.emplace_back(run, addr, port, c, ops, max_value);
    for (auto &x : t)
        x.join();
    if (g.failures.load() != 0)
        return 1;
    printf("ok conns=%u sets=%llu gets=%llu bytes=%llu\n", conns, static_cast<unsigned long long>(g.sets.load()),
           static_cast<unsigned long long>(g.gets.load()), static_cast<unsigned long long>(g.bytes.load()));
    return 0;
}
