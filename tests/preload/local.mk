# Black-box tests (issue "Foundation", point 7): every program behaves exactly as it does
# without the library.  sockprobe runs socket scenarios and prints deterministic
# transcripts; parity_tests runs each scenario without and with librdmasock.so preloaded
# and compares; program_tests does the same with real programs (iperf3, redis, nginx,
# python, busybox, a setuid program).  Paths are relative to the top directory.

check_PROGRAMS += tests/preload/sockprobe tests/preload/parity_tests tests/preload/program_tests

# The scenario program: plain C++, no Boost; it is what runs under the preload library.
tests_preload_sockprobe_SOURCES = tests/preload/sockprobe.cc
tests_preload_sockprobe_LDADD = tests/common/libtestcommon.a -lpthread

preload_test_cppflags = $(AM_CPPFLAGS) -DBOOST_TEST_DYN_LINK \
	-DRDMASOCK_BUILD_LIB='"$(abs_top_builddir)/.libs/librdmasock.so"' \
	-DSOCKPROBE='"$(abs_top_builddir)/tests/preload/sockprobe$(EXEEXT)"' \
	-DRDMASOCK_LAUNCHER='"$(abs_top_builddir)/tools/rdmasock$(EXEEXT)"' \
	-DRDMASOCK_MAN_DIR='"$(abs_top_builddir)/man"' \
	-DRDMASOCK_COMPLETION='"$(abs_top_srcdir)/tools/etc/rdmasock"' \
	-DRDMASOCK_REASON_DEF='"$(abs_top_srcdir)/src/base/reason.def"'

tests_preload_parity_tests_SOURCES = tests/preload/parity_tests.cc
tests_preload_parity_tests_CPPFLAGS = $(preload_test_cppflags)
tests_preload_parity_tests_LDADD = tests/common/libtestcommon.a $(BOOST_TEST_LIBS) -lpthread

tests_preload_program_tests_SOURCES = tests/preload/program_tests.cc
tests_preload_program_tests_CPPFLAGS = $(preload_test_cppflags) \
	-DPROGRAM_EMPTY_PRELOAD='"$(abs_top_builddir)/tests/offload/empty_preload.so"'
EXTRA_tests_preload_program_tests_DEPENDENCIES = tests/offload/empty_preload.so
tests_preload_program_tests_LDADD = tests/common/libtestcommon.a $(BOOST_TEST_LIBS) -lpthread

TESTS += tests/preload/parity_tests tests/preload/program_tests

# RDMA mode (tests/preload/README.md): the parity suite with both ends of every TCP
# connection offloaded, inside the soft-RoCE VM.  Besides parity with the kernel, each
# case asserts from the close-time log lines which connections were on RDMA and why the
# others were not.  A skip (no device) fails; the last line is "N passed, N failed".
check-parity-rdma: tests/preload/parity_tests$(EXEEXT) tests/preload/sockprobe$(EXEEXT) librdmasock.la librdmasock_engine.la
	$(top_srcdir)/tests/vm/run --timeout 400 -- $(SHELL) \
	  $(abs_top_srcdir)/tests/preload/run-parity-rdma $(abs_top_builddir)/tests/preload/parity_tests

# The same in busy-poll mode: blocking calls spin on the completion queue before they
# sleep (RDMASOCK_BUSY_POLL_US), and must still honour timeouts, signals and EOF.  (Here
# and with small rings, not the storm of 2000 forks: parity_tests.cc says why.)
check-parity-rdma-busy: tests/preload/parity_tests$(EXEEXT) tests/preload/sockprobe$(EXEEXT) librdmasock.la librdmasock_engine.la
	$(top_srcdir)/tests/vm/run --timeout 400 -- env TEST_PARITY_BUSY_POLL_US=100 $(SHELL) \
	  $(abs_top_srcdir)/tests/preload/run-parity-rdma $(abs_top_builddir)/tests/preload/parity_tests \
	  --run_test='!fork_exec_storm_thousands'

# The same with 8 KiB rings: streams wrap the rings and fill them (flow control,
# partial writes, EAGAIN and wake-ups on credit) in every scenario.
check-parity-rdma-small: tests/preload/parity_tests$(EXEEXT) tests/preload/sockprobe$(EXEEXT) librdmasock.la librdmasock_engine.la
	$(top_srcdir)/tests/vm/run --timeout 400 -- env TEST_PARITY_RING_KB=8 $(SHELL) \
	  $(abs_top_srcdir)/tests/preload/run-parity-rdma $(abs_top_builddir)/tests/preload/parity_tests \
	  --run_test='!fork_exec_storm_thousands'

# The same in the library's default mode (RDMASOCK_CONNECT_WAIT unset: connect() returns
# at once and connections switch in the background, what users get): most scenarios end
# before their connections switch, so this run holds the calls made before and around
# the switch to the kernel's transcripts; which transport a close line shows is timing.
# (It found two defects of the default mode: close() while another thread reads, and
# descriptors the library's threads opened that held the lowest free number for a
# moment: docs/protocol.md, Descriptor numbers.)
check-parity-rdma-async: tests/preload/parity_tests$(EXEEXT) tests/preload/sockprobe$(EXEEXT) librdmasock.la librdmasock_engine.la
	$(top_srcdir)/tests/vm/run --timeout 400 -- env TEST_PARITY_CONNECT_WAIT=0 $(SHELL) \
	  $(abs_top_srcdir)/tests/preload/run-parity-rdma $(abs_top_builddir)/tests/preload/parity_tests

# The same where a device already is (inside the VM, or a host with RDMA).
check-parity-rdma-guest: tests/preload/parity_tests$(EXEEXT) tests/preload/sockprobe$(EXEEXT) librdmasock.la librdmasock_engine.la
	$(SHELL) $(srcdir)/tests/preload/run-parity-rdma $(abs_top_builddir)/tests/preload/parity_tests

.PHONY: check-parity-rdma check-parity-rdma-busy check-parity-rdma-small check-parity-rdma-async \
	check-parity-rdma-guest
EXTRA_DIST += tests/preload/run-parity-rdma tests/preload/README.md
CLEANFILES += tests/preload/*.parity-rdma.log
