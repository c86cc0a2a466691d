#include "common.hh"

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <thread>

namespace rdmasock::test {

namespace {

bool port_active(ibv_context *ctx, uint8_t *port_out)
{
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) != 0)
        return false;
    for (uint8_t port = 1; port <= attr.phys_port_cnt; ++port) {
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, port, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
            if (port_out != nullptr)
                *port_out = port;
            return true;
        }
    }
    return false;
}

}  // namespace

std::string device_name()
{
    if (const char *d = std::getenv("RDMASOCK_VM_DEV"); d != nullptr && *d != '\0')
        return d;
    int err = 0;
    auto ctx = rdma::Context::open_by_name(nullptr, &err);
    return ctx ? ibv_get_device_name(ctx->get()->device) : "";
}

std::string test_addr()
{
    if (const char *a = std::getenv("RDMASOCK_VM_ADDR"); a != nullptr && *a != '\0')
        return a;
    int err = 0;
    auto ctx = rdma::Context::open_by_name(device_name().c_str(), &err);
    uint8_t port = 0;
    if (!ctx || !port_active(ctx->get(), &port))
        return "";
    ibv_port_attr pa{};
    ibv_query_port(ctx->get(), port, &pa);
    for (int i = 0; i < pa.gid_tbl_len; ++i) {
        ibv_gid_entry e{};
        if (ibv_query_gid_ex(ctx->get(), port, i, &e, 0) != 0)
            continue;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (std::memcmp(e.gid.raw, mapped, sizeof mapped) != 0)
            continue;
        char buf[INET_ADDRSTRLEN];
        if (inet_ntop(AF_INET, e.gid.raw + 12, buf, sizeof buf) != nullptr)
            return buf;
    }
    return "";
}

sockaddr_in make_sockaddr(const std::string &addr, uint16_t port)
{
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(port);
    inet_pton(AF_INET, addr.c_str(), &sin.sin_addr);
    return sin;
}

ResCounts resource_counts(const std::string &dev, std::string *why)
{
    ResCounts counts;
    FILE *p = popen("rdma -j resource show 2>&1", "r");
    if (p == nullptr) {
        if (why != nullptr)
            *why = std::string("popen(rdma): ") + std::strerror(errno);
        return counts;
    }
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
        out.append(buf, n);
    int status = pclose(p);
    // One flat object per device: [{"ifindex":0,"ifname":"rxe0","pd":1,...}]
    std::string key = "\"ifname\":\"" + dev + "\"";
    size_t at = out.find(key);
    if (status != 0 || at == std::string::npos) {
        if (why != nullptr)
            *why = "`rdma -j resource show` (status " + std::to_string(status) +
                   ") lists no " + dev + ": " + out;
        return counts;
    }
    size_t begin = out.rfind('{', at);
    size_t end = out.find('}', at);
    std::string obj = out.substr(begin, end - begin);
    static const std::regex field("\"([a-z_]+)\":([0-9]+)");
    for (std::sregex_iterator it(obj.begin(), obj.end(), field), last; it != last; ++it) {
        std::string name = (*it)[1];
        if (name != "ifindex")
            counts[name] = std::stol((*it)[2]);
    }
    return counts;
}

std::string format_counts(const ResCounts &c)
{
    std::string s;
    for (const auto &[k, v] : c)
        s += (s.empty() ? "" : " ") + k + "=" + std::to_string(v);
    return s;
}

ResCounts wait_for_counts(const std::string &dev, const ResCounts &want, int timeout_ms)
{
    double deadline = now_ms() + timeout_ms;
    for (;;) {
        ResCounts c = resource_counts(dev);
        if (c == want || now_ms() > deadline)
            return c;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

void settle_rdmacm(const std::string &addr)
{
    int err = 0;
    auto id = rdma::CmId::create(nullptr, nullptr, RDMA_PS_TCP, &err);
    if (!id)
        return;
    sockaddr_in sin = make_sockaddr(addr, 0);
    rdma_bind_addr(id->get(), reinterpret_cast<sockaddr *>(&sin));
}

Buffer::Buffer(size_t n) : size(n)
{
    data = static_cast<uint8_t *>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096));
    if (data != nullptr)
        std::memset(data, 0, n);
}

Buffer::~Buffer()
{
    std::free(data);
}

}  // namespace rdmasock::test
