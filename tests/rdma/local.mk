# RDMA: the device tests of the RAII owners (src/rdma, part of the core library).
#
# The device tests need an active RDMA device.  Under plain `make check` on a host
# without one they exit 77 and automake reports them as SKIP; `make check-rdma` runs
# them for real inside the soft-RoCE VM (tests/vm/run), where a skip is a failure.


RDMA_DEVICE_TESTS = tests/rdma/owners_test tests/rdma/write_imm_test tests/rdma/memlock_test
check_PROGRAMS += $(RDMA_DEVICE_TESTS)
TESTS += $(RDMA_DEVICE_TESTS)

# No per-target flags, so common.o is built once for all three.
rdma_test_ldadd = tests/common/libtestcommon.a librdmasock_core.la librdmasock_base.la $(IBVERBS_LIBS) $(RDMACM_LIBS) $(BOOST_TEST_LIBS) -lpthread

tests_rdma_owners_test_SOURCES = tests/rdma/test_owners.cc tests/rdma/common.cc tests/rdma/common.hh
tests_rdma_owners_test_LDADD = $(rdma_test_ldadd)

tests_rdma_write_imm_test_SOURCES = tests/rdma/test_write_imm.cc tests/rdma/common.cc tests/rdma/common.hh
tests_rdma_write_imm_test_LDADD = $(rdma_test_ldadd)

tests_rdma_memlock_test_SOURCES = tests/rdma/test_memlock.cc tests/rdma/common.cc tests/rdma/common.hh
tests_rdma_memlock_test_LDADD = $(rdma_test_ldadd)

# On the host: build the tests, boot the VM once, run them all inside (no make in the
# guest: the tree is mounted at the same path, the binaries are already built).
check-rdma: $(RDMA_DEVICE_TESTS)
	$(top_srcdir)/tests/vm/run --timeout 170 -- $(SHELL) $(abs_top_srcdir)/tests/rdma/run-device-tests \
	  $(RDMA_DEVICE_TESTS:%=$(abs_top_builddir)/%)

# The same where a device is present (e.g. inside the VM, or a host with RDMA): every
# device test must pass; a SKIP (exit 77, no device) fails the target.
check-rdma-guest: $(RDMA_DEVICE_TESTS)
	$(SHELL) $(srcdir)/tests/rdma/run-device-tests $(RDMA_DEVICE_TESTS:%=$(abs_top_builddir)/%)

.PHONY: check-rdma check-rdma-guest
EXTRA_DIST += tests/rdma/run-device-tests tests/rdma/README.md
CLEANFILES += tests/rdma/*.rdma.log
