# RDMA: the RAII owners (part of the core library) and the device tests.
#
# The device tests need an active RDMA device.  Under plain `make check` on a host
# without one they exit 77 and automake reports them as SKIP; `make check-rdma` runs
# them for real inside the soft-RoCE VM (tests/vm/run), where a skip is a failure.

librdmasock_core_la_SOURCES += src/rdma/owners.cc src/rdma/owners.hh

RDMA_DEVICE_TESTS = tests/rdma/owners_test tests/rdma/write_imm_test tests/rdma/memlock_test
check_PROGRAMS += $(RDMA_DEVICE_TESTS)
TESTS += $(RDMA_DEVICE_TESTS)

# No per-target flags, so common.o is built once for all three.
rdma_test_ldadd = librdmasock_core.la $(BOOST_TEST_LIBS) -lpthread

tests_rdma_owners_test_SOURCES = tests/rdma/test_owners.cc tests/rdma/common.cc tests/rdma/common.hh
tests_rdma_owners_test_LDADD = $(rdma_test_ldadd)

tests_rdma_write_imm_test_SOURCES = tests/rdma/test_write_imm.cc tests/rdma/common.cc tests/rdma/common.hh
tests_rdma_write_imm_test_LDADD = $(rdma_test_ldadd)

tests_rdma_memlock_test_SOURCES = tests/rdma/test_memlock.cc tests/rdma/common.cc tests/rdma/common.hh
tests_rdma_memlock_test_LDADD = $(rdma_test_ldadd)

# On the host: build the tests, boot the VM once, run them all inside.
check-rdma: $(RDMA_DEVICE_TESTS)
	$(top_srcdir)/tests/vm/run --timeout 170 -- $(MAKE) -C $(abs_top_builddir) check-rdma-guest

# In the VM (or on any host with a device): run each device test; a failure or a SKIP
# (exit 77: no device) fails the target.  Logs in tests/rdma/<name>.rdma.log.
check-rdma-guest:
	@failed=0; \
	for t in $(RDMA_DEVICE_TESTS); do \
	  start=$$(date +%s%N); \
	  ./$$t --log_level=message --color_output=no > $$t.rdma.log 2>&1; rc=$$?; \
	  ms=$$(( ($$(date +%s%N) - start) / 1000000 )); \
	  case $$rc in \
	    0) echo "PASS: $$t ($$ms ms)";; \
	    77) echo "FAIL: $$t skipped (no RDMA device): a skip is a failure here"; failed=1;; \
	    *) echo "FAIL: $$t (exit $$rc, $$ms ms)"; failed=1;; \
	  esac; \
	  sed 's/^/    /' $$t.rdma.log; \
	done; \
	exit $$failed

.PHONY: check-rdma check-rdma-guest
CLEANFILES += tests/rdma/*.rdma.log
