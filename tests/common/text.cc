#include "tests/common/text.hh"

#include <algorithm>

namespace testcommon {

Fields parse_kv(const std::string &line)
{
    Fields f;
    size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && line[i] == ' ')
            ++i;
        size_t j = line.find(' ', i);
        if (j == std::string::npos)
            j = line.size();
        std::string tok = line.substr(i, j - i);
        size_t eq = tok.find('=');
        if (eq != std::string::npos && eq > 0)
            f[tok.substr(0, eq)] = tok.substr(eq + 1);
        i = j;
    }
    return f;
}

std::vector<std::string> split_lines(const std::string &s)
{
    std::vector<std::string> v;
    size_t a = 0;
    while (a < s.size()) {
        size_t b = s.find('\n', a);
        if (b == std::string::npos)
            b = s.size();
        v.push_back(s.substr(a, b - a));
        a = b + 1;
    }
    return v;
}

std::string drop_lines(const std::string &s, const std::string &prefix)
{
    std::string r;
    for (auto &l : split_lines(s))
        if (l.rfind(prefix, 0) != 0)
            r += l + "\n";
    return r;
}

std::string first_difference(const std::string &got, const std::string &want)
{
    if (got == want)
        return "";
    auto g = split_lines(got), w = split_lines(want);
    size_t n = std::max(g.size(), w.size());
    for (size_t i = 0; i < n; ++i) {
        std::string a = i < g.size() ? g[i] : "<missing>";
        std::string b = i < w.size() ? w[i] : "<missing>";
        if (a != b)
            return "line " + std::to_string(i + 1) + ": got [" + a + "] want [" + b + "]";
    }
    return "trailing newline differs";
}

}  // namespace testcommon
