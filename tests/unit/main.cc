#define BOOST_TEST_MODULE rdmasock unit tests
#include <boost/test/unit_test.hpp>
