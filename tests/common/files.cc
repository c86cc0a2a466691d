#include "tests/common/files.hh"

#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <ftw.h>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace testcommon {

TempDir::TempDir(const std::string &prefix, const char *base_var, bool world_readable)
{
    const char *base = getenv(base_var);
    std::string t = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/" + prefix + "XXXXXX";
    std::vector<char> b(t.begin(), t.end());
    b.push_back('\0');
    if (mkdtemp(b.data()) == nullptr)
        return;
    path_ = b.data();
    if (world_readable)
        chmod(path_.c_str(), 0755);
}

TempDir::~TempDir()
{
    if (path_.empty() || keep)
        return;
    nftw(
        path_.c_str(),
        [](const char *p, const struct stat *, int, FTW *) {
            remove(p);
            return 0;  // keep going: remove what can be removed
        },
        16, FTW_DEPTH | FTW_PHYS);
}

std::string read_file(const std::string &path, bool *ok)
{
    std::string s;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ok != nullptr)
        *ok = fd >= 0;
    if (fd < 0)
        return s;
    char b[65536];
    ssize_t k;
    while ((k = read(fd, b, sizeof b)) > 0)
        s.append(b, static_cast<size_t>(k));
    close(fd);
    return s;
}

bool write_file(const std::string &path, const std::string &data, int mode)
{
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return false;
    size_t off = 0;
    while (off < data.size()) {
        ssize_t k = write(fd, data.data() + off, data.size() - off);
        if (k <= 0) {
            close(fd);
            return false;
        }
        off += static_cast<size_t>(k);
    }
    fchmod(fd, static_cast<mode_t>(mode));
    return close(fd) == 0;
}

bool file_exists(const std::string &path)
{
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

std::string find_program(const std::vector<std::string> &names)
{
    const char *path = getenv("PATH");
    std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
    dirs += ":/usr/sbin:/sbin:/usr/local/sbin";
    for (auto &n : names) {
        if (n.find('/') != std::string::npos) {
            if (access(n.c_str(), X_OK) == 0)
                return n;
            continue;
        }
        std::stringstream ss(dirs);
        std::string d;
        while (std::getline(ss, d, ':')) {
            std::string p = (d.empty() ? "." : d) + "/" + n;
            struct stat st;
            if (stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0)
                return p;
        }
    }
    return "";
}

}  // namespace testcommon
