# Offload tests (issue "Offload", point 4): connections really offloaded onto RDMA verbs,
# byte-exact, with every fallback reason, socket semantics on offloaded sockets, and
# real programs (iperf3, sockperf).  They need an RDMA device: under plain `make check`
# on a host without one offload_tests exits 77 (SKIP); `make check-offload` runs them in
# the soft-RoCE VM (tests/vm/run --nordma-ns), where a skip or any failure fails.
# Paths are relative to the top directory (included from Makefile.am).

check_PROGRAMS += tests/offload/peer tests/offload/kvclient tests/offload/churn tests/offload/idle tests/offload/soak tests/offload/offload_tests
TESTS += tests/offload/offload_tests

# The program under test: plain C++, no Boost; it runs with and without the library.
tests_offload_peer_SOURCES = tests/offload/peer.cc
tests_offload_peer_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)
tests_offload_peer_LDADD = tests/common/libtestcommon.a -lpthread
# A memcached client that checks every answer (programs/memcached).
tests_offload_kvclient_SOURCES = tests/offload/kvclient.cc
tests_offload_kvclient_LDADD = -lpthread
# One process, both ends of short connections at a descriptor limit (scale/short_connections).
tests_offload_churn_SOURCES = tests/offload/churn.cc
tests_offload_churn_LDADD = tests/common/libtestcommon.a
# An event-loop server and its client, idle with many connections (scale/idle_cpu).
tests_offload_idle_SOURCES = tests/offload/idle.cc
tests_offload_idle_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)
tests_offload_idle_LDADD = tests/common/libtestcommon.a
# A long-lived server under random clients (soak/bounded).
tests_offload_soak_SOURCES = tests/offload/soak.cc
tests_offload_soak_LDADD = tests/common/libtestcommon.a -lpthread

tests_offload_offload_tests_SOURCES = tests/offload/offload_tests.cc tests/offload/driver.hh
tests_offload_offload_tests_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) -DBOOST_TEST_DYN_LINK \
	-DRDMASOCK_BUILD_LIB='"$(abs_top_builddir)/.libs/librdmasock.so"' \
	-DOFFLOAD_PEER='"$(abs_top_builddir)/tests/offload/peer$(EXEEXT)"' \
	-DOFFLOAD_KVCLIENT='"$(abs_top_builddir)/tests/offload/kvclient$(EXEEXT)"' \
	-DOFFLOAD_CHURN='"$(abs_top_builddir)/tests/offload/churn$(EXEEXT)"' \
	-DOFFLOAD_IDLE='"$(abs_top_builddir)/tests/offload/idle$(EXEEXT)"' \
	-DOFFLOAD_SOAK='"$(abs_top_builddir)/tests/offload/soak$(EXEEXT)"' \
	-DOFFLOAD_TOOL='"$(abs_top_builddir)/tools/rdmasock$(EXEEXT)"' \
	-DOFFLOAD_IPERF_SCRIPT='"$(abs_top_srcdir)/tools/rdmasock-iperf"' \
	-DOFFLOAD_EMPTY_PRELOAD='"$(abs_top_builddir)/tests/offload/empty_preload.so"'
tests_offload_offload_tests_LDADD = tests/common/libtestcommon.a $(BOOST_TEST_LIBS) -lpthread
# The tests run the preload library and the peer.
EXTRA_tests_offload_offload_tests_DEPENDENCIES = librdmasock.la librdmasock_engine.la tests/offload/peer$(EXEEXT) tests/offload/kvclient$(EXEEXT) \
	tests/offload/churn$(EXEEXT) tests/offload/idle$(EXEEXT) tests/offload/soak$(EXEEXT) tests/offload/empty_preload.so

# An empty library to preload: the floor of system/start_cost.
tests/offload/empty_preload.so: $(srcdir)/tests/offload/empty_preload.cc
	$(AM_V_GEN)$(MKDIR_P) tests/offload && $(CXX) $(AM_CXXFLAGS) $(CXXFLAGS) -fPIC -shared \
	  -Wl,--as-needed -o $@ $(srcdir)/tests/offload/empty_preload.cc
EXTRA_DIST += tests/offload/empty_preload.cc
CLEANFILES += tests/offload/empty_preload.so

# On the host: build, boot the VM once (with the nordma namespace), run every case
# inside.  Fails on any failure or skip; the last line is "N passed, N failed".  Then
# the midstream cases, each in a VM of its own (a link flap leaves soft-RoCE without
# rdma_cm connections for the rest of the VM's life).
MIDSTREAM_CASES = link_down_3s link_down_15s link_down_3s_default device_removal
check-offload: tests/offload/offload_tests$(EXEEXT) tests/offload/peer$(EXEEXT) librdmasock.la librdmasock_engine.la
	$(top_srcdir)/tests/vm/run --nordma-ns --timeout 1200 -- $(SHELL) \
	  $(abs_top_srcdir)/tests/offload/run-offload-tests $(abs_top_builddir)/tests/offload/offload_tests
	for c in $(MIDSTREAM_CASES); do \
	  $(top_srcdir)/tests/vm/run --nordma-ns --timeout 300 -- env TEST_OFFLOAD_MIDSTREAM=1 \
	    OFFLOAD_LOG=$(abs_top_builddir)/tests/offload/offload_tests.midstream.log $(SHELL) \
	    $(abs_top_srcdir)/tests/offload/run-offload-tests $(abs_top_builddir)/tests/offload/offload_tests \
	    --run_test=midstream/$$c || exit 1; \
	done

# The same where a device and the nordma namespace already are (inside the VM).
check-offload-guest: tests/offload/offload_tests$(EXEEXT) tests/offload/peer$(EXEEXT) librdmasock.la librdmasock_engine.la
	$(SHELL) $(srcdir)/tests/offload/run-offload-tests $(abs_top_builddir)/tests/offload/offload_tests

# Two VMs joined by a network link (tests/vm/run --two-vms): the servers run on VM 2,
# so the bytes cross a link and writes are really in flight (coalescing, connection cost
# over a network).  The temporary directory is in the tree, which both VMs share.
check-offload-2vm: tests/offload/offload_tests$(EXEEXT) tests/offload/peer$(EXEEXT) librdmasock.la librdmasock_engine.la
	rm -rf tests/offload/tmp2vm && mkdir -p tests/offload/tmp2vm
	$(top_srcdir)/tests/vm/run --two-vms --timeout 600 -- env \
	  TEST_OFFLOAD_TMP=$(abs_top_builddir)/tests/offload/tmp2vm \
	  OFFLOAD_LOG=$(abs_top_builddir)/tests/offload/offload_tests.2vm.log $(SHELL) \
	  $(abs_top_srcdir)/tests/offload/run-offload-tests $(abs_top_builddir)/tests/offload/offload_tests --run_test=twovm
	rm -rf tests/offload/tmp2vm

.PHONY: check-offload check-offload-guest check-offload-2vm
EXTRA_DIST += tests/offload/run-offload-tests tests/offload/README.md
CLEANFILES += tests/offload/*.offload.log tests/offload/*.2vm.log

# The soak (soak/bounded, 60 s in check-offload) for longer: TEST_SOAK_SECS, default 600.
check-soak: tests/offload/offload_tests$(EXEEXT) tests/offload/soak$(EXEEXT) librdmasock.la librdmasock_engine.la
	$(top_srcdir)/tests/vm/run --nordma-ns --timeout 1500 -- env TEST_SOAK_SECS=$${TEST_SOAK_SECS:-600} $(SHELL) \
	  $(abs_top_srcdir)/tests/offload/run-offload-tests $(abs_top_builddir)/tests/offload/offload_tests --run_test=soak
.PHONY: check-soak
