#include "tests/common/closelog.hh"

#include <map>
#include <regex>
#include <sstream>

namespace testcommon {

namespace {

// An event=exit line: its totals equal what the close lines of its process (so far in
// the log) add up to.
void check_exit(CloseLog &lc, const std::string &pid, const std::string &msg, const std::string &line)
{
    std::map<std::string, unsigned long long> want;
    for (const char *k : {"closed_rdma", "closed_tcp", "closed_bytes_sent", "closed_bytes_received"})
        want[k] = 0;
    for (const Fields &f : lc.closes) {
        if (f.at("pid") != pid)
            continue;
        const bool rdma = f.at("transport") == "rdma";
        ++want[rdma ? "closed_rdma" : "closed_tcp"];
        if (!rdma)
            ++want["closed_reason_" + f.at("reason")];
        want["closed_bytes_sent"] += std::stoull("0" + f.at("bytes_sent"));
        want["closed_bytes_received"] += std::stoull("0" + f.at("bytes_received"));
    }
    std::map<std::string, unsigned long long> got;
    std::istringstream is(msg);
    std::string tok;
    while (is >> tok) {
        const size_t eq = tok.find('=');
        if (tok.rfind("closed_", 0) != 0 || eq == std::string::npos)
            continue;
        try {
            got[tok.substr(0, eq)] = std::stoull(tok.substr(eq + 1));
        } catch (const std::exception &) {
            lc.problems.push_back("exit line with a non-numeric total: " + line);
            return;
        }
    }
    ++lc.exits;
    if (got != want) {
        std::string w;
        for (auto &kv : want)
            w += " " + kv.first + "=" + std::to_string(kv.second);
        lc.problems.push_back("exit line totals differ from the process's close lines (those add up to" + w +
                              "): " + line);
    }
}

}  // namespace

CloseLog check_close_log(const std::string &text, bool warnings_allowed)
{
    static const std::regex line_re(R"(^rdmasock\[(\d+)\]: (error|warn|info|debug|trace): (.*)$)");
    static const std::regex addr_re(R"(^(\d+\.\d+\.\d+\.\d+|\[[0-9a-fA-F:.]+\]):\d+$)");
    static const std::regex num_re(R"(^\d+$)");
    CloseLog lc;
    for (auto &line : split_lines(text)) {
        std::smatch m;
        if (!std::regex_match(line, m, line_re)) {
            lc.problems.push_back("malformed log line: " + line);
            continue;
        }
        std::string level = m[2], msg = m[3];
        if (level == "error" || (level == "warn" && !warnings_allowed)) {
            lc.problems.push_back("unexpected " + level + " line: " + line);
            continue;
        }
        if (msg.rfind("event=exit ", 0) == 0) {
            check_exit(lc, m[1], msg, line);
            continue;
        }
        if (msg.rfind("event=close ", 0) != 0)
            continue;
        Fields f;
        f["pid"] = m[1];
        f["level"] = level;
        std::vector<std::string> keys;
        std::istringstream is(msg);
        std::string tok;
        bool bad = false;
        while (is >> tok) {
            size_t eq = tok.find('=');
            if (eq == std::string::npos || eq == 0) {
                bad = true;
                break;
            }
            keys.push_back(tok.substr(0, eq));
            f[tok.substr(0, eq)] = tok.substr(eq + 1);
        }
        std::vector<std::string> want = {"event", "fd", "role", "local", "peer", "transport"};
        auto t = f.find("transport");
        if (t == f.end() || t->second != "rdma")
            want.push_back("reason");
        want.push_back("bytes_sent");
        want.push_back("bytes_received");
        if (bad || keys != want)
            lc.problems.push_back("close line keys not as documented: " + line);
        else if (level != "info")
            lc.problems.push_back("close line not at level info: " + line);
        else if (!std::regex_match(f["fd"], num_re) || !std::regex_match(f["bytes_sent"], num_re) ||
                 !std::regex_match(f["bytes_received"], num_re))
            lc.problems.push_back("close line with a non-numeric value: " + line);
        else if (f["role"] != "client" && f["role"] != "server")
            lc.problems.push_back("close line with role " + f["role"] + ": " + line);
        else if (!std::regex_match(f["local"], addr_re) || !std::regex_match(f["peer"], addr_re))
            lc.problems.push_back("close line with a malformed address: " + line);
        else if (f["transport"] != "tcp" && f["transport"] != "rdma")
            lc.problems.push_back("close line with transport " + f["transport"] + ": " + line);
        else if (f["transport"] == "tcp" && f["reason"].empty())
            lc.problems.push_back("tcp close line without a reason: " + line);
        lc.closes.push_back(f);
    }
    return lc;
}

}  // namespace testcommon
