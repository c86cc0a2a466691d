// Replay mode of the fuzz targets (built with g++ as a `make check` program): every file
// of tests/fuzz/corpus/<target>/ runs through its target, so the seed corpus and every
// crash input kept there are regression tests in every build.
//
//   fuzz_replay                          all targets over $RS_FUZZ_CORPUS (compiled in)
//   fuzz_replay --corpus DIR             the same over DIR/<target>/
//   fuzz_replay TARGET FILE...           the given inputs through one target
//   fuzz_replay --write-seeds DIR        (re)write the generated seeds to DIR/<target>/
//   fuzz_replay --list                   the target names
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "fuzz.hh"
#include "seeds.hh"

#ifndef RS_FUZZ_CORPUS
#define RS_FUZZ_CORPUS "tests/fuzz/corpus"
#endif

namespace fs = std::filesystem;
using namespace rsfuzz;

namespace {

const Target *find_target(const std::string &name)
{
    for (const Target &t : targets())
        if (name == t.name)
            return &t;
    return nullptr;
}

bool run_file(const Target &t, const fs::path &p)
{
    std::ifstream in(p, std::ios::binary);
    if (!in) {
        fprintf(stderr, "fuzz_replay: cannot read %s\n", p.c_str());
        return false;
    }
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string name = std::string(t.name) + ": " + p.string();
    g_input = name.c_str();
    // The target copies what it decodes into exact-size buffers itself.
    t.fn(bytes.data(), bytes.size());
    g_input = nullptr;
    return true;
}

int replay_all(const fs::path &corpus)
{
    if (!check_known_answers())
        return 1;
    int bad = 0;
    std::error_code ec;
    for (const Target &t : targets()) {
        fs::path dir = corpus / t.name;
        std::vector<fs::path> files;
        for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
            if (it->is_regular_file())
                files.push_back(it->path());
        if (ec || files.empty()) {
            fprintf(stderr, "fuzz_replay: %s: no corpus in %s%s%s\n", t.name, dir.c_str(),
                    ec ? ": " : "", ec ? ec.message().c_str() : "");
            ++bad;
            continue;
        }
        std::sort(files.begin(), files.end());
        size_t ok = 0;
        for (const fs::path &f : files)
            ok += run_file(t, f) ? 1 : 0;
        printf("%-10s %zu/%zu corpus inputs ok\n", t.name, ok, files.size());
        if (ok != files.size())
            ++bad;
    }
    // Every corpus directory belongs to a target.
    for (fs::directory_iterator it(corpus, ec), end; !ec && it != end; it.increment(ec))
        if (it->is_directory() && find_target(it->path().filename().string()) == nullptr) {
            fprintf(stderr, "fuzz_replay: %s: no such target\n", it->path().c_str());
            ++bad;
        }
    return bad == 0 ? 0 : 1;
}

int write_seeds(const fs::path &corpus)
{
    for (const Seed &s : seeds()) {
        fs::path dir = corpus / s.target;
        std::error_code ec;
        fs::create_directories(dir, ec);
        std::ofstream out(dir / s.name, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char *>(s.bytes.data()),
                  static_cast<std::streamsize>(s.bytes.size()));
        if (!out) {
            fprintf(stderr, "fuzz_replay: cannot write %s\n", (dir / s.name).c_str());
            return 1;
        }
        printf("%s\n", (dir / s.name).c_str());
    }
    return 0;
}

}  // namespace

int main(int argc, char **argv)
{
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty())
        return replay_all(RS_FUZZ_CORPUS);
    if (args[0] == "--corpus" && args.size() == 2)
        return replay_all(args[1]);
    if (args[0] == "--write-seeds" && args.size() == 2)
        return write_seeds(args[1]);
    if (args[0] == "--list" && args.size() == 1) {
        for (const Target &t : targets())
            printf("%s\n", t.name);
        return 0;
    }
    const Target *t = args[0][0] != '-' ? find_target(args[0]) : nullptr;
    if (t == nullptr || args.size() < 2) {
        fprintf(stderr,
                "usage: fuzz_replay [--corpus DIR | --write-seeds DIR | --list | TARGET FILE...]\n");
        return 2;
    }
    for (size_t i = 1; i < args.size(); ++i)
        if (!run_file(*t, args[i]))
            return 1;
    printf("%s: %zu inputs ok\n", t->name, args.size() - 1);
    return 0;
}
