# Hostile-peer tests (tests/offload/hostile_tests.cc): a peer that speaks rdmasock's
# protocol but sends malformed negotiation messages and out-of-range ring messages
# (tests/offload/hostile) against a victim (tests/offload/victim) running the library
# built with ASan and UBSan.  Each case asserts that the victim survives (exit 0, no
# sanitizer report), that a well-behaved connection in the same victim process stays on RDMA
# and byte-exact, and that the bad input is handled as docs/protocol.md says (DECLINE
# with a reason, fallback to TCP with a reason, or ECONNRESET on that connection only).
#
#   make check-hostile        build, boot the soft-RoCE VM, run every case inside
#   make check-hostile-guest  the same where an RDMA device already is (in the VM)
#
# One case: tests/vm/run -- tests/offload/hostile_tests --run_test=ring/data_overflow
# The last line is "N passed, N failed"; a skip (no device) is a failure.  Output also in
# tests/offload/hostile_tests.offload.log.  TEST_OFFLOAD_KEEP=1 TEST_OFFLOAD_TMP=DIR keep
# each case's victim logs (debug level), stdout and stderr.
#
# The victims run the library built under ASan and UBSan, tests/sanitize/asan (see
# tests/sanitize/local.mk).
# Paths are relative to the top directory (included from Makefile.am).

check_PROGRAMS += tests/offload/hostile tests/offload/victim tests/offload/hostile_tests

# The misbehaving peer: plain rdma_cm/verbs/sockets, messages from the library's encoders.
tests_offload_hostile_SOURCES = tests/offload/hostile.cc tests/offload/hostile_common.hh \
	src/wire/negotiate.cc src/wire/negotiate.hh
tests_offload_hostile_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)
tests_offload_hostile_LDADD = $(RDMACM_LIBS) $(IBVERBS_LIBS)

# The victim: an echo server or a client, run under the ASan library.
tests_offload_victim_SOURCES = tests/offload/victim.cc tests/offload/hostile_common.hh
tests_offload_victim_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)
tests_offload_victim_LDADD = -lpthread

HOSTILE_ASAN_LIB = $(SAN_ASAN_LIB)

tests_offload_hostile_tests_SOURCES = tests/offload/hostile_tests.cc tests/offload/driver.hh
tests_offload_hostile_tests_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) -DBOOST_TEST_DYN_LINK \
	-DHOSTILE_ASAN_LIB='"$(abs_top_builddir)/$(HOSTILE_ASAN_LIB)"' \
	-DHOSTILE_BIN='"$(abs_top_builddir)/tests/offload/hostile$(EXEEXT)"' \
	-DHOSTILE_VICTIM='"$(abs_top_builddir)/tests/offload/victim$(EXEEXT)"'
tests_offload_hostile_tests_LDADD = tests/common/libtestcommon.a $(BOOST_TEST_LIBS) -lpthread
EXTRA_tests_offload_hostile_tests_DEPENDENCIES = tests/offload/hostile$(EXEEXT) \
	tests/offload/victim$(EXEEXT)

check-hostile: tests/offload/hostile_tests$(EXEEXT) $(HOSTILE_ASAN_LIB)
	$(top_srcdir)/tests/vm/run --timeout 400 -- $(SHELL) \
	  $(abs_top_srcdir)/tests/offload/run-offload-tests $(abs_top_builddir)/tests/offload/hostile_tests

check-hostile-guest: tests/offload/hostile_tests$(EXEEXT) $(HOSTILE_ASAN_LIB)
	$(SHELL) $(srcdir)/tests/offload/run-offload-tests $(abs_top_builddir)/tests/offload/hostile_tests

.PHONY: check-hostile check-hostile-guest
CLEANFILES += tests/offload/hostile_tests.offload.log
