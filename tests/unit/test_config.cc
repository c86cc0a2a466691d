#include <map>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "config/config.hh"

using namespace rdmasock;

namespace {
struct Env {
    std::map<std::string, std::string> vars;
    std::vector<std::string> warnings;

    Config load()
    {
        return load_config(
            [](const char *name, void *ctx) -> const char * {
                auto *e = static_cast<Env *>(ctx);
                auto it = e->vars.find(name);
                return it == e->vars.end() ? nullptr : it->second.c_str();
            },
            this, [](const char *line, void *ctx) { static_cast<Env *>(ctx)->warnings.push_back(line); },
            this);
    }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(config)

BOOST_AUTO_TEST_CASE(defaults_when_nothing_is_set)
{
    Env e;
    Config c = e.load();
    BOOST_CHECK(c.enable);
    BOOST_CHECK_EQUAL(c.log_level, 1);
    BOOST_CHECK(c.log_file.empty());
    BOOST_CHECK_EQUAL(c.probe_timeout_ms, 50);
    BOOST_CHECK(e.warnings.empty());
}

BOOST_AUTO_TEST_CASE(valid_values_are_taken)
{
    Env e;
    e.vars = {{"RDMASOCK_ENABLE", "off"}, {"RDMASOCK_LOG_LEVEL", "debug"},
              {"RDMASOCK_LOG_FILE", "/tmp/x.log"}, {"RDMASOCK_PROBE_TIMEOUT_MS", "250"}};
    Config c = e.load();
    BOOST_CHECK(!c.enable);
    BOOST_CHECK_EQUAL(c.log_level, 3);
    BOOST_CHECK_EQUAL(c.log_file, "/tmp/x.log");
    BOOST_CHECK_EQUAL(c.probe_timeout_ms, 250);
    BOOST_CHECK(e.warnings.empty());
}

BOOST_AUTO_TEST_CASE(numeric_levels_and_boolean_spellings)
{
    Env e;
    e.vars = {{"RDMASOCK_ENABLE", "1"}, {"RDMASOCK_LOG_LEVEL", "4"}};
    Config c = e.load();
    BOOST_CHECK(c.enable);
    BOOST_CHECK_EQUAL(c.log_level, 4);
}

BOOST_AUTO_TEST_CASE(bad_values_give_one_warning_each_and_the_default)
{
    Env e;
    e.vars = {{"RDMASOCK_ENABLE", "maybe"}, {"RDMASOCK_LOG_LEVEL", "loud"},
              {"RDMASOCK_PROBE_TIMEOUT_MS", "0"}};
    Config c = e.load();
    BOOST_CHECK(c.enable);
    BOOST_CHECK_EQUAL(c.log_level, 1);
    BOOST_CHECK_EQUAL(c.probe_timeout_ms, 50);
    BOOST_REQUIRE_EQUAL(e.warnings.size(), 3u);
    BOOST_CHECK(e.warnings[0].find("RDMASOCK_ENABLE=\"maybe\"") != std::string::npos);
    BOOST_CHECK(e.warnings[1].find("RDMASOCK_LOG_LEVEL") != std::string::npos);
    BOOST_CHECK(e.warnings[2].find("from 1 to 60000") != std::string::npos);
    BOOST_CHECK(e.warnings[2].find("default (50)") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(out_of_range_and_trailing_garbage_are_rejected)
{
    for (const char *v : {"60001", "-3", "12ms", "", "99999999999999999999"}) {
        Env e;
        e.vars = {{"RDMASOCK_PROBE_TIMEOUT_MS", v}};
        Config c = e.load();
        BOOST_CHECK_EQUAL(c.probe_timeout_ms, 50);
        BOOST_CHECK_EQUAL(e.warnings.size(), 1u);
    }
}

BOOST_AUTO_TEST_CASE(every_tunable_is_documented)
{
    unsigned n = 0;
    const TunableInfo *t = tunables(&n);
    BOOST_REQUIRE_GE(n, 4u);
    for (unsigned i = 0; i < n; ++i) {
        BOOST_CHECK(std::string(t[i].env).rfind("RDMASOCK_", 0) == 0);
        BOOST_CHECK(std::string(t[i].doc).size() > 10);
    }
}

BOOST_AUTO_TEST_SUITE_END()
